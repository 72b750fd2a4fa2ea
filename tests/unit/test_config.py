import re
from pathlib import Path

import pytest
import yaml

from components.config import ParamsError, assignments_to_overrides, load_params, with_overrides

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path, raw) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


# the profiles that train free-text consistency with the default objective (the rest train the paper's reward or other tasks)
PAIRED_CONSISTENCY_PROFILES = ("default", "paired-consistency", "smoke")


def test_the_default_objective_is_paired_consistency_for_every_way_a_user_runs_it(tmp_path):
    """`groupwise retrain` with params.yaml, a params file of one's own with `profile: default`, and the
    scheduled retrain (schedule.profile null) all train the paired-consistency objective."""
    own = load_params(write(tmp_path, {"profile": "default", "schedule": {"profile": None}}))
    for params in (load_params(ROOT / "params.yaml"), own):
        assert params.schedule.profile is None and params.profile == "default"
        assert params.reward.weights == {"entropy_helpfulness": 0.4, "stability": 0.6, "instruction_compliance": 0.6}
        assert params.train.decision_pairing.weight == 0.25 and params.train.decision_pairing.beta == 0.2
        assert params.train.decision_groups_per_step == 1 and params.train.groups_per_step == 3
        assert params.data.decision_groups.benchmark == "discrim_eval" and params.data.decision_groups.ages == [20, 40, 80, 100]
    paper = load_params(ROOT / "params.yaml", "paper")
    assert {k: v for k, v in paper.reward.weights.items() if v} == {"entropy_helpfulness": 0.4, "stability": 0.6}
    assert paper.data.decision_groups is None and paper.train.decision_pairing.weight == 0


def test_repository_params_load_in_every_profile():
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    for profile in ["default", *raw["profiles"]]:
        params = load_params(ROOT / "params.yaml", profile)
        assert params.profile == profile
        active = {k: v for k, v in params.reward.weights.items() if v}
        expected = {"frequency_aware": 1.0} if profile in ("diversity", "gapo") else {"entropy_helpfulness": 0.4, "stability": 0.6}
        expected = {"decision_parity": 1.0} if profile == "fairness" else expected
        if profile in PAIRED_CONSISTENCY_PROFILES:
            expected = {"entropy_helpfulness": 0.4, "stability": 0.6, "instruction_compliance": 0.6}
        assert active == expected
        pairing = (params.train.decision_pairing.weight, params.train.decision_groups_per_step, params.data.decision_groups is not None)
        assert pairing == ((0.25, 1, True) if profile in PAIRED_CONSISTENCY_PROFILES else (0.0, None, profile == "fairness"))
    assert load_params(ROOT / "params.yaml", "tiny").model.source == "tiny"
    assert load_params(ROOT / "params.yaml").train.samples_per_prompt == 6


def test_the_fairness_profile_trains_the_study_recipe_and_judges_fairness_not_the_consistency_gap():
    params, study = load_params(ROOT / "params.yaml", "fairness"), load_params(ROOT / "params.yaml").studies["fairness"]
    assert params.train.lr == study.arms["decision-parity-s1"].overrides.get("train", {}).get("lr", params.train.lr) == 5.0e-4
    gate = params.gate
    assert gate.max_discrimination_increase == 0.01 and gate.min_profile_correlation == 0.8  # DiscrimEval judged
    assert gate.max_length_growth == 0.25 and gate.max_compliance_drop == 0.05 and gate.max_validity_drop == 0.17
    assert not gate.require_significance and gate.min_relative_gap_reduction < -1  # the gap is not what it trains for
    # a registration is judged on every held-out group and task; the study's arms on its small check
    assert params.eval.max_consistency_groups == 104 and params.eval.max_diversity_tasks >= 8
    from components.study.domain import arm_params, load_study

    study_params, fairness = load_study(ROOT / "params.yaml", "fairness")
    for arm in ["base", "decision-parity-s1", "planted-to-parity-s3"]:
        evaluated = arm_params(study_params, fairness, arm).eval
        assert (evaluated.max_consistency_groups, evaluated.max_diversity_tasks, evaluated.dtype) == (8, 8, "float32")


def test_profile_deep_merges_and_paths_resolve(tmp_path):
    path = write(tmp_path, {"train": {"steps": 4, "lr": 0.1}, "profiles": {"quick": {"train": {"steps": 1}}}})
    params = load_params(path, "quick")
    assert params.train.steps == 1 and params.train.lr == 0.1  # untouched keys survive the merge; steps: 4 restates the default
    assert params.paths.groups == tmp_path / "data/groups"
    assert params.tracking.uri == f"sqlite:///{tmp_path}/mlruns/mlflow.db"


