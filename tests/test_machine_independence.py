"""The suite's own verification does not depend on the machine (README "Reports").

- ``roundoff_units`` never divides by an underflowed product (float64, a reference of 0 or a
  subnormal);
- ``linearity-in-v`` holds for every summation order the standard model allows: the recurrent
  Taylor-6 form emulated in float32 with sequential, reversed, pairwise and 16-lane (an
  AVX-512 register of float32) sums of the state and of the read stays within the check's
  bound, a twin storing its state in bfloat16 fails it, and the kernel-free threshold the
  check fell back to before (a value of 2^-8 put the example outside the D10 model) is
  exceeded by the correct computation;
- draws do not depend on floating-point results: the score maximum that scales q and k is
  summed in index order, the exp-overflow rejection is decided exactly;
- ``report --check`` compares measured ratios within the stated factor and everything else
  exactly; a shrinker follows only failures beyond that factor.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from derivations.rounding import underflow_abs_error_log2, unit_roundoff
from verify import builtins as variants
from verify.attention import taylor_features
from verify.properties import weights
from verify.properties.support.base import MACHINE_RATIO_FACTOR, RunContext, run_property
from verify.properties.support.common import Example
from verify.properties.support.inputs import make_inputs, tensor_like
from verify.properties.support.observe import np64, worst
from verify.properties.support.structure import (
    effective_weights,
    kernel_free_gap,
    model_bound,
    reorder_bound,
)
from verify.spec.results import NotApplicable
from verify.spec.variant import AttentionVariant

# ------------------------------------------------------------------ roundoff_units (D10)


def test_roundoff_units_with_zero_and_subnormal_references_in_float64():
    from verify.exact.errors import roundoff_units

    u = Fraction(unit_roundoff("float64"))  # D10: 2^-53
    eta = Fraction(2) ** underflow_abs_error_log2("float64")  # D10: 2^-1075
    for ref in (0.0, 5e-324, 2.2e-310, -2.2e-310):
        assert roundoff_units(0.0, ref, "float64") == 0.0
        expected = Fraction(2.0**-1000) / (u * max(Fraction(abs(ref)), eta))
        assert roundoff_units(2.0**-1000, ref, "float64") == float(expected)
    assert roundoff_units(5e-324, 0.0, "float64") == 2.0**54  # 2^-1074 / (2^-53 2^-1075)
    assert roundoff_units(2.0**-50, 1.0, "float64") == 8.0
    assert roundoff_units(1e300, 0.0, "float64") == math.inf  # past float64, not an error
    assert roundoff_units(math.inf, 1.0, "float64") == math.inf
    assert roundoff_units(1.0, math.inf, "float64") == 0.0
    assert math.isnan(roundoff_units(math.nan, 1.0, "float64"))
    # the faulty twin: u * max(|ref|, eta) in float64 underflows to 0 for a subnormal reference
    with pytest.raises(ZeroDivisionError):
        _ = 2.0**-1000 / (2.0**-53 * max(2.2e-310, 2.0**-1075))


def test_compare_names_a_subnormal_reference_element():
    from verify.exact.errors import ErrorBound, compare

    ref = np.array([[[[2.2e-310]]]])
    eb = ErrorBound(np.array([[[[1e-300]]]]), ref, "float64", "float64", 1.0, "test")
    obs = compare(ref + 1e-305, eb)
    assert obs.observed == pytest.approx(1e-305) and "u of float64" in obs.detail


# ------------------------------------------------------------------ linearity-in-v


def _ordered_sum(terms: list[np.ndarray], order: str) -> np.ndarray:
    """sum of float32 arrays, each addition rounded to float32, in one association."""
    if order == "sequential":
        acc = terms[0]
        for t in terms[1:]:
            acc = acc + t
        return acc
    if order == "reversed":
        return _ordered_sum(terms[::-1], "sequential")
    if order == "pairwise":
        if len(terms) == 1:
            return terms[0]
        half = len(terms) // 2
        return _ordered_sum(terms[:half], "pairwise") + _ordered_sum(terms[half:], "pairwise")
    if order == "lanes16":  # 16 vector lanes accumulate strided terms, then a tree of lanes
        lanes = [_ordered_sum(terms[j::16], "sequential") for j in range(min(16, len(terms)))]
        return _ordered_sum(lanes, "pairwise")
    raise ValueError(order)


ORDERS = ("sequential", "reversed", "pairwise", "lanes16")


def emulated_recurrent(order: str, *, state_dtype=None, N: int = 6):
    """The recurrent Taylor-N form in numpy float32 (D2: S_t = sum_{s<=t} phi(k_s) [v_s, 1]^T,
    out_t = phi(q_t) . S_t), every sum in ``order``; ``state_dtype`` (a torch dtype) rounds
    the state once more (the faulty twin)."""

    def forward(q, k, v, *, causal, denominator="sum"):
        fq = taylor_features(q, N).numpy()  # (B, H, T, m) float32, sqrt(c) absorbed (D1)
        fk = taylor_features(k, N).numpy()
        vv = v.numpy()
        va = np.concatenate([vv, np.ones_like(vv[..., :1])], -1)
        prods = fk[..., :, :, None] * va[..., :, None, :]  # (B, H, S, m, d_v + 1), rounded
        T, S, d_v = q.shape[2], k.shape[2], v.shape[-1]
        out = np.empty((*q.shape[:2], T, d_v + 1), dtype=np.float32)
        for t in range(T):
            keys = range(t + 1) if causal else range(S)
            state = _ordered_sum([prods[:, :, s] for s in keys], order)
            if state_dtype is not None:
                state = torch.from_numpy(state).to(state_dtype).float().numpy()
            terms = fq[:, :, t, :, None] * state  # (B, H, m, d_v + 1)
            out[:, :, t] = _ordered_sum([terms[:, :, j] for j in range(terms.shape[2])], order)
        num, den = out[..., :d_v], out[..., d_v:]
        if denominator == "count":
            n = np.array([[t + 1 if causal else S] for t in range(T)], dtype=np.float32)
            num = num / n
        elif denominator == "sum":
            num = num / den
        return torch.from_numpy(np.ascontiguousarray(num))

    return forward


def emulated_variant(name: str, order: str, **kw) -> AttentionVariant:
    return AttentionVariant(
        name=name,
        forward=variants.get("taylor-6").forward,
        kernel="taylor:6",
        forms={f"recurrent/{order}": emulated_recurrent(order, **kw)},
        denominators=("sum", "none", "count"),
        dtypes=("float32",),
    )


# the counterexample both machines reported (taylor-6, float32, recurrent/symmetric, count)
_Q = [[[[0.7516707181930542]], [[0.34385594725608826]]]]
_K = [[[[-1.9650641679763794]], [[-2.2299370765686035]]]]
_V1 = np.array([35.0, 35.0]).reshape(1, 2, 1, 1) / 1024
_V2 = np.array([85.0, 4.0]).reshape(1, 2, 1, 1) / 1024  # 4/1024 = 2^-8: outside the model


def _example(q, k, v1, v2, a, b, path, mode, causal=True):
    x = make_inputs(
        torch.tensor(q, dtype=torch.float32),
        torch.tensor(k, dtype=torch.float32),
        torch.zeros(v1.shape, dtype=torch.float32),
        causal=causal,
    )
    choices = {"a": a, "b": b, "path": path, "denominator": mode, "_v1": v1, "_v2": v2}
    return Example(x, choices)


def test_the_kernel_free_threshold_misses_the_recurrent_taylor_terms():
    """The cause of the reported failure: with a value of 2^-8 one of the three evaluations
    is outside the D10 model and the check used D11's kernel-free threshold alone, which
    charges (S + 1)(d + 1) = 4 products relative to |W| |v|; the recurrent Taylor-6 form
    rounds 7 feature products relative to kappa_6(c |q||k|) |v| (19 times |W| |v| here)."""
    variant, ctx = variants.get("taylor-6"), RunContext(dtype="float32")
    ex = _example(_Q, _K, _V1, _V2, -1.0, -2.0, "recurrent/symmetric", "count")
    x, (a, b) = ex.inputs, (-1.0, -2.0)
    w = a * _V1 + b * _V2
    xs = [dataclasses.replace(x, v=tensor_like(arr, x)) for arr in (_V1, _V2, w)]
    fn = weights.path_callable(variant, "recurrent/symmetric")
    kw = {"denominator": "count"}
    outs = [np64(fn.forward(xi.q, xi.k, xi.v, causal=True, **kw)) for xi in xs]
    residual = weights._exact_residual(outs[2], outs[0], outs[1], a, b)
    W = effective_weights(fn, x, kw, causal=True)
    T = [reorder_bound(W, np64(xi.v), o, "float32", 1) / 2 for xi, o in zip(xs, outs)]
    old_bound = abs(a) * T[0] + abs(b) * T[1] + T[2]
    assert (residual > old_bound).any()  # the old statement fails a correct computation
    assert kernel_free_gap(variant, "recurrent") and kernel_free_gap(variant, "chunked")
    assert kernel_free_gap(variant, "parallel") is None
    assert kernel_free_gap(variants.get("softmax"), "any") is None
    with pytest.raises(NotApplicable, match="kernel-free threshold does not apply"):
        model_bound(variant, xs[1], ctx, mode="count", form="recurrent", factor=1.0)
    # the D10 feature-form bound (what the check now states) holds on the same evaluations
    from verify.exact import errors, oracle

    total = 0.0
    for coef, xi, o in zip((abs(a), abs(b), 1.0), xs, outs):
        ref = oracle.reference(xi.q, xi.k, xi.v, kernel="taylor:6", causal=True,
                               denominator="count")  # fmt: skip
        eb = errors.attention_error_bound("taylor:6", xi.q, xi.k, xi.v, dtype="float32",
                                          exact=ref, causal=True, denominator="count",
                                          form="recurrent", basis="symmetric")  # fmt: skip
        assert (np.abs(o - ref.float64) <= eb.bound).all()
        total = total + coef * eb.bound
    assert (residual <= total).all()


def test_the_grid_keeps_every_value_inside_the_model():
    """M = 32 for Taylor-6 in float32: every nonzero entry of v1, v2 and a v1 + b v2 is a
    multiple of 1/64 = 2^-6, above the model's level (0.0102 for degree-13 products)."""
    from verify.exact.errors import outside_model

    variant, ctx = variants.get("taylor-6"), RunContext(dtype="float32")
    floor = weights._model_floor(variant, ctx)
    M = weights._grid_size("float32", floor)
    assert (floor, M) == (2.0**-6, 32)
    one = torch.ones(1, 1, 1, 1)
    assert outside_model("taylor:6", one, one, one / (2 * M), dtype="float32", scale=1.0) is None
    assert outside_model("taylor:6", one, one, one / (4 * M), dtype="float32", scale=1.0)
    assert weights._grid_size("float32", weights._model_floor(variants.get("softmax"), ctx)) == 1024


