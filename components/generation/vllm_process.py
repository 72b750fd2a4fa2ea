"""One vLLM `LLM` in a child process of its own, with its engine core inside that process.

Why a process of our own rather than vLLM's default layout (engine core in a process vLLM spawns):
- Reproducible batches. vLLM samples the requests that carry no seed from the worker's global RNG,
  one batched draw per step (`seeding: call`, ~20 % faster on a 2-core CPU than per-request seeds). That
  draw is reproducible only if every call builds the same batches; with a separate engine-core
  process the first step starts while requests are still arriving, so the batches depend on
  timing. Here the engine core runs in the child (VLLM_ENABLE_V1_MULTIPROCESSING=0): `generate`
  adds every request before the first step, and `reseed` resets the RNG before each call.
- Isolation. An in-process engine shares vLLM's global state (its distributed groups, a patched
  `torch.set_num_threads`, frozen GC heap, OpenMP thread binding) with the caller; shutting one
  engine down destroys the groups another engine in the same process still uses. One child per
  engine keeps the caller clean and closing one engine never touches another.

The child receives plain messages over a `multiprocessing` pipe (spawn context) and answers
`("ok", payload)` or `("error", message)`; outputs come back as plain tuples, not vLLM objects.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import threading
import time
import traceback
import weakref
from pathlib import Path
from typing import Any

from components.contracts.errors import UserError
from components.generation.sampling import Sample

_SPAWN = multiprocessing.get_context("spawn")
CLOSE_TIMEOUT_S = 60
POLL_S = 1.0  # how often a waiting parent checks that the child is still alive


class EngineProcessError(UserError, RuntimeError):
    """The child could not start its engine, or failed or died while generating."""


def death_cause(exitcode: int | None) -> str:
    """What a child's exit code says about its death, for the one-line error."""
    if exitcode is None or exitcode >= 0:
        return f"it exited by itself (code {exitcode}); its log is above"
    name = signal.Signals(-exitcode).name if -exitcode in signal.valid_signals() else f"signal {-exitcode}"
    if -exitcode == signal.SIGKILL:
        return f"killed by {name}, which is what the kernel's OOM killer sends when memory runs out (`dmesg | grep -i oom`), or kill -9"
    return f"killed by {name}"


def _samples(index: int, output) -> list[Sample]:
    """vLLM's `RequestOutput` of prompt `index` as plain `Sample`s (truncated: finish_reason "length")."""
    rows = []
    for o in sorted(output.outputs, key=lambda c: c.index):
        logprobs = tuple(step[t].logprob for step, t in zip(o.logprobs or [], o.token_ids))
        rows.append(Sample(index, tuple(output.prompt_token_ids), tuple(o.token_ids), logprobs, o.text, o.finish_reason == "length"))
    return rows


def _generate(
    llm, prompt_ids: list[list[int]], sampling: dict, seeds: list[int] | None, reseed: int | None, lora, progress: bool = False
) -> list:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest
    from vllm.utils.torch_utils import set_random_seed

    if reseed is not None:
        # the batches must be those of the first call: cached prompt tokens would let more
        # sequences into the first step and move every later row of the batched draw
        llm.reset_prefix_cache()
        set_random_seed(reseed)
    params = [SamplingParams(**sampling, seed=s) for s in seeds] if seeds is not None else SamplingParams(**sampling)
    request = LoRARequest(*lora) if lora is not None else None
    outputs = llm.generate([TokensPrompt(prompt_token_ids=x) for x in prompt_ids], params, use_tqdm=progress, lora_request=request)
    return [_samples(i, o) for i, o in enumerate(outputs)]


