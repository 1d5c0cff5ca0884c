"""Black-box probes (verify.probes, issue 5; their wording: verify.render.probes): the
project's built-ins, faulty and restricted wrappers, and third-party references are identified
from their forward alone.

Expected answers come from how each wrapper is built (its kernel, scale, mask, eps,
restriction), never from the probe's own output. Each probe runs once per module (cached).
"""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pytest
import torch
import unclaimed_variants as U

import verify.builtins as V
from verify.attention import linear_attention, softmax_attention, taylor_attention
from verify.probes import CONVENTIONS, kernel_values, probe, ratio_bound, suggested_claims
from verify.render.probes import describe, probe_json, taylor_formula
from verify.spec.variant import AttentionVariant

torch.set_num_threads(1)


# -- wrappers (each one a known computation) -------------------------------------------------
def _numerator_only(q, k, v, *, causal):
    return taylor_attention(q, k, v, order=2, causal=causal, denominator="none")


def _count(q, k, v, *, causal):
    return taylor_attention(q, k, v, order=2, causal=causal, denominator="count")


def _bthd(q, k, v, *, causal):
    t = [x.transpose(1, 2) for x in (q, k, v)]
    return softmax_attention(*t, causal=causal).transpose(1, 2)


def _causal_only(q, k, v, *, causal):
    if not causal:
        raise ValueError("causal=False is not supported")
    return softmax_attention(q, k, v, causal=True)


def _multiple_of_8(q, k, v, *, causal):
    if q.shape[-2] % 8 or k.shape[-2] % 8:
        raise ValueError(f"sequence length must be a multiple of 8, got {q.shape[-2]}")
    return softmax_attention(q, k, v, causal=causal)


def _bottom_right(q, k, v, *, causal):
    T, S = q.shape[-2], k.shape[-2]
    mask = torch.ones(T, S, dtype=torch.bool).tril(S - T) if causal else None
    return softmax_attention(q, k, v, attn_mask=mask)


def _raising(q, k, v, *, causal):
    raise RuntimeError("boom")


def _nan(q, k, v, *, causal):
    return v * float("nan")


def _ignores_causal(q, k, v, *, causal):  # fault class 9: the causal flag dropped
    return softmax_attention(q, k, v, causal=False)


def _elementwise_square(q, k, v, *, causal):  # fault class 10: element-wise square
    c = q.shape[-1] ** -0.25

    def phi(x):
        return torch.cat([torch.ones_like(x[..., :1]), c * x, (c * x) ** 2 / math.sqrt(2)], -1)

    return linear_attention(q, k, v, feature_map=phi, causal=causal)


SCALE = 0.3


def _scaled(q, k, v, *, causal):
    return softmax_attention(q, k, v, causal=causal, scale=SCALE)


def _multiplied_normalizer(q, k, v, *, causal):  # fault class 6: N * D instead of N / D
    N = taylor_attention(q, k, v, order=2, causal=causal, denominator="none")
    D = taylor_attention(q, k, torch.ones_like(v), order=2, causal=causal, denominator="none")
    return N * D


def _l2_numerator(q, k, v, *, causal):  # D7: L2 norm of the numerator, not linear in v
    return softmax_attention(q, k, v, causal=causal, denominator="l2")


def _sdpa(q, k, v, *, causal):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _chunk_based(q, k, v, *, causal):  # causal only, T a multiple of its chunk size 256
    from fla.ops.based.naive import naive_chunk_based

    return naive_chunk_based(q, k, v)


def _based(q, k, v, *, causal):  # causal only: the flag is not passed on
    from fla.ops.based.naive import naive_parallel_based

    return naive_parallel_based(q, k, v)


_PERFORMER: dict[int, object] = {}