def _grid_examples(rng, n: int):
    """Deterministic examples on the property's grid (M = 32): T = S in 1..6, d in 1..3."""
    out = []
    for _ in range(n):
        T, d, dv, H = int(rng.integers(1, 7)), int(rng.integers(1, 4)), int(rng.integers(1, 4)), 2
        q = np.round(rng.uniform(-1.5, 1.5, (1, H, T, d)), 2)
        k = np.round(rng.uniform(-1.5, 1.5, (1, H, T, d)), 2)
        q[np.abs(q) < 0.05], k[np.abs(k) < 0.05] = 0.5, -0.5  # inside the model
        v1 = rng.integers(-32, 33, (1, H, T, dv)) / 32.0
        v2 = rng.integers(-32, 33, (1, H, T, dv)) / 32.0
        a, b = float(rng.choice([1.0, 2.0, 0.5, -1.0])), float(rng.choice([1.0, -2.0, -0.5]))
        out.append((q.tolist(), k.tolist(), v1, v2, a, b))
    return out


@pytest.mark.parametrize("order", ORDERS)
def test_linearity_bound_holds_for_every_summation_order(order):
    """The check's own bound (``weights._linear_check``) on float32 emulations of the
    recurrent Taylor-6 form summing in four associations; a bfloat16 state fails it."""
    ctx = RunContext(dtype="float32")
    good = emulated_variant(f"emulated-{order}", order)
    twin = emulated_variant(f"bf16-state-{order}", order, state_dtype=torch.bfloat16)
    path = f"recurrent/{order}"
    ratios, twin_ratios = [], []
    for q, k, v1, v2, a, b in _grid_examples(np.random.default_rng(7), 6):
        for mode in ("count", "sum"):
            ex = _example(q, k, v1, v2, a, b, path, mode)
            ratios.append(worst(weights._linear_check(good, ex, ctx)).ratio)
            twin_ratios.append(worst(weights._linear_check(twin, ex, ctx)).ratio)
    assert max(ratios) <= 1.0, ratios
    assert max(twin_ratios) > 1.0, twin_ratios


