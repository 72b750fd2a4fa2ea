"""How `make test` spreads the suite over pytest-xdist workers (tests/conftest.py): each worker is
pinned to its share of the CPUs, and the long files are collected first."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, pytest_collection_modifyitems

# the probe first widens its affinity to every CPU it may use (under `make test` this test's own
# worker is pinned to one), then imports the conftest as a worker does; prints before and after
PROBE = """
import os
try:
    os.sched_setaffinity(0, range(os.cpu_count()))
except OSError:
    pass
before = sorted(os.sched_getaffinity(0))
import tests.conftest
print([before, sorted(os.sched_getaffinity(0))])
"""


def affinity_in_worker(**env: str) -> tuple[list[int], list[int]]:
    """(CPUs before, CPUs after) importing tests/conftest.py in a process with this xdist environment."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "GROUPWISE_TEST_PIN"))}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, check=True)
    before, after = ast.literal_eval(done.stdout.strip())
    return before, after


def test_each_xdist_worker_keeps_to_its_share_of_the_cpus():
    cpus, _ = affinity_in_worker()
    if len(cpus) < 2:
        pytest.skip(f"needs two CPUs to split, this process may use {cpus}")
    assert affinity_in_worker(PYTEST_XDIST_WORKER="gw0", PYTEST_XDIST_WORKER_COUNT="2") == (cpus, cpus[0::2])
    assert affinity_in_worker(PYTEST_XDIST_WORKER="gw1", PYTEST_XDIST_WORKER_COUNT="2") == (cpus, cpus[1::2])
    # more workers than CPUs, opted out, or no xdist at all: every CPU stays available
    assert affinity_in_worker(PYTEST_XDIST_WORKER="gw0", PYTEST_XDIST_WORKER_COUNT=str(len(cpus) + 1)) == (cpus, cpus)
    assert affinity_in_worker(PYTEST_XDIST_WORKER="gw1", PYTEST_XDIST_WORKER_COUNT="2", GROUPWISE_TEST_PIN_CPUS="0") == (cpus, cpus)
    assert affinity_in_worker() == (cpus, cpus)


class Item:
    def __init__(self, name: str, *markers: str):
        self.name, self.markers = name, set(markers)

    def get_closest_marker(self, name: str):
        return name if name in self.markers else None


def test_slow_files_come_first_then_integration_then_unit_in_pytest_order():
    items = [
        Item("unit-a"), Item("integration-a", "integration"), Item("slow-a", "integration", "slow"),
        Item("unit-b"), Item("e2e", "e2e", "slow"), Item("integration-b", "integration"),
    ]  # fmt: skip
    pytest_collection_modifyitems(None, items)
    assert [i.name for i in items] == ["slow-a", "e2e", "integration-a", "integration-b", "unit-a", "unit-b"]
