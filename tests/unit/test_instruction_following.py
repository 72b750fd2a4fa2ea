"""Instruction following in an evaluation: each family's compliance base vs tuned, strict and loose,
pooled over the train and the held-out families with CIs, words where nothing is asked, and the gate
that refuses a version less obedient to the held-out families."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from components.config import GateConfig
from components.contracts.groups import InstructionSpec
from components.contracts.summary import InstructionSummary
from components.evaluation.instruction_following import instruction_rows, summarize_instructions
from components.release.gate import GATES, evaluate_gates
from components.release.gate_spec import judge
from tests.grpo_data import gender_group

LOWER = InstructionSpec(family="change_case:english_lowercase", kwargs={}, text="Answer in lowercase letters only.")
NO_COMMA = InstructionSpec(family="punctuation:no_comma", kwargs={}, text="Do not use any commas.")
SPLITS = {LOWER.family: "train", NO_COMMA.family: "heldout"}


def told(i: int, spec: InstructionSpec | None, domain: str = "travel"):
    group = gender_group(
        f"{domain}-{i}", lambda g: f"I am a {g}. Where should I go?" + (f" {spec.text}" if spec else ""), domain, "heldout"
    )
    return group.model_copy(update={"instruction": spec})


def frame(groups, answers: dict[str, callable]) -> pd.DataFrame:
    """Three samples a member and model: answers[model](group, j)."""
    rows = [{"group_id": g.group_id, "task": "consistency", "variant_id": m.variant_id, "model": model, "sample": j,
             "text": answers[model](g, j), "n_tokens": 3, "mean_logprob": -1.0, "truncated": False}
            for g in groups for m in g.members for model in ("base", "tuned") for j in range(3)]  # fmt: skip
    return pd.DataFrame(rows)


def test_each_family_is_scored_by_its_checker_and_pooled_by_split_with_cis():
    groups = [told(i, LOWER) for i in range(4)] + [told(i, NO_COMMA, "food") for i in range(4)] + [told(i, None, "open") for i in range(3)]
    # base: lowercase always, commas never; tuned: keeps lowercase, uses commas in 2 of 3 samples
    answers = {
        "base": lambda g, j: "go to rome, it is lovely." if g.instruction is None else "go to rome and enjoy it.",
        "tuned": lambda g, j: ("Go to Rome, and then Paris, and then home. It is lovely there." if g.instruction is None
                               else "go to rome and enjoy it." if g.instruction == LOWER or j == 0 else "go to rome, then paris."),
    }  # fmt: skip
    rows, free = instruction_rows(groups, frame(groups, answers), SPLITS)
    assert (
        list(rows["family"]) == [LOWER.family] * 4 + [NO_COMMA.family] * 4 and list(rows["family_split"]) == ["train"] * 4 + ["heldout"] * 4
    )
    assert (rows["base_strict"] == 1.0).all() and (rows.loc[rows["family"] == LOWER.family, "tuned_strict"] == 1.0).all()
    assert np.allclose(rows.loc[rows["family"] == NO_COMMA.family, "tuned_strict"], 1 / 3)
    assert list(free["group_id"]) == ["open-0", "open-1", "open-2"] and (free["tuned_words"] > free["base_words"]).all()

    summary = summarize_instructions(rows, free, n_resamples=200, confidence=0.95, seed=1)
    assert summary.train.family == "all train families" and summary.train.strict_change == 0.0
    assert summary.heldout.n_groups == 4 and summary.heldout.strict_change == pytest.approx(-2 / 3)
    assert summary.heldout.strict_ci_low == summary.heldout.strict_ci_high == pytest.approx(-2 / 3)  # every group alike
    assert [f.family for f in summary.families] == sorted(SPLITS) and summary.uninstructed["n_groups"] == 3
    assert summary.uninstructed["tuned_words"] > summary.uninstructed["base_words"]
    assert InstructionSummary.model_validate(summary.to_dict()) == summary  # metrics.json's `instructions`, read back


def test_loose_forgives_what_ifeval_s_loose_score_forgives():
    groups = [told(0, LOWER), told(1, LOWER)]
    answers = {"base": lambda g, j: "Sure:\nall lower case here.", "tuned": lambda g, j: "all lower case here."}
    rows, _ = instruction_rows(groups, frame(groups, answers), SPLITS)
    assert (rows["base_strict"] == 0.0).all() and (rows["base_loose"] == 1.0).all() and (rows["tuned_loose"] == 1.0).all()


def metrics_with(heldout: dict | None) -> dict:
    return {"instructions": {"families": [], "heldout": heldout}} if heldout is not None else {}


@pytest.mark.parametrize(("base", "tuned", "passed"), [(0.60, 0.58, True), (0.60, 0.55, True), (0.60, 0.54, False), (0.30, 0.45, True)])
def test_the_gate_refuses_a_drop_on_the_held_out_families_beyond_its_bound(base, tuned, passed):
    spec = GATES["heldout_instructions"]
    result = judge(spec, metrics_with({"base_strict": base, "tuned_strict": tuned, "n_groups": 40}), GateConfig(), None)
    assert result.passed is passed and result.value == pytest.approx(base - tuned)
    assert "held-out instruction families" in result.reason and "40 groups" in result.reason


def test_the_gate_passes_with_a_note_without_held_out_families_and_is_off_when_null():
    spec = GATES["heldout_instructions"]
    absent = judge(spec, {}, GateConfig(), None)
    assert absent.passed and "no held-out instruction family evaluated" in absent.reason
    off = judge(
        spec, metrics_with({"base_strict": 0.9, "tuned_strict": 0.1, "n_groups": 9}), GateConfig(max_heldout_instruction_drop=None), None
    )
    assert off.passed and "gate off" in off.reason
    broken = judge(spec, metrics_with({"base_strict": 0.9, "n_groups": 9}), GateConfig(), None)
    assert not broken.passed and "instructions.heldout.base_strict" in broken.reason
    assert "heldout_instructions" in {r.name for r in evaluate_gates({}, GateConfig()).results}


def test_an_evaluation_of_instructed_groups_reports_every_family_and_the_gate_reads_it(
    tiny_model_dir, tmp_path_factory, stand_in_embeddings
):
    """evaluate_models on groups given a train and a held-out family (the tiny model, its LoRA): the
    frames hold a row per group whose compliance is the checker's on those very samples, and
    metrics.json's `instructions` and the held-out gate follow from them."""
    from components.config import FairnessConfig, Params
    from components.evaluation.run import evaluate_models, evaluation_summary
    from components.instructions.ifeval import follows
    from tests.unit.test_eval_inputs import tiny_checkpoint

    families = tmp_path_factory.mktemp("families") / "families.yaml"
    families.write_text(f"families: [{{id: '{LOWER.family}', split: train}}, {{id: '{NO_COMMA.family}', split: heldout}}]\n")
    params = Params()
    small = {
        "engine": "transformers",
        "dtype": "float32",
        "samples_per_prompt": 2,
        "max_new_tokens": 6,
        "fairness": FairnessConfig(benchmarks=[]),
    }
    params = params.model_copy(update={"eval": params.eval.model_copy(update=small),
                                       "paths": params.paths.model_copy(update={"instruction_families": families, "base_outputs": None})})  # fmt: skip
    groups = [told(0, LOWER), told(1, LOWER), told(2, NO_COMMA, "food"), told(3, NO_COMMA, "food")]
    frames = evaluate_models(params, groups, tiny_model_dir, tiny_checkpoint(tmp_path_factory, tiny_model_dir, 0.5))
    rows = frames.instructions.set_index("group_id")
    assert rows["family_split"].to_dict() == {"travel-0": "train", "travel-1": "train", "food-2": "heldout", "food-3": "heldout"}
    for g in groups:
        for model in ("base", "tuned"):
            texts = frames.samples[(frames.samples["group_id"] == g.group_id) & (frames.samples["model"] == model)]["text"]
            strict = np.mean([follows(g.instruction.family, {}, g.members[0].text, str(t))[0] for t in texts.fillna("")])
            assert rows.loc[g.group_id, f"{model}_strict"] == pytest.approx(strict)
    summary = evaluation_summary(frames, params, None)
    assert summary.instructions.heldout.n_groups == 2 and summary.instructions.train.n_groups == 2
    assert summary.instructions.heldout.base_strict == pytest.approx(rows.loc[["food-2", "food-3"], "base_strict"].mean())
    decision = evaluate_gates(summary, GateConfig(max_heldout_instruction_drop=0.0))
    gate = next(r for r in decision.results if r.name == "heldout_instructions")
    drop = summary.instructions.heldout.base_strict - summary.instructions.heldout.tuned_strict
    assert gate.value == pytest.approx(drop) and gate.passed is (drop <= 1e-12)
