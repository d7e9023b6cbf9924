"""AppendResults: the sequence append_batch returns, made lazily from (first index, positions)."""

from __future__ import annotations

import pytest

from dledger.client import AppendResult, AppendResults


def test_behaves_like_the_list_of_results() -> None:
    # Two requests of one batch: entries 10-12, then 20-21 (another client wrote between).
    rs = AppendResults([(10, [0, 48, 96]), (20, [500, 548])])
    expected = [
        AppendResult(10, 0),
        AppendResult(11, 48),
        AppendResult(12, 96),
        AppendResult(20, 500),
        AppendResult(21, 548),
    ]
    assert len(rs) == 5
    assert list(rs) == expected and rs == expected and rs == tuple(expected)
    assert [rs[k] for k in range(5)] == expected
    assert rs[-1] == AppendResult(21, 548) and rs[-5] == expected[0]
    assert rs[1:4] == expected[1:4] and rs[::-2] == expected[::-2]
    assert rs.indexes() == [10, 11, 12, 20, 21] and rs.positions() == [0, 48, 96, 500, 548]
    assert rs[3].index == 20 and rs[3].pos == 500
    assert rs != expected[:4] and rs != [*expected[:4], AppendResult(21, 549)]
    assert "len=5" in repr(rs)
    for bad in (5, -6):
        with pytest.raises(IndexError):
            rs[bad]
    with pytest.raises(TypeError):
        hash(rs)


def test_empty() -> None:
    rs = AppendResults()
    assert len(rs) == 0 and list(rs) == [] and rs == [] and rs.indexes() == []
