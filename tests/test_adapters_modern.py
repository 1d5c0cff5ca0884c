"""The modern third-party adapters (verify.adapters.mha, hf, xtransformers, local_attention,
taylor_series): each card's forward compared directly with the project's reference function under
the card's declared claims (window, kv heads, softcap, key padding, alignment, kernel), and a
contradicting claim shown to disagree.

Tolerances: the inputs are small float64 tensors (|scores| of order 1-10, T, S <= 8), so an
implementation computing in float64 agrees with the float64 reference to a few dozen units of
2^-53 (~1e-15 relative): 1e-10 relative leaves four orders of margin and still rejects any
wrong convention, which moves outputs by O(0.01-1). Implementations whose softmax runs in
float32 (x-transformers' Attend, HF eager; declared ``compute_dtype="float32"``) agree to float32
accuracy (~1e-7 relative): 1e-5 there, and the test checks they are *not* float64-accurate.
"""

from __future__ import annotations

import pytest
import torch

from verify.adapters import ADAPTERS, MODULES, REQUIRES, module_of
from verify.attention import linear_attention, softmax_attention, taylor_attention
from verify.spec.target import as_variant

torch.set_num_threads(1)

F64 = 1e-10  # relative-ish tolerance of a float64 implementation (module docstring)
F32_SOFTMAX = 1e-5  # of a float64 call whose softmax runs in float32
WRONG = 1e-3  # a contradicting claim differs by at least this (observed: O(0.01-1))

NEW_MODULES = ("mha", "hf", "xtransformers", "local_attention", "taylor_series")


def _err(out, ref) -> float:
    """max |out - ref| / max(1, max |ref|) (relative-ish; NaN-aware)."""
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert not torch.isnan(out).any() and not torch.isnan(ref).any()
    return float((out - ref).abs().max() / max(1.0, float(ref.abs().max())))


