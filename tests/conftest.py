from __future__ import annotations

import os
from pathlib import Path

import pytest

from dledger.config import DLedgerConfig

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DLEDGER_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures"


def java_fixtures() -> list[Path]:
    """Every fixture store (a directory holding expected.txt)."""
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


@pytest.fixture
def shared_dir() -> Path:
    return SHARED
