"""threshold_clusters: greedy leader clustering of unit vectors at a cosine threshold, by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from components.embeddings import threshold_clusters


def at(degrees: float) -> list[float]:
    """The unit vector of the plane at `degrees` from the x axis (cosine between two: cos of the angle)."""
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


def vectors(*rows) -> np.ndarray:
    return np.array(rows, dtype=np.float64)


def test_cosine_exactly_at_the_threshold_joins():
    # (1, 0) · (0.6, 0.8) = 0.6 exactly (in float64 as well)
    pair = vectors([1.0, 0.0], [0.6, 0.8])
    assert float(pair[0] @ pair[1]) == 0.6
    assert threshold_clusters(pair, 0.6) == [0, 0]
    assert threshold_clusters(pair, math.nextafter(0.6, 1.0)) == [0, 1]  # just above: apart
    assert threshold_clusters(pair, 0.5) == [0, 0]


def test_threshold_one_groups_identical_vectors_only():
    rows = vectors([1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.6, 0.8], [0.0, 1.0])
    assert threshold_clusters(rows, 1.0) == [0, 1, 0, 2, 1]


def test_a_sample_joins_the_first_matching_leader_not_the_most_similar():
    # threshold cos 55° ≈ 0.574; a = 0°, b = 30°, c = 80°: cos(a, b) = cos 30°, cos(b, c) = cos 50°,
    # cos(a, c) = cos 80°
    a, b, c = at(0), at(30), at(80)
    threshold = math.cos(math.radians(55))
    # c leads cluster 0, a (too far from c) leads cluster 1; b matches both, joins the first: c's
    assert threshold_clusters(vectors(c, a, b), threshold) == [0, 1, 0]


def test_only_leaders_attract_so_the_order_of_samples_matters():
    a, b, c = at(0), at(30), at(80)
    threshold = math.cos(math.radians(55))
    # a leads; b joins a; c is near b (50°) but b is no leader and a is 80° away: a new cluster
    assert threshold_clusters(vectors(a, b, c), threshold) == [0, 0, 1]
    # b leads and is within 55° of both: one cluster
    assert threshold_clusters(vectors(b, a, c), threshold) == [0, 0, 0]


def test_clusters_are_numbered_in_order_of_first_appearance():
    x, y, z = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]
    labels = threshold_clusters(vectors(z, x, z, y, x, y), 0.9)
    assert labels == [0, 1, 0, 2, 1, 2]
    assert all(type(label) is int for label in labels)


def test_float32_embeddings_like_the_model_gives():
    rows = np.array([at(0), at(10), at(90)], dtype=np.float32)
    assert threshold_clusters(rows, 0.95) == [0, 0, 1]  # cos 10° ≈ 0.985


@pytest.mark.parametrize("threshold", [0.0, -0.5, 1.0 + 1e-9, 2.0, math.nan])
def test_a_threshold_outside_zero_one_is_refused(threshold):
    with pytest.raises(ValueError, match=r"cosine threshold must be in \(0, 1\]"):
        threshold_clusters(vectors([1.0, 0.0]), threshold)


def test_no_vectors_no_clusters():
    assert threshold_clusters(np.zeros((0, 384), dtype=np.float32), 0.85) == []
    assert threshold_clusters(vectors([1.0, 0.0]), 0.85) == [0]