def test_a_value_the_file_lists_is_the_value_that_runs_under_its_own_profile(tmp_path):
    """What `dvc exp run -S train.lr=...` writes beside `profile: paper` runs, even when it equals the typed
    default; the profile fills in what the file does not list; a profile asked for on the command line takes
    the place of the file's own and goes over the file's values, and -S over both."""
    raw = {"profile": "paper", "train": {"lr": "5e-05"}, "profiles": {"paper": {"train": {"lr": 2.0e-4, "steps": 20}}}}
    params = load_params(write(tmp_path, raw))
    assert (params.train.lr, params.train.steps, params.profile) == (5e-5, 20, "paper")
    raw["train"]["lr"] = 3.0e-4  # the typed default, listed: it runs
    assert load_params(write(tmp_path, raw)).train.lr == 3.0e-4
    raw["profiles"]["quick"] = {"train": {"lr": 1.0e-3}}
    quick = load_params(write(tmp_path, raw), "quick")
    assert (quick.train.lr, quick.train.steps, quick.profile) == (1.0e-3, 4, "quick")  # paper's steps: 20 is not applied
    assert load_params(write(tmp_path, raw), "paper").train.lr == 3.0e-4  # the file's own profile is not applied twice
    assert with_overrides(quick, assignments_to_overrides(["train.lr=5e-5"])).train.lr == 5e-5


def test_a_file_naming_another_profile_than_its_generated_part_holds_is_refused_with_the_command_to_write_it(tmp_path):
    """The project's params.yaml lists every key: naming another profile by hand (or with `dvc exp run -S
    profile=paper`) would run the listed values, not the profile, so it is refused in one line;
    `groupwise use-profile` writes the profile in."""
    from components.config.document import expected_part, generated_part, use_profile

    path = tmp_path / "params.yaml"
    path.write_text((ROOT / "params.yaml").read_text().replace("\nprofile: default", "\nprofile: paper", 1))
    with pytest.raises(
        ParamsError, match=r"profile 'paper' is named but the generated part holds the values of profile 'default'.*use-profile paper"
    ):
        load_params(path)
    assert use_profile(path, "paper") and not use_profile(path, "paper")
    written, paper = load_params(path), load_params(ROOT / "params.yaml", "paper")
    apart = {"root", "paths", "tracking", "study", "studies"}  # where the copy lives; its folder has no studies/
    assert written.model_dump(exclude=apart) == paper.model_dump(exclude=apart)
    assert generated_part(path) == expected_part(path)  # `document --check` holds for a file written with a profile
    # another profile asked for takes the written one's place: paper's values do not leak into it
    fairness, reference = load_params(path, "fairness"), load_params(ROOT / "params.yaml", "fairness")
    assert fairness.model_dump(exclude=apart) == reference.model_dump(exclude=apart)
    text = path.read_text()
    path.write_text(text.replace("\n  lr: 2.0e-4", "\n  lr: 7.0e-4", 1))  # an edit of the file (what -S writes) stays
    assert load_params(path).train.lr == 7e-4 and load_params(path, "fairness").train.lr == 5e-4  # fairness sets lr
    assert load_params(path, "smoke").train.lr == 7e-4 and load_params(ROOT / "params.yaml", "smoke").train.lr == 3e-4
    path.write_text(text)
    assert use_profile(path, "default") and generated_part(path) == generated_part(ROOT / "params.yaml")
    assert path.read_text() == (ROOT / "params.yaml").read_text()


def test_a_profile_asked_for_inside_a_dvc_stage_is_refused(tmp_path, monkeypatch):
    path = write(tmp_path, {"profiles": {"quick": {"train": {"steps": 1}}}})
    monkeypatch.setenv("DVC_STAGE", "train")
    monkeypatch.setenv("GROUPWISE_PROFILE", "quick")
    with pytest.raises(ParamsError, match=r"profile 'quick' asked for inside DVC stage 'train'.*use-profile quick"):
        load_params(path)
    monkeypatch.delenv("GROUPWISE_PROFILE")
    assert load_params(path).train.steps == 4  # the file alone runs


