"""Simulated consensus steps per second, against a plain Python loop in the same run.

Run: PYTHONPATH=. .venv/bin/python -m pytest bench/test_bench_raft_sim.py --benchmark-only

Group ``raft-sim``:
- ``sim-3`` / ``sim-5``: STEPS events of the deterministic simulator (tests/raft/sim.py)
  over 3 and 5 members with its default faults and workload, every invariant checked after
  every event;
- ``baseline-dict-copy``: the same number of ``dict(msg)`` copies of a push-sized message
  dict, a floor for "one Python-level thing per event".
``extra_info`` holds events/s, so the cost of an event reads as a multiple of the baseline.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "raft"))

from sim import SimParams, Simulation

STEPS = 2_000


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def _run_sim(n: int) -> int:
    sim = Simulation(1, SimParams(n=n, steps=STEPS))
    sim.run_chaos(STEPS)
    return sim.step_no


@pytest.mark.benchmark(group="raft-sim")
@pytest.mark.parametrize("n", [3, 5], ids=["sim-3", "sim-5"])
def test_sim_steps(benchmark: BenchmarkFixture, n: int) -> None:
    steps = benchmark.pedantic(_run_sim, args=(n,), rounds=3, iterations=1)
    assert steps == STEPS
    benchmark.extra_info["events_per_s"] = STEPS / benchmark.stats.stats.mean


@pytest.mark.benchmark(group="raft-sim")
def test_baseline_dict_copy(benchmark: BenchmarkFixture) -> None:
    msg = {
        "_type": "PushEntryRequest",
        "group": "g",
        "remote_id": "n1",
        "local_id": "n0",
        "leader_id": "n0",
        "term": 3,
        "code": 200,
        "req_id": 1,
        "type": 0,
        "commit_index": 10,
        "entries": [[11, 3, 4096, b"x" * 32, 1, 0, 0, 0]],
    }

    def loop() -> int:
        total = 0
        for _ in range(STEPS):
            total += len(dict(msg))
        return total

    benchmark.pedantic(loop, rounds=3, iterations=1)
    benchmark.extra_info["events_per_s"] = STEPS / benchmark.stats.stats.mean
