"""benchmarks/gpu_check.py's CPU dry run: every section but the CUDA-only calls, so that the one
command prepared for a lent GPU machine cannot rot between loans (~15 s here)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, script_module

SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def _module():
    return script_module(SCRIPT)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("gpu-check") / "gpu_check.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text()), done.stdout


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def test_report_structure(dry_run):
    report, stdout = dry_run
    gpu_check = _module()
    assert report["schema"] == 1 and report["device"] == "cpu" and report["vocab_size"] == gpu_check.CPU_VOCAB_SIZE
    assert report["machine"]["status"] == "ok" and report["machine"]["torch"] and report["machine"]["groupwise_import_error"] is None
    models = list(gpu_check.plan("cpu", quick=False))
    expected = {"agreement", *(f"train_{m}" for m in models), f"torchrun_{models[0]}", *(f"plain_{m}" for m in models)}
    assert set(report["sections"]) == expected
    assert all(_finite(s.get("seconds", 0.0)) for s in report["sections"].values())
    assert "PASS" in stdout and "written:" in stdout


def test_agreement_within_tolerance(dry_run):
    agreement = dry_run[0]["sections"]["agreement"]
    assert agreement["status"] == "ok", agreement.get("traceback")
    assert set(agreement["variants"]) == {"fp32", "bf16_autocast", "bf16_weights"}
    assert agreement["batch"]["completion_tokens"] > 0 and agreement["reference"]["kl"] > 0  # the LoRA moves the policy off π_ref
    for name, v in agreement["variants"].items():
        for key in ("max_abs_dlogp", "mean_abs_dlogp", "abs_dloss", "grad_norm_rel_diff"):
            assert _finite(v[key]), (name, key, v[key])
        tolerance = v["tolerance"]
        assert v["max_abs_dlogp"] <= tolerance["max_abs_dlogp"], (name, v)
        assert v["mean_abs_dlogp"] <= tolerance["mean_abs_dlogp"], (name, v)
        assert v["abs_dloss"] <= tolerance["abs_dloss"], (name, v)
        assert v["pass"] is True
    assert agreement["variants"]["fp32"]["max_abs_dlogp"] == 0.0  # CPU against itself: the same computation
    assert agreement["variants"]["bf16_autocast"]["max_abs_dlogp"] > 0  # bf16 really ran
    assert agreement["pass"] is True


def test_train_sections_report_phases(dry_run):
    report = dry_run[0]
    gpu_check = _module()
    for name, size in gpu_check.plan("cpu", quick=False).items():
        section = report["sections"][f"train_{name}"]
        assert section["status"] == "ok", section.get("traceback")
        assert [row["step"] for row in section["steps"]] == list(range(1, size.steps + 1))
        for row in section["steps"]:
            for phase in ("step_s", "generation_s", "reward_s", "reference_s", "forward_backward_s", "optimizer_s"):
                assert _finite(row[phase]) and row[phase] >= 0, (name, phase, row)
            assert row["reward_s"] > 0 and row["reference_s"] > 0 and row["optimizer_s"] > 0  # every wrapper saw its call
            assert row["generation_s"] + row["reward_s"] + row["forward_backward_s"] <= row["step_s"] * 1.01
            assert row["samples"] == size.samples_per_step and row["completion_tokens"] > 0 and row["tokens_per_s"] > 0
        assert section["steady"]["steps_averaged"] == list(range(2, size.steps + 1))
        assert section["build"]["n_parameters"] > 0 and "peak_allocated_gib" in section["memory"]
        assert _finite(section["final"]["loss"]) and _finite(section["final"]["grad_norm"])


def test_plain_and_torchrun_sections(dry_run):
    report = dry_run[0]
    gpu_check = _module()
    models = list(gpu_check.plan("cpu", quick=False))
    torchrun = report["sections"][f"torchrun_{models[0]}"]
    assert torchrun["status"] == "skipped" and "NCCL" in torchrun["reason"]
    for name in models:
        plain = report["sections"][f"plain_{name}"]
        assert plain["status"] == "ok", plain.get("traceback")
        assert plain["lora_from"] == "components.config.LoraConfig"
        assert all(_finite(row["forward_backward_s"]) and row["completion_tokens"] > 0 for row in plain["steps"])


def test_fallback_lora_matches_the_project_defaults():
    """The plain sections' LoRA where components.config cannot be imported is the project's own."""
    from components.config import LoraConfig

    assert _module().DEFAULT_LORA == LoraConfig().model_dump()


def test_torchrun_command_and_tokenizer():
    gpu_check = _module()
    size = gpu_check.plan("cuda", quick=False)["smollm2-135m"]
    command = gpu_check.torchrun_command("smollm2-135m", size, "cuda", Path("/tmp/out.json"), Path("/tmp/work"), 300)
    assert command[1:8] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", str(SCRIPT), "--worker"]
    tokenizer = gpu_check.byte_pair_tokenizer(gpu_check.CPU_VOCAB_SIZE)
    assert len(tokenizer) == gpu_check.CPU_VOCAB_SIZE and tokenizer.eos_token_id == tokenizer.pad_token_id == 2
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Name a colour."}], add_generation_prompt=True, tokenize=False)
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False).input_ids) == text


def test_the_docs_table_reads_what_the_check_writes(dry_run, tmp_path):
    """docs/benchmarks.md's GPU table (`components.study.gpu_table`) reads this script's JSON: every
    finished section of the dry run becomes a row, the skipped torchrun does not."""
    from components.study.gpu_table import gpu_table_lines
    from components.study.speed_table import SPEED

    report = dry_run[0]
    (tmp_path / SPEED).mkdir(parents=True)
    (tmp_path / SPEED / "gpu_check_cpu.json").write_text(json.dumps(report))
    rows = gpu_table_lines(tmp_path)[2:]
    finished = [name for name, section in report["sections"].items() if section["status"] == "ok"]
    assert [row.split(" | ")[1] for row in rows] == finished and not any("torchrun" in name for name in finished)
    assert all("a step (generation" in row for row in rows if " | train_" in row or " | plain_" in row)
    assert rows[0].endswith(": pass |")


def test_the_decode_section_times_each_way_on_the_same_tokens_and_restores_the_mode():
    """Opt-in (`--sections decode`, not in the default run): `model.generate` and groupwise's engine with
    and without the trainer's deterministic algorithms, each timed with its token count; the process's
    deterministic setting and fill flag are what they were before."""
    import torch

    gpu_check = _module()
    assert "decode" in gpu_check.SECTIONS and "decode" not in gpu_check.DEFAULT_SECTIONS
    name, size = next(iter(gpu_check.plan("cpu", quick=False).items()))
    before = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    out = gpu_check.decode_section(name, size, "cpu", gpu_check.byte_pair_tokenizer(gpu_check.vocab_size("cpu")))
    assert (torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory) == before
    assert list(out["variants"]) == list(gpu_check.DECODE_VARIANTS)
    full = size.samples_per_step * size.max_new_tokens  # generate runs every row to the end; the engine stops a row at EOS
    assert out["variants"]["generate"]["tokens"] == full
    assert all(0 < v["tokens"] <= full and v["seconds"] > 0 and v["tokens_per_s"] > 0 for v in out["variants"].values())
