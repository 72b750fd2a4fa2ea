"""Robustness and scale-out of the GRPO engine, on the tiny model, in real subprocesses.

- a training process killed (SIGKILL) mid-run and resumed ends with bit-identical adapter weights
  and the same metrics as an uninterrupted run;
- torch DDP with the gloo backend and 2 processes gives the same loss and updated weights as one
  process on the same data; the full trainer runs under torchrun.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WORKER = Path(__file__).with_name("grpo_worker.py")
TIMING = {"step_time_s", "generation_time_s", "samples_per_s", "tokens_per_s", "weight_sync_s"}


def worker(*args: str) -> list[str]:
    return [sys.executable, str(WORKER), *args]


def torchrun(nproc: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", str(WORKER), *args]


def run(cmd: list[str], timeout: int = 300) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]


def adapter(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "adapter" / "adapter_model.safetensors"))


def log_rows(folder: Path) -> list[dict[str, str]]:
    with (folder / "train_log.csv").open() as fh:
        return [{k: v for k, v in row.items() if k not in TIMING and not k.startswith("time/")} for row in csv.DictReader(fh)]


def kill_at_state(cmd: list[str], state: Path, wait_s: int) -> None:
    """Start `cmd`, SIGKILL it as soon as the resumable state folder `state` exists (it must still be running)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + wait_s
    while not state.is_dir():
        assert proc.poll() is None, f"worker ended before {state.name}: {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, f"no resumable state after {wait_s} s"
        time.sleep(0.05)
    still_running = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert still_running, "the run finished before it could be killed"


# the lr of each update, by hand (lr 1e-2, warmup over 2 updates: 0, 1/2), and the updates in all
SCHEDULES = {
    "cosine": (4, [0.0, 0.5e-2, 1e-2, 0.5e-2]),  # then cosine over the last 2: 1, 1/2
    "linear": (5, [0.0, 0.5e-2, 1e-2, 2 / 3 * 1e-2, 1 / 3 * 1e-2]),  # then to 0 over the last 3: 1, 2/3, 1/3
}


@pytest.mark.parametrize("scheduler", sorted(SCHEDULES))
def test_killed_run_resumes_to_the_same_weights_and_metrics(tiny_model_dir, tmp_path, scheduler):
    """With a schedule and warmup: the logged lr of every step matches across the resume and the hand values."""
    n_steps, expected_lrs = SCHEDULES[scheduler]
    steps = str(n_steps)
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    schedule = ["--lr-scheduler", scheduler, "--warmup-steps", "2"]
    run(worker("train", "--model-dir", str(tiny_model_dir), "--out", str(whole), "--steps", steps, *schedule))

    kill_at_state(worker("train", "--model-dir", str(tiny_model_dir), "--out", str(broken), "--steps", steps, *schedule),
                  broken / "resume" / "step-000002", wait_s=240)  # fmt: skip
    assert not (broken / "latest").exists(), "a killed run must not leave a final checkpoint"
    saved = sorted(p.name for p in (broken / "resume").iterdir() if not p.name.startswith("."))
    assert saved and all(name.startswith("step-") for name in saved)

    run(worker("train", "--model-dir", str(tiny_model_dir), "--out", str(broken), "--steps", steps, *schedule, "--resume"))
    result = json.loads((broken / "result.json").read_text())
    assert 2 <= result["resumed_from"] < n_steps

    a, b = adapter(whole / "latest"), adapter(broken / "latest")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs after kill + resume"
    assert log_rows(whole / "latest") == log_rows(broken / "latest")
    lrs = [float(row["lr"]) for row in log_rows(whole / "latest")]
    assert lrs == pytest.approx(expected_lrs)
    assert not (broken / "resume").exists(), "a completed run leaves no stale resumable state"


