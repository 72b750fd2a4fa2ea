"""Did a calibration arm learn to follow its instructions while it trained? Per step: the instruction families
its free-text groups carried, the share of their rollouts that followed (train_log.csv), and the share the
base model's per-family strict compliance predicts for those families; then per block of steps, the
excess of the one over the other.

    .venv/bin/python benchmarks/following_in_training.py results/instruction-calibration/arms/following-0.6

Why the prediction: a step's share depends on which families it drew (no comma: 0.05 for the base model,
a title: 0.97), so raw block means compare different mixes of families; the excess over what the base
model does with the same families is what training added. The prediction reads the base model's strict
compliance per family from the arm's own evaluation (metrics.json, `instructions.families`: train groups
at the evaluation's temperature, not the rollouts' exact prompts: an estimate). The step's groups come
from the trainer's own schedule (`grpo.trainer.group_schedule`, seeded) over the study's built groups
(`groupwise build` with the study's params first, e.g. `groupwise study --study instruction-calibration`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def step_table(arm: Path, params_file: Path) -> pd.DataFrame:
    """One row per logged step: families, followed, base_predicts, excess."""
    from components.data.selection import training_groups
    from components.grpo.trainer import group_schedule
    from components.study.domain import arm_params, load_study
    from components.study.instruction_calibration_report import FOLLOWING

    params, study = load_study(params_file, arm.parent.parent.name)
    params = arm_params(params, study, arm.name)
    cfg = params.train
    schedule = group_schedule(training_groups(params.paths.groups, cfg), cfg.groups_per_step, cfg.steps, params.seed,
                              decision_per_step=cfg.decision_groups_per_step)  # fmt: skip
    base = {f["family"]: f["base_strict"] for f in json.loads((arm / "metrics.json").read_text())["instructions"]["families"]}
    log = pd.read_csv(arm / "train_log.csv")
    rows = []
    for step, groups in enumerate(schedule[: len(log)], start=1):
        families = [g.instruction.family for g in groups if g.decision is None and g.instruction is not None]
        predicted = sum(base[f] for f in families) / len(families) if families else float("nan")
        rows.append({"step": step, "families": ", ".join(f.split(":")[-1] for f in families),
                     "followed": log[FOLLOWING].iloc[step - 1], "base_predicts": predicted})  # fmt: skip
    table = pd.DataFrame(rows)
    table["excess"] = table["followed"] - table["base_predicts"]
    return table


def block_table(steps: pd.DataFrame, size: int) -> pd.DataFrame:
    """Means of followed, base_predicts and excess per block of `size` steps."""
    blocks = (steps["step"] - 1) // size
    out = steps.groupby(blocks)[["followed", "base_predicts", "excess"]].mean()
    out.index = [f"steps {b * size + 1}-{min((b + 1) * size, int(steps['step'].max()))}" for b in out.index]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arm", type=Path, help="a finished calibration arm's folder (results/<study>/arms/<arm>)")
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    parser.add_argument("--block", type=int, default=10, help="steps a block")
    args = parser.parse_args()
    steps = step_table(args.arm.resolve(), args.params)
    print(steps.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    print()
    shares = {"followed": "{:.3f}".format, "base_predicts": "{:.3f}".format, "excess": "{:+.3f}".format}
    print(block_table(steps, args.block).to_string(formatters=shares))


if __name__ == "__main__":
    main()
