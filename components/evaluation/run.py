"""Batch evaluation of base vs tuned on the held-out groups, same prompts and same seeds.

Both models see exactly the same chat-templated prompts and sampling seeds, so per-group
differences come from the adapter alone. Returns one row per group (see `records`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from components.config import Params
from components.data.normalizers import get_normalizer
from components.data.schema import PromptGroup
from components.evaluation.records import consistency_record, diversity_record
from components.generation.sampling import Completion, SamplingConfig, TransformersEngine
from components.grpo.checkpoint import ADAPTER_DIR, read_state
from components.models.lora import load_adapter
from components.models.provision import load_base_model, read_provenance


class EvaluationInputError(ValueError):
    """The evaluation set or the checkpoint cannot be evaluated (the message says why)."""


@dataclass
class EvaluationFrames:
    consistency: pd.DataFrame
    diversity: pd.DataFrame
    samples: pd.DataFrame  # one row per generated sample: group, variant, model, text


def interleave_domains(groups: list[PromptGroup]) -> list[PromptGroup]:
    """Round-robin over domains (in order of first appearance), keeping file order inside each."""
    by_domain: dict[str, list[PromptGroup]] = {}
    for group in groups:
        by_domain.setdefault(group.domain, []).append(group)
    queues = list(by_domain.values())
    out: list[PromptGroup] = []
    while any(queues):
        for queue in queues:
            if queue:
                out.append(queue.pop(0))
    return out


def select_heldout(groups: list[PromptGroup], params: Params) -> tuple[list[PromptGroup], list[PromptGroup]]:
    """Held-out consistency groups balanced across domains, and one phrasing per diversity task."""
    heldout = [g for g in groups if g.split == "heldout"]
    consistency = interleave_domains([g for g in heldout if g.task == "consistency"])
    consistency = consistency[: params.eval.max_consistency_groups]
    first_phrasing: dict[str, PromptGroup] = {}
    for group in heldout:
        if group.task == "diversity":
            first_phrasing.setdefault(group.domain, group)
    diversity = list(first_phrasing.values())[: params.eval.max_diversity_tasks]
    if not consistency:
        raise EvaluationInputError("no held-out consistency groups to evaluate")
    return consistency, diversity


def check_checkpoint(checkpoint_dir: Path, base_model_dir: Path) -> Path:
    """The adapter folder, after checking it was trained on this base model."""
    checkpoint_dir = Path(checkpoint_dir)
    adapter = checkpoint_dir / ADAPTER_DIR
    if not (adapter / "adapter_model.safetensors").is_file():
        raise EvaluationInputError(f"{checkpoint_dir}: missing checkpoint (no {ADAPTER_DIR}/adapter_model.safetensors)")
    state = read_state(checkpoint_dir)
    base = read_provenance(base_model_dir)
    if base is None:
        raise EvaluationInputError(f"{base_model_dir}: not a provisioned base model")
    if state.get("base_model_sha256") != base.weights_sha256:
        raise EvaluationInputError(
            f"{checkpoint_dir}: adapter was trained on another base model "
            f"({state.get('base_model_source')}, weights sha256 {state.get('base_model_sha256')}) than the one in "
            f"{base_model_dir} ({base.source}, weights sha256 {base.weights_sha256})"
        )
    return adapter


def _by_variant(group: PromptGroup, outputs: list[list[Completion]]) -> dict[str, list[str]]:
    return {m.variant_id: [c.text for c in out] for m, out in zip(group.members, outputs)}


def evaluate_models(
    params: Params, groups: list[PromptGroup], base_model_dir: Path, checkpoint_dir: Path, show_progress: bool = True
) -> EvaluationFrames:
    consistency, diversity = select_heldout(groups, params)
    adapter = check_checkpoint(checkpoint_dir, base_model_dir)
    selected = consistency + diversity
    prompts = [m.text for g in selected for m in g.members]
    cfg = params.eval
    sampling = SamplingConfig(
        n=cfg.samples_per_prompt,
        max_new_tokens=cfg.max_new_tokens,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        seed=params.seed,
    )
    model, tokenizer = load_base_model(base_model_dir, params.model.dtype)
    base_out = TransformersEngine(model, tokenizer, cfg.batch_size, show_progress).generate(prompts, sampling, "eval base")
    tuned_model = load_adapter(model, adapter)
    tuned_out = TransformersEngine(tuned_model, tokenizer, cfg.batch_size, show_progress).generate(
        prompts, sampling, "eval tuned"
    )

    rows_c, rows_d, samples, cursor = [], [], [], 0
    for group in selected:
        k = len(group.members)
        base_g, tuned_g = base_out[cursor : cursor + k], tuned_out[cursor : cursor + k]
        cursor += k
        for member, b, t in zip(group.members, base_g, tuned_g):
            for model_name, outs in (("base", b), ("tuned", t)):
                samples += [
                    {"group_id": group.group_id, "variant_id": member.variant_id, "model": model_name, "text": c.text}
                    for c in outs
                ]
        if group.task == "consistency":
            rows_c.append(
                consistency_record(group, _by_variant(group, base_g), _by_variant(group, tuned_g), params.reward.entropy_max_words)
            )
        else:
            normalize = get_normalizer(group.answer_normalizer or "casefold_match")
            rows_d.append(
                diversity_record(group, [c.text for c in base_g[0]], [c.text for c in tuned_g[0]], normalize)
            )
    return EvaluationFrames(pd.DataFrame(rows_c), pd.DataFrame(rows_d), pd.DataFrame(samples))
