"""Clients of a dledger group: ``AsyncClient`` (asyncio) and ``Client`` (blocking).

The client finds the leader (asking any member; a member that is not the leader answers
NOT_LEADER and names the leader when it knows it), follows those redirects, and retries with
exponential backoff on LEADER_PENDING_FULL, timeouts and lost connections until its deadline.

Retried appends are at-least-once: an append whose answer was lost (a timeout, a leader that
died after writing) may be in the log and is sent again. WAIT_QUORUM_ACK_TIMEOUT and
TERM_CHANGED mean the same "unknown" in DLedger, and are retried the same way.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
import random
import ssl as ssl_module
import threading
from collections.abc import Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import numpy as np

from dledger.api import (
    AppendRequest,
    AppendResponse,
    GetRequest,
    GetResponse,
    LeaderHint,
    MetadataResponse,
    TransferRequest,
    TransferResponse,
)
from dledger.codes import RequestCode, ResponseCode
from dledger.errors import DLedgerError
from dledger.net.transport import Response, RpcClient
from dledger.packed import SIZE_DTYPE
from dledger.peers import parse_peers
from dledger.sequences import LazySequence
from dledger.store.entry import Entry

log = logging.getLogger(__name__)

T = TypeVar("T")

# Retried answers after which the request may have been applied all the same: a write sent
# again after one of these can be in the log twice (the producer's msg id tells the copies).
_OUTCOME_UNKNOWN = frozenset(
    {
        ResponseCode.TIMEOUT,
        ResponseCode.NETWORK_ERROR,
        ResponseCode.WAIT_QUORUM_ACK_TIMEOUT,
        ResponseCode.TERM_CHANGED,
    }
)
# Answers worth asking again (elsewhere or later) rather than giving up on.
_RETRY = {
    ResponseCode.NOT_LEADER,
    ResponseCode.LEADER_PENDING_FULL,
    ResponseCode.LEADER_NOT_READY,
    ResponseCode.LEADER_TRANSFERRING,
    ResponseCode.TIMEOUT,
    ResponseCode.NETWORK_ERROR,
    ResponseCode.WAIT_QUORUM_ACK_TIMEOUT,
    ResponseCode.TERM_CHANGED,
    ResponseCode.DISK_FULL,
}


def _say_resend(code: int, answer: ResponseCode, target: str) -> None:
    """Log a request sent again after an answer that leaves its fate unknown, so that a write
    found twice in the log (at-least-once) can be traced to its resend."""
    if answer in _OUTCOME_UNKNOWN:
        what = getattr(code, "name", code)
        log.info("%s: %s from %s; sending it again (it may be applied twice)", what, answer.name, target)


# One append request carries at most this many bodies / bytes; larger batches are split
# and the pieces pipelined.
BATCH_MAX_BODIES = 4096
BATCH_MAX_BYTES = 4 * 1024 * 1024
PIPELINE_WINDOW = 8


class AppendResult(NamedTuple):
    """Where an appended body landed."""

    index: int  # type: ignore[assignment]  # shadows tuple.index(), which nobody needs here
    pos: int


class AppendResults(LazySequence[AppendResult]):
    """What ``append_batch`` returns: the ``AppendResult`` of each body, in order.

    A read-only sequence that makes each result when it is asked for: a batch of 10^6 small
    appends would otherwise spend more of the client's CPU making result objects than
    sending the bodies. ``indexes()`` and ``positions()`` give plain lists for bulk use. It
    compares equal to a list or tuple of the same results.
    """

    __slots__ = ("_firsts", "_positions", "_starts")

    def __init__(self, pieces: Sequence[tuple[int, list[int]]] = ()) -> None:
        # One piece per request: (index of its first entry, position of each entry).
        self._firsts = [first for first, _ in pieces]
        self._positions = [positions for _, positions in pieces]
        self._starts = list(itertools.accumulate((len(p) for p in self._positions), initial=0))

    def __len__(self) -> int:
        return self._starts[-1]

    _what = "append result"

    def _item(self, i: int) -> AppendResult:
        k = bisect.bisect_right(self._starts, i) - 1
        off = i - self._starts[k]
        return AppendResult(self._firsts[k] + off, self._positions[k][off])

    def __iter__(self) -> Iterator[AppendResult]:
        for first, positions in zip(self._firsts, self._positions, strict=True):
            for off, pos in enumerate(positions):
                yield AppendResult(first + off, pos)

    def indexes(self) -> list[int]:
        return [first + off for first, ps in zip(self._firsts, self._positions, strict=True) for off in range(len(ps))]

    def positions(self) -> list[int]:
        return [p for ps in self._positions for p in ps]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AppendResults | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking like a list: not hashable

    def __repr__(self) -> str:
        shown = ", ".join(repr(r) for r in itertools.islice(self, 3))
        return f"AppendResults([{shown}{', ...' if len(self) > 3 else ''}], len={len(self)})"


@dataclass(slots=True, frozen=True)
class NodeStatus:
    """One member's own view. A member that did not answer has ``role`` None and ``error``
    saying why (connection refused, timed out, TLS or shared-secret mismatch, or a group it
    does not serve, with the groups it does)."""

    id: str
    addr: str
    role: str | None
    term: int | None
    leader: str | None
    end_index: int | None
    committed_index: int | None
    pid: int | None
    group: str | None = None
    # The leader's answer only: how far each member's log is known to match the leader's.
    match_index: dict[str, int] | None = None
    error: str | None = None
    error_code: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "addr": self.addr,
            "role": self.role,
            "term": self.term,
            "leader": self.leader,
            "end_index": self.end_index,
            "committed_index": self.committed_index,
            "pid": self.pid,
            "group": self.group,
            "match_index": self.match_index,
            "error": self.error,
            "error_code": self.error_code,
        }


@dataclass(slots=True, frozen=True)
class TransferResult:
    """The outcome of a leadership transfer: who leads now, in which term, and what the
    leader said (for instance that the member already led)."""

    leader: str
    term: int | None
    message: str


def explain_failure(code: int, message: str, *, tls: bool = False) -> str:
    """A member's failure to answer, in the words an operator needs: refused, timed out, a
    TLS or shared-secret mismatch, or the transport's own message."""
    m = message.lower()
    if "connect call failed" in m or "connection refused" in m or "errno 111" in m:
        return "connection refused (nothing listens there: the member is down, or the host:port is wrong)"
    if "shared secret" in m or "handshake" in m:
        return f"shared-secret mismatch: {message} (give the group's secret with --secret-file)"
    if "ssl" in m or "certificate" in m or "tls" in m:
        return f"TLS failed: {message}"
    if tls and "cannot connect" in m:
        return f"TLS handshake failed ({message.strip()}): does the member use TLS?"
    if "connection to" in m and ("lost" in m or "closed" in m):
        if not tls:
            return "the member closed the connection without answering (does it expect TLS? give --tls-ca)"
        # A member that wants a client certificate closes right after the handshake, and
        # asyncio reports no TLS alert: the closed connection is all a client sees.
        return (
            "the member closed the connection without answering (does it require a client "
            "certificate, mutual TLS? give --tls-cert and --tls-key signed by its CA)"
        )
    if code == ResponseCode.TIMEOUT or "timed out" in m or "took too long" in m or "no response" in m:
        return f"timed out ({message})"
    try:
        name = ResponseCode(code).name
    except ValueError:
        name = f"code {code}"
    return f"{name}: {message}" if message and message != name else name


