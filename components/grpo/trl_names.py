"""TRL's names for the trainer's step metrics (GRPOTrainer, TRL 1.16), logged beside groupwise's own.

groupwise keeps its names (dashboards, the study's train_log.csv); every step is also logged under
the name a TRL user looks for, so an MLflow chart of `reward` or `completions/mean_length` works
the same for both trainers. Metrics TRL names the same way (`kl`, `reward_std`, `grad_norm`) are
not repeated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

TRL_NAMES: dict[str, str] = {
    "reward_mean": "reward",
    "frac_groups_zero_reward_std": "frac_reward_zero_std",
    "completion_length_mean": "completions/mean_length",
    "completion_length_max": "completions/max_length",
    "truncated_share": "completions/clipped_ratio",
    "token_entropy": "entropy",
    "clip_ratio_low": "clip_ratio/low_mean",
    "clip_ratio_high": "clip_ratio/high_mean",
    "clip_ratio_region": "clip_ratio/region_mean",
    "mismatch/abs_logp_diff_mean": "sampling/sampling_logp_difference/mean",
    "mismatch/abs_logp_diff_max": "sampling/sampling_logp_difference/max",
    "lr": "learning_rate",
}
_PER_REWARD = re.compile(r"^reward/(?P<fn>.+)_(?P<stat>mean|std)$")  # reward/<fn>_mean -> rewards/<fn>/mean


def trl_name(name: str) -> str | None:
    """TRL's name for groupwise metric `name`, or None when TRL has none (or the same one)."""
    if name in TRL_NAMES:
        return TRL_NAMES[name]
    match = _PER_REWARD.match(name)
    return f"rewards/{match['fn']}/{match['stat']}" if match else None


def with_trl_names(metrics: Mapping[str, float]) -> dict[str, float]:
    """`metrics` plus a TRL-named copy of each metric TRL names differently."""
    out = dict(metrics)
    for name, value in metrics.items():
        alias = trl_name(name)
        if alias is not None and alias not in metrics:
            out[alias] = value
    return out
