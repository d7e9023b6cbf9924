"""RocketMQ's LanguageCode: who wrote a command (a byte in ROCKETMQ headers, a name in JSON)."""

from __future__ import annotations

from enum import IntEnum


class LanguageCode(IntEnum):
    """The ``language`` of a RemotingCommand."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12


__all__ = ["LanguageCode"]
