"""RocketMQ's RemotingCommandException: a frame or header that does not decode, or a custom
header field that is missing or not a number."""

from __future__ import annotations


class RemotingCommandException(Exception):
    """Raised by the codec and by the header readers; a server answers it SYSTEM_ERROR (as
    NettyRemotingAbstract does for a processor's exception) or, for a broken frame, closes the
    connection (as NettyDecoder)."""


__all__ = ["RemotingCommandException"]
