"""Which topic names are taken: RocketMQ's TopicValidator (what a broker takes from a
producer) and the store's own, looser rule (what a store takes from its caller).

The Java broker refuses a send whose topic ``validateTopic`` refuses, or that names a topic of
``NOT_ALLOWED_SEND_TOPIC_SET``; a member of a message-store group does the same. The Java
``DefaultMessageStore`` checks only a topic's length, and the fixtures' stores, written with it
directly, have a topic with a dot. The embedded store takes what it takes, except a name that
would not be one directory under ``consumequeue/`` (``../x``, ``a/b``, a NUL): that is
``store_topic_problem``.
"""

from __future__ import annotations

import re

TOPIC_MAX_LENGTH = 127
VALID_PATTERN_STR = "^[%|a-zA-Z0-9_-]+$"
_VALID = re.compile(r"[%|a-zA-Z0-9_\-]+")
NOT_ALLOWED_SEND_TOPIC_SET = frozenset(
    {
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)


def is_topic_or_group_illegal(name: str) -> bool:
    """isTopicOrGroupIllegal: a character outside ``[%|a-zA-Z0-9_-]``."""
    return name != "" and _VALID.fullmatch(name) is None


def validate_topic(topic: object) -> str | None:
    """validateTopic: None for a topic the broker takes, else its remark (why not)."""
    if not isinstance(topic, str) or not topic.strip():
        return "The specified topic is blank."
    if is_topic_or_group_illegal(topic):
        return f"The specified topic {topic!r} contains illegal characters, allowing only {VALID_PATTERN_STR}"
    if len(topic) > TOPIC_MAX_LENGTH:
        return f"The specified topic is longer than topic max length ({len(topic)} > {TOPIC_MAX_LENGTH})."
    return None


GROUP_MAX_LENGTH = 255  # Validators.CHARACTER_MAX_LENGTH


def validate_group(group: object) -> str | None:
    """Validators.checkGroup: None for a consumer group name RocketMQ's client takes, else why not."""
    if not isinstance(group, str) or not group.strip():
        return "the specified group is blank"
    if len(group) > GROUP_MAX_LENGTH:
        return f"the specified group is longer than group max length {GROUP_MAX_LENGTH}."
    if is_topic_or_group_illegal(group):
        return f"the specified group[{group!r}] contains illegal characters, allowing only {VALID_PATTERN_STR}"
    return None


def validate_send_topic(topic: object) -> str | None:
    """What SendMessageProcessor checks of a send's topic: validateTopic, then
    isNotAllowedSendTopic. None when a producer may send to it."""
    why = validate_topic(topic)
    if why is None and topic in NOT_ALLOWED_SEND_TOPIC_SET:
        why = f"Sending message to topic[{topic}] is forbidden."
    return why


def store_topic_problem(topic: str) -> str | None:
    """Why the store will not take ``topic`` as one directory name under ``consumequeue/``
    (None: it will). Its length and encoding are the caller's to check."""
    if topic in ("", ".", ".."):
        return f"topic {topic!r} is not a directory name"
    if "/" in topic or "\x00" in topic:
        return f"topic {topic!r} holds a '/' or a NUL: it would not be one directory under consumequeue/"
    return None