class AsyncClient:
    """``peers`` is DLedger's ``"n0-host:port;n1-host:port"`` or a dict of id to address."""

    def __init__(
        self,
        peers: str | dict[str, str],
        group: str | None = "default",
        *,
        secret: str | bytes | None = None,
        ssl: ssl_module.SSLContext | None = None,
        timeout: float = 10.0,
        request_timeout: float = 3.0,
        refused_grace: float | None = None,
    ) -> None:
        """``group`` None: the group the members serve, found on the first call (each member
        must serve exactly one, the same; see ``discover_group``). ``refused_grace``: a call
        gives up after this many seconds in which every member refused the connection (nothing
        listens at any address: the command line's case); None: retried until ``timeout``, as
        members that are restarting refuse for a while."""
        self.peers = parse_peers(peers, bare=True) if isinstance(peers, str) else dict(peers)
        if not self.peers:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "no peers")
        self.group = group
        self._tls = ssl is not None
        self.timeout = timeout
        self.request_timeout = request_timeout
        self.refused_grace = refused_grace
        self._refused_since: float | None = None
        self._rpc = RpcClient(secret=secret, ssl=ssl, timeout=request_timeout)
        self._leader: str | None = None
        self._order = list(self.peers)
        self._rng = random.Random()
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop its connections live on

    async def close(self) -> None:
        if self._loop is not None and self._loop is not asyncio.get_running_loop() and self._loop.is_closed():
            return  # its connections went with their loop
        await self._rpc.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def leader(self) -> str | None:
        """The member this client last found leading."""
        return self._leader

    async def discover_group(self) -> str:
        """The one group every answering member serves (asked without a group name, a member
        that serves exactly one group answers for it). Raises DLedgerError when members serve
        several or different groups, or when none answers (saying why for each)."""
        self.check_open()
        if self.group is not None:
            return self.group
        # Members that do not answer yet may be starting (a group restarting): asked again
        # until ``timeout``, as a call to a named group would be.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while True:
            answers = await asyncio.gather(*(self._metadata_of(a, None) for a in self.peers.values()))
            if any(r.code != ResponseCode.NETWORK_ERROR for r in answers) or loop.time() >= deadline:
                break
            if self.all_refuse_authentication() or self._refused_long_enough():
                break
            await asyncio.sleep(min(0.1, max(deadline - loop.time(), 0)))
        groups: dict[str, list[str]] = {}
        failures: list[str] = []
        for member, resp in zip(self.peers, answers, strict=True):
            if resp.code == ResponseCode.SUCCESS:
                try:
                    groups.setdefault(MetadataResponse.from_wire(resp.body).group, []).append(member)
                except DLedgerError as exc:
                    failures.append(f"{member} ({self.peers[member]}): unreadable metadata: {exc.message}")
            elif resp.code == ResponseCode.UNKNOWN_GROUP:
                raise DLedgerError(ResponseCode.UNKNOWN_GROUP, f"{member} ({self.peers[member]}): {resp.message}")
            else:
                failures.append(f"{member} ({self.peers[member]}): {self._explain(resp)}")
        if len(groups) == 1:
            self.group = next(iter(groups))
            return self.group
        if not groups:
            raise DLedgerError(ResponseCode.NETWORK_ERROR, f"{self._none_answered()}:" + _each_line(failures))
        shown = "; ".join(f"{g} on {', '.join(ms)}" for g, ms in sorted(groups.items()))
        raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"the members serve different groups ({shown}): name one")

    def check_open(self) -> None:
        """Raises at once after ``close`` (no retry until the timeout can help a closed client),
        and in another event loop than the first (its connections belong to that one)."""
        if self._rpc.closed:
            raise DLedgerError(ResponseCode.NETWORK_ERROR, "the client is closed")
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("this client was first used in another event loop: make one client per loop")

    def _refused_long_enough(self) -> bool:
        """Every member has refused the connection for ``refused_grace`` seconds."""
        if self.refused_grace is None or not all(self._rpc.refuses_connection(a) for a in self.peers.values()):
            self._refused_since = None
            return False
        now = asyncio.get_running_loop().time()
        if self._refused_since is None:
            self._refused_since = now
        return now - self._refused_since >= self.refused_grace

    def _none_answered(self) -> str:
        """Why no member answered, before each member's line."""
        if self.all_refuse_authentication():
            return "no member accepts this client's shared secret"
        if self._refused_long_enough():
            return "no member is listening (each refused the connection)"
        return f"no member answered within {self.timeout:g}s"

    def all_refuse_authentication(self) -> bool:
        """Every member refused our shared secret (or asked for one we lack): no retry helps,
        so calls give up at once rather than at their timeout."""
        return all(self._rpc.refuses_authentication(a) for a in self.peers.values())

    def _explain(self, resp: Response) -> str:
        return explain_failure(resp.code, resp.message or "", tls=self._tls)

    async def _metadata_of(self, addr: str, group: str | None) -> Response:
        try:
            return await self._rpc.call(
                addr, RequestCode.METADATA, {}, group=group, timeout=min(self.request_timeout, 2.0)
            )
        except DLedgerError as exc:
            return Response(exc.code, {}, exc.message)

    async def _leader_call(
        self, code: RequestCode, body: dict[str, Any], *, final: frozenset[int] = frozenset(), wait_answer: bool = False
    ) -> Response:
        """Call the leader, following redirects and retrying until ``timeout``. When no
        leader answers in time, the response's message gives each member's last answer.

        ``final``: codes that end the call when a member answers them (rather than when the
        transport reports them). ``wait_answer``: give each request twice the usual time, for
        requests the member answers only when something has happened (a transfer)."""
        self.check_open()
        if self.group is None:
            await self.discover_group()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        attempt = 0
        last: Response | None = None
        tried = 0
        answers: dict[str, tuple[int, str]] = {}
        while True:
            target = self._leader if self._leader is not None else self._order[tried % len(self._order)]
            tried += 1
            left = deadline - loop.time()
            full = 2 * self.request_timeout if wait_answer else self.request_timeout
            wait = min(full, left)
            try:
                resp = await self._rpc.call(self.peers[target], code, body, group=self.group, timeout=max(wait, 0.05))
            except DLedgerError as exc:
                resp = Response(exc.code, {}, exc.message)
            else:
                if resp.code in final:
                    return resp
            if resp.code == ResponseCode.SUCCESS:
                self._leader = target
                return resp
            try:
                code_enum = ResponseCode(resp.code)
            except ValueError:
                code_enum = ResponseCode.UNKNOWN
            if code_enum not in _RETRY:
                if code_enum == ResponseCode.UNKNOWN_GROUP:
                    return Response(resp.code, resp.body, f"{target} ({self.peers[target]}): {resp.message}")
                return resp
            # A wait our own deadline cut short says nothing of a member that has answered.
            if not (wait < full and code_enum == ResponseCode.TIMEOUT and target in answers):
                last = resp
                answers[target] = (resp.code, self._explain(resp))
            hinted = LeaderHint.from_wire(resp.body).leader
            if code_enum == ResponseCode.NOT_LEADER and hinted in self.peers and hinted != target:
                self._leader = hinted  # follow the redirect at once
                continue
            if code_enum in (ResponseCode.NOT_LEADER, ResponseCode.NETWORK_ERROR, ResponseCode.TIMEOUT):
                self._leader = None  # ask around
            attempt += 1
            if loop.time() >= deadline or self.all_refuse_authentication() or self._refused_long_enough():
                return self._gave_up(last or resp, answers)
            _say_resend(code, code_enum, target)
            if tried % len(self._order) == 0 or code_enum not in (ResponseCode.NOT_LEADER, ResponseCode.NETWORK_ERROR):
                # Short and capped: during an election the answer changes within ~100 ms, and a
                # client asleep when the new leader is ready adds its nap to the failover. A
                # leader that says it is busy (pending full, disk full) gets longer pauses.
                cap = 0.2 if code_enum in (ResponseCode.LEADER_PENDING_FULL, ResponseCode.DISK_FULL) else 0.05
                delay = min(0.005 * (2 ** min(attempt, 6)), cap) * (0.5 + self._rng.random())
                await asyncio.sleep(min(delay, max(deadline - loop.time(), 0)))

    def _gave_up(self, last: Response, answers: dict[str, tuple[int, str]]) -> Response:
        """The last answer; when it says no leader could be reached, each member's last answer."""
        silent = (ResponseCode.NETWORK_ERROR, ResponseCode.TIMEOUT)
        if last.code not in (*silent, ResponseCode.NOT_LEADER):
            return last
        said = _each_line(f"{m} ({a}): {answers[m][1] if m in answers else 'not asked'}" for m, a in self.peers.items())
        none = all(m in answers and answers[m][0] in silent for m in self.peers)
        what = self._none_answered() if none else f"no leader found within {self.timeout:g}s"
        return Response(last.code, last.body, f"{what}:{said}")

    async def append(self, body: bytes) -> AppendResult:
        resp = (await self._leader_call(RequestCode.APPEND, AppendRequest([bytes(body)]).to_wire())).check()
        r = AppendResponse.from_wire(resp.body)
        return AppendResult(r.index, r.pos)

    async def append_batch(self, bodies: Sequence[bytes]) -> AppendResults:
        """Append many bodies, in order; returns the index and position of each.

        Large batches go as several requests, up to PIPELINE_WINDOW in flight at once. Requests
        on one connection are applied in the order sent, so the entries keep the order given.
        """
        chunks = _chunks(bodies)
        if not chunks:
            return AppendResults()
        if len(chunks) == 1:
            return AppendResults([await self._append_chunk(*chunks[0])])
        if self._leader is None:
            # Find the leader with the first piece so the rest pipeline to the right member.
            first = await self._append_chunk(*chunks[0])
            rest = chunks[1:]
            results = [first]
        else:
            rest = chunks
            results = []
        sem = asyncio.Semaphore(PIPELINE_WINDOW)

        async def one(chunk: list[bytes], sizes: np.ndarray) -> tuple[int, list[int]]:
            async with sem:
                return await self._append_chunk(chunk, sizes)

        results.extend(await asyncio.gather(*(one(*c) for c in rest)))
        return AppendResults(results)

    async def _append_chunk(self, chunk: list[bytes], sizes: np.ndarray) -> tuple[int, list[int]]:
        """(index of the first entry, position of each) of one append request."""
        # Several go packed (dledger.packed): joined once here, stored from the received buffer there.
        request = AppendRequest(chunk, sizes).to_wire()
        r = AppendResponse.from_wire((await self._leader_call(RequestCode.APPEND, request)).check().body)
        last = r.index
        positions = r.positions or [r.pos]
        if len(positions) != len(chunk):
            raise DLedgerError(
                ResponseCode.UNEXPECTED_ARGUMENT,
                f"the leader answered {len(positions)} positions for {len(chunk)} bodies",
            )
        return last - len(chunk) + 1, positions

    async def get(self, index: int) -> Entry:
        """The committed entry ``index``, read linearizably from the leader."""
        entries = await self.get_range(index, 1)
        if not entries:
            raise DLedgerError(ResponseCode.INDEX_OUT_OF_RANGE, f"no entry {index}")
        return entries[0]

    async def get_range(self, index: int, count: int) -> list[Entry]:
        resp = (await self._leader_call(RequestCode.GET, GetRequest(index, count).to_wire())).check()
        return GetResponse.from_wire(resp.body).entries

    async def metadata(self) -> dict[str, Any]:
        """The leader's view (role, term, end and committed index...), as the member sent it
        (``dledger.api.MetadataResponse``'s wire form)."""
        body = (await self._leader_call(RequestCode.METADATA, {})).check().body
        MetadataResponse.from_wire(body)  # refuses an answer it cannot read, naming the key
        return body

    async def status(self) -> list[NodeStatus]:
        """Every member's own view; a member that does not answer has ``role`` None."""
        self.check_open()

        async def one(member: str, addr: str) -> NodeStatus:
            resp = await self._metadata_of(addr, self.group)
            if resp.code != ResponseCode.SUCCESS:
                return NodeStatus(
                    member, addr, None, None, None, None, None, None, error=self._explain(resp), error_code=resp.code
                )
            try:
                m = MetadataResponse.from_wire(resp.body)
            except DLedgerError as exc:
                return NodeStatus(
                    member,
                    addr,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    error=f"unreadable metadata: {exc.message}",
                    error_code=exc.code,
                )
            return NodeStatus(
                member,
                addr,
                m.role,
                m.term,
                m.leader,
                m.end_index,
                m.committed_index,
                m.pid,
                m.group,
                dict(m.match_index) if m.match_index is not None else None,
            )

        return list(await asyncio.gather(*(one(m, a) for m, a in self.peers.items())))

    async def transfer_leader(self, to: str) -> str:
        """Hand leadership to member ``to``; returns the new leader's id."""
        return (await self.transfer(to)).leader

    async def transfer(self, to: str) -> TransferResult:
        """Hand leadership to member ``to`` (DLedger's leadership transfer). Succeeds at once
        when ``to`` already leads. On failure the DLedgerError says why (the transferee fell
        behind, lost the election it stood in, did not answer...)."""
        if to not in self.peers:
            raise DLedgerError(ResponseCode.UNKNOWN_MEMBER, f"no member {to!r} among {', '.join(self.peers)}")
        # The leader's own TIMEOUT means the transferee did not answer it: asking again would
        # only repeat that, and hide the reason.
        resp = (
            await self._leader_call(
                RequestCode.LEADERSHIP_TRANSFER,
                TransferRequest(to).to_wire(),
                final=frozenset({ResponseCode.TIMEOUT}),
                wait_answer=True,
            )
        ).check()
        r = TransferResponse.from_wire(resp.body)
        leader = r.leader or to
        self._leader = leader if leader in self.peers else None
        return TransferResult(leader, r.term, resp.message or "")