def _performer(q, k, v, *, causal):  # performer-pytorch FastAttention, non-causal instance
    if causal:
        raise ValueError("this FastAttention instance was built with causal=False")
    from performer_pytorch import FastAttention

    d = q.shape[-1]
    if d not in _PERFORMER:
        with torch.random.fork_rng():
            torch.manual_seed(d)
            _PERFORMER[d] = FastAttention(dim_heads=d, nb_features=64, causal=False).double()
    return _PERFORMER[d].to(q.dtype)(q, k, v)


WRAPPERS = {
    "numerator-only": (_numerator_only, {}),
    "count": (_count, {}),
    "bthd": (_bthd, {"layout": "BTHD"}),
    "causal-only": (_causal_only, {}),
    "multiple-of-8": (_multiple_of_8, {}),
    "bottom-right": (_bottom_right, {}),
    "raising": (_raising, {}),
    "nan": (_nan, {}),
    "ignores-causal": (_ignores_causal, {}),
    "elementwise-square": (_elementwise_square, {}),
    "scaled": (_scaled, {}),
    "float32-inside": (U.float32_inside, {}),
    "dv-equal-d": (U.needs_dv_equal_d, {}),
    "multiplied-normalizer": (_multiplied_normalizer, {}),
    "l2-numerator": (_l2_numerator, {}),
    "sdpa": (_sdpa, {}),
    "fla-based": (_based, {}),
    "fla-chunk-based": (_chunk_based, {}),
    "performer": (_performer, {}),
}


def _variant(name: str) -> AttentionVariant:
    if name in WRAPPERS:
        fn, kw = WRAPPERS[name]
        return AttentionVariant(name=name, forward=fn, **kw)
    return V.get(name)


@functools.cache
def report_of(name: str, dtype: str = "float64"):
    if name.startswith("fla-"):
        pytest.importorskip("fla.ops.based.naive", reason="fla-core not installed")
    if name == "performer":
        pytest.importorskip("performer_pytorch", reason="performer-pytorch not installed")
    return probe(_variant(name), dtype=dtype)


# -- the project's built-ins -----------------------------------------------------------------
@pytest.mark.parametrize(
    "name, kernel",
    [
        ("softmax", "softmax"),
        ("taylor-2", "taylor:2"),
        ("taylor-3", "taylor:3"),
        ("taylor-6", "taylor:6"),
    ],
)
def test_exp_family_identified(name, kernel):
    r = report_of(name)
    assert r.kernel["verdict"] == "consistent"
    assert r.kernel["kernel"] == kernel
    assert r.kernel["scale"] == "1/sqrt(d)"  # the exp default, told apart at d = 2, 4, 8
    assert r.kernel["precision"] == "float64"
    assert r.kernel["matches"] == [f"{kernel} (scale 1/sqrt(d))"]  # no other member fits
    assert r.normalization["kind"] == "sum"
    assert r.causal_support == "both"
    assert r.qk_only.result is True
    assert r.linear_in_v.result is True
    assert r.deterministic.result is True
    assert all(c.result for c in r.independence.values())
    assert r.causal["future_perturbation_changes_past"].result is False
    assert r.causal["prefix_invariant"].result is True
    assert r.lengths["rule"] == "any T"


def test_softmax_description_and_claims():
    r = report_of("softmax")
    assert describe(r) == (
        "normalized kernel attention, κ(x) = exp(x) (softmax), scale 1/√d, causal and non-causal"
    )
    claims = suggested_claims(r)
    # causal support is never a claim from the probes: a failing causal call is a failure
    assert claims["kernel"] == "softmax" and "causal" not in claims
    assert claims["normalized"] is True and claims["scale"] == "default"
    merged = AttentionVariant(name="x", forward=_sdpa).with_claims(**claims)
    assert merged.kernel == "softmax"
    # exp: shift invariant (D6), strictly positive, full-rank 8 x 8 matrix (D9)
    assert r.injectivity["shift_invariant"].result is True
    assert r.injectivity["homogeneous"].result is False
    assert r.positivity["positive"] is True
    assert r.rank["noncausal"] == 8 and r.rank["causal"] == 8


