"""Shared helpers for the transport tests: an event loop runner with a hard bound, handlers,
and a throwaway CA with server and client certificates (generated with ``cryptography``)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.net import Request, Response

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 20.0) -> T:
    """Run ``coro`` on a fresh loop, failing the test if it takes longer than ``timeout``."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


class Recorder:
    """A handler that echoes the body and counts what reached it."""

    def __init__(self) -> None:
        self.calls = 0
        self.oneway: list[Request] = []

    async def __call__(self, req: Request) -> Response | dict[str, Any]:
        self.calls += 1
        if req.oneway:
            self.oneway.append(req)
        op = req.body.get("op")
        if op == "sleep":
            await asyncio.sleep(req.body["s"])
        elif op == "boom":
            raise RuntimeError("kaboom")
        elif op == "code":
            raise DLedgerError(ResponseCode.NOT_LEADER, "leader is n1")
        elif op == "resp":
            return Response(ResponseCode.EXPIRED_TERM, {"term": 7}, "stale")
        return {"echo": req.body, "code": req.code, "group": req.group}


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    d = tmp_path_factory.mktemp("pki")
    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn: str) -> Any:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write_key(key: Any, path: Path) -> None:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )

    def make_ca(cn: str) -> tuple[Any, Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(name(cn))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return key, cert

    def issue(ca_key: Any, ca_cert: Any, cn: str, server: bool) -> tuple[Any, Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        usage = x509.ExtendedKeyUsageOID.SERVER_AUTH if server else x509.ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        return key, builder.sign(ca_key, hashes.SHA256())

    pem = serialization.Encoding.PEM
    ca_key, ca_cert = make_ca("dledger test CA")
    (d / "ca.pem").write_bytes(ca_cert.public_bytes(pem))
    _, other = make_ca("some other CA")
    (d / "other-ca.pem").write_bytes(other.public_bytes(pem))
    for who, server in (("server", True), ("client", False)):
        key, cert = issue(ca_key, ca_cert, f"dledger {who}", server)
        (d / f"{who}.pem").write_bytes(cert.public_bytes(pem))
        write_key(key, d / f"{who}.key")
    return Pki(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key", d / "other-ca.pem")
