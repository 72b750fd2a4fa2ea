"""Preemption of training (SIGTERM from a Kubernetes eviction or Prefect's cancellation, Ctrl-C), on the
tiny model: a resumable state is saved, training stops with `Preempted`, and `--resume` ends with the
same weights and metrics as an unbroken run, whether the signal came during the rollouts (the step is
given up, its start kept) or between steps. Through the CLI: one line, exit code 143, the MLflow run
KILLED, within a bounded time."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import mlflow
import pytest
import torch
from safetensors.torch import load_file

from components.config import load_params
from components.contracts.errors import Preempted
from components.grpo import trainer as trainer_module
from components.grpo.trainer import train
from flows import steps
from tests.conftest import make_project, seed_tiny_model
from tests.grpo_data import consistency_groups, tiny_params

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TIMING = {"step_time_s", "generation_time_s", "samples_per_s", "tokens_per_s", "weight_sync_s"}
STEPS = 4


def _adapter(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "adapter" / "adapter_model.safetensors"))


def _log(folder: Path) -> list[dict[str, str]]:
    with (folder / "train_log.csv").open() as fh:
        return [{k: v for k, v in row.items() if k not in TIMING and not k.startswith("time/")} for row in csv.DictReader(fh)]


def _train(model_dir: Path, out: Path, **kw):
    return train(tiny_params(steps=STEPS), consistency_groups(4), model_dir, out / "latest", show_progress=False,
                 state_dir=out / "resume", **kw)  # fmt: skip


@pytest.fixture(scope="module")
def whole(tiny_model_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("whole")
    _train(tiny_model_dir, out)
    return out / "latest"


def _same_as_whole(whole: Path, latest: Path) -> None:
    a, b = _adapter(whole), _adapter(latest)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs after the stop and --resume"
    assert _log(whole) == _log(latest)


def test_a_signal_between_steps_saves_that_step_and_resumes_bit_identically(tiny_model_dir, tmp_path, whole):
    def on_step(step: int, metrics: dict) -> None:
        if step == 2:  # during the step's bookkeeping: held until the step is complete
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(Preempted, match=r"stopped by SIGTERM after step 2 of 4; resumable state .*step-000002") as stopped:
        _train(tiny_model_dir, tmp_path, on_step=on_step)
    assert stopped.value.exit_code == 128 + signal.SIGTERM
    assert [p.name for p in (tmp_path / "resume").iterdir()] == ["step-000002"]
    assert not (tmp_path / "latest").exists(), "a stopped run leaves no final checkpoint"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "the handlers are given back"

    result = _train(tiny_model_dir, tmp_path, resume=True)
    assert result.resumed_from == 2
    _same_as_whole(whole, tmp_path / "latest")


def test_a_signal_during_the_rollouts_gives_the_step_up_and_resumes_bit_identically(tiny_model_dir, tmp_path, whole, monkeypatch):
    calls = []
    real = trainer_module.collect_rollouts

    def collect(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # step 3's rollouts: the sampler has drawn from the RNG, the weights are untouched
            torch.rand(5)
            os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "collect_rollouts", collect)
    with pytest.raises(Preempted, match=r"stopped by SIGINT after step 2 of 4") as stopped:
        _train(tiny_model_dir, tmp_path)
    assert stopped.value.exit_code == 128 + signal.SIGINT
    assert [p.name for p in (tmp_path / "resume").iterdir()] == ["step-000002"]
    monkeypatch.setattr(trainer_module, "collect_rollouts", real)

    assert _train(tiny_model_dir, tmp_path, resume=True).resumed_from == 2
    _same_as_whole(whole, tmp_path / "latest")


def _read_stderr(proc: subprocess.Popen, into: list[bytes]) -> None:
    for chunk in iter(lambda: proc.stderr.read1(4096), b""):
        into.append(chunk)


def test_sigterm_to_groupwise_train_stops_in_one_line_with_the_run_killed_and_resumes(tiny_model_dir, tmp_path):
    project = make_project(tmp_path / "p", "tiny")
    seed_tiny_model(project, tiny_model_dir)
    params = load_params(project / "params.yaml")
    steps.build(params)
    steps.validate(params)
    command = [sys.executable, "-m", "flows.cli", "train", "--params", str(project / "params.yaml"), "-S", "train.steps=12"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    err: list[bytes] = []
    reader = threading.Thread(target=_read_stderr, args=(proc, err), daemon=True)
    reader.start()
    deadline = time.monotonic() + 300
    while b"| 2/12" not in b"".join(err):  # tqdm: two steps done
        assert proc.poll() is None, b"".join(err).decode()[-3000:]
        assert time.monotonic() < deadline, "no training step after 300 s"
        time.sleep(0.1)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=120)
    waited = time.monotonic() - sent
    reader.join(timeout=10)
    text = b"".join(err).decode()
    assert code == 143, text[-3000:]
    assert waited < 60, f"{waited:.0f} s from SIGTERM to exit"
    lines = [line for line in text.replace("\r", "\n").splitlines() if "groupwise train stopped" in line]
    assert len(lines) == 1 and "stopped by SIGTERM after step" in lines[0] and "--resume" in lines[0], text[-2000:]
    assert "Traceback" not in text
    layout_resume = params.paths.checkpoints / "resume"
    saved = [p.name for p in layout_resume.iterdir() if p.name.startswith("step-")]
    assert len(saved) == 1 and not (params.paths.checkpoints / "latest").exists()

    mlflow.set_tracking_uri(params.tracking.uri)
    (run,) = mlflow.search_runs(experiment_names=[params.tracking.experiment], filter_string="run_name = 'train'", output_format="list")
    assert run.info.status == "KILLED"

    step = int(saved[0].removeprefix("step-"))
    resumed = subprocess.run([*command[:-1], "train.steps=6", "--resume"], cwd=project, capture_output=True, text=True, env=env)
    # another step count is another configuration: refused in one line, the state kept
    assert resumed.returncode == 2 and "written for another configuration" in " ".join(resumed.stderr.split())
    resumed = subprocess.run([*command, "--resume"], cwd=project, capture_output=True, text=True, env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed after step {step}" in " ".join(resumed.stdout.split())
    assert (params.paths.checkpoints / "latest").is_dir() and not layout_resume.exists()


def test_sigterm_to_groupwise_retrain_stops_the_flow_with_its_runs_killed_and_resume_finishes_it(tiny_model_dir, tmp_path):
    """Under Prefect (whose own SIGTERM bridge the training step replaces while it runs): the flow
    stops in one line with exit code 143, the parent and train runs KILLED; `retrain --resume`
    continues the training and runs every later step."""
    project = make_project(tmp_path / "p", "tiny")
    seed_tiny_model(project, tiny_model_dir)
    params = load_params(project / "params.yaml")
    command = [sys.executable, "-m", "flows.cli", "retrain", "--params", str(project / "params.yaml"), "-S", "train.steps=12"]
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {"OMP_NUM_THREADS": "1"}  # its own temporary server
    proc = subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    err: list[bytes] = []
    reader = threading.Thread(target=_read_stderr, args=(proc, err), daemon=True)
    reader.start()
    deadline = time.monotonic() + 420
    while b"| 2/12" not in b"".join(err):
        assert proc.poll() is None, b"".join(err).decode()[-3000:]
        assert time.monotonic() < deadline, "no training step after 420 s"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=180)
    reader.join(timeout=10)
    text = b"".join(err).decode()
    assert code == 143, text[-3000:]
    assert "groupwise retrain stopped: stopped by SIGTERM after step" in " ".join(text.split()), text[-2000:]
    mlflow.set_tracking_uri(params.tracking.uri)
    found = mlflow.search_runs(experiment_names=[params.tracking.experiment], output_format="list")
    status = {r.info.run_name: r.info.status for r in found}
    assert status["retrain"] == "KILLED" and status["train"] == "KILLED", status

    resumed = subprocess.run([*command, "--resume"], cwd=project, capture_output=True, text=True, env=env, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed after step" in " ".join(resumed.stdout.split())
    assert (params.paths.reports / "metrics.json").is_file()
