"""A small ext4 file system on a loop device, for the message store's full-disk tests (root and
``mkfs.ext4`` needed: ``small_fs`` skips without them), and a filler that takes its free space."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)


@contextmanager
def small_fs(tmp_path: Path, size: int = 96 << 20) -> Iterator[Path]:
    """A ``size``-byte ext4 file system mounted under ``tmp_path``; unmounted at the end."""
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4") or not shutil.which("mount"):
        pytest.skip("needs root and mkfs.ext4 to mount a small file system")
    image, mnt = tmp_path / "fs.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(size)
    _run(["mkfs.ext4", "-q", "-F", str(image)])
    try:
        _run(["mount", "-o", "loop", str(image), str(mnt)])
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot loop-mount here: {exc}")
    try:
        yield mnt
    finally:
        _run(["umount", str(mnt)])


# The child processes' filler, as source (they cannot import the tests).
FILL_DISK = r"""
import errno as _errno, os as _os

def fill_disk(path):
    # Every free block of the file system into one file: fallocate while it takes steps, then
    # small writes until ENOSPC (ext4 keeps a few blocks fallocate will not hand out).
    fd = _os.open(path, _os.O_WRONLY | _os.O_CREAT, 0o644)
    try:
        at, step = 0, 8 << 20
        while step >= 4096:
            try:
                _os.posix_fallocate(fd, at, step)
                at += step
            except OSError as exc:
                if exc.errno != _errno.ENOSPC:
                    raise
                step //= 2
        _os.lseek(fd, at, _os.SEEK_SET)
        while True:
            try:
                if _os.write(fd, b"f" * 4096) == 0:
                    break
            except OSError as exc:
                if exc.errno != _errno.ENOSPC:
                    raise
                break
        _os.fsync(fd)
    finally:
        _os.close(fd)
"""

# The child processes' message store config for a file system of ~100 MB (small files, a small
# index); keyword arguments override or add fields.
SMALL_STORE_CONFIG = r"""
from dledger.rocketmq.store.config import MessageStoreConfig as _MessageStoreConfig

def small_store_config(**fields):
    return _MessageStoreConfig(**{
        "mapped_file_size_commit_log": 1 << 20,
        "mapped_file_size_consume_queue": 3000 * 20,
        "max_hash_slot_num": 500,
        "max_index_num": 4000,
        "store_host": "127.0.0.1:10911",
        **fields,
    })
"""

__all__ = ["FILL_DISK", "SMALL_STORE_CONFIG", "small_fs"]
