"""D16 in every precision model and D17's kernel arithmetic, against emulations of real kernels.

FlashAttention-2's forward arithmetic (``verify.attention.flash``: float32 raw scores, the cap by
tanh.approx at its cited worst error, key-indexed ALiBi divided by the scale, exp2 of a rounded
product and a subtraction, per-block rescaling, P rounded to bf16 before P.V, normalization by a
reciprocal and a product, split-KV combined by log-sum-exp) and Hugging Face's eager arithmetic
(every step an input-type tensor operation) must lie within the bound of their declared model
and arithmetic on the same rounded inputs (``attention_error_bound(..., exact=None)``, against
the float64 reference); each named defect of a hand-written kernel must exceed it. Lengths cross
the 64-key block and end in a partial block (S = 200, 2 x 64 + 72)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from derivations import kernel_arithmetic as ka
from derivations.decay import alibi_slopes
from verify.attention.flash import FAULTS, flash_attention
from verify.exact.errors import attention_error_bound, float64_reference

T, S, D = 200, 200, 32
FA = "flash-attention-2"


def _qkv(dtype, *, H=2, G=2, T=T, S=S, d=D, seed=0, scale=1.5):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: (scale * torch.randn(*s, generator=g, dtype=torch.float64)).to(dtype)  # noqa: E731
    return mk(1, H, T, d), mk(1, G, S, d), mk(1, G, S, d)


def _struct(H, G, window=None, softcap=None, alibi=False, causal=True):
    out = {}
    if window is not None:
        out["window"] = window
    if softcap is not None:
        out["softcap"] = softcap
    if alibi:
        out["alibi_slopes"] = [float(x) for x in alibi_slopes(H)]
    if G != H:
        out["enable_gqa"] = True
    return out


def _ratio(out, q, k, v, *, causal, precision, arithmetic, **struct):
    dt = str(q.dtype).split(".")[1]
    ref = float64_reference("softmax", q, k, v, causal=causal, **struct)
    eb = attention_error_bound(
        "softmax", q, k, v, dtype=dt, causal=causal, exact=None, precision=precision,
        arithmetic=arithmetic, **struct,
    )  # fmt: skip
    err = np.abs(out.double().numpy() - ref)
    return float(np.max(err / eb.bound))


CONFIGS = {
    "plain": dict(),
    "window": dict(window=(70, -1)),
    "softcap": dict(softcap=20.0),
    "alibi": dict(alibi=True),
    "gqa": dict(H=4, G=2),
}
#: the defect each configuration exposes (besides no-rescale, which every long row shows)
EXPOSES = {
    "window": "window-wide",
    "softcap": "softcap-scale",
    "alibi": "alibi-unscaled",
    "gqa": "gqa-modulo",
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_flash_emulation_within_its_model_and_defects_beyond(name, dtype):
    cfg = dict(CONFIGS[name])
    H, G = cfg.pop("H", 2), cfg.pop("G", 2)
    q, k, v = _qkv(dtype, H=H, G=G)
    struct = _struct(H, G, **cfg)
    kw = {key: val for key, val in struct.items() if key != "enable_gqa"}
    precision = "online:64" if dtype == torch.bfloat16 else None
    ok = flash_attention(q, k, v, causal=True, **kw)
    r_ok = _ratio(ok, q, k, v, causal=True, precision=precision, arithmetic=FA, **struct)
    assert 1e-3 < r_ok <= 1.0, r_ok  # within, and not vacuous (float32: truncation's 2u unused)
    for fault in ("no-rescale", EXPOSES.get(name)):
        if fault is None:
            continue
        bad = flash_attention(q, k, v, causal=True, faults=(fault,), **kw)
        r_bad = _ratio(bad, q, k, v, causal=True, precision=precision, arithmetic=FA, **struct)
        assert r_bad > 1.0, (fault, r_bad)


def test_last_partial_block_and_split_kv_defects():
    """S = 200 is not a multiple of 64: unmasked padding of the last block shows (non-causal, a
    window that keeps the row maxima small); split-KV combined in the wrong base shows."""
    q, k, v = _qkv(torch.bfloat16, T=120, S=200)
    win = (90, -1)
    kw = dict(causal=False, precision="online:64", arithmetic=FA, window=win)
    assert _ratio(flash_attention(q, k, v, window=win), q, k, v, **kw) <= 1.0
    bad = flash_attention(q, k, v, window=win, faults=("last-block-unmasked",))
    assert _ratio(bad, q, k, v, **kw) > 1.0
    split = dict(causal=True, precision="online:64", arithmetic=f"{FA}+split:3")
    q, k, v = _qkv(torch.bfloat16)
    ok = flash_attention(q, k, v, causal=True, split_kv=3)
    assert 0.02 < _ratio(ok, q, k, v, **split) <= 1.0
    bad = flash_attention(q, k, v, causal=True, split_kv=3, faults=("split-lse-base",))
    assert _ratio(bad, q, k, v, **split) > 1.0


def test_faults_are_named_once():
    assert len(set(FAULTS)) == len(FAULTS) and set(EXPOSES.values()) <= set(FAULTS)


def test_tanh_approx_needs_its_term():
    """The twin: the softcapped emulation in float32 exceeds the bound that takes the CPU's tanh
    (2.5 ulps) for tanh.approx (relative error 2^-11), and stays within FlashAttention-2's."""
    q, k, v = _qkv(torch.float32, scale=3.0)
    o = flash_attention(q, k, v, causal=True, softcap=20.0)
    assert _ratio(o, q, k, v, causal=True, precision=None, arithmetic=FA, softcap=20.0) <= 1.0
    cpu_tanh = ka.FLASH_ATTENTION_2._replace(tanh_rel=None)
    assert _ratio(o, q, k, v, causal=True, precision=None, arithmetic=cpu_tanh, softcap=20.0) > 1


