"""The held-out instruction gate on a model taught to ignore a family: `groupwise evaluate` reports
that family's compliance falling, base vs tuned, and `groupwise register` refuses the version on it.

The project is the tiny profile with two families, lowercase (train) and "no commas" (held out).
The adapter is a real LoRA on the tiny model, trained by gradient descent to answer every prompt
with commas: whatever the instruction says, so it ignores the held-out family. It adapts lm_head as
well as attention: the random tiny model's logits stay near uniform through attention alone (its
final norm bounds the hidden state and its embeddings are small), so only lm_head can make it say
one thing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from flows.cli import app
from tests.conftest import make_project, seed_tiny_model

pytestmark = pytest.mark.integration

FAMILIES = "families:\n  - {id: 'change_case:english_lowercase', split: train}\n  - {id: 'punctuation:no_comma', split: heldout}\n"
IGNORED = "punctuation:no_comma"
COMMAS = ", , , , , , , , , , , ,"
runner = CliRunner()


def comma_adapter(params, prompts: list[str], out: Path, steps: int = 60) -> Path:
    """LoRA (params.lora) on the base model fitted to answer each prompt with `COMMAS` (AdamW on the
    answer's cross-entropy), saved as a groupwise checkpoint that names its base model."""
    from components.generation.sampling import chat_prompt
    from components.grpo.checkpoint import save_checkpoint
    from components.models.lora import attach_lora
    from components.models.provision import load_base_model, read_provenance

    base_dir = params.paths.base_model
    model, tok = load_base_model(base_dir)
    torch.manual_seed(0)  # LoRA's A is drawn from it
    model = attach_lora(model, params.lora)
    rows = []
    for prompt in prompts:
        context = tok(chat_prompt(tok, prompt), add_special_tokens=False).input_ids
        answer = tok(COMMAS, add_special_tokens=False).input_ids + [tok.eos_token_id]
        rows.append((torch.tensor(context + answer), len(context)))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for step in range(steps):
        ids, start = rows[step % len(rows)]
        labels = ids.clone()
        labels[:start] = -100
        loss = model(input_ids=ids[None], labels=labels[None]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.5, f"the adapter did not learn to answer with commas (loss {loss.item():.2f})"
    provenance = read_provenance(base_dir)
    save_checkpoint(out, model, {"base_model_sha256": provenance.weights_sha256, "base_model_source": "tiny"}, [])
    return out


def test_an_adapter_that_ignores_a_held_out_family_is_reported_and_refused(tmp_path, tiny_model_dir):
    from components.config.loading import load_params
    from components.data.io import groups_file, read_groups

    project = make_project(
        tmp_path / "p",
        "tiny",
        {"data.instructions": "families", "eval.max_consistency_groups": 12, "lora.target_modules": ["q_proj", "v_proj", "lm_head"]},
    )
    (project / "data" / "instructions" / "families.yaml").write_text(FAMILIES)
    seed_tiny_model(project, tiny_model_dir)
    path = str(project / "params.yaml")
    for step in ("build", "validate"):
        result = runner.invoke(app, [step, "--params", path])
        assert result.exit_code == 0, result.output
    params = load_params(project / "params.yaml")
    groups = read_groups(groups_file(params.paths.groups, "consistency"))
    heldout = [g for g in groups if g.split == "heldout"][: params.eval.max_consistency_groups]
    told = {g.instruction.family for g in heldout if g.instruction}
    assert told == {IGNORED, "change_case:english_lowercase"}  # both families are judged
    train_prompts = [m.text for g in groups if g.split == "train" for m in g.members][:12]
    comma_adapter(params, train_prompts, params.paths.checkpoints / "latest")

    result = runner.invoke(app, ["evaluate", "--params", path])
    assert result.exit_code == 0, result.output
    metrics = json.loads((params.paths.reports / "metrics.json").read_text())
    families = {f["family"]: f for f in metrics["instructions"]["families"]}
    ignored = families[IGNORED]
    assert ignored["split"] == "heldout" and ignored["n_groups"] == sum(g.instruction.family == IGNORED for g in heldout if g.instruction)
    assert ignored["base_strict"] >= 0.5 and ignored["tuned_strict"] == 0.0  # every tuned answer has a comma
    assert ignored["strict_change"] == pytest.approx(-ignored["base_strict"])
    assert ignored["strict_ci_high"] < 0 and {"base_loose", "tuned_loose"} <= set(ignored)
    drop = metrics["instructions"]["heldout"]["base_strict"] - metrics["instructions"]["heldout"]["tuned_strict"]
    assert drop > params.gate.max_heldout_instruction_drop

    result = runner.invoke(app, ["register", "--params", path])
    text = " ".join(result.output.split())
    assert result.exit_code == 0 and "gate refused" in text and "heldout_instructions" in text, result.output
    gates = {g["name"]: g for g in json.loads((params.paths.registry / "decision.json").read_text())["gates"]}
    assert gates["heldout_instructions"]["passed"] is False and gates["heldout_instructions"]["value"] == pytest.approx(drop)
