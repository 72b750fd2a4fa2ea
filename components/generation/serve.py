"""`groupwise serve`: an OpenAI-compatible chat endpoint on 127.0.0.1 for a merged export.

vLLM's own OpenAI server (`vllm.entrypoints.openai.api_server`) serves the folder `groupwise export`
wrote: `/v1/chat/completions` applies the model's chat template, batches requests continuously and
runs the engine evaluation measured. (`mlflow models serve` on the pyfunc speaks MLflow's
`/invocations` format and decodes with transformers one batch at a time: fine for a smoke check,
not for users.) The engine settings are `eval.vllm`'s, so what is served decodes like what was judged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from components.config import VllmConfig
from components.generation.vllm_engine import engine_env

HOST = "127.0.0.1"  # never another interface: put an authenticating proxy in front to expose it


@dataclass(frozen=True)
class ServerCommand:
    argv: list[str]
    env: dict[str, str]
    url: str


def server_command(model_dir: Path, served_name: str, cfg: VllmConfig, port: int, dtype: str) -> ServerCommand:
    """The vLLM OpenAI server's command line and environment for `model_dir` on 127.0.0.1:`port`."""
    argv = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir), "--served-model-name", served_name,
        "--host", HOST, "--port", str(port), "--dtype", dtype,
        "--max-model-len", str(cfg.max_model_len), "--max-num-seqs", str(cfg.max_num_seqs),
        "--disable-uvicorn-access-log",
    ]  # fmt: skip
    if cfg.enforce_eager:
        argv.append("--enforce-eager")
    if cfg.block_size is not None:
        argv += ["--block-size", str(cfg.block_size)]
    env = {**os.environ, **engine_env(cfg), "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"}
    return ServerCommand(argv, env, f"http://{HOST}:{port}")


def wait_until_ready(url: str, process: subprocess.Popen, timeout: float) -> None:
    """Poll `<url>/v1/models` until the server answers; RuntimeError if it dies or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the vLLM server exited with code {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1.0)
    raise TimeoutError(f"the vLLM server at {url} was not ready after {timeout:.0f} s")


def chat(url: str, model: str, messages: list[dict[str, str]], **generation) -> str:
    """One `/v1/chat/completions` request; the first choice's text."""
    body = json.dumps({"model": model, "messages": messages, **generation}).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())["choices"][0]["message"]["content"]
