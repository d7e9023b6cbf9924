"""Hostile and broken peers: the server closes their connections and keeps serving others."""

from __future__ import annotations

import asyncio
import random
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dledger.net import Frame, Kind, RpcClient, RpcServer
from dledger.net.frames import encode_bytes

from .conftest import Recorder, run


def raw(obj: object) -> bytes:
    payload = msgpack.packb(obj, use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


async def closed_by_server(reader: asyncio.StreamReader, within: float = 5.0) -> bool:
    """True if the server closes the connection (EOF or reset) within ``within`` seconds."""
    try:
        while True:
            if not await asyncio.wait_for(reader.read(65536), within):
                return True
    except (ConnectionError, OSError):
        return True
    except asyncio.TimeoutError:
        return False


async def with_server(
    handler: Callable[[Any], Awaitable[Any]], body: Callable[[RpcServer], Awaitable[None]], **kw: Any
) -> None:
    errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: errors.append(ctx))
    async with RpcServer(handler, **kw) as server:
        await body(server)
        # The server still answers a well-behaved client.
        async with RpcClient() as client:
            r = await client.call(server.address, 1, {"still": "here"})
            assert r.ok and r.body["echo"] == {"still": "here"}
    assert errors == [], errors  # nothing escaped into the event loop's error handler


BAD_STREAMS = {
    "malformed": struct.pack(">I", 3) + b"\xc1\xc1\xc1",
    "not_a_map": raw([1, 2, 3]),
    "string": raw("hello"),
    "unknown_kind": raw({"k": 9, "i": 1, "c": 1}),
    "response_kind": raw({"k": 1, "i": 1, "c": 200}),
    "kind_as_str": raw({"k": "req", "i": 1, "c": 1}),
    "body_not_map": raw({"k": 0, "i": 1, "c": 1, "b": [1]}),
    "empty_frame": b"\x00\x00\x00\x00",
    "oversized_4g": b"\xff\xff\xff\xff",
    "oversized_max_plus_one": struct.pack(">I", 64 * 1024 * 1024 + 1),
    "http": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "tls_hello": bytes.fromhex("160301020001") + b"\x00" * 100,
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", list(BAD_STREAMS))
def test_bad_stream_closes_connection_before_handler(name: str, recorder: Recorder) -> None:
    async def body(server: RpcServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(BAD_STREAMS[name])
        await writer.drain()
        assert await closed_by_server(reader), "server kept the connection open"
        writer.close()

    run(with_server(recorder, body))
    assert recorder.calls == 1  # only the good client's call after the bad stream


@pytest.mark.timeout(30)
def test_oversized_prefix_is_refused_without_waiting_for_a_body(recorder: Recorder) -> None:
    async def body(server: RpcServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        # A valid request first, then a 4 GiB prefix: the good one is answered, then we are cut off.
        writer.write(encode_bytes(Frame(Kind.REQUEST, 1, 1, body={"a": 1})) + b"\xff\xff\xff\xf0")
        await writer.drain()
        assert await closed_by_server(reader, within=2.0)
        writer.close()

    run(with_server(recorder, body))


@pytest.mark.timeout(30)
def test_truncated_frames(recorder: Recorder) -> None:
    async def body(server: RpcServer) -> None:
        frame = encode_bytes(Frame(Kind.REQUEST, 1, 1, body={"x": b"y" * 1000}))
        # Cut short, then EOF: the server closes and the partial request never runs.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(frame[:500])
        writer.write_eof()
        assert await closed_by_server(reader)
        writer.close()
        # Cut short and left hanging: other clients are served meanwhile (checked by with_server).
        _, hanging = await asyncio.open_connection("127.0.0.1", server.port)
        hanging.write(frame[:10])
        await hanging.drain()
        async with RpcClient() as client:
            assert (await client.call(server.address, 1)).ok
        hanging.close()

    run(with_server(recorder, body))
    assert recorder.calls == 2  # the hanging client's partial request never ran


@pytest.mark.timeout(30)
def test_good_frames_before_garbage_are_answered(recorder: Recorder) -> None:
    async def body(server: RpcServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(encode_bytes(Frame(Kind.REQUEST, 5, 1, body={"n": 5})))
        await writer.drain()
        header = await reader.readexactly(4)
        payload = await reader.readexactly(struct.unpack(">I", header)[0])
        resp = msgpack.unpackb(payload)
        assert resp["k"] == Kind.RESPONSE and resp["i"] == 5 and resp["c"] == 200
        writer.write(b"\x00\x00\x00\x02\xc1\xc1")
        assert await closed_by_server(reader)
        writer.close()

    run(with_server(recorder, body))


def _random_frame(rng: random.Random) -> bytes:
    kinds = [0, 1, 2, 3, 4, 255, -1]
    m: dict[str, Any] = {"k": rng.choice(kinds), "i": rng.randrange(2**32), "c": rng.choice([1, 50001, 200, -1])}
    if rng.random() < 0.3:
        m["g"] = rng.choice(["g", 1, None])
    if rng.random() < 0.5:
        m["b"] = rng.choice([{"x": rng.randbytes(rng.randrange(100))}, [1], "s", {"n": None}])
    if rng.random() < 0.1:
        del m[rng.choice(list(m))]
    payload = msgpack.packb(m, use_bin_type=True)
    data = bytearray(struct.pack(">I", len(payload)) + payload)
    r = rng.random()
    if r < 0.2 and data:  # flip bits
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif r < 0.3:  # truncate
        del data[rng.randrange(len(data)) :]
    elif r < 0.35:  # lie about the length
        data[:4] = struct.pack(">I", rng.choice([0, 1, len(payload) + 1, 2**31, 2**32 - 1]))
    return bytes(data)


@pytest.mark.timeout(60)
def test_random_fuzz_for_a_bounded_time(recorder: Recorder) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)

    async def one_connection(server: RpcServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            for _ in range(rng.randrange(1, 20)):
                if rng.random() < 0.3:
                    writer.write(rng.randbytes(rng.randrange(1, 300)))
                else:
                    writer.write(_random_frame(rng))
            await writer.drain()
            if rng.random() < 0.5:
                writer.write_eof()
            await asyncio.wait_for(reader.read(4096), 0.05)
        except (ConnectionError, OSError, asyncio.TimeoutError):
            pass
        finally:
            writer.close()

    async def body(server: RpcServer) -> None:
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            await asyncio.gather(*(one_connection(server) for _ in range(8)))

    try:
        run(with_server(recorder, body, handshake_timeout=0.5), 50)
    except AssertionError as e:
        raise AssertionError(f"fuzz seed {seed}: {e}") from e


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.binary(min_size=1, max_size=400) | st.builds(lambda s: _random_frame(random.Random(s)), st.integers()),
        min_size=1,
        max_size=10,
    )
)
def test_hypothesis_streams_at_a_live_server(chunks: list[bytes]) -> None:
    recorder = Recorder()

    async def body(server: RpcServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            for c in chunks:
                writer.write(c)
                await writer.drain()
            writer.write_eof()
            await closed_by_server(reader, within=2.0)
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    run(with_server(recorder, body), 20)