def test_trl_names_are_accepted_and_an_unknown_key_gets_a_hint(tmp_path):
    trl = {"train": {"learning_rate": 1e-5, "num_generations": 4, "max_completion_length": 64, "epsilon": 0.3}}
    train = load_params(write(tmp_path, trl)).train
    assert (train.lr, train.samples_per_prompt, train.max_new_tokens, train.epsilon_low, train.epsilon_high) == (1e-5, 4, 64, 0.3, 0.3)
    assert with_overrides(load_params(write(tmp_path, {})), {"train": {"learning_rate": 2e-5}}).train.lr == 2e-5
    with pytest.raises(ParamsError, match=r"train\.lrr: unknown key; did you mean train\.lr\?"):
        load_params(write(tmp_path, {"train": {"lrr": 1e-5}}))
    with pytest.raises(ParamsError, match=r"train.learning_rate .* and train.lr .* both given"):
        load_params(write(tmp_path, {"train": {"learning_rate": 1e-5, "lr": 2e-5}}))


def test_env_selects_profile(tmp_path, monkeypatch):
    path = write(tmp_path, {"profiles": {"quick": {"train": {"steps": 1}}}})
    monkeypatch.setenv("GROUPWISE_PROFILE", "quick")
    assert load_params(path).train.steps == 1


def test_dvc_exp_string_numbers_are_coerced(tmp_path):
    # `dvc exp run -S train.lr=2e-5` writes '2e-05', which YAML reads back as a string
    path = write(tmp_path, {"train": {"lr": "2e-05"}})
    assert load_params(path).train.lr == pytest.approx(2e-5)


def test_bad_value_names_file_and_field(tmp_path):
    path = write(tmp_path, {"train": {"samples_per_prompt": 1}})
    with pytest.raises(ParamsError, match=r"params.yaml.*train\.samples_per_prompt"):
        load_params(path)


def test_unknown_key_and_profile_are_refused(tmp_path):
    with pytest.raises(ParamsError, match=r"train\.stepz"):
        load_params(write(tmp_path, {"train": {"stepz": 3}}))
    with pytest.raises(ParamsError, match="unknown profile 'nope'"):
        load_params(write(tmp_path, {}), "nope")


def test_tracking_uri_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GROUPWISE_TRACKING_URI", "http://127.0.0.1:5000")
    assert load_params(write(tmp_path, {})).tracking.uri == "http://127.0.0.1:5000"


def test_mlflow_env_side_effect_does_not_redirect_other_projects(tmp_path, monkeypatch):
    # mlflow.set_tracking_uri() exports MLFLOW_TRACKING_URI; params must not follow it
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////somewhere/else.db")
    assert load_params(write(tmp_path, {})).tracking.uri == f"sqlite:///{tmp_path}/mlruns/mlflow.db"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"train": {"advantage": {"estimator": "ppo"}}},
            r"train\.advantage\.estimator: unknown advantage estimator 'ppo'; known: \['grpo', 'seed_grpo'",
        ),
        ({"train": {"loss_type": "grpoo"}}, r"train\.loss_type: unknown loss type 'grpoo'; known: \['bnpo', 'dapo', 'dr_grpo', 'grpo'\]"),
        ({"train": {"policy_loss": "ppo"}}, r"train\.policy_loss: unknown policy loss 'ppo'; known: \[.*'ppo_clip'"),
        (
            {"train": {"advantage": {"clustering": "kmeans"}}},
            r"train\.advantage\.clustering: unknown clusterer 'kmeans'; known: \['answer', 'embedding'\]",
        ),
        (
            {"reward": {"weights": {"stability": 1.0, "fun": 1.0, "joy": 0.0}}},
            r"reward\.weights: unknown reward \['fun', 'joy'\]; known: \[.*'entropy_helpfulness'.*'stability'",
        ),
    ],
)
def test_unknown_registry_names_fail_when_the_registries_check_them(tmp_path, raw, message):
    from components.contracts.naming import UnknownNameError
    from components.plugins import check_registered_names

    params = load_params(write(tmp_path, raw))  # loading params knows no registry
    with pytest.raises(UnknownNameError, match=message) as info:
        check_registered_names(params)
    assert isinstance(info.value, ValueError)
    check_registered_names(load_params(ROOT / "params.yaml"))


def test_loading_params_imports_no_torch():
    import subprocess
    import sys

    code = "import sys; from components.config import load_params; load_params('params.yaml'); print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False", result.stderr