def test_resume_refuses_a_state_from_another_configuration(tiny_model_dir, tmp_path):
    from components.grpo.trainer import train

    sys.path.insert(0, str(WORKER.parent))
    from grpo_worker import groups, params

    p = params(steps=3, save_every=1)
    state_dir = tmp_path / "resume"
    with pytest.raises(FileNotFoundError, match="no resumable training state"):
        train(p, groups(4), tiny_model_dir, tmp_path / "latest", show_progress=False, resume=True, state_dir=state_dir)
    # leave a state behind as a crash would: train 1 step of a 3-step run, copy its state aside
    train(
        p.model_copy(update={"train": p.train.model_copy(update={"steps": 2})}),
        groups(4),
        tiny_model_dir,
        tmp_path / "latest",
        show_progress=False,
        state_dir=state_dir,
    )
    assert not state_dir.exists()  # completed runs clean up; build a state by saving mid-run
    from components.grpo.checkpoint import latest_train_state

    class Stop(Exception):
        pass

    def stop_after_first(step, metrics):
        if step == 2:
            raise Stop

    with pytest.raises(Stop):
        train(p, groups(4), tiny_model_dir, tmp_path / "latest2", on_step=stop_after_first, show_progress=False, state_dir=state_dir)
    assert latest_train_state(state_dir).name == "step-000001"
    changed = p.model_copy(update={"train": p.train.model_copy(update={"lr": 5e-3})})
    with pytest.raises(ValueError, match="another configuration"):
        train(changed, groups(4), tiny_model_dir, tmp_path / "latest2", show_progress=False, resume=True, state_dir=state_dir)


@pytest.mark.parametrize(
    "loss_type,micro,scale,engine_logp,pairing",
    [("grpo", 1, "group", "none", False), ("dapo", 2, "batch", "none", False), ("grpo", 1, "group", "first-half", False),
     ("grpo", 2, "group", "none", True)],
)  # fmt: skip
def test_ddp_two_processes_match_one(tiny_model_dir, tmp_path, loss_type, micro, scale, engine_logp, pairing):
    """scale batch: each rank holds half the batch, the std is every rank's (batch_reward_std).
    engine_logp first-half: only rank 0's rollouts carry an engine's log-probs (vLLM free text beside
    decision groups), so the ranks must agree to join the importance-sampling metrics' collectives.
    pairing: the decision pairing term's backward runs without the all-reduce, which the last
    micro-batch does for both losses; each rank holds one of its two decision groups."""
    one, two = tmp_path / "one", tmp_path / "two"
    common = ["update", "--model-dir", str(tiny_model_dir), "--loss-type", loss_type, "--micro", str(micro), "--scale", scale,
              "--engine-logp", engine_logp, *(["--pairing"] if pairing else [])]  # fmt: skip
    run(worker(*common, "--out", str(one)))
    run(torchrun(2, *common, "--out", str(two)))
    m1, m2 = json.loads((one / "metrics.json").read_text()), json.loads((two / "metrics.json").read_text())
    for a, b in zip(m1, m2):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
        assert a["tokens"] == b["tokens"] and a["kl"] == pytest.approx(b["kl"], abs=1e-7)
        assert ("mismatch/is_clipped_share" in a) == ("mismatch/is_clipped_share" in b) == (engine_logp != "none")
        assert ("decision/pairing_loss" in a) == ("decision/pairing_loss" in b) == pairing
        if pairing:
            assert a["decision/spread_mean"] > 0 and a["decision/pairing_loss"] == pytest.approx(b["decision/pairing_loss"], abs=1e-6)
    w1, w2 = load_file(str(one / "adapter.safetensors")), load_file(str(two / "adapter.safetensors"))
    moved = max(w1[k].abs().max().item() for k in w1 if "lora_B" in k)
    assert moved > 1e-3, "the updates must move the LoRA weights"
    assert max((w1[k] - w2[k]).abs().max().item() for k in w1) < 1e-4


def test_full_trainer_under_torchrun(tiny_model_dir, tmp_path):
    run(torchrun(2, "train", "--model-dir", str(tiny_model_dir), "--out", str(tmp_path), "--steps", "2"))
    state = json.loads((tmp_path / "latest" / "train_state.json").read_text())
    assert state["world_size"] == 2
    assert state["samples"] == 2 * 2 * 2 * 3  # 2 steps x 2 groups (one per rank) x 2 variants x K=3
    assert len(log_rows(tmp_path / "latest")) == 2
    # the weights, not only the counts: peft initialises lora_B at zero, so two all-reduced updates
    # must have moved every lora_B, and nothing may be NaN
    weights = adapter(tmp_path / "latest")
    lora_b = {k: w for k, w in weights.items() if "lora_B" in k}
    assert lora_b and all(torch.isfinite(w).all() for w in weights.values())
    assert min(w.abs().max().item() for w in lora_b.values()) > 0, "every lora_B must have been updated"
    losses = [float(r["loss"]) for r in log_rows(tmp_path / "latest")]
    assert len(losses) == 2 and all(abs(x) < 1e6 for x in losses)  # finite losses logged by rank 0
