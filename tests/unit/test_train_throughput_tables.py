"""benchmarks/train_throughput.py's tables from its per-row figures (no model runs): the loop and
whole-run ratios against TRL, and the groupwise rows' time per phase."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("train_throughput", ROOT / "benchmarks" / "train_throughput.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

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
