"""Shared by the message-store tests: the fixture path, and ``record_oracle`` importable by name
(``from record_oracle import ...``) under ``--import-mode=importlib``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Stores written by the Java RocketMQ 4.9.4 store, with their expected listings (see the README
# there). Tests open them read-only or work on copies.
FIXTURES_MQ = REPO / "tests" / "fixtures" / "rocketmq-4.9"

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture
def fixtures_mq() -> Path:
    """``FIXTURES_MQ``: open what is under it read-only, or copy it to tmp_path first."""
    return FIXTURES_MQ
