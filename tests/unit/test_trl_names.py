"""Every step metric TRL names differently is also logged under TRL's name (GRPOTrainer, TRL 1.16)."""

from components.grpo.trl_names import trl_name, with_trl_names


def test_trl_names_by_hand():
    step = {"reward_mean": 0.9, "reward_std": 0.1, "kl": 0.02, "frac_groups_zero_reward_std": 0.5,
            "completion_length_mean": 120.0, "truncated_share": 0.01, "reward/stability_mean": 0.8,
            "reward/stability_std": 0.05, "lr": 1e-4, "grad_norm": 0.3}  # fmt: skip
    out = with_trl_names(step)
    assert {k: out[k] for k in out if k not in step} == {
        "reward": 0.9, "frac_reward_zero_std": 0.5, "completions/mean_length": 120.0,
        "completions/clipped_ratio": 0.01, "rewards/stability/mean": 0.8, "rewards/stability/std": 0.05,
        "learning_rate": 1e-4,
    }  # fmt: skip
    assert all(out[k] == v for k, v in step.items())  # groupwise's own names stay
    assert trl_name("kl") is None and trl_name("grad_norm") is None  # same name in TRL: no copy


def test_every_documented_trl_metric_is_logged():
    """docs/training.md's name table and the aliases agree."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text()
    for ours, theirs in [("reward_mean", "reward"), ("frac_groups_zero_reward_std", "frac_reward_zero_std"),
                         ("completion_length_mean", "completions/mean_length"), ("truncated_share", "completions/clipped_ratio"),
                         ("token_entropy", "entropy"), ("clip_ratio_low", "clip_ratio/low_mean")]:  # fmt: skip
        assert f"`{ours}`" in doc and theirs in doc
        assert trl_name(ours) == theirs
