"""Evaluation throughput: vLLM vs transformers on the same evaluation set, and metric computation time.

    .venv/bin/python benchmarks/eval_throughput.py                  # >= 500 sequences, both engines
    .venv/bin/python benchmarks/eval_throughput.py --sequences 96   # quicker look

Part 1 sends the same chat-templated prompts (groupwise's consistency and diversity prompts built
from data/templates, n samples each, same SamplingConfig and seed) through the vLLM engine and the
transformers engine in one run and prints output tokens/s of each and their ratio (target >= 3x on
a 2-core CPU), both in --dtype (eval.dtype, bf16 by default). vLLM's start-up is timed apart. With
--adapter, vLLM also generates through the adapter as the evaluation does it (merged weights
loaded into the running engine; the merge and the load are included in its time). vLLM runs with
`eval.vllm.seeding: call` (one RNG reseed per call); another row times `seeding: request` (a
seed per sample, drawn one by one). A third row times plain HF
`model.generate` on the same set (the reference the target was set against); --skip-hf-generate
leaves it out.

A raw `LLM.generate` row (same token ids, sampling and engine settings, no groupwise code on the
path) shows what the engine wrapper costs (target: within 10 %). Both stay up and their calls
alternate --repeats times; each row reports its fastest call, so that neither is the one that
happened to run while the machine was busy. --first-calls also compares what an evaluation sees, a
fresh engine's first call: two engines of each kind, first calls in the order engine, raw, raw, engine.

Part 2 times the metric computation of an evaluation of --groups groups x 8 samples per model
(half consistency groups of 2 variants x 4 samples, half diversity tasks of 8 samples), base and
tuned: embeddings (all-MiniLM-L6-v2), per-group records, summary and all paired tests with
bootstrap CIs (target < 60 s). Texts are word shuffles of the generated samples, so every text
is distinct (no embedding cache hit) and has a realistic length.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def eval_prompts(sequences: int, n: int) -> list[str]:
    from components.config import load_params
    from components.data import build_groups

    params = load_params(ROOT / "params.yaml")
    groups = build_groups(params.paths.templates, params.data, params.seed)
    consistency = [m.text for g in groups if g.task == "consistency" for m in g.members]
    diversity = [m.text for g in groups if g.task == "diversity" for m in g.members]
    pool = [p for pair in zip(consistency, diversity * (len(consistency) // max(1, len(diversity)) + 1)) for p in pair]
    needed = -(-sequences // n)
    if needed > len(pool):
        raise SystemExit(f"only {len(pool)} distinct prompts; ask for at most {len(pool) * n} sequences")
    return pool[:needed]


def run_engine(engine, prompts, cfg, adapter=None) -> dict:
    started = time.perf_counter()
    out = engine.generate(prompts, cfg, adapter)
    seconds = time.perf_counter() - started
    tokens = sum(len(s.completion_ids) for row in out for s in row)
    return {
        "sequences": len(prompts) * cfg.n,
        "tokens": tokens,
        "seconds": seconds,
        "tok_s": tokens / seconds,
        "texts": [s.text for row in out for s in row],
    }


def _raw_vllm_child(conn, env: dict, llm_kwargs: dict) -> None:
    """A bare `LLM` (no groupwise code on the path): started once, then one timed `generate` per request."""
    os.environ.update(env)
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(**llm_kwargs)
    conn.send("ready")
    while (request := conn.recv()) is not None:
        prompt_ids, sampling = request
        started = time.perf_counter()
        outputs = llm.generate([TokensPrompt(prompt_token_ids=x) for x in prompt_ids], SamplingParams(**sampling), use_tqdm=False)
        seconds = time.perf_counter() - started
        conn.send({"tokens": sum(len(o.token_ids) for out in outputs for o in out.outputs), "seconds": seconds})


class RawVllm:
    """Plain vLLM with the same prompt token ids, sampling and engine settings as the engine's path,
    in a process of its own (engine core inside it, as groupwise runs it): what the wrapper costs.
    It stays up, so that its calls can alternate with the wrapper's (same machine state for both)."""

    def __init__(self, engine, vllm_cfg, dtype: str):
        import multiprocessing

        from components.generation.vllm_engine import engine_env, engine_kwargs

        llm_kwargs = engine_kwargs(vllm_cfg, engine._base_dir, engine._base_dir, dtype, seed=1234)
        env = {**engine_env(vllm_cfg), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
        self._engine = engine
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_raw_vllm_child, args=(child, env, llm_kwargs))
        self._proc.start()
        assert self._conn.recv() == "ready"

    def run(self, prompts: list[str], cfg) -> dict:
        from components.generation.vllm_engine import sampling_kwargs

        self._conn.send((self._engine.prompt_ids(prompts), sampling_kwargs(cfg)))
        result = self._conn.recv()
        return {"sequences": len(prompts) * cfg.n, **result, "tok_s": result["tokens"] / result["seconds"], "texts": []}

    def close(self) -> None:
        self._conn.send(None)
        self._proc.join()


