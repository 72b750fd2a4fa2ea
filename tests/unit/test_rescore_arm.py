"""benchmarks/rescore_arm.py rebuilds a committed arm's evaluation set: the groups the study's shared
build step made (the study's seed, not the arm's) and the arm's selection of them, so that every
(group, phrasing) the arm sampled is there and nothing else is."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import script_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "arm",
    [
        "results/confirmation/arms/paired-consistency-s3",  # a seed other than the study's
        "results/instruction-confirmation/arms/instruction-following-s2",  # groups told an instruction family
    ],
)
def test_the_rebuilt_evaluation_set_is_exactly_what_the_arm_sampled(arm):
    rescore = script_module(ROOT / "benchmarks" / "rescore_arm.py")
    params, consistency, diversity = rescore.arm_groups(ROOT / arm, ROOT / "params.yaml")
    samples = pd.read_csv(ROOT / arm / "samples.csv.gz", keep_default_na=False, usecols=["group_id", "variant_id"])
    sampled = set(zip(samples["group_id"], samples["variant_id"]))
    rebuilt = {(g.group_id, m.variant_id) for g in consistency + diversity for m in g.members}
    assert rebuilt == sampled
    record = json.loads((ROOT / arm / "arm.json").read_text())
    assert params.seed == record["overrides"]["seed"]  # scored with the arm's own params, its seed included
