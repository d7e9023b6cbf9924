"""StoreCheckpoint: the ``checkpoint`` file of a store root (three big-endian int64 timestamps).

physicMsgTimestamp (@0) is the store time of the last commit-log message known flushed,
logicsMsgTimestamp (@8) that of the last message dispatched to a consume queue that was
flushed, indexMsgTimestamp (@16) that of the last indexed message flushed. Abnormal recovery
starts from the commit-log file whose first message is older than their minimum.
The file is one page (4096 bytes), as RocketMQ maps it.
"""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

FILE_NAME = "checkpoint"
FILE_SIZE = 4096
_FMT = ">qqq"


class StoreCheckpoint:
    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self._lock = threading.Lock()
        self.existed = self.path.is_file()
        if self.existed:
            with open(self.path, "rb") as f:
                head = f.read(24)
            if len(head) == 24:
                self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = struct.unpack(
                    _FMT, head
                )

    @property
    def min_timestamp(self) -> int:
        """getMinTimestamp: the older of the commit-log and consume-queue times, less 3 s."""
        return max(min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000, 0)

    @property
    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp, self.index_msg_timestamp)

    def flush(self) -> None:
        """Write the three timestamps and fsync (the file keeps its page size)."""
        if self.readonly:
            return
        with self._lock:
            data = struct.pack(_FMT, self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size < FILE_SIZE:
                    os.ftruncate(fd, FILE_SIZE)
                os.pwrite(fd, data, 0)
                os.fsync(fd)
            finally:
                os.close(fd)

    def close(self) -> None:
        self.flush()

    def __repr__(self) -> str:
        return (
            f"StoreCheckpoint(physic={self.physic_msg_timestamp}, logics={self.logics_msg_timestamp}, "
            f"index={self.index_msg_timestamp})"
        )
