"""Members die with the process that started them (``die_with_parent``): a pytest killed by a CI
timeout, or a ``dledger cluster`` supervisor killed with SIGKILL, leaves no member holding its
port and directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dledger.child_process import python_code, python_module
from dledger.testing import consecutive_free_ports

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="die_with_parent acts on Linux only"),
]

EXIT_WITHIN_S = 30.0


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (state first), None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (f := _stat(int(entry.name))) is not None and int(f[1]) == pid:
            found.append(int(entry.name))
    return found


def exited(pid: int) -> bool:
    """Gone, or a zombie (its new parent may be a PID 1 that does not reap)."""
    f = _stat(pid)
    return f is None or f[0] in ("Z", "X")


def assert_exit(pids: list[int]) -> None:
    deadline = time.monotonic() + EXIT_WITHIN_S
    while time.monotonic() < deadline and not all(exited(p) for p in pids):
        time.sleep(0.1)
    alive = [p for p in pids if not exited(p)]
    for p in alive:  # stopped by its own PID, so that a failure leaves nothing behind
        os.kill(p, signal.SIGKILL)
    assert not alive, f"pids {alive} outlived their killed parent by {EXIT_WITHIN_S:g}s"


def read_until(proc: subprocess.Popen[str], marker: str) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if marker in line:
            return
    raise AssertionError(f"the parent exited ({proc.wait()}) before printing {marker!r}")


def kill_parent_and_check_members(proc: subprocess.Popen[str], expected: int) -> None:
    try:
        members = children(proc.pid)
        assert len(members) == expected, members
    finally:
        proc.kill()
        proc.wait(10)
    assert_exit(members)


def test_members_of_a_test_cluster_exit_when_its_process_is_killed(tmp_path: Path) -> None:
    # pytest killed by SIGKILL (or by a SIGTERM that no fixture teardown outlives).
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from dledger.testing import TestCluster\n"
        "c = TestCluster(Path(sys.argv[1]), size=2)\n"
        "c.start_all()\n"
        "print('up', flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen(python_code(code, str(tmp_path)), stdout=subprocess.PIPE, text=True)
    read_until(proc, "up")
    kill_parent_and_check_members(proc, 2)


def test_dledger_cluster_members_exit_when_the_supervisor_is_killed(tmp_path: Path) -> None:
    port = consecutive_free_ports(2)
    cmd = python_module("dledger.cli", "cluster", "--nodes", "2", "--dir", str(tmp_path), "--base-port", str(port))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    read_until(proc, "Ctrl-C stops the group")
    kill_parent_and_check_members(proc, 2)


# Runs argv[1:] as its child and prints how the child ended.
RELAY = "import subprocess\nprint(subprocess.run(sys.argv[1:]).returncode, flush=True)\n"


@pytest.mark.parametrize("die_with_parent", [True, False])
def test_a_child_whose_parent_is_already_gone_stops_at_once(die_with_parent: bool) -> None:
    # The command is built here, and started by another process: to the child, the process
    # that built its command is gone before it could ask for the signal (the race prctl leaves).
    child = python_code("print('ran', flush=True)", die_with_parent=die_with_parent)
    out = subprocess.run(python_code(RELAY, *child), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    if die_with_parent:
        assert out.stdout.split() == [str(-signal.SIGTERM)]
    else:
        assert out.stdout.split() == ["ran", "0"]


def test_a_child_started_from_a_thread_that_ends_lives_on() -> None:
    # PR_SET_PDEATHSIG fires when the starting *thread* ends: a member a threading.Timer started
    # (as test_producer_rules does) was killed at once. Only the parent process's exit counts.
    children: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        code = "print('up', flush=True)\nimport time\ntime.sleep(60)"
        child = subprocess.Popen(python_code(code, die_with_parent=True), stdout=subprocess.PIPE)
        children.append(child)
        assert child.stdout is not None
        child.stdout.readline()  # the child is past its start-up: it asked for the signal by now

    starter = threading.Thread(target=start)
    starter.start()
    starter.join()
    child = children[0]
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=2.0)
    finally:
        child.kill()
        child.wait(timeout=30)
