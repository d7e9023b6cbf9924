"""Shared-secret handshake: mutual, replay-proof, and nothing reaches the handler before it."""

from __future__ import annotations

import asyncio
import struct

import msgpack
import pytest

from dledger.codes import ResponseCode
from dledger.net import AuthenticationError, Frame, FrameDecoder, Kind, RpcClient, RpcServer
from dledger.net import auth as A
from dledger.net.frames import encode_bytes

from .conftest import Recorder, run
from .test_bad_input import closed_by_server

SECRET = "correct horse battery staple"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("secret", [SECRET, SECRET.encode()])
def test_right_secret_works(recorder: Recorder, secret: str | bytes) -> None:
    async def main() -> None:
        async with RpcServer(recorder, secret=SECRET) as server, RpcClient(secret=secret) as client:
            rs = await asyncio.gather(*(client.call(server.address, 1, {"i": i, "d": b"x" * 5000}) for i in range(200)))
            assert [r.body["echo"]["i"] for r in rs] == list(range(200))

    run(main())
    assert recorder.calls == 200


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("server_secret", "client_secret", "message"),
    [
        (SECRET, "wrong", "failed to prove"),
        (SECRET, None, "requires a shared secret"),
        (None, SECRET, "no shared secret configured"),
    ],
)
def test_mismatched_secrets_fail_clearly(
    recorder: Recorder, server_secret: str | None, client_secret: str | None, message: str
) -> None:
    async def main() -> None:
        async with RpcServer(recorder, secret=server_secret) as server, RpcClient(secret=client_secret) as client:
            for _ in range(2):
                with pytest.raises(AuthenticationError) as e:
                    await client.call(server.address, 1, {"x": 1})
                assert e.value.code == ResponseCode.NETWORK_ERROR and message in e.value.message
                await asyncio.sleep(0.3)  # past the reconnect backoff, so the second try connects again

    run(main())
    assert recorder.calls == 0


@pytest.mark.timeout(30)
def test_a_client_refused_for_want_of_a_secret_backs_off_and_says_so(recorder: Recorder) -> None:
    # The connection itself works, so only the refusal can hold the client back: without it,
    # every call reconnected and the server logged each one.
    async def main() -> None:
        async with RpcServer(recorder, secret=SECRET) as server, RpcClient() as client:
            for _ in range(10):
                with pytest.raises(AuthenticationError, match="requires a shared secret"):
                    await client.call(server.address, 1, {"x": 1})
            assert client.connection_attempts(server.address) == 1
            assert client.refuses_authentication(server.address)

    run(main())
    assert recorder.calls == 0


