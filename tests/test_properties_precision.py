"""The precision group of the property catalogue (verify/properties/precision.py).

``dtype-agreement`` passes on built-in variants in float16, bfloat16 and float32 on sequences
of thousands of tokens and fails on a normalizer accumulated in float16 (fault class 11);
``device-agreement`` skips without CUDA ("no CUDA device") and, on a CUDA machine, passes on
the built-ins and fails on a variant whose CUDA path drops to a lower precision.
"""

from __future__ import annotations

import math

import faulty_variants as fv
import pytest
import torch

from verify import builtins as variants
from verify.properties import precision as P
from verify.properties.support.base import RunContext, run_property
from verify.spec.variant import AttentionVariant

HAS_CUDA = torch.cuda.is_available()


def run(prop, variant, dtype, n=None, device="cpu", **kw):
    if isinstance(variant, str):
        variant = variants.get(variant)
    return run_property(prop, variant, RunContext(dtype=dtype, device=device, max_examples=n, **kw))


# ----------------------------------------------------------------------------- dtype agreement


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("softmax", "float16"),
        ("taylor-2", "bfloat16"),
        ("taylor-4", "float16"),
        ("linear-elu1", "float16"),
        ("linear-elu1", "float32"),
    ],
)
def test_dtype_agreement_passes(name, dtype):
    res = run(P.DTYPE_AGREEMENT, name, dtype)
    assert res.status == "pass", (res.reason, res.counterexample)
    assert res.bound_kind == "derived" and 0 < res.max_ratio <= 1
    assert res.examples == P.DTYPE_AGREEMENT.max_examples


def test_fp16_normalizer_fails_dtype_agreement():
    res = run(P.DTYPE_AGREEMENT, fv.fault11_fp16_normalizer, "float16")
    assert res.status == "fail", res.reason
    assert "bound" in res.reason and res.max_ratio > 1
    assert "long_inputs(" in res.snippet


def test_fp16_normalizer_overflow_is_caught_on_the_faults_trigger_scale():
    """At the fault class 11 scale (positive features, a few thousand tokens) the float16
    normalizer overflows (D > 65504) and the output collapses; the property's check reports a
    failure far outside the bound (the correct twin stays within it)."""
    ex = P.LongExample(
        seed=1,
        sizes=dict(B=1, H=1, T=4096, d=16, d_v=2),
        dtype="float16",
        positive=True,
        radius=None,
        scale=1.0,
        causal=True,
        rows=(4095,),
        choices={"form": "forward", "denominator": "sum"},
    )
    ctx = RunContext(dtype="float16")
    q, k, _ = ex.tensors()
    D = (torch.nn.functional.elu(q.double()) + 1) @ (
        torch.nn.functional.elu(k.double()) + 1
    ).transpose(-1, -2)
    assert float(D.tril().sum(-1).max()) > 65504  # the trigger: D overflows float16
    bad = P._dtype_check(fv.fault11_fp16_normalizer, ex, ctx)
    good = P._dtype_check(fv.twin11_fp32_normalizer, ex, ctx)
    assert bad.ratio > 100, bad.detail
    assert good.ratio <= 1, good.detail


def test_dtype_agreement_skips():
    assert run(P.DTYPE_AGREEMENT, "softmax", "float64").reason.startswith("float64 is the")
    narrow = variants.get("softmax").with_claims(dtypes=("float64", "float32"))
    assert "does not claim float16" in run(P.DTYPE_AGREEMENT, narrow, "float16").reason
    unknown = AttentionVariant(name="u", forward=variants.get("softmax").forward)
    assert "claims no kernel" in run(P.DTYPE_AGREEMENT, unknown, "float32").reason


# ----------------------------------------------------------------------------- long inputs