def _eager_capped(q, k, v, cap, causal=True):
    """Hugging Face's eager softcap (Gemma 2): every step an input-type tensor operation."""
    c = 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.transpose(-1, -2)) * c
    s = torch.tanh(s / cap) * cap
    Tq, Sk = s.shape[-2:]
    vis = torch.ones(Tq, Sk, dtype=torch.bool).tril(Sk - Tq)
    s = s.masked_fill(~vis, -torch.inf)
    p = torch.softmax(s, -1, dtype=torch.float32).to(q.dtype)
    return p @ v


def test_eager_transforms_in_the_input_type():
    """The eager model takes the cap's operations at the input type's unit: HF's eager softcap in
    bf16 passes it (and the envelope, the default), and fails the fused model, which computes
    the cap in float32."""
    q, k, v = _qkv(torch.bfloat16, scale=3.0)
    o = _eager_capped(q, k, v, 20.0)
    kw = dict(causal=True, arithmetic=None, softcap=20.0)
    assert _ratio(o, q, k, v, precision="eager", **kw) <= 1.0
    assert _ratio(o, q, k, v, precision="envelope", **kw) <= 1.0
    assert _ratio(o, q, k, v, precision="fused", **kw) > 1.0


def test_envelope_is_the_largest_member():
    q, k, v = _qkv(torch.bfloat16, T=40, S=40)
    bounds = {
        p: attention_error_bound("softmax", q, k, v, dtype="bfloat16", precision=p).bound
        for p in ("fused", "eager", "online:16", "envelope")
    }
    top = np.maximum.reduce([bounds["fused"], bounds["eager"], bounds["online:16"]])
    assert np.array_equal(bounds["envelope"], top)


def test_arithmetic_presets_and_validation():
    assert ka.parse_arithmetic(None, "cuda") == ka.FLASH_ATTENTION_2
    assert ka.parse_arithmetic("flash-attention-2+split:4").split_kv == 4
    with pytest.raises(ValueError, match="arithmetic"):
        ka.parse_arithmetic("flash-attention-3")
    with pytest.raises(ValueError, match="accumulation"):
        ka.KernelArithmetic(accumulation="stochastic").validated()
    # truncation doubles the unit of the matrix-product sums (D17)
    assert ka.mma_unit(2.0**-24, "truncate") == 2.0**-23


