"""benchmarks/following_in_training.py: the block means of a step table (the schedule part runs on a study's built
groups, which a unit test does not build)."""

import importlib.util

import pandas as pd
import pytest

from tests.conftest import ROOT

# by path: pysbd installs a top-level package named `benchmarks` that shadows the folder
_SPEC = importlib.util.spec_from_file_location("following_in_training", ROOT / "benchmarks" / "following_in_training.py")
following_in_training = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(following_in_training)


def test_blocks_average_each_share_and_the_excess_over_the_base_prediction():
    steps = pd.DataFrame({"step": range(1, 6), "followed": [0.2, 0.4, 0.5, 0.7, 0.9], "base_predicts": [0.3] * 5})
    steps["excess"] = steps["followed"] - steps["base_predicts"]
    blocks = following_in_training.block_table(steps, 2)
    assert list(blocks.index) == ["steps 1-2", "steps 3-4", "steps 5-5"]
    assert blocks["followed"].tolist() == pytest.approx([0.3, 0.6, 0.9])
    assert blocks["excess"].tolist() == pytest.approx([0.0, 0.3, 0.6])
