"""The remoting server's read path (a BufferedProtocol, frames split and decoded by a kernel,
a processor run in the read callback until it waits) and the kernel's JSON header writer."""

from __future__ import annotations

import asyncio
import struct
import sys
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.rocketmq.remoting import (
    FrameTooLong,
    LanguageCode,
    NettyDecoder,
    RemotingCommand,
    RemotingCommandException,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from dledger.rocketmq.remoting import remoting_serializable as RS
from dledger.rocketmq.remoting.netty_remoting_server import Channel, CommandDecoder, NettyRemotingServer
from tests.rocketmq.remoting.captures import streams


def _received(d: CommandDecoder, data: bytes) -> list[RemotingCommand]:
    """``data`` received as the protocol receives it: into the decoder's own buffer, as much
    as it offers at a time."""
    got: list[RemotingCommand] = []
    pos = 0
    while pos < len(data):
        buf = d.get_buffer(-1)
        n = min(len(buf), len(data) - pos)
        buf[:n] = data[pos : pos + n]
        pos += n
        got += d.buffer_updated(n)
    return got


def _expected(data: bytes) -> list[RemotingCommand]:
    return [RemotingCommand.decode(f) for f in NettyDecoder().feed(data)]


def _same(a: list[RemotingCommand], b: list[RemotingCommand]) -> bool:
    # A body may be bytes or a view of the frame's own buffer: compared by content.
    def key(c: RemotingCommand) -> tuple[object, ...]:
        fields = (c.code, c.ext_fields, c.remark, c.opaque, c.flag, c.version, c.language, c.serialize_type)
        return (*fields, bytes(c.body))

    return [key(c) for c in a] == [key(c) for c in b]


@pytest.mark.parametrize("scratch", [64, 4096, 256 * 1024])
def test_a_stream_split_at_every_byte_boundary_gives_the_same_commands(scratch: int) -> None:
    # 64 bytes of scratch: most frames take the own-buffer path; 4096: some do, and partial
    # frames are moved to the front; 256 KiB: the server's size.
    for name, data in streams():
        whole = _expected(data)
        assert _same(_received(CommandDecoder(scratch_size=scratch), data), whole), name
        data = data[:3000]
        whole = _expected(data)
        for cut in range(len(data) + 1):
            d = CommandDecoder(scratch_size=scratch)
            got = _received(d, data[:cut]) + _received(d, data[cut:])
            assert _same(got, whole), (name, scratch, cut)
            rest = len(data) - sum(4 + len(f) for f in NettyDecoder().feed(data))
            # (a frame in its own buffer counts without its length field)
            assert rest - 4 <= d.buffered <= rest and (d.buffered == 0) == (rest == 0), (name, cut)
            assert d.error is None


def test_byte_by_byte_gives_every_command_once() -> None:
    name, data = max(streams(), key=lambda s: len(s[1]))
    d = CommandDecoder()
    got = [c for i in range(len(data)) for c in _received(d, data[i : i + 1])]
    assert _same(got, _expected(data)) and d.buffered == 0, name


def test_a_frame_over_the_limit_is_refused_after_the_ones_before_it() -> None:
    limit = 4096
    ok = RemotingCommand(RequestCode.HEART_BEAT, body=b"x" * (limit - 200)).encode()
    at = RemotingCommand(RequestCode.HEART_BEAT, body=b"x").encode()
    at = RemotingCommand(RequestCode.HEART_BEAT, body=b"x" * (1 + limit - len(at))).encode()
    assert len(at) == limit
    assert len(_received(CommandDecoder(limit), at)) == 1
    d = CommandDecoder(limit)
    got = _received(d, ok + struct.pack(">i", limit - 3) + b"\x00" * 8)  # refused on its length alone
    assert len(got) == 1 and isinstance(d.error, FrameTooLong)
    with pytest.raises(FrameTooLong):
        d.get_buffer(-1)  # nothing more is taken
    for bad in (struct.pack(">i", -1), struct.pack(">i", 16 * 1024 * 1024 - 3)):
        with pytest.raises(FrameTooLong):
            _received(CommandDecoder(), bad)
    # A frame that does not decode: the same, its own exception.
    d = CommandDecoder()
    got = _received(d, ok[: len(ok)] + struct.pack(">ii", 4, (2 << 24)))
    assert len(got) == 1 and isinstance(d.error, RemotingCommandException)


# -- through a server ---------------------------------------------------------------------------


def _serve(
    processors: dict[int, Callable[[RemotingCommand, Channel], Awaitable[RemotingCommand | None]]],
    test: Callable[[NettyRemotingServer, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    max_frame: int = 16 * 1024 * 1024,
) -> None:
    async def main() -> None:
        server = NettyRemotingServer("127.0.0.1", 0, dict(processors), max_frame_length=max_frame)
        await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            await test(server, reader, writer)
        finally:
            writer.close()
            await server.close()

    asyncio.run(asyncio.wait_for(main(), 30))


async def _answers(reader: asyncio.StreamReader, n: int) -> list[RemotingCommand]:
    out = []
    for _ in range(n):
        (length,) = struct.unpack(">i", await reader.readexactly(4))
        out.append(RemotingCommand.decode(await reader.readexactly(length)))
    return out


def test_answers_leave_in_request_order_and_a_held_request_does_not_stall_them() -> None:
    gate: asyncio.Event | None = None
    in_task: list[bool] = []

    async def echo(req: RemotingCommand, _ch: Channel) -> RemotingCommand:
        assert gate is not None
        if req.ext_str("hold", "no") == "yes":
            await gate.wait()
        in_task.append(asyncio.current_task() is not None)
        return req.response(ext_fields={"n": req.ext_str("n")}, body=bytes(req.body))

    async def test(server: NettyRemotingServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal gate
        gate = asyncio.Event()
        held = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"n": "held", "hold": "yes"})
        reqs = [
            RemotingCommand.request(
                RequestCode.HEART_BEAT,
                {"n": str(k)},
                str(k).encode() * k,
                serialize_type=SerializeType(k % 2),
            )
            for k in range(200)
        ]
        # All in one write, the held one first: the others are answered at once, in order.
        writer.write(b"".join(r.encode() for r in [held, *reqs]))
        got = await _answers(reader, len(reqs))
        assert [(a.opaque, a.serialize_type, (a.ext_fields or {})["n"], bytes(a.body)) for a in got] == [
            (r.opaque, r.serialize_type, str(k), str(k).encode() * k) for k, r in enumerate(reqs)
        ]
        assert all(a.is_response and a.code == ResponseCode.SUCCESS for a in got)
        gate.set()
        (last,) = await _answers(reader, 1)
        assert last.opaque == held.opaque and (last.ext_fields or {})["n"] == "held"
        # Those that answered at once did so in the read callback (on 3.12+ in an eager task
        # started there), the held one in a task.
        assert in_task == [sys.version_info >= (3, 12)] * len(reqs) + [True]

    _serve({RequestCode.HEART_BEAT: echo, RequestCode.PULL_MESSAGE: echo}, test)


def test_a_processor_that_waits_with_wait_for_is_answered() -> None:
    # The held pull and a send waiting for its commit wait with asyncio.wait_for, which from
    # Python 3.12 needs a current task: stepped outside one they answered SYSTEM_ERROR.
    async def held(req: RemotingCommand, _ch: Channel) -> RemotingCommand:
        try:
            await asyncio.wait_for(asyncio.get_running_loop().create_future(), 0.05)
        except asyncio.TimeoutError:  # 3.10: not the builtin TimeoutError
            return req.response(ext_fields={"held": "timed out"})
        return req.response(ResponseCode.SYSTEM_ERROR)

    async def test(server: NettyRemotingServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pull = RemotingCommand.request(RequestCode.PULL_MESSAGE)
        writer.write(pull.encode())
        (a,) = await _answers(reader, 1)
        assert a.code == ResponseCode.SUCCESS, a.remark
        assert (a.ext_fields or {})["held"] == "timed out"

    _serve({RequestCode.PULL_MESSAGE: held}, test)


def test_a_oneway_request_is_served_and_not_answered() -> None:
    seen: list[str] = []

    async def note(req: RemotingCommand, _ch: Channel) -> RemotingCommand:
        seen.append(req.ext_str("n"))
        if req.ext_str("n") == "later":
            await asyncio.sleep(0.01)
        return req.response(ext_fields={"n": req.ext_str("n")})

    async def test(server: NettyRemotingServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        one = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, {"n": "oneway"}, oneway=True)
        later = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, {"n": "later"}, oneway=True)
        two = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, {"n": "two"})
        writer.write(one.encode() + later.encode() + two.encode())
        (a,) = await _answers(reader, 1)
        assert a.opaque == two.opaque and (a.ext_fields or {})["n"] == "two"
        await asyncio.sleep(0.1)
        assert sorted(seen) == ["later", "oneway", "two"]
        # Nothing else came: the next answer is the next request's.
        three = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, {"n": "three"})
        writer.write(three.encode())
        (b,) = await _answers(reader, 1)
        assert b.opaque == three.opaque

    _serve({RequestCode.UNREGISTER_CLIENT: note}, test)


