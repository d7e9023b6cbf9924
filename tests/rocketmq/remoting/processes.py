"""Real processes for the remoting tests: a name server (``dledger mq namesrv``) on 127.0.0.1,
started from a scratch directory and stopped by its own PID, and a way to talk to it."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from dledger.testing import free_ports

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
            [sys.executable, "-m", "dledger.cli", "mq", "namesrv", "--listen", f"127.0.0.1:{port}"],
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
