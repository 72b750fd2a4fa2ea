"""What DVC lists is what runs: every key of every profile of params.yaml, set with `dvc exp run -S`
under that profile (written in with `groupwise use-profile`) to its default and to another value, is
the value the run resolves. The `-S` edits are DVC's own (`dvc.utils.hydra.apply_overrides`, what
`dvc exp run -S` calls) and are read back with DVC's own YAML loader; one real `dvc exp run` per trap
shows the stage runs what `dvc exp show` lists."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import yaml
from dvc.exceptions import InvalidArgumentError
from dvc.utils.hydra import apply_overrides
from dvc.utils.serialize import load_yaml

from components.config import ParamsError, load_params, profile_overrides
from components.config.document import use_profile
from components.config.loading import profile_values
from components.config.tree import leaves
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

PROFILES = ["default", *yaml.safe_load((ROOT / "params.yaml").read_text())["profiles"]]


def hydra(value) -> str:
    """`value` in Hydra's override grammar, as one types it after `dvc exp run -S key=`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list):
        return "[" + ",".join(hydra(v) for v in value) + "]"
    return "{" + ",".join(f"{k}:{hydra(v)}" for k, v in value.items()) + "}"


ABSENT = object()  # a leaf under a section that is null (data.decision_groups.ages where decision_groups: null)


def get(tree, leaf: tuple[str, ...]):
    for key in leaf:
        if not isinstance(tree, dict) or key not in tree:
            return ABSENT
        tree = tree[key]
    return tree


def resolved_values(name: str) -> dict:
    return profile_values(profile_overrides(ROOT / "params.yaml", name)).model_dump(mode="json")


def project_file(folder, profile):
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / "params.yaml", folder / "params.yaml")
    use_profile(folder / "params.yaml", profile)
    return folder / "params.yaml"


@pytest.mark.parametrize("profile", PROFILES)
def test_every_key_of_every_profile_set_by_dvc_runs_as_dvc_lists_it(tmp_path, profile, monkeypatch):
    """Under `profile`, its keys (the default: every profile's keys) are set by DVC's -S to the value each
    profile of params.yaml gives them, the default included: all at once, and one at a time where the whole
    set does not validate together (a one-line error then; nothing runs)."""
    monkeypatch.delenv("GROUPWISE_PROFILE", raising=False)
    written = project_file(tmp_path / "written", profile)
    text = written.read_text()
    own = leaves(profile_overrides(ROOT / "params.yaml", profile))
    keys = own or sorted({leaf for name in PROFILES[1:] for leaf in leaves(profile_overrides(ROOT / "params.yaml", name))})
    null_section = [leaf for leaf in keys if get(load_yaml(written), leaf) is ABSENT]  # under a section that is null here
    keys = [leaf for leaf in keys if leaf not in null_section]
    if null_section:  # DVC itself refuses such a key, and leaves the file as it was
        with pytest.raises(InvalidArgumentError):
            apply_overrides(written, [f"{'.'.join(null_section[0])}=1"])
        assert written.read_text() == text

    def check(assignment: dict) -> bool:
        written.write_text(text)
        apply_overrides(written, [f"{'.'.join(leaf)}={hydra(value)}" for leaf, value in assignment.items()])
        try:
            ran = load_params(written)
        except ParamsError as exc:  # values that do not go together (validation): nothing runs
            assert str(written) in str(exc) and "\n" not in str(exc)
            return False
        listed, resolved = load_yaml(written), ran.model_dump(mode="json")  # what `dvc exp show` reads; what runs
        for leaf, value in assignment.items():
            expected = str(tmp_path / "written" / value) if leaf[0] == "paths" and value is not None else value
            dotted = f"under {profile}: -S {'.'.join(leaf)}={hydra(value)}"
            assert get(resolved, leaf) == expected, f"{dotted} runs {get(resolved, leaf)!r}"
            assert get(listed, leaf) == value or float(get(listed, leaf)) == value, f"{dotted}: DVC lists {get(listed, leaf)!r}"
        assert ran.profile == profile  # the generated part's first line, naming the profile, kept by DVC's edit
        return True

    checked, refused = set(), []
    for source in PROFILES:
        values = resolved_values(source)
        assignment = {leaf: get(values, leaf) for leaf in keys if get(values, leaf) is not ABSENT}
        if check(assignment):
            checked |= {(leaf, repr(value)) for leaf, value in assignment.items()}
            continue
        for leaf, value in assignment.items():
            (checked.add((leaf, repr(value))) if check({leaf: value}) else refused.append((".".join(leaf), value)))
    assert {leaf for leaf, _ in checked} == set(keys), "every key ran at one value at least"
    assert len(checked) >= len(keys) + 1 and len(refused) < len(checked), refused


