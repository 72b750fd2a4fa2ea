"""The engines' own log goes to a file, not the console: `log_engines_to` (what `train` and `evaluate`
set to <paths.logs>/engines.log) hands vLLM a logging config file (`VLLM_LOGGING_CONFIG_PATH`, vLLM's
own setting); every engine started afterwards appends its INFO lines there, under a header of its
own, and the console keeps none of them. Real vLLM engines on the tiny model."""

from __future__ import annotations

import json
import re

import pytest

from components.config import VllmConfig
from components.generation.sampling import SamplingConfig
from components.generation.vllm_engine import VllmEngine
from components.generation.vllm_process import LOG_CONFIG_ENV, log_engines_to

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ENGINE_LINE = re.compile(r"\b(INFO|WARNING) \d\d-\d\d \d\d:\d\d:\d\d \[vllm")


def test_the_engines_own_log_goes_to_its_file_and_not_to_the_console(tiny_vllm_model_dir, tmp_path, capfd, monkeypatch):
    monkeypatch.delenv(LOG_CONFIG_ENV, raising=False)
    log = tmp_path / "logs" / "engines.log"
    assert log_engines_to(log) and not log_engines_to(log)  # changed once: said once
    try:
        for _ in range(2):
            engine = VllmEngine(tiny_vllm_model_dir, VllmConfig(kv_cache_gb=1, max_model_len=256, max_num_seqs=8), "float32", 0)
            try:
                sampling = SamplingConfig(n=2, max_new_tokens=4, temperature=1.0, top_p=1.0, seed=1)
                assert len(engine.generate(["Name a colour."], sampling)[0]) == 2
            finally:
                engine.close()
    finally:
        log_engines_to(None)
    console = capfd.readouterr()
    text = log.read_text()
    config = json.loads(log.with_name("engines.logging.json").read_text())  # what each engine was handed
    assert config["handlers"]["file"]["filename"] == str(log)
    assert text.count("==== vLLM engine, pid") == 2
    assert len(ENGINE_LINE.findall(text)) >= 4, text[-2000:]  # each engine's start-up lines
    assert not ENGINE_LINE.search(console.out + console.err), (console.out + console.err)[-2000:]
    assert not re.search(r"\bINFO \d\d-\d\d", console.out + console.err), (console.out + console.err)[-2000:]
