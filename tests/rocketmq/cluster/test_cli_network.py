"""`dledger mq ... --peers P` against a running message-store group started from a TOML file with
RocketMQ's option names, and `dledger cluster --message-store`."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError
from dledger.rocketmq.broker.message_service import message_store_config
from dledger.rocketmq.client.producer import Producer
from dledger.rocketmq.store.dledger_commitlog import dledger_config_for
from dledger.rocketmq.store.message import Message
from dledger.testing import FAST, TestCluster, consecutive_free_ports

pytestmark = pytest.mark.timeout(240)

TOML = """
enableDLegerCommitLog = true
maxMessageSize = 65536
flushDiskType = "SYNC_FLUSH"
mappedFileSizeCommitLog = 4194304
defaultTopicQueueNums = 4
"""


def test_toml_takes_rocketmqs_names(tmp_path: Path):
    f = tmp_path / "member.toml"
    f.write_text(TOML)
    cfg = DLedgerConfig.from_toml(f)
    assert cfg.message_store and cfg.max_message_size == 65536 and cfg.flush_disk_type == "SYNC_FLUSH"
    assert cfg.mapped_file_size_commit_log == 4194304 and cfg.default_topic_queue_nums == 4
    # ...and the member's MessageStoreConfig (as DLedgerCommitLog builds it) follows them.
    mcfg = message_store_config(cfg.replace(store_base_dir=str(tmp_path), file_reserved_hours=49), "10.1.2.3:30911")
    assert mcfg.enable_dledger_commit_log and mcfg.sync_flush and mcfg.max_message_size == 65536
    assert mcfg.mapped_file_size_commit_log == 4194304 and mcfg.file_reserved_time == 48
    assert mcfg.store_host == "10.1.2.3:30911" and mcfg.store_path_root_dir == str(tmp_path)
    with pytest.raises(DLedgerError):
        message_store_config(cfg.replace(store_type="MEMORY"), "10.1.2.3:30911")
    # The member's own store options reach the DLedger store the message store opens.
    dcfg = dledger_config_for(message_store_config(cfg.replace(data_cache_window=0, flush_file_interval=7), "h:1"))
    assert dcfg.data_cache_window == 0 and dcfg.flush_file_interval == 7 and dcfg.sync
    assert dcfg.mapped_file_size_for_entry_data == 4194304 and dcfg.max_body_size == 65536


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    root = tmp_path_factory.mktemp("mqcli")
    (root / "member.toml").write_text(TOML)
    with TestCluster(root, member_dirs=True, extra=[*FAST, "--config", str(root / "member.toml")]).running() as c:
        yield c


def mq(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dledger.cli", "mq", *args], input=stdin, capture_output=True, text=True, timeout=120
    )


def consume(peers: str, topic: str, queue: int, *more: str) -> subprocess.CompletedProcess[str]:
    return mq("consume", "--peers", peers, "--topic", topic, "--queue", str(queue), *more)


# What the client logs (at INFO: `mq -v`) before sending a request again after an answer that
# leaves its fate unknown (its own timeout, a lost connection, WAIT_QUORUM_ACK_TIMEOUT,
# TERM_CHANGED): the first copy may be in the queue too.
RESENT = "sending it again"


def stored_at_least_once(
    out: subprocess.CompletedProcess[str], bodies: list[str], peers: str, topic: str, queue: int
) -> list[tuple[int, str, str]]:
    """Check a `mq -v produce` of ``bodies`` (the lines it was to send, those refused left out) to
    one queue against what the queue holds, and return the queue's (offset, msg id, body) from 0.

    Sends are at-least-once, as Java's producer's: a request sent again after its answer was
    lost can be stored twice (at a load of 11 on two cores, lines acknowledged at offsets 0, 1
    and 3: a leader's quorum wait ran out, or its answer came after the client's timeout, and
    the client sent the line again). So: every line is
    acknowledged, in order, and its acknowledged offset holds that line (msg id and body);
    anything else in the queue is an earlier copy of a line acknowledged later (the same msg
    id and body, a record of its own), and there is one only when the client said it sent a
    request again."""
    lines = [x.split("\t") for x in out.stdout.splitlines()]
    assert [x[0] for x in lines] == ["SEND_OK"] * len(bodies) and {x[2] for x in lines} == {str(queue)}, out
    acked = [(int(x[3]), x[1], body) for x, body in zip(lines, bodies, strict=True)]
    offsets = [a[0] for a in acked]
    assert offsets == sorted(set(offsets)), out  # in the order of the lines
    got = consume(peers, topic, queue, "--offset", "0", "--count", str(offsets[-1] + 1), "--wait", "5")
    rows = [r.split("\t") for r in got.stdout.splitlines()]
    stored = [(int(r[0]), r[2], r[-1]) for r in rows]
    assert [s[0] for s in stored] == list(range(offsets[-1] + 1)), got
    assert f"status FOUND next {offsets[-1] + 1}" in got.stderr
    assert len({r[1] for r in rows}) == len(rows), rows  # each its own record in the commit log
    for a in acked:
        assert stored[a[0]] == a, (stored, out.stdout)
    copies = [s for s in stored if s[0] not in offsets]
    if copies:
        assert RESENT in out.stderr, (stored, out.stderr)
        for o, msg_id, body in copies:
            assert any((msg_id, body) == (m, b) and o < a for a, m, b in acked), (stored, out.stdout)
    return stored


def test_produce_consume_query_stats_over_the_network(cluster: TestCluster):
    peers = cluster.peers
    out = mq(
        "-v",
        "produce",
        "--peers",
        peers,
        "--topic",
        "CliTopic",
        "--queue",
        "1",
        "--keys",
        "cli-key",
        "--stdin",
        stdin="alpha\nbeta\ngamma\n",
    )
    # Offsets 0, 1, 2, unless a line was sent again.
    assert out.returncode == 0, out.stderr
    stored = stored_at_least_once(out, ["alpha", "beta", "gamma"], peers, "CliTopic", 1)
    bodies = [s[2] for s in stored]
    msg_ids = [x.split("\t")[1] for x in out.stdout.splitlines()]
    # Round-robin when no queue is named: one batch (of --batch lines) per queue.
    out = mq("produce", "--peers", peers, "--topic", "CliTopic", "--batch", "1", "--stdin", stdin="a\nb\nc\nd\n")
    assert out.returncode == 0, out.stderr
    rr = [x.split("\t") for x in out.stdout.splitlines()]
    assert sorted(x[2] for x in rr) == ["0", "1", "2", "3"]
    # Queue 1's last offset, for the stats below (copies of a line come before it).
    last_in_1 = next(int(x[3]) for x in rr if x[2] == "1")
    assert last_in_1 >= len(stored)

    # With the consumer group's offset, committed as it goes, from a follower.
    out = consume(peers, "CliTopic", 1, "--count", "2", "--wait", "5", "--commit", "--consumer-group", "cg")
    assert [r.split("\t")[-1] for r in out.stdout.splitlines()] == bodies[:2]
    out = consume(
        peers, "CliTopic", 1, "--count", "5", "--consumer-group", "cg", "--read-from", "follower", "--wait", "1"
    )
    # From the committed offset, or from the start on a follower that has not applied the commit yet.
    assert out.stdout.splitlines()[0].split("\t")[-1] in (bodies[2], bodies[0])

    out = mq("query", "--peers", peers, "--topic", "CliTopic", "--key", "cli-key")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.split()) == len(stored)  # every copy carries the key
    out = mq("query", "--peers", peers, "--topic", "CliTopic", "--key", msg_ids[1])
    assert len(out.stdout.split()) == sum(s[1] == msg_ids[1] for s in stored)

    out = mq("stats", "--peers", peers)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("LEADER") == 1 and out.stdout.count("FOLLOWER") == 2
    assert f"CliTopic\t1\t0\t{last_in_1 + 1}" in out.stdout  # alpha, beta, gamma and one round-robin line

    # Refused: one line on standard error, exit status 1, nothing printed for it.
    out = mq("produce", "--peers", peers, "--topic", "CliTopic", "--queue", "9", "--data", "x")
    assert out.returncode == 1 and out.stdout == "" and "MESSAGE_ILLEGAL" in out.stderr
    out = mq("produce", "--topic", "CliTopic", "--data", "x")
    assert out.returncode == 1 and "DIR or --peers" in out.stderr
    # Delayed: in its queue no sooner than its level's time (level 1: 1 s), through the leader.
    out = mq(
        "produce", "--peers", peers, "--topic", "CliLater", "--queue", "2", "--delay-level", "1", "--data", "later"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\t")[:3] == ["SEND_OK", out.stdout.split("\t")[1], "2"]
    out = consume(peers, "CliLater", 2, "--offset", "0", "--wait", "20")
    assert out.returncode == 0 and out.stdout.split("\t")[-1].strip() == "later", out
    # Several delayed lines: each goes alone (no batch carries a delay level).
    out = mq(
        "-v",
        "produce",
        "--peers",
        peers,
        "--topic",
        "CliLater",
        "--queue",
        "3",
        "--delay-level",
        "1",
        "--stdin",
        stdin="d1\nd2\nd3\n",
    )
    offsets = [int(r.split("\t")[3]) for r in out.stdout.splitlines()]  # in the schedule queue
    assert out.returncode == 0 and len(offsets) == 3, out
    # One after another (with a gap only where a line was sent again).
    assert offsets == list(range(offsets[0], offsets[0] + 3)) or (offsets == sorted(offsets) and RESENT in out.stderr)
    # A line the group refuses is named by its number; the lines around it are sent; CRLF
    # input gives the same bodies as LF.
    big = "x" * 70_000  # over the members' max_message_size (64 KiB)
    out = mq(
        "-v",
        "produce",
        "--peers",
        peers,
        "--topic",
        "CliLines",
        "--queue",
        "0",
        "--stdin",
        stdin=f"one\r\n\r\ntwo\n{big}\nthree\n",
    )
    said = [x for x in out.stderr.splitlines() if not x.startswith("INFO ")]  # (-v's log lines)
    assert out.returncode == 1 and len(said) == 1, out.stderr
    assert said[0].startswith("dledger mq produce: line 4: MESSAGE_ILLEGAL"), out.stderr
    # Offsets 0, 1, 2 unless a line was sent again; the refused line nowhere.
    stored_at_least_once(out, ["one", "two", "three"], peers, "CliLines", 0)
    out = mq("produce", "/nonexistent-dir-for-test", "--topic", "T", "--delay-level", "1", "--data", "x")
    assert out.returncode == 1 and "--delay-level needs --peers" in out.stderr
    # A queue the topics do not have is an error, not a wait for messages that cannot come.
    out = consume(peers, "CliTopic", 9, "--offset", "0", "--wait", "30")
    assert out.returncode == 1 and out.stdout == "" and "queue id 9" in out.stderr


def test_local_cluster_with_message_store(tmp_path: Path):
    port = consecutive_free_ports(3)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dledger.cli",
            "cluster",
            "--nodes",
            "3",
            "--message-store",
            "--exit-after-writes",
            "--dir",
            str(tmp_path),
            "--base-port",
            str(port),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("sent SEND_OK") == 3
    assert "consumed offset 2: hello from dledger cluster, message 2" in out.stdout
    for k in range(3):
        assert (tmp_path / f"n{k}" / f"dledger-n{k}" / "data").is_dir()
    # A majority had the messages when the group stopped (the third may not have heard of the commit).
    assert sum((tmp_path / f"n{k}" / "consumequeue" / "TopicTest" / "0").is_dir() for k in range(3)) >= 2


def test_server_flags_spell_the_switch_both_ways():
    from dledger.cli import build_parser

    parse = build_parser().parse_args
    assert parse(["server", "--message-store"]).cfg_message_store is True
    assert parse(["server", "--enableDLegerCommitLog", "true"]).cfg_message_store is True
    assert parse(["server", "--message-store", "false"]).cfg_message_store is False
    args = parse(["server", "--max-message-size", "1024", "--flush-disk-type", "SYNC_FLUSH"])
    assert args.cfg_max_message_size == 1024 and args.cfg_flush_disk_type == "SYNC_FLUSH"


def test_mq_commands_reach_a_group_that_wants_a_shared_secret(tmp_path: Path):
    # `dledger mq ... --peers` had no --secret-file (nor TLS options): the error told the user
    # to give one, and the option was then refused as unknown.
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    extra = [*FAST, "--message-store", "--secret-file", str(secret)]
    c = TestCluster(tmp_path, size=1, member_dirs=True, proxied=False, extra=extra)
    try:
        c.start_all()  # (its status calls have no secret: the produce below waits for the leader)
        with_secret = ["--peers", c.peers, "--secret-file", str(secret), "--timeout", "20"]
        out = mq("produce", *with_secret, "--topic", "Sec", "--queue", "0", "--data", "hidden")
        assert out.returncode == 0 and out.stdout.startswith("SEND_OK"), out.stderr
        out = mq("consume", *with_secret, "--topic", "Sec", "--queue", "0", "--offset", "0")
        assert out.returncode == 0 and out.stdout.split("\t")[-1].strip() == "hidden", out
        assert mq("stats", *with_secret).returncode == 0
        out = mq("stats", "--peers", c.peers, "--timeout", "2")
        assert out.returncode == 1 and "--secret-file" in out.stderr
    finally:
        c.close()


def test_produce_sends_lines_as_they_come_and_a_retry_topic_line_by_line(cluster: TestCluster) -> None:
    # A producer fed by `tail -f`: each line acknowledged while the input is still open.
    proc = subprocess.Popen(
        [sys.executable, "-m", "dledger.cli", "mq", "produce", "--peers", cluster.peers, "--topic", "Live", "--stdin"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("first\n")
        proc.stdin.flush()
        # Before, nothing came until the end of the input.
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "no line acknowledged while the input stays open"
        assert proc.stdout.readline().startswith("SEND_OK\t")
        proc.stdin.close()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # MessageBatch carries no retry topic: a batch of lines to one would be refused whole.
    res = mq("produce", "--peers", cluster.peers, "--topic", "%RETRY%readers", "--stdin", stdin="a\nb\n")
    assert res.returncode == 0, res.stderr
    assert [line.split("\t")[0] for line in res.stdout.splitlines()] == ["SEND_OK", "SEND_OK"]


def test_message_store_members_sharing_a_store_dir_are_refused_in_a_line(tmp_path: Path):
    # The README's first try at a service: every member given the same --store-dir.
    group = TestCluster(tmp_path, size=2, extra=[*FAST, "--message-store"], proxied=False)
    try:
        group.start("n0")
        with pytest.raises(RuntimeError, match="did not start"):
            group.start("n1")
        err = group.logs["n1"].read_text().splitlines()
        assert err == [
            f"dledger: UNEXPECTED_ARGUMENT(411): {tmp_path} is open in another process (a member with the same "
            "--store-dir?): a message-store member needs a store directory of its own"
        ]
        assert group.procs["n1"].wait(10) == 2
    finally:
        group.close()


def test_a_send_whose_quorum_wait_runs_out_is_sent_again_and_said(tmp_path: Path) -> None:
    # Both followers are stopped (SIGSTOP) until the client has said it sends a line again, so
    # the leader appends the first line and its quorum wait runs out every time: it answers
    # WAIT_QUORUM_ACK_TIMEOUT, the client sends the line again, and once the followers resume,
    # the queue holds the first copies too. A heartbeat leak of 10 s keeps the leader leading
    # while its followers are stopped (else it steps down and the first copy may be dropped).
    extra = [*FAST, "--message-store", "--max-wait-ack-time-ms", "200", "--max-heart-beat-leak", "100"]
    with TestCluster(tmp_path, member_dirs=True, proxied=False, extra=extra).running() as c:
        # Followers are stopped only under a settled leader that takes puts: stopped while an
        # election is still under way (a member's campaign at a higher term that the status poll
        # did not show), the leader steps down to a candidate that can never win, and no send ever
        # reaches a quorum wait (CI, stop 51); a leader just elected may also still be committing
        # its tail (LEADER_NOT_READY).
        with Producer(c.peers, timeout=20) as p:
            assert p.send(Message("Warm", b"w"), queue_id=0).status == "SEND_OK"

        def settled() -> bool:
            st = list(c.status().values())
            return len({(s["term"], s["leader"]) for s in st}) == 1 and st[0]["leader"] is not None

        c.wait_for(settled, what="every member under one leader in one term")
        leader = c.wait_leader()
        followers = [c.procs[m].pid for m in c.ids if m != leader]
        for pid in followers:
            os.kill(pid, signal.SIGSTOP)
        proc = subprocess.Popen(
            [sys.executable, "-m", "dledger.cli", "mq", "-v", "produce", "--peers", c.peers, "--topic", "Again",
             "--queue", "1", "--timeout", "60", "--stdin"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert proc.stdin is not None and proc.stderr is not None
            proc.stdin.write("alpha\nbeta\ngamma\n")
            proc.stdin.close()
            said: list[str] = []
            # Until a send is sent again for its quorum wait: other requests (the route query)
            # may time out and be sent again first on a loaded machine.
            while not any(RESENT in line and "WAIT_QUORUM_ACK_TIMEOUT from" in line for line in said):
                ready, _, _ = select.select([proc.stderr], [], [], 60)
                assert ready, f"the client never said it sends a line again: {said}"
                line = proc.stderr.readline()
                assert line, f"the client ended without sending a line again: {said}"
                said.append(line)
        finally:
            for pid in followers:
                os.kill(pid, signal.SIGCONT)
        try:
            assert proc.stdout is not None
            stdout, rest = proc.stdout.read(), proc.stderr.read()  # a few lines each: no pipe fills
            proc.wait(90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, "".join(said) + rest)
        assert out.returncode == 0, out.stderr
        assert "WAIT_QUORUM_ACK_TIMEOUT from" in out.stderr
        stored = stored_at_least_once(out, ["alpha", "beta", "gamma"], c.peers, "Again", 1)
        assert len(stored) > 3, (stored, out.stderr)  # the first copy, appended before the wait ran out
