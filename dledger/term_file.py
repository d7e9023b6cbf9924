"""FileTermStore: DLedger's ``currterm`` Java-properties file (``currTerm``, ``voteLeader``).

The consensus package does no I/O, so this lives in the node layer: the node runtime
constructs it and hands it to ``RaftNode`` as its ``TermStore``. The file is read and
written with the store's properties helpers (the same as ``checkpoint``): a temp file,
fsync, rename, fsync of the directory, so a crash leaves either the old or the new pair,
never a torn one. An empty ``voteLeader`` means no vote, as in DLedger.
"""

from __future__ import annotations

import os
from pathlib import Path

from dledger.store.properties import read_properties, write_properties

FILE_NAME = "currterm"


class FileTermStore:
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / FILE_NAME

    def load(self) -> tuple[int, str | None]:
        props = read_properties(self.path)
        if props is None:
            return 0, None
        term = int(props.get("currTerm", "0") or "0")
        vote = props.get("voteLeader") or None
        return term, vote

    def save(self, term: int, vote_for: str | None) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_properties(self.path, {"currTerm": term, "voteLeader": vote_for}, dated=False)
