"""DiscrimEval on the embedded model: its scores on all 70 questions, the two engines' agreement,
and the decision scoring's throughput against raw vLLM prefill.

    .venv/bin/python benchmarks/decision_benchmark.py                   # everything (~20 min on 2 cores)
    .venv/bin/python benchmarks/decision_benchmark.py --skip-scores     # throughput and agreement only

1. Throughput: the same DiscrimEval prompts (token ids of the benchmark's user turn and answer
   prefix) through groupwise's vLLM engine (`choice_logprobs`) and a bare `LLM.generate` with the
   same engine settings and `SamplingParams(max_tokens=1, temperature=0, logprob_token_ids=...)`
   in a process of its own (benchmarks/eval_throughput.py's raw row). Both stay up; their calls
   alternate --repeats times and each reports its fastest (target: wrapper >= 0.90 of raw).
2. Agreement: the log-odds of --agree-prompts prompts from the vLLM engine and the transformers
   engine, both in eval.dtype: max and mean absolute difference, Pearson r, and how far apart the
   female - male score of those prompts is.
3. Scores: all 9,450 prompts (70 questions x 9 ages x 3 genders x 5 races) through the vLLM
   engine; the benchmark's statistic per demographic (mixed model, and the matched paired check)
   on all questions, on the train and on the held-out split; written to --out (JSON) and the
   per-prompt log-odds beside it (CSV).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _scores(table, column: str, baselines: dict) -> dict:
    from components.evaluation.discrimination import demographics, matched_pairs, mixed_scores, paired_check, per_question_effects

    fits, method = mixed_scores(table, column, baselines)
    effects = per_question_effects(table, column, baselines)
    out = {"method": method, "n_prompts": len(table), "n_questions": int(table["question_id"].nunique()),
           "mean_logit": float(table[column].mean()), "yes_share": float((table[column] > 0).mean()), "scores": {}}  # fmt: skip
    for demo in demographics(table, baselines):
        fit, check = fits[demo.key], paired_check(effects[demo.key])
        questions_up = int((effects[demo.key] > 0).sum())
        out["scores"][demo.key] = {
            "score": fit.estimate, "ci_low": fit.ci_low, "ci_high": fit.ci_high, "p_value": fit.p_value,
            "paired_diff": check.estimate, "paired_ci_low": check.ci_low, "paired_ci_high": check.ci_high,
            "paired_p_value": check.p_value, "n_pairs": matched_pairs(table, demo), "questions_positive": questions_up,
        }  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--throughput-prompts", type=int, default=900)
    parser.add_argument("--agree-prompts", type=int, default=135)
    parser.add_argument("--skip-scores", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "benchmarks" / "discrim_eval_base.json")
    args = parser.parse_args()

    from components.config import load_params
    from components.evaluation.benchmarks import BENCHMARKS
    from components.evaluation.fairness import decision_logits, single_token_ids
    from components.generation.interface import ChoicePrompt
    from components.generation.sampling import answer_prompt
    from components.generation.transformers_engine import TransformersGenerationEngine
    from components.generation.vllm_engine import VllmEngine
    from components.models.provision import prepare_base_model

    params = load_params(ROOT / "params.yaml")
    prepare_base_model(params.model, params.paths.base_model, params.seed, root=params.root)
    bench = BENCHMARKS["discrim_eval"]
    data = params.paths.benchmarks / bench.name
    bench.prepare(data)
    table = bench.load(data)
    report: dict = {"dtype": params.eval.dtype, "machine_cpus": len(__import__("os").sched_getaffinity(0))}

    started = time.perf_counter()
    engine = VllmEngine(params.paths.base_model, params.eval.vllm, params.eval.dtype, params.seed)
    report["vllm_start_seconds"] = time.perf_counter() - started
    try:
        # 1. throughput, wrapper vs raw, alternating
        from eval_throughput import RawVllm  # the raw row of the generation benchmark (same folder)

        sample = table.sample(n=min(args.throughput_prompts, len(table)), random_state=0)
        texts = sample["text"].tolist()
        choices = single_token_ids(engine.tokenizer, bench.yes_words, bench.name) + single_token_ids(engine.tokenizer, bench.no_words, bench.name)
        prompts = [ChoicePrompt(bench.user_turn(t), bench.answer_prefix) for t in texts]
        ids = [engine.tokenizer(answer_prompt(engine.tokenizer, p.user, p.assistant_prefix), add_special_tokens=False).input_ids for p in prompts]
        raw = RawVllm(engine, params.eval.vllm, params.eval.dtype)
        wrapper_s, raw_s = [], []
        try:
            engine.choice_logprobs(prompts[:8], choices)  # warm both
            raw._conn.send((ids[:8], {"max_tokens": 1, "temperature": 0.0, "logprob_token_ids": choices}))
            raw._conn.recv()
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                engine.choice_logprobs(prompts, choices)
                wrapper_s.append(time.perf_counter() - t0)
                raw._conn.send((ids, {"max_tokens": 1, "temperature": 0.0, "logprob_token_ids": choices}))
                raw_s.append(raw._conn.recv()["seconds"])
        finally:
            raw.close()
        tokens = sum(len(x) for x in ids)
        report["throughput"] = {
            "prompts": len(prompts), "prompt_tokens": tokens,
            "wrapper_prompts_per_s": len(prompts) / min(wrapper_s), "raw_prompts_per_s": len(prompts) / min(raw_s),
            "wrapper_prompt_tokens_per_s": tokens / min(wrapper_s), "raw_prompt_tokens_per_s": tokens / min(raw_s),
            "wrapper_over_raw": min(raw_s) / min(wrapper_s), "wrapper_seconds": wrapper_s, "raw_seconds": raw_s,
        }  # fmt: skip
        print(json.dumps(report["throughput"], indent=1))

        # 2. engines agree
        agree = table[table["question_id"] < max(1, args.agree_prompts // 135)].head(args.agree_prompts)
        vllm_logits = decision_logits(engine, bench, agree["text"].tolist(), None)
        hf = TransformersGenerationEngine(params.paths.base_model, params.eval.batch_size, params.eval.dtype)
        hf_logits = decision_logits(hf, bench, agree["text"].tolist(), None)
        hf.close()
        diff = np.abs(vllm_logits - hf_logits)
        female = (agree["gender"] == "female").to_numpy()
        male = (agree["gender"] == "male").to_numpy()
        report["agreement"] = {
            "prompts": len(agree), "max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.mean()),
            "pearson_r": float(np.corrcoef(vllm_logits, hf_logits)[0, 1]),
            "female_minus_male_vllm": float(vllm_logits[female].mean() - vllm_logits[male].mean()),
            "female_minus_male_transformers": float(hf_logits[female].mean() - hf_logits[male].mean()),
        }  # fmt: skip
        print(json.dumps(report["agreement"], indent=1))

        # 3. scores on all 70 questions
        if not args.skip_scores:
            t0 = time.perf_counter()
            table["logit"] = decision_logits(engine, bench, table["text"].tolist(), None)
            report["scoring_seconds"] = time.perf_counter() - t0
            split = table["question_id"].map(bench.split)
            report["all"] = _scores(table, "logit", bench.baselines)
            report["train"] = _scores(table[split == "train"], "logit", bench.baselines)
            report["heldout"] = _scores(table[split == "heldout"], "logit", bench.baselines)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            table.drop(columns="text").to_csv(args.out.with_suffix(".csv"), index=False)
            for scope in ("all", "train", "heldout"):
                g = report[scope]["scores"]
                print(scope, {k: round(g[k]["score"], 4) for k in ("gender_female", "gender_non_binary")})
    finally:
        engine.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
