"""RocketMQ's RemotingCommand: one request or response of the remoting protocol.

A frame is ``int32 L`` (the bytes that follow), ``int32 (serializeType << 24) | H``, an
``H``-byte header (JSON as RemotingSerializable writes it, or ROCKETMQ binary as
RocketMQSerializable) and the body, all that is left. ``flag`` bit 0 marks a response, bit 1 a
oneway request; a response carries its request's ``opaque`` and is written in the request's
serialize type.
"""

from __future__ import annotations

import itertools
import re
import struct
from dataclasses import dataclass, field
from typing import Any

from dledger._ext import load as _load_ext
from dledger.rocketmq.remoting import remoting_serializable, rocketmq_serializable
from dledger.rocketmq.remoting.language_code import LanguageCode
from dledger.rocketmq.remoting.remoting_command_exception import RemotingCommandException
from dledger.rocketmq.remoting.response_code import ResponseCode
from dledger.rocketmq.remoting.serialize_type import SerializeType

RPC_TYPE = 0  # flag bit: 1 = response
RPC_ONEWAY = 1  # flag bit: 1 = oneway request
RESPONSE_FLAG = 1 << RPC_TYPE
ONEWAY_FLAG = 1 << RPC_ONEWAY

# What a 4.9.4 client stamps into ``version`` (MQVersion.Version.V4_9_4.ordinal()).
CURRENT_VERSION = 401

K = _load_ext("remoting")

_PREFIX = struct.Struct(">ii")
_LANG_NAMES = {c.name: int(c) for c in LanguageCode}
_LANG_BY_VALUE = {int(c): c.name for c in LanguageCode}
_opaques = itertools.count()
# What Long.parseLong takes (Python's int() takes more: spaces, underscores).
_JAVA_LONG = re.compile(r"[+-]?[0-9]{1,19}")


def next_opaque() -> int:
    """RemotingCommand.createNewRequestId: this process's next request id (an int32)."""
    return next(_opaques) & 0x7FFFFFFF


@dataclass(slots=True)
class RemotingCommand:
    """One command; ``ext_fields`` holds its custom header (every value a string, as Java's
    HashMap<String, String>); ``language`` a LanguageCode value."""

    code: int
    ext_fields: dict[str, str] | None = None
    body: bytes | memoryview = b""
    remark: str | None = None
    opaque: int = field(default_factory=next_opaque)
    flag: int = 0
    version: int = CURRENT_VERSION
    language: int = LanguageCode.JAVA
    serialize_type: SerializeType = SerializeType.JSON

    # -- flags -----------------------------------------------------------------------------

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    @staticmethod
    def request(
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes | memoryview = b"",
        *,
        oneway: bool = False,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> RemotingCommand:
        return RemotingCommand(code, ext_fields, body, flag=ONEWAY_FLAG if oneway else 0, serialize_type=serialize_type)

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes | memoryview = b"",
    ) -> RemotingCommand:
        """The answer to this request: its opaque, its serialize type, the response flag."""
        return RemotingCommand(
            code,
            ext_fields,
            body,
            remark,
            self.opaque,
            RESPONSE_FLAG,
            0,  # the server stamps its own (NettyRemotingServer.response_version)
            LanguageCode.JAVA,
            self.serialize_type,
        )

    # -- codec -----------------------------------------------------------------------------

    def encode_header(self) -> bytes:
        if self.serialize_type == SerializeType.ROCKETMQ:
            return rocketmq_serializable.encode_header(
                self.code, self.language, self.version, self.opaque, self.flag, self.remark, self.ext_fields
            )
        lang = _LANG_BY_VALUE.get(self.language, "OTHER")
        if self.remark is None or type(self.remark) is str:
            # The kernel writes a header of string fields and int64 numbers (every one we
            # make); None or OverflowError: another, which the general encoder writes.
            try:
                header: bytes | None = K.encode_json_header(
                    self.code, self.ext_fields, self.flag, lang, self.opaque, self.remark, self.version
                )
            except OverflowError:
                header = None
            if header is not None:
                return header
        bean: dict[str, Any] = {
            "code": self.code,
            "extFields": self.ext_fields,
            "flag": self.flag,
            "language": lang,
            "opaque": self.opaque,
            "remark": self.remark,
            "serializeTypeCurrentRPC": "JSON",
            "version": self.version,
        }
        return remoting_serializable.encode_sorted(bean)

    def encode(self) -> bytes:
        """The whole frame, length field first (RemotingCommand.encode and the body)."""
        header = self.encode_header()
        hlen = len(header)
        if hlen > 0xFFFFFF:
            raise RemotingCommandException(f"header of {hlen} bytes: the frame holds at most 16 MiB - 1")
        return b"".join(
            (_PREFIX.pack(4 + hlen + len(self.body), (int(self.serialize_type) << 24) | hlen), header, self.body)
        )

    @staticmethod
    def decode(frame: bytes | memoryview) -> RemotingCommand:
        """A command from a frame without its length field (what NettyDecoder hands on)."""
        # The kernel reads the header in place and copies the body once (decode_command).
        cmd: RemotingCommand = K.decode_command(frame)
        return cmd

    def ext_str(self, name: str, default: str | None = None) -> str:
        """A custom header field (CFNotNull when no default): RemotingCommandException if absent."""
        v = (self.ext_fields or {}).get(name)
        if v is None or (v == "" and default is not None):
            if default is None:
                raise RemotingCommandException(f"the custom field <{name}> is null")
            return default
        return v

    def ext_int(self, name: str, default: int | None = None) -> int:
        """A numeric custom header field, parsed as Java's Integer/Long.parseLong."""
        v = (self.ext_fields or {}).get(name)
        if v is None or v == "":
            if default is None:
                raise RemotingCommandException(f"the custom field <{name}> is null")
            return default
        if _JAVA_LONG.fullmatch(v) is None or not -(1 << 63) <= int(v) < 1 << 63:
            raise RemotingCommandException(f"the custom field <{name}> is not a number: {v[:40]!r}")
        return int(v)

    def ext_bool(self, name: str, default: bool = False) -> bool:
        """Boolean.parseBoolean: true only for "true" (any case)."""
        v = (self.ext_fields or {}).get(name)
        return default if v is None else v.lower() == "true"


def _java_text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    return remoting_serializable.encode(v).decode("utf-8") if isinstance(v, dict | list) else str(v)


K.configure(
    RemotingCommand,
    remoting_serializable.decode,
    _java_text,
    _LANG_NAMES,
    int(LanguageCode.OTHER),
    SerializeType.JSON,
    SerializeType.ROCKETMQ,
    RemotingCommandException,
)

__all__ = ["CURRENT_VERSION", "ONEWAY_FLAG", "RESPONSE_FLAG", "RemotingCommand", "next_opaque"]