def test_old_keys_still_load_for_one_release_with_a_warning_naming_the_new_key(tmp_path):
    from components.config import ParamsDeprecationWarning, with_overrides

    raw = {"lora": {"alpha": 8}, "train": {"advantage": {"alpha": 0.2}}, "eval": {"alpha": 0.05},
           "profiles": {"loose": {"gate": {"max_p_value": 1.0}}}}  # fmt: skip
    with pytest.warns(ParamsDeprecationWarning) as caught:
        params = load_params(write(tmp_path, raw))
    messages = sorted(str(w.message).split(": ", 1)[1] for w in caught)
    assert messages == [
        "eval.alpha is deprecated, use eval.significance_level (read until groupwise 0.2.0)",
        "lora.alpha is deprecated, use lora.lora_alpha (read until groupwise 0.2.0)",
        "train.advantage.alpha is deprecated, use train.advantage.seed_alpha (read until groupwise 0.2.0)",
    ]
    assert (params.lora.lora_alpha, params.train.advantage.seed_alpha, params.eval.significance_level) == (8, 0.2, 0.05)
    assert params.gate.require_significance is True
    with pytest.warns(ParamsDeprecationWarning, match="gate.max_p_value: 1.0 is deprecated, use gate.require_significance: false"):
        assert load_params(write(tmp_path, raw), "loose").gate.require_significance is False
    # a level below 1 moves to the one home of the level, the evaluation's
    with pytest.warns(ParamsDeprecationWarning, match="use eval.significance_level"):
        moved = load_params(write(tmp_path, {"gate": {"max_p_value": 0.05}}))
    assert (moved.eval.significance_level, moved.gate.require_significance) == (0.05, True)
    with (
        pytest.warns(ParamsDeprecationWarning),
        pytest.raises(ParamsError, match=r"eval.alpha \(0.05\) and eval.significance_level \(0.01\) both given"),
    ):
        load_params(write(tmp_path, {"eval": {"alpha": 0.05, "significance_level": 0.01}}))
    # study arms' overrides go through the same migration
    with pytest.warns(ParamsDeprecationWarning, match="overrides: lora.alpha"):
        assert with_overrides(params, {"lora": {"alpha": 4}}).lora.lora_alpha == 4


def test_engines_are_registry_names_checked_with_the_others(tmp_path):
    from components.contracts.naming import UnknownNameError
    from components.plugins import check_registered_names

    params = load_params(write(tmp_path, {"eval": {"engine": "sglang"}}))  # a str: the registry decides
    with pytest.raises(UnknownNameError, match=r"eval\.engine: unknown engine 'sglang'; known: \[.*'transformers'.*'vllm'"):
        check_registered_names(params)
    params = load_params(write(tmp_path, {"train": {"rollout": {"engine": "sglang"}}}))
    with pytest.raises(
        UnknownNameError, match=r"train\.rollout\.engine: unknown rollout engine 'sglang'; known: \['transformers', 'vllm'\]"
    ):
        check_registered_names(params)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"train": {"max_new_tokens": 100_000_000, "rollout": {"engine": "vllm"}}},
         "train.max_new_tokens (100000000) + data.max_prompt_tokens (400) exceed train.rollout.vllm.max_model_len (1024)"),
        ({"eval": {"max_new_tokens": 900}},
         "eval.max_new_tokens (900) + data.max_prompt_tokens (400) exceed eval.vllm.max_model_len (1024)"),
    ],
)  # fmt: skip
def test_generation_must_fit_the_vllm_engines_at_load(tmp_path, raw, expected):
    with pytest.raises(ParamsError, match=re.escape(expected)):
        load_params(write(tmp_path, raw))
    # an engine not in use does not bound it: the model's context does, where the model is loaded
    unbound = {"train": {"max_new_tokens": 100_000_000, "rollout": {"engine": "transformers"}}}
    assert load_params(write(tmp_path, unbound)).train.max_new_tokens == 100_000_000


# sections of params.yaml that are not defaults: its profiles, and the project's own studies
NOT_DEFAULTS = ("profiles", "study", "studies")


def _differences(shown, typed, where: str) -> list[str]:
    if isinstance(shown, dict) and isinstance(typed, dict):
        return [d for key in sorted(set(shown) | set(typed), key=str)
                for d in _differences(shown.get(key), typed.get(key), f"{where}.{key}" if where else str(key))]  # fmt: skip
    return [] if shown == typed else [f"{where}: params.yaml {shown!r}, components/config/ {typed!r}"]


