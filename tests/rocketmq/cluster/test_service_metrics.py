"""The message service's series on ``--metrics-port``: a real member process scraped over
HTTP, as Prometheus would, while a producer sends and a consumer pulls and commits."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger.rocketmq.client.consumer import Consumer
from dledger.rocketmq.client.producer import Producer
from dledger.rocketmq.store.message import Message
from dledger.testing import FAST, MetricSamples, TestCluster, free_ports
from dledger.testing import scrape_metrics as scrape

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def member(tmp_path: Path) -> Iterator[tuple[TestCluster, int]]:
    (port,) = free_ports(1)
    member_args = ["--message-store", "--default-topic-queue-nums", "2", "--max-message-size", "4096"]
    c = TestCluster(tmp_path, size=1, proxied=False, extra=[*FAST, *member_args, "--metrics-port", str(port)])
    with c.running():
        yield c, port


def test_sends_pulls_and_consumer_lag_show_on_the_metrics_endpoint(member: tuple[TestCluster, int]) -> None:
    c, port = member
    me = {"group": c.group, "member": "n0"}

    def v(s: MetricSamples, name: str, **labels: str) -> float:
        return s[(name, frozenset({**me, **labels}.items()))]

    before, types = scrape(port)
    assert v(before, "dledger_mq_writable") == 1
    assert v(before, "dledger_mq_held_pulls") == 0
    assert types["dledger_mq_send_latency_seconds"] == "histogram"
    assert types["dledger_mq_put_messages"] == "counter"
    with Producer(c.peers) as p, Consumer(c.peers, "readers", "Orders") as con:
        assert p.send_bodies("Orders", [b"x" * 100] * 7, queue_id=0).ok
        assert p.send(Message("Orders", b"y" * 50), queue_id=1).ok
        assert p.send(Message("Audit", b"z"), queue_id=0).ok
        assert p.send(Message("Orders", b"big" * 2000), queue_id=0).status == "MESSAGE_ILLEGAL"
        got = con.pull(0, 0, 32)
        assert len(got.messages) == 7
        con.commit(0, 3)  # 4 of queue 0 left to consume
        con.commit(1, 0)  # and 1 of queue 1

        def lag_seen() -> bool:
            s, _ = scrape(port)
            return (
                s.get(
                    (
                        "dledger_mq_consumer_lag_messages",
                        frozenset({**me, "consumer_group": "readers", "topic": "Orders"}.items()),
                    )
                )
                == 5
            )

        deadline = time.monotonic() + 20
        while not lag_seen() and time.monotonic() < deadline:
            time.sleep(0.05)
        after, _ = scrape(port)
    assert v(after, "dledger_mq_consumer_lag_messages", consumer_group="readers", topic="Orders") == 5
    assert v(after, "dledger_mq_put_messages_total", topic="Orders") == 8
    assert v(after, "dledger_mq_put_messages_total", topic="Audit") == 1
    assert v(after, "dledger_mq_put_body_bytes_total", topic="Orders") == 750
    assert v(after, "dledger_mq_send_refused_total", status="MESSAGE_ILLEGAL") == 1
    assert v(after, "dledger_mq_pulled_messages_total", topic="Orders") == 7
    assert v(after, "dledger_mq_send_latency_seconds_count") == 3  # the stored ones
    assert v(after, "dledger_mq_dispatch_behind_bytes") == 0
    assert v(after, "dledger_mq_held_pulls") == 0
    assert v(after, "dledger_mq_commitlog_committed_offset") > v(before, "dledger_mq_commitlog_committed_offset")
    # The member's own series are still there beside them.
    assert v(after, "dledger_role", role="LEADER") == 1


def test_held_pulls_count_long_polls_and_the_delay_service_is_no_consumer(member: tuple[TestCluster, int]) -> None:
    c, port = member
    me = {"group": c.group, "member": "n0"}

    def held() -> float:
        return scrape(port)[0][("dledger_mq_held_pulls", frozenset(me.items()))]

    with Producer(c.peers) as p, Consumer(c.peers, "pollers", "Held") as con:
        assert p.send(Message("Held", b"later", delay_level=3), queue_id=0).ok  # 10 s: pending
        polling = threading.Thread(target=con.pull, args=(1, 0, 32, 3.0))
        polling.start()
        deadline = time.monotonic() + 10
        while held() != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert held() == 1
        polling.join()
        assert held() == 0
        lag = [labels for name, labels in scrape(port)[0] if name == "dledger_mq_consumer_lag_messages"]
        assert not any(dict(labels)["consumer_group"].startswith("RMQ_SYS_") for labels in lag), lag
