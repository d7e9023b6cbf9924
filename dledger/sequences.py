"""What the library's read-only sequences (AppendResults, PackedBodies) share."""

from __future__ import annotations


def checked_index(i: int, n: int, what: str) -> int:
    """``i`` as an index into ``n`` items, negative counting from the end, as list indexing
    does; IndexError ("<what> index out of range") otherwise."""
    if i < 0:
        i += n
    if not 0 <= i < n:
        raise IndexError(f"{what} index out of range")
    return i
