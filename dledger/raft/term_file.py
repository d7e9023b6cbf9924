"""Moved to ``dledger.term_file`` (the node layer); this name stays until the server imports it there."""

from dledger.term_file import FILE_NAME, FileTermStore

__all__ = ["FILE_NAME", "FileTermStore"]