def test_summation_orders_really_differ():
    """The four emulations are different computations: some outputs differ bitwise."""
    q, k, v1, *_ = _grid_examples(np.random.default_rng(7), 6)[-1]
    q, k, v = (torch.tensor(np.asarray(a), dtype=torch.float32) for a in (q, k, v1))
    outs = {o: emulated_recurrent(o)(q, k, v, causal=False).numpy() for o in ORDERS}
    assert len({o.tobytes() for o in outs.values()}) > 1


def test_linearity_property_passes_an_avx512_like_order_and_fails_the_twin(no_shrink):
    ctx = RunContext(dtype="float32", max_examples=6)
    res = run_property(weights.LINEARITY_IN_V, emulated_variant("lanes", "lanes16"), ctx)
    assert res.status == "pass" and res.max_ratio <= 1.0, (res.reason, res.counterexample)
    twin = emulated_variant("bf16", "lanes16", state_dtype=torch.bfloat16)
    res = run_property(weights.LINEARITY_IN_V, twin, ctx)
    assert res.status == "fail" and "recurrent/lanes16" in res.reason, res.reason


# ------------------------------------------------------------------ draws


def test_score_maximum_is_summed_in_index_order(monkeypatch):
    """The factor that scales q and k comes from max |q.k| summed in index order: drawing with
    a numpy einsum that sums in another order gives the same inputs, bit for bit."""
    from hypothesis import given, seed, settings

    from verify import strategies

    def draws():
        seen = []

        @seed(5)
        @settings(max_examples=8, derandomize=True, database=None)
        @given(strategies.attention_inputs(radius=3.0, dtype=torch.float64))
        def t(x):
            seen.append(b"".join(a.numpy().tobytes() for a in (x.q, x.k, x.v)))

        t()
        return seen

    first = draws()
    original = np.einsum

    def reversed_einsum(spec, *ops, **kw):  # the same products, summed from the last one
        if spec == "bhtd,bhsd->bhts":
            q, k = ops
            return original(spec, q[..., ::-1], k[..., ::-1], **kw)
        return original(spec, *ops, **kw)

    monkeypatch.setattr(np, "einsum", reversed_einsum)
    assert draws() == first


