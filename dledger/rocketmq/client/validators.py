"""The producer's checks of a message before it is sent (RocketMQ's client Validators.checkMessage,
and what the member would refuse in one message of a batch), so that a send the member would
refuse fails at once, whole, without a request."""

from __future__ import annotations

from collections.abc import Sequence

from dledger.rocketmq.store.encode import MAX_PROPERTIES_BYTES
from dledger.rocketmq.store.message import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    STR_BODY_PROBLEM,
    IllegalMessage,
    Message,
    MessageConst,
    MessageSysFlag,
    batch_keys,
    java_int_problem,
    java_ranges_ok,
    keys_problem,
    properties_problem,
)

# MixAll.RETRY_GROUP_TOPIC_PREFIX: a consumer group's retry topic.
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"


class IllegalMessageError(ValueError):
    """A message the producer refuses to send, as MESSAGE_ILLEGAL (the reason in its message):
    properties that would not read back as they are, an empty body, a number Java cannot hold."""


def nth(i: int | None) -> str:
    """The prefix naming message ``i`` of a batch in a reason (None: a message alone)."""
    return "" if i is None else f"message {i}: "


def check_message(msg: Message, i: int | None = None) -> None:
    """Raises IllegalMessageError for what the producer refuses in a message (properties aside): an empty
    body (Validators.checkMessage), numbers Java cannot hold. ``i``: its place in a batch."""
    if len(msg.body) and type(msg.body) is not str and java_ranges_ok(msg):
        return  # the usual case, without a loop a message
    if isinstance(msg.body, str):
        raise IllegalMessageError(f"{nth(i)}{STR_BODY_PROBLEM}")
    if not len(msg.body):
        raise IllegalMessageError(f"{nth(i)}the message body length is zero")
    why = numbers_problem(msg.flag, msg.sys_flag, msg.born_timestamp) or java_int_problem(
        ("reconsume_times", msg.reconsume_times, 32)
    )
    if why is not None:
        raise IllegalMessageError(f"{nth(i)}{why}")


def columns_problem(
    base: dict[str, str],
    keys: Sequence[str | Sequence[str] | None] | None,
    n: int,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
) -> tuple[str | None, list[str | None] | None]:
    """Why ``send_bodies``' shared fields or keys would be refused (None: they would not), and
    each body's KEYS value (a KEYS in ``base`` for those without their own)."""
    why = numbers_problem(flag, sys_flag, born_timestamp) or properties_problem(base)
    if why is not None or keys is None:
        return why, None
    try:
        each = batch_keys(keys, n)
    except IllegalMessage as exc:
        return str(exc), None
    shared = base.pop(PROPERTY_KEYS, None)
    if shared:  # one KEYS a message (``base`` loses it): its own, else the shared one
        each = [k or shared for k in each]
    return keys_problem(each), each


def numbers_problem(flag: int, sys_flag: int, born_timestamp: int) -> str | None:
    """Why a number sent in a request has no room in its record field. Sent, it would fail to
    encode or come back as SERVICE_NOT_AVAILABLE (a malformed request), which tells the caller
    to retry."""
    return java_int_problem(("flag", flag, 32), ("sys_flag", sys_flag, 32), ("born_timestamp", born_timestamp, 64))


def properties_too_long(joint: str, head_len: int, keys: Sequence[str | None] | None) -> str | None:
    """Why a message of ``send_bodies`` would have properties over the limit (None: none
    would): the member refuses it, and the batch's other pieces would go."""
    fixed = len(joint.encode("utf-8", "surrogatepass")) + head_len + 4
    sizes = [len(k.encode("utf-8", "surrogatepass")) + 6 if k else 0 for k in keys] if keys is not None else [0]
    i = max(range(len(sizes)), key=sizes.__getitem__)
    if fixed + sizes[i] <= MAX_PROPERTIES_BYTES:
        return None
    which = nth(i if keys is not None and len(keys) > 1 else None)
    return f"{which}properties are {fixed + sizes[i]} bytes, over the limit of {MAX_PROPERTIES_BYTES}"


def unbatchable(topic: str, msgs: Sequence[Message]) -> str | None:
    """Why MessageBatch.generateFromList refuses to make a batch of ``msgs`` (their topic
    ``topic``), in its words; and why a member's putMessages would (a transaction message)."""
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "Retry Group is not supported for batching"
    wait = _wait_store_msg_ok(msgs[0].properties)
    for m in msgs:
        if m.delay_level > 0 or _delayed(m.properties):
            return "TimeDelayLevel is not supported for batching"
        if m.sys_flag & MessageSysFlag.TRANSACTION_ROLLBACK_TYPE not in (
            MessageSysFlag.TRANSACTION_NOT_TYPE,
            MessageSysFlag.TRANSACTION_COMMIT_TYPE,
        ):
            return "a batch cannot hold transaction messages (prepared or rolled back)"
        if _wait_store_msg_ok(m.properties) != wait:
            return "The waitStoreMsgOK of the messages in one batch should the same"
    return None


def _delayed(properties: dict[str, str]) -> bool:
    """Message.getDelayTimeLevel() > 0 (a DELAY that is not a number: no batch either, as Java's
    parseInt fails it)."""
    text = properties.get(PROPERTY_DELAY)
    if not text:
        return False
    try:
        return int(text) > 0
    except ValueError:
        return True


def _wait_store_msg_ok(properties: dict[str, str]) -> bool:
    """Message.isWaitStoreMsgOK(): true unless WAIT says otherwise (Boolean.parseBoolean)."""
    text = properties.get(MessageConst.PROPERTY_WAIT_STORE_MSG_OK)
    return text is None or text.lower() == "true"
