"""The Java-written RocketMQ 4.9.4 fixtures, read through the store API and through ``dledger mq``:
the listings equal ``expected/`` line for line, and nothing in the fixture changes."""

from __future__ import annotations

import contextlib
import hashlib
import io
import subprocess
import sys
from pathlib import Path

import pytest

from dledger.rocketmq.cli import main as mq_main
from dledger.rocketmq.store.listing import (
    CONSUME_QUEUE_HEADER,
    INDEX_HEADER,
    MESSAGES_HEADER,
    consume_queue_lines,
    escape,
    message_line,
    message_lines,
    unescape,
)

REPO = Path(__file__).resolve().parents[2]
FIXTURES_MQ = REPO / "tests" / "fixtures" / "rocketmq-4.9"
NAMES = ["classic-3topics", "dledger-1node"]


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Size, mtime and sha256 of every file (and the set of names) under ``root``."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def expected(name: str, listing: str) -> list[str]:
    return (FIXTURES_MQ / name / "expected" / listing).read_text(encoding="utf-8").splitlines()


def mq_cli_command() -> list[str]:
    """``dledger mq`` as a process: through the ``dledger`` CLI once it carries ``mq``, else this module's main."""
    from dledger import cli

    parser = cli.build_parser()
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            parser.parse_args(["mq", "stats", "x"])
    except SystemExit:
        return [sys.executable, "-m", "dledger.rocketmq.cli"]
    return [sys.executable, "-m", "dledger.cli", "mq"]


def run_mq(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*mq_cli_command(), *args], capture_output=True, cwd=REPO, timeout=300)


def test_the_fixtures_are_present() -> None:
    for name in NAMES:
        root = FIXTURES_MQ / name
        for listing in ("messages.tsv", "consumequeue.tsv", "index.tsv", "summary.txt"):
            assert (root / "expected" / listing).is_file(), f"{name}/expected/{listing}"
        assert (root / "index").is_dir() and (root / "consumequeue").is_dir()
    assert (FIXTURES_MQ / "classic-3topics" / "commitlog").is_dir()
    assert (FIXTURES_MQ / "dledger-1node" / "dledger-n0" / "data").is_dir()
    assert len(expected("classic-3topics", "messages.tsv")) == 1488
    assert len(expected("dledger-1node", "messages.tsv")) == 804


@pytest.fixture(params=NAMES)
def fixture_root(request: pytest.FixtureRequest) -> object:
    """A fixture store, checked unchanged (names, sizes, mtimes, contents) after the test."""
    root = FIXTURES_MQ / request.param
    before = snapshot(root)
    yield root
    assert snapshot(root) == before, f"{request.param} changed"


def test_store_api_lists_what_java_listed(fixture_root: Path) -> None:
    from dledger.rocketmq.store.message_store import MessageStore

    name = fixture_root.name
    with MessageStore(fixture_root, readonly=True) as store:
        assert list(message_lines(store.iter_messages())) == expected(name, "messages.tsv")
        assert list(consume_queue_lines(store.consume_queues)) == expected(name, "consumequeue.tsv")
        lines = expected(name, "index.tsv")
        assert lines[0] == INDEX_HEADER
        for line in lines[1:]:
            key, topic, offsets = line.split("\t")
            got = store.query_offsets_by_key(unescape(topic), unescape(key), 64)
            assert ",".join(map(str, sorted(got))) == offsets, line


def test_headers_are_the_fixtures() -> None:
    for name in NAMES:
        assert expected(name, "messages.tsv")[0] == MESSAGES_HEADER
        assert expected(name, "consumequeue.tsv")[0] == CONSUME_QUEUE_HEADER


def test_cli_dump_prints_the_expected_listings(fixture_root: Path) -> None:
    for flag, listing in (("--messages", "messages.tsv"), ("--consume-queues", "consumequeue.tsv")):
        proc = run_mq("dump", str(fixture_root), flag)
        assert proc.returncode == 0, proc.stderr.decode()
        assert proc.stdout == (fixture_root / "expected" / listing).read_bytes()
    # No flag: the messages.
    proc = run_mq("dump", str(fixture_root))
    assert proc.stdout == (fixture_root / "expected" / "messages.tsv").read_bytes()


