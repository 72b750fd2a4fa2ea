"""The GPU checks' table of docs/benchmarks.md (`components.study.gpu_table`): every figure read from
the committed JSON of `benchmarks/gpu_check.py`, finished sections only."""

import json
import re
from pathlib import Path

from components.study.gpu_table import gpu_table_lines, section_result
from components.study.speed_table import SPEED


def _variant(max_dlogp: float, mean_dlogp: float, dloss: float) -> dict:
    return {"max_abs_dlogp": max_dlogp, "mean_abs_dlogp": mean_dlogp, "abs_dloss": dloss}


def _training(step_s: float, generation_s: float, tokens_per_s: float) -> dict:
    steady = {"step_s": step_s, "generation_s": generation_s, "forward_backward_s": 1.33, "reference_s": 0.39, "reward_s": 0.026,
              "optimizer_s": 0.013, "tokens_per_s": tokens_per_s}  # fmt: skip
    return {"status": "ok", "steady": steady, "size": {"max_new_tokens": 256}, "samples_per_step": 128,
            "memory": {"peak_allocated_gib": 14.93, "peak_reserved_gib": 17.32}}  # fmt: skip


def check(gpu: str = "NVIDIA H100 80GB HBM3", agreement_pass: bool = True) -> dict:
    return {
        "date": "2026-12-05T19:34:07+00:00",
        "device": "cuda",
        "machine": {"gpu": gpu, "commit": "171ac43", "torch": "2.11.0+cu130"},
        "sections": {
            "agreement": {"status": "ok", "pass": agreement_pass,
                          "variants": {"fp32": _variant(2.86e-6, 5.7e-7, 8.4e-9), "bf16_weights": _variant(0.0291, 0.00536, 7.7e-6)}},
            "train_smollm2-135m": _training(34.348, 32.58, 1951.56),
            "train_smollm2-1.7b": {"status": "skipped", "reason": "47 s of the budget left"},
            "torchrun_smollm2-135m": {"status": "ok", "worker": {"collectives": {"backend": "nccl", "world_size": 1, "status": "ok"},
                                                                 "train": _training(30.72, 29.11, 1066.6)}},
            "plain_smollm2-1.7b": {"status": "failed", "error": "CUDA out of memory"},
        },
    }  # fmt: skip


def project(tmp_path: Path, checks: dict[str, dict]) -> Path:
    (tmp_path / SPEED).mkdir(parents=True)
    for name, body in checks.items():
        (tmp_path / SPEED / name).write_text(json.dumps(body))
    (tmp_path / SPEED / "make_run.txt").write_text("# not a GPU check\n")
    return tmp_path


def cells(line: str) -> list[str]:
    """A markdown row's cells, split at its unescaped pipes."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]


def test_each_finished_section_is_one_row_with_its_figures_and_link(tmp_path):
    lines = gpu_table_lines(project(tmp_path, {"gpu_check_h100.json": check()}), links_from="../")
    assert lines[:2] == ["| run | section | result |", "|---|---|---|"]
    rows = [cells(line) for line in lines[2:]]
    assert all(len(row) == 3 for row in rows)  # the |Δ log p| pipes are escaped
    assert [row[1] for row in rows] == ["agreement", "train_smollm2-135m", "torchrun_smollm2-135m"]  # skipped and failed left out
    run = "NVIDIA H100 80GB HBM3 · 171ac43 · 2026-12-05 · [JSON](../results/speed/gpu_check_h100.json)"
    assert {row[0] for row in rows} == {run}
    agreement, train, torchrun = (row[2] for row in rows)
    assert agreement == (
        "\\|Δ log p\\| in nats against CPU fp32: fp32 max 2.9e−06 (mean 5.7e−07), bf16_weights max 0.029 (mean 0.0054); "
        "\\|Δ loss\\| ≤ 7.7e−06: pass"
    )
    assert train == (
        "34.3 s a step (generation 32.6 s, forward/backward 1.3 s, reference 0.4 s, reward 0.03 s, optimizer 0.01 s); "
        "1,952 tokens/s; peak 14.9 GiB allocated (17.3 reserved); 128 samples × ≤ 256 tokens a step"
    )
    assert torchrun.startswith("nccl, world size 1: all-reduce, all-gather and DDP backward ok; trainer 30.7 s a step (generation 29.1 s")


def test_a_failed_agreement_says_so(tmp_path):
    section = check(agreement_pass=False)["sections"]["agreement"]
    assert section_result("agreement", section).endswith(": FAIL")
    assert section_result("machine", {"status": "ok"}) is None


def test_files_in_name_order_and_none_committed(tmp_path):
    root = project(tmp_path, {"gpu_check_h200.json": check("NVIDIA H200"), "gpu_check_h100.json": check()})
    runs = [cells(line)[0].split(" · ")[0] for line in gpu_table_lines(root)[2:]]
    assert runs == ["NVIDIA H100 80GB HBM3"] * 3 + ["NVIDIA H200"] * 3
    assert gpu_table_lines(project(tmp_path / "empty", {}))[2:] == ["| no committed GPU check | | |"]


def test_the_decode_section_gives_each_way_of_decoding():
    decode = {"status": "ok", "samples": 128, "max_new_tokens": 256,
              "variants": {"generate": {"tokens_per_s": 2071.4}, "engine": {"tokens_per_s": 1003.2}}}  # fmt: skip
    assert section_result("decode_smollm2-135m", decode) == "tokens/s: generate 2,071, engine 1,003; 128 samples × 256 tokens"
