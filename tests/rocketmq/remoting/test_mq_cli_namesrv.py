"""`dledger mq produce|consume --namesrv` speak remoting: the route from the name server, the
sends and pulls to the broker it names (a real name server and member on 127.0.0.1)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger.rocketmq.store.message import decode_message_id
from tests.rocketmq.remoting.processes import Brokers, cluster


@pytest.fixture(scope="module")
def ns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Brokers, Path]]:
    work = tmp_path_factory.mktemp("cli")
    with cluster(work, 1, ["--default-topic-queue-nums", "4"]) as (addr, brokers):
        yield addr, brokers, work


def _mq(work: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dledger.cli", "mq", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=work,
    )


def test_produce_then_consume_through_the_name_server(ns: tuple[str, Brokers, Path]) -> None:
    addr, _brokers, work = ns
    lines = [f"line {k}" for k in range(10)]
    p = _mq(
        work,
        "produce",
        "--namesrv",
        addr,
        "--topic",
        "CliTopic",
        "--tags",
        "TA",
        "--keys",
        "k1",
        "--stdin",
        "--batch",
        "3",
        stdin="\n".join(lines) + "\n",
    )
    assert p.returncode == 0, p.stderr
    out = [row.split("\t") for row in p.stdout.splitlines()]
    assert len(out) == 10 and all(r[0] == "SEND_OK" for r in out)
    # Batches of 3 to the queues in turn; offsets follow each other within a queue.
    assert [r[2] for r in out] == ["0", "0", "0", "1", "1", "1", "2", "2", "2", "3"]
    assert [r[3] for r in out[:3]] == ["0", "1", "2"]
    seen = []
    for q in range(4):
        c = _mq(work, "consume", "--namesrv", addr, "--topic", "CliTopic", "--queue", str(q), "--offset", "0")
        assert c.returncode == 0, c.stderr
        rows = [r.split("\t") for r in c.stdout.splitlines()]
        assert all(r[3] == "TA" and r[4] == "k1" for r in rows)
        # The UNIQ_KEY the producer printed is the message's id.
        assert {r[2] for r in rows} <= {r[1] for r in out}
        seen += [r[5] for r in rows]
    assert sorted(seen) == sorted(lines)
    # Committed offsets: the group's next read starts past what was printed.
    c = _mq(work, "consume", "--namesrv", addr, "--topic", "CliTopic", "--queue", "0", "--commit")
    assert c.returncode == 0 and len(c.stdout.splitlines()) == 3, c.stderr
    c = _mq(work, "consume", "--namesrv", addr, "--topic", "CliTopic", "--queue", "0")
    assert c.stdout == "" and "next 3" in c.stderr


def test_a_topic_nobody_knows_and_a_wrong_address_are_said_plainly(ns: tuple[str, Brokers, Path]) -> None:
    addr, _brokers, work = ns
    c = _mq(work, "consume", "--namesrv", addr, "--topic", "NoSuchTopic", "--queue", "0")
    assert c.returncode == 1 and "NoSuchTopic" in c.stderr
    c = _mq(work, "produce", "--namesrv", addr, "--peers", "n0-127.0.0.1:1", "--topic", "T", "--data", "x")
    assert c.returncode == 1 and "one of them" in c.stderr


def test_query_by_key_and_by_id_through_the_name_server(ns: tuple[str, Brokers, Path]) -> None:
    """``query --namesrv``: QUERY_MESSAGE to the topic's masters gives the commit-log offsets
    the sends' offset message ids name; ``--id`` fetches one message by VIEW_MESSAGE_BY_ID."""
    addr, _brokers, work = ns
    lines = ["alpha", "beta", "gamma"]
    p = _mq(
        work,
        "produce",
        "--namesrv",
        addr,
        "--topic",
        "QTopic",
        "--keys",
        "qk",
        "--stdin",
        stdin="\n".join(lines) + "\n",
    )
    assert p.returncode == 0, p.stderr
    sent = [row.split("\t") for row in p.stdout.splitlines()]
    phys = {decode_message_id(r[4])[1] for r in sent}
    q = _mq(work, "query", "--namesrv", addr, "--topic", "QTopic", "--key", "qk")
    assert q.returncode == 0, q.stderr
    assert {int(x) for x in q.stdout.split()} == phys and len(q.stdout.split()) == 3
    q = _mq(work, "query", "--namesrv", addr, "--topic", "QTopic", "--key", "qk", "--max", "2")
    assert len(q.stdout.split()) == 2
    q = _mq(work, "query", "--namesrv", addr, "--topic", "QTopic", "--key", "nobody")
    assert q.returncode == 0 and q.stdout == ""
    v = _mq(work, "query", "--namesrv", addr, "--id", sent[1][4])
    assert v.returncode == 0, v.stderr
    (row,) = [r.split("\t") for r in v.stdout.splitlines()]
    assert (row[2], row[4], row[5]) == (sent[1][1], "qk", "beta")
    bad = _mq(work, "query", "--topic", "QTopic", "--id", sent[1][4], str(work))
    assert bad.returncode == 1 and "--id" in bad.stderr
    bad = _mq(work, "query", "--namesrv", addr, "--id", "zz")
    assert bad.returncode == 1 and "zz" in bad.stderr
