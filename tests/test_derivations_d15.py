"""D15 (derivations.structure): windows and GQA. The record holds; a window one key too wide, a
tiled kv-head map and a leaving token subtracted one step early each make a claim fail; the
exports follow FlashAttention's and Hugging Face's conventions."""

from __future__ import annotations

import pytest

from derivations import structure as st
from derivations._record import Status


def _failed(rec):
    return [c.name for c in rec.claims if c.status is Status.FAILED]


def test_record_holds(derived):
    rec = derived("D15")
    assert rec.id == "D15" and rec.status is Status.VERIFIED and not _failed(rec)
    for name in rec.exports:
        assert hasattr(st, name), name


def test_window_one_key_too_wide_fails():
    def too_wide(t, queries, keys, left, right):
        return st.visible_count(t, queries, keys, left + 1 if left >= 0 else left, right)

    assert "visible_count = number of visible keys (closed form)" in _failed(
        st.derive(visible_count=too_wide)
    )


def test_tiled_kv_heads_fail():
    def tiled(h, heads, kv_heads):
        return h % kv_heads

    assert any(
        n.startswith("kv_head = the repeat_interleave map")
        for n in _failed(st.derive(kv_head=tiled))
    )


def test_leaving_token_early_fails():
    failed = _failed(st.derive(leaving_lag=0))
    assert "W_t - W_{t-1} = f(t) - f(t - L - 1) (all t, L >= 0)" in failed
    assert any(n.startswith("windowed Taylor-N") for n in failed)


def test_conventions():
    # FlashAttention: causal with T = 2 queries, S = 5 keys (bottom-right): query 0 sees keys 0..3
    assert [st.window_visible(0, s, 2, 5, -1, 0) for s in range(5)] == [True] * 4 + [False]
    # Hugging Face sliding_window = 3 is (2, 0): query 4 of 6 sees keys 2, 3, 4
    left, right = st.hf_sliding_window(3)
    assert [s for s in range(6) if st.window_visible(4, s, 6, 6, left, right)] == [2, 3, 4]
    assert st.visible_count(0, 6, 2, 0, 0) == 0  # T > S: an early query sees no key
    assert [st.kv_head(h, 8, 2) for h in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_bad_arguments():
    with pytest.raises(ValueError, match="kv_heads"):
        st.kv_head(0, 8, 3)
    with pytest.raises(ValueError, match="left"):
        st.visible_count(0, 2, 2, -2, 0)
    with pytest.raises(ValueError, match="t"):
        st.visible_count(2, 2, 2, 0, 0)
    with pytest.raises(TypeError, match="width"):
        st.hf_sliding_window(2.0)


def test_hf_sliding_window_against_transformers():
    """The cited convention, read off the pinned transformers: its causal sliding-window mask
    function keeps exactly the keys of hf_sliding_window(W) (T = S, every query and key), the
    installed version is the one constraints.txt pins and the record cites, and the
    bidirectional overlay is the other convention (W, W) the citation warns about."""
    import re
    from pathlib import Path

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    masking = pytest.importorskip("transformers.masking_utils")

    def idx(i):  # the mask functions take index tensors (vmap over positions)
        return torch.tensor(i)

    pins = (Path(__file__).resolve().parents[1] / "constraints.txt").read_text()
    pinned = re.search(r"^transformers==(\S+)$", pins, re.M).group(1)
    assert transformers.__version__ == pinned
    cite = next(c for c in st.derive().claims if c.name == st.HF_WINDOW)
    assert cite.status is Status.CITED and f"transformers {pinned}" in cite.source
    assert "masking_utils" in cite.source and "sliding_window_overlay" in cite.source
    n = 7
    for width in (1, 2, 3, 5, 9):
        left, right = st.hf_sliding_window(width)
        causal = masking.sliding_window_causal_mask_function(width)
        both = masking.sliding_window_bidirectional_overlay(width)
        for q in range(n):
            for kv in range(n):
                got = bool(causal(idx(0), idx(0), idx(q), idx(kv)))
                assert got == st.window_visible(q, kv, n, n, left, right)
                got = bool(both(idx(0), idx(0), idx(q), idx(kv)))
                assert got == st.window_visible(q, kv, n, n, width, width)
    # the wrong reading (W, 0): W + 1 keys, one too many
    assert not all(
        bool(masking.sliding_window_causal_mask_function(3)(idx(0), idx(0), idx(q), idx(kv)))
        == st.window_visible(q, kv, n, n, 3, 0)
        for q in range(n)
        for kv in range(n)
    )
