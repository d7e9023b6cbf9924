"""TLS and mutual TLS, with a throwaway CA generated at test time."""

from __future__ import annotations

import asyncio

import pytest

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.net import RpcClient, RpcServer, make_client_context, make_server_context

from .conftest import Pki, Recorder, run


@pytest.mark.timeout(30)
def test_tls_round_trip(pki: Pki, recorder: Recorder) -> None:
    async def main() -> None:
        server_ctx = make_server_context(pki.server_cert, pki.server_key)
        async with RpcServer(recorder, ssl=server_ctx) as server:
            async with RpcClient(ssl=make_client_context(pki.ca)) as client:
                r = await client.call(server.address, 1, {"d": b"\x01" * 3_000_000})
                assert r.ok and r.body["echo"]["d"] == b"\x01" * 3_000_000
            # Host name checking: the certificate names 127.0.0.1 and localhost.
            async with RpcClient(ssl=make_client_context(pki.ca)) as client:
                assert (await client.call(f"localhost:{server.port}", 1)).ok

    run(main())


@pytest.mark.timeout(30)
def test_mutual_tls(pki: Pki, recorder: Recorder, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        server_ctx = make_server_context(pki.server_cert, pki.server_key, pki.ca)
        async with RpcServer(recorder, ssl=server_ctx) as server:
            good = make_client_context(pki.ca, pki.client_cert, pki.client_key)
            async with RpcClient(ssl=good) as client:
                assert (await client.call(server.address, 1, {"x": 1})).ok
            async with RpcClient(ssl=make_client_context(pki.ca)) as client:  # no client certificate
                with pytest.raises(DLedgerError) as e:
                    await client.call(server.address, 1, {"x": 2})
                assert e.value.code == ResponseCode.NETWORK_ERROR

    caplog.set_level("WARNING", logger="dledger.net.tls")
    run(main())
    assert recorder.calls == 1
    assert any("PEER_DID_NOT_RETURN_A_CERTIFICATE" in r.getMessage() for r in caplog.records)


@pytest.mark.timeout(30)
def test_client_without_the_ca_fails(pki: Pki, recorder: Recorder) -> None:
    async def main() -> None:
        async with RpcServer(recorder, ssl=make_server_context(pki.server_cert, pki.server_key)) as server:
            async with RpcClient(ssl=make_client_context(pki.other_ca)) as client:
                with pytest.raises(DLedgerError) as e:
                    await client.call(server.address, 1)
                assert e.value.code == ResponseCode.NETWORK_ERROR and "CERTIFICATE_VERIFY_FAILED" in e.value.message
            async with RpcClient() as plain:  # a plaintext client gets an error, not a hang
                with pytest.raises(DLedgerError) as e:
                    await plain.call(server.address, 1, timeout=5)
                assert e.value.code == ResponseCode.NETWORK_ERROR
            async with RpcClient(ssl=make_client_context(pki.ca)) as client:
                assert (await client.call(server.address, 1)).ok

    run(main())
    assert recorder.calls == 1


@pytest.mark.timeout(30)
def test_tls_with_shared_secret(pki: Pki, recorder: Recorder) -> None:
    async def main() -> None:
        server_ctx = make_server_context(pki.server_cert, pki.server_key, pki.ca)
        async with RpcServer(recorder, ssl=server_ctx, secret="s3") as server:
            ctx = make_client_context(pki.ca, pki.client_cert, pki.client_key)
            async with RpcClient(ssl=ctx, secret="s3") as client:
                assert (await client.call(server.address, 1)).ok

    run(main())


@pytest.mark.timeout(30)
def test_a_member_logs_a_plain_client_but_not_a_connection_that_only_closes(
    pki: Pki, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    # A TCP health check connects and leaves: nothing to tell the operator. A client that speaks
    # plain TCP to a TLS member is a misconfiguration asyncio would otherwise drop in silence.
    async def main() -> None:
        async with RpcServer(recorder, ssl=make_server_context(pki.server_cert, pki.server_key)) as server:
            _, w = await asyncio.open_connection("127.0.0.1", server.port)
            w.close()
            await asyncio.sleep(0.2)
            assert not [r for r in caplog.records if "handshake failed" in r.getMessage()]
            async with RpcClient() as plain:
                with pytest.raises(DLedgerError):
                    await plain.call(server.address, 1, timeout=5)
            await asyncio.sleep(0.2)

    caplog.set_level("WARNING", logger="dledger.net.tls")
    run(main())
    said = [r.getMessage() for r in caplog.records if "handshake failed" in r.getMessage()]
    assert len(said) == 1 and "plain TCP" in said[0]
