"""FileTermStore: DLedger's ``currterm`` Java-properties file (``currTerm``, ``voteLeader``).

This is the one I/O module of the consensus package; the node layer constructs it and hands
it to ``RaftNode`` as its ``TermStore``. DLedger writes the file with IOUtils.string2File
(write ``.tmp``, back up the old file as ``.bak``, rename). We write a temp file, fsync it,
rename it over the old one and fsync the directory, so a crash leaves either the old or the
new pair, never a torn one. An empty ``voteLeader`` means no vote, as in DLedger.
"""

from __future__ import annotations

import os
from pathlib import Path

FILE_NAME = "currterm"


def _parse_properties(text: str) -> dict[str, str]:
    """The subset of java.util.Properties that DLedger's files use: ``key=value`` lines,
    ``#``/``!`` comments, optional spaces around ``=`` or ``:``."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        for i, ch in enumerate(line):
            if ch in "=:":
                out[line[:i].strip()] = line[i + 1 :].strip()
                break
        else:
            out[line] = ""
    return out


class FileTermStore:
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / FILE_NAME

    def load(self) -> tuple[int, str | None]:
        try:
            text = self.path.read_text(encoding="latin-1")
        except FileNotFoundError:
            return 0, None
        props = _parse_properties(text)
        term = int(props.get("currTerm", "0") or "0")
        vote = props.get("voteLeader") or None
        return term, vote

    def save(self, term: int, vote_for: str | None) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        body = f"currTerm={term}\nvoteLeader={vote_for or ''}\n".encode("latin-1")
        tmp = self.path.with_name(FILE_NAME + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        # The rename is durable only once the directory entry is.
        dfd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
