"""benchmarks/train_throughput.py: its tables from per-row figures (no model runs): the loop and
whole-run ratios against TRL, and the groupwise rows' time per phase; and its groupwise rows train
what its TRL row trains on the shipped params.yaml (one reward, free-text prompts alone)."""

import argparse

import pytest

from components.config import TrainConfig
from components.grpo.trainer import group_schedule
from tests.conftest import ROOT, script_module

bench = script_module(ROOT / "benchmarks" / "train_throughput.py")

PHASES = {"rollouts": 30.0, "reward": 1.0, "reference": 20.0, "forward/backward": 40.0, "optimizer": 2.0, "weight sync": 1.0}
FIGURES = {
    "groupwise-vllm": {"samples": 96, "seconds": 120.0, "loop_seconds": 100.0, "generation_seconds": 30.0,
                       "sync_seconds": 1.0, "tokens": 9600, "mismatch": 0.01, "phases": PHASES},
    "trl": {"samples": 96, "seconds": 440.0, "loop_seconds": 400.0},
    "trl-vllm": {"error": "ImportError: no vllm"},
}  # fmt: skip


def test_the_throughput_table_gives_the_ratio_over_the_loop_and_over_the_whole_run():
    rows = {line.split(" | ")[0].strip("| "): line for line in bench.throughput_table(FIGURES)[2:]}
    cells = [c.strip() for c in rows["groupwise-vllm"].strip("|").split("|")]
    assert cells[1:6] == ["0.960", "4.00×", "3.67×", "100.0", "20.0"]  # 0.96 vs 0.24 samples/s; whole: 0.8 vs 0.218
    assert rows["trl"].split("|")[3].strip() == "1.00×"
    assert "does not run: ImportError: no vllm" in rows["trl-vllm"]


def test_the_phase_table_accounts_for_the_whole_loop():
    header, _, row = bench.phase_table(FIGURES)
    assert header == "| row | rollouts | reward | reference | forward/backward | optimizer | weight sync | other |"
    assert row == (
        "| groupwise-vllm | 30.0 s (30 %) | 1.0 s (1 %) | 20.0 s (20 %) | 40.0 s (40 %) | 2.0 s (2 %) | 1.0 s (1 %) | 6.0 s (6 %) |"
    )
    assert bench.phase_table({"trl": FIGURES["trl"]}) == []  # TRL does not time its phases


@pytest.mark.parametrize("row", ["groupwise", "groupwise-vllm", "groupwise-vllm-bf16"])
def test_a_groupwise_row_trains_the_trl_rows_objective_on_the_shipped_defaults(row):
    """The defaults train decision groups with a pairing term and a compliance reward; TRL's row cannot,
    so the groupwise rows leave them out and schedule exactly the benchmark's free-text prompts in order."""
    args = argparse.Namespace(only=row, task="consistency", steps=2, prompts_per_step=4, k=6, max_new_tokens=64,
                              beta=0.04, loss_type="grpo")  # fmt: skip
    params = bench.benchmark_params(args)
    TrainConfig.model_validate(params.train.model_dump())  # the copy is a valid config, not a half-updated one
    assert params.reward.weights == {"entropy_helpfulness": 1.0}
    assert params.train.decision_groups_per_step is None and params.train.decision_pairing.weight == 0.0
    assert params.train.precision == bench.ROWS[row][3]
    groups = bench.prompt_groups(params, args.steps * args.prompts_per_step, args.task)
    schedule = group_schedule(groups, args.prompts_per_step, args.steps, params.seed, shuffle=False,
                              decision_per_step=params.train.decision_groups_per_step)  # fmt: skip
    assert [g.group_id for step in schedule for g in step] == [g.group_id for g in groups]
    assert all(len(g.members) == 1 and g.task == "consistency" for g in groups)


@pytest.mark.parametrize(
    ("row", "matmul", "chunks"),
    [
        ("groupwise-vllm", "auto", "fewest_positions"),
        ("groupwise-vllm-torch-matmul", "torch", "fewest_positions"),
        ("groupwise-vllm-torch-matmul-consecutive-chunks", "torch", "consecutive"),
    ],
)
def test_a_rows_own_train_settings_reach_its_params(row, matmul, chunks):
    """A row names its train settings over params.yaml's; the others keep the shipped defaults."""
    args = argparse.Namespace(only=row, task="consistency", steps=2, prompts_per_step=4, k=6, max_new_tokens=64,
                              beta=0.04, loss_type="grpo")  # fmt: skip
    train = TrainConfig.model_validate(bench.benchmark_params(args).train.model_dump())
    assert (train.forward_chunks, train.rows_per_forward) == (chunks, 6)
    assert train.cpu_matmul == (matmul if matmul != "auto" else TrainConfig().cpu_matmul)
