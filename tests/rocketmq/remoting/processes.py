"""Real processes for the remoting tests: a name server (``dledger mq namesrv``) on 127.0.0.1,
started from a scratch directory and stopped by its own PID, and a way to talk to it."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from dledger.child_process import python_module
from dledger.testing import FAST, free_ports

T = TypeVar("T")


def wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {log.read_text(errors='replace')[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"port {port} not open after {timeout}s: {log.read_text(errors='replace')[-3000:]}")


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, sig)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


def start_namesrv(workdir: Path, port: int | None = None) -> tuple[subprocess.Popen[bytes], int, Path]:
    port = port or free_ports(1)[0]
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"namesrv-{port}.log"
    with open(log, "ab") as f:
        proc = subprocess.Popen(
            python_module("dledger.cli", "mq", "namesrv", "--listen", f"127.0.0.1:{port}", die_with_parent=True),
            stdout=f,
            stderr=f,
            cwd=workdir,
            start_new_session=True,
        )
    wait_port(port, proc, log)
    return proc, port, log


@contextmanager
def namesrv(workdir: Path) -> Iterator[str]:
    proc, port, _log = start_namesrv(workdir)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop(proc)


def run(coro_fn: Callable[[], Awaitable[T]], timeout: float = 120.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro_fn(), timeout)

    return asyncio.run(bounded())


class Brokers:
    """A DLedger group with the message store whose members speak remoting, each on its own
    ``listen_port``, registering with ``namesrv`` as broker ``broker-a``."""

    def __init__(
        self,
        workdir: Path,
        namesrv_addr: str,
        size: int = 1,
        extra: list[str] | None = None,
        launch: Callable[[list[str]], list[str]] | None = None,
    ) -> None:
        """``launch``: the command line of a member given ``dledger.cli``'s arguments (default
        ``python -m dledger.cli``)."""
        self.workdir = workdir
        self.launch = launch
        self.namesrv_addr = namesrv_addr
        self.ids = [f"n{k}" for k in range(size)]
        ports = free_ports(size)
        self.node_ports = dict(zip(self.ids, ports, strict=True))
        # listenPort and the VIP channel at listenPort - 2 (and the advertised HA port at +1).
        self.listen_ports: dict[str, int] = {}
        for m in self.ids:
            while True:
                p = free_ports(1)[0]
                if p - 2 > 10000 and p not in ports and p not in self.listen_ports.values():
                    break
            self.listen_ports[m] = p
        self.extra = extra or []
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def peers(self) -> str:
        return ";".join(f"{m}-127.0.0.1:{self.node_ports[m]}" for m in self.ids)

    def addr(self, member: str) -> str:
        return f"127.0.0.1:{self.listen_ports[member]}"

    def start(self, member: str) -> None:
        log = self.workdir / f"{member}.log"
        args = [
            "server",
            "--group",
            "broker-a",
            "--id",
            member,
            "--peers",
            self.peers,
            "--store-dir",
            str(self.workdir / member),
            "--message-store",
            "--listen-port",
            str(self.listen_ports[member]),
            "--namesrv-addr",
            self.namesrv_addr,
            *FAST,
            *self.extra,
        ]
        cmd = self.launch(args) if self.launch else python_module("dledger.cli", *args, die_with_parent=True)
        with open(log, "ab") as f:
            proc = subprocess.Popen(cmd, stdout=f, stderr=f, cwd=self.workdir, start_new_session=True)
        self.procs[member] = proc
        wait_port(self.listen_ports[member], proc, log)

    def start_all(self) -> None:
        for m in self.ids:
            self.start(m)

    def kill(self, member: str) -> None:
        stop(self.procs.pop(member), signal.SIGKILL)

    def stop_all(self) -> None:
        for m in list(self.procs):
            stop(self.procs.pop(m))


@contextmanager
def cluster(
    workdir: Path,
    size: int = 1,
    extra: list[str] | None = None,
    launch: Callable[[list[str]], list[str]] | None = None,
) -> Iterator[tuple[str, Brokers]]:
    """A name server and a group of ``size`` members registered with it."""
    ns_proc, port, _ = start_namesrv(workdir)
    brokers = Brokers(workdir, f"127.0.0.1:{port}", size, extra, launch)
    try:
        brokers.start_all()
        yield f"127.0.0.1:{port}", brokers
    finally:
        brokers.stop_all()
        stop(ns_proc)
