"""TLS contexts for nodes and clients, built from PEM file paths."""

from __future__ import annotations

import ssl
from os import PathLike

StrPath = str | PathLike[str]


def make_server_context(cert: StrPath, key: StrPath, ca: StrPath | None = None) -> ssl.SSLContext:
    """A server context; with ``ca`` every client must present a certificate signed by it (mutual TLS)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(certfile=cert, keyfile=key)
    if ca is not None:
        ctx.load_verify_locations(cafile=ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def make_client_context(
    ca: StrPath, cert: StrPath | None = None, key: StrPath | None = None, *, check_hostname: bool = True
) -> ssl.SSLContext:
    """A client context trusting only ``ca``; ``cert``/``key`` is the client's identity for mutual TLS.

    Host names are checked against the certificate by default: nodes are addressed as
    ``host:port``, so their certificates need that host (or IP) in subjectAltName.
    """
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = check_hostname
    if cert is not None:
        ctx.load_cert_chain(certfile=cert, keyfile=key)
    return ctx
