"""What the library's read-only sequences (AppendResults, PackedBodies, SendResults) share."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar, overload

T = TypeVar("T")


def checked_index(i: int, n: int, what: str) -> int:
    """``i`` as an index into ``n`` items, negative counting from the end, as list indexing
    does; IndexError ("<what> index out of range") otherwise."""
    if i < 0:
        i += n
    if not 0 <= i < n:
        raise IndexError(f"{what} index out of range")
    return i


class LazySequence(Sequence[T]):
    """A read-only sequence that makes item i when asked for (``_item``): indexing as a list
    does (negative from the end, slices as lists, IndexError "<_what> index out of range")."""

    __slots__ = ()

    _what = "item"

    def __len__(self) -> int:
        raise NotImplementedError

    def _item(self, i: int) -> T:
        """Item ``i``, ``0 <= i < len(self)``."""
        raise NotImplementedError

    @overload
    def __getitem__(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: slice) -> list[T]: ...

    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            return [self._item(k) for k in range(*i.indices(len(self)))]
        return self._item(checked_index(i, len(self), self._what))

    def __iter__(self) -> Iterator[T]:
        for k in range(len(self)):
            yield self._item(k)