def test_a_failing_processor_is_answered_system_error_before_or_after_it_waits() -> None:
    async def fail(req: RemotingCommand, _ch: Channel) -> RemotingCommand:
        if req.ext_str("wait", "no") == "yes":
            await asyncio.sleep(0.01)
        raise ValueError("boom " + req.ext_str("wait", "no"))

    async def test(server: NettyRemotingServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        now = RemotingCommand.request(RequestCode.HEART_BEAT)
        after = RemotingCommand.request(RequestCode.HEART_BEAT, {"wait": "yes"})
        unknown = RemotingCommand.request(9999, serialize_type=SerializeType.ROCKETMQ)
        writer.write(now.encode() + after.encode() + unknown.encode())
        got = {a.opaque: a for a in await _answers(reader, 3)}
        assert got[now.opaque].code == ResponseCode.SYSTEM_ERROR and "boom no" in (got[now.opaque].remark or "")
        assert got[after.opaque].code == ResponseCode.SYSTEM_ERROR and "boom yes" in (got[after.opaque].remark or "")
        assert got[unknown.opaque].code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        # Written by the server itself (no default processor): in its own type, as Java's
        # createResponseCommand, not the request's.
        assert got[unknown.opaque].serialize_type == SerializeType.JSON

    _serve({RequestCode.HEART_BEAT: fail}, test)


def test_a_code_without_processor_is_refused_even_oneway_and_a_default_processor_serves_it() -> None:
    async def ok(req: RemotingCommand, _ch: Channel) -> RemotingCommand:
        return req.response()

    async def default(req: RemotingCommand, _ch: Channel) -> RemotingCommand:
        return req.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "by default")

    async def test(server: NettyRemotingServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # No default processor: processRequestCommand answers a oneway request too.
        unknown = RemotingCommand.request(9999, oneway=True, serialize_type=SerializeType.ROCKETMQ)
        then = RemotingCommand.request(RequestCode.HEART_BEAT)
        writer.write(unknown.encode() + then.encode())
        a, b = await _answers(reader, 2)
        assert (a.opaque, a.code, a.remark, a.is_response) == (
            unknown.opaque,
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            " request type 9999 not supported",
            True,
        )
        assert a.serialize_type == SerializeType.JSON and not a.is_oneway
        assert (b.opaque, b.code) == (then.opaque, ResponseCode.SUCCESS)
        # A default processor (the broker's): its answer goes the normal way, none to oneway.
        server.default_processor = default
        quiet = RemotingCommand.request(9998, oneway=True)
        asked = RemotingCommand.request(9998, serialize_type=SerializeType.ROCKETMQ)
        writer.write(quiet.encode() + asked.encode())
        (c,) = await _answers(reader, 1)
        assert (c.opaque, c.code, c.remark) == (asked.opaque, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "by default")
        assert c.serialize_type == SerializeType.ROCKETMQ

    _serve({RequestCode.HEART_BEAT: ok}, test)


def test_a_frame_over_the_limit_closes_the_connection_after_the_requests_before_it() -> None:
    async def ok(req: RemotingCommand, _ch: Channel) -> RemotingCommand:
        return req.response()

    async def test(server: NettyRemotingServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = RemotingCommand.request(RequestCode.HEART_BEAT)
        writer.write(first.encode() + struct.pack(">i", 4096))  # 4 + 4096 > the limit of 4096
        (a,) = await _answers(reader, 1)
        assert a.opaque == first.opaque
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed
        # The server still serves others.
        r2, w2 = await asyncio.open_connection("127.0.0.1", server.port)
        w2.write(first.encode())
        (b,) = await _answers(r2, 1)
        assert b.opaque == first.opaque
        w2.close()

    _serve({RequestCode.HEART_BEAT: ok}, test, max_frame=4096)


def test_a_big_frame_is_received_into_its_own_buffer_and_served() -> None:
    async def size(req: RemotingCommand, _ch: Channel) -> RemotingCommand:
        body = bytes(req.body)
        return req.response(ext_fields={"len": str(len(body)), "sum": str(sum(body[::4099]))})

    async def test(server: NettyRemotingServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = bytes(range(256)) * (3 * 1024 * 4)  # 3 MiB: past the 256 KiB scratch buffer
        reqs = [RemotingCommand.request(RequestCode.SEND_MESSAGE, body=body[: len(body) - k]) for k in range(3)]
        writer.write(b"".join(r.encode() for r in reqs))
        got = await _answers(reader, 3)
        assert [(a.opaque, a.ext_fields) for a in got] == [
            (r.opaque, {"len": str(len(r.body)), "sum": str(sum(bytes(r.body)[::4099]))}) for r in reqs
        ]

    _serve({RequestCode.SEND_MESSAGE: size}, test)


# -- the JSON header writer ---------------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8"), max_size=30)


@settings(max_examples=300, deadline=None)
@given(
    code=st.integers(-(1 << 15), (1 << 15) - 1),
    ext=st.none() | st.dictionaries(_text, _text, max_size=6),
    remark=st.none() | _text,
    opaque=st.integers(-(1 << 31), (1 << 31) - 1),
    flag=st.integers(0, 3),
    version=st.integers(-(1 << 15), (1 << 15) - 1),
    language=st.sampled_from(list(LanguageCode)),
)
def test_the_json_header_is_what_fastjson_order_writes(
    code: int,
    ext: dict[str, str] | None,
    remark: str | None,
    opaque: int,
    flag: int,
    version: int,
    language: LanguageCode,
) -> None:
    cmd = RemotingCommand(code, ext, b"", remark, opaque, flag, version, int(language), SerializeType.JSON)
    bean = {
        "code": code,
        "extFields": ext,
        "flag": flag,
        "language": language.name,
        "opaque": opaque,
        "remark": remark,
        "serializeTypeCurrentRPC": "JSON",
        "version": version,
    }
    assert cmd.encode_header() == RS.encode_sorted(bean)
    assert RemotingCommand.decode(cmd.encode()[4:]) == cmd


def test_every_control_character_is_escaped_as_json_escapes_it() -> None:
    text = "".join(map(chr, range(0x80))) + '"\\é\u2028😀'
    cmd = RemotingCommand(1, {text: text}, remark=text, opaque=1)
    bean = {"code": 1, "extFields": {text: text}, "flag": 0, "language": "JAVA", "opaque": 1, "remark": text}
    assert cmd.encode_header() == RS.encode_sorted({**bean, "serializeTypeCurrentRPC": "JSON", "version": cmd.version})


# -- the JSON header reader -----------------------------------------------------------------------

_json_scalar = st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) | _text | st.floats(allow_nan=False)
_json_any = st.recursive(
    _json_scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=4)
)


@settings(max_examples=500, deadline=None)
@given(
    obj=st.dictionaries(_text, _json_any, max_size=8),
    compact=st.booleans(),
)
def test_the_header_reader_reads_what_json_reads(obj: dict[str, object], compact: bool) -> None:
    import json

    from dledger._ext import remoting as K

    data = json.dumps(obj, ensure_ascii=False, separators=(",", ":") if compact else None).encode()
    assert K.json_header(data) == RS.decode(data)


@pytest.mark.parametrize(
    "data",
    [
        b'{"code":01}',  # a leading zero: not JSON
        b'{"code":1',  # cut short
        b'{"code":1}x',  # bytes after it
        b'{"code":-}',
        b'{"a":"\xff"}',  # not UTF-8
        b'{"a":"x\ny"}',  # a raw control character
        b'{"a":1,}',
        b"",
    ],
)
def test_the_header_reader_refuses_what_json_refuses(data: bytes) -> None:
    from dledger._ext import remoting as K

    with pytest.raises(RemotingCommandException):
        RS.decode(data)
    with pytest.raises(RemotingCommandException):
        K.json_header(data)  # the same refusal: json.loads was asked


def test_the_header_reader_reads_a_long_number_and_escapes_as_json() -> None:
    from dledger._ext import remoting as K

    for data in (b'{"a":1234567890123456789012}', b'{"a":"x\\"y\\u00e9"}', b'{"a":1.5e3}', b'{0:"a"}', b'{"a": 1}'):
        assert K.json_header(data) == RS.decode(data), data