def _choice_logprobs(llm, prompt_ids: list[list[int]], choice_ids: list[int], lora, progress: bool = False) -> list[list[float]]:
    """log p(choice | prompt) of each choice token at the first generated position: prefill plus one
    greedy step, `SamplingParams(logprob_token_ids=...)` (vLLM's scoring path: the log-softmax of the
    whole vocabulary, gathered at these ids)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    params = SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=list(choice_ids))
    request = LoRARequest(*lora) if lora is not None else None
    outputs = llm.generate([TokensPrompt(prompt_token_ids=x) for x in prompt_ids], params, use_tqdm=progress, lora_request=request)
    rows = []
    for output in outputs:
        first = output.outputs[0].logprobs[0]
        rows.append([float(first[c].logprob) for c in choice_ids])
    return rows


def _tensor_bytes(t) -> tuple[str, tuple[int, ...], bytes]:
    """A CPU tensor as (dtype name, shape, raw bytes): plain data for the pipe (no shared-memory handles)."""
    import torch

    t = t.detach().to("cpu").contiguous()
    return str(t.dtype).removeprefix("torch."), tuple(t.shape), t.view(torch.uint8).numpy().tobytes()


def _from_bytes(dtype: str, shape: tuple[int, ...], data: bytes):
    import torch

    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(getattr(torch, dtype)).reshape(shape)


def _load_into_worker(worker, weights: list) -> int:
    """Runs inside vLLM's worker: an in-place reload (`reload_weights`, checkpoint format: Hugging Face
    names, vLLM fuses q/k/v itself and re-runs each reloaded layer's kernel preparation, e.g. the
    CPU's prepacked GEMM weights). Layers not in `weights` keep theirs; vLLM warns about each of
    them ("Failed to load weights", "Following weights were not loaded"), which here is intended, so
    those loggers are quietened."""
    import logging

    for name in ("layerwise", "inplace"):
        logging.getLogger(f"vllm.model_executor.model_loader.reload.{name}").setLevel(logging.ERROR)
    worker.model_runner.reload_weights(weights_iterator=((name, _from_bytes(*spec)) for name, spec in weights), is_checkpoint_format=True)
    return len(weights)


def _load_weights(llm, weights: list) -> int:
    """New weights into the running engine (no restart); cached prefixes were computed with the old
    weights, so the prefix cache is reset."""
    loaded = llm.collective_rpc(_load_into_worker, args=(weights,))
    llm.reset_prefix_cache()
    return loaded[0]


_CALLS = {
    "generate": lambda llm, payload: _generate(llm, **payload),
    "choice_logprobs": lambda llm, payload: _choice_logprobs(llm, **payload),
    "load_weights": lambda llm, payload: _load_weights(llm, payload),
    "sleep": lambda llm, payload: llm.sleep(level=payload),
    "wake_up": lambda llm, payload: llm.wake_up(),
}


def _failure(exc: BaseException) -> tuple[str, str]:
    """("error", one line) for the parent; the whole traceback goes to the child's stderr (the log)."""
    traceback.print_exc()
    return "error", f"{type(exc).__name__}: {exc}"


def _exit_with_parent(parent: int) -> None:
    """In the child: a daemon thread that ends it once its parent (pid `parent`) is gone, killed by a
    signal, even SIGKILL: an orphaned engine would finish its call for no one, holding its memory (and
    a GPU). A parent gone before the watch starts ends the child at once."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="groupwise-vllm-parent-watch", daemon=True).start()


_ENGINE_FORMAT, _ENGINE_DATEFMT = "%(levelname)s %(asctime)s [%(name)s] %(message)s", "%m-%d %H:%M:%S"
LOG_CONFIG_ENV = "VLLM_LOGGING_CONFIG_PATH"  # vLLM's own setting: a `logging.config.dictConfig` JSON file
_LOG: dict[str, Path | None] = {"path": None}


def log_engines_to(path: Path | None) -> bool:
    """Engines started from now on write vLLM's log (its `vllm` logger: INFO and WARNING lines) to
    `path`, appended, instead of the console; progress bars and errors stay on the console. None: the
    console. Done the way vLLM provides, a logging config file (`VLLM_LOGGING_CONFIG_PATH`) written
    beside the log. True when this changed the setting (the caller says where the log is, once)."""
    changed = _LOG["path"] != path
    _LOG["path"] = path
    return changed


def _log_config(log: Path) -> Path:
    return log.with_name(log.stem + ".logging.json")


def _logging_dict(log: Path) -> dict:
    """vLLM's logger (and its children) to `log` only, one line per record as vLLM formats them."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"engine": {"format": _ENGINE_FORMAT, "datefmt": _ENGINE_DATEFMT}},
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(log), "mode": "a", "formatter": "engine"}},
        "loggers": {"vllm": {"handlers": ["file"], "level": "INFO", "propagate": False}},
    }


def _engine_env(env: dict[str, str]) -> dict[str, str]:
    """The child's environment additions: the caller's, and vLLM's logging config when engines log to a file."""
    log = _LOG["path"]
    if log is None or LOG_CONFIG_ENV in os.environ:  # a user's own vLLM logging config wins
        return dict(env)
    log.parent.mkdir(parents=True, exist_ok=True)  # written for each engine: the folder may have been removed since
    _log_config(log).write_text(json.dumps(_logging_dict(log), indent=1))
    return {**env, LOG_CONFIG_ENV: str(_log_config(log)), "VLLM_CONFIGURE_LOGGING": "1", "GROUPWISE_ENGINE_LOG": str(log)}


def _quiet_imports(log: str) -> None:
    """What the engine process says before vLLM's logging config applies (a warning logged while
    importing vLLM, Python warnings of its dependencies) goes to the engine log too: a root handler
    on the file, and Python's warnings through logging. This process only runs the engine."""
    handler = logging.FileHandler(log)
    handler.setFormatter(logging.Formatter(_ENGINE_FORMAT, _ENGINE_DATEFMT))
    logging.getLogger().addHandler(handler)
    logging.captureWarnings(True)


def _serve(conn, env: dict[str, str], llm_kwargs: dict[str, Any], parent: int) -> None:
    """Child main loop: start the LLM, then answer `_CALLS` messages until `close` or EOF."""
    _exit_with_parent(parent)
    os.environ.update(env)
    if log := env.get("GROUPWISE_ENGINE_LOG"):  # one header per engine in its log
        with open(log, "a") as fh:
            fh.write(f"==== vLLM engine, pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')} ====\n")
        _quiet_imports(log)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    try:
        from vllm import LLM

        llm = LLM(**llm_kwargs)
    except BaseException as exc:  # vLLM raises many types (RuntimeError, ValueError, pydantic errors, SystemExit)
        conn.send(_failure(exc))
        return
    conn.send(("ok", None))
    while True:
        try:
            kind, payload = conn.recv()
        except EOFError:  # the parent went away
            return
        if kind == "close":
            conn.send(("ok", None))
            return
        try:
            conn.send(("ok", _CALLS[kind](llm, payload)))
        except Exception as exc:
            conn.send(_failure(exc))