@pytest.mark.timeout(30)
def test_failed_handshakes_are_logged_once_a_minute_per_client_host(
    recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async with RpcServer(recorder, secret=SECRET) as server:
            for secret in (None, None, None, "wrong", "wrong"):
                async with RpcClient(secret=secret) as client:
                    with pytest.raises(AuthenticationError):
                        await client.call(server.address, 1, {"x": 1})
                await asyncio.sleep(0.05)  # the server sees the wrong-secret client leave

    caplog.set_level("WARNING", logger="dledger.net.transport")
    run(main())
    said = [r.getMessage() for r in caplog.records if "authentication of 127.0.0.1" in r.getMessage()]
    assert len(said) == 1 and "this server has a shared secret" in said[0]


@pytest.mark.timeout(30)
def test_a_client_holding_another_secret_is_logged_by_the_server(
    recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    # It checks the server's proof first and leaves without a word: the server's log is the
    # only place an operator can learn of it.
    async def main() -> None:
        async with RpcServer(recorder, secret=SECRET) as server, RpcClient(secret="wrong") as client:
            with pytest.raises(AuthenticationError, match="failed to prove"):
                await client.call(server.address, 1, {"x": 1})
            await asyncio.sleep(0.05)

    caplog.set_level("WARNING", logger="dledger.net.transport")
    run(main())
    assert any("left after our challenge" in r.getMessage() for r in caplog.records)


async def _record_session(server: RpcServer) -> bytes:
    """Bytes a legitimate client sends through a recording proxy (handshake and two requests)."""
    sent = bytearray()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: bool) -> None:
        while data := await reader.read(65536):
            if record:
                sent.extend(data)
            writer.write(data)
        writer.close()

    async def on_client(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_connection("127.0.0.1", server.port)
        await asyncio.gather(pipe(cr, sw, True), pipe(sr, cw, False), return_exceptions=True)

    proxy = await asyncio.start_server(on_client, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    async with RpcClient(secret=SECRET) as client:
        assert (await client.call(f"127.0.0.1:{port}", 1, {"n": 1})).ok
        assert (await client.call(f"127.0.0.1:{port}", 1, {"n": 2})).ok
    proxy.close()
    return bytes(sent)


@pytest.mark.timeout(30)
def test_replayed_handshake_is_rejected_before_the_handler(recorder: Recorder) -> None:
    async def main() -> None:
        async with RpcServer(recorder, secret=SECRET) as server:
            recorded = await _record_session(server)
            assert recorder.calls == 2
            for split in (False, True):
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                if split:  # step by step, as the real client would
                    frames = FrameDecoder().feed(recorded)
                    for f in frames:
                        writer.write(encode_bytes(f))
                        await asyncio.sleep(0.02)
                else:
                    writer.write(recorded)
                assert await closed_by_server(reader)
                writer.close()
            assert recorder.calls == 2

    run(main())


@pytest.mark.timeout(30)
def test_client_verifies_the_server_before_proving_itself() -> None:
    received: list[Frame] = []

    async def impostor(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            for f in decoder.feed(data):
                received.append(f)
                if f.kind == Kind.AUTH and f.code == A.HELLO:
                    # Does not know the secret: answers with a made-up proof.
                    body = {"n": A.new_nonce(), "p": b"\x00" * 32}
                    writer.write(encode_bytes(Frame(Kind.AUTH, 0, A.CHALLENGE, body=body)))
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(impostor, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with RpcClient(secret=SECRET) as client:
            with pytest.raises(AuthenticationError, match="failed to prove"):
                await client.call(f"127.0.0.1:{port}", 1, {"secret": "data"})
        await asyncio.sleep(0.05)
        server.close()

    run(main())
    assert [(f.kind, f.code) for f in received] == [(Kind.AUTH, A.HELLO)]  # no proof, no request


@pytest.mark.timeout(30)
def test_reflected_proof_is_rejected(recorder: Recorder) -> None:
    """An attacker echoing the server's own proof back as the client proof gets nowhere."""

    async def main() -> None:
        async with RpcServer(recorder, secret=SECRET) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            nonce = A.new_nonce()
            writer.write(encode_bytes(Frame(Kind.AUTH, 0, A.HELLO, body={"n": nonce})))
            header = await reader.readexactly(4)
            challenge = msgpack.unpackb(await reader.readexactly(struct.unpack(">I", header)[0]))
            writer.write(encode_bytes(Frame(Kind.AUTH, 0, A.PROOF, body={"p": challenge["b"]["p"]})))
            writer.write(encode_bytes(Frame(Kind.REQUEST, 1, 1, body={})))
            assert await closed_by_server(reader)
            writer.close()

    run(main())
    assert recorder.calls == 0


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "stream",
    [
        b"",  # says nothing: the handshake times out
        encode_bytes(Frame(Kind.REQUEST, 1, 1, body={"x": 1})),  # skips the handshake
        encode_bytes(Frame(Kind.ONEWAY, 0, 1, body={"x": 1})),
        encode_bytes(Frame(Kind.AUTH, 0, A.PROOF, body={"p": b"\x00" * 32})),  # proof before hello
        encode_bytes(Frame(Kind.AUTH, 0, A.HELLO, body={"n": b"short"})),
        struct.pack(">I", 1 << 20),  # big frames are refused before authentication
    ],
    ids=["silent", "request", "oneway", "proof_first", "short_nonce", "big_frame"],
)
def test_unauthenticated_peers_are_cut_off(recorder: Recorder, stream: bytes) -> None:
    async def main() -> None:
        async with RpcServer(recorder, secret=SECRET, handshake_timeout=0.3) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(stream)
            assert await closed_by_server(reader, within=3)
            writer.close()
            async with RpcClient(secret=SECRET) as client:
                assert (await client.call(server.address, 1)).ok

    run(main())
    assert recorder.calls == 1
