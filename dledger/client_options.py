"""The command-line options a client needs to reach a secured group (shared secret, TLS), for
every command that talks to one: `dledger status/append/...` and `dledger mq ... --peers`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_security_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--secret-file", default=None, help="file holding the group's shared secret")
    p.add_argument("--tls-ca", default=None, help="CA file to verify the nodes (enables TLS)")
    p.add_argument("--tls-cert", default=None, help="client certificate (mutual TLS)")
    p.add_argument("--tls-key", default=None, help="the key of --tls-cert")


def security_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``secret`` and ``ssl`` for a client, from the options above (none given: {})."""
    kwargs: dict[str, Any] = {}
    if getattr(args, "secret_file", None):
        kwargs["secret"] = Path(args.secret_file).read_bytes().strip()
    if getattr(args, "tls_ca", None):
        from dledger.net.tls import make_client_context

        cert, key = getattr(args, "tls_cert", None), getattr(args, "tls_key", None)
        kwargs["ssl"] = make_client_context(args.tls_ca, cert, key)
    return kwargs


# Every member refused the connection (none started, a wrong port): a command says so within
# about a second rather than retrying until --timeout, as a program waiting out a restart would.
REFUSED_GRACE_S = 0.5


def client_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of a command's client: --timeout, the security options, and the
    command line's short patience with a group where nothing listens."""
    return {"timeout": args.timeout, "refused_grace": REFUSED_GRACE_S, **security_kwargs(args)}
