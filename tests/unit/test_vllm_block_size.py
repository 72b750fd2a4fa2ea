"""The KV-cache block size (`eval.vllm.block_size`, `train.rollout.vllm.block_size`): what the engine
and the server are started with, the bound it takes, and the former default that saved work keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.config import ParamsError, load_params
from components.config.training import VllmConfig
from components.generation.serve import server_command
from components.generation.vllm_engine import engine_kwargs
from tests.conftest import ROOT


def test_the_engine_and_the_server_take_the_block_size_and_null_leaves_vllm_s_own():
    model = Path("/models/base")
    assert engine_kwargs(VllmConfig(), model, model, "float32", 0)["block_size"] == 32
    assert "block_size" not in engine_kwargs(VllmConfig(block_size=None), model, model, "float32", 0)
    argv = server_command(model, "m", VllmConfig(block_size=64), 8000, "float32").argv
    assert argv[argv.index("--block-size") + 1] == "64"
    assert "--block-size" not in server_command(model, "m", VllmConfig(block_size=None), 8000, "float32").argv


def test_the_defaults_are_32_for_both_engines_and_a_size_off_the_16_grid_is_refused(tmp_path):
    params = load_params(ROOT / "params.yaml")
    assert params.eval.vllm.block_size == params.train.rollout.vllm.block_size == 32
    path = tmp_path / "params.yaml"
    path.write_text("eval:\n  vllm:\n    block_size: 24\n")
    with pytest.raises(ParamsError, match="eval.vllm.block_size"):
        load_params(path)


def test_the_frozen_confirmation_runs_vllm_s_former_block_size():
    """Its frozen params were written before the field existed: its arms ran at vLLM's own size."""
    from components.study.domain import load_study, study_params

    params = study_params(*load_study(ROOT / "params.yaml", "confirmation"))
    assert params.eval.vllm.block_size is None and params.train.rollout.vllm.block_size is None
    assert load_params(ROOT / "params.yaml").eval.vllm.block_size == 32