def test_taylor2_description():
    assert describe(report_of("taylor-2")) == (
        "normalized kernel attention, κ(x) = 1 + x + x²/2 (Taylor-2 of exp), scale 1/√d, "
        "causal and non-causal"
    )


def test_taylor6_and_exp_told_apart():
    """kappa_6 and exp agree to ~1e-3 near 0; the probe scores reach |x| >= 4, where each
    misses the other's D10 bound (observed/bound > 1)."""
    soft = report_of("softmax").kernel["candidates"]
    t6 = report_of("taylor-6").kernel["candidates"]
    assert soft["softmax (1/sqrt(d))"] <= 1 < soft["taylor:6 (1/sqrt(d))"]
    assert t6["taylor:6 (1/sqrt(d))"] <= 1 < t6["softmax (1/sqrt(d))"]
    assert t6["taylor:5 (1/sqrt(d))"] > 1 and t6["taylor:7 (1/sqrt(d))"] > 1


def test_odd_order_signed_and_even_order_positive():
    # D4: kappa_3 is negative for x below its real root; kappa_2 >= 1/2
    assert report_of("taylor-3").positivity["min_weight"] < 0
    assert report_of("taylor-2").positivity["positive"] is True


def test_elu1_elementwise_not_qk_only():
    r = report_of("linear-elu1")
    assert r.kernel["verdict"] == "consistent" and r.kernel["kernel"] == "linear:elu1"
    assert r.kernel["scale"] == "1"  # element-wise maps default to scale 1
    assert r.qk_only.result is False
    assert "elu(x)+1" in describe(r) and "do not depend on q·k only" in describe(r)
    # a feature map of dimension d = 2 gives rank <= 2 without a causal mask (D9)
    assert r.rank["noncausal"] <= 2 < r.rank["causal"]


def test_relu_homogeneous_not_injective():
    r = report_of("linear-relu")
    assert r.kernel["kernel"] == "linear:relu"
    assert r.kernel["scale"] == "any"  # normalized relu weights do not see the scale
    assert r.injectivity["homogeneous"].result is True  # D9: q and 2q, same weights


def test_favor_is_noisy_exp():
    r = report_of("linear-favor")
    # closest to exp, but random features have no bound without their count: unknown, with
    # the ranking as evidence
    assert r.kernel["verdict"] == "none" and r.kernel["kernel"] == "unknown"
    assert r.kernel["resembles"] == "linear:favor"
    assert r.kernel["scale"] == "1/sqrt(d)"
    assert r.qk_only.result is False and r.positivity["positive"] is True
    assert suggested_claims(r)["kernel"] == "unknown"  # declared by the user when meant


def test_numerator_only_is_unnormalized():
    r = report_of("numerator-only")
    assert r.normalization["kind"] == "none"
    dup = r.normalization["duplication"]
    assert dup["r2"] == pytest.approx(2 * dup["r1"], rel=1e-12)  # keys twice: sum doubles
    assert r.kernel["kernel"] == "taylor:2" and r.kernel["scale"] == "1/sqrt(d)"
    assert describe(r).startswith("unnormalized kernel attention, κ(x) = 1 + x + x²/2")
    assert suggested_claims(r)["normalized"] is False


def test_count_normalization():
    r = report_of("count")
    assert r.normalization["kind"] == "count"
    assert r.kernel["kernel"] == "taylor:2"  # ratios do not see the row divisor


# -- wrappers ----------------------------------------------------------------------------------
def test_bthd_layout():
    r = report_of("bthd")
    assert r.kernel["kernel"] == "softmax" and r.causal_support == "both"
    assert describe(r) == describe(report_of("softmax"))


def test_causal_only_wrapper():
    r = report_of("causal-only")
    assert r.causal_support == "yes"
    assert "causal=False is not supported" in r.calls["causal=False"]
    assert r.kernel["kernel"] == "softmax"
    assert describe(r).endswith(", causal")
    assert "causal" not in suggested_claims(r)  # declared by the user (--causal yes) if meant


