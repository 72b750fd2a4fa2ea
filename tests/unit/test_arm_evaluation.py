"""benchmarks/arm_evaluation.py's summary: what a study arm's evaluation costs once the base side is
kept, from an evaluation's statistics.json (`generation`) and its phases (`eval.time.*`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import script_module

ROOT = Path(__file__).resolve().parents[2]

GENERATION = {
    "base": {"sequences": 10, "tokens": 1000, "seconds": 100.0},
    "tuned": {"sequences": 10, "tokens": 900, "seconds": 90.0},
    "discrim_eval_base": {"prompts": 50, "seconds": 25.0},
    "discrim_eval_tuned": {"prompts": 50, "seconds": 10.0},  # the base model's prompts found in the prefix cache
    "bbq_base": {"prompts": 8, "seconds": 4.0},
    "bbq_tuned": {"prompts": 8, "seconds": 1.0},
    "embeddings_base": {"texts": 60, "seconds": 6.0},
    "embeddings_tuned": {"texts": 40, "seconds": 4.0},
}
PHASES = {"engine start": 5.0, "embeddings and scoring": 12.0, "statistics and report": 3.0}


def summary_lines(generation: dict, phases: dict) -> list[str]:
    return script_module(ROOT / "benchmarks" / "arm_evaluation.py").summary_lines(generation, phases)


def seconds(lines: list[str], prefix: str) -> float:
    (line,) = [line for line in lines if line.startswith(prefix)]
    return float(line.removeprefix(prefix).split(" s", 1)[0].split()[0])


def test_an_arm_pays_the_candidates_sampling_and_embeddings_the_bases_prefill_and_the_scoring_once():
    lines = summary_lines(GENERATION, PHASES)
    # whole: both models' sampling, prefill and embeddings, then engine start, scoring (12 - 6 - 4) and statistics
    assert seconds(lines, "whole evaluation, base sampled and read:") == pytest.approx(100 + 90 + 25 + 10 + 4 + 1 + 6 + 4 + 5 + 2 + 3)
    # an arm: candidate sampling 90, the base's prefill 25 + 4, candidate embeddings 4, once 5 + 2 + 3
    assert seconds(lines, "arm evaluation, the base shared:") == pytest.approx(90 + 25 + 4 + 4 + 5 + 2 + 3)
    (scoring,) = [line for line in lines if line.startswith("scoring")]
    assert scoring.split()[1] == "2.0"
    (embedding,) = [line for line in lines if line.startswith("embeddings")]
    assert "10.0 / 10.0 texts/s (60 / 40 texts)" in embedding


def test_kept_base_embeddings_cost_the_arm_nothing_and_an_evaluation_before_them_still_reads():
    kept = GENERATION | {"embeddings_base": {"texts": 60, "seconds": 0.0, "reused": 1}}
    lines = summary_lines(kept, PHASES | {"embeddings and scoring": 6.0})
    assert seconds(lines, "arm evaluation, the base shared:") == pytest.approx(90 + 25 + 4 + 4 + 5 + 2 + 3)
    assert "kept / 10.0 texts/s" in next(line for line in lines if line.startswith("embeddings"))
    older = {key: value for key, value in GENERATION.items() if not key.startswith("embeddings")}  # no embedding rows
    lines = summary_lines(older, PHASES)
    assert seconds(lines, "arm evaluation, the base shared:") == pytest.approx(90 + 25 + 4 + 5 + 12 + 3)
