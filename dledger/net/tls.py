"""TLS contexts for nodes and clients, built from PEM file paths."""

from __future__ import annotations

import logging
import ssl
from os import PathLike

from dledger.log_limit import RepeatLimiter, held_back

StrPath = str | PathLike[str]

log = logging.getLogger(__name__)
_LIMITER = "_dledger_handshake_warnings"  # a server context's own RepeatLimiter


class _LoggedHandshake(ssl.SSLObject):
    """A server's TLS session that logs a failed handshake. asyncio drops those in silence (an
    OSError, logged only in its debug mode), so a client without the certificate mutual TLS
    asks for, or one from another CA, would otherwise leave no trace on the member. The
    session has no peer address; the warning is once a minute per reason and server context."""

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
            raise  # the handshake's normal flow, or a client that left (a TCP health check)
        except ssl.SSLError as exc:
            limiter = getattr(self.context, _LIMITER, None)
            held = limiter.allow(exc.reason or str(exc)) if limiter is not None else 0
            if held is not None:
                log.warning("a client's TLS handshake failed: %s%s", _explain(exc), held_back(held))
            raise


def _explain(exc: ssl.SSLError) -> str:
    if exc.reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
        return f"{exc} (a client without --tls-cert, and this member requires one: mutual TLS)"
    if exc.reason in ("CERTIFICATE_VERIFY_FAILED", "TLSV1_ALERT_UNKNOWN_CA"):
        return f"{exc} (a certificate this member's --tls-ca did not sign, or the client distrusts ours)"
    if exc.reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNSUPPORTED_PROTOCOL"):
        return f"{exc} (a client speaking plain TCP? it needs --tls-ca)"
    return str(exc)


def make_server_context(cert: StrPath, key: StrPath, ca: StrPath | None = None) -> ssl.SSLContext:
    """A server context; with ``ca`` every client must present a certificate signed by it (mutual TLS)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(certfile=cert, keyfile=key)
    if ca is not None:
        ctx.load_verify_locations(cafile=ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.sslobject_class = _LoggedHandshake  # documented: wrap_bio (asyncio's way) makes these
    setattr(ctx, _LIMITER, RepeatLimiter())
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
