"""The consensus layer: DLedger's election and replication rules as sans-IO objects.

See ``node.RaftNode`` for the entry points and ``effects`` for what they return.
"""

from dledger.raft.effects import AppendDone, Flush, Output, ReadDone, RoleChanged, Send, TransferDone, is_early
from dledger.raft.member_state import MemberState, MemoryTermStore, Role, TermStore
from dledger.raft.messages import (
    AppendEntryRequest,
    AppendEntryResponse,
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    Message,
    MetadataRequest,
    MetadataResponse,
    ParseResult,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    VoteRequest,
    VoteResponse,
    VoteResult,
    message_from_wire,
)
from dledger.raft.node import MultiRaft, RaftNode, error_response
from dledger.raft.timings import RaftTimings

__all__ = [
    "AppendDone",
    "AppendEntryRequest",
    "AppendEntryResponse",
    "Flush",
    "HeartBeatRequest",
    "HeartBeatResponse",
    "LeadershipTransferRequest",
    "LeadershipTransferResponse",
    "MemberState",
    "MemoryTermStore",
    "Message",
    "MetadataRequest",
    "MetadataResponse",
    "MultiRaft",
    "Output",
    "ParseResult",
    "PushEntryRequest",
    "PushEntryResponse",
    "PushType",
    "RaftNode",
    "RaftTimings",
    "ReadDone",
    "Role",
    "RoleChanged",
    "Send",
    "TermStore",
    "TransferDone",
    "VoteRequest",
    "VoteResponse",
    "VoteResult",
    "error_response",
    "is_early",
    "message_from_wire",
]