def _qkv(B=2, H=4, G=4, T=5, S=7, d=3, dv=4, seed=0, q_scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    q = q_scale * torch.randn(B, H, T, d, generator=gen, dtype=torch.float64)
    k = torch.randn(B, G, S, d, generator=gen, dtype=torch.float64)
    v = torch.randn(B, G, S, dv, generator=gen, dtype=torch.float64)
    return q, k, v


def _key_padding(B, S):
    """(B, S) True = keep: two keys dropped per sample, never two adjacent ones, never the first
    or the last, so every row keeps a key under top-left or bottom-right causality and under the
    cards' windows (which span at least three keys)."""
    kp = torch.ones(B, S, dtype=torch.bool)
    for b in range(B):
        kp[b, [s for s in range(1, S - 1) if s % 3 == 1 + b % 2]] = False
    return kp


def _attn_mask(B, H, T, S, seed=2):
    """(B, H, T, S) random True = keep, with key 0 (seen by every top-left causal row) and the
    bottom-right diagonal t + S - T (inside every window of the cards) kept."""
    gen = torch.Generator().manual_seed(seed)
    m = torch.rand(B, H, T, S, generator=gen) > 0.3
    m[..., 0] = True
    for t in range(T):
        if 0 <= t + S - T < S:
            m[..., t, t + S - T] = True
    return m


def _bthd(x):
    return x.transpose(1, 2)


# -- registration -------------------------------------------------------------------------------
def test_new_modules_are_registered_with_requirements():
    for key in NEW_MODULES:
        assert key in MODULES and key in REQUIRES
        for name, spec in MODULES[key].VARIANTS.items():
            assert ADAPTERS[name] == spec and module_of(name) == key
            assert spec.startswith(f"verify.adapters.{key}:")


def test_importing_the_adapters_does_not_import_the_packages():
    import subprocess
    import sys

    code = (
        "import sys, verify.adapters; "
        "print([m for m in ('transformers', 'x_transformers', 'local_attention', "
        "'taylor_series_linear_attention') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- torch.nn.MultiheadAttention ----------------------------------------------------------------
@pytest.mark.parametrize("name", ["torch-MultiheadAttention", "torch-MultiheadAttention-weights"])
def test_mha_matches_softmax_with_top_left_causality_and_flipped_padding(name):
    v_ = as_variant(ADAPTERS[name])
    assert (v_.layout, v_.causal_alignment, v_.dv_equals_d, v_.key_padding) == (
        "BTHD",
        "top-left",
        True,
        True,
    )
    B, H, d = 2, 3, 2
    for T, S in ((5, 7), (7, 5)):  # cross-attention both ways
        q, k, v = _qkv(B=B, H=H, G=H, T=T, S=S, d=d, dv=d)
        kp, am = _key_padding(B, S), _attn_mask(B, H, T, S)
        tl = torch.ones(T, S, dtype=torch.bool).tril()  # top-left causal: s <= t
        for causal in (False, True):
            for kw in ({}, {"key_padding_mask": kp}, {"attn_mask": am}):
                keep = torch.ones(B, H, T, S, dtype=torch.bool)
                if "key_padding_mask" in kw:
                    keep = keep & kp[:, None, None, :]
                if "attn_mask" in kw:
                    keep = keep & am
                if causal:
                    keep = keep & tl
                out = _bthd(v_.forward(*map(_bthd, (q, k, v)), causal=causal, **kw))
                err = _err(out, softmax_attention(q, k, v, attn_mask=keep))
                assert err < F64, (T, S, causal, kw)
    q, k, v = _qkv(B=B, H=H, G=H, T=5, S=7, d=d, dv=d)
    kp = _key_padding(B, 7)
    # contradicting claims: bottom-right alignment, unflipped (True = ignore) padding
    out = _bthd(v_.forward(*map(_bthd, (q, k, v)), causal=True))
    br = softmax_attention(q, k, v, causal=True, window=(-1, 0))
    assert _err(out, br) > WRONG
    out = _bthd(v_.forward(*map(_bthd, (q, k, v)), causal=False, key_padding_mask=kp))
    assert _err(out, softmax_attention(q, k, v, attn_mask=~kp[:, None, None, :])) > WRONG


def test_mha_empty_rows_follow_the_declared_convention():
    from verify.adapters import mha

    q, k, v = (_bthd(x) for x in _qkv(B=1, H=2, G=2, T=2, S=3, d=2, dv=2))
    none = torch.zeros(1, 3, dtype=torch.bool)
    zeros = mha.mha_forward(q, k, v, causal=False, key_padding_mask=none)
    nans = mha.mha_forward(q, k, v, causal=False, key_padding_mask=none, need_weights=True)
    assert mha.mha_variant().empty_rows == "zeros" and bool((zeros == 0).all())
    assert mha.mha_weights_variant().empty_rows == "nan" and bool(torch.isnan(nans).all())


# -- Hugging Face transformers ------------------------------------------------------------------
@pytest.mark.thirdparty
@pytest.mark.parametrize(
    "name", ["hf-sdpa-gqa", "hf-eager-gqa", "hf-sdpa-sliding-window", "hf-eager-sliding-window"]
)
def test_hf_matches_softmax_with_its_window_kv_heads_and_padding(name):
    pytest.importorskip("transformers", reason="transformers not installed")
    from verify.adapters import hf

    v_ = as_variant(ADAPTERS[name])
    eager = "eager" in name
    tol = F32_SOFTMAX if eager else F64  # eager: softmax(dtype=float32), declared
    assert v_.kv_heads == hf.KV_HEADS and v_.causal_alignment == "bottom-right"
    assert v_.compute_dtype == ("float32" if eager else None)
    W = hf.SLIDING_WINDOW
    if "sliding" in name:
        assert v_.window == (W - 1, 0) and v_.causal == "yes"
    B, H, G, T, S = 2, 4, 2, 5, 7
    q, k, v = _qkv(B=B, H=H, G=G, T=T, S=S)
    kp, am = _key_padding(B, S), _attn_mask(B, H, T, S)
    causals = (True,) if v_.causal == "yes" else (False, True)
    for causal in causals:
        for g_k, g_v in ((k, v), (k.repeat_interleave(2, 1), v.repeat_interleave(2, 1))):
            for kw in ({}, {"key_padding_mask": kp}, {"attn_mask": am}):
                out = v_.forward(q, g_k, g_v, causal=causal, **kw)
                mask = am if "attn_mask" in kw else None
                if "key_padding_mask" in kw:
                    mask = kp[:, None, None, :]
                win = v_.window if causal and v_.window else ((-1, 0) if causal else None)
                ref = softmax_attention(
                    q, g_k, g_v, causal=causal, window=win, attn_mask=mask, enable_gqa=True
                )
                err = _err(out, ref)
                assert err < tol, (causal, kw, err)
                if eager:
                    assert err > 1e-12  # float32 weights: not float64-accurate
    # T > S: non-causal (queries start at 0), and causal through SDPA (bottom-right: the first
    # T - S rows see no key and return zeros, as the reference; eager returns NaN there)
    qt, kt, vt = _qkv(B=B, H=H, G=G, T=S, S=T)
    for causal in causals:
        if causal and eager:
            continue
        win = v_.window if causal and v_.window else ((-1, 0) if causal else None)
        ref = softmax_attention(qt, kt, vt, causal=causal, window=win, enable_gqa=True)
        assert _err(v_.forward(qt, kt, vt, causal=causal), ref) < tol, causal
    # contradicting claims: a window one key wider / narrower, top-left causality, tiled kv heads
    out = v_.forward(q, k, v, causal=True)
    base = v_.window or (-1, 0)
    wrong = [(base[0] + 1, 0), (-1, 0)] if v_.window else []
    wrong_refs = [softmax_attention(q, k, v, causal=True, window=w, enable_gqa=True) for w in wrong]
    rep = (k.repeat_interleave(2, 1), v.repeat_interleave(2, 1))
    tl = torch.ones(T, S, dtype=torch.bool).tril()
    wrong_refs.append(softmax_attention(q, *rep, window=base, attn_mask=tl))
    tiled = (k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1))
    wrong_refs.append(softmax_attention(q, *tiled, causal=True, window=base))
    for ref in wrong_refs:
        assert _err(out, ref) > WRONG


@pytest.mark.thirdparty
def test_hf_unmasked_causal_shortcut_is_top_left():
    """HF's own causal prefill without a mask crops the keys (top-left), unlike the masks."""
    pytest.importorskip("transformers", reason="transformers not installed")
    from verify.adapters import hf

    assert hf.unmasked_causal_path_keys(2, 4) == [[0], [0, 1]]


# -- x-transformers Attend ----------------------------------------------------------------------
@pytest.mark.thirdparty
@pytest.mark.parametrize("name", ["x-transformers-Attend", "x-transformers-Attend-softclamp"])
def test_xtransformers_matches_softmax_bottom_right_with_padding(name):
    pytest.importorskip("x_transformers", reason="x-transformers not installed")
    from verify.adapters import measure, xtransformers

    v_ = as_variant(ADAPTERS[name])
    assert v_.causal_alignment == "bottom-right" and v_.compute_dtype == "float32"
    assert v_.kv_heads is None  # Attend tiles kv heads (h % G): not the kv_heads convention
    cap = v_.softcap
    # scores up to ~40 with the softclamp card (so C tanh(s / C) differs from s), ~4 without
    q, k, v = _qkv(q_scale=8.0 if cap else 1.0)
    B, H, T, S = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    kp, am = _key_padding(B, S), _attn_mask(B, H, T, S)
    for causal in (False, True):
        for kw in ({}, {"key_padding_mask": kp}, {"attn_mask": am}):
            mask = am if "attn_mask" in kw else None
            if "key_padding_mask" in kw:
                mask = kp[:, None, None, :]
            out = v_.forward(q, k, v, causal=causal, **kw)
            win = (-1, 0) if causal else None
            ref = softmax_attention(q, k, v, window=win, attn_mask=mask, softcap=cap, causal=causal)
            err = _err(out, ref)
            assert 1e-12 < err < F32_SOFTMAX, (causal, kw, err)
    qt, kt, vt = _qkv(T=7, S=5, q_scale=8.0 if cap else 1.0)  # T > S, non-causal
    ref = softmax_attention(qt, kt, vt, softcap=cap)
    assert _err(v_.forward(qt, kt, vt, causal=False), ref) < F32_SOFTMAX
    # contradicting claims: top-left alignment; the cap missing (or present) / another cap
    out = v_.forward(q, k, v, causal=True)
    tl = torch.ones(T, S, dtype=torch.bool).tril()
    assert _err(out, softmax_attention(q, k, v, attn_mask=tl, softcap=cap)) > WRONG
    other = None if cap else 1.0
    wrong = softmax_attention(q, k, v, causal=True, window=(-1, 0), softcap=other)
    assert _err(out, wrong) > WRONG
    if cap:
        wrong = softmax_attention(q, k, v, causal=True, window=(-1, 0), softcap=2 * cap)
        assert _err(out, wrong) > WRONG
    # grouped kv heads: a tiling, measured and compared both ways
    mapping = measure.kv_head_mapping(xtransformers.attend_forward)
    assert mapping == {"kv_head_of_query_head": [0, 1, 0, 1], "convention": "repeat"}
    qg, kg, vg = _qkv(G=2)
    out = v_.forward(qg, kg, vg, causal=False)
    tiled = softmax_attention(qg, kg.repeat(1, 2, 1, 1), vg.repeat(1, 2, 1, 1), softcap=cap)
    assert _err(out, tiled) < F32_SOFTMAX
    assert _err(out, softmax_attention(qg, kg, vg, softcap=cap, enable_gqa=True)) > WRONG


@pytest.mark.thirdparty
def test_xtransformers_softclamp_comes_after_the_bias():
    pytest.importorskip("x_transformers", reason="x-transformers not installed")
    from verify.adapters import xtransformers

    found = xtransformers.softclamp_order()
    assert found["order"] == "bias then cap"
    assert found["max_abs_diff"]["cap then bias (FlashAttention)"] > WRONG


# -- local-attention ----------------------------------------------------------------------------
@pytest.mark.thirdparty
@pytest.mark.parametrize(
    "name", ["local-attention-LocalAttention-causal-exact", "local-attention-LocalAttention-exact"]
)
def test_local_attention_exact_is_the_declared_window(name):
    pytest.importorskip("local_attention", reason="local-attention not installed")
    v_ = as_variant(ADAPTERS[name])
    causal = v_.causal == "yes"
    assert v_.window == ((2, 0) if causal else (2, 2)) and v_.self_attention_only
    for T in (6, 8):  # multiples of W = 2: no autopad keys
        q, k, v = _qkv(G=4, T=T, S=T)
        kp = _key_padding(2, T)
        for kw in ({}, {"key_padding_mask": kp}):
            mask = kp[:, None, None, :] if kw else None
            out = v_.forward(q, k, v, causal=causal, **kw)
            ref = softmax_attention(q, k, v, causal=causal, window=v_.window, attn_mask=mask)
            assert _err(out, ref) < F64, (T, kw)
        left, right = v_.window
        for wrong in ((left + 1, right), (left - 1, right), (-1, right)):
            ref = softmax_attention(q, k, v, causal=causal, window=wrong)
            assert _err(v_.forward(q, k, v, causal=causal), ref) > WRONG, wrong
    with pytest.raises(ValueError, match="self-attention"):
        v_.forward(*_qkv(T=4, S=6), causal=causal)


@pytest.mark.thirdparty
def test_local_attention_autopad_keys_take_weight_without_a_mask():
    """Non-causal, T odd: the zero-padded position is a key unless a key mask is passed."""
    pytest.importorskip("local_attention", reason="local-attention not installed")
    from verify.adapters import local_attention as la

    v_ = la.exact_variant()
    q, k, v = _qkv(G=4, T=7, S=7)
    ref = softmax_attention(q, k, v, window=v_.window)
    ones = torch.ones(2, 7, dtype=torch.bool)
    assert _err(v_.forward(q, k, v, causal=False, key_padding_mask=ones), ref) < F64
    assert _err(v_.forward(q, k, v, causal=False), ref) > WRONG
    mass = la.real_key_mass("local-attention-LocalAttention-exact", 7)
    assert mass[:5] == [1.0] * 5 and mass[5] < 1 and mass[6] < 1
    causal_mass = la.real_key_mass("local-attention-LocalAttention-causal-exact", 7)
    assert causal_mass == [1.0] * 7  # causal: the padding is in the future


@pytest.mark.thirdparty
def test_local_attention_bucketed_is_no_window():
    pytest.importorskip("local_attention", reason="local-attention not installed")
    from verify.adapters import local_attention as la
    from verify.adapters import measure

    v_ = la.causal_variant()
    assert v_.kernel == "unknown" and v_.window is None
    T = 8
    vis = measure.visible_keys(v_.forward, T, T, causal=True)
    assert vis == la.bucket_rule(T, causal=True) and measure.window_of(vis, T) is None
    q, k, v = _qkv(G=4, T=T, S=T)
    keep = torch.zeros(T, T, dtype=torch.bool)
    for t, row in enumerate(vis):
        keep[t, row] = True
    out = v_.forward(q, k, v, causal=True)
    assert _err(out, softmax_attention(q, k, v, attn_mask=keep)) < F64
    # the claims it does not make: full causal softmax, the windows that bracket it
    for win in ((-1, 0), (2, 0), (3, 0)):
        assert _err(out, softmax_attention(q, k, v, causal=True, window=win)) > WRONG, win


# -- taylor-series-linear-attention -------------------------------------------------------------
@pytest.mark.thirdparty
def test_taylor_series_is_taylor2_linear_attention():
    pytest.importorskip("taylor_series_linear_attention", reason="package not installed")
    from verify.adapters import taylor_series as ts

    v_ = ts.taylor_series_variant()
    assert (v_.kernel, v_.causal, v_.feature_scale, v_.empty_rows) == (
        "linear:taylor:2",
        "no",
        "none",
        "zeros",
    )
    B, H, T, S, d = 2, 3, 4, 6, 3
    q, k, v = _qkv(B=B, H=H, G=H, T=T, S=S, d=d, dv=d)
    kp = _key_padding(B, S)
    for kw in ({}, {"key_padding_mask": kp}):
        mask = kp[:, None, None, :] if kw else None
        out = _bthd(v_.forward(*map(_bthd, (q, k, v)), causal=False, **kw))
        assert _err(out, taylor_attention(q, k, v, order=2, attn_mask=mask)) < F64
        lin = linear_attention(q, k, v, feature_map="taylor:2", attn_mask=mask)
        assert _err(out, lin) < F64
        feat = linear_attention(q, k, v, feature_map=v_.feature_map, scale=d**-0.5, attn_mask=mask)
        assert _err(out, feat) < F64
    qt, kt, vt = _qkv(B=B, H=H, G=H, T=S, S=T, d=d, dv=d)  # T > S
    out = _bthd(v_.forward(*map(_bthd, (qt, kt, vt)), causal=False))
    assert _err(out, taylor_attention(qt, kt, vt, order=2)) < F64
    out = _bthd(v_.forward(*map(_bthd, (q, k, v)), causal=False))
    # contradicting claims: softmax, kappa_2 at scale 1, the key mask ignored
    assert _err(out, softmax_attention(q, k, v)) > WRONG
    assert _err(out, taylor_attention(q, k, v, order=2, scale=1.0)) > WRONG
    out = _bthd(v_.forward(*map(_bthd, (q, k, v)), causal=False, key_padding_mask=kp))
    assert _err(out, taylor_attention(q, k, v, order=2)) > WRONG
    with pytest.raises(ValueError, match="causal"):
        v_.forward(*map(_bthd, (q, k, v)), causal=True)
    kern = ts.feature_kernel(pairs=50)
    assert all(x["max_relative_deviation"] < 1e-12 for x in kern.values())
    assert "SystemExit" in ts.causal_construction()


# -- cards' facts -------------------------------------------------------------------------------
@pytest.mark.thirdparty
@pytest.mark.parametrize("key", NEW_MODULES)
def test_card_facts_are_json(key):
    import json

    pkg = {
        "hf": "transformers",
        "xtransformers": "x_transformers",
        "local_attention": "local_attention",
        "taylor_series": "taylor_series_linear_attention",
    }.get(key)
    if pkg:
        pytest.importorskip(pkg, reason=f"{REQUIRES[key]} not installed")
    module = MODULES[key]
    name = next(iter(module.VARIANTS))
    facts = module.card_facts(name, quick=True, isolate=False)
    assert json.loads(json.dumps(facts)) == facts
    with pytest.raises(KeyError):
        module.card_facts("no-such-card")