def best(runs: list[dict]) -> dict:
    """The fastest of repeated runs (as `timeit` reports): the least disturbed by the rest of the machine."""
    return max(runs, key=lambda r: r["tok_s"])


def first_calls(vllm, raw, vllm_cfg, args, prompts, cfg) -> dict:
    """Each engine's first call, the one an evaluation makes: a second groupwise engine and a second
    raw `LLM` are started beside the first two, and the four fresh engines take their first call in
    the order engine, raw, raw, engine, so that a drift of the machine over the four calls (caches,
    clocks, memory first touched) weighs on both sides alike. The second pair is closed after."""
    from components.generation.vllm_engine import VllmEngine

    vllm2 = VllmEngine(args.model_dir, vllm_cfg, dtype=args.dtype, seed=1234)
    raw2 = RawVllm(vllm2, vllm_cfg, args.dtype)
    try:
        order = [run_engine(vllm, prompts, cfg), raw.run(prompts, cfg), raw2.run(prompts, cfg), run_engine(vllm2, prompts, cfg)]
    finally:
        raw2.close()
        vllm2.close()
    return {"order": order, "engine": [order[0], order[3]], "raw": [order[1], order[2]]}


def hf_generate_reference(model_dir: Path, prompts: list[str], cfg, batch_size: int, dtype: str) -> dict:
    """Plain `model.generate(do_sample=True, num_return_sequences=n)`: the reference the issue's target names."""
    import torch

    from components.generation.sampling import chat_prompt
    from components.models.provision import load_base_model

    model, tok = load_base_model(model_dir, dtype)
    model.eval()
    torch.manual_seed(cfg.seed)
    per_call = max(1, batch_size // cfg.n)
    tokens, started = 0, time.perf_counter()
    with torch.no_grad():
        for start in range(0, len(prompts), per_call):
            enc = tok(
                [chat_prompt(tok, p) for p in prompts[start : start + per_call]],
                return_tensors="pt",
                padding=True,
                add_special_tokens=False,
            )
            out = model.generate(
                **enc, do_sample=True, top_k=0, top_p=cfg.top_p, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                num_return_sequences=cfg.n, pad_token_id=tok.pad_token_id,
            )  # fmt: skip
            completions = out[:, enc["input_ids"].shape[1] :]
            for row in completions.tolist():  # tokens before EOS: the engines' count (they drop EOS)
                tokens += next((i for i, t in enumerate(row) if t == tok.eos_token_id), len(row))
    seconds = time.perf_counter() - started
    return {"sequences": len(prompts) * cfg.n, "tokens": tokens, "seconds": seconds, "tok_s": tokens / seconds, "texts": []}


def generation_benchmark(args) -> list[str]:
    from components.config import ModelConfig, VllmConfig
    from components.generation.sampling import SamplingConfig
    from components.generation.transformers_engine import TransformersGenerationEngine
    from components.generation.vllm_engine import VllmEngine
    from components.models.provision import prepare_base_model

    prepare_base_model(ModelConfig(), args.model_dir, seed=1234)  # reused when already provisioned
    prompts = eval_prompts(args.sequences, args.n)
    cfg = SamplingConfig(n=args.n, max_new_tokens=args.max_new_tokens, temperature=1.0, top_p=1.0, seed=1234)
    print(
        f"evaluation set: {len(prompts)} prompts x n={args.n} = {len(prompts) * args.n} sequences, "
        f"<= {args.max_new_tokens} new tokens, {args.dtype}, vLLM threads bind {args.threads_bind}"
    )

    started = time.perf_counter()
    vllm_cfg = VllmConfig(kv_cache_gb=args.kv_cache_gb, max_model_len=1024, max_num_seqs=256, cpu_threads_bind=args.threads_bind)
    vllm = VllmEngine(args.model_dir, vllm_cfg, dtype=args.dtype, seed=1234)
    start_s = time.perf_counter() - started
    rows, wrapped, raw_runs, first = [], [], [], None
    raw = RawVllm(vllm, vllm_cfg, args.dtype)
    try:
        if args.first_calls:
            first = first_calls(vllm, raw, vllm_cfg, args, prompts, cfg)
            wrapped.append(first["engine"][0])
            raw_runs.append(first["raw"][0])
        for _ in range(args.repeats - len(wrapped)):  # alternate: both see the same machine state
            wrapped.append(run_engine(vllm, prompts, cfg))
            raw_runs.append(raw.run(prompts, cfg))
        vllm_base = best(wrapped)
        rows.append(("vllm (base)", vllm_base))
        if args.adapter:
            rows.append(("vllm (adapter, merged weights)", run_engine(vllm, prompts, cfg, Path(args.adapter))))
    finally:
        raw.close()
        vllm.close()
    raw = best(raw_runs)
    rows.append(("raw vLLM LLM.generate (base)", raw))
    if not args.skip_request_seeding:
        vllm = VllmEngine(args.model_dir, vllm_cfg.model_copy(update={"seeding": "request"}), dtype=args.dtype, seed=1234)
        try:
            rows.append(("vllm (base, a seed per sample)", run_engine(vllm, prompts, cfg)))
        finally:
            vllm.close()
    hf = TransformersGenerationEngine(args.model_dir, batch_size=args.hf_batch_size, dtype=args.dtype)
    hf_base = run_engine(hf, prompts, cfg)
    rows.append((f"transformers engine (batch {args.hf_batch_size})", hf_base))
    hf.close()
    reference = None
    if not args.skip_hf_generate:
        reference = hf_generate_reference(args.model_dir, prompts, cfg, args.hf_batch_size, args.dtype)
        rows.append((f"HF generate (batch {args.hf_batch_size})", reference))

    print(f"\nvLLM start-up (engine process, enforce_eager): {start_s:.1f} s")
    print(f"{'engine':<32}{'sequences':>10}{'tokens':>9}{'seconds':>10}{'tokens/s':>10}")
    for name, r in rows:
        print(f"{name:<32}{r['sequences']:>10}{r['tokens']:>9}{r['seconds']:>10.1f}{r['tok_s']:>10.1f}")
    rounds = ", ".join(f"{w['tok_s']:.0f}/{r['tok_s']:.0f}" for w, r in zip(wrapped, raw_runs))
    print(
        f"groupwise vLLM engine / raw LLM.generate tokens/s, best of {args.repeats} alternating runs each: "
        f"{vllm_base['tok_s'] / raw['tok_s']:.2f} (target >= 0.90); every round, engine/raw tok/s: {rounds}"
    )
    if first is not None:
        engine_s, raw_s = (sum(r["tok_s"] for r in first[k]) / 2 for k in ("engine", "raw"))
        calls = ", ".join(f"{name} {r['tok_s']:.0f}" for name, r in zip(("engine 1", "raw 1", "raw 2", "engine 2"), first["order"]))
        print(
            f"first calls, fresh engines in the order engine, raw, raw, engine: groupwise / raw tok/s "
            f"{engine_s / raw_s:.2f} (target >= 0.90; {calls})"
        )
    ratio = vllm_base["tok_s"] / hf_base["tok_s"]
    print(f"vLLM / transformers engine tokens/s (base model): {ratio:.2f}x (target >= 3x)")
    if reference is not None:
        print(f"vLLM / HF generate tokens/s (base model): {vllm_base['tok_s'] / reference['tok_s']:.2f}x")
    with_startup = vllm_base["tokens"] / (vllm_base["seconds"] + start_s)
    print(f"vLLM incl. its start-up: {with_startup:.1f} tok/s = {with_startup / hf_base['tok_s']:.2f}x")
    return vllm_base["texts"] + hf_base["texts"]


def metrics_benchmark(n_groups: int, pool: list[str], embedding_dtype: str) -> None:
    import numpy as np
    import pandas as pd

    from components.config import EvalConfig
    from components.data.normalizers import get_normalizer
    from components.data.schema import Member, PromptGroup
    from components.embeddings import load_embedder
    from components.evaluation.base_outputs import BaseOutputs
    from components.evaluation.comparisons import compare_all
    from components.evaluation.records import Semantics, consistency_record, diversity_record
    from components.evaluation.run import embed_samples
    from components.evaluation.summary import summarize

    rng = np.random.default_rng(0)
    pool = [t for t in pool if t.split()] or ["an answer of a few words"]

    def text() -> str:
        words = pool[rng.integers(len(pool))].split()
        return " ".join(rng.permutation(words)) + f" {rng.integers(10**9)}"

    half = n_groups // 2
    colors = ["red", "green", "blue", "yellow", "orange", "purple"]
    consistency = [
        PromptGroup(
            group_id=f"c{i}",
            domain="bench",
            task="consistency",
            split="heldout",
            variant_axes={"gender": ["woman", "man"]},
            members=[
                Member(variant_id="w", attributes={"gender": "woman"}, text="q"),
                Member(variant_id="m", attributes={"gender": "man"}, text="q"),
            ],
        )  # fmt: skip
        for i in range(half)
    ]
    diversity = [
        PromptGroup(
            group_id=f"d{i}",
            domain="bench",
            task="diversity",
            split="heldout",
            members=[Member(variant_id="p", text="q")],
            valid_answers=colors,
            answer_normalizer="casefold_match",
        )  # fmt: skip
        for i in range(n_groups - half)
    ]
    samples = {
        model: {
            "c": [{"w": [text() for _ in range(4)], "m": [text() for _ in range(4)]} for _ in consistency],
            "d": [[str(rng.choice(colors)) + " " + text() for _ in range(8)] for _ in diversity],
        }
        for model in ("base", "tuned")
    }
    answers = pd.DataFrame(
        [{"model": model, "text": t} for model, m in samples.items() for g in m["c"] for v in g.values() for t in v]
        + [{"model": model, "text": t} for model, m in samples.items() for g in m["d"] for t in g]
    )
    texts = list(dict.fromkeys(answers["text"]))
    load_embedder()  # model load is a one-off per process, not part of the per-evaluation cost

    t0 = time.perf_counter()
    batch_size = EvalConfig().embedding_batch_size
    semantics = Semantics(embed_samples(answers, BaseOutputs(None, {}), batch_size, embedding_dtype)[0], 0.85)  # as an evaluation embeds
    t1 = time.perf_counter()
    normalize = get_normalizer("casefold_match")
    rows_c = [consistency_record(g, samples["base"]["c"][i], samples["tuned"]["c"][i], 32, semantics) for i, g in enumerate(consistency)]
    rows_d = [
        diversity_record(g, samples["base"]["d"][i], samples["tuned"]["d"][i], normalize, 32, semantics) for i, g in enumerate(diversity)
    ]
    t2 = time.perf_counter()
    frame_c, frame_d = pd.DataFrame(rows_c), pd.DataFrame(rows_d)
    summarize(frame_c, frame_d, 0.01)
    comparisons = compare_all(frame_c, frame_d, alpha=0.01, n_resamples=2000, confidence=0.95, seed=0)
    t3 = time.perf_counter()
    print(f"\nmetric computation: {n_groups} groups x 8 samples per model, base and tuned ({len(texts)} distinct texts)")
    print(f"  embeddings (all-MiniLM-L6-v2, {embedding_dtype}, batch {batch_size}): {t1 - t0:7.1f} s")
    print(f"  per-group records (all metrics):      {t2 - t1:7.1f} s")
    print(f"  summary + {len(comparisons)} paired tests, 2000 bootstraps: {t3 - t2:5.1f} s")
    print(f"  total:                                {t3 - t0:7.1f} s (target < 60 s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequences", type=int, default=504, help="at least this many sequences (prompts x n)")
    parser.add_argument("--n", type=int, default=6, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs of the vLLM engine and raw vLLM (best of each)")
    parser.add_argument("--hf-batch-size", type=int, default=48, help="sequences per HF generate call (eval.batch_size)")
    parser.add_argument(
        "--first-calls",
        action="store_true",
        help="also compare first calls: two fresh engines of each kind, called engine, raw, raw, engine",
    )
    parser.add_argument("--kv-cache-gb", type=int, default=2)
    parser.add_argument("--model-dir", type=Path, default=ROOT / "data/models/base")
    parser.add_argument("--adapter", default=None, help="LoRA adapter folder to time through vLLM as well (merged weights)")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"], help="both engines (eval.dtype)")
    parser.add_argument("--threads-bind", default="all", help="eval.vllm.cpu_threads_bind: all | auto | 0-7")
    parser.add_argument("--embedding-dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--groups", type=int, default=1000, help="groups for the metric timing")
    parser.add_argument("--skip-generation", action="store_true")
    parser.add_argument("--skip-hf-generate", action="store_true", help="leave out the plain HF generate reference row")
    parser.add_argument("--skip-request-seeding", action="store_true", help="leave out the vLLM row with eval.vllm.seeding: request")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    pool = [] if args.skip_generation else generation_benchmark(args)
    metrics_benchmark(args.groups, pool or ["a short answer about saving money every month", "name a colour red"], args.embedding_dtype)


if __name__ == "__main__":  # vLLM spawns its engine core: the guard is required
    main()
