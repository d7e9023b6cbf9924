"""``K.PutLock``, the commit logs' put lock: a mutex with ``threading.Lock``'s interface, and a
second wait (``acquire_when_free``, K.SinglePut's) that takes it only with the GIL
(docs/message-store.md, "Puts from several threads"). Both waits are tested."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator

import pytest

from dledger._ext import message as K


@pytest.fixture
def lock() -> K.PutLock:
    return K.PutLock()


def held_by_another_thread(lock: K.PutLock) -> tuple[threading.Thread, threading.Event]:
    """A thread that takes ``lock`` and holds it until the event is set."""
    taken, let_go = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            let_go.wait(30)

    th = threading.Thread(target=hold, daemon=True)
    th.start()
    assert taken.wait(30)
    return th, let_go


WAITS = ["acquire", "acquire_when_free"]


@pytest.mark.parametrize("wait", WAITS)
def test_holders_exclude_each_other_while_they_let_the_gil_go(lock: K.PutLock, wait: str) -> None:
    """A read-modify-write that lets the GIL go between its read and its write loses no update
    when every thread does it under the lock: the lock itself, not the GIL, keeps them apart."""
    count = [0]
    take = getattr(lock, wait)

    def run() -> None:
        for _ in range(300):
            assert take()
            try:
                seen = count[0]
                time.sleep(0)
                count[0] = seen + 1
            finally:
                lock.release()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert count[0] == 1200


@pytest.mark.parametrize("wait", WAITS)
def test_a_waiter_takes_the_lock_once_it_is_let_go(lock: K.PutLock, wait: str) -> None:
    th, let_go = held_by_another_thread(lock)
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(getattr(lock, wait)()))
    waiter.start()
    let_go.set()
    th.join(30)
    waiter.join(30)
    assert got == [True]
    assert lock.locked()
    lock.release()
    assert not lock.locked()


def test_try_and_timeout_fail_on_a_held_lock_as_threading_locks_do(lock: K.PutLock) -> None:
    th, let_go = held_by_another_thread(lock)
    try:
        assert lock.locked()
        assert lock.acquire(False) is False
        for wait in (lock.acquire, lock.acquire_when_free):
            t0 = time.monotonic()
            assert wait(timeout=0.2) is False
            assert time.monotonic() - t0 >= 0.2
        with pytest.raises(ValueError):
            lock.acquire(False, 1.0)
    finally:
        let_go.set()
        th.join(30)
    assert lock.acquire(timeout=0.2) is True
    lock.release()
    with pytest.raises(RuntimeError):
        lock.release()


class Alarm(Exception):
    pass


@pytest.fixture
def alarm() -> Iterator[None]:
    def ring(signum: int, frame: object) -> None:
        raise Alarm

    old = signal.signal(signal.SIGALRM, ring)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("wait", WAITS)
def test_a_waiter_runs_signal_handlers(lock: K.PutLock, alarm: None, wait: str) -> None:
    """A thread waiting for the lock still runs its signal handlers (Ctrl-C stops a put that
    waits), as a ``threading.Lock`` waiter does: the handler's exception ends the wait while the
    lock is still held (a watchdog lets it go after 5 s, else the wait would never end)."""
    th, let_go = held_by_another_thread(lock)
    watchdog = threading.Timer(5.0, let_go.set)
    watchdog.start()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(Alarm):
            getattr(lock, wait)()
        assert not let_go.is_set(), "the wait ended only when the holder let go"
    finally:
        watchdog.cancel()
        let_go.set()
        th.join(30)
    if lock.locked():  # taken after all: a signal handler ran only once the wait ended
        lock.release()
