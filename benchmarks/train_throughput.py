"""GRPO training throughput: groupwise (transformers or vLLM rollouts) vs TRL's GRPOTrainer, in one run.

Same configuration for every row: SmolLM2-135M-Instruct (the embedded GGUF, converted once), LoRA
r=16 on q/k/v/o, K samples per prompt, the same prompts in the same order, the same reward, steps,
beta, clipping and loss type. `--task consistency` (default) samples whole answers to the gendered
advice prompts (each variant its own prompt, reward H_norm: per sample, so TRL computes the same);
`--task diversity` the listing prompts with GAPO's frequency-aware reward. Each row runs in its own
subprocess (clean threads and memory); the figures are samples/s over the training loop and over
the whole run (model loading, engine starts and saving included: TRL starts its engine before
`train()`), and each groupwise run's time per phase (the trainer's `TIME_PHASES` and weight sync).

Rows (`--rows`): groupwise with transformers rollouts, with vLLM rollouts (weights merged and
loaded in place, or a LoRARequest per step), with vLLM rollouts and torch's own kernel for the frozen
fp32 matmuls (`train.cpu_matmul: torch`, where `auto` takes oneDNN; and with it the former forward
chunks, `train.forward_chunks: consecutive`), with vLLM rollouts and bf16 training, TRL's
GRPOTrainer, and TRL with `use_vllm` colocate (a row that cannot run says why).

    python benchmarks/train_throughput.py --max-new-tokens 256       # the table in docs/benchmarks.md
    python benchmarks/train_throughput.py --task diversity --max-new-tokens 64 --rows groupwise trl
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


ROWS = {
    # name: (framework, rollout engine, weight sync, precision, train settings of the row over params.yaml's)
    "groupwise": ("groupwise", "transformers", "merged", "fp32", {}),
    "groupwise-vllm": ("groupwise", "vllm", "merged", "fp32", {}),
    "groupwise-vllm-torch-matmul": ("groupwise", "vllm", "merged", "fp32", {"cpu_matmul": "torch"}),
    "groupwise-vllm-torch-matmul-consecutive-chunks": (
        "groupwise", "vllm", "merged", "fp32", {"cpu_matmul": "torch", "forward_chunks": "consecutive"}
    ),
    "groupwise-vllm-lora": ("groupwise", "vllm", "lora", "fp32", {}),
    "groupwise-vllm-bf16": ("groupwise", "vllm", "merged", "bf16", {}),
    "trl": ("trl", "transformers", "", "fp32", {}),
    "trl-vllm": ("trl", "vllm", "", "fp32", {}),
}  # fmt: skip


def benchmark_params(args):
    from components.config import RolloutConfig, RolloutVllmConfig, load_params

    params = load_params(ROOT / "params.yaml", "default")
    _, engine, sync, precision, row_settings = ROWS[args.only] if args.only else ROWS["groupwise"]
    rollout = RolloutConfig(engine=engine, vllm=RolloutVllmConfig(weight_sync=sync or "merged", max_model_len=1024))
    overrides = {
        "tasks": [args.task],
        "steps": args.steps,
        "groups_per_step": args.prompts_per_step,
        "samples_per_prompt": args.k,
        "max_new_tokens": args.max_new_tokens,
        "generation_batch_size": args.prompts_per_step * args.k,
        "beta": args.beta,
        "loss_type": args.loss_type,
        "precision": precision,
        "num_iterations": 1,
        "rows_per_forward": 6,
        "rollout": rollout,
        # TRL trains free-text prompts alone: no decision groups in a step, no pairing term
        "decision_groups_per_step": None,
        "decision_pairing": params.train.decision_pairing.model_copy(update={"weight": 0.0}),
        **row_settings,
    }
    train = params.train.model_copy(update=overrides)
    reward_fn = "frequency_aware" if args.task == "diversity" else "entropy_helpfulness"
    reward = params.reward.model_copy(update={"weights": {reward_fn: 1.0}})
    return params.model_copy(update={"train": train, "reward": reward})


def prompt_groups(params, n: int, task: str):
    """n one-prompt groups of `task` (a consistency group's variants become prompts of their own, so
    TRL, whose groups are the K samples of one prompt, trains on exactly the same groups)."""
    from components.data import build_groups
    from components.data.schema import PromptGroup

    groups = sorted((g for g in build_groups(params.paths.templates, params.data, params.seed) if g.task == task),
                    key=lambda g: g.group_id)  # fmt: skip
    singles = [
        PromptGroup(**{**g.model_dump(), "group_id": f"{g.group_id}/{m.variant_id}", "members": [m]}) if len(g.members) > 1 else g
        for g in groups
        for m in g.members
    ] if task == "consistency" else groups  # fmt: skip
    return (singles * (n // len(singles) + 1))[:n]


def base_model(params) -> Path:
    from components.models.provision import prepare_base_model

    out = ROOT / "data" / "models" / "base"
    prepare_base_model(params.model, out, params.seed)
    return out


def run_groupwise(args) -> dict:
    from components.grpo.trainer import TIME_PHASES, train

    params = benchmark_params(args)
    groups = prompt_groups(params, args.steps * args.prompts_per_step, args.task)
    model_dir = base_model(params)
    # the schedule takes groups in order when there are exactly steps x groups_per_step of them
    whole_started = time.perf_counter()  # the whole run, as TRL's: model load, engine start, the loop, saving
    with tempfile.TemporaryDirectory() as tmp:
        result = train(params, groups, model_dir, Path(tmp) / "ckpt", show_progress=True, shuffle=False)
    seconds = time.perf_counter() - whole_started
    history = result.history
    total = lambda key: sum(h.get(key, 0.0) for h in history)  # noqa: E731
    return {
        "samples": result.samples,
        "seconds": seconds,
        "loop_seconds": total("step_time_s"),
        "generation_seconds": total("generation_time_s"),
        "sync_seconds": total("weight_sync_s"),
        "tokens": total("tokens"),
        "reward_mean": result.final["reward_mean"],
        "mismatch": history[-1].get("mismatch/abs_logp_diff_mean"),
        "phases": {name: total(key) for name, key in TIME_PHASES.items()} | {"weight sync": total("weight_sync_s")},
    }


def run_trl(args) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from components.contracts.rollouts import Rollout
    from components.rewards.diversity import frequency_aware

    params = benchmark_params(args)
    groups = prompt_groups(params, args.steps * args.prompts_per_step, args.task)
    by_text = {g.members[0].text: g for g in groups}
    model_dir = base_model(params)
    from components.rewards.entropy import normalized_entropy

    def entropy_reward(completions, **_):
        """H_norm of each completion (groupwise's entropy_helpfulness)."""
        return [normalized_entropy(c[-1]["content"], params.reward.entropy_max_words, params.reward.entropy_scope) for c in completions]

    def gapo_reward(prompts, completions, **_):
        """frequency_aware over each prompt's K completions (TRL hands the reward the whole batch)."""
        texts = [p[-1]["content"] for p in prompts]
        out = [0.0] * len(texts)
        for text in dict.fromkeys(texts):
            idx = [i for i, t in enumerate(texts) if t == text]
            rollouts = [Rollout(0, "", "", text, completions[i][-1]["content"], (), (), False) for i in idx]
            for i, r in zip(idx, frequency_aware(rollouts, by_text[text], params.reward)):
                out[i] = r
        return out

    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": g.members[0].text}]} for g in groups])
    whole_started = time.perf_counter()  # the whole run: model load, trainer (and engine) start, the loop
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = params.train
    lora = params.lora
    with tempfile.TemporaryDirectory() as tmp:
        config = GRPOConfig(
            output_dir=tmp,
            use_cpu=True,
            bf16=False,
            **({"use_vllm": True, "vllm_mode": "colocate", "vllm_enable_sleep_mode": False} if args.only == "trl-vllm" else {}),
            max_steps=args.steps,
            per_device_train_batch_size=args.prompts_per_step * args.k,
            gradient_accumulation_steps=1,
            num_generations=args.k,
            max_completion_length=args.max_new_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            top_k=0,
            learning_rate=cfg.lr,
            beta=args.beta,
            epsilon=cfg.epsilon_low,
            epsilon_high=cfg.epsilon_high,
            loss_type=args.loss_type,
            scale_rewards="group",
            use_bias_correction_kl=False,  # groupwise's default k3 (train.kl_ratio_correction: false)
            lr_scheduler_type="constant",  # groupwise's default schedule
            max_grad_norm=cfg.max_grad_norm,
            shuffle_dataset=False,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            seed=params.seed,
            dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=gapo_reward if args.task == "diversity" else entropy_reward,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=LoraConfig(
                r=lora.r,
                lora_alpha=lora.lora_alpha,
                lora_dropout=lora.dropout,
                target_modules=list(lora.target_modules),
                task_type="CAUSAL_LM",
            ),
        )
        started = time.perf_counter()
        trainer.train()
        loop = time.perf_counter() - started
        rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    samples = args.steps * args.prompts_per_step * args.k
    return {"samples": samples, "seconds": time.perf_counter() - whole_started, "loop_seconds": loop, "reward_mean": rewards[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--k", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--loss-type", default="grpo", choices=["grpo", "bnpo", "dr_grpo", "dapo"])
    parser.add_argument("--task", default="consistency", choices=["consistency", "diversity"])
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--only", choices=list(ROWS), help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    if args.only:
        result = run_groupwise(args) if ROWS[args.only][0] == "groupwise" else run_trl(args)
        Path(args.json).write_text(json.dumps(result))
        return

    figures = {}
    for name in args.rows:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            cmd = [sys.executable, __file__, "--only", name, "--json", out.name] + [
                f"--steps={args.steps}",
                f"--prompts-per-step={args.prompts_per_step}",
                f"--k={args.k}",
                f"--max-new-tokens={args.max_new_tokens}",
                f"--beta={args.beta}",
                f"--loss-type={args.loss_type}",
                f"--task={args.task}",
            ]
            print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            sys.stderr.write(proc.stderr[-4000:])
            if proc.returncode == 0:
                figures[name] = json.loads(Path(out.name).read_text())
            else:
                lines = [x for x in proc.stderr.strip().splitlines() if "Error" in x or "error" in x]
                figures[name] = {"error": (lines[-1] if lines else proc.stderr.strip().splitlines()[-1])[:300]}
    print()
    print(
        f"config: SmolLM2-135M, LoRA r=16 q/k/v/o, {args.task} prompts, K={args.k}, <= {args.max_new_tokens} new tokens, "
        f"{args.steps} steps x {args.prompts_per_step} prompts, beta={args.beta}, loss={args.loss_type}, "
        f"torch threads={__import__('torch').get_num_threads()}"
    )
    print("\n".join(throughput_table(figures)))
    print()
    print("\n".join(phase_table(figures)))


def throughput_table(figures: dict[str, dict]) -> list[str]:
    """One row per run: samples/s over the training loop and against TRL's, both over the loop and over
    the whole run (engine start, model load and saving included)."""
    loop_rate = lambda f: f["samples"] / f.get("loop_seconds", f["seconds"])  # noqa: E731
    run_rate = lambda f: f["samples"] / f["seconds"]  # noqa: E731
    trl = figures.get("trl", {})
    lines = [
        "| row | samples/s (loop) | × TRL (loop) | × TRL (whole run, start-up included) | loop s | start-up and saving s "
        "| generation s | weight sync s | mean tokens | mismatch |Δ log p| |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, f in figures.items():
        if "error" in f:
            lines.append(f"| {name} | does not run: {f['error']} | | | | | | | | |")
            continue
        ratio = f"{loop_rate(f) / loop_rate(trl):.2f}×" if "samples" in trl else "–"
        whole = f"{run_rate(f) / run_rate(trl):.2f}×" if "samples" in trl else "–"
        gen = f"{f['generation_seconds']:.1f}" if f.get("generation_seconds") else "–"
        sync = f"{f['sync_seconds']:.2f}" if f.get("sync_seconds") else "–"
        tokens = f"{f['tokens'] / f['samples']:.0f}" if f.get("tokens") else "–"
        mismatch = f"{f['mismatch']:.4f}" if f.get("mismatch") is not None else "–"
        loop = f.get("loop_seconds", f["seconds"])
        lines.append(
            f"| {name} | {loop_rate(f):.3f} | {ratio} | {whole} | {loop:.1f} | {f['seconds'] - loop:.1f} | {gen} | {sync} | {tokens} | {mismatch} |"
        )
    return lines


def phase_table(figures: dict[str, dict]) -> list[str]:
    """Where each groupwise run's loop went, in seconds and as a share of the loop (`TIME_PHASES` of the
    trainer, weight sync, and the rest); TRL's trainer does not time its phases."""
    timed = {name: f for name, f in figures.items() if f.get("phases")}
    if not timed:
        return []
    phases = list(next(iter(timed.values()))["phases"])
    lines = ["| row | " + " | ".join(phases) + " | other |", "|---" * (len(phases) + 2) + "|"]
    for name, f in timed.items():
        loop = f.get("loop_seconds") or f["seconds"]
        cells = [f"{f['phases'][p]:.1f} s ({100 * f['phases'][p] / loop:.0f} %)" for p in phases]
        other = max(0.0, loop - sum(f["phases"].values()))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {other:.1f} s ({100 * other / loop:.0f} %) |")
    return lines


if __name__ == "__main__":
    main()