def _stop(process, conn) -> None:
    """Ask the child to exit, wait CLOSE_TIMEOUT_S, then terminate, then kill; close the pipe."""
    try:
        if process.is_alive():
            try:
                conn.send(("close", None))
                if conn.poll(CLOSE_TIMEOUT_S):
                    conn.recv()
            except (EOFError, OSError):
                pass
            process.join(CLOSE_TIMEOUT_S)
        if process.is_alive():
            process.terminate()
            process.join(5)
        if process.is_alive():
            process.kill()
            process.join(5)
    finally:
        conn.close()


class VllmProcess:
    """Starts `LLM(**llm_kwargs)` in a spawned child; `generate` runs there; `close` ends it.

    A call interrupted between sending and receiving (Ctrl-C, a cancelled flow) leaves the child's
    answer in the pipe, so the process is then marked broken and refuses further calls. The child
    is stopped on `close`, when this object is collected, or at interpreter exit.
    """

    def __init__(self, llm_kwargs: dict[str, Any], env: dict[str, str]):
        self._conn, child = _SPAWN.Pipe()
        self._process = _SPAWN.Process(target=_serve, args=(child, _engine_env(env), llm_kwargs, os.getpid()), name="groupwise-vllm")
        self._process.start()
        child.close()
        self._broken = False
        self._stopper = weakref.finalize(self, _stop, self._process, self._conn)
        try:
            self._receive()
        except BaseException:
            self.close()
            raise

    def _receive(self) -> Any:
        try:
            while not self._conn.poll(POLL_S):
                if not self._process.is_alive():
                    raise EOFError
            status, payload = self._conn.recv()
            self._broken = False  # the answer to the last message is read: back in step
        except (EOFError, OSError):  # a killed child resets the connection
            self._process.join(5)
            raise EngineProcessError(
                f"the vLLM engine process died (exit code {self._process.exitcode}): {death_cause(self._process.exitcode)}"
            ) from None
        if status == "error":
            raise EngineProcessError(payload)
        return payload

    def generate(
        self,
        prompt_ids: list[list[int]],
        sampling: dict[str, Any],
        seeds: list[int] | None = None,
        reseed: int | None = None,
        lora: tuple[str, int, str] | None = None,
        progress: bool = False,
    ) -> list[list[Sample]]:
        """`SamplingParams(**sampling)` for every prompt, or one per prompt with `seeds[i]`.

        `reseed`: reset the engine's global RNG (and its prefix cache) first: requests without
        seeds draw from it; `lora`: `LoRARequest(name, id, path)` arguments, or None; `progress`:
        vLLM's progress bar on the child's stderr (finished prompts, tokens per second).
        """
        payload = {"prompt_ids": prompt_ids, "sampling": sampling, "seeds": seeds, "reseed": reseed, "lora": lora, "progress": progress}
        return self._call("generate", payload)

    def choice_logprobs(
        self, prompt_ids: list[list[int]], choice_ids: list[int], lora: tuple[str, int, str] | None = None, progress: bool = False
    ) -> list[list[float]]:
        """Per prompt, log p(c | prompt) of every token id c of `choice_ids` (one prefill each, no sampling)."""
        payload = {"prompt_ids": prompt_ids, "choice_ids": list(choice_ids), "lora": lora, "progress": progress}
        return self._call("choice_logprobs", payload)

    def load_weights(self, named_tensors) -> int:
        """Replace weights of the running engine: `(Hugging Face name, tensor)` pairs, any subset of the
        model's parameters (vLLM's in-place `reload_weights`); the prefix cache is reset. Returns the count."""
        return self._call("load_weights", [(name, _tensor_bytes(t)) for name, t in named_tensors])

    def sleep(self, level: int) -> None:
        """vLLM sleep mode: free the KV cache (level 1: weights offloaded to host, 2: discarded)."""
        self._call("sleep", level)

    def wake_up(self) -> None:
        self._call("wake_up", None)

    def _call(self, kind: str, payload: Any) -> Any:
        if self._broken or not self._stopper.alive:
            raise EngineProcessError("the vLLM engine process is closed or was interrupted mid-call; start a new one")
        self._broken = True  # until the answer to this call has been read
        try:
            self._conn.send((kind, payload))
        except OSError as exc:  # a dead child's end of the pipe is closed: say how it died
            self._process.join(5)
            code = self._process.exitcode
            raise EngineProcessError(f"the vLLM engine process died (exit code {code}): {death_cause(code)}") from exc
        return self._receive()

    def close(self) -> None:
        """Stop the child (idempotent)."""
        self._stopper()
