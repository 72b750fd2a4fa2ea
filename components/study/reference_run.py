"""The README's reference `make run`, read from its committed copy in `results/reference-run/`
(`metrics.json` and `dvc.lock` of that run) and the run's console log with its wall clock
(`results/speed/make_run.txt`).

No run writes there: a user's `make run` writes its own reports to `data/reports/` and its own
`dvc.lock`, where DVC expects them (`dvc metrics diff` compares them with HEAD), and the README's
figures stay those of the reference. Only the explicit command copies a run into the reference:

    python -m components.study.reference_run --refresh   # data/reports/metrics.json and dvc.lock -> results/reference-run/

The copied `dvc.lock` records the params the run was trained and registered with; the gate verdict
is those recorded gates applied to its evaluation (`components.release.gate.evaluate_gates`), each
refused gate with its value against its threshold. Nothing here runs a model.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import textwrap
from pathlib import Path

import yaml

from components.config import GateConfig
from components.formatting import duration, number, percent, typographic
from components.release.gate import evaluate_gates

REFERENCE = Path("results/reference-run")
METRICS = REFERENCE / "metrics.json"  # a copy of the reference run's data/reports/metrics.json
LOCK = REFERENCE / "dvc.lock"  # a copy of the dvc.lock that run left
RUN_FILES = {Path("data/reports/metrics.json"): METRICS, Path("dvc.lock"): LOCK}  # where a run writes -> the reference's copy
TIMING = Path("results/speed/make_run.txt")  # `make run`'s console summary and /usr/bin/time's report, one run
# the same for other CPU kinds, each quoted beside the first where it is committed
OTHER_TIMINGS = (Path("results/speed/make_run_avx2.txt"),)
WIDTH = 100  # the README's prose width
PAPER_WEIGHTS = {"entropy_helpfulness", "stability"}  # the paper's reward: a·H_norm + b·F_norm


def _stage_params(lock: dict, stage: str) -> dict:
    return lock["stages"][stage]["params"]["params.yaml"]


def objective(train_params: dict) -> str:
    """The objective a run was trained with, in words, from its recorded `reward` and `train` params."""
    weights = {k: v for k, v in ((train_params.get("reward") or {}).get("weights") or {}).items() if v}
    pairing = ((train_params.get("train") or {}).get("decision_pairing") or {}).get("weight") or 0
    listed = ", ".join(f"{k} {v:g}" for k, v in weights.items())
    if set(weights) == PAPER_WEIGHTS and not pairing:
        return f"the paper's reward ({listed})"
    return f"the reward {listed}" + (f" with the pairing term λ {pairing:g}" if pairing else "")


def _change(value: float) -> str:
    return typographic(percent(value, signed=True))


def _refusal(reason: str) -> str:
    """`name` (value against threshold) of a failed gate's reason, "name: words value > threshold (detail)"."""
    name, _, rest = reason.partition(": ")
    found = re.search(r"(q = )?-?[\d.]+ [<>]=? -?[\d.]+", rest)
    return f"`{name}` ({(found[0] if found else rest.split(' (', 1)[0]).replace('-', '−')})"


def log_groups(log_name: str | Path, pattern: str, text: str) -> tuple[str, ...]:
    """The groups of `pattern`'s first match in a committed log's `text` (`^` at any line); a ValueError
    naming the log and the pattern when no line matches."""
    found = re.search(pattern, text, re.MULTILINE)
    if found is None:
        raise ValueError(f"{log_name}: no line matches {pattern!r}")
    return found.groups()


def make_run_seconds(log_name: str | Path, log: str) -> float:
    """`make run`'s wall clock in a committed log (/usr/bin/time's line); a log whose header says
    "installation included: N s" has that time taken off."""
    hours, minutes, seconds = log_groups(log_name, r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", log)
    installation = re.search(r"^#.*installation included: (\d+) s", log, re.MULTILINE)
    return int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds) - (int(installation[1]) if installation else 0)


def _timing(root: Path, name: Path, links_from: str) -> str:
    """One committed `make run` log as "N min S s on a <machine> (training …, evaluation …; log)"."""
    log = (Path(root) / name).read_text()
    (machine,) = log_groups(name, r"^# [\d-]+, ([^;]+);", log)
    (train,) = log_groups(name, r"^\s*train: .* in (\d+) s;", log)
    (evaluate,) = log_groups(name, r"^\s*time: engine start .*\(of (\d+) s\)", log)
    return (
        f"{duration(make_run_seconds(name, log))} on a {machine} (training {train} s, evaluation {evaluate} s; [log]({links_from}{name}))"
    )


def timing_sentence(root: Path, links_from: str = "") -> str:
    """How long the committed `make run` took after installation, with its training and evaluation, on
    each CPU kind whose log is committed (`TIMING` first, then `OTHER_TIMINGS`)."""
    others = [_timing(root, name, links_from) for name in OTHER_TIMINGS if (Path(root) / name).is_file()]
    return f"`make run` after installation took {' and '.join([_timing(root, TIMING, links_from), *others])}."


def reference_run_lines(root: Path, links_from: str = "") -> list[str]:
    """The generated lines of the README's "What `make run` shows": how long the run in git took, what
    it was trained with, its gap, and the verdict its recorded gates give (`dvc.lock`'s register params)."""
    root = Path(root)
    lock = yaml.safe_load((root / LOCK).read_text())
    metrics = json.loads((root / METRICS).read_text())
    c = metrics["consistency"]
    gap = c["tuned_mean_gap"] / c["base_mean_gap"] - 1
    decision = evaluate_gates(metrics, GateConfig(**_stage_params(lock, "register")["gate"]))
    verdict = "pass them all" if decision.passed else f"refuse it: {', '.join(_refusal(r) for r in decision.reasons())}"
    sentence = (
        f"{timing_sentence(root, links_from)} The reference run (`results/reference-run/`) was trained with "
        f"{objective(_stage_params(lock, 'train'))}; on its {c['n_groups']} held-out groups the gap went "
        f"{number(c['base_mean_gap'])} → {number(c['tuned_mean_gap'])} ({_change(gap)}) and the gates its `dvc.lock` records {verdict}."
    )
    return textwrap.wrap(sentence, WIDTH, break_on_hyphens=False)


def refresh(root: Path) -> list[Path]:
    """Copy the run in `root`'s `data/reports/metrics.json` and `dvc.lock` into the reference; the copies."""
    root = Path(root)
    missing = [str(source) for source in RUN_FILES if not (root / source).is_file()]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)}: no run to take as the reference; run `make run` first")
    (root / REFERENCE).mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copy2(root / source, root / target)) for source, target in RUN_FILES.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The README's reference `make run` (module docstring).")
    parser.add_argument("--refresh", action="store_true", help="take the run in data/reports/ and dvc.lock as the reference")
    parser.add_argument("--root", type=Path, default=Path("."), help="the project root")
    args = parser.parse_args(argv)
    if not args.refresh:
        print("\n".join(reference_run_lines(args.root)))
        return 0
    try:
        copies = refresh(args.root)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"the reference run is now {', '.join(map(str, copies))}: run `python -m components.study.headlines --write`")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
