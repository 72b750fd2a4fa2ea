"""`groupwise study --submit` without a server: the job templates in infra/, the automations that
retry a crashed arm, the arm flow's parameters, the settings' checks, the command's options."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT, make_project

TEMPLATES = {"docker": ROOT / "infra/study-docker-job-template.json", "kubernetes": ROOT / "infra/study-k8s-job-template.json"}


@pytest.mark.parametrize("kind", sorted(TEMPLATES))
def test_job_templates_fill_every_placeholder_and_mount_the_study_store(kind):
    template = json.loads(TEMPLATES[kind].read_text())
    properties = template["variables"]["properties"]
    used = set(re.findall(r"{{\s*([\w]+)\s*}}", json.dumps(template["job_configuration"])))
    assert used <= set(properties), used - set(properties)  # every placeholder is a variable of the pool
    env = properties["env"]["default"]
    assert env["GROUPWISE_PROJECT_DIR"] == "/opt/groupwise"  # infra/worker.Dockerfile's project
    assert env["GROUPWISE_STUDY_STORE"].startswith("/shared/")
    if kind == "kubernetes":
        job = template["job_configuration"]["job_manifest"]["spec"]
        assert job["backoffLimit"] == 0 and job["template"]["spec"]["restartPolicy"] == "Never"  # Prefect retries, not the Job
        (container,) = job["template"]["spec"]["containers"]
        assert container["volumeMounts"] == [{"name": "study-store", "mountPath": "/shared"}]
        assert "GROUPWISE_TRACKING_URI" not in env  # from the Secret, never from a file in git
    else:
        assert properties["volumes"]["default"] == ["groupwise-study-store:/shared"]


def test_the_automations_crash_a_silent_run_and_schedule_a_crashed_one_of_the_deployment_only():
    from flows.study_deployment import CRASHED_AUTOMATION, SILENT_AUTOMATION, automations

    deployment = uuid.uuid4()
    silent, crashed = automations(deployment, 40)
    assert (silent.name, crashed.name) == (SILENT_AUTOMATION, CRASHED_AUTOMATION)
    for automation in (silent, crashed):
        related = automation.trigger.match_related
        assert related["prefect.resource.id"] in (f"prefect.deployment.{deployment}", [f"prefect.deployment.{deployment}"])
    assert silent.trigger.posture == "Proactive" and silent.trigger.within.total_seconds() == 40
    assert "prefect.flow-run.Completed" in silent.trigger.expect  # a finished run is not silent
    assert silent.actions[0].state == "CRASHED"
    assert crashed.trigger.posture == "Reactive" and crashed.trigger.expect == {"prefect.flow-run.Crashed"}
    assert (crashed.actions[0].state, crashed.actions[0].name) == ("SCHEDULED", "AwaitingRetry")


def test_silent_after_must_leave_room_for_a_heartbeat(monkeypatch):
    from components.config import ParamsError
    from flows.study_deployment import SILENT_ENV, silent_after

    monkeypatch.delenv(SILENT_ENV, raising=False)
    assert silent_after() == 90
    monkeypatch.setenv(SILENT_ENV, "40")
    assert silent_after() == 40
    for bad in ("39", "soon"):
        monkeypatch.setenv(SILENT_ENV, bad)
        with pytest.raises(ParamsError, match=SILENT_ENV):
            silent_after()


def test_the_arm_flow_takes_study_arm_params_file_parent_run_and_store():
    from prefect.utilities.callables import parameter_schema

    from flows.study_pool import ARM_RETRIES, study_arm

    schema = parameter_schema(study_arm).model_dump_for_openapi()
    assert list(schema["properties"]) == ["arm", "study_name", "params_path", "parent_run_id", "store"]
    assert schema["required"] == ["arm"] and study_arm.retries == ARM_RETRIES


def test_torchrun_processes_must_be_a_whole_number(monkeypatch, tmp_path):
    from components.config import ParamsError
    from flows.study import NPROC_ENV, train_arm

    monkeypatch.setenv(NPROC_ENV, "two")
    with pytest.raises(ParamsError, match=NPROC_ENV):
        train_arm(None, None, "arm", "", False)


def test_submit_needs_a_prefect_server(tmp_path, monkeypatch):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.cli import app

    project = make_project(tmp_path / "p", "tiny", {"study": {"profile": "tiny", "arms": {"a": {"description": "a"}}}})
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):  # also when a test harness's server is up
        result = CliRunner().invoke(app, ["study", "--submit", "--params", str(project / "params.yaml")])
    assert result.exit_code == 2, result.output
    assert "PREFECT_API_URL" in result.output
    help_text = CliRunner().invoke(app, ["study", "--help"], terminal_width=200).output
    assert all(option in help_text for option in ("--submit", "--work-pool", "--concurrency", "--store"))


def test_an_arm_trains_under_torchrun_with_its_own_params_on_every_rank(tmp_path, monkeypatch):
    """GROUPWISE_STUDY_NPROC_PER_NODE=2: the arm's training is `torchrun --standalone --nproc-per-node 2
    -m flows.study_train ...`, and each rank rebuilds exactly the arm's params (profile, overrides, paths)."""
    import subprocess

    from components.study.domain import arm_params, load_study
    from flows import steps, study_train
    from flows import study as study_module
    from flows.study import NPROC_ENV, train_arm

    arms = {"lr": {"description": "lr", "overrides": {"train": {"lr": 0.005}}}}
    project = make_project(tmp_path / "p", "tiny", {"studies": {"mini": {"profile": "tiny", "arms": arms}}})
    params, study = load_study(project / "params.yaml", "mini")
    launched, trained = [], []
    monkeypatch.setattr(subprocess, "run", lambda argv, cwd: launched.append((argv, cwd)) or subprocess.CompletedProcess(argv, 0))
    monkeypatch.setattr(steps, "train", lambda p, parent, resume: trained.append((p, parent, resume)))
    monkeypatch.setenv(NPROC_ENV, "2")
    train_arm(arm_params(params, study, "lr"), study, "lr", "run-1", True)
    ((argv, cwd),) = launched
    assert argv[1:7] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m"] and cwd == params.root
    assert argv[7:] == ["flows.study_train", str((project / "params.yaml").resolve()), "mini", "lr", "run-1", "--resume"]
    study_train.main(argv[8:])  # what every rank runs
    ((rank_params, parent, resume),) = trained
    assert rank_params == arm_params(params, study, "lr") and rank_params.train.lr == 0.005 and (parent, resume) == ("run-1", True)
    monkeypatch.setenv(NPROC_ENV, "1")
    train_arm(arm_params(params, study, "lr"), study, "lr", "run-1", False)  # one process: in this one
    assert len(launched) == 1 and trained[-1][2] is False
    assert study_module.NPROC_ENV == NPROC_ENV


def test_an_arm_that_starts_from_an_unfinished_arm_waits(tmp_path):
    from components.study.domain import load_study
    from components.study.pool_arms import waiting_arms

    arms = {"a": {"seeds": [1, 2]}, "b": {"seeds": [1, 2], "start_from": "a"}, "c": {"start_from": "a-s1"}}
    project = make_project(tmp_path / "p", "tiny", {"studies": {"mini": {"profile": "tiny", "arms": arms}}})
    _, chosen = load_study(project / "params.yaml", "mini")
    assert waiting_arms(chosen, ["a-s1", "a-s2", "b-s1", "b-s2", "c"]) == {"b-s1": "a-s1", "b-s2": "a-s2", "c": "a-s1"}
    assert waiting_arms(chosen, ["b-s1", "b-s2", "c"]) == {}  # a-s1 and a-s2 have finished


def test_study_overrides_apply_to_every_arm_and_the_arms_own_win(tmp_path):
    """`overrides` of a study are merged over its profile for every arm, then each arm's own; the
    profile itself (what `make run` registers) keeps its values, and the fingerprint follows the arm's params."""
    from components.config import load_params
    from components.study.domain import arm_fingerprint, arm_params, load_study

    arms = {"a": {}, "b": {"overrides": {"eval": {"max_consistency_groups": 5}}}}
    mini = {"profile": "tiny", "overrides": {"eval": {"max_consistency_groups": 3, "max_diversity_tasks": 2}}, "arms": arms}
    project = make_project(tmp_path / "p", "tiny", {"studies": {"mini": mini}})
    params, chosen = load_study(project / "params.yaml", "mini")
    a, b = arm_params(params, chosen, "a").eval, arm_params(params, chosen, "b").eval
    assert (a.max_consistency_groups, a.max_diversity_tasks) == (3, 2)
    assert (b.max_consistency_groups, b.max_diversity_tasks) == (5, 2)  # the arm's own value wins, the rest is the study's
    profile = load_params(project / "params.yaml", "tiny").eval
    assert (profile.max_consistency_groups, profile.max_diversity_tasks) == (6, 3)  # the profile is untouched
    fingerprints = {arm_fingerprint(arm_params(params, chosen, name), "train") for name in arms}
    assert len(fingerprints) == 2


def test_an_arm_is_done_for_its_params_and_the_groups_it_ran_on(tmp_path):
    """A changed generator count or template builds other groups under the same params: the arm runs
    again. A record from before groups were recorded is judged by its params alone."""
    from components.data.io import groups_file
    from components.study.domain import arm_done, arm_params, built_groups_sha256, load_study

    project = make_project(tmp_path / "p", "tiny", {"studies": {"mini": {"profile": "tiny", "arms": {"a": {}}}}})
    params, chosen = load_study(project / "params.yaml", "mini")
    arm = arm_params(params, chosen, "a")
    assert built_groups_sha256(arm) is None  # nothing built here: judged by params alone
    groups_file(arm.paths.groups, "consistency").parent.mkdir(parents=True, exist_ok=True)
    groups_file(arm.paths.groups, "consistency").write_text("{}\n")
    first = built_groups_sha256(arm)
    groups_file(arm.paths.groups, "consistency").write_text("{}\n{}\n")
    assert first and built_groups_sha256(arm) != first
    chosen.arm_dir("a").mkdir(parents=True)
    record = chosen.arm_dir("a") / "arm.json"
    record.write_text(json.dumps({"fingerprint": "f" * 16, "groups_sha256": "g1"}))
    assert arm_done(chosen, "a", "f" * 16, "g1") and arm_done(chosen, "a", "f" * 16)
    assert not arm_done(chosen, "a", "f" * 16, "g2")  # other groups
    assert not arm_done(chosen, "a", "e" * 16, "g1")  # other params
    record.write_text(json.dumps({"fingerprint": "f" * 16}))  # recorded before groups were
    assert arm_done(chosen, "a", "f" * 16, "g2")
    record.write_text(json.dumps({"fingerprint": "f" * 16, "groups_sha256": None}))  # run where no groups were built
    assert arm_done(chosen, "a", "f" * 16, "g2")
    assert not arm_done(chosen, "b", "f" * 16, "g1")  # never run


def test_a_worker_takes_the_start_arms_adapter_and_results_from_the_store(tmp_path, monkeypatch):
    """An arm that starts from another arm's adapter, on a worker whose disk lacks it: the start
    arm's final checkpoint and results come from the study store, then the serial study's restore
    (train it again if still missing) is asked about the same arm."""
    import flows.study_pool as pool
    from components.contracts.checkpoint import LATEST_DIR, STATE_FILE
    from components.study.domain import arm_fingerprint, arm_params, load_study
    from components.study.store import ArmStore

    arms = {"a": {"seeds": [1]}, "b": {"seeds": [1], "start_from": "a"}}
    project = make_project(tmp_path / "p", "tiny", {"studies": {"mini": {"profile": "tiny", "arms": arms}}})
    params, chosen = load_study(project / "params.yaml", "mini")
    start = arm_params(params, chosen, "a-s1")
    fingerprint = arm_fingerprint(start, "train")
    box = ArmStore.of(tmp_path / "store", chosen.folder, "a-s1")
    latest = box.checkpoints(fingerprint) / LATEST_DIR
    (latest / "adapter").mkdir(parents=True)
    (latest / "adapter" / "adapter_model.safetensors").write_bytes(b"trained elsewhere")
    (latest / STATE_FILE).write_text(json.dumps({"steps": 2, "fingerprint": "x"}))
    box.results.mkdir(parents=True)
    (box.results / "arm.json").write_text(json.dumps({"name": "a-s1", "fingerprint": fingerprint}))
    asked = []
    monkeypatch.setattr(pool, "restore_start_adapter", lambda p, s, arm, parent: asked.append((arm, parent)))

    pool.start_adapter_here(params, chosen, "b-s1", "run-1", tmp_path / "store")
    here = start.paths.checkpoints / LATEST_DIR
    assert (here / "adapter" / "adapter_model.safetensors").read_bytes() == b"trained elsewhere"
    assert json.loads((chosen.arm_dir("a-s1") / "arm.json").read_text())["fingerprint"] == fingerprint
    assert asked == [("b-s1", "run-1")]
    pool.start_adapter_here(params, chosen, "a-s1", "run-1", tmp_path / "store")  # starts from nothing: nothing asked
    assert asked == [("b-s1", "run-1")]
    (box.results / "arm.json").write_text(json.dumps({"name": "a-s1", "fingerprint": "other params"}))
    (chosen.arm_dir("a-s1") / "arm.json").unlink()
    pool.start_adapter_here(params, chosen, "b-s1", None, tmp_path / "store")  # results for other params are not taken
    assert not (chosen.arm_dir("a-s1") / "arm.json").exists() and asked[-1] == ("b-s1", None)
