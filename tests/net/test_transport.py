"""RpcServer and RpcClient over real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import pytest

from dledger.codes import RequestCode, ResponseCode
from dledger.errors import DLedgerError
from dledger.net import Request, Response, RpcClient, RpcServer
from dledger.net.transport import cancel_tasks

from .conftest import Recorder, run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(30)
def test_round_trip(recorder: Recorder) -> None:
    async def main() -> None:
        async with RpcServer(recorder) as server, RpcClient() as client:
            assert server.host == "127.0.0.1"
            r = await client.call(server.address, RequestCode.APPEND, {"x": b"\x00\xff", "s": "é"}, group="g1")
            assert r.ok and r.code == ResponseCode.SUCCESS
            assert r.body == {"echo": {"x": b"\x00\xff", "s": "é"}, "code": RequestCode.APPEND, "group": "g1"}
            r = await client.call(server.address, RequestCode.GET)
            assert r.body["group"] is None and r.body["echo"] == {}

    run(main())


@pytest.mark.timeout(30)
def test_handler_errors_become_codes_and_server_keeps_serving(recorder: Recorder) -> None:
    async def main() -> None:
        async with RpcServer(recorder) as server, RpcClient() as client:
            r = await client.call(server.address, 1, {"op": "boom"})
            assert r.code == ResponseCode.INTERNAL_ERROR
            assert r.message == "RuntimeError: kaboom" and "Traceback" not in (r.message or "")
            r = await client.call(server.address, 1, {"op": "code"})
            assert (r.code, r.message) == (ResponseCode.NOT_LEADER, "leader is n1")
            with pytest.raises(DLedgerError) as e:
                r.check()
            assert e.value.code == ResponseCode.NOT_LEADER
            r = await client.call(server.address, 1, {"op": "resp"})
            assert (r.code, r.body, r.message) == (ResponseCode.EXPIRED_TERM, {"term": 7}, "stale")
            assert (await client.call(server.address, 1, {"n": 1})).ok

    run(main())


@pytest.mark.timeout(30)
def test_unencodable_response_is_internal_error() -> None:
    async def handler(req: Request) -> dict[str, Any]:
        return {"x": object()} if req.code == 1 else {"ok": True}

    async def main() -> None:
        async with RpcServer(handler) as server, RpcClient() as client:
            r = await client.call(server.address, 1)
            assert r.code == ResponseCode.INTERNAL_ERROR and "encoded" in (r.message or "")
            assert (await client.call(server.address, 2)).ok
            with pytest.raises(DLedgerError) as e:
                await client.call(server.address, 1, {"bad": object()})
            assert e.value.code == ResponseCode.UNEXPECTED_ARGUMENT
            assert client.pending() == 0

    run(main())


@pytest.mark.timeout(60)
def test_ten_thousand_pipelined_calls_share_one_connection(recorder: Recorder) -> None:
    connections = 0

    async def main() -> None:
        nonlocal connections
        async with RpcServer(recorder) as server, RpcClient(timeout=30) as client:
            results = await asyncio.gather(*(client.call(server.address, 1, {"i": i}) for i in range(10_000)))
            assert [r.body["echo"]["i"] for r in results] == list(range(10_000))
            assert client.connection_attempts(server.address) == 1
            connections = len(server._conns)
            assert client.pending() == 0

    run(main(), 50)
    assert connections == 1 and recorder.calls == 10_000


@pytest.mark.timeout(60)
def test_pipelining_beyond_server_inflight_limit_is_backpressured(recorder: Recorder) -> None:
    async def main() -> None:
        async with RpcServer(recorder, max_inflight=16) as server, RpcClient(timeout=30) as client:
            body = {"op": "sleep", "s": 0.001}
            rs = await asyncio.gather(*(client.call(server.address, 1, body) for _ in range(500)))
            assert all(r.ok for r in rs)

    run(main(), 50)


@pytest.mark.timeout(120)
def test_large_bodies_both_ways() -> None:
    big = os.urandom(32 * 1024 * 1024)

    async def handler(req: Request) -> dict[str, Any]:
        data = req.body["d"]
        assert data == big
        return {"d": data[::-1], "n": len(data)}

    async def main() -> None:
        async with RpcServer(handler) as server, RpcClient(timeout=60) as client:
            rs = await asyncio.gather(*(client.call(server.address, 1, {"d": big}) for _ in range(2)))
            for r in rs:
                assert r.ok and r.body["n"] == len(big) and r.body["d"] == big[::-1]

    run(main(), 100)


@pytest.mark.timeout(30)
def test_frame_over_max_is_refused_on_the_sending_side(recorder: Recorder) -> None:
    async def main() -> None:
        async with RpcServer(recorder, max_frame=1 << 20) as server, RpcClient(max_frame=1 << 20) as client:
            with pytest.raises(DLedgerError) as e:
                await client.call(server.address, 1, {"d": b"x" * (2 << 20)})
            assert e.value.code == ResponseCode.UNEXPECTED_ARGUMENT
            assert (await client.call(server.address, 1, {"d": b"x" * 1000})).ok

    run(main())


@pytest.mark.timeout(30)
def test_timeout_cleans_pending_and_late_response_is_ignored(recorder: Recorder) -> None:
    async def main() -> None:
        async with RpcServer(recorder) as server, RpcClient() as client:
            with pytest.raises(DLedgerError) as e:
                await client.call(server.address, 1, {"op": "sleep", "s": 0.5}, timeout=0.05)
            assert e.value.code == ResponseCode.TIMEOUT
            assert client.pending() == 0
            await asyncio.sleep(0.6)  # the late response arrives and must be dropped quietly
            assert (await client.call(server.address, 1, {"n": 2})).body["echo"] == {"n": 2}
            # Cancelled callers also leave nothing behind.
            task = asyncio.ensure_future(client.call(server.address, 1, {"op": "sleep", "s": 5}))
            await asyncio.sleep(0.05)
            assert client.pending() == 1
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert client.pending() == 0

    run(main())


@pytest.mark.timeout(30)
def test_connection_refused_is_network_error_quickly() -> None:
    async def main() -> None:
        addr = f"127.0.0.1:{free_port()}"
        async with RpcClient(connect_timeout=10) as client:
            with pytest.raises(DLedgerError) as e:
                await asyncio.wait_for(client.call(addr, 1, timeout=10), 2)
            assert e.value.code == ResponseCode.NETWORK_ERROR
            # Within the backoff window the next call fails at once, without a new attempt.
            with pytest.raises(DLedgerError) as e:
                await client.call(addr, 1)
            assert e.value.code == ResponseCode.NETWORK_ERROR and "next attempt" in e.value.message
            assert client.connection_attempts(addr) == 1

    run(main())


@pytest.mark.timeout(30)
def test_bad_address() -> None:
    async def main() -> None:
        async with RpcClient() as client:
            with pytest.raises(DLedgerError) as e:
                await client.call("nonsense", 1)
            assert e.value.code == ResponseCode.UNEXPECTED_ARGUMENT

    run(main())


@pytest.mark.timeout(30)
def test_server_restart_client_reconnects_with_backoff(recorder: Recorder) -> None:
    async def main() -> None:
        server = RpcServer(recorder)
        await server.start()
        port = server.port
        async with RpcClient(backoff_base=0.02, backoff_max=0.2) as client:
            # Each connection made is reported (the node runtime resends what a lost one carried).
            connected: list[str] = []
            client.on_connect = connected.append
            assert (await client.call(server.address, 1)).ok
            assert (await client.call(server.address, 1)).ok
            assert connected == [server.address]
            in_flight = asyncio.ensure_future(client.call(server.address, 1, {"op": "sleep", "s": 5}))
            await asyncio.sleep(0.05)
            await server.close()
            with pytest.raises(DLedgerError) as e:
                await in_flight  # the lost connection fails the call at once, not at its timeout
            assert e.value.code == ResponseCode.NETWORK_ERROR
            assert client.pending() == 0

            errors = 0
            for _ in range(30):  # server down: failures grow the backoff
                try:
                    await client.call(f"127.0.0.1:{port}", 1, timeout=1)
                except DLedgerError as err:
                    assert err.code == ResponseCode.NETWORK_ERROR
                    errors += 1
                await asyncio.sleep(0.01)
            assert errors == 30
            attempts = client.connection_attempts(f"127.0.0.1:{port}")
            assert 2 <= attempts < 30  # backoff skipped most calls
            assert client.endpoint_failures(f"127.0.0.1:{port}") == attempts - 1

            server2 = RpcServer(recorder, port=port)
            await server2.start()
            try:
                for _ in range(200):
                    try:
                        r = await client.call(server2.address, 1, {"back": True})
                        break
                    except DLedgerError:
                        await asyncio.sleep(0.01)
                assert r.body["echo"] == {"back": True}
                assert client.endpoint_failures(server2.address) == 0
                assert connected == [server.address, server2.address]
            finally:
                await server2.close()

    run(main())


@pytest.mark.timeout(30)
def test_backoff_is_bounded() -> None:
    async def main() -> None:
        addr = f"127.0.0.1:{free_port()}"
        async with RpcClient(backoff_base=0.01, backoff_max=0.05) as client:
            for _ in range(200):
                try:
                    await client.call(addr, 1)
                except DLedgerError:
                    pass
                await asyncio.sleep(0.005)
            ep = client._endpoints[addr]
            assert ep.failures >= 5
            assert ep.retry_at - asyncio.get_running_loop().time() <= 0.05

    run(main())


@pytest.mark.timeout(30)
def test_oneway_send(recorder: Recorder) -> None:
    async def main() -> None:
        async with RpcServer(recorder) as server, RpcClient() as client:
            for i in range(100):
                await client.send(server.address, RequestCode.HEART_BEAT, {"i": i}, group="g")
            # A call after the sends on the same connection is served after they were dispatched.
            assert (await client.call(server.address, 1)).ok
            await asyncio.sleep(0.05)
            assert sorted(r.body["i"] for r in recorder.oneway) == list(range(100))
            assert all(r.oneway and r.group == "g" for r in recorder.oneway)

    run(main())


@pytest.mark.timeout(30)
def test_client_close_fails_pending_calls(recorder: Recorder) -> None:
    async def main() -> None:
        async with RpcServer(recorder) as server:
            client = RpcClient()
            task = asyncio.ensure_future(client.call(server.address, 1, {"op": "sleep", "s": 5}))
            await asyncio.sleep(0.05)
            await client.close()
            with pytest.raises(DLedgerError) as e:
                await task
            assert e.value.code == ResponseCode.NETWORK_ERROR
            with pytest.raises(DLedgerError):
                await client.call(server.address, 1)

    run(main())


@pytest.mark.timeout(30)
def test_server_close_cancels_running_handlers() -> None:
    cancelled = asyncio.Event()

    async def handler(req: Request) -> Response:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return Response()

    async def main() -> None:
        server = RpcServer(handler)
        await server.start()
        async with RpcClient() as client:
            task = asyncio.ensure_future(client.call(server.address, 1))
            await asyncio.sleep(0.05)
            await server.close()
            assert cancelled.is_set()
            with pytest.raises(DLedgerError):
                await task

    run(main())


@pytest.mark.timeout(30)
def test_many_clients_and_concurrent_connects(recorder: Recorder) -> None:
    async def main() -> None:
        async with RpcServer(recorder) as server:
            clients = [RpcClient() for _ in range(20)]
            try:
                rs = await asyncio.gather(*(c.call(server.address, 1, {"i": i}) for i in range(50) for c in clients))
                assert all(r.ok for r in rs)
                assert all(c.connection_attempts(server.address) == 1 for c in clients)
            finally:
                for c in clients:
                    await c.close()

    run(main())


@pytest.mark.timeout(30)
def test_timeouts_never_fire_early_and_leave_nothing_behind(recorder: Recorder) -> None:
    async def main() -> None:
        async with RpcServer(recorder) as server, RpcClient() as client:
            rs = await asyncio.gather(
                *(client.call(server.address, 1, {"op": "sleep", "s": 0.2}, timeout=1.5) for _ in range(50))
            )
            assert all(r.ok for r in rs)
            # Generous timeouts: on a loaded 2-core machine 1,000 calls may take a while.
            await asyncio.gather(*(client.call(server.address, 1, timeout=5.0) for _ in range(1000)))
            await asyncio.sleep(5.2)  # every bucket's time has passed
            conn = client._endpoints[server.address].conn
            assert conn is not None and conn._timeout_buckets == {} and client.pending() == 0

    run(main())


def test_cancel_tasks_ends_a_task_that_lost_its_first_cancel() -> None:
    # Python 3.11's wait_for can swallow a cancel (gh-86296); a node's close() must still end.
    async def main() -> None:
        lost = asyncio.Event()

        async def stubborn() -> None:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                lost.set()  # as if wait_for returned a result instead of raising
            await asyncio.sleep(10)  # the second cancel lands here

        task = asyncio.create_task(stubborn())
        await asyncio.sleep(0)
        await asyncio.wait_for(cancel_tasks([task], wait=0.05), 5)
        assert lost.is_set() and task.cancelled()

    asyncio.run(main())
