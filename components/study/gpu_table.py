"""The GPU check's figures in docs/benchmarks.md, read from its committed JSON files in results/speed/.

Each `results/speed/gpu_check_*.json` is one run of `benchmarks/gpu_check.py` (its schema: `machine`,
`date`, `sections`). Every section that finished becomes one row: the agreement's worst |Δ log p| per
precision against the CPU's fp32, a training section's steady step (the steps after CUDA's warm-up)
by phase with its tokens/s and peak memory, torchrun's collectives and step, the decode section's
tokens/s per way of decoding. Skipped and failed sections are left out; the JSON keeps their
reasons. Nothing is typed into the doc by hand: a new run's JSON adds its rows at the next
`python -m components.study.headlines --write`.
"""

from __future__ import annotations

import json
from pathlib import Path

from components.formatting import number, typographic
from components.study.speed_table import SPEED

PATTERN = "gpu_check_*.json"
PHASES = (  # (steady-step key, name in the table)
    ("generation_s", "generation"),
    ("forward_backward_s", "forward/backward"),
    ("reference_s", "reference"),
    ("reward_s", "reward"),
    ("optimizer_s", "optimizer"),
)


def _cell(text: str) -> str:
    """Text for a markdown table cell: prose minus signs, its pipes (|Δ log p|) escaped."""
    return typographic(text).replace("|", "\\|")


def _seconds(value: float) -> str:
    return f"{number(value, 1 if value >= 0.1 else 2)} s"


def _agreement(section: dict) -> str:
    parts = [
        f"{name} max {variant['max_abs_dlogp']:.2g} (mean {variant['mean_abs_dlogp']:.2g})" for name, variant in section["variants"].items()
    ]
    worst_loss = max(variant["abs_dloss"] for variant in section["variants"].values())
    verdict = "pass" if section.get("pass") else "FAIL"
    return f"|Δ log p| in nats against CPU fp32: {', '.join(parts)}; |Δ loss| ≤ {worst_loss:.2g}: {verdict}"


def _steps(section: dict) -> str:
    """A training section's steady step: its seconds by phase, tokens/s, peak memory and size."""
    steady, size = section["steady"], section["size"]
    phases = ", ".join(f"{name} {_seconds(steady[key])}" for key, name in PHASES if key in steady)
    memory = section.get("memory", {})
    peak = f"peak {number(memory['peak_allocated_gib'], 1)} GiB allocated" if "peak_allocated_gib" in memory else ""
    if "peak_reserved_gib" in memory:
        peak += f" ({number(memory['peak_reserved_gib'], 1)} reserved)"
    per_step = f"{section['samples_per_step']} samples × ≤ {size['max_new_tokens']} tokens a step"
    figures = [f"{_seconds(steady['step_s'])} a step ({phases})", f"{steady['tokens_per_s']:,.0f} tokens/s", peak, per_step]
    return "; ".join(figure for figure in figures if figure)


def _torchrun(section: dict) -> str:
    worker = section["worker"]
    collectives = worker["collectives"]
    said = (
        f"{collectives['backend']}, world size {collectives['world_size']}: all-reduce, all-gather and DDP backward {collectives['status']}"
    )
    train = worker.get("train", {})
    return f"{said}; trainer {_steps(train)}" if train.get("status") == "ok" else said


def _decode(section: dict) -> str:
    """The decode section: tokens/s of each way of decoding one step's rollouts."""
    rates = ", ".join(f"{variant} {figures['tokens_per_s']:,.0f}" for variant, figures in section["variants"].items())
    return f"tokens/s: {rates}; {section['samples']} samples × {section['max_new_tokens']} tokens"


def section_result(name: str, section: dict) -> str | None:
    """One finished section's figures; None for a skipped or failed one (or the machine's record)."""
    if section.get("status") != "ok":
        return None
    if name == "agreement":
        return _agreement(section)
    if name.startswith(("train_", "plain_")):
        return _steps(section)
    if name.startswith("torchrun_"):
        return _torchrun(section)
    if name.startswith("decode_"):
        return _decode(section)
    return None


def gpu_table_lines(root: Path, links_from: str = "") -> list[str]:
    """The markdown table: a row per finished section of every committed GPU check, file by file."""
    lines = ["| run | section | result |", "|---|---|---|"]
    for path in sorted((Path(root) / SPEED).glob(PATTERN)):
        check = json.loads(path.read_text())
        machine = check["machine"]
        run = f"{machine.get('gpu') or check['device']} · {machine['commit']} · {check['date'][:10]} · [JSON]({links_from}{SPEED / path.name})"
        for name, section in check["sections"].items():
            result = section_result(name, section)
            if result is not None:
                lines.append(f"| {run} | {name} | {_cell(result)} |")
    if len(lines) == 2:
        lines.append("| no committed GPU check | | |")
    return lines


if __name__ == "__main__":
    print("\n".join(gpu_table_lines(Path("."))))
