"""benchmarks/precision_agreement.py on the tests' tiny model: the same batch and weights through one
fp32 and one bf16 update, compared (seconds here; the figures in docs/benchmarks.md are the real model's)."""

from __future__ import annotations

import json

import torch

from tests.conftest import ROOT, script_module

SCRIPT = ROOT / "benchmarks" / "precision_agreement.py"


def _module():
    return script_module(SCRIPT)


def test_identical_runs_agree_exactly_and_opposite_updates_do_not():
    compare = _module().compare
    grad = torch.tensor([1.0, -2.0, 3.0])
    run = {"logp": torch.tensor([-1.0, -2.0]), "grad": grad, "update": grad, "seconds": 2.0,
           "metrics": {"loss": 0.5, "kl": 0.0, "grad_norm": 1.0, "time/reference_s": 0.5}}  # fmt: skip
    same = compare({"fp32": run, "bf16": run})
    assert same["mean_abs_dlogp"] == 0 and same["gradient_cosine"] == same["update_cosine"] == 1.0 and same["speedup"] == 1.0
    flipped = compare({"fp32": run, "bf16": {**run, "update": -grad, "logp": run["logp"] - 0.5, "seconds": 1.0}})
    assert flipped["update_cosine"] == -1.0 and flipped["update_sign_agreement"] == 0.0
    assert flipped["max_abs_dlogp"] == 0.5 and flipped["speedup"] == 2.0


def test_the_script_compares_one_update_in_each_precision_on_the_same_batch(tiny_model_dir, tmp_path):
    out = tmp_path / "agreement.json"
    result = _module().main(["--model-dir", str(tiny_model_dir), "--groups", "1", "--k", "2", "--max-new-tokens", "6", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert set(result["runs"]) == {"fp32", "bf16"} and result["tokens"] > 0
    assert all(run["forward_backward_s"] > 0 and run["seconds"] > 0 for run in result["runs"].values())
    # the same batch and weights: bf16 rounds, it does not change what the update does
    assert 0 < result["mean_abs_dlogp"] < 0.05
    assert result["gradient_cosine"] > 0.98 and result["update_cosine"] > 0.9