def test_params_yaml_restates_the_typed_defaults_and_nothing_else():
    """components/config/ is the one source of every default: each value the sections of params.yaml
    set (not its profiles, not the project's studies) must equal the typed default, or a params file
    of one's own (which gets the typed defaults) would run other settings than the documented ones."""
    from components.config import Params

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    sections = {key: value for key, value in raw.items() if key not in NOT_DEFAULTS}
    shown = Params.model_validate(sections).model_dump(mode="json")  # keys params.yaml omits: typed defaults
    typed = Params().model_dump(mode="json")
    differences = _differences({k: shown[k] for k in sections}, {k: typed[k] for k in sections}, "")
    assert not differences, "params.yaml and the typed defaults disagree:\n" + "\n".join(differences)


def test_params_yaml_defaults_are_generated_from_the_typed_config():
    """Each default and its description are written once: params.yaml's defaults part is what
    `components.config.document` renders from the typed config (values, descriptions, section docs)."""
    from components.config.document import generated_part, render_defaults

    assert generated_part(ROOT / "params.yaml") == render_defaults(), "run `python -m components.config.document --write params.yaml`"


def test_the_generated_defaults_read_back_as_the_typed_defaults_with_their_descriptions():
    from components.config import Params
    from components.config.document import render_defaults

    text = "\n".join(render_defaults())
    assert Params.model_validate(yaml.safe_load(text)).model_dump(mode="json") == Params().model_dump(mode="json")
    assert "  lr: 3.0e-4                        # AdamW learning rate of the LoRA weights" in text
    assert "    dtype: auto" in text  # an engine dtype is resolved for the machine when read; the file says auto
    assert "# GRPO training:" in text  # a section's docstring above it


def test_the_drift_check_sees_a_changed_value():
    from components.config import Params

    typed = Params().model_dump(mode="json")
    changed = Params.model_validate({"train": {"max_new_tokens": 32}}).model_dump(mode="json")
    assert _differences(changed, typed, "") == ["train.max_new_tokens: params.yaml 32, components/config/ 512"]


def test_a_params_file_of_ones_own_gets_the_repository_defaults(tmp_path):
    """What the repository's default profile runs is what a bare params file runs."""
    from components.config import Params

    repository = load_params(ROOT / "params.yaml", "default").model_dump(mode="json", exclude={"paths", "tracking", *NOT_DEFAULTS})
    own = load_params(write(tmp_path, {}), "default").model_dump(mode="json", exclude={"paths", "tracking", *NOT_DEFAULTS})
    assert own == repository == Params().model_dump(mode="json", exclude={"paths", "tracking", *NOT_DEFAULTS})


def test_studies_live_in_their_own_files(tmp_path):
    """studies/<name>.yaml beside the params file: consistency.yaml is `study`, the others `studies.<name>`."""
    (tmp_path / "params.yaml").write_text("seed: 1\n")
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "consistency.yaml").write_text("profile: tiny\narms: {a: {description: first}}\n")
    (tmp_path / "studies" / "mine.yaml").write_text("profile: tiny\nreport: fairness\narms: {b: {seeds: [1, 2]}}\n")
    params = load_params(tmp_path / "params.yaml")
    assert list(params.study.arms) == ["a"] and params.study.profile == "tiny"
    assert params.studies["mine"].report == "fairness" and list(params.studies["mine"].arms) == ["b-s1", "b-s2"]
    assert {n: list(load_params(ROOT / "params.yaml").studies[n].arms)[:1] for n in ("gapo", "seed", "fairness")} == {
        "gapo": ["grpo-validity-s1"],
        "seed": ["grpo-correctness-s1"],
        "fairness": ["base"],
    }  # the repository's studies/
    (tmp_path / "params.yaml").write_text("seed: 1\nstudies: {mine: {arms: {}}}\n")
    with pytest.raises(ParamsError, match=r"mine.yaml: study 'mine' is also under `studies`"):
        load_params(tmp_path / "params.yaml")
    (tmp_path / "params.yaml").write_text("seed: 1\nstudy: {arms: {}}\n")
    with pytest.raises(ParamsError, match=r"consistency.yaml: the consistency study is also the `study` section"):
        load_params(tmp_path / "params.yaml")


