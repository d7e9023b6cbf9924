"""Conformance: stores written by the Java DLedger read back exactly as their listings."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from dledger.store.file import MmapFileStore
from tests.conftest import FIXTURES, java_fixtures


def test_fixtures_are_present():
    # Conformance must not pass by finding nothing.
    assert [p.name for p in java_fixtures()] == ["three-terms"], f"fixtures missing under {FIXTURES}"


def _node_dir(fixture: Path) -> Path:
    nodes = sorted(p for p in fixture.iterdir() if p.is_dir() and p.name.startswith("dledger-"))
    assert len(nodes) == 1
    return nodes[0]


def _snapshot(root: Path) -> dict[str, tuple[int, float, str]]:
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_api_reads_fixture_as_listed(java_fixture: Path):
    expected = (java_fixture / "expected.txt").read_text().splitlines()
    with MmapFileStore(_node_dir(java_fixture), readonly=True) as store:
        got = [f"begin {store.ledger_begin_index} end {store.ledger_end_index} endTerm {store.ledger_end_term}"]
        for e in store.iter_entries():
            got.append(f"{e.index} {e.term} {e.pos} {len(e.body)} {hashlib.sha256(e.body).hexdigest()[:16]}")
    assert got == expected


def test_cli_dump_digest_is_expected_and_changes_nothing(java_fixture: Path):
    node = _node_dir(java_fixture)
    before = _snapshot(node)
    out = subprocess.run(
        [sys.executable, "-m", "dledger.cli", "dump", str(node), "--digest"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert out == (java_fixture / "expected.txt").read_text()
    assert _snapshot(node) == before


def test_cli_verify_fixture_clean(java_fixture: Path):
    res = subprocess.run(
        [sys.executable, "-m", "dledger.cli", "verify", str(_node_dir(java_fixture))], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.startswith("ok:")


def test_java_segment_sizes_are_read_from_files(java_fixture: Path):
    node = _node_dir(java_fixture)
    with MmapFileStore(node, readonly=True) as store:
        assert store.data_file_size == (node / "data" / "00000000000000000000").stat().st_size
        assert store.index_file_size == (node / "index" / "00000000000000000000").stat().st_size
