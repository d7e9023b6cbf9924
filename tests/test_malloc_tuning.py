"""A member's malloc settings (dledger.malloc_tuning): frame-sized buffers, allocated and freed
over and over, reuse mapped memory instead of faulting fresh pages in each time."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A frame of 1-5 MiB is received into its own buffer, its payload copied out, the buffer freed,
# the payload kept a little while: what a follower does for every push.
SCRIPT = """
import random, resource, sys
from dledger.malloc_tuning import tune_for_server
if sys.argv[1] == "tuned" and not tune_for_server():
    print("untunable"); sys.exit(0)
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
rng = random.Random(1)
keep = []
start = faults()
for _ in range(200):
    frame = bytearray(rng.randrange(1 << 20, 5 << 20))
    keep.append(bytes(frame[16:]))
    del frame
    if len(keep) > 2:
        keep.pop(0)
print((faults() - start) / 200)
"""


def _faults_per_frame(mode: str) -> float | None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=120, check=True
    ).stdout.strip()
    return None if out == "untunable" else float(out)


def test_tuned_member_reuses_frame_buffers():
    tuned = _faults_per_frame("tuned")
    if tuned is None:
        pytest.skip("not glibc: the member runs with the C library's own malloc settings")
    untuned = _faults_per_frame("default")
    assert untuned is not None
    assert tuned * 4 < untuned, (tuned, untuned)
