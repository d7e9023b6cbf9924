"""Make tests/raft/sim.py importable as ``sim`` under ``--import-mode=importlib``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the 10,000-seed simulation only when asked (``-m slow`` or DLEDGER_SLOW=1), so a
    bare ``pytest tests/raft`` stays within a few minutes."""
    if "slow" in (config.getoption("-m") or "") or os.environ.get("DLEDGER_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow simulation: use -m slow or DLEDGER_SLOW=1")
    for item in items:
        if "slow" in item.keywords and _HERE in str(item.path):
            item.add_marker(skip)