def test_exp_overflow_rejection_is_exact():
    """Scores exactly at safe_exp_radius are representable, one ulp above are not, whatever
    the float64 evaluation of the scores says (``calls._score_exceeds``)."""
    from verify.properties.support.calls import _score_exceeds

    limit = 44.0
    q = torch.tensor([[[[limit, 0.0]]]], dtype=torch.float64)
    k = torch.tensor([[[[1.0, 0.0]]]], dtype=torch.float64)
    s_low = torch.tensor([[[[math.nextafter(limit, 0)]]]], dtype=torch.float64)
    s_high = torch.tensor([[[[math.nextafter(limit, 99)]]]], dtype=torch.float64)
    for s in (s_low, s_high):  # a float64 score off by one ulp either way decides nothing
        assert not _score_exceeds(s, q, k, 1.0, limit)
    assert float(s_high.max()) > limit  # the twin: the float decision rejects the example
    q2 = torch.tensor([[[[math.nextafter(limit, 99), 0.0]]]], dtype=torch.float64)
    assert _score_exceeds(s_low, q2, k, 1.0, limit)


# ------------------------------------------------------------------ report --check


def test_check_accepts_ratios_within_the_factor_and_rejects_beyond():
    from verify.render.compare import RATIO_FACTOR, diff_json

    assert RATIO_FACTOR == MACHINE_RATIO_FACTOR
    cell = {"status": "pass", "examples": 10, "max_ratio": 0.3, "loose": False, "reason": ""}
    inside = dict(cell, max_ratio=0.3 * RATIO_FACTOR * 0.99)
    assert diff_json(inside, cell, measured=True) == []
    assert diff_json(dict(cell, max_ratio=0.3 / (RATIO_FACTOR * 0.99)), cell, measured=True) == []
    assert diff_json(dict(cell, max_ratio=0.3 * RATIO_FACTOR * 1.01), cell, measured=True)
    assert diff_json(dict(cell, max_ratio=0.3 / (RATIO_FACTOR * 1.01)), cell, measured=True)
    # rounding noise far below the bound: one machine exactly 0, the other a few ulps
    small = dict(cell, max_ratio=0.0, loose=True)
    assert diff_json(dict(cell, max_ratio=0.01, loose=False), small, measured=True) == []
    assert diff_json(dict(cell, max_ratio=0.5, loose=False), small, measured=True)
    # ``loose`` only where it follows the ratio; statuses, counts, examples exactly
    assert diff_json(dict(cell, loose=True), cell, measured=True)
    assert diff_json(dict(cell, status="fail"), cell, measured=True)
    assert diff_json(dict(cell, examples=9), cell, measured=True)
    assert diff_json(dict(cell, counterexample="q=[1.0]"), dict(cell, counterexample="q=[2.0]"))