class Blocking:
    """Runs an asyncio twin on an event loop of its own, in the calling thread, for the length
    of each call (no helper thread: a hand-off between threads costs each call a scheduling
    delay); calls from several threads take turns. ``Client`` and the message clients."""

    # What to use inside a running loop, for the error that says so.
    twin = "its Async twin"

    def __init__(self) -> None:
        self._refuse_inside_a_loop()
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()

    def _refuse_inside_a_loop(self) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        raise RuntimeError(f"{type(self).__name__} blocks; inside a running asyncio loop use {self.twin}")

    def _start(self, coro: Coroutine[Any, Any, T]) -> T:
        """The async twin, made on this loop; the loop closed if that fails (a bad argument)."""
        try:
            return self._run(coro)
        except BaseException:
            self._loop.close()
            raise

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            self._refuse_inside_a_loop()
        except RuntimeError:
            coro.close()
            raise
        with self._lock:
            if self._loop.is_closed():
                coro.close()
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"{type(self).__name__} is closed")
            return self._loop.run_until_complete(coro)

    def _close_loop(self, coro: Coroutine[Any, Any, None]) -> None:
        if self._loop.is_closed():
            coro.close()
            return
        self._run(coro)
        with self._lock:
            self._loop.close()


class Client(Blocking):
    """The blocking twin of ``AsyncClient``: runs one on an event loop of its own, in the
    calling thread, for the length of each call (no helper thread: a hand-off between
    threads costs each call a scheduling delay).

    Safe to share between threads: their calls take turns. For many calls at once, use
    ``AsyncClient`` (or ``append_batch``, which pipelines). Not for use inside a running
    asyncio loop, which it would block: use ``AsyncClient`` there.
    """

    twin = "AsyncClient"

    def __init__(self, peers: str | dict[str, str], group: str | None = "default", **kwargs: Any) -> None:
        super().__init__()
        self._async = self._start(_make(peers, group, kwargs))

    @property
    def leader(self) -> str | None:
        return self._async.leader

    def append(self, body: bytes) -> AppendResult:
        return self._run(self._async.append(body))

    def append_batch(self, bodies: Sequence[bytes]) -> AppendResults:
        return self._run(self._async.append_batch(bodies))

    def get(self, index: int) -> Entry:
        return self._run(self._async.get(index))

    def get_range(self, index: int, count: int) -> list[Entry]:
        return self._run(self._async.get_range(index, count))

    def metadata(self) -> dict[str, Any]:
        return self._run(self._async.metadata())

    def status(self) -> list[NodeStatus]:
        return self._run(self._async.status())

    def transfer_leader(self, to: str) -> str:
        return self._run(self._async.transfer_leader(to))

    def transfer(self, to: str) -> TransferResult:
        return self._run(self._async.transfer(to))

    def discover_group(self) -> str:
        return self._run(self._async.discover_group())

    @property
    def group(self) -> str | None:
        return self._async.group

    def close(self) -> None:
        self._close_loop(self._async.close())

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _each_line(parts: Iterable[str]) -> str:
    """One line per member, indented under the line that says what failed."""
    return "".join(f"\n  {p}" for p in parts)