def test_one_fingerprint_policy_for_saved_work():
    """`Params.fingerprint`: what a result depends on changes it; how often a run saves, where it runs
    and a field set to its own default do not; the training state and the study arm both use it."""
    from components.config import OPERATIONAL, Params
    from components.grpo.trainer import TRAINING_SECTIONS, run_fingerprint
    from components.study.domain import arm_fingerprint

    base = Params()
    sections = TRAINING_SECTIONS

    def changed(**train) -> Params:
        return base.model_copy(update={"train": base.train.model_copy(update=train)})

    assert base.fingerprint(sections) == Params().fingerprint(sections)
    assert changed(lr=2e-4).fingerprint(sections) != base.fingerprint(sections)
    assert changed(lr=base.train.lr).fingerprint(sections) == base.fingerprint(sections)  # a default set explicitly
    for name in OPERATIONAL["train"]:
        other = {"device": "cuda", "merge_lora_for_rollouts": True}.get(name, 7)
        assert changed(**{name: other}).fingerprint(sections) == base.fingerprint(sections), name
    assert base.fingerprint(sections, world_size=2) != base.fingerprint(sections, world_size=1)
    assert run_fingerprint(base, [], 1) == base.fingerprint(sections, groups=[], world_size=1)
    # a study arm: the gates, paths and tracking are not what its results depend on
    gated = base.model_copy(update={"gate": base.gate.model_copy(update={"max_length_growth": 0.5})})
    assert arm_fingerprint(gated, "train") == arm_fingerprint(base, "train") != arm_fingerprint(base, "decoding")
    assert arm_fingerprint(changed(lr=2e-4), "train") != arm_fingerprint(base, "train")


def test_a_changed_default_keeps_the_fingerprint_of_work_saved_under_the_former_one(monkeypatch):
    """FORMER_DEFAULTS: train.steps defaulted to 7 once and 4 now (a pretend change). Work saved then
    at 7 hashed without the field; it must still match, and a run at the new default must not."""
    from components.config import Params, migrations

    saved_then = Params().fingerprint({"train"})  # the field left out, as it was at its default
    monkeypatch.setattr(migrations, "FORMER_DEFAULTS", {**migrations.FORMER_DEFAULTS, ("train", "steps"): 7})
    at_former = Params.model_validate({"train": {"steps": 7}})
    assert at_former.fingerprint({"train"}) == saved_then
    assert Params().fingerprint({"train"}) != saved_then  # the new default is counted
    assert Params().fingerprint({"eval"}) == Params().fingerprint({"eval"})  # sections without the field are untouched
    vllm = Params.model_validate({"train": {"rollout": {"engine": "vllm"}}})
    assert vllm.fingerprint({"train"}) != at_former.fingerprint({"train"})


def test_the_knobs_of_an_engine_that_does_not_run_are_not_fingerprinted():
    """ENGINE_KNOBS: train.rollout.vllm counts only with vLLM rollouts, eval.vllm only with the vLLM
    evaluation engine; what an engine that runs is set to always counts."""
    from components.config import Params

    def fingerprint(train_engine: str, eval_engine: str, **knobs) -> str:
        raw = {"train": {"rollout": {"engine": train_engine, "vllm": knobs}}, "eval": {"engine": eval_engine, "vllm": knobs}}
        return Params.model_validate(raw).fingerprint({"train", "eval"})

    assert fingerprint("transformers", "transformers", kv_cache_gb=8) == fingerprint("transformers", "transformers")
    assert fingerprint("vllm", "transformers", kv_cache_gb=8) != fingerprint("vllm", "transformers")
    assert fingerprint("transformers", "vllm", kv_cache_gb=8) != fingerprint("transformers", "vllm")
    assert fingerprint("transformers", "transformers") != fingerprint("vllm", "transformers")


def test_a_study_arm_is_judged_only_as_another_arm_of_the_study():
    from components.config import StudyConfig

    arms = {"plant": {"seeds": [1, 2]}, "plant-2": {"seeds": [1, 2], "judged_as": "plant"}, "solo": {"judged_as": "plant-s1"}}
    study = StudyConfig(arms=arms)
    assert study.arms["plant-2-s2"].judged_as == "plant" and study.arms["solo"].judged_as == "plant-s1"
    for bad in ("nope", "plant-2"):  # not an arm; the arm's own family
        with pytest.raises(ValueError, match=rf"arms.plant-2-s1.judged_as: '{bad}' is not another arm of this study"):
            StudyConfig(arms={**arms, "plant-2": {"seeds": [1, 2], "judged_as": bad}})


def test_a_study_arm_cannot_change_the_groups_every_arm_shares():
    from components.config import StudyConfig

    assert StudyConfig(overrides={"data": {"max_chars": 900}}, arms={"a": {}}).overrides["data"] == {"max_chars": 900}
    for key, value in (("data", {"max_chars": 900}), ("paths", {"groups": "data/other"})):
        with pytest.raises(ValueError, match=rf"arms.a.overrides: \['{key}'\] are built once for every arm of a study"):
            StudyConfig(arms={"a": {"overrides": {key: value}}})
