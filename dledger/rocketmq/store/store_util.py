"""RocketMQ's StoreUtil: the machine's physical memory, which accessMessageInMemoryMaxRatio is a
percentage of."""

from __future__ import annotations

import os


def _total_physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        # Java falls back to 24 GiB when the OS bean does not say.
        return 24 * 1024 * 1024 * 1024


TOTAL_PHYSICAL_MEMORY_SIZE = _total_physical_memory()

__all__ = ["TOTAL_PHYSICAL_MEMORY_SIZE"]
