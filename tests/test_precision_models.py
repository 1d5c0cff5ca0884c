"""The D10 precision models (``derivations.precision_models``, ``verify.exact.models``,
``verify.exact.gradient_bounds``) against faithful emulations on thousands of tokens, their
faulty twins (one more rounding at a named place), the probe that names a black-box kernel's
model, and the lemmas' elementwise forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from derivations import precision_models as pm
from derivations import rounding as d10
from verify.attention import lowprec
from verify.exact import errors
from verify.exact import gradient_bounds as gb


def _inputs(dtype, T=16, S=4096, d=64, seed=0, radius=None):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 1, T, d, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, S, d, generator=g, dtype=torch.float64)
    v = torch.randn(1, 1, S, d, generator=g, dtype=torch.float64)
    if radius is not None:  # max |q.k| / sqrt(d) about radius
        lam = math.sqrt(radius / float((q @ k.transpose(-1, -2)).abs().max() / math.sqrt(d)))
        q, k = q * lam, k * lam
    return tuple(t.to(dtype) for t in (q, k, v))


def _ratio(out, q, k, v, precision, **kw):
    dtype = str(q.dtype).removeprefix("torch.")
    eb = errors.attention_error_bound(
        "softmax", q, k, v, dtype=dtype, exact=None, precision=precision,
        exp_library="cpu-sleef-u10", **kw,
    )  # fmt: skip
    ref = errors.float64_reference("softmax", q, k, v, **kw)
    return float((np.abs(out.double().numpy() - ref) / eb.bound).max())


# -- parsing and the summation lemmas ----------------------------------------------------------
@pytest.mark.parametrize(
    "spec", ["two-level", "fused", "eager", "online:512", "input-accumulation:recursive",
             "input-accumulation:pairwise", "input-accumulation:blocked:64"],
)  # fmt: skip
def test_parse_round_trip(spec):
    assert pm.parse_precision(spec).spec == spec


@pytest.mark.parametrize("bad", ["online", "online:0", "fast", "input-accumulation:blocked", 3])
def test_parse_rejects(bad):
    with pytest.raises(ValueError, match="precision"):
        pm.parse_precision(bad)


def test_summation_indices_and_the_missing_gamma():
    assert pm.summation_index(4096, "recursive") == 4095
    assert pm.summation_index(4096, "pairwise") == 12
    assert pm.summation_index(4096, "blocked", 64) == 63 + 63
    u = d10.unit_roundoff("bfloat16")
    assert pm.accumulation_gamma(200, u, "recursive") == d10.gamma(200, u)
    with pytest.raises(pm.ModelNotApplicable, match="no bound"):
        pm.accumulation_gamma(300, u, "recursive")  # (n - 1 + 1) u >= 1
    assert pm.accumulation_gamma(4096, u, "pairwise") < 0.06


def test_hoeffding_width_meets_its_tail():
    t = pm.hoeffding_half_width(1024, 1e-6, 6)
    assert 2 * math.exp(-1024 * t * t / 2) == pytest.approx(1e-6 / 6)


def test_elementwise_forms_equal_the_scalar_lemmas():
    rng = np.random.default_rng(0)
    a, b, o = rng.random((3, 50))
    D = b * (1 + rng.random(50))
    arr = pm.output_bound_elementwise(1e-3, 2e-3, a, b, D, o, 1e-7)
    for i in range(50):
        assert arr[i] == pytest.approx(d10.kernel_attention_output_bound(
            num_rel=1e-3, den_rel=2e-3, abs_numerator=a[i], abs_denominator=b[i],
            denominator=D[i], output_abs=o[i], div_rel=1e-7), rel=1e-15)  # fmt: skip
        low = pm.low_precision_elementwise(a[i], o[i], "bfloat16")
        assert low == pytest.approx(d10.low_precision_output_bound(a[i], o[i], "bfloat16"))


# -- emulations within their bounds, thousands of keys; twins outside ---------------------------
CORRECT = [
    ("fused", lambda q, k, v: lowprec.fused_attention(q, k, v)),
    ("online:512", lambda q, k, v: lowprec.fused_attention(q, k, v, block=512)),
    ("eager", lambda q, k, v: lowprec.eager_attention(q, k, v)),
    ("input-accumulation:pairwise",
     lambda q, k, v: lowprec.input_accumulation_attention(q, k, v, scheme="pairwise")),
    ("input-accumulation:blocked:64",
     lambda q, k, v: lowprec.input_accumulation_attention(q, k, v, scheme="blocked", block=64)),
]  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("model", "fn"), CORRECT, ids=[c[0] for c in CORRECT])
@pytest.mark.parametrize("radius", [None, 12.0])
def test_emulation_within_its_model(model, fn, dtype, radius):
    q, k, v = _inputs(dtype, radius=radius)
    r = _ratio(fn(q, k, v), q, k, v, model)
    # holds, and is not vacuous; an input-type sum's worst case (gamma_k with k u near 1/2
    # for bf16) sits far above what random data reach, hence only r > 0 there
    floor = 0.0 if model.startswith("input-accumulation") else 1e-3
    assert floor < r <= 1.0, r


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_scores_rounded_twin_breaks_the_fused_bound(dtype):
    """One more rounding at a named place (the scores stored in the input type before the
    exp) puts an error u |s| in the exponent that the fused model does not allow."""
    q, k, v = _inputs(dtype, radius=12.0)
    assert _ratio(lowprec.fused_attention(q, k, v), q, k, v, "fused") <= 1.0
    bad = lowprec.fused_attention(q, k, v, faults=("scores-rounded",))
    assert _ratio(bad, q, k, v, "fused") > 1.0
    assert _ratio(bad, q, k, v, "eager") <= 1.0  # the eager model allows that rounding


def test_input_type_recursive_sum_breaks_the_fused_and_pairwise_bounds():
    q, k, v = _inputs(torch.bfloat16, T=8, S=4096)
    v = v.abs()  # same-sign values: the stagnating bf16 sum loses mass
    bad = lowprec.input_accumulation_attention(q, k, v, scheme="recursive")
    assert _ratio(bad, q, k, v, "fused") > 1.0
    assert _ratio(bad, q, k, v, "input-accumulation:pairwise") > 1.0
    with pytest.raises(pm.ModelNotApplicable):
        _ratio(bad, q, k, v, "input-accumulation:recursive")


def test_sdpa_within_fused_and_online_in_both_low_dtypes():
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v = _inputs(dtype, T=64, S=2048, d=16, seed=3)
        out = F.scaled_dot_product_attention(q, k, v)
        for model in ("fused", "online:512"):
            eb = errors.attention_error_bound(
                "softmax", q, k, v, dtype=str(dtype).removeprefix("torch."), exact=None,
                precision=model, exp_library="cpu-torch-exp_u20",
            )  # fmt: skip
            ref = errors.float64_reference("softmax", q, k, v)
            assert float((np.abs(out.double().numpy() - ref) / eb.bound).max()) <= 1.0


def test_model_rejects_other_kernels():
    q, k, v = _inputs(torch.bfloat16, T=4, S=8, d=4)
    with pytest.raises(ValueError, match="precision"):
        errors.attention_error_bound("taylor:2", q, k, v, dtype="bfloat16", precision="fused")


# -- backward ---------------------------------------------------------------------------------
def _grads(fn, q, k, v, g, causal):
    qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
    fn(qq, kk, vv, causal).backward(g)
    return qq.grad, kk.grad, vv.grad


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16", "float16"])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_gradients_within_derived_bounds(dtype, causal):
    dt = getattr(torch, dtype)
    q, k, v = _inputs(dt, T=128, S=128, d=16, seed=5)
    g = torch.randn(1, 1, 128, 16, generator=torch.Generator().manual_seed(9)).to(dt)
    sdpa = lambda q, k, v, c: F.scaled_dot_product_attention(q, k, v, is_causal=c)  # noqa: E731
    grads = _grads(sdpa, q, k, v, g, causal)
    bounds = gb.gradient_bounds(q, k, v, g, dtype=dtype, causal=causal,
                                exp_library="cpu-torch-exp_u20")  # fmt: skip
    ref = gb.reference_gradients(q, k, v, g, causal=causal)[1:]
    for name, got, want in zip(gb.NAMES, grads, ref):
        r = np.abs(got.double().numpy() - want) / bounds[name]
        assert 1e-4 < float(r.max()) <= 1.0, (name, float(r.max()))


def test_gradient_twin_detached_scale_breaks_the_bound():
    """dq of a kernel that drops the 1/sqrt(d) scale in its backward only (dS K without c)."""
    q, k, v = _inputs(torch.bfloat16, T=64, S=64, d=16, seed=7)
    g = torch.randn(1, 1, 64, 16, generator=torch.Generator().manual_seed(2)).bfloat16()
    dq, dk, dv = _grads(lambda q, k, v, c: F.scaled_dot_product_attention(q, k, v), q, k, v, g,
                        False)  # fmt: skip
    bounds = gb.gradient_bounds(q, k, v, g, dtype="bfloat16", exp_library="cpu-torch-exp_u20")
    ref = gb.reference_gradients(q, k, v, g)[1:]
    bad = dq * 4.0  # c = 1/4 at d = 16 left out
    assert float((np.abs(bad.double().numpy() - ref[0]) / bounds["dq"]).max()) > 1.0


# -- the probe -------------------------------------------------------------------------------
def _variant(fn, **claims):
    from verify.spec.variant import AttentionVariant

    return AttentionVariant(name="t", forward=fn, kernel="softmax", **claims)


def test_probe_names_each_emulated_model():
    from verify.probes.precision_model import identify_precision

    def eager(q, k, v, *, causal):
        s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        if causal:
            T, S = s.shape[-2:]
            s = s.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(S - T + 1), -math.inf)
        return torch.softmax(s, -1) @ v

    def fused(q, k, v, *, causal):
        return lowprec.fused_attention(q, k, v, causal=causal)

    def truncated(q, k, v, *, causal):
        return lowprec.fused_attention(q, k, v, causal=causal, faults=("p-truncated",))

    def sdpa(q, k, v, *, causal):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    found = {n: identify_precision(_variant(f), dtype="bfloat16")
             for n, f in (("eager", eager), ("fused", fused), ("trunc", truncated),
                          ("sdpa", sdpa))}  # fmt: skip
    assert found["eager"]["model"] == "eager" and found["eager"]["matches"]["eager"] == 1.0
    assert found["fused"]["model"] == "fused"
    assert found["trunc"]["model"] is None and "50%" in found["trunc"]["reason"]
    # SDPA's CPU kernel (torch 2.13): online softmax over key blocks of 512
    assert found["sdpa"]["model"] == "online:512", found["sdpa"]["matches"]


def test_probe_names_no_model_whose_bound_the_kernel_exceeds(monkeypatch):
    """FlashAttention-2 with its keys split 16 ways and combined by log-sum-exp (the
    flash-decoding path FA2 takes when few query blocks fill the device; seen on an H200, whose
    flash backend bit-matched two-level on 62 % of the probe's outputs) follows none of the
    emulated models. Two-level still bit-matches most outputs, and its bound fails the correct
    kernel at T = 1024 (ratio > 1 below): the probe refutes it by its own bound on the probe's
    outputs and names no model, so the envelope (which contains the kernel) decides. The twin
    without that refutation names two-level."""
    from verify.attention.flash import flash_attention
    from verify.probes import precision_model as pmod

    def split16(q, k, v, *, causal):
        return flash_attention(q, k, v, causal=causal, split_kv=16)

    found = pmod.identify_precision(_variant(split16), dtype="bfloat16")
    assert found["model"] is None and "refuted by its own bound" in found["reason"], found
    assert found["own_bound_ratio"] > 1.0
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 1024, 64, generator=g).to(torch.bfloat16) for _ in range(3))
    out = split16(q, k, v, causal=False)
    assert _ratio(out, q, k, v, "two-level") > 1.0  # naming two-level would be a false alarm
    assert _ratio(out, q, k, v, "envelope") <= 1.0
    monkeypatch.setattr(pmod, "_own_bound_ratio", lambda *a, **kw: 0.0)
    twin = pmod.identify_precision(_variant(split16), dtype="bfloat16")
    assert twin["model"] == "two-level", twin


def test_probe_calls_a_causal_only_kernel_on_self_attention_shapes_only():
    """A kernel that takes causal calls only (and raises on T != S, as SDPA's adapter claiming
    causal 'yes' does) is probed at T = S = 512 alone; its model is still named."""
    from verify.probes.precision_model import identify_precision

    def causal_only(q, k, v, *, causal):
        if q.shape[-2] != k.shape[-2]:
            raise ValueError("causal: requires T == S")
        return lowprec.fused_attention(q, k, v, causal=True)

    found = identify_precision(_variant(causal_only, causal="yes"), dtype="bfloat16")
    assert found["model"] == "fused" and [c["shape"] for c in found["calls"]] == [[512, 512]]


def test_one_model_for_every_dtype_only_when_every_called_dtype_names_one():
    """The checker applies one model to all low-precision dtypes: a dtype whose probe named none
    (refuted, calls disagreeing, too few bit-equal outputs) vetoes the others' model, so it is
    never judged by a model its own probe could not stand behind; a dtype the kernel refused
    has no say."""
    from verify.probes.precision_model import combine

    bf16 = {"dtype": "bfloat16", "model": "two-level"}
    refuted = {"dtype": "float16", "model": None,
               "reason": "the closest model, two-level, is refuted by its own bound"}  # fmt: skip
    refused = {"dtype": "float16", "model": None, "reason": "the variant could not be called: x"}
    assert combine([bf16, refuted]) is None
    assert combine([bf16, refused]) == "two-level"
    assert combine([bf16, {"dtype": "float16", "model": "online:64"}]) == "online:64"


def test_tied_maxima_finding_separates_a_biased_kernel():
    """The tied-maxima probe (Qiu & Yao's inputs) is reported, not failed: a round-to-nearest
    fused kernel shows no significant mean signed error, a truncating one does."""
    from verify.probes.precision_model import finding_sentence, tied_maxima_finding

    def fused(q, k, v, *, causal):
        return lowprec.fused_attention(q, k, v, causal=causal)

    def truncated(q, k, v, *, causal):
        return lowprec.fused_attention(q, k, v, causal=causal, faults=("p-truncated",))

    ok = tied_maxima_finding(_variant(fused), dtype="bfloat16", model="fused")
    bad = tied_maxima_finding(_variant(truncated), dtype="bfloat16", model="fused")
    assert not ok["significant"] and abs(ok["mean_of_bound"]) < ok["width"]
    assert bad["significant"] and bad["mean_of_bound"] > bad["width"]
    text = finding_sentence([{"dtype": "bfloat16", "tied_maxima": bad}])
    assert "not failed" in text and "significant" in text