def test_length_restriction_reported():
    r = report_of("multiple-of-8")
    assert r.lengths["multiple"] == 8
    assert r.lengths["smallest_failing"] == 1
    assert r.lengths["rule"] == "T must be a multiple of 8"
    assert "multiple of 8" in r.lengths["tested"]["1"]
    assert r.lengths["tested"]["16"] == "ok" and r.lengths["tested"]["12"] != "ok"
    assert r.kernel["kernel"] == "softmax"  # probes ran at allowed lengths
    assert r.causal["prefix_invariant"].result is True
    assert suggested_claims(r)["length_multiple"] == 8
    assert describe(r).endswith("T must be a multiple of 8")


def test_alignment_bottom_right_and_top_left():
    br = report_of("bottom-right")
    assert br.cross["alignment"] == "bottom-right"
    assert br.cross["causal"]["2,4"] == "bottom-right"
    assert suggested_claims(br)["causal_alignment"] == "bottom-right"
    sd = report_of("sdpa")  # SDPA: top-left (fault class 7: T = 1, S = 2 sees key 0 only)
    assert sd.cross["causal"]["1,2"] == "top-left"
    assert sd.cross["alignment"] == "top-left"
    # the project's own API rejects causal T != S
    assert "rejected" in report_of("softmax").cross["detail"]


@pytest.mark.parametrize("name, text", [("raising", "boom"), ("nan", "NaN")])
def test_broken_variant_reported_not_raised(name, text):
    r = report_of(name)
    assert r.causal_support is None
    assert r.kernel["verdict"] == "not run"
    assert text in r.lengths["tested"]["1"]
    assert describe(r).startswith("unusable") and text in describe(r)
    assert suggested_claims(r) == {"kernel": "unknown"}
    json.dumps(r.to_json(), allow_nan=False)


def test_ignored_causal_flag_caught():
    r = report_of("ignores-causal")
    assert r.causal["causal_masks_future"].result is False
    assert r.causal["future_perturbation_changes_past"].result is True
    assert r.causal["prefix_invariant"].result is False
    assert r.causal_support == "no"
    assert "the causal flag is ignored" in describe(r)


def test_elementwise_square_taylor_not_identified():
    """Fault class 10: the element-wise-square map is kappa_2 only at d = 1; its weights change
    under a rotation that keeps q.k, and no family member fits."""
    r = report_of("elementwise-square")
    assert r.qk_only.result is False
    assert r.kernel["verdict"] == "none"
    assert "none of the known kernels" in describe(r)
    assert suggested_claims(r)["kernel"] == "unknown"


def test_multiplied_normalizer_not_called_normalized():
    """Fault class 6: rows scaled by D instead of 1/D keep kappa_2's ratios but are no row
    normalization the probes know; the claims leave ``normalized`` unset."""
    r = report_of("multiplied-normalizer")
    assert r.normalization["kind"] == "other"
    assert r.kernel["kernel"] == "taylor:2"
    assert "normalized" not in suggested_claims(r)
    assert "other than the kernel sum" in describe(r)


def test_norm_of_numerator_is_not_linear_in_v():
    r = report_of("l2-numerator")
    assert r.linear_in_v.result is False
    assert r.kernel["verdict"] == "not run"
    assert r.normalization["kind"] == "other"
    assert describe(r).startswith("attention whose output is not linear in v")


def test_constant_scale_fitted():
    r = report_of("scaled")
    assert r.kernel["kernel"] == "softmax" and r.kernel["scale"] == "fitted"
    for d, (lo, hi) in r.kernel["scale_interval_by_d"].items():
        assert lo <= SCALE <= hi, d
    assert suggested_claims(r)["scale"] == SCALE


