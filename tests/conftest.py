from __future__ import annotations

from pathlib import Path

import pytest

from dledger.config import DLedgerConfig

REPO = Path(__file__).resolve().parents[1]
# Stores written by the Java implementations, vendored with their expected listings so the
# suite passes from a bare clone.
FIXTURES = REPO / "tests" / "fixtures"


def java_fixtures() -> list[Path]:
    """Every Java DLedger fixture store (a directory holding expected.txt)."""
    return sorted(p.parent for p in FIXTURES.rglob("expected.txt"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Every Java-written fixture store, for any test that takes ``java_fixture``.
    if "java_fixture" in metafunc.fixturenames:
        found = java_fixtures()
        metafunc.parametrize("java_fixture", found, ids=[p.name for p in found])


@pytest.fixture
def small_config() -> DLedgerConfig:
    """Small segments so a test crosses many file boundaries with a few hundred entries."""
    return DLedgerConfig(mapped_file_size_for_entry_data=4096, mapped_file_size_for_entry_index=320)
