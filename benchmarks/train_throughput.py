"""GRPO training throughput: groupwise vs TRL's GRPOTrainer, side by side in one run.

Same configuration for both: SmolLM2-135M-Instruct (the embedded GGUF, converted once), LoRA r=16
on q/k/v/o, K samples per prompt, the same diversity prompts in the same order, the same reward
(GAPO frequency-aware), the same steps, beta, clipping, loss type and precision. Each framework
runs in its own subprocess (clean threads and memory); the figure is samples/s over the training
loop (model loading excluded for both).

    python benchmarks/train_throughput.py                   # 3 steps x 4 prompts x K=6, 64 tokens
    python benchmarks/train_throughput.py --precision bf16  # both frameworks in bf16 autocast
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


def benchmark_params(args):
    from components.config import load_params

    params = load_params(ROOT / "params.yaml", "default")
    overrides = {
        "tasks": ["diversity"],
        "steps": args.steps,
        "groups_per_step": args.prompts_per_step,
        "samples_per_prompt": args.k,
        "max_new_tokens": args.max_new_tokens,
        "generation_batch_size": args.prompts_per_step * args.k,
        "beta": args.beta,
        "loss_type": args.loss_type,
        "precision": args.precision,
        "num_iterations": 1,
    }
    train = params.train.model_copy(update=overrides)
    reward = params.reward.model_copy(update={"weights": {"frequency_aware": 1.0}})
    return params.model_copy(update={"train": train, "reward": reward})


def prompt_groups(params, n: int):
    from components.data import build_groups

    groups = [g for g in build_groups(params.paths.templates, params.data, params.seed) if g.task == "diversity"]
    groups = sorted(groups, key=lambda g: g.group_id)
    return (groups * (n // len(groups) + 1))[:n]


def base_model(params) -> Path:
    from components.models.provision import prepare_base_model

    out = ROOT / "data" / "models" / "base"
    prepare_base_model(params.model, out, params.seed)
    return out


def run_groupwise(args) -> dict:
    from components.grpo.trainer import train

    params = benchmark_params(args)
    groups = prompt_groups(params, args.steps * args.prompts_per_step)
    model_dir = base_model(params)
    # the schedule takes groups in order when there are exactly steps x groups_per_step of them
    with tempfile.TemporaryDirectory() as tmp:
        result = train(params, groups, model_dir, Path(tmp) / "ckpt", show_progress=True, shuffle=False)
    return {"samples": result.samples, "seconds": result.seconds, "reward_mean": result.final["reward_mean"]}


def run_trl(args) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from components.grpo.types import Rollout
    from components.rewards.diversity import frequency_aware

    params = benchmark_params(args)
    groups = prompt_groups(params, args.steps * args.prompts_per_step)
    by_text = {g.members[0].text: g for g in groups}
    model_dir = base_model(params)

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
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = params.train
    lora = params.lora
    with tempfile.TemporaryDirectory() as tmp:
        config = GRPOConfig(
            output_dir=tmp,
            use_cpu=True,
            bf16=args.precision == "bf16",
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
            reward_funcs=gapo_reward,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=LoraConfig(
                r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=list(lora.target_modules),
                task_type="CAUSAL_LM",
            ),
        )
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
        rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return {"samples": args.steps * args.prompts_per_step * args.k, "seconds": seconds, "reward_mean": rewards[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--k", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--loss-type", default="grpo", choices=["grpo", "bnpo", "dr_grpo", "dapo"])
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--only", choices=["groupwise", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    if args.only:
        result = run_groupwise(args) if args.only == "groupwise" else run_trl(args)
        Path(args.json).write_text(json.dumps(result))
        return

    figures = {}
    for name in ("groupwise", "trl"):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            cmd = [sys.executable, __file__, "--only", name, "--json", out.name] + [
                f"--steps={args.steps}", f"--prompts-per-step={args.prompts_per_step}", f"--k={args.k}",
                f"--max-new-tokens={args.max_new_tokens}", f"--beta={args.beta}", f"--loss-type={args.loss_type}",
                f"--precision={args.precision}",
            ]
            print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
            subprocess.run(cmd, check=True)
            figures[name] = json.loads(Path(out.name).read_text())
    print()
    print(f"config: SmolLM2-135M, LoRA r=16 q/k/v/o, K={args.k}, {args.max_new_tokens} new tokens, "
          f"{args.steps} steps x {args.prompts_per_step} prompts, beta={args.beta}, loss={args.loss_type}, "
          f"{args.precision}, torch threads={__import__('torch').get_num_threads()}")
    for name, f in figures.items():
        print(f"{name:>10}: {f['samples']} samples in {f['seconds']:.1f} s = {f['samples'] / f['seconds']:.3f} samples/s"
              f"  (last reward mean {f['reward_mean']:.3f})")
    ratio = (figures["groupwise"]["samples"] / figures["groupwise"]["seconds"]) / (
        figures["trl"]["samples"] / figures["trl"]["seconds"]
    )
    print(f"     ratio: groupwise / TRL = {ratio:.2f}x")


if __name__ == "__main__":
    main()