def test_internal_float32_detected():
    r = report_of("float32-inside")
    assert r.output_precision == "float32"  # every float64 output is a float32 number
    assert r.kernel["kernel"] == "softmax" and r.kernel["precision"] == "float32"
    assert r.linear_in_v.result is True and r.qk_only.result is True
    assert report_of("softmax").output_precision == "float64"
    assert "float32 accuracy" in describe(r)


def test_values_read_in_blocks_when_dv_must_equal_d():
    r = report_of("dv-equal-d")
    assert r.kernel["kernel"] == "softmax" and r.normalization["kind"] == "sum"


@pytest.mark.parametrize(
    "name, kernel, dtype",
    [
        ("taylor-2", "taylor:2", "float32"),
        ("taylor-2", "taylor:2", "bfloat16"),
        ("softmax", "softmax", "float16"),
    ],  # float16: small exp weights are subnormal outputs
)
def test_low_precision_probe(name, kernel, dtype):
    r = report_of(name, dtype)
    assert r.kernel["kernel"] == kernel and r.kernel["precision"] == dtype
    assert r.kernel["scale"] == "1/sqrt(d)"


# -- third-party references --------------------------------------------------------------------
def test_fla_naive_parallel_based():
    """fla's naive_parallel_based: kappa_2 at scale 1/sqrt(d), causal only (no flag), and
    1e-6 added to the denominator (fla-core 0.6, fla/ops/based/naive.py)."""
    r = report_of("fla-based")
    assert r.kernel["kernel"] == "taylor:2" and r.kernel["scale"] == "1/sqrt(d)"
    assert r.normalization["kind"] == "sum+eps"
    lo, hi = r.normalization["eps_interval"]
    assert lo <= 1e-6 <= hi
    assert r.causal_support == "yes" and r.causal["flag_ignored"].result is True
    claims = suggested_claims(r)
    assert claims["eps"] == 1e-6 and claims["kernel"] == "taylor:2" and "causal" not in claims
    AttentionVariant(name="based", forward=_based).with_claims(**claims)
    assert "denominator + 1e-06" in describe(r)


def test_fla_naive_chunk_based_length_restriction():
    """fla's naive_chunk_based: the same kappa_2 + 1e-6 computation in chunks of 256 tokens:
    T must be a multiple of 256 (fla-core 0.6, fla/ops/based/naive.py), found by the length scan."""
    r = report_of("fla-chunk-based")
    assert r.lengths["multiple"] == 256 and r.lengths["smallest_failing"] == 1
    assert r.lengths["tested"]["512"] == "ok" and r.lengths["tested"]["257"] != "ok"
    assert r.kernel["kernel"] == "taylor:2" and r.normalization["kind"] == "sum+eps"
    assert r.causal_support == "yes" and r.causal["prefix_invariant"].result is True
    assert describe(r).endswith("T must be a multiple of 256")


def test_performer_fast_attention_is_favor_like():
    """performer-pytorch FastAttention: positive orthogonal random features with the data
    normalizer d^-1/4 on q and k (scale 1/sqrt(d)), non-causal as constructed."""
    r = report_of("performer")
    assert r.kernel["verdict"] == "none" and r.kernel["resembles"] == "linear:favor"
    assert r.kernel["scale"] == "1/sqrt(d)"
    assert r.causal_support == "no" and r.qk_only.result is False


def test_sdpa_is_softmax():
    r = report_of("sdpa")
    assert r.kernel["kernel"] == "softmax" and r.kernel["scale"] == "1/sqrt(d)"
    assert r.normalization["kind"] == "sum"


# -- pieces --------------------------------------------------------------------------------------
def test_report_json_round_trip():
    r = report_of("taylor-2")
    assert r.description == ""  # the probes measure; verify.render.probes words the sentence
    text = json.dumps(probe_json(r), allow_nan=False)
    back = json.loads(text)
    assert back["kernel"]["kernel"] == "taylor:2"
    # the same keys in the same order, and the measured fit the card shows
    assert list(back) == [*r.to_json(), "identification"]
    assert back["description"] == describe(r) == describe(back)
    assert back["identification"].startswith("taylor:2 (scale 1/sqrt(d)): weights within")


