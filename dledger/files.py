"""Small file helpers the stores share."""

from __future__ import annotations

import os
from pathlib import Path

# Suffix of a file being created; one left behind is a crash's leftover and may be removed.
CREATING_SUFFIX = ".creating"


def create_sized(path: Path, size: int) -> int:
    """Create ``path`` of ``size`` bytes (sparse) whole or not at all, and return an open
    read-write descriptor. The file is sized under a dot-name and renamed into place, so a
    crash leaves no file or a whole one (a short file would make the directory unreadable).
    Raises FileExistsError if ``path`` exists."""
    if os.path.lexists(path):
        raise FileExistsError(path)
    tmp = path.with_name("." + path.name + CREATING_SUFFIX)
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, size)
        os.rename(tmp, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory, so that a file created, renamed or removed in it is durable: the
    file's own fsync does not write out its name (fsync(2))."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