def _chunks(bodies: Sequence[bytes]) -> list[tuple[list[bytes], np.ndarray]]:
    """Split ``bodies`` into requests of at most BATCH_MAX_BODIES / BATCH_MAX_BYTES: each a
    list of bytes and its sizes (the ``sizes`` of a packed request, dledger.packed).

    Per-body work is done by C loops (map, fromiter): at the rates a batching client sends, a
    Python loop over the bodies is a visible share of its CPU.
    """
    if not isinstance(bodies, list) or set(map(type, bodies)) - {bytes}:
        bodies = [bytes(b) for b in bodies]
    sizes = np.fromiter(map(len, bodies), dtype=SIZE_DTYPE, count=len(bodies))
    if len(bodies) <= BATCH_MAX_BODIES and int(sizes.sum(dtype=np.int64)) <= BATCH_MAX_BYTES:
        return [(bodies, sizes)] if bodies else []
    chunks: list[tuple[list[bytes], np.ndarray]] = []
    start = 0
    size = 0
    for k, n in enumerate(sizes.tolist()):
        if k > start and (k - start >= BATCH_MAX_BODIES or size + n > BATCH_MAX_BYTES):
            chunks.append((bodies[start:k], sizes[start:k]))
            start, size = k, 0
        size += n
    chunks.append((bodies[start:], sizes[start:]))
    return chunks


async def _make(peers: str | dict[str, str], group: str | None, kwargs: dict[str, Any]) -> AsyncClient:
    return AsyncClient(peers, group, **kwargs)
