"""bfloat16 against float32 on this machine: the vLLM engine's decoding and a plain linear layer.

    .venv/bin/python benchmarks/dtype_throughput.py                       # 48 prompts x 6, <= 128 tokens
    .venv/bin/python benchmarks/dtype_throughput.py --prompts 16 --max-new-tokens 64
    .venv/bin/python benchmarks/dtype_throughput.py --groups data/groups_confirmation/consistency.jsonl \
        --domains housing health education car 'travel-*' --max-new-tokens 512 --dtypes bfloat16   # a study's prompts

bfloat16 halves memory traffic, and on hardware that computes it (CUDA GPUs from Ampere on, CPUs
with AVX512-BF16 or AMX) it roughly doubles CPU decoding. A CPU without those instructions emulates
it, and vLLM's CPU backend then falls back to torch linear layers: this benchmark shows what that
costs here, so that `eval.dtype` and `train.rollout.vllm.dtype` can be chosen for the machine. Both
dtypes run the same chat-templated consistency prompts with the same sampling and seed, one engine
at a time (two engines on one CPU slow each other), alternating --repeats times; each row reports
its fastest call. The linear-layer row times SmolLM2-135M's MLP shape (576 -> 1536, 64 tokens) on
one thread, the operation the emulation slows.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DTYPES = ("float32", "bfloat16")


def linear_ms(dtype: str, repeats: int = 200) -> float:
    """Milliseconds of one 64 x 576 -> 1536 linear layer in `dtype` on one thread (fastest of 3 rounds)."""
    import torch

    torch.set_num_threads(1)
    dt = getattr(torch, dtype)
    x, w = torch.randn(64, 576, dtype=dt), torch.randn(1536, 576, dtype=dt)
    rounds = []
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(repeats):
            torch.nn.functional.linear(x, w)
        rounds.append((time.perf_counter() - started) / repeats * 1e3)
    return min(rounds)


def consistency_prompts(count: int) -> list[str]:
    from components.config import load_params
    from components.data import build_groups

    params = load_params(ROOT / "params.yaml")
    groups = build_groups(params.paths.templates, params.data, params.seed)
    prompts = [m.text for g in groups if g.task == "consistency" for m in g.members]
    return prompts[:count]


def held_out_prompts(groups_file: Path, domains: list[str]) -> list[str]:
    """Every member's text of the held-out consistency groups of `groups_file` whose domain matches one of
    `domains` (fnmatch patterns), in file order: what an evaluation of those domains samples."""
    from fnmatch import fnmatch

    from components.data import read_groups

    return [
        m.text
        for g in read_groups(groups_file)
        if g.task == "consistency" and g.split == "heldout" and any(fnmatch(g.domain, d) for d in domains)
        for m in g.members
    ]


def decode(model_dir: Path, dtype: str, prompts: list[str], cfg, kv_cache_gb: int) -> dict:
    """Start a vLLM engine in `dtype`, time one generate call of `prompts`, close it."""
    from components.config import VllmConfig
    from components.generation.vllm_engine import VllmEngine

    engine = VllmEngine(model_dir, VllmConfig(kv_cache_gb=kv_cache_gb), dtype=dtype, seed=cfg.seed)
    try:
        started = time.perf_counter()
        out = engine.generate(prompts, cfg, None)
        seconds = time.perf_counter() - started
    finally:
        engine.close()
    tokens = sum(len(s.completion_ids) for row in out for s in row)
    return {"sequences": len(prompts) * cfg.n, "tokens": tokens, "seconds": seconds, "tok_s": tokens / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument("--n", type=int, default=6, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=1, help="alternating engine starts per dtype (fastest kept)")
    parser.add_argument("--kv-cache-gb", type=int, default=2)
    parser.add_argument("--model-dir", type=Path, default=ROOT / "data/models/base")
    parser.add_argument("--skip-generation", action="store_true", help="only the linear-layer row")
    parser.add_argument("--groups", type=Path, help="a consistency groups file: its held-out groups' prompts instead of --prompts")
    parser.add_argument("--domains", nargs="+", default=["*"], help="with --groups: the domains (fnmatch patterns)")
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES), help="the engines' dtypes, in this order")
    args = parser.parse_args()

    from components.machine import machine_label, machine_record, native_bf16

    record = machine_record()
    print(
        f"machine: {record['cpu'] or record['gpu']} ({machine_label(record)}; ISA {', '.join(record['isa']) or 'none of note'}); native bf16: {native_bf16()}"
    )
    linear = {dtype: linear_ms(dtype) for dtype in DTYPES}
    print(
        f"linear 64x576->1536, one thread: float32 {linear['float32']:.2f} ms, bfloat16 {linear['bfloat16']:.2f} ms "
        f"(bfloat16 / float32 time {linear['bfloat16'] / linear['float32']:.2f}x)"
    )
    if args.skip_generation:
        return

    from components.config import ModelConfig
    from components.generation.sampling import SamplingConfig
    from components.models.provision import prepare_base_model

    prepare_base_model(ModelConfig(), args.model_dir, seed=1234)  # reused when already provisioned
    prompts = held_out_prompts(args.groups, args.domains) if args.groups else consistency_prompts(args.prompts)
    cfg = SamplingConfig(n=args.n, max_new_tokens=args.max_new_tokens, temperature=0.7, top_p=1.0, seed=1234)
    print(f"vLLM decoding: {len(prompts)} consistency prompts x n={args.n}, <= {args.max_new_tokens} new tokens, T 0.7")
    runs: dict[str, list[dict]] = {d: [] for d in args.dtypes}
    for _ in range(args.repeats):
        for dtype in args.dtypes:
            runs[dtype].append(decode(args.model_dir, dtype, prompts, cfg, args.kv_cache_gb))
    best = {d: max(rs, key=lambda r: r["tok_s"]) for d, rs in runs.items()}
    print(f"{'dtype':<10}{'sequences':>10}{'tokens':>9}{'seconds':>10}{'tokens/s':>10}")
    for dtype, r in best.items():
        print(f"{dtype:<10}{r['sequences']:>10}{r['tokens']:>9}{r['seconds']:>10.1f}{r['tok_s']:>10.1f}")
    if len(best) == 2:
        print(f"float32 / bfloat16 tokens/s: {best['float32']['tok_s'] / best['bfloat16']['tok_s']:.2f}x")


if __name__ == "__main__":
    main()
