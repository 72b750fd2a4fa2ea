"""One GRPO update in fp32 and in bf16 autocast (`train.precision`), side by side on the same batch.

What `train.precision: bf16` changes on a CPU: the same rollouts of the embedded SmolLM2-135M (sampled
once, in fp32), the same advantages and the same starting weights (the base with a fresh LoRA, or
`--adapter`, a trained one) go through `policy_update` once per precision. Reported: the per-token
log-prob difference on the completions, the loss and KL, the cosine between the two gradients and
between the two first AdamW updates of the LoRA weights, and each update's time per phase (reference
pass, forward and backward, optimizer), both precisions in one run. The advantages are a fixed
standard-normal draw, z-scored within each group: the agreement of the update, not a reward, is measured.

    python benchmarks/precision_agreement.py --adapter data/checkpoints/latest/adapter  # e.g. after `make run`
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PRECISIONS = ("fp32", "bf16")


def rollout_batch(params, model_dir: Path, n_groups: int, k: int, max_new_tokens: int, seed: int):
    """`n_groups` free-text consistency groups, K samples of each member from the fp32 policy."""
    import torch

    from components.contracts.rollouts import GroupBatch, Rollout
    from components.data import build_groups
    from components.generation.sampling import SamplingConfig, TransformersEngine
    from components.models.provision import load_base_model

    groups = [g for g in build_groups(params.paths.templates, params.data, params.seed) if g.task == "consistency" and len(g.members) > 1]
    groups = sorted(groups, key=lambda g: g.group_id)[:n_groups]
    model, tokenizer = load_base_model(model_dir, "float32")
    members = [(gi, g, m) for gi, g in enumerate(groups) for m in g.members]
    sampling = SamplingConfig(n=k, max_new_tokens=max_new_tokens, temperature=params.train.temperature, top_p=1.0, seed=seed)
    samples = TransformersEngine(model, tokenizer, batch_size=48, show_progress=False).generate([m.text for _, _, m in members], sampling)
    rollouts = [
        Rollout.of(gi, g, m, completion=s.text, prompt_ids=s.prompt_ids, completion_ids=s.completion_ids, truncated=s.truncated)
        for (gi, g, m), per_prompt in zip(members, samples)
        for s in per_prompt
    ]
    batch = GroupBatch(groups, rollouts)
    draw = torch.randn(len(rollouts), generator=torch.Generator().manual_seed(seed))
    advantages = torch.zeros_like(draw)
    for gi in range(len(groups)):
        rows = batch.index == gi
        advantages[rows] = (draw[rows] - draw[rows].mean()) / (draw[rows].std() + 1e-6)
    return batch, advantages, tokenizer


def one_update(params, model_dir: Path, adapter: Path | None, batch, advantages, tokenizer, precision: str) -> dict:
    """`policy_update` once from the same weights in `precision`: log-probs, metrics, gradient, update."""
    import torch

    from components.grpo.distributed import DistContext
    from components.grpo.update import policy_update, precision_context
    from components.models.logprobs import pack_shared, shared_prompt_logprobs
    from components.models.lora import attach_lora, initialise_adapter
    from components.models.provision import load_base_model

    torch.manual_seed(params.seed)  # the fresh LoRA's A matrices: the same draw for both precisions
    base, _ = load_base_model(model_dir, "float32")
    model = attach_lora(base, params.lora)
    if adapter is not None:
        initialise_adapter(model, adapter)
    cfg = params.train.model_copy(update={"precision": precision, "num_iterations": 1})
    trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    before = torch.cat([p.detach().flatten().clone() for _, p in trainable])
    packed = pack_shared(batch.rollouts, tokenizer.pad_token_id)
    with torch.no_grad(), precision_context(precision, torch.device("cpu")):
        logp = shared_prompt_logprobs(model, packed, cfg.temperature).logp.float()
    model.train()
    optimizer = torch.optim.AdamW([p for _, p in trainable], lr=cfg.lr, weight_decay=cfg.weight_decay)
    started = time.perf_counter()
    metrics = policy_update(
        model, model, optimizer, None, batch, advantages, cfg, tokenizer.pad_token_id, DistContext(device=torch.device("cpu"))
    )
    seconds = time.perf_counter() - started
    grad = torch.cat([p.grad.detach().flatten() for _, p in trainable])  # after clipping: a common scale, cosine unchanged
    update = torch.cat([p.detach().flatten() for _, p in trainable]) - before
    return {"logp": logp[packed.completion_mask], "metrics": metrics, "grad": grad, "update": update, "seconds": seconds}


def cosine(a, b) -> float:
    import torch

    return float(torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=0))


def compare(runs: dict[str, dict]) -> dict:
    ref, bf = runs["fp32"], runs["bf16"]
    delta = (bf["logp"] - ref["logp"]).abs()
    per_run = {
        p: {"seconds": r["seconds"], "loss": r["metrics"]["loss"], "kl": r["metrics"]["kl"], "grad_norm": r["metrics"]["grad_norm"],
            **{k.removeprefix("time/"): v for k, v in r["metrics"].items() if k.startswith("time/")}}
        for p, r in runs.items()
    }  # fmt: skip
    return {
        "runs": per_run,
        "tokens": int(ref["logp"].numel()),
        "max_abs_dlogp": float(delta.max()),
        "mean_abs_dlogp": float(delta.mean()),
        "gradient_cosine": cosine(ref["grad"], bf["grad"]),
        "update_cosine": cosine(ref["update"], bf["update"]),
        "update_sign_agreement": float((ref["update"].sign() == bf["update"].sign()).double().mean()),
        "speedup": ref["seconds"] / bf["seconds"] if bf["seconds"] else None,
    }


def table(result: dict) -> list[str]:
    from components.formatting import number, percent, significant

    runs = result["runs"]
    phases = [k for k in runs["fp32"] if k.endswith("_s")]
    head = ["precision", "update s", *[p.removesuffix("_s").replace("_", " ") + " s" for p in phases], "loss", "KL", "grad norm"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in runs.items():
        cells = [name, number(r["seconds"], 1), *[number(r[p], 1) for p in phases], significant(r["loss"]), significant(r["kl"], 3),
                 significant(r["grad_norm"])]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    lines.append(
        f"\nbf16 vs fp32 over {result['tokens']} completion tokens: mean |Δ log p| {significant(result['mean_abs_dlogp'], 3)}, "
        f"max {significant(result['max_abs_dlogp'], 3)}; gradient cosine {number(result['gradient_cosine'], 4)}, first AdamW "
        f"update cosine {number(result['update_cosine'], 4)} (signs agree on {percent(result['update_sign_agreement'], 1)}); "
        f"the update {number(result['speedup'], 2)}x as fast"
    )
    return lines


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model-dir", type=Path, default=None, help="a safetensors model folder (default: the embedded model, converted once)"
    )
    parser.add_argument("--adapter", type=Path, default=None, help="start from this trained LoRA adapter (default: a fresh one)")
    parser.add_argument("--groups", type=int, default=2, help="free-text consistency groups in the batch")
    parser.add_argument("--k", type=int, default=6, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    args = parser.parse_args(argv)

    from components.config import load_params

    params = load_params(ROOT / "params.yaml", "default")
    if args.model_dir is None:
        from components.models.provision import prepare_base_model

        args.model_dir = ROOT / "data" / "models" / "base"
        prepare_base_model(params.model, args.model_dir, params.seed)  # converted once, then reused
    batch, advantages, tokenizer = rollout_batch(params, args.model_dir, args.groups, args.k, args.max_new_tokens, params.seed)
    runs = {p: one_update(params, args.model_dir, args.adapter, batch, advantages, tokenizer, p) for p in PRECISIONS}
    result = {"config": {"groups": args.groups, "k": args.k, "max_new_tokens": args.max_new_tokens, "rows": len(batch.rollouts),
                         "adapter": str(args.adapter) if args.adapter else None}, **compare(runs)}  # fmt: skip
    print("\n".join(table(result)))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