# ------------------------------------------------------------------ the testing API's claims
def _hf_eager(q, k, v):
    """Hugging Face's eager_attention_forward arithmetic in bf16 (scores and weights in the
    input type), causal."""
    from verify.attention.lowprec import eager_attention

    return eager_attention(q, k, v, causal=True)


@pytest.mark.parametrize("name", ["softcap", "alibi", "window", "gqa"])
def test_testing_api_takes_the_modern_claims(name):
    """``assert_attention_close`` with the claim passes the FlashAttention-2 emulation (declared
    model and arithmetic) and rejects its defect of that claim."""
    from verify.testing import assert_attention_close

    cfg = dict(CONFIGS[name])
    H, G = cfg.pop("H", 2), cfg.pop("G", 2)
    q, k, v = _qkv(torch.bfloat16, H=H, G=G)
    struct = _struct(H, G, **cfg)
    kw = {key: val for key, val in struct.items() if key != "enable_gqa"}
    claims = dict(struct, causal=True, precision="online:64", arithmetic=FA)
    assert_attention_close(flash_attention(q, k, v, causal=True, **kw), q, k, v, **claims)
    bad = flash_attention(q, k, v, causal=True, faults=(EXPOSES[name],), **kw)
    with pytest.raises(AssertionError, match="not within the derived bound"):
        assert_attention_close(bad, q, k, v, **claims)


def test_testing_api_default_contains_eager_and_names_the_members():
    """With no precision declared, a correct eager bf16 kernel passes (the envelope contains its
    arithmetic; the fused model alone does not), and a failure names each member's ratio."""
    from verify.testing import assert_attention_close

    q, k, v = _qkv(torch.bfloat16, T=512, S=512, scale=1.0)
    o = _hf_eager(q, k, v)
    assert_attention_close(o, q, k, v, causal=True)
    with pytest.raises(AssertionError):
        assert_attention_close(o, q, k, v, causal=True, precision="fused")
    bad = flash_attention(q, k, v, causal=True, faults=("no-rescale",))
    with pytest.raises(AssertionError, match="Envelope members .*fused .*eager .*online:16"):
        assert_attention_close(bad, q, k, v, causal=True)
    with pytest.raises(TypeError, match="unexpected keyword"):
        assert_attention_close(o, q, k, v, causal=True, softcapp=2.0)


def test_subnormal_weights_carry_their_absolute_error(monkeypatch):
    """The underflow floor: the leading key has value 0, the others scores 741..745 below it,
    so their weights e^{x - m} are float64 subnormals, each with an absolute rounding error up
    to eta = 2^-1075, carried into the output by values near 1e38 (an output ~1e-280). The
    bound holds; with eta taken as 0 (2.0**-1075 itself rounds to 0 in float64: the twin) it is
    exceeded."""
    from derivations import rounding as d10

    gaps = torch.tensor([0.0, 741.3, 742.1, 742.9, 743.5, 744.0, 744.4], dtype=torch.float64)
    q = torch.ones(1, 1, 1, 1, dtype=torch.float64)
    k = (-gaps).reshape(1, 1, -1, 1)  # scores -gaps (scale 1)
    v = torch.full((1, 1, 7, 1), 1e38, dtype=torch.float64)
    v[..., 0, 0] = 0.0
    from verify.exact.oracle import reference

    o = torch.softmax(q @ k.transpose(-1, -2), -1) @ v
    exact = reference(q, k, v, kernel="exp", scale=1.0)  # mpmath, rounded once
    eb = attention_error_bound("softmax", q, k, v, dtype="float64", exact=exact, scale=1.0)
    err = np.abs(o.numpy() - exact.float64)
    assert np.all(err <= eb.bound) and err.max() > 0
    monkeypatch.setattr(d10, "underflow_abs_error_log2", lambda name: -4000)
    twin = attention_error_bound("softmax", q, k, v, dtype="float64", exact=exact, scale=1.0)
    assert np.any(err > twin.bound)
