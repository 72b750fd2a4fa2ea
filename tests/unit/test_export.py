"""`export_version` writes its folder through the one atomic writer: whole, or not at all."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from components.models import lora
from components.tracking import export, model_registry


@pytest.fixture
def registered(monkeypatch, tmp_path):
    """A registered version as export sees it, without MLflow: download, parts and base model faked."""
    base = tmp_path / "base"
    base.mkdir()
    (base / "tokenizer.json").write_text("{}")
    tags = {"gate.passed": "true", "data.sha256": "aa", "data.train_groups": "4", "data.train_prompts": "14",
            "gate.no_nan": "pass", "gate.no_nan.value": "0.0", "gate.no_nan.threshold": "0.0",
            "gate.no_nan.reason": "no_nan: all metrics finite", "param.train.lr": "0.0002"}  # fmt: skip
    version = SimpleNamespace(version="2", run_id="r2", tags=tags)

    def download(uri, dst):
        dst.mkdir(parents=True)
        (dst / "provenance.json").write_text(json.dumps({"source": "tiny", "weights_sha256": "ww"}))
        return dst, version

    monkeypatch.setattr(export, "resolve_version", lambda name, v=None, a=None: version)
    monkeypatch.setattr(model_registry, "download_verified", download)
    monkeypatch.setattr(export, "_pyfunc_parts", lambda local: ({"provenance": local / "provenance.json", "adapter": local}, {}))
    monkeypatch.setattr(export, "expected_weights_sha256", lambda path: "ww")
    monkeypatch.setattr(export, "locate_base_model", lambda expected, packaged, recorded, provenance_file=None: base)
    monkeypatch.setattr(export, "_experiment_id", lambda run_id: "5" if run_id == "r2" else None)
    return tmp_path


def test_the_export_folder_appears_whole(registered, monkeypatch):
    def merge(base_dir, adapter, out, dtype):
        out.mkdir(parents=True, exist_ok=True)
        (out / "model.safetensors").write_bytes(b"w")

    monkeypatch.setattr(lora, "merge_adapter", merge)
    out = registered / "exports" / "m"
    done = export.export_version("m", out, "sqlite:///x.db", version="2")
    assert done.path == out and done.version == "2" and done.base_weights_sha256 == "ww"
    assert {p.name for p in out.iterdir()} == {"model.safetensors", "tokenizer.json", "README.md", "groupwise_export.json"}
    card = (out / "README.md").read_text()
    assert "| passed | true |" in card
    assert "| training groups (train split, train.tasks / train.domains) | `4` |" in card and "| train.lr | `0.0002` |" in card
    assert "| no_nan | pass | 0 | 0 | no_nan: all metrics finite |" in card
    assert "`mlflow ui --backend-store-uri sqlite:///x.db`, then http://127.0.0.1:5000/#/experiments/5/runs/r2 |" in card
    assert json.loads((out / "groupwise_export.json").read_text())["tags"]["data.sha256"] == "aa"
    assert [p.name for p in out.parent.iterdir()] == ["m"]  # no staging folder left


def test_a_failed_export_leaves_nothing(registered, monkeypatch):
    def merge(base_dir, adapter, out, dtype):
        (out / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("out of memory")

    monkeypatch.setattr(lora, "merge_adapter", merge)
    out = registered / "exports" / "m"
    out.mkdir(parents=True)  # an empty folder may be exported into
    with pytest.raises(RuntimeError, match="out of memory"):
        export.export_version("m", out, "sqlite:///x.db", version="2")
    assert [p.name for p in out.parent.iterdir()] == ["m"] and not any(out.iterdir())
