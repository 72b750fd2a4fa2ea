"""Projects ready for the register step without training: the tiny base model, a LoRA adapter
(random A, small random B, so it changes the output) and a metrics.json written by the test."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import make_project, seed_tiny_model


def good_metrics(**consistency) -> dict:
    metrics = {
        "consistency": {
            "n_groups": 6, "base_mean_gap": 0.40, "tuned_mean_gap": 0.30, "relative_gap_reduction": 0.25,
            "t_statistic": 4.5, "p_value": 0.002, "p_value_wilcoxon": 0.005, "significant": True,
            "base_helpfulness": 0.55, "tuned_helpfulness": 0.56, "base_mean_words": 10.0, "tuned_mean_words": 11.0,
            "base_empty_rate": 0.02, "tuned_empty_rate": 0.03, "axis": "gender", "q_value": 0.004,
            "base_truncated_share": 0.0, "tuned_truncated_share": 0.01, "max_new_tokens": 512, "valid": True,
            "max_sentences": 3, "base_compliance": 0.80, "tuned_compliance": 0.78,
            "invalid_reason": None,
        },
        "diversity": {
            "n_tasks": 2, "base_distinct_1": 0.5, "tuned_distinct_1": 0.6, "base_distinct_2": 0.7,
            "tuned_distinct_2": 0.8, "base_validity": 0.5, "tuned_validity": 0.5, "base_coverage": 0.25,
            "tuned_coverage": 0.25, "base_tv_to_uniform": 0.7, "tuned_tv_to_uniform": 0.6,
            "base_helpfulness": 0.50, "tuned_helpfulness": 0.52, "base_words": 4.0, "tuned_words": 3.5,
            "base_empty_rate": 0.0, "tuned_empty_rate": 0.0,
        },
        "fairness": {"discrim_eval": {
            "benchmark": "discrim_eval", "split": "heldout", "n_questions": 20, "n_prompts": 300, "question_ids": list(range(20)),
            "ages": [60], "races": ["white"], "method": "mixedlm", "gated": ["gender_female", "gender_non_binary"],
            "base_mean_logit": 0.7, "tuned_mean_logit": 0.7, "base_yes_share": 0.98, "tuned_yes_share": 0.98, "profile_correlation": 0.95,
            "scores": {key: {"axis": "gender", "value": value, "baseline": "male", "n_pairs": 100, "n_questions": 20,
                             "base_score": 0.044, "tuned_score": 0.040}
                       for key, value in (("gender_female", "female"), ("gender_non_binary", "non-binary"))},
        }},
        "notes": [],
    }  # fmt: skip
    metrics["consistency"].update(consistency)
    base, tuned = metrics["consistency"]["base_mean_gap"], metrics["consistency"]["tuned_mean_gap"]
    metrics["consistency"]["relative_gap_reduction"] = (base - tuned) / base
    return metrics


def registry_project(dest: Path, tiny_model_dir: Path, overrides: dict | None = None) -> Path:
    """A tiny-profile project whose gates are the defaults of params.yaml (not the tiny profile's)."""
    gates = {
        "profiles.tiny.gate": {"min_relative_gap_reduction": 0.0, "max_helpfulness_drop": 0.1},
        **(overrides or {}),
    }
    project = make_project(dest, "tiny", gates)
    seed_tiny_model(project, tiny_model_dir)
    return project


def write_adapter(project: Path, seed: int) -> Path:
    """A LoRA adapter for the tiny model in data/checkpoints/latest/adapter (safetensors)."""
    import torch

    from components.config import load_params
    from components.grpo.checkpoint import ADAPTER_DIR
    from components.models.lora import attach_lora
    from components.models.provision import load_base_model

    params = load_params(project / "params.yaml")
    model, _ = load_base_model(params.paths.base_model, "float32")
    torch.manual_seed(seed)
    peft_model = attach_lora(model, params.lora)
    with torch.no_grad():
        for name, weight in peft_model.named_parameters():
            if "lora_B" in name:
                weight.normal_(0.0, 0.05)
    out = params.paths.checkpoints / "latest" / ADAPTER_DIR
    peft_model.save_pretrained(out, safe_serialization=True)
    return out


def write_metrics(project: Path, metrics: dict, bind: bool = True) -> Path:
    """metrics.json as the test writes it; `bind`: vouching, as `evaluate` does, for the adapter and
    base model now on disk (write the adapter first), so `register` takes it as their evaluation."""
    from components.config import load_params
    from components.grpo.checkpoint import ADAPTER_DIR
    from components.release.binding import METRICS_KEY, EvaluationBinding

    params = load_params(project / "params.yaml")
    if bind and METRICS_KEY not in metrics:
        adapter = params.paths.checkpoints / "latest" / ADAPTER_DIR
        metrics = {**metrics, METRICS_KEY: EvaluationBinding.of(params, adapter).to_dict()}
    path = params.paths.reports / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(metrics))
    return path


def assert_serves_adapter(pyfunc_model, adapter_dir: Path | None = None) -> None:
    """The loaded registered model applies a LoRA adapter: its peft state holds lora_B weights that
    are not all zero (peft's initial B: an adapter without effect), and, given `adapter_dir`, they
    equal that folder's adapter_model.safetensors tensor for tensor."""
    import torch
    from peft import PeftModel, get_peft_model_state_dict
    from safetensors.torch import load_file

    peft_model = pyfunc_model.unwrap_python_model().model
    assert isinstance(peft_model, PeftModel), type(peft_model)
    served = get_peft_model_state_dict(peft_model)
    lora_b = [w for k, w in served.items() if "lora_B" in k]
    assert lora_b and max(w.abs().max().item() for w in lora_b) > 0, "the served adapter has no effect (lora_B all zero)"
    if adapter_dir is not None:
        expected = load_file(str(Path(adapter_dir) / "adapter_model.safetensors"))
        assert set(served) == set(expected)
        for key, weight in expected.items():
            assert torch.equal(served[key].to(weight.dtype).cpu(), weight), key
