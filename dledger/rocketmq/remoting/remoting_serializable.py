"""RocketMQ's RemotingSerializable: JSON as fastjson writes it, for headers (type 0) and bodies.

fastjson writes an object's properties sorted by name, no spaces, UTF-8 unescaped, and leaves
out null ones; ``encode`` does the same, so a header we write has the bytes (and so the
``header_len``) the Java side writes. It reads what fastjson reads: any key order.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dledger.rocketmq.remoting.remoting_command_exception import RemotingCommandException

# A bare integer key after ``{`` or ``,`` (outside strings: fastjson writes them only there).
_BARE_KEY = re.compile(r"([{,])(-?[0-9]+):")
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=False)


def encode(obj: Any) -> bytes:
    """``obj`` (dicts in the key order they have) as compact UTF-8 JSON."""
    return _ENCODER.encode(obj).encode("utf-8")


def encode_sorted(obj: dict[str, Any]) -> bytes:
    """A bean as fastjson writes it: top-level properties sorted, null ones left out."""
    return encode({k: obj[k] for k in sorted(obj) if obj[k] is not None})


def encode_fastjson(obj: Any, *, quote_int_keys: bool = True) -> bytes:
    """``obj`` as fastjson writes a bean: null properties left out, and a map with Long keys
    (BrokerData.brokerAddrs) with its keys bare, ``{0:"host:port"}``, unless
    ``quote_int_keys`` (SerializerFeature.BrowserCompatible, which 4.9.4 name servers use for a
    route asked by a 4.9.4 client). Dicts keep their order: sort a bean's keys before."""
    out: list[str] = []
    _write(obj, out, quote_int_keys)
    return "".join(out).encode("utf-8")


def _write(obj: Any, out: list[str], quote: bool) -> None:
    if isinstance(obj, dict):
        out.append("{")
        first = True
        for k, v in obj.items():
            if v is None:
                continue
            if not first:
                out.append(",")
            first = False
            if isinstance(k, int) and not isinstance(k, bool) and not quote:
                out.append(str(k))
            else:
                out.append(_ENCODER.encode(str(k)))
            out.append(":")
            _write(v, out, quote)
        out.append("}")
    elif isinstance(obj, list | tuple | set | frozenset):
        out.append("[")
        for i, v in enumerate(obj):
            if i:
                out.append(",")
            _write(v, out, quote)
        out.append("]")
    else:
        out.append(_ENCODER.encode(obj))


def decode(data: bytes | memoryview) -> Any:
    """JSON as fastjson reads it, bare integer map keys included (``{0:"a"}``, which fastjson
    writes for a map with Long keys)."""
    try:
        text = bytes(data).decode("utf-8")
        try:
            return json.loads(text)
        except ValueError:
            return json.loads(_BARE_KEY.sub(r'\1"\2":', text))
    except ValueError as exc:  # UnicodeDecodeError is one
        raise RemotingCommandException(f"not JSON: {exc}") from None


__all__ = ["decode", "encode", "encode_fastjson", "encode_sorted"]