def test_bad_arguments():
    with pytest.raises(TypeError, match="variant"):
        probe(_sdpa)
    with pytest.raises(ValueError, match="dtype"):
        probe(V.get("softmax"), dtype="float8")
    with pytest.raises(ValueError, match="device"):
        probe(V.get("softmax"), device="tpu")


def test_taylor_formula():
    assert taylor_formula(0) == "1"
    assert taylor_formula(3) == "1 + x + x²/2 + x³/6"


def test_kernel_values_conventions():
    q = np.array([[1.0, 2.0]])
    k = np.array([[0.5, -1.0], [2.0, 0.0]])
    x = q @ k.T
    assert np.allclose(kernel_values("taylor:2", 0.5, q, k), 1 + 0.5 * x + (0.5 * x) ** 2 / 2)
    relu = np.maximum(q, 0) @ np.maximum(k, 0).T
    assert np.allclose(kernel_values("linear:relu", 1.0, q, k), relu)
    assert set(CONVENTIONS) == {"1/sqrt(d)", "1/d", "d^-1/4", "1"}


def test_ratio_bound_holds_at_the_worst_corner():
    """Perturb numerators by +-b (the extreme allowed) and divide by a common rounded D in
    float32: the measured ratio stays within ratio_bound."""
    rng = np.random.default_rng(0)
    u = 2.0**-24
    for _ in range(200):
        W = rng.uniform(0.1, 5.0, size=6)
        b = W * rng.uniform(0, 1e-3, size=6)
        ref = int(np.argmax(W))
        signs = rng.choice([-1.0, 1.0], size=6)
        N = W + signs * b
        D = np.float32(N.sum())
        w = (N.astype(np.float32) / D).astype(np.float64)
        measured = w / w[ref]
        beta = ratio_bound(W, b + W * u, ref, u)  # + the float32 rounding of N itself
        assert np.all(np.abs(measured - W / W[ref]) <= beta)
    assert np.all(np.isinf(ratio_bound(np.array([1.0, 2.0]), np.array([1.0, 3.0]), 1, u)))


def test_ratio_bound_covers_subnormal_outputs():
    """Outputs a_s + eta_s with |eta_s| <= eta (subnormal rounding) stay within the bound."""
    rng = np.random.default_rng(1)
    u, eta = 2.0**-11, 2.0**-25  # float16
    for _ in range(200):
        W = np.concatenate([[1.0], rng.uniform(1e-9, 1e-6, size=5)])
        b = W * 1e-3
        a = W + rng.choice([-1.0, 1.0], size=6) * b
        w = a + rng.choice([-1.0, 1.0], size=6) * eta
        beta = ratio_bound(W, b, 0, u, eta, w[0])
        assert np.all(np.abs(w / w[0] - W) <= beta)
        assert np.any(np.abs(w / w[0] - W) > ratio_bound(W, b, 0, u))  # eta matters here


@pytest.mark.parametrize("name", ["cosine_softmax", "retention_decay"])
def test_no_family_fits_says_unknown(name):
    """Cosine-normalized softmax and a retention-style decay fit no known family: the probes say
    unknown with their evidence (the measured fit of every candidate), never the nearest one; the
    norm probe (same q.k, another |q|) sees that cosine weights are not a function of q.k."""

    r = probe(AttentionVariant(name=name, forward=getattr(U, name)), dtype="float64")
    assert r.kernel["verdict"] == "none" and r.kernel["kernel"] == "unknown", r.kernel
    assert r.qk_only.result is False, r.qk_only.detail
    assert r.kernel.get("candidates"), "the measured fit of each candidate is listed"
    assert suggested_claims(r)["kernel"] == "unknown"
