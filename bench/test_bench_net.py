"""Transport throughput over loopback: dledger.net RPC vs a raw asyncio echo of the same bytes.

Run: PYTHONPATH=. .venv/bin/python -m pytest bench/test_bench_net.py --benchmark-only
Groups:
- ``net-small``: 5,000 small pipelined calls (request and response frames of ~40 bytes);
  the baseline writes the same request bytes to a raw asyncio echo server (no msgpack, no
  request ids, no futures) and waits for them to come back.
- ``net-1MiB``: 32 calls with a 1 MiB body echoed back, 4 in flight; the baseline echoes
  the same bytes in 1 MiB writes.
``extra_info`` holds requests/s and MB/s (payload bytes, both directions).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from dledger.net import Frame, Kind, Request, RpcClient, RpcServer
from dledger.net.frames import encode_bytes

SMALL_CALLS = 5_000
BIG_CALLS = 32
BIG_INFLIGHT = 4
BIG = os.urandom(1024 * 1024)


class _Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


class _Sink(asyncio.Protocol):
    """Counts echoed bytes and wakes the waiter when the expected amount is back."""

    def __init__(self) -> None:
        self.got = 0
        self.want = 0
        self.done: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        if self.done is not None and self.got >= self.want and not self.done.done():
            self.done.set_result(None)


class Env:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self._start())

    async def _start(self) -> None:
        async def handler(req: Request) -> dict[str, Any]:
            return req.body

        self.server = RpcServer(handler)
        await self.server.start()
        self.client = RpcClient(timeout=60)
        await self.client.call(self.server.address, 1)  # connect outside the timed part
        loop = asyncio.get_running_loop()
        self.echo = await loop.create_server(_Echo, "127.0.0.1", 0)
        port = self.echo.sockets[0].getsockname()[1]
        self.raw_transport, self.sink = await loop.create_connection(_Sink, "127.0.0.1", port)

    def close(self) -> None:
        async def stop() -> None:
            await self.client.close()
            await self.server.close()
            self.raw_transport.close()
            self.echo.close()

        self.loop.run_until_complete(stop())
        self.loop.close()

    async def raw_round_trip(self, chunks: list[bytes]) -> None:
        self.sink.got = 0
        self.sink.want = sum(map(len, chunks))
        self.sink.done = asyncio.get_running_loop().create_future()
        for c in chunks:
            self.raw_transport.write(c)
        await self.sink.done


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    e = Env()
    yield e
    e.close()


def _rate(benchmark: BenchmarkFixture, count: int, nbytes: int) -> None:
    mean = benchmark.stats.stats.mean
    benchmark.extra_info["requests_per_s"] = round(count / mean)
    benchmark.extra_info["MB_per_s"] = round(nbytes / mean / 1e6, 1)


def test_small_rpc(benchmark: BenchmarkFixture, env: Env) -> None:
    benchmark.group = "net-small"

    async def run() -> None:
        addr = env.server.address
        rs = await asyncio.gather(*(env.client.call(addr, 51002, {"term": 3, "i": i}) for i in range(SMALL_CALLS)))
        assert rs[-1].body["i"] == SMALL_CALLS - 1

    benchmark.pedantic(lambda: env.loop.run_until_complete(run()), rounds=10, warmup_rounds=1)
    _rate(benchmark, SMALL_CALLS, 0)


def test_small_raw_echo_baseline(benchmark: BenchmarkFixture, env: Env) -> None:
    benchmark.group = "net-small"
    chunks = [encode_bytes(Frame(Kind.REQUEST, i, 51002, None, {"term": 3, "i": i})) for i in range(SMALL_CALLS)]

    benchmark.pedantic(lambda: env.loop.run_until_complete(env.raw_round_trip(chunks)), rounds=10, warmup_rounds=1)
    _rate(benchmark, SMALL_CALLS, 0)


def test_1mib_rpc(benchmark: BenchmarkFixture, env: Env) -> None:
    benchmark.group = "net-1MiB"

    async def worker(n: int) -> None:
        for _ in range(n):
            r = await env.client.call(env.server.address, 51004, {"d": BIG})
            assert len(r.body["d"]) == len(BIG)

    async def run() -> None:
        await asyncio.gather(*(worker(BIG_CALLS // BIG_INFLIGHT) for _ in range(BIG_INFLIGHT)))

    benchmark.pedantic(lambda: env.loop.run_until_complete(run()), rounds=5, warmup_rounds=1)
    _rate(benchmark, BIG_CALLS, 2 * BIG_CALLS * len(BIG))


def test_1mib_raw_echo_baseline(benchmark: BenchmarkFixture, env: Env) -> None:
    benchmark.group = "net-1MiB"
    chunks = [BIG] * BIG_CALLS

    benchmark.pedantic(lambda: env.loop.run_until_complete(env.raw_round_trip(chunks)), rounds=5, warmup_rounds=1)
    _rate(benchmark, BIG_CALLS, 2 * BIG_CALLS * len(BIG))
