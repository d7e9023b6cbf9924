"""``dledger cluster``: a local group of separate node processes, for trying things out.

Each member is its own ``dledger server`` process (so killing one is a real crash); the
supervisor prints where they listen, waits for a leader, appends a few entries to show the
group taking writes, and stops every member (SIGTERM: flush, checkpoint, exit) on Ctrl-C.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

STARTUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


@dataclass
class Member:
    id: str
    addr: str
    proc: subprocess.Popen[str]


def peers_string(nodes: int, base_port: int, host: str = "127.0.0.1") -> str:
    return ";".join(f"n{k}-{host}:{base_port + k}" for k in range(nodes))


def start_member(member_id: str, peers: str, store_dir: Path, group: str, extra: list[str] | None = None,
                 log: IO[str] | None = None) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "dledger.cli", "server", "--group", group, "--id", member_id, "--peers", peers,
           "--store-dir", str(store_dir), *(extra or [])]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log if log is not None else None, text=True,
                            start_new_session=True)


def wait_ready(proc: subprocess.Popen[str], timeout: float = STARTUP_TIMEOUT_S) -> str:
    """The member's "listening on" line; raises if it exits or stays silent."""
    assert proc.stdout is not None
    result: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "listening on" in line:
                result.append(line.strip())
                return

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(timeout)
    if not result:
        raise RuntimeError(f"member pid {proc.pid} did not start (exit code {proc.poll()})")
    return result[0]


def stop_members(procs: list[subprocess.Popen[str]], timeout: float = STOP_TIMEOUT_S) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run_local_cluster(nodes: int, directory: str | None, base_port: int, group: str, writes: int,
                      exit_after_writes: bool) -> int:
    from dledger.client import Client

    if nodes < 1:
        raise SystemExit("--nodes must be at least 1")
    store_dir = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="dledger-cluster-"))
    peers = peers_string(nodes, base_port)
    members: list[Member] = []
    try:
        for k in range(nodes):
            member_id = f"n{k}"
            proc = start_member(member_id, peers, store_dir, group)
            members.append(Member(member_id, f"127.0.0.1:{base_port + k}", proc))
        for m in members:
            print(wait_ready(m.proc), flush=True)
        print(f"group {group!r}: {nodes} members, files under {store_dir}")
        print(f"peers: {peers}")
        with Client(peers, group, timeout=30.0) as client:
            leader = None
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while leader is None and time.monotonic() < deadline:
                leader = next((s.id for s in client.status() if s.role == "LEADER"), None)
                if leader is None:
                    time.sleep(0.1)
            if leader is None:
                print("no leader was elected", file=sys.stderr)
                return 1
            print(f"leader: {leader}")
            for i in range(writes):
                r = client.append(f"hello from dledger cluster, entry {i}".encode())
                print(f"appended index {r.index} at pos {r.pos}")
        print(f'try: dledger status --peers "{peers}"')
        print(f'     dledger append --peers "{peers}" --data hello')
        if exit_after_writes:
            return 0
        print("Ctrl-C stops the group", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        while not stop.is_set():
            for m in members:
                if m.proc.poll() is not None:
                    print(f"member {m.id} (pid {m.proc.pid}) exited with {m.proc.returncode}", flush=True)
                    members.remove(m)
                    break
            stop.wait(0.5)
        return 0
    finally:
        stop_members([m.proc for m in members])
        print("stopped", flush=True)


__all__ = ["peers_string", "run_local_cluster", "start_member", "stop_members", "wait_ready"]

