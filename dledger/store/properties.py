"""Java ``.properties`` files as DLedger writes them (``checkpoint``, ``currterm``).

Written the way a crash cannot tear: a temporary file, fsync, rename, fsync of the directory.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from dledger.files import fsync_dir


def read_properties(path: str | os.PathLike[str]) -> dict[str, str] | None:
    """The key/value pairs of a properties file, or None if it does not exist."""
    try:
        text = Path(path).read_text(encoding="latin-1")
    except FileNotFoundError:
        return None
    return parse_properties(text)


def parse_properties(text: str) -> dict[str, str]:
    """java.util.Properties' lines: ``key=value`` or ``key: value`` (the key ends at the first of
    the two), ``#``/``!`` comments, surrounding blanks dropped. Escapes and continuation lines,
    which neither DLedger's files nor broker.conf use, are not read."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            out[line] = ""
        else:
            out[line[:cut].strip()] = line[cut + 1 :].strip()
    return out


def write_properties(path: str | os.PathLike[str], values: dict[str, object], *, dated: bool = True) -> None:
    """Atomically replace ``path`` with the given keys (``None`` values are written empty).

    ``dated`` starts the file with the date comment java.util.Properties.store writes."""
    target = Path(path)
    lines = [f"#{time.strftime('%a %b %d %H:%M:%S %Z %Y')}"] if dated else []
    lines += [f"{key}={'' if value is None else value}" for key, value in values.items()]
    tmp = target.with_name(target.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            os.write(fd, ("\n".join(lines) + "\n").encode("latin-1"))
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk: no half-written file left beside the target
        raise
    os.replace(tmp, target)
    fsync_dir(target.parent)
