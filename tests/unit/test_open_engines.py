"""`open_engines`: the evaluation's engines start at the same time, in order, and a failed start
closes the others. The engines here are fakes (labelled below) that only record their lives."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from components.config import EvalConfig
from components.generation.engines import ENGINES, EngineStartError, open_engines


class FakeEngine:
    """A fake of a generation engine: its dtype, and whether it was closed."""

    name = "fake"

    def __init__(self, dtype: str):
        self.dtype, self.closed = dtype, False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_engines():
    """A registered engine factory that meets every other start at a barrier (so the starts must
    overlap, or the barrier times out) and refuses dtype "refused" after that."""
    made: list[FakeEngine] = []
    together = threading.Barrier(2, timeout=10)

    def factory(model_dir: Path, cfg: EvalConfig, dtype: str, seed: int) -> FakeEngine:
        together.wait()
        if dtype == "refused":
            raise EngineStartError("fake engine: this dtype does not start")
        made.append(FakeEngine(dtype))
        return made[-1]

    ENGINES.add("fake-at-once", factory)
    try:
        yield made
    finally:
        ENGINES.pop("fake-at-once")


def test_engines_start_at_the_same_time_and_come_back_in_order(fake_engines, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    opened = open_engines("fake-at-once", Path("."), EvalConfig(), ["bfloat16", "float32"], 0)
    assert [engine.dtype for engine, _ in opened] == ["bfloat16", "float32"]
    assert [choice.used for _, choice in opened] == ["fake-at-once"] * 2 and not any(e.closed for e, _ in opened)


def test_a_failed_start_closes_the_engine_that_did_start(fake_engines, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(EngineStartError, match="this dtype does not start"):
        open_engines("fake-at-once", Path("."), EvalConfig(), ["bfloat16", "refused"], 0)
    (started,) = fake_engines
    assert started.dtype == "bfloat16" and started.closed
