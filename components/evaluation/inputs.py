"""What an evaluation reads, checked before anything is loaded: the evaluation set (the held-out
consistency groups balanced across domains, one phrasing per diversity task, each scorable) and the
checkpoint (complete, and trained on this base model's weights). Each failure is one
`EvaluationInputError` naming the group or the folder."""

from __future__ import annotations

from pathlib import Path

from components.config import Params
from components.contracts.checkpoint import ADAPTER_CONFIG, ADAPTER_DIR, ADAPTER_WEIGHTS, STATE_FILE, read_state
from components.data.normalizers import DEFAULT_NORMALIZER, get_normalizer
from components.data.schema import PromptGroup
from components.data.selection import select_groups
from components.evaluation.records import EvaluationInputError, headline_axis
from components.models.provision import ModelProvisionError, verified_base_model


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


def select_eval_groups(groups: list[PromptGroup], params: Params) -> tuple[list[PromptGroup], list[PromptGroup]]:
    """The evaluation set: consistency groups of `eval.split` (held out, unless a calibration asks
    for the train split) balanced across domains, and one phrasing per diversity task."""
    split = params.eval.split
    in_split = [g for g in groups if g.split == split]
    domains = params.eval.domains
    consistency = interleave_domains(select_groups(in_split, ["consistency"], domains, "eval.domains"))
    consistency = consistency[: params.eval.max_consistency_groups]
    first_phrasing: dict[str, PromptGroup] = {}
    for group in in_split:
        if group.task == "diversity":
            first_phrasing.setdefault(group.domain, group)
    diversity = list(first_phrasing.values())[: params.eval.max_diversity_tasks]
    if not consistency:
        raise EvaluationInputError(
            f"empty evaluation set: no consistency groups in split {split!r} among {len(groups)} groups ({len(in_split)} in it)"
        )
    check_eval_set(consistency + diversity, params.eval.gap_axis)
    return consistency, diversity


def check_eval_set(groups: list[PromptGroup], gap_axis: str | None = None) -> None:
    """Every selected group can be scored: variants to compare (on `gap_axis`, eval.gap_axis, when
    set), a valid set and a known normaliser."""
    for group in groups:
        where = f"evaluation set, group {group.group_id!r}"
        if group.task == "consistency" and len(group.members) < 2:
            raise EvaluationInputError(f"{where}: a consistency group needs at least 2 variants, has {len(group.members)}")
        if group.task == "consistency" and gap_axis is not None:
            headline_axis(group, gap_axis)
        if group.task == "diversity":
            if not group.valid_answers:
                raise EvaluationInputError(f"{where}: diversity task without valid_answers")
            try:
                get_normalizer(group.answer_normalizer or DEFAULT_NORMALIZER)
            except ValueError as exc:
                raise EvaluationInputError(f"{where}: {exc}") from exc
        if any(not m.text.strip() for m in group.members):
            raise EvaluationInputError(f"{where}: a variant has an empty prompt")


def check_checkpoint(checkpoint_dir: Path, base_model_dir: Path) -> Path:
    """The adapter folder, after checking it is complete and was trained on this base model."""
    checkpoint_dir, base_model_dir = Path(checkpoint_dir), Path(base_model_dir)
    if not checkpoint_dir.is_dir():
        raise EvaluationInputError(f"{checkpoint_dir}: missing checkpoint (no such folder); run `groupwise train` first")
    adapter = checkpoint_dir / ADAPTER_DIR
    for name in (ADAPTER_WEIGHTS, ADAPTER_CONFIG):
        if not (adapter / name).is_file():
            raise EvaluationInputError(f"{checkpoint_dir}: incomplete checkpoint (no {ADAPTER_DIR}/{name})")
    try:
        state = read_state(checkpoint_dir)
    except (FileNotFoundError, ValueError) as exc:
        raise EvaluationInputError(f"{checkpoint_dir}: unreadable {STATE_FILE}: {exc}") from exc
    try:  # the weights file itself, not only what its folder records
        base = verified_base_model(base_model_dir)
    except ModelProvisionError as exc:
        raise EvaluationInputError(str(exc)) from exc
    if state.get("base_model_sha256") != base.weights_sha256:
        raise EvaluationInputError(
            f"{checkpoint_dir}: adapter was trained on another base model "
            f"({state.get('base_model_source')}, weights sha256 {state.get('base_model_sha256')}) than the one in "
            f"{base_model_dir} ({base.source}, weights sha256 {base.weights_sha256})"
        )
    return adapter