def test_long_inputs_reproducible_and_in_range():
    kw = dict(B=1, H=2, T=64, d=8, d_v=3, dtype="float16")
    q1, k1, v1 = P.long_inputs(11, **kw)
    q2, k2, v2 = P.long_inputs(11, **kw)
    assert torch.equal(q1, q2) and torch.equal(k1, k2) and torch.equal(v1, v2)
    assert q1.dtype == torch.float16 and q1.shape == (1, 2, 64, 8) and v1.shape == (1, 2, 64, 3)
    assert torch.all(v1[..., -1] == 1)
    for t in (q1, k1, v1[..., :-1]):
        mag = t.double().abs()
        assert float(mag.min()) >= P.MIN_ELEMENT * (1 - 2**-10)
        assert float(mag.max()) <= P.MAX_ELEMENT
    qp, kp, _ = P.long_inputs(11, positive=True, **kw)
    assert bool((qp > 0).all() and (kp > 0).all())


def test_long_inputs_radius():
    c = 1 / math.sqrt(16)
    q, k, _ = P.long_inputs(3, B=1, H=1, T=512, d=16, d_v=2, dtype="float64", radius=1.5, scale=c)
    top = P._max_score(q, k, c)
    assert top == pytest.approx(1.5, rel=1e-12)


def test_long_inputs_validation():
    with pytest.raises(ValueError, match="d_v"):
        P.long_inputs(0, B=1, H=1, T=8, d=2, d_v=1, dtype="float32")
    with pytest.raises(ValueError, match="T"):
        P.long_inputs(0, B=1, H=1, T=0, d=2, d_v=2, dtype="float32")
    with pytest.raises(ValueError, match="dtype"):
        P.long_inputs(0, B=1, H=1, T=8, d=2, d_v=2, dtype="int8")


def test_snippet_rebuilds_the_example():
    ex = P.LongExample(
        seed=5,
        sizes=dict(B=1, H=1, T=32, d=4, d_v=2),
        dtype="bfloat16",
        positive=False,
        radius=0.75,
        scale=0.5,
        causal=False,
        rows=(3, 31),
        choices={"form": "forward", "denominator": "sum"},
    )
    scope: dict = {}
    exec(ex.snippet(), scope)
    for got, want in zip((scope["q"], scope["k"], scope["v"]), ex.tensors()):
        assert torch.equal(got, want)
    assert "rows=(3, 31)" in repr(ex)


def test_feature_budget_caps_the_head_dimension():
    from derivations.feature_maps import feature_count

    assert P._max_dim(variants.get("softmax")) == 16
    assert P._max_dim(variants.get("taylor-2")) == 16
    for n in range(7):
        top = P._max_dim(variants.get(f"taylor-{n}"))
        assert feature_count(n, top, "tensor") <= P.LONG_FEATURE_BUDGET or top == 2
        if top < 16:
            assert feature_count(n, top + 1, "tensor") > P.LONG_FEATURE_BUDGET


# ----------------------------------------------------------------------------- device


@pytest.mark.skipif(HAS_CUDA, reason="checks the skip reason on a machine without CUDA")
def test_device_agreement_skips_without_cuda():
    res = run(P.DEVICE_AGREEMENT, "softmax", "float32")
    assert res.status == "skip" and res.reason == "no CUDA device"


def _cuda_drops_precision(q, k, v, *, causal):
    """Softmax whose CUDA path computes in bfloat16 (a device-specific precision loss)."""
    from verify.attention import softmax_attention

    if q.is_cuda:
        out = softmax_attention(
            q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16), causal=causal
        )
        return out.to(q.dtype)
    return softmax_attention(q, k, v, causal=causal)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize(
    ("name", "dtype"),
    [("softmax", "float32"), ("taylor-2", "float64"), ("linear-elu1", "bfloat16")],
)
def test_device_agreement_passes_on_cuda(name, dtype):
    res = run(P.DEVICE_AGREEMENT, name, dtype, n=8)
    assert res.status == "pass", (res.reason, res.counterexample)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_device_agreement_fails_on_a_cuda_precision_drop():
    v = AttentionVariant(
        name="cuda-bf16", forward=_cuda_drops_precision, kernel="softmax", devices=("cpu", "cuda")
    )
    res = run(P.DEVICE_AGREEMENT, v, "float32", n=8)
    assert res.status == "fail" and "cuda-cpu" in res.reason


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_dtype_agreement_on_cuda():
    res = run(P.DTYPE_AGREEMENT, "softmax", "float16", device="cuda")
    assert res.status == "pass", (res.reason, res.counterexample)
