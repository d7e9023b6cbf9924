"""The dledger console script, run as a user runs it: a separate process."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest


def dledger(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dledger.cli", *args], input=stdin, capture_output=True,
                          text=True, check=check, timeout=120)


def test_append_get_dump_round_trip(tmp_path: Path):
    node = tmp_path / "dledger-n0"
    assert dledger("append", str(node), "--data", "hello").stdout.split() == ["0"]
    out = dledger("append", str(node), "--stdin", stdin="a\nbb\n\nccc\n").stdout.split()
    assert out == ["1", "2", "3"]  # blank lines are not entries
    assert dledger("get", str(node), "-i", "2").stdout == "bb\n"
    got = json.loads(dledger("get", str(node), "-i", "3", "--json").stdout)
    assert base64.b64decode(got["body_base64"]) == b"ccc" and got["index"] == 3
    lines = dledger("dump", str(node), "--from", "1", "--to", "2", "--json").stdout.splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["index"] for r in rows] == [1, 2]
    assert [base64.b64decode(r["body_base64"]) for r in rows] == [b"a", b"bb"]
    digest = dledger("dump", str(node), "--digest").stdout.splitlines()
    assert digest[0] == "begin 0 end 3 endTerm 0"
    assert len(digest) == 5 and digest[1].split()[:4] == ["0", "0", "0", "5"]
    assert dledger("verify", str(node)).returncode == 0


def test_append_with_term_and_committed(tmp_path: Path):
    node = tmp_path / "dledger-n0"
    dledger("append", str(node), "--term", "3", "--data", "x")
    from dledger.store.file import MmapFileStore

    with MmapFileStore(node, readonly=True) as s:
        assert (s.ledger_end_term, s.committed_index) == (3, 0)
    # A lower term than the ledger's is refused, with DLedger's code, and nothing is written.
    res = dledger("append", str(node), "--term", "1", "--data", "y", check=False)
    assert res.returncode == 2 and "INCONSISTENT_TERM" in res.stderr
    with MmapFileStore(node, readonly=True) as s:
        assert s.ledger_end_index == 0


def test_bad_directories_get_clear_errors(tmp_path: Path):
    res = dledger("dump", str(tmp_path / "missing"), check=False)
    assert res.returncode == 2 and "no dledger store" in res.stderr
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "file.txt").write_text("x")
    res = dledger("append", str(tmp_path / "junk"), "--data", "x", check=False)
    assert res.returncode == 2 and "not a dledger node directory" in res.stderr
    res = dledger("get", str(tmp_path / "junk"), "-i", "0", check=False)
    assert res.returncode == 2


def test_get_out_of_range(tmp_path: Path):
    node = tmp_path / "dledger-n0"
    dledger("append", str(node), "--data", "x")
    res = dledger("get", str(node), "-i", "5", check=False)
    assert res.returncode == 2 and "INDEX_OUT_OF_RANGE" in res.stderr


def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path: Path):
    node = tmp_path / "dledger-n0"
    dledger("append", str(node), "--stdin", stdin="".join(f"line {i}\n" for i in range(5000)))
    res = dledger("dump", str(node), "--digest")
    assert res.stderr == ""
    assert len(res.stdout.splitlines()) == 5001


def test_demo_runs(tmp_path: Path):
    out = dledger("demo", "--dir", str(tmp_path), "--count", "10").stdout
    assert "appended 10 entries at [0, 9]" in out
    assert (tmp_path / "dledger-n0" / "checkpoint").is_file()


@pytest.mark.timeout(120)
def test_bench_store_quick_json():
    res = dledger("bench", "store", "--quick", "--json")
    rows = json.loads(res.stdout)
    names = [r["name"] for r in rows]
    assert names == ["batch_append_1k", "append_100b", "random_get", "batch_lookup", "batch_scan",
                     "recovery_crc", "crc32"]
    for r in rows:
        assert set(r) == {"name", "value", "unit", "baseline_name", "baseline_value", "ratio"}
        assert r["value"] > 0 and r["baseline_value"] > 0
        assert abs(r["ratio"] - r["value"] / r["baseline_value"]) < 0.01 * r["ratio"] + 1e-3
