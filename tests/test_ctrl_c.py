"""Ctrl-C on the commands that wait (on a group, on standard input): each stops with exit
status 130 and at most one line, having printed what was acknowledged before it. Real
processes, real SIGINT, sent once the command is where a user would press it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dledger.child_process import python_module
from dledger.testing import FAST, TestCluster

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    root = tmp_path_factory.mktemp("ctrlc")
    with TestCluster(root, member_dirs=True, extra=[*FAST, "--message-store"], proxied=False).running() as c:
        yield c


def start(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        python_module("dledger.cli", *args, die_with_parent=True),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not reached within {timeout}s: {what}"
        time.sleep(0.02)


def has_socket(proc: subprocess.Popen[bytes]) -> bool:
    """The command has a connection open: it is past its imports and talking to a member."""
    fds = Path(f"/proc/{proc.pid}/fd")
    try:
        return any(os.readlink(fd).startswith("socket:") for fd in fds.iterdir())
    except FileNotFoundError:
        return False


def reading_stdin(proc: subprocess.Popen[bytes]) -> bool:
    """The command's main thread waits in read(0, ...) (Linux: /proc/PID/syscall)."""
    try:
        fields = Path(f"/proc/{proc.pid}/syscall").read_text().split()
    except OSError:
        return False
    return len(fields) > 1 and fields[0] == "0" and int(fields[1], 16) == 0


def interrupt(proc: subprocess.Popen[bytes]) -> tuple[bytes, str]:
    """SIGINT, as Ctrl-C sends it; the rest of standard output and all of standard error.
    Standard input stays open until the command has exited, as a terminal's does (closed, a
    thread blocked reading it would return before the interpreter's shutdown)."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out, err = proc.stdout.read(), proc.stderr.read()
        proc.stdin.close()
    text = err.decode(errors="replace")
    assert proc.returncode == 130, text
    assert len(text.splitlines()) <= 1 and "Traceback" not in text, text
    return out, text


def acknowledged(proc: subprocess.Popen[bytes], n: int) -> list[bytes]:
    assert proc.stdout is not None
    return [proc.stdout.readline() for _ in range(n)]


@pytest.mark.parametrize("where", ["peers", "local"])
def test_produce_stdin(group: TestCluster, tmp_path: Path, where: str):
    target = ["--peers", group.peers] if where == "peers" else [str(tmp_path / "store")]
    proc = start("mq", "produce", *target, "--topic", "CtrlC", "--queue", "0", "--stdin")
    assert proc.stdin is not None
    proc.stdin.write(b"one\ntwo\n")
    proc.stdin.flush()
    acks = acknowledged(proc, 2)  # printed as acknowledged, before the interrupt
    assert all(a.startswith(b"SEND_OK\t" if where == "peers" else b"PUT_OK\t") for a in acks), acks
    out, _err = interrupt(proc)
    assert out == b""  # nothing half-written after them


def test_get_peers_waiting_for_an_answer():
    # A member that accepts the connection and never answers: the command waits for it.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        silent.settimeout(60)
        proc = start("get", "--peers", f"n0-127.0.0.1:{silent.getsockname()[1]}", "--group", "g", "-i", "0")
        conn, _ = silent.accept()
        with conn:
            time.sleep(0.2)
            interrupt(proc)


def test_append_peers_stdin(group: TestCluster):
    proc = start("append", "--peers", group.peers, "--stdin")
    wait_until(lambda: reading_stdin(proc), "append reading standard input")
    interrupt(proc)


def test_consume_wait(group: TestCluster):
    args = ["--topic", "CtrlWait", "--queue", "0"]
    produced = subprocess.run(
        [sys.executable, "-m", "dledger.cli", "mq", "produce", "--peers", group.peers, *args, "--data", "x"],
        capture_output=True,
        timeout=60,
    )
    assert produced.returncode == 0, produced.stderr
    proc = start("mq", "consume", "--peers", group.peers, *args, "--offset", "1", "--wait", "120")
    wait_until(lambda: has_socket(proc), "consume connected")
    time.sleep(0.5)  # its pull held by the leader: nothing past offset 0
    out, _err = interrupt(proc)
    assert out == b""