def test_check_masks_measured_numbers_in_reasons_only():
    from verify.render.compare import diff_json

    why = "observed {} > bound {} (ratio {}, derived) at ({}, 0, 0, 0); recurrent/count: a = -1.0"
    old = {"status": "fail", "reason": why.format("3.539e-08", "2.585e-08", "1.37", 0)}
    new = {"status": "fail", "reason": why.format("3.6e-08", "2.5e-08", "1.44", 1)}
    assert diff_json(new, old, measured=True) == []
    assert diff_json(dict(new, reason=new["reason"].replace("recurrent", "chunked")), old)
    assert diff_json({"statement": "N = 0..12"}, {"statement": "N = 0..11"})


def test_check_compares_measured_reports_within_the_factor_declared_claims_exactly():
    from verify.render.compare import compare_dirs, diff_json, measured_report

    card = {"claims": {"eps": 1e-6}, "adapter": {"max_abs_diff": 2e-3}, "counts": {"pass": 3}}
    moved = {"claims": {"eps": 1e-6}, "adapter": {"max_abs_diff": 5e-3}, "counts": {"pass": 3}}
    assert measured_report("variants/x.json") and not measured_report("derivations.json")
    assert diff_json(moved, card, measured=True) == []
    assert diff_json(dict(moved, claims={"eps": 2e-6}), card, measured=True)
    assert diff_json(dict(moved, counts={"pass": 2}), card, measured=True)
    assert diff_json(dict(moved, adapter={"max_abs_diff": 2e-3 * 17}), card, measured=True)
    # an exported number of a derivation must be equal
    assert diff_json({"rows": [[0.25]]}, {"rows": [[0.2500001]]}, measured=False)
    assert callable(compare_dirs)


def test_shrinking_follows_failures_beyond_the_machine_factor_only():
    """A shrink candidate failing by less than the factor is not a counterexample (it may pass
    elsewhere); the first failure and failures beyond the factor are."""
    from verify.properties.support.base import _steers_shrinking
    from verify.spec.results import Observation

    def obs(r):
        return Observation(r, 1.0, "derived", "", "")

    state: dict = {}
    assert _steers_shrinking(obs(1.2), "first", state)
    state.update(failure=("first", obs(1.2), ""), first_failure=repr("first"))
    assert _steers_shrinking(obs(1.2), "first", state)
    assert not _steers_shrinking(obs(MACHINE_RATIO_FACTOR * 0.9), "other", state)
    assert _steers_shrinking(obs(MACHINE_RATIO_FACTOR * 1.1), "other", state)
