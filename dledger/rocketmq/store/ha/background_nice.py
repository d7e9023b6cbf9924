"""backgroundThreadNice (ours; RocketMQ has no such key): the store's background threads run
at this niceness, so that on a broker short of cores the HA threads (the slave's read-and-append,
the master's push) and the put path get a core first. docs/ha.md, "The HA threads first".

Linux keeps a niceness per thread (``setpriority(PRIO_PROCESS, tid)``); raising it needs no
privilege, lowering it back needs CAP_SYS_NICE, so a thread once made nicer stays so. Threads
these start later (dispatch's read-ahead, the queue files' prefault) inherit it.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger(__name__)

# Not on the path from a put to the slave's append: dispatch (reput), the commit log's flush
# and the store's housekeeping (cleanup, offsets' flush). Not the pre-writer: the HA append
# waits on it (the inode lock of its zero write, and its mark), so a nicer pre-writer delays
# the append it should make way for (docs/ha.md).
BACKGROUND_THREAD_NAMES = frozenset({"rocketmq-reput", "rocketmq-commitlog-flush", "rocketmq-store-services"})


def nice_background_threads(nice: int) -> None:
    """Set the live background threads of this process to ``nice`` (0: leave them)."""
    if nice <= 0:
        return
    for thread in threading.enumerate():
        tid = thread.native_id
        if thread.name in BACKGROUND_THREAD_NAMES and tid is not None:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
                log.info("backgroundThreadNice: %s (tid %d) at niceness %d", thread.name, tid, nice)
            except OSError:  # the thread ended meanwhile, or a lower niceness than it has
                log.warning("could not set %s (%d) to niceness %d", thread.name, tid, nice, exc_info=True)
