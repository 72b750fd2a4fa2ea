"""BBQ on the embedded model: how long one model's answers take, and what they are.

    .venv/bin/python benchmarks/bbq_scoring.py                            # the default subset (400 items), vLLM
    .venv/bin/python benchmarks/bbq_scoring.py --engine transformers --items 64

Opens the evaluation's engine (`--engine`, default eval.engine) on the base model in
eval.fairness.dtype, reads the letter log-probabilities of the fixed subset's first `--items` items
once to warm the engine on 8 of them, then times all of them (`components.evaluation.bbq`), and
prints items/s, the share of each answered letter and the base model's BBQ metrics
(`bbq_scores.point_scores`). An evaluation reads the same items twice (base and tuned).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    from components.config import load_params
    from components.evaluation.bbq import letter_logprobs, select_items
    from components.evaluation.bbq_scores import point_scores
    from components.fairness_benchmarks import BENCHMARKS
    from components.generation.engines import open_engine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    parser.add_argument("--engine", default=None, help="vllm | transformers (default: eval.engine)")
    parser.add_argument("--items", type=int, default=None, help="items of the fixed subset (default: eval.fairness.bbq_items)")
    args = parser.parse_args()

    params = load_params(args.params)
    cfg = params.eval.fairness.model_copy(update={"bbq_items": args.items or params.eval.fairness.bbq_items})
    bench = BENCHMARKS["bbq"]
    items = select_items(bench.load(params.paths.benchmarks / bench.name), cfg)
    turns = [bench.user_turn(c, q, o) for c, q, o in zip(items["context"], items["question"], items["options"])]
    engine, choice = open_engine(args.engine or params.eval.engine, params.paths.base_model, params.eval, cfg.dtype, params.seed)
    try:
        letter_logprobs(engine, bench, turns[:8], None)  # warm-up
        started = time.perf_counter()
        logprobs = letter_logprobs(engine, bench, turns, None)
        seconds = time.perf_counter() - started
    finally:
        engine.close()
    answers = logprobs.argmax(axis=1)
    report = {
        "engine": choice.used, "dtype": cfg.dtype, "items": len(turns), "seconds": round(seconds, 1),
        "items_per_s": round(len(turns) / seconds, 2), "load_average": os.getloadavg()[0], "cores": os.cpu_count(),
        "letters": {letter: float(np.mean(answers == i)) for i, letter in enumerate(bench.letters)},
        "base": point_scores(items, answers),
    }  # fmt: skip
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
