"""``dledger mq``: produce, consume, query, stats and dump on stores made here, and its errors."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dledger.rocketmq.cli import main as mq_main
from dledger.rocketmq.store.listing import CONSUME_QUEUE_HEADER, MESSAGES_HEADER

REPO = Path(__file__).resolve().parents[2]


def mq(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = mq_main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def mq_process() -> list[str]:
    """``dledger mq`` as a process: through the ``dledger`` CLI once it carries ``mq``, else this module's main."""
    from dledger import cli

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            cli.build_parser().parse_args(["mq", "stats", "x"])
    except SystemExit:
        return [sys.executable, "-m", "dledger.rocketmq.cli"]
    return [sys.executable, "-m", "dledger.cli", "mq"]


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def store_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A classic store with TopicA/0 (one message with tags and keys) and TopicA/1 (three lines)."""
    root = tmp_path / "store"
    rc, out, err = mq(
        capsys, "produce", str(root), "--topic", "TopicA", "--tags", "TagA", "--keys", "k1 k2", "--data", "hello\tworld"
    )
    assert rc == 0, err
    fields = out.rstrip("\n").split("\t")
    assert fields[0] == "PUT_OK" and fields[2:] == ["0", "0", "0"]
    assert len(fields[1]) in (32, 56)  # the offset msgId
    return root


def produce_lines(root: Path, topic: str, queue: int, lines: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*mq_process(), "produce", str(root), "--topic", topic, "--queue", str(queue), "--stdin"],
        input=lines,
        capture_output=True,
        cwd=REPO,
        timeout=300,
    )


def test_a_refused_line_is_named_by_its_number_in_one_line(store_dir: Path) -> None:
    big = b"x" * (5 * 1024 * 1024)  # over the 4 MiB max_message_size
    proc = produce_lines(store_dir, "Lines", 0, b"a\n\n" + big + b"\nb\n")
    err = proc.stderr.decode().splitlines()
    assert proc.returncode == 1 and len(err) == 1 and err[0].startswith("dledger mq produce: line 3: MESSAGE_ILLEGAL")
    assert [r.split("\t")[3] for r in proc.stdout.decode().splitlines()] == ["0", "1"]  # a and b


def test_produce_then_consume_query_stats_and_dump(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proc = produce_lines(store_dir, "TopicA", 1, b"one\r\ntwo\n\nthree\n")  # CRLF or LF: the same bodies
    assert proc.returncode == 0, proc.stderr.decode()
    rows = [r.split("\t") for r in proc.stdout.decode().splitlines()]
    assert [(r[0], r[2], r[3]) for r in rows] == [("PUT_OK", "1", "0"), ("PUT_OK", "1", "1"), ("PUT_OK", "1", "2")]

    rc, out, _ = mq(capsys, "consume", str(store_dir), "--topic", "TopicA", "--queue", "1", "--offset", "1")
    assert rc == 0
    assert [r.split("\t")[0] for r in out.splitlines()] == ["1", "2"]
    assert [r.split("\t")[-1] for r in out.splitlines()] == ["two", "three"]
    rc, out, err = mq(
        capsys, "consume", str(store_dir), "--topic", "TopicA", "--queue", "0", "--offset", "0", "--count", "5"
    )
    line = out.rstrip("\n").split("\t")
    assert line[0] == "0" and line[3:] == ["TagA", "k1 k2", "hello\\tworld"]
    assert "FOUND" in err

    rc, out, _ = mq(capsys, "query", str(store_dir), "--topic", "TopicA", "--key", "k2")
    assert (rc, out) == (0, "0\n")
    rc, out, _ = mq(capsys, "query", str(store_dir), "--topic", "TopicA", "--key", "none", "--sorted")
    assert (rc, out) == (0, "\n")

    rc, out, _ = mq(capsys, "stats", str(store_dir))
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == "mode\tclassic" and "queues\t2" in lines and "dispatchBehindBytes\t0" in lines
    assert lines[-2].split("\t")[:5] == ["TopicA", "0", "0", "1", "1"]
    assert lines[-1].split("\t")[:5] == ["TopicA", "1", "0", "3", "3"]

    rc, out, _ = mq(capsys, "dump", str(store_dir), "--messages")
    lines = out.splitlines()
    assert lines[0] == MESSAGES_HEADER and len(lines) == 5
    first = lines[1].split("\t")
    assert first[:5] == ["0", first[1], "TopicA", "0", "0"]
    assert first[15:17] == ["TagA", "k1 k2"] and first[14] == str(len(b"hello\tworld"))
    rc, out, _ = mq(capsys, "dump", str(store_dir), "--consume-queues")
    assert out.splitlines()[0] == CONSUME_QUEUE_HEADER
    assert [r.split("\t")[:3] for r in out.splitlines()[1:]] == [
        ["TopicA", "0", "0"],
        ["TopicA", "1", "0"],
        ["TopicA", "1", "1"],
        ["TopicA", "1", "2"],
    ]


def test_a_dledger_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "dl"
    rc, out, err = mq(capsys, "produce", str(root), "--mode", "dledger", "--topic", "T", "--data", "x")
    assert rc == 0, err
    assert out.split("\t")[4].strip() == "48"  # entry pos 0 + the 48-byte DLedger header
    assert (root / "dledger-n0" / "data").is_dir()
    rc, out, _ = mq(capsys, "produce", str(root), "--topic", "T", "--data", "y")  # the mode is found on disk
    assert rc == 0
    rc, out, _ = mq(capsys, "stats", str(root))
    assert out.splitlines()[0] == "mode\tdledger"
    rc, out, _ = mq(capsys, "dump", str(root))
    assert [r.split("\t")[0] for r in out.splitlines()[1:]] == [
        "48",
        str(48 + 48 + int(out.splitlines()[1].split("\t")[1])),
    ]


def test_read_commands_never_write_nor_take_the_lock(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(store_dir)
    fd = os.open(store_dir / "lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running store holds it
        for args in (
            ["dump", str(store_dir)],
            ["dump", str(store_dir), "--consume-queues"],
            ["stats", str(store_dir)],
            ["query", str(store_dir), "--topic", "TopicA", "--key", "k1"],
            ["consume", str(store_dir), "--topic", "TopicA", "--queue", "0", "--offset", "0"],
        ):
            proc = subprocess.run([*mq_process(), *args], capture_output=True, cwd=REPO, timeout=300)
            assert proc.returncode == 0, (args, proc.stderr.decode())
        # A writer is refused while the lock is held, with one line.
        rc, _, err = mq(capsys, "produce", str(store_dir), "--topic", "TopicA", "--data", "z")
        assert rc == 1 and len(err.strip().splitlines()) == 1 and "lock" in err
    finally:
        os.close(fd)
    assert snapshot(store_dir) == before
    (store_dir / "lock").unlink()
    assert mq(capsys, "dump", str(store_dir))[0] == 0
    assert not (store_dir / "lock").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["consume", "{dir}", "--topic", "T", "--queue", "0", "--offset", "0"],
        ["query", "{dir}", "--topic", "T", "--key", "k"],
        ["stats", "{dir}"],
        ["dump", "{dir}"],
        ["dump", "{dir}", "--consume-queues"],
    ],
)
def test_missing_dir_and_not_a_store_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    for target, message in ((tmp_path / "nope", "no such directory"), (tmp_path, "not a RocketMQ store")):
        rc, out, err = mq(capsys, *[a.replace("{dir}", str(target)) for a in command])
        assert rc == 1 and out == ""
        assert len(err.strip().splitlines()) == 1 and message in err
    assert not (tmp_path / "nope").exists()


def test_unknown_topic_or_queue(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = mq(capsys, "consume", str(store_dir), "--topic", "Nope", "--queue", "0", "--offset", "0")
    assert rc == 1 and out == "" and "unknown topic 'Nope'" in err
    rc, out, err = mq(capsys, "consume", str(store_dir), "--topic", "TopicA", "--queue", "9", "--offset", "0")
    assert rc == 1 and "has no queue 9" in err and len(err.strip().splitlines()) == 1


def test_the_process_exit_status_and_stderr() -> None:
    proc = subprocess.run([*mq_process(), "stats", "/nonexistent/store"], capture_output=True, cwd=REPO, timeout=300)
    assert proc.returncode == 1 and proc.stdout == b""
    assert proc.stderr.decode().strip() == "dledger mq stats: /nonexistent/store: no such directory"


@pytest.mark.parametrize(
    "args",
    [
        ["consume", "DIR", "--topic", "TopicA", "--queue", "0", "--offset", "0", "--count", "0"],
        ["query", "DIR", "--topic", "TopicA", "--key", "k1", "--max", "-3"],
        ["produce", "--peers", "n0-127.0.0.1:1", "--topic", "T", "--data", "x", "--batch", "0"],
        ["consume", "--peers", "n0-127.0.0.1:1", "--topic", "T", "--queue", "0", "--timeout", "-1"],
        ["consume", "--peers", "n0-127.0.0.1:1", "--topic", "T", "--queue", "0", "--wait", "-1"],
    ],
)
def test_counts_and_times_that_mean_nothing_are_usage_errors(store_dir: Path, args: list[str]) -> None:
    # They printed nothing and exited 0 (a count of 0), or were taken as given (a negative time).
    args = [str(store_dir) if a == "DIR" else a for a in args]
    proc = subprocess.run([*mq_process(), *args], capture_output=True, cwd=REPO, timeout=300)
    assert proc.returncode == 2 and proc.stdout == b"" and b"want " in proc.stderr


def test_a_reader_that_stops_early_is_no_error(store_dir: Path) -> None:
    # `dledger mq dump DIR --messages | head`: it said "[Errno 32] Broken pipe" and exited 1.
    produce_lines(store_dir, "Many", 0, b"".join(b"line %d\n" % i for i in range(20_000)))
    dump = subprocess.Popen(
        [*mq_process(), "dump", str(store_dir), "--messages"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO
    )
    assert dump.stdout is not None and dump.stderr is not None
    assert dump.stdout.readline().startswith(b"#")
    dump.stdout.close()  # as `head -1` does
    assert dump.wait(timeout=120) == 0
    assert dump.stderr.read() == b""
