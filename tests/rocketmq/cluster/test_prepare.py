"""A member's checks of what a producer sends, without a group: the batch path (array operations
over the packed buffers) refuses and accepts the same properties strings as the one-message path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger.config import DLedgerConfig
from dledger.rocketmq.encode import IllegalMessage
from dledger.rocketmq.service import MessageService
from dledger.rocketmq.wire import SendRequest

GOOD = b"UNIQ_KEY\x01abc\x02TAGS\x01t"
CASES = {
    "pairs": (GOOD, True),
    "empty": (b"", True),
    "empty value": (b"a\x01", True),
    "no name": (b"\x01x", False),
    "no separator": (b"abc", False),
    "empty name after a pair": (b"a\x01b\x02\x01c", False),
    "not UTF-8": (b"a\x01\xff", False),
    "over 32767 bytes": (b"a\x01" + b"v" * 32767, False),
}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MessageService]:
    root: Path = tmp_path_factory.mktemp("prep")
    cfg = DLedgerConfig(
        self_id="n0",
        peers="n0-127.0.0.1:1",
        store_base_dir=str(root),
        message_store=True,
        mapped_file_size_for_entry_data=1 << 22,
        default_topic_queue_nums=4,
    )
    svc = MessageService(cfg, "127.0.0.1:1")
    try:
        yield svc
    finally:
        svc.store.close()


def accepted(svc: MessageService, props: list[bytes], topic: str = "T", queue_id: int = 0) -> bool:
    req, bodies, packed = SendRequest.from_wire(SendRequest(topic, queue_id, [b"x"] * len(props), props).to_wire())
    try:
        svc._prepare(req, bodies, packed)
    except IllegalMessage:
        return False
    return True


@pytest.mark.parametrize("name", sorted(CASES))
def test_both_paths_judge_properties_alike(service: MessageService, name: str):
    props, ok = CASES[name]
    assert accepted(service, [props]) is ok  # one message: Message objects
    assert accepted(service, [GOOD, props]) is ok  # a batch: array operations
    assert accepted(service, [props, GOOD, GOOD]) is ok


def test_a_string_may_not_start_inside_a_character(service: MessageService):
    # Valid UTF-8 as a whole, but the second string starts with a continuation byte.
    assert not accepted(service, [GOOD + b"\xc3", b"\xa9\x01x"])


def test_queue_and_topic_checks_hold_for_batches(service: MessageService):
    assert not accepted(service, [GOOD, GOOD], queue_id=4)
    assert not accepted(service, [GOOD, GOOD], topic="T" * 128)
    assert not accepted(service, [GOOD, GOOD], topic="RMQ_SYS_CONSUMER_OFFSET")
    assert accepted(service, [GOOD, GOOD], queue_id=3)