def dvc(project, *args, check=True, env=None):
    result = subprocess.run(["dvc", *args], cwd=project, capture_output=True, text=True, env=env or os.environ.copy())
    if check:
        assert result.returncode == 0, f"dvc {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def test_dvc_exp_run_trains_the_listed_value_under_a_profile_and_refuses_what_it_cannot_list(tmp_path, monkeypatch):
    """Under profile paper (20 steps at 2e-4), `dvc exp run -S train.steps=4 -S train.lr=3e-4` (the
    typed defaults) runs 4 steps at 3e-4 and `dvc exp show` lists both; a profile named by hand that the
    file does not hold, and GROUPWISE_PROFILE inside a stage, fail the stage in one line."""
    monkeypatch.delenv("GROUPWISE_PROFILE", raising=False)
    project = tmp_path / "p"
    project_file(project, "paper")
    (project / "dvc.yaml").write_text(
        "stages:\n  show:\n    cmd: groupwise show-params > shown.json\n    params: [train, profile, profiles]\n    outs: [shown.json]\n"
    )
    ident = ["-c", "user.name=groupwise-test", "-c", "user.email=test@groupwise.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    dvc(project, "init", "-q")
    subprocess.run(["git", *ident, "add", "-A"], cwd=project, check=True)
    subprocess.run(["git", *ident, "commit", "-q", "-m", "paper"], cwd=project, check=True)
    env = {**os.environ, **{f"GIT_{r}_{k}": v for r in ("AUTHOR", "COMMITTER") for k, v in (("NAME", "t"), ("EMAIL", "t@t.invalid"))}}

    dvc(project, "exp", "run", "-n", "defaults-listed", "-S", "train.steps=4", "-S", "train.lr=3e-4", env=env)
    shown = json.loads((project / "shown.json").read_text())
    assert (shown["train"]["steps"], shown["train"]["lr"], shown["profile"]) == (4, 3e-4, "paper")
    table = json.loads(dvc(project, "exp", "show", "--json", env=env).stdout)
    exps = [e for row in table for e in (row.get("experiments") or []) if e.get("name") == "defaults-listed"]
    (exp,) = [run for e in exps for run in e["revs"]]
    listed = exp["data"]["params"]["params.yaml"]["data"]["train"]
    assert (listed["steps"], float(listed["lr"])) == (4, 3e-4)

    by_hand = dvc(project, "exp", "run", "-S", "profile=tiny", check=False, env=env)
    subprocess.run(["git", "checkout", "params.yaml"], cwd=project, check=True)  # the failed experiment's edit
    assert (
        by_hand.returncode != 0
        and "profile 'tiny' is named but the generated part holds the values of profile 'paper'" in by_hand.stderr + by_hand.stdout
    )
    env_profile = dvc(project, "exp", "run", "-f", check=False, env={**env, "GROUPWISE_PROFILE": "tiny"})
    assert env_profile.returncode != 0 and "inside DVC stage 'show'" in env_profile.stderr + env_profile.stdout


def test_groupwise_set_means_what_dvc_exp_run_set_means(tmp_path, monkeypatch):
    """One assignment, two readers: `groupwise <step> -S` (Hydra's override parser) and `dvc exp run -S`
    (DVC's edit of params.yaml, then the file read) give the same params."""
    from components.config import assignments_to_overrides, with_overrides

    monkeypatch.delenv("GROUPWISE_PROFILE", raising=False)
    written = project_file(tmp_path / "p", "default")
    text = written.read_text()
    for item in ["train.lr=5e-5", "train.steps=12", "eval.fairness.ages=[60,80]", "data.groups_file=null",
                 "schedule.cron='0 4 * * 2'", "reward.weights={entropy_helpfulness:0.5,stability:0.5}",
                 "data.answer_instruction='Answer in one word, please.'", "train.rollout.engine=transformers"]:  # fmt: skip
        written.write_text(text)
        apply_overrides(written, [item])
        by_dvc = load_params(written).model_dump(mode="json")
        written.write_text(text)
        by_groupwise = with_overrides(load_params(written), assignments_to_overrides([item])).model_dump(mode="json")
        assert by_groupwise == by_dvc, item
