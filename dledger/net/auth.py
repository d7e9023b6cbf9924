"""Shared-secret mutual authentication: challenge-response with HMAC-SHA256.

The handshake, all in ``Kind.AUTH`` frames whose code is the step number::

    1. client -> server  HELLO      {"n": Nc}
    2. server -> client  CHALLENGE  {"n": Ns, "p": HMAC(K, "dledger-server" | Nc | Ns)}
    3. client -> server  PROOF      {"p": HMAC(K, "dledger-client" | Ns | Nc)}
    4. server -> client  OK         {}
       (either side)     FAIL       message says why, then the connection is closed

Nc and Ns are fresh 32-byte random nonces, so a recorded handshake is useless on a new
connection: the server's proof covers the client's new nonce and the client's proof covers
the server's new nonce. The two proofs carry different labels so that one side's proof can
never be reflected back as the other's. The client checks the server's proof before it
proves anything itself, which is the "mutual" part: a server without the secret learns
nothing usable and gets no request. Step 4 exists so that a client learns of a rejection
as a clear error at connect time rather than as a reset on its first request.

A side without a secret never starts or answers a handshake; the other side turns that into
an ``AuthenticationError`` with a message saying which side lacks the secret.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError

NONCE_SIZE = 32
DEFAULT_HANDSHAKE_TIMEOUT = 3.0
# Until a peer has authenticated it may only send frames this small, so an anonymous
# connection cannot make the server allocate a max-size frame buffer.
HANDSHAKE_MAX_FRAME = 1024

HELLO = 1
CHALLENGE = 2
PROOF = 3
OK = 4
FAIL = 5

_SERVER_LABEL = b"dledger-server\x00"
_CLIENT_LABEL = b"dledger-client\x00"


class AuthenticationError(DLedgerError):
    """The peers could not prove a shared secret to each other (or only one side has one)."""

    def __init__(self, message: str) -> None:
        super().__init__(ResponseCode.NETWORK_ERROR, message)


def as_key(secret: str | bytes) -> bytes:
    key = secret.encode() if isinstance(secret, str) else bytes(secret)
    if not key:
        raise ValueError("the shared secret must not be empty")
    return key


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_SIZE)


def server_proof(key: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(key, _SERVER_LABEL + client_nonce + server_nonce, hashlib.sha256).digest()


def client_proof(key: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(key, _CLIENT_LABEL + server_nonce + client_nonce, hashlib.sha256).digest()


def verify(expected: bytes, got: object) -> bool:
    # compare_digest keeps the comparison time independent of where the first difference is.
    return isinstance(got, bytes) and hmac.compare_digest(expected, got)


def valid_nonce(n: object) -> bool:
    return isinstance(n, bytes) and len(n) == NONCE_SIZE
