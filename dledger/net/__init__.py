"""The node layer's transport: length-prefixed msgpack frames over asyncio TCP, optional TLS
and shared-secret authentication. See ``transport`` for the RPC API and ``frames`` for the
wire format."""

from dledger.net.auth import AuthenticationError
from dledger.net.frames import DEFAULT_MAX_FRAME, Frame, FrameDecoder, FrameError, Kind
from dledger.net.tls import make_client_context, make_server_context
from dledger.net.transport import Request, Response, RpcClient, RpcServer, parse_addr

__all__ = [
    "DEFAULT_MAX_FRAME",
    "AuthenticationError",
    "Frame",
    "FrameDecoder",
    "FrameError",
    "Kind",
    "Request",
    "Response",
    "RpcClient",
    "RpcServer",
    "make_client_context",
    "make_server_context",
    "parse_addr",
]
