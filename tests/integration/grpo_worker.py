"""A training process for the resume and DDP tests (run as a subprocess, or by torchrun).

python grpo_worker.py train  --model-dir M --out O [--resume] [--steps N] [--rollout-engine vllm]  # the real trainer
torchrun --nproc-per-node 2 grpo_worker.py update --model-dir M --out O      # two policy updates on fixed data
                                                     [--pairing]             # with the decision pairing term
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.grpo_data import consistency_groups, decision_group, tiny_params  # noqa: E402

groups = consistency_groups
params = tiny_params


def with_vllm_rollouts(p, **vllm):
    """`p` with colocated vLLM rollouts sized for tests (1 GiB KV cache, short sequences, fp32)."""
    from components.config import RolloutConfig, RolloutVllmConfig

    settings = {"kv_cache_gb": 1, "max_model_len": 256, "max_num_seqs": 64, "dtype": "float32", **vllm}
    rollout = RolloutConfig(engine="vllm", vllm=RolloutVllmConfig(**settings))
    return p.model_copy(update={"train": p.train.model_copy(update={"rollout": rollout})})


def run_train(args) -> None:
    from components.grpo.trainer import train

    p = params(steps=args.steps, save_every=1, max_new_tokens=args.max_new_tokens, groups_per_step=args.groups_per_step,
               lr_scheduler=args.lr_scheduler, warmup_steps=args.warmup_steps)  # fmt: skip
    if args.rollout_engine == "vllm":
        p = with_vllm_rollouts(p)
    out = Path(args.out)
    result = train(p, groups(4), Path(args.model_dir), out / "latest", show_progress=False, resume=args.resume, state_dir=out / "resume")
    if int(__import__("os").environ.get("RANK", "0")) == 0:
        (out / "result.json").write_text(json.dumps({"resumed_from": result.resumed_from, "samples": result.samples}))


def run_update(args) -> None:
    """Two policy updates on fixed rollouts (the same data whatever the world size)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    from components.contracts.rollouts import GroupBatch, Rollout
    from components.grpo.advantages import grpo_advantage
    from components.grpo.distributed import init_from_env
    from components.grpo.trainer import seed_everything
    from components.grpo.update import policy_update
    from components.models.lora import attach_lora
    from components.models.provision import load_base_model

    ctx = init_from_env()
    from components.grpo.trainer import batch_reward_std

    p = params(groups_per_step=4, groups_per_micro_batch=args.micro, loss_type=args.loss_type, beta=0.04)
    if args.pairing:  # two decision groups beside the four free-text ones, trained by the pairing term (one per rank)
        from components.config import DecisionPairingConfig

        p = params(groups_per_step=6, decision_groups_per_step=2, groups_per_micro_batch=args.micro, loss_type=args.loss_type,
                   beta=0.04, decision_pairing=DecisionPairingConfig(weight=1.0, beta=0.2))  # fmt: skip
    p = p.model_copy(update={"train": p.train.model_copy(update={"advantage": p.train.advantage.model_copy(update={"scale": args.scale})})})
    seed_everything(0)
    base, tok = load_base_model(Path(args.model_dir))
    model = attach_lora(base, p.lora)
    trainer_model = torch.nn.parallel.DistributedDataParallel(model) if ctx.enabled else model
    optimizer = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-2)
    all_groups = groups(4)
    gen = torch.Generator().manual_seed(123)
    results = []
    for _update in range(2):
        rollouts = []
        for g, group in enumerate(all_groups):
            for member in group.members:
                prompt_ids = tuple(tok(member.text, add_special_tokens=False)["input_ids"])
                for _ in range(3):
                    length = int(torch.randint(1, 9, (1,), generator=gen))
                    ids = tuple(int(t) for t in torch.randint(0, 1000, (length,), generator=gen))
                    # --engine-logp first-half: the first half of the groups (rank 0's under two processes) carry
                    # an engine's log-probs, as vLLM free-text rollouts beside decision groups (the trainer's prefill) do
                    engine = tuple(-2.0 for _ in ids) if args.engine_logp == "first-half" and g < len(all_groups) // 2 else ()
                    rollouts.append(Rollout(g, group.group_id, member.variant_id, member.text, "", prompt_ids, ids, False, engine))
        rewards_all = torch.rand(len(rollouts), generator=gen)
        mine = set(ctx.shard(list(range(len(all_groups)))))
        local_groups = [all_groups[g] for g in sorted(mine)]
        remap = {g: i for i, g in enumerate(sorted(mine))}
        local = [
            Rollout(
                remap[r.group_index],
                r.group_id,
                r.variant_id,
                r.prompt,
                r.completion,
                r.prompt_ids,
                r.completion_ids,
                False,
                r.behaviour_logprobs,
            )  # fmt: skip
            for r in rollouts
            if r.group_index in mine
        ]
        rewards = torch.stack([rewards_all[i] for i, r in enumerate(rollouts) if r.group_index in mine])
        batch = GroupBatch(local_groups, local)
        # the trainer's own global std under DDP (score_batch): every rank's rewards, one all-reduce
        global_std = batch_reward_std(rewards, ctx) if args.scale == "batch" and ctx.enabled else None
        advantages = grpo_advantage(rewards, batch.index, p.train.advantage, global_std=global_std)
        extra_loss = None
        if args.pairing:
            from components.grpo.counterfactual import pairing_term_loss
            from components.grpo.reference import BASE

            decided = ctx.shard([decision_group(0), decision_group(1)])
            extra_loss = pairing_term_loss(trainer_model, model, tok, decided, p.train, BASE, ctx.world_size)
        metrics = policy_update(model, trainer_model, optimizer, None, batch, advantages, p.train, tok.pad_token_id, ctx,
                                extra_loss=extra_loss)  # fmt: skip
        results.append(metrics)
    if ctx.is_main:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in get_peft_model_state_dict(model).items()}, str(out / "adapter.safetensors"))
        (out / "metrics.json").write_text(json.dumps(results))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["train", "update"])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--groups-per-step", type=int, default=2)
    parser.add_argument("--micro", type=int, default=1)
    parser.add_argument("--loss-type", default="grpo")
    parser.add_argument("--scale", choices=["group", "batch", "none"], default="group")
    parser.add_argument("--engine-logp", choices=["none", "first-half"], default="none")
    parser.add_argument("--pairing", action="store_true", help="add train.decision_pairing's term on two decision groups")
    parser.add_argument("--lr-scheduler", choices=["constant", "linear", "cosine"], default="constant")
    parser.add_argument("--warmup-steps", type=int, default=0)
    parser.add_argument("--rollout-engine", choices=["transformers", "vllm"], default="transformers")
    args = parser.parse_args()
    run_train(args) if args.mode == "train" else run_update(args)
