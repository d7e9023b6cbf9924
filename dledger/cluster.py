"""``dledger cluster``: a local group of separate node processes, for trying things out.

Each member is its own ``dledger server`` process (so killing one is a real crash); the
supervisor prints where they listen, waits for a leader, appends a few entries to show the
group taking writes, and stops every member (SIGTERM: flush, checkpoint, exit) on Ctrl-C.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from dledger.child_process import python_module

STARTUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


@dataclass
class Member:
    id: str
    addr: str
    proc: subprocess.Popen[str]


def peers_string(nodes: int, base_port: int, host: str = "127.0.0.1") -> str:
    return ";".join(f"n{k}-{host}:{base_port + k}" for k in range(nodes))


def start_member(
    member_id: str, peers: str, store_dir: Path, group: str, extra: list[str] | None = None, log: IO[str] | None = None
) -> subprocess.Popen[str]:
    # The members die with the supervisor, killed or not: none is left holding its port.
    cmd = python_module(
        "dledger.cli",
        "server",
        "--group",
        group,
        "--id",
        member_id,
        "--peers",
        peers,
        "--store-dir",
        str(store_dir),
        die_with_parent=True,
    )
    cmd += extra or []
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=log if log is not None else None, text=True, start_new_session=True
    )


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
    if not result and not t.is_alive():
        # Its output ended: it exits (or has), and its exit code says more than None.
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
    if not result:
        raise RuntimeError(f"member pid {proc.pid} did not start (exit code {proc.poll()})")
    return result[0]


def _all_ready(members: list[Member]) -> bool:
    """Print each member's "listening on" line; False (and why, in one line) if one did not start."""
    for m in members:
        try:
            print(wait_ready(m.proc), flush=True)
        except RuntimeError as exc:
            # The member said why on its own stderr (a port in use...): one line more here.
            print(f"dledger cluster: {exc}; stopping the group", file=sys.stderr)
            return False
    return True


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


def run_local_cluster(
    nodes: int,
    directory: str | None,
    base_port: int,
    group: str,
    writes: int,
    exit_after_writes: bool,
    message_store: bool = False,
) -> int:
    """``message_store``: members run RocketMQ's message store (each member's store root is
    ``<dir>/<id>/``); the supervisor produces and consumes ``writes`` messages instead of entries."""
    from dledger.client import Client

    if nodes < 1:
        raise SystemExit("--nodes must be at least 1")
    busy = _busy_port(base_port, nodes)
    if busy is not None:
        print(
            f"dledger cluster: 127.0.0.1:{busy} is in use (another group?); choose other ports with --base-port",
            file=sys.stderr,
        )
        return 1
    store_dir = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="dledger-cluster-"))
    peers = peers_string(nodes, base_port)
    members: list[Member] = []
    up = False
    try:
        for k in range(nodes):
            member_id = f"n{k}"
            if message_store:
                # A message store root holds one member's queues and index: one root per member.
                proc = start_member(member_id, peers, store_dir / member_id, group, ["--message-store"])
            else:
                proc = start_member(member_id, peers, store_dir, group)
            members.append(Member(member_id, f"127.0.0.1:{base_port + k}", proc))
        if not _all_ready(members):
            return 1
        up = True
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
            if not message_store:
                for i in range(writes):
                    r = client.append(f"hello from dledger cluster, entry {i}".encode())
                    print(f"appended index {r.index} at pos {r.pos}")
        if message_store:
            _show_messages(peers, group, writes)
            print(f'try: dledger mq stats --peers "{peers}"')
            print(f'     echo hello | dledger mq produce --peers "{peers}" --topic TopicTest --stdin')
            print(f'     dledger mq consume --peers "{peers}" --topic TopicTest --queue 0 --offset 0')
            print(f"     dledger mq dump {store_dir / members[0].id}")
        else:
            print(f'try: dledger status --peers "{peers}"')
            print(f'     dledger append --peers "{peers}" --data hello')
        if exit_after_writes:
            return 0
        _serve_until_stopped(members)
        return 0
    finally:
        stop_members([m.proc for m in members])
        if directory is None and not up:
            # A group that never came up left nothing worth keeping in the directory we made.
            shutil.rmtree(store_dir, ignore_errors=True)
        print("stopped", flush=True)


def _serve_until_stopped(members: list[Member]) -> None:
    """Until Ctrl-C or SIGTERM; a member that exits is reported and dropped from ``members``."""
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


def _busy_port(base_port: int, nodes: int) -> int | None:
    """The first of the group's ports something else holds (bound as the members will bind)."""
    for port in range(base_port, base_port + nodes):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return port
    return None


def _show_messages(peers: str, group: str, count: int) -> None:
    """Produce ``count`` messages to TopicTest queue 0 and consume them back."""
    from dledger.rocketmq.client.consumer import Consumer
    from dledger.rocketmq.client.producer import Producer
    from dledger.rocketmq.store.message import Message

    with Producer(peers, group, timeout=30.0) as producer:
        first = None
        for i in range(count):
            r = producer.send(
                Message("TopicTest", f"hello from dledger cluster, message {i}".encode(), tags="TagA"), queue_id=0
            )
            print(f"sent {r.status} msgId {r.msg_id} queue {r.queue_id} offset {r.queue_offset}")
            if first is None and r.ok:
                first = r.queue_offset
    if first is None:
        return
    with Consumer(peers, "dledger-cluster", "TopicTest", dledger_group=group, timeout=30.0) as consumer:
        got = 0
        offset = first
        while got < count:
            res = consumer.pull(0, offset, count - got, wait=5.0)
            if not res.messages:
                break
            for m in res.messages:
                print(f"consumed offset {m.queue_offset}: {m.body.decode(errors='replace')}")
            got += len(res.messages)
            offset = res.next_begin_offset


__all__ = ["peers_string", "run_local_cluster", "start_member", "stop_members", "wait_ready"]
