"""How the helpfulness reward depends on answer length, measured on the TRAIN split only.

    .venv/bin/python benchmarks/helpfulness_length.py            # 40 train groups x variants x K = 6
    .venv/bin/python benchmarks/helpfulness_length.py --groups 8 # quicker look

Samples the base model (vLLM, the evaluation engine) on the consistency prompts of the first
--groups *training* groups at the training temperature and length (the `--profile` profile of
params.yaml), then reports the answers' length in words (quantiles, truncated share) and, for each
W_max and each `reward.entropy_scope`, the Spearman correlation between H_norm and length, the
mean H_norm of the short half and the long half of the answers, and the share of answers at the
ceiling (H_norm >= 0.99, no reward signal left). The held-out groups are never read: this is how
`reward.entropy_scope` and `reward.entropy_max_words` were chosen (results/base-model/helpfulness_length.json).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=40, help="training groups (all their variants)")
    parser.add_argument("--profile", default="paper")
    parser.add_argument("--windows", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "base-model" / "helpfulness_length.json")
    args = parser.parse_args()
    os.chdir(ROOT)

    import numpy as np
    from scipy.stats import spearmanr

    from components.config import load_params
    from components.data import load_groups
    from components.generation.sampling import SamplingConfig
    from components.generation.vllm_engine import VllmEngine
    from components.rewards.entropy import normalized_entropy, words

    params = load_params("params.yaml", profile=args.profile)
    groups = [g for g in load_groups(params.paths.groups, task="consistency", split="train")][: args.groups]
    prompts = [m.text for g in groups for m in g.members]
    cfg = params.train
    sampling = SamplingConfig(cfg.samples_per_prompt, cfg.max_new_tokens, cfg.temperature, cfg.top_p, params.seed)
    engine = VllmEngine(params.paths.base_model, params.eval.vllm, params.eval.dtype, params.seed)
    started = time.perf_counter()
    try:
        outputs = engine.generate(prompts, sampling)
    finally:
        engine.close()
    wall = time.perf_counter() - started
    texts = [s.text for row in outputs for s in row]
    truncated = float(np.mean([s.truncated for row in outputs for s in row]))
    lengths = np.array([len(words(t)) for t in texts])
    short = lengths <= np.median(lengths)
    report: dict = {
        "command": "benchmarks/helpfulness_length.py " + " ".join(f"--{k} {v}" for k, v in (("groups", args.groups), ("profile", args.profile))),
        "split": "train", "groups": len(groups), "prompts": len(prompts), "samples": len(texts),
        "temperature": cfg.temperature, "max_new_tokens": cfg.max_new_tokens, "generate_seconds": round(wall, 1),
        "truncated_share": truncated,
        "words": {f"p{q}": float(np.percentile(lengths, q)) for q in (10, 25, 50, 75, 90, 95)},
        "scores": [],
    }  # fmt: skip
    print(f"{len(texts)} base samples on {len(groups)} train groups in {wall:.0f} s; truncated {truncated:.3f}")
    print("words: " + ", ".join(f"{k} {v:.0f}" for k, v in report["words"].items()))
    print(f"{'scope':>7} {'W':>4} {'rho(len)':>9} {'short half':>10} {'long half':>10} {'at ceiling':>10}")
    for scope in ("answer", "window"):
        for window in args.windows:
            h = np.array([normalized_entropy(t, window, scope) for t in texts])
            rho = float(spearmanr(h, lengths).statistic)
            row = {
                "scope": scope, "max_words": window, "spearman_vs_words": rho,
                "mean_short_half": float(h[short].mean()), "mean_long_half": float(h[~short].mean()),
                "share_at_ceiling": float((h >= 0.99).mean()), "mean": float(h.mean()),
            }  # fmt: skip
            report["scores"].append(row)
            print(
                f"{scope:>7} {window:>4} {rho:>9.3f} {row['mean_short_half']:>10.3f} {row['mean_long_half']:>10.3f} {row['share_at_ceiling']:>10.3f}"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
