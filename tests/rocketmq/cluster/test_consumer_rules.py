"""What a consumer relies on beyond the happy path, on a 3-member message-store group: an
iterator never skips messages, a break commits what was consumed, a consumer sees its own
commits, closed clients say so at once, and what no queue is gets a clear refusal."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from small_group import running_small_group

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.rocketmq.client.consumer import AsyncConsumer, Consumer, PullResult
from dledger.rocketmq.client.producer import AsyncProducer, Producer
from dledger.rocketmq.store.message import Message
from dledger.testing import TestCluster

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    with running_small_group(tmp_path_factory.mktemp("mq-consumer")) as c:
        yield c


class _Watched(AsyncConsumer):
    """The real consumer; its pulls' offsets are noted, so the test knows where it reads."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list[int] = []

    async def pull(self, queue_id: int, offset: int, max_count: int = 32, wait: float = 0.0) -> PullResult:
        self.asked.append(offset)
        return await super().pull(queue_id, offset, max_count, wait)


def test_an_iterator_past_the_end_of_an_empty_queue_reads_what_arrives(cluster: TestCluster) -> None:
    # Its offset was committed past the end (say, before retention emptied the queue): the
    # member answers where the queue starts, and the iterator must go there, not wait at 5 and
    # then jump to the end once messages arrive, past them.
    topic = "ConsumeEmpty"

    async def main() -> list[bytes]:
        con = _Watched(cluster.peers, "readers", topic)
        async with con, AsyncProducer(cluster.peers) as p:
            await con.commit(2, 5)
            got: list[bytes] = []

            async def read() -> None:
                async for m in con.messages(2, wait=1.0, idle_timeout=20):
                    got.append(m.body)
                    if len(got) == 3:
                        return

            reading = asyncio.ensure_future(read())
            for _ in range(400):
                if 0 in con.asked:
                    break
                await asyncio.sleep(0.05)
            assert 0 in con.asked, con.asked
            assert (await p.send_bodies(topic, [b"m0", b"m1", b"m2"], queue_id=2)).ok
            await asyncio.wait_for(reading, 30)
            return got

    assert asyncio.run(main()) == [b"m0", b"m1", b"m2"]


def test_a_break_commits_what_was_consumed_and_the_message_it_left_comes_again(cluster: TestCluster) -> None:
    topic = "ConsumeBreak"
    with Producer(cluster.peers) as p, Consumer(cluster.peers, "breakers", topic) as con:
        assert p.send_bodies(topic, [b"%d" % i for i in range(10)], queue_id=1).ok
        for m in con.messages(1, idle_timeout=5):
            if m.queue_offset == 4:
                break
        assert con.committed(1) == 4
        again = next(iter(con.messages(1, idle_timeout=5)))
        assert again.queue_offset == 4 and again.body == b"4"


def test_a_follower_reader_sees_its_own_commit_at_once(cluster: TestCluster) -> None:
    with Consumer(cluster.peers, "followers", "ConsumeFollow", read_from="follower") as con:
        con.commit(0, 7)
        assert con.committed(0) == 7


def test_closed_async_clients_raise_at_once(cluster: TestCluster) -> None:
    async def main() -> None:
        p = AsyncProducer(cluster.peers, timeout=60)
        await p.close()
        with pytest.raises(DLedgerError, match="closed"):
            await p.send(Message("Closed", b"x"), queue_id=0)
        for read_from in ("leader", "follower"):
            con = AsyncConsumer(cluster.peers, "g", "Closed", read_from=read_from, timeout=60)
            await con.close()
            with pytest.raises(DLedgerError, match="closed"):
                await con.pull(0, 0)
            with pytest.raises(DLedgerError, match="closed"):
                await con.commit(0, 1)

    asyncio.run(asyncio.wait_for(main(), 20))  # a retry to the timeout would take minutes


def test_what_names_no_queue_is_refused(cluster: TestCluster) -> None:
    for topic in ("x" * 128, "a b", "../../evil", "ü"):
        with pytest.raises(DLedgerError) as err:
            Consumer(cluster.peers, "g", topic)
        assert err.value.code == ResponseCode.UNEXPECTED_ARGUMENT
    for group in ("", "g" * 256, "tab\tx", 'a"b', "grp\nnl"):  # Validators.checkGroup
        with pytest.raises(DLedgerError, match="group") as err:
            Consumer(cluster.peers, group, "Named")
        assert err.value.code == ResponseCode.UNEXPECTED_ARGUMENT
    with Consumer(cluster.peers, "g", "Named") as con:
        with pytest.raises(DLedgerError, match="queue id 999"):
            con.commit(999, 5)
        assert con.committed(999) == -1
        for wait in (math.nan, math.inf, -1.0):
            with pytest.raises(DLedgerError) as err:
                con.pull(0, 0, wait=wait)
            assert err.value.code == ResponseCode.UNEXPECTED_ARGUMENT
    # The delay service's own progress: moved by a client, delayed messages would never come.
    with Consumer(cluster.peers, "RMQ_SYS_DELAY_OFFSET", "SCHEDULE_TOPIC_XXXX") as sys_con:
        with pytest.raises(DLedgerError, match="reserved"):
            sys_con.commit(0, 1000)


def test_a_queue_id_that_is_an_integer_in_all_but_type_is_taken(cluster: TestCluster) -> None:
    topic = "QueueIds"
    with Producer(cluster.peers, selector=lambda _t, _n, _m: np.int64(3)) as p:
        assert p.send(Message(topic, b"a"), queue_id=np.int64(2)).queue_id == 2
        assert p.send(Message(topic, b"b")).queue_id == 3
        assert p.send_bodies(topic, [b"c"], queue_id=np.int32(1)).ok
        # Not a queue: refused as such, not SERVICE_NOT_AVAILABLE (which says: retry).
        assert p.send(Message(topic, b"d"), queue_id=2**70).status == "MESSAGE_ILLEGAL"


def test_an_async_client_says_so_when_used_in_a_second_event_loop(cluster: TestCluster) -> None:
    p = AsyncProducer(cluster.peers)
    assert asyncio.run(p.send(Message("Loops", b"a"), queue_id=0)).ok
    with pytest.raises(RuntimeError, match="another event loop"):
        asyncio.run(p.send(Message("Loops", b"b"), queue_id=0))
    asyncio.run(p.close())  # no error: its connections went with the first loop
