"""D20 (derivations.paths): the KV cache as a state, rolling windows, packed documents. The
record holds; a buffer of ``left`` slots, a top-left aligned decode query, a decode step that
drops the window, a packed visibility that ignores the documents and a cache counted without
its values each make the claim they break fail; the exports validate their arguments."""

from __future__ import annotations

import pytest

from derivations import paths
from derivations._record import Status
from derivations.structure import window_visible


def _failed(rec):
    return [c.name for c in rec.claims if c.status is Status.FAILED]


def test_record_holds_and_is_registered(derived):
    from derivations import module

    rec = derived("D20")
    assert rec.id == "D20" and rec.status is Status.VERIFIED and not _failed(rec)
    assert module("D20") is paths
    for name in rec.exports:
        assert hasattr(paths, name), name


@pytest.mark.parametrize(
    ("override", "claim"),
    [
        ({"slots": lambda left: left}, paths.ROLLING),  # one slot short
        ({"slots": lambda left: left + 2}, paths.ROLLING),  # one slot too many
        (  # a single decode query aligned top-left: t' = 0
            {
                "visible": lambda t, s, queries, keys, left, right: window_visible(
                    t, s, keys, keys, left, right
                )
            },
            paths.ROLLING,
        ),
        (  # the window dropped on a single-token step: every cached key
            {"visible": lambda t, s, queries, keys, left, right: s <= t + keys - queries},
            paths.ROLLING,
        ),
        (  # the documents ignored: every real row visible
            {"packed": lambda i, j, cu, causal: j < cu[-1] and (not causal or j <= i)},
            paths.PACKED,
        ),
        ({"cache_numbers": lambda t, d, d_v: t * d}, paths.CACHE_SIZE),  # keys only
    ],
)
def test_wrong_statements_fail(override, claim):
    assert _failed(paths.derive(**override)) == [claim]


def test_exports():
    assert paths.rolling_slots(2) == 3
    assert paths.rolling_positions(0, 3) == {0}
    assert paths.rolling_positions(7, 3) == {5, 6, 7} == paths.decode_visible(7, 2)
    assert paths.wraparound_lengths(2) == (4, 8)
    assert paths.document_of(2, [0, 2, 2, 5]) == 2
    assert paths.document_of(5, [0, 2, 2, 5]) is None  # a slack row
    assert paths.packed_visible(3, 2, [0, 2, 4], causal=True)
    assert not paths.packed_visible(2, 1, [0, 2, 4], causal=False)
    with pytest.raises(ValueError, match="left"):
        paths.rolling_slots(-1)
    with pytest.raises(ValueError, match="cu_seqlens"):
        paths.document_of(0, [1, 2])
    with pytest.raises(TypeError, match="t"):
        paths.rolling_positions(1.5, 2)
