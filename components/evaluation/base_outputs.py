"""The base model's side of an evaluation, kept between evaluations (`paths.base_outputs`).

Base vs tuned samples and scores the base model on the same prompts every time. While the base
weights, the prompts, the sampling settings, the engine and its settings and the machine stay the
same, its samples (seeded), their sentence embeddings and its decision logits are the same too, so a
study's arms, a learning curve and a scheduled retrain compute them once: about half of an
evaluation's time. A record's key is the SHA-256 of all of these (`identity` and the call's own
inputs); anything changed is another key. Records are written atomically and one that cannot be read
is computed again. Standard formats only, no pickle: gzipped JSON for samples, `.npy` for logits and
embeddings. `paths.base_outputs: null` keeps none. Not joblib.Memory or Prefect's task cache: both
persist results with pickle by default and key on a function's arguments, while this key must name
the machine and the engine's settings, which are no argument of the call.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from components.contracts.atomic import atomic_write
from components.generation.sampling import Sample, SamplingConfig
from components.machine import machine_record

log = logging.getLogger(__name__)

FORMAT = 1  # bump when a record's layout or meaning changes: old records are then never read


def engine_identity(base_weights_sha256: str, engine: str, dtype: str, settings: dict) -> dict:
    """What decides the base model's outputs besides a call's prompts and sampling: its weights, the
    engine that ran it with its settings and dtype, and the machine (`machine_record`)."""
    return {"format": FORMAT, "base_weights_sha256": base_weights_sha256, "engine": engine, "dtype": dtype,
            "settings": settings, "machine": machine_record()}  # fmt: skip


@dataclass(frozen=True)
class BaseOutputs:
    """Kept base-model outputs in `root` (None: keep nothing, compute every time), for one `identity`."""

    root: Path | None
    identity: dict

    def key(self, kind: str, inputs: dict) -> str:
        payload = json.dumps({"kind": kind, "identity": self.identity, "inputs": inputs}, sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()

    def samples(self, prompts: list[str], cfg: SamplingConfig, make: Callable[[], list[list[Sample]]]) -> tuple[list[list[Sample]], bool]:
        """(the base samples of `prompts` under `cfg`, whether they were kept ones); `make` computes them."""
        path = self._path("samples", {"prompts": prompts, "sampling": asdict(cfg)}, ".json.gz")
        kept = self._read(path, _read_samples)
        if kept is not None and len(kept) == len(prompts) and all(len(row) == cfg.n for row in kept):
            return kept, True
        made = make()
        self._write(
            path, lambda tmp: tmp.write_bytes(gzip.compress(json.dumps([[asdict(s) for s in row] for row in made]).encode(), mtime=0))
        )
        return made, False

    def logits(self, inputs: dict, n: int, make: Callable[[], np.ndarray]) -> tuple[np.ndarray, bool]:
        """(the base decision logits of the `n` prompts that `inputs` names, whether they were kept ones)."""
        return self._array("decision_logits", inputs, float, lambda a: a.shape == (n,), make)

    def embeddings(self, texts: list[str], settings: dict, make: Callable[[], np.ndarray]) -> tuple[np.ndarray, bool]:
        """(the sentence embeddings of the base's `texts` under the embedder's `settings`, whether they
        were kept ones): one (len(texts), d) float32 row per text, embedded in one call of their own."""
        fits = lambda a: a.ndim == 2 and a.shape[0] == len(texts) and a.dtype == np.float32  # noqa: E731
        return self._array("embeddings", {"texts": texts, "embedder": settings}, np.float32, fits, make)

    def _array(self, kind: str, inputs: dict, dtype, fits: Callable[[np.ndarray], bool], make: Callable[[], np.ndarray]):
        """(a kept `.npy` record of `kind` for `inputs` where it `fits`, else `make()`'s as `dtype`, kept; whether kept)."""
        path = self._path(kind, inputs, ".npy")
        kept = self._read(path, lambda p: np.load(p, allow_pickle=False))
        if kept is not None and fits(kept):
            return kept, True
        made = np.asarray(make(), dtype=dtype)
        self._write(path, lambda tmp: _save_npy(tmp, made))
        return made, False

    def _path(self, kind: str, inputs: dict, suffix: str) -> Path | None:
        return None if self.root is None else Path(self.root) / f"{kind}-{self.key(kind, inputs)}{suffix}"

    @staticmethod
    def _read(path: Path | None, read: Callable[[Path], object]):
        if path is None or not path.is_file():
            return None
        try:
            return read(path)
        except (OSError, ValueError, TypeError, KeyError, EOFError) as exc:  # unreadable: compute again, say so
            log.warning("%s: kept base outputs unreadable (%s); computing them again", path, exc)
            return None

    @staticmethod
    def _write(path: Path | None, write: Callable[[Path], None]) -> None:
        if path is not None:
            atomic_write(path, write)


def _read_samples(path: Path) -> list[list[Sample]]:
    rows = json.loads(gzip.decompress(path.read_bytes()))
    return [[Sample(**{**s, "prompt_ids": tuple(s["prompt_ids"]), "completion_ids": tuple(s["completion_ids"]),
                       "logprobs": tuple(s["logprobs"])}) for s in row] for row in rows]  # fmt: skip


def _save_npy(path: Path, array: np.ndarray) -> None:
    with path.open("wb") as f:  # a file object: np.save would add ".npy" to a path's name
        np.save(f, array, allow_pickle=False)