def test_cli_query_answers_every_index_line(fixture_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = expected(fixture_root.name, "index.tsv")[1:]
    # Every line in-process (one process per line would take minutes) ...
    for line in lines:
        key, topic, offsets = line.split("\t")
        assert (
            mq_main(
                [
                    "query",
                    str(fixture_root),
                    "--topic",
                    unescape(topic),
                    "--key",
                    unescape(key),
                    "--max",
                    "64",
                    "--sorted",
                ]
            )
            == 0
        )
        assert capsys.readouterr().out == offsets + "\n", line
    # ... and a sample as real processes: the hot key that fills maxNum, CJK and a surrogate
    # pair, the long key, the doubled key, a key with no hits.
    picks = [ln for ln in lines if ln.startswith(("hot-key\t", "订单-", "k54\t"))][:4]
    picks += [max(lines, key=lambda ln: len(ln.split("\t")[0]))]
    picks += [ln for ln in lines if ln.endswith("\t")][:1]
    picks += lines[::400]
    for line in picks:
        key, topic, offsets = line.split("\t")
        proc = run_mq(
            "query", str(fixture_root), "--topic", unescape(topic), "--key", unescape(key), "--max", "64", "--sorted"
        )
        assert proc.returncode == 0, proc.stderr.decode()
        assert proc.stdout.decode("utf-8") == offsets + "\n", line


def test_cli_stats_and_consume_read_the_fixture(fixture_root: Path) -> None:
    proc = run_mq("stats", str(fixture_root))
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode("utf-8").splitlines()
    mode = "classic" if fixture_root.name.startswith("classic") else "dledger"
    assert out[0] == f"mode\t{mode}"
    assert "dispatchBehindBytes\t0" in out
    summary = [ln.split("\t")[1:] for ln in expected(fixture_root.name, "summary.txt") if ln.startswith("queue\t")]
    rows = out[out.index("#topic\tqueueId\tminOffset\tmaxOffset\tmessages\tmaxPhysicOffset") + 1 :]
    got = {tuple(r.split("\t")[:2]): (r.split("\t")[2], r.split("\t")[3], r.split("\t")[5]) for r in rows}
    assert got == {(t, q): (lo, hi, mp) for t, q, lo, hi, mp in summary}
    # TopicB/0 spans two consume-queue files: read across the boundary.
    units = [ln.split("\t") for ln in expected(fixture_root.name, "consumequeue.tsv")[1:]]
    topic_b0 = [u for u in units if u[0] == "TopicB" and u[1] == "0"]
    proc = run_mq("consume", str(fixture_root), "--topic", "TopicB", "--queue", "0", "--offset", "298", "--count", "4")
    assert proc.returncode == 0, proc.stderr.decode()
    consumed = [r.split("\t") for r in proc.stdout.decode("utf-8").splitlines()]
    assert [(r[0], r[1]) for r in consumed] == [(u[2], u[3]) for u in topic_b0[298:302]]


def test_escaping_of_text_columns() -> None:
    assert escape("a\\b\tc\nd\re") == "a\\\\b\\tc\\nd\\re"
    assert escape("KEYS\x01k\x02TAGS\x01t") == "KEYS\\x01k\\x02TAGS\\x01t"
    assert escape("\x00\x1f\x7f") == "\\x00\\x1f\\x7f"
    assert escape("标签X 🚀 é") == "标签X 🚀 é"
    assert escape(None) == "" and escape("") == ""
    every = "".join(chr(c) for c in range(0, 0x100)) + "\\x01 \\t"
    assert unescape(escape(every)) == every


def test_message_line_formats_hosts_and_ids_as_java() -> None:
    from dledger.rocketmq.store.message import MessageExt

    m = MessageExt(
        topic="T\tx",
        body=b"\x00body",
        queue_id=3,
        flag=7,
        sys_flag=48,
        born_timestamp=11,
        born_host=("2001:db8::1", 40000),
        reconsume_times=2,
        prepared_offset=5,
        queue_offset=9,
        phys_offset=1234,
        size=250,
        store_timestamp=12,
        store_host=("2001:db8::10", 10911),
        body_crc=99,
        properties_string="KEYS\x01a b\x02TAGS\x01tg",
    )
    cols = message_line(m).split("\t")
    assert len(cols) == 20
    assert cols[:8] == ["1234", "250", "T\\tx", "3", "9", "48", "11", "12"]
    assert cols[8:10] == ["[2001:db8:0:0:0:0:0:1]:40000", "[2001:db8:0:0:0:0:0:10]:10911"]
    assert cols[10:13] == ["2", "5", "99"]
    assert cols[13] == hashlib.sha256(b"\x00body").hexdigest()[:16] and cols[14] == "5"
    assert cols[15:18] == ["tg", "a b", "KEYS\\x01a b\\x02TAGS\\x01tg"]
    assert cols[18] == "20010DB8000000000000000000000010" + "00002A9F" + "00000000000004D2"
    assert cols[19] == "7"


@pytest.mark.parametrize("name", NAMES)
def test_produce_into_a_copy_of_a_java_store(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Appending to a store Java wrote: its listing stays a prefix, the message lands at the end of
    the log, in its queue after the Java units, and in the index."""
    import shutil

    root = tmp_path / name
    shutil.copytree(FIXTURES_MQ / name, root)
    old_messages = expected(name, "messages.tsv")
    last = old_messages[-1].split("\t")
    # The next record starts where the last ends; a DLedger record sits 48 bytes into its entry.
    end = int(last[0]) + int(last[1]) + (48 if name.startswith("dledger") else 0)
    queue_units = [ln for ln in expected(name, "consumequeue.tsv") if ln.startswith("TopicB\t0\t")]
    assert (
        mq_main(
            [
                "produce",
                str(root),
                "--topic",
                "TopicB",
                "--queue",
                "0",
                "--keys",
                "new-key",
                "--tags",
                "TagNew",
                "--data",
                "appended",
            ]
        )
        == 0
    )
    put = capsys.readouterr().out.rstrip("\n").split("\t")
    assert put[3:] == [str(len(queue_units)), str(end)]
    assert mq_main(["dump", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:-1] == old_messages
    assert lines[-1].split("\t")[:5] == [str(end), lines[-1].split("\t")[1], "TopicB", "0", str(len(queue_units))]
    assert mq_main(["dump", str(root), "--consume-queues"]) == 0
    units = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("TopicB\t0\t")]
    assert units[:-1] == queue_units and units[-1].split("\t")[3] == str(end)
    assert mq_main(["query", str(root), "--topic", "TopicB", "--key", "new-key"]) == 0
    assert capsys.readouterr().out == f"{end}\n"
