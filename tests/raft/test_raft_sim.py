"""Deterministic simulation of 2- to 5-member groups (see sim.py for the model and checks).

The default run covers 500 seeds; ``-m slow`` runs 10,000. Every seed ends with a calm
phase that must elect a leader, commit a write and spread the commit index (liveness).
"""

from __future__ import annotations

import logging

import pytest
from sim import InvariantViolation, SimParams, Simulation, run_seed

CHAOS_STEPS = 3000
SEEDS = 500
CHUNK = 25


def group_size(seed: int) -> int:
    """2, 3, 4 or 5 members, each on a quarter of the seeds. Even sizes matter: their quorum
    is more than half (3 of 4, 2 of 2), which a median taken one place off would miss. The
    ``seed // 4`` term spreads every size over the ``seed % 4`` variants below."""
    return 2 + (seed + seed // 4) % 4


def params_for(seed: int, steps: int = CHAOS_STEPS) -> SimParams:
    """Spread the variants over the seeds: group size, slow disks (flushes that start at once
    and end later, or start later), wire copies, push mode, reconnects."""
    return SimParams(
        n=group_size(seed),
        steps=steps,
        torn=seed % 3 == 0,
        late_flush=(seed // 3) % 4 < 2,
        wire=seed % 7 == 0,
        batch_push=seed % 5 != 0,
        p_reconnect=0.02 if seed % 4 == 1 else 0.0,
    )


@pytest.fixture(autouse=True)
def _quiet() -> object:
    # DLedger logs every retry at WARN; thousands of simulated faults would drown the report.
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def overrides_for(seed: int) -> dict[str, str]:
    # Every 11th seed also runs the preferred-leader transfers (checkPreferredLeader).
    return {"preferred_leader_ids": "n1"} if seed % 11 == 0 else {}


@pytest.mark.parametrize("chunk", range(SEEDS // CHUNK))
def test_seeds(chunk: int) -> None:
    for seed in range(chunk * CHUNK, (chunk + 1) * CHUNK):
        run_seed(seed, params_for(seed), **overrides_for(seed))


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(10_000 // 500))
def test_seeds_slow(chunk: int) -> None:
    for seed in range(chunk * 500, (chunk + 1) * 500):
        run_seed(seed, params_for(seed), **overrides_for(seed))


# --- regressions: each seed once broke an invariant, with the parameters given ---------------
# (SimParams defaults, 2000 chaos steps, n = 3 for odd seeds else 5, torn when seed % 3 == 0,
# flushes started on a tick)


def _legacy(seed: int) -> SimParams:
    return SimParams(n=3 if seed % 2 else 5, steps=2000, torn=seed % 3 == 0, late_flush=True)


@pytest.mark.parametrize(
    "seed",
    [
        pytest.param(7, id="stale-read-after-same-term-reelection"),
        pytest.param(8, id="truncate-below-follower-commit"),
        pytest.param(18, id="higher-term-candidate-stuck"),
        pytest.param(33, id="compare-search-truncates-matching-entries"),
        pytest.param(149, id="new-leader-cannot-commit-predecessor-tail"),
        pytest.param(1405, id="replayed-truncate-cuts-acked-entries"),
    ],
)
def test_regression_seed(seed: int) -> None:
    run_seed(seed, _legacy(seed))


def test_deterministic() -> None:
    a = run_seed(42, params_for(42, 1500))
    b = run_seed(42, params_for(42, 1500))
    assert (a.now, a.step_no, a.checker.history) == (b.now, b.step_no, b.checker.history)
    assert a.checker.history, "the run committed nothing"


def test_workload_makes_progress() -> None:
    sim = run_seed(3, params_for(3))
    assert sim.acks > 20
    assert sim.reads_ok > 0
    assert sim.checker.history_max > 50


def test_calm_liveness_is_bounded() -> None:
    sim = Simulation(11, params_for(11, 1000))
    sim.run_chaos(1000)
    took = sim.calm_liveness()
    # Elections take a few heartbeat intervals (100 ms here); a write and the spread of its
    # commit index (COMMIT pushes every 50 ms) add little.
    assert took < 5_000


def test_checker_catches_two_leaders() -> None:
    sim = Simulation(1, SimParams(n=3, steps=10))
    sim.checker.leaders_by_term[0] = "n2"
    with pytest.raises(InvariantViolation, match="two leaders"):
        sim.run_until(lambda: False, 2_000)


def test_preferred_leader_takes_over() -> None:
    for seed in range(5):
        sim = Simulation(seed, SimParams(n=3, steps=0, drop=0, dup=0), preferred_leader_ids="n2")

        def n2_leads(sim: Simulation = sim) -> bool:
            ld = sim.leader()
            return ld is not None and ld.id == "n2"

        assert sim.run_until(n2_leads, 10_000), seed
        sim.run_until(lambda: False, 2_000)
        assert n2_leads(), seed
