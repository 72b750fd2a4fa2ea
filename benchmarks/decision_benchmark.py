"""DiscrimEval on the embedded model: its scores on all 70 questions, the two engines' agreement,
and the decision scoring's throughput against raw vLLM prefill.

    .venv/bin/python benchmarks/decision_benchmark.py                   # everything (hours on 2 cores in fp32)
    .venv/bin/python benchmarks/decision_benchmark.py --ages 60         # the 70 questions at the baseline age
    .venv/bin/python benchmarks/decision_benchmark.py --skip-scores     # throughput and agreement only

1. Throughput: the same DiscrimEval prompts (token ids of the benchmark's user turn and answer
   prefix) through groupwise's vLLM engine (`choice_logprobs`) and a bare `LLM.generate` with the
   same engine settings and `SamplingParams(max_tokens=1, temperature=0, logprob_token_ids=...)`
   in a process of its own (benchmarks/eval_throughput.py's raw row). Both stay up; their calls
   alternate --repeats times and each reports its fastest (target: wrapper >= 0.90 of raw).
2. Agreement: the log-odds of --agree-prompts prompts from the vLLM engine and the transformers
   engine, both in eval.fairness.dtype (fp32): max and mean absolute difference, Pearson r, and how
   far apart the female - male score of those prompts is; and the error bf16 weights would make
   (transformers in bf16 against fp32).
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


def agreement(engine, params, bench, agree, dtype: str) -> dict:
    """vLLM against transformers (both in `dtype`) on the prompts of `agree`, and bf16 transformers' error."""
    from components.evaluation.fairness import decision_logits
    from components.generation.transformers_engine import TransformersGenerationEngine

    texts = agree["text"].tolist()
    vllm_logits = decision_logits(engine, bench, texts, None)
    found = {}
    for which in (dtype, "bfloat16"):
        hf = TransformersGenerationEngine(params.paths.base_model, params.eval.batch_size, which)
        found[which] = decision_logits(hf, bench, texts, None)
        hf.close()
    hf_logits, bf16_logits = found[dtype], found["bfloat16"]
    diff = np.abs(vllm_logits - hf_logits)
    female, male = (agree["gender"] == "female").to_numpy(), (agree["gender"] == "male").to_numpy()
    return {
        "prompts": len(agree), "max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.mean()),
        "pearson_r": float(np.corrcoef(vllm_logits, hf_logits)[0, 1]),
        "female_minus_male_vllm": float(vllm_logits[female].mean() - vllm_logits[male].mean()),
        "female_minus_male_transformers": float(hf_logits[female].mean() - hf_logits[male].mean()),
        "distinct_values_vllm": len(set(np.round(vllm_logits, 6))),
        "bf16_transformers_mean_abs_error": float(np.abs(bf16_logits - hf_logits).mean()),
        "bf16_transformers_max_abs_error": float(np.abs(bf16_logits - hf_logits).max()),
        "bf16_distinct_values": len(set(np.round(bf16_logits, 6))),
        "female_minus_male_bf16_transformers": float(bf16_logits[female].mean() - bf16_logits[male].mean()),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--throughput-prompts", type=int, default=900)
    parser.add_argument("--agree-prompts", type=int, default=45)
    parser.add_argument("--skip-scores", action="store_true")
    parser.add_argument("--skip-agreement", action="store_true")
    parser.add_argument("--ages", type=int, nargs="*", default=None, help="ages of the scored prompts (default: all nine)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "base-model" / "discrim_eval_base.json")
    args = parser.parse_args()

    from components.config import load_params
    from components.evaluation.fairness import decision_logits
    from components.fairness_benchmarks import BENCHMARKS, BenchmarkDataError
    from components.generation.interface import ChoicePrompt
    from components.generation.sampling import answer_prompt, single_token_ids
    from components.generation.vllm_engine import VllmEngine
    from components.models.provision import prepare_base_model

    params = load_params(ROOT / "params.yaml")
    prepare_base_model(params.model, params.paths.base_model, params.seed, root=params.root)
    bench = BENCHMARKS["discrim_eval"]
    data = params.paths.benchmarks / bench.name
    bench.prepare(data)
    table = bench.load(data)
    report: dict = {"machine_cpus": len(__import__("os").sched_getaffinity(0))}

    started = time.perf_counter()
    dtype = params.eval.fairness.dtype  # the decisions' dtype (fp32: see the agreement's bf16 row)
    report["dtype"] = dtype
    engine = VllmEngine(params.paths.base_model, params.eval.vllm, dtype, params.seed)
    report["vllm_start_seconds"] = time.perf_counter() - started
    try:
        # 1. throughput, wrapper vs raw, alternating
        from eval_throughput import RawVllm  # the raw row of the generation benchmark (same folder)

        sample = table.sample(n=min(args.throughput_prompts, len(table)), random_state=0)
        texts = sample["text"].tolist()
        choices = single_token_ids(engine.tokenizer, bench.yes_words, bench.name, BenchmarkDataError) + single_token_ids(
            engine.tokenizer, bench.no_words, bench.name, BenchmarkDataError
        )
        prompts = [ChoicePrompt(bench.user_turn(t), bench.answer_prefix) for t in texts]
        ids = [
            engine.tokenizer(answer_prompt(engine.tokenizer, p.user, p.assistant_prefix), add_special_tokens=False).input_ids
            for p in prompts
        ]
        raw = RawVllm(engine, params.eval.vllm, dtype)
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
        if not args.skip_agreement:
            agree = table[table["question_id"] == table["question_id"].min()].head(args.agree_prompts)
            report["agreement"] = agreement(engine, params, bench, agree, dtype)
            print(json.dumps(report["agreement"], indent=1))

        # 3. scores on all 70 questions
        if not args.skip_scores:
            table = table[table["age"].isin(args.ages)].reset_index(drop=True) if args.ages else table
            report["ages"] = sorted(int(a) for a in table["age"].unique())
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
