"""glibc malloc settings for a member process (``dledger server`` applies them at start).

Every push and every client batch arrives as a frame of up to a few MiB, received into a buffer
of its own and copied out by msgpack, then freed. glibc serves blocks that big with a fresh
mmap, or from a heap top it trims back to the kernel once it is free, so each frame's buffers
page-fault in zero-filled pages again, which profiles of a follower showed as its largest
single cost. Fixing the mmap threshold above
the frames we expect and keeping up to ``TRIM_THRESHOLD`` of free heap lets those buffers reuse
memory that is already mapped. Library users' processes are left alone: only the server
entry point calls ``tune_for_server``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

# mallopt parameter numbers (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's own ceiling for its dynamic threshold
TRIM_THRESHOLD = 128 * 1024 * 1024


def tune_for_server() -> bool:
    """Apply the settings above; False where the C library is not glibc (nothing is changed)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018  # present in glibc only: mallopt's numbers are glibc's
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not ok:
        log.warning("mallopt refused the member's malloc settings; continuing with glibc's defaults")
    return ok
