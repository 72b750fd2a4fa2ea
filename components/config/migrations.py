"""Old params read by today's code: renamed keys (read with a warning until `RENAMED_KEYS_UNTIL`, then
refused as unknown keys), TRL's names (aliases, kept), and defaults that changed and rewards added to
the defaults (the fingerprint leaves them out at their former value; kept as long as saved work, such
as the study arms in results/, carries fingerprints made under them)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from components.config.base import ParamsError

# defaults that changed, with their former values: saved work left such a field out at its former
# default, so the fingerprint keeps leaving it out at that value and counts the new default. Removing
# an entry makes every saved arm or resumable state made under it count as changed: not before those
# arms are re-run.
FORMER_DEFAULTS: dict[tuple[str, ...], Any] = {
    ("train", "rollout", "engine"): "transformers",
    ("train", "rollout", "vllm", "dtype"): "bfloat16",
    ("eval", "dtype"): "bfloat16",
    # the paired-consistency objective became the default (the paper's reward is the `paper` profile)
    ("data", "max_chars"): 600,
    ("data", "max_prompt_tokens"): 256,
    ("data", "decision_groups"): None,
    ("train", "groups_per_step"): 2,
    ("train", "decision_groups_per_step"): None,
    ("train", "lr"): 1e-4,
    ("train", "decision_pairing", "weight"): 0.0,
    ("reward", "weights"): {"entropy_helpfulness": 0.4, "stability": 0.6},
    # bf16 autocast where native became the default (`auto`, resolved when read: fp32 where emulated)
    ("train", "precision"): "fp32",
    ("eval", "embedding_dtype"): "bfloat16",
    # the quick start's evaluation became smaller (`make run` in minutes; the studies' profiles keep the full size)
    ("eval", "max_consistency_groups"): 24,
    ("eval", "max_diversity_tasks"): 8,
    ("eval", "fairness", "races"): None,
    ("eval", "fairness", "bbq_items"): 400,
    # KV-cache blocks short enough for a prompt's samples to share its prefill (vLLM's own: 128 on CPU)
    ("eval", "vllm", "block_size"): None,
    ("train", "rollout", "vllm", "block_size"): None,
    # oneDNN for the frozen fp32 matmuls on AMD CPUs with AVX-512 (auto; MKL's before, whose sums run in another order)
    ("train", "cpu_matmul"): "torch",
    # forward chunks cut where they compute the fewest padded positions (every rows_per_forward rows before)
    ("train", "forward_chunks"): "consecutive",
}

# rewards added to the default weights: saved work never named them, so a weight of 0 (off) is left out
ADDED_DEFAULT_REWARDS: tuple[str, ...] = ("instruction_compliance",)


class ParamsDeprecationWarning(FutureWarning):
    """An old params.yaml key, still read until `RENAMED_KEYS_UNTIL`; the message names the new key."""


RENAMED_KEYS_UNTIL = "0.2.0"  # the release that removes RENAMED_KEYS and gate.max_p_value
# old key -> new key (dotted, inside params.yaml); read with a warning until RENAMED_KEYS_UNTIL
RENAMED_KEYS = {
    "lora.alpha": "lora.lora_alpha",
    "train.advantage.alpha": "train.advantage.seed_alpha",
    "eval.alpha": "eval.significance_level",
}
_MISSING = object()


def _parent(raw: dict, keys: Sequence[str]) -> dict | None:
    """The dict that holds `keys[-1]` in `raw` (None where a section on the way is missing)."""
    node: Any = raw
    for key in keys[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def _pop_dotted(raw: dict, dotted: str) -> Any:
    keys = dotted.split(".")
    node = _parent(raw, keys)
    return node.pop(keys[-1], _MISSING) if node is not None else _MISSING


def _set_dotted(raw: dict, dotted: str, value: Any, where: str, old: str) -> None:
    *parents, leaf = dotted.split(".")
    node = raw
    for key in parents:
        node = node.setdefault(key, {})
    if leaf in node and node[leaf] != value:
        raise ParamsError(f"{where}: {old} ({value!r}) and {dotted} ({node[leaf]!r}) both given; keep {dotted}")
    node[leaf] = value


# TRL's GRPOConfig names (TRL 1.16) for the knobs that mean the same here: accepted anywhere a key is
# (params files, profiles, studies, -S), read as groupwise's own
TRL_PARAM_ALIASES: dict[str, tuple[str, ...]] = {
    "train.learning_rate": ("train.lr",),
    "train.num_generations": ("train.samples_per_prompt",),
    "train.max_completion_length": ("train.max_new_tokens",),
    "train.epsilon": ("train.epsilon_low", "train.epsilon_high"),  # TRL: epsilon_high defaults to epsilon
    "train.lr_scheduler_type": ("train.lr_scheduler",),
}


def migrate_keys(raw: dict, where: str) -> dict:
    """`raw` (params.yaml, a profile or overrides) with the old keys of `RENAMED_KEYS` and
    `gate.max_p_value` moved to their new homes, each with a `ParamsDeprecationWarning` naming it.

    gate.max_p_value: 1 (off) becomes gate.require_significance: false; a level below 1 becomes
    eval.significance_level (the one home of the significance level) with require_significance: true.
    """
    import warnings

    raw = copy.deepcopy(raw)
    for alias, names in TRL_PARAM_ALIASES.items():
        value = _pop_dotted(raw, alias)
        if value is not _MISSING:
            for name in names:
                _set_dotted(raw, name, value, where, alias)
    for old, new in RENAMED_KEYS.items():
        value = _pop_dotted(raw, old)
        if value is not _MISSING:
            warnings.warn(
                f"{where}: {old} is deprecated, use {new} (read until groupwise {RENAMED_KEYS_UNTIL})",
                ParamsDeprecationWarning,
                stacklevel=3,
            )
            _set_dotted(raw, new, value, where, old)
    value = _pop_dotted(raw, "gate.max_p_value")
    if value is not _MISSING:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1:
            warnings.warn(f"{where}: gate.max_p_value: {value} is deprecated, use gate.require_significance: false",
                          ParamsDeprecationWarning, stacklevel=3)  # fmt: skip
            _set_dotted(raw, "gate.require_significance", False, where, "gate.max_p_value")
        else:
            warnings.warn(f"{where}: gate.max_p_value is deprecated, use eval.significance_level (the level of the "
                          "tests and the gate alike) and gate.require_significance: true", ParamsDeprecationWarning, stacklevel=3)  # fmt: skip
            _set_dotted(raw, "eval.significance_level", value, where, "gate.max_p_value")
            _set_dotted(raw, "gate.require_significance", True, where, "gate.max_p_value")
    return raw


def with_former_defaults(sections: dict) -> dict:
    """Saved whole sections (a study's frozen params) with every field of `FORMER_DEFAULTS` they lack
    set to its former value: a field added after they were written did not exist when they ran, so
    they ran as its former default does, not as today's."""
    sections = copy.deepcopy(sections)
    for path, former in FORMER_DEFAULTS.items():
        node = _parent(sections, path)
        if node is not None and path[-1] not in node:
            node[path[-1]] = copy.deepcopy(former)
    return sections
