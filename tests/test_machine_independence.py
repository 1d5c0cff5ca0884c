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
from verify.spec.results import NotApplicable, Observation
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


# ------------------------------------------------------------------ checks: no float-decided draw
#
# A rejected draw (NotApplicable -> hypothesis.assume(False)) changes every later draw of its
# property/dtype cell. Decisions that rest on computed floats (a rounding bound, a variant's or
# a float64 reference's output) therefore raise NoStatement (the runner counts the example and
# rejects nothing) or are not made at all; rejections are decided exactly from the inputs.


def _toy_property(decide):
    """A property over floats in [0, 1] whose check calls ``decide(x)`` and records the draw."""
    from hypothesis import strategies as st

    from verify.properties.support.base import Property

    seen: list[float] = []

    def check(variant, x, ctx):
        seen.append(x)
        decide(x)
        return Observation(0.0, 1.0, "derived")

    prop = Property(
        id="toy-machine-independence", statement="toy", derivation="contract",
        applies=lambda v, c: None, examples=lambda v, c: st.floats(0.0, 1.0), check=check,
    )  # fmt: skip
    return prop, seen


def test_no_statement_keeps_every_draw_and_counts_the_example():
    """Machine A decides nothing, machine B finds no statement for some draws (a float
    decision): the same draws reach the check and the same number of examples is reported;
    the faulty twin (the same decision rejecting the draw) changes the later draws."""
    from verify.spec.results import NoStatement

    variant, ctx = variants.get("softmax"), RunContext(dtype="float64", max_examples=12)

    def never(x):
        return None

    def no_statement(x):
        if 0.25 < x < 0.75:
            raise NoStatement("a float decision")

    def rejected(x):
        if 0.25 < x < 0.75:
            raise NotApplicable("a float decision")

    runs = {}
    for name, decide in (("A", never), ("B", no_statement), ("twin", rejected)):
        prop, seen = _toy_property(decide)
        runs[name] = (run_property(prop, variant, ctx), seen)
    (res_a, seen_a), (res_b, seen_b), seen_t = runs["A"], runs["B"], runs["twin"][1]
    unstated = sum(0.25 < x < 0.75 for x in seen_b)
    assert unstated > 0  # the decision fired on machine B
    assert seen_b == seen_a and res_b.examples == res_a.examples == 12
    assert res_b.status == res_a.status == "pass" and len(res_b.ratios) == 12 - unstated
    assert f"{unstated} of 12 examples without a statement" in res_b.detail
    assert seen_t != seen_a  # the twin: a rejection changes the draws


def test_no_statement_on_every_example_is_a_skip_with_the_reason():
    from verify.properties.support.base import NO_EXAMPLE_REASONS
    from verify.spec.results import NoStatement

    def always(x):
        raise NoStatement("no element has a finite bound")

    prop, seen = _toy_property(always)
    res = run_property(prop, variants.get("softmax"), RunContext(max_examples=5))
    assert res.status == "skip" and res.examples == 5 == len(seen)
    assert res.reason.startswith(NO_EXAMPLE_REASONS) and "finite bound" in res.reason


def _bound_override(monkeypatch, module, make):
    """``module.exact_and_bound`` with its bound replaced by ``make(eb.bound)``: a bound on the
    other side of a decision's threshold, as a machine rounding differently may compute it."""
    real = module.exact_and_bound

    def fake(variant, x, ctx, **kw):
        ref, eb = real(variant, x, ctx, **kw)
        bound = np.broadcast_to(np.asarray(make(eb.bound), dtype=np.float64), eb.bound.shape)
        return ref, dataclasses.replace(eb, bound=bound.copy())

    monkeypatch.setattr(module, "exact_and_bound", fake)


#: a bound just below and just above a threshold (the decision of the old rules flips)
STRADDLE = (1 - 1e-9, 1 + 1e-9)


def _same(a, b) -> None:
    """Two checks' results: the same observations (where, observed) or the same exception."""
    if isinstance(a, Exception) or isinstance(b, Exception):
        assert type(a) is type(b), (a, b)
        return
    a, b = (r if isinstance(r, list) else [r] for r in (a, b))
    assert [(o.where, o.observed) for o in a] == [(o.where, o.observed) for o in b]


def _outcome(check, *args):
    try:
        return check(*args)
    except NotApplicable as exc:
        return exc


def test_shift_check_does_not_rest_on_the_bound(monkeypatch):
    """taylor-not-shift-invariant: with the two bounds summing to exactly half the exact change
    (times 1 -+ 1e-9) the old rule (exact > 2 bound, else NotApplicable) flips; the check
    reports the same observation on both sides, and an exactly unchanged weight is rejected."""
    from verify.properties import shift
    from verify.properties.support.common import exact_and_bound
    from verify.properties.support.inputs import identity_values
    from verify.properties.support.observe import mp_diff

    variant, ctx = variants.get("taylor-1"), RunContext(dtype="float64")
    q = torch.tensor([[[[1.0]]]], dtype=torch.float64)
    k = torch.tensor([[[[0.5], [-0.25]]]], dtype=torch.float64)
    ex = shift.ShiftExample(make_inputs(q, k, k.clone(), causal=False), [np.ones((1, 1, 1, 1))])
    x0 = identity_values(ex.inputs)
    x1 = shift._shifted(x0, ex.shifts[0], ctx)
    r0, _ = exact_and_bound(variant, x0, ctx, denominator="sum")
    r1, _ = exact_and_bound(variant, x1, ctx, denominator="sum")
    exact = mp_diff(r1.exact, r0.exact)
    assert exact.max() > 0
    results, old = [], []
    for f in STRADDLE:
        _bound_override(monkeypatch, shift, lambda b, f=f: exact / 4 * f)
        results.append(_outcome(shift._taylor_shift_check, variant, ex, ctx))
        old.append(bool((exact > 2 * (exact / 2 * f)).any()))  # the old rule
        monkeypatch.undo()
    assert old == [True, False]  # the twin: the old rule's rejection flips
    assert not isinstance(results[0], Exception)
    _same(*results)
    zero = shift.ShiftExample(ex.inputs, [np.zeros((1, 1, 1, 1))])  # u = 0: nothing changes
    got = _outcome(shift._taylor_shift_check, variant, zero, ctx)
    assert type(got) is NotApplicable


def test_injectivity_check_does_not_rest_on_the_bound(monkeypatch):
    from verify.properties import injectivity as inj
    from verify.properties.support.common import exact_and_bound
    from verify.properties.support.observe import mp_diff

    variant, ctx = variants.get("softmax"), RunContext(dtype="float64")
    ex = inj.QueryPairExample(keys=[[0.5], [-0.25], [1.0]], q=[1.0], direction=[1.0], t=0.5)
    x = inj._pair_inputs(ex, [1.5], ctx)
    ref, _ = exact_and_bound(variant, x, ctx, denominator="sum")
    exact = mp_diff(ref.exact[0, 0, 1], ref.exact[0, 0, 0])  # (S,)
    results, old = [], []
    for f in STRADDLE:
        _bound_override(monkeypatch, inj, lambda b, f=f: exact / 4 * f)  # rounding = exact/2 f
        results.append(_outcome(inj._injectivity_check, variant, ex, ctx))
        old.append(bool((exact > 2 * (exact / 2 * f)).any()))
        monkeypatch.undo()
    assert old == [True, False]
    assert not isinstance(results[0], Exception)
    _same(*results)
    same_q = inj.QueryPairExample(ex.keys, ex.q, direction=[0.0], t=0.5)  # q' = q
    assert type(_outcome(inj._injectivity_check, variant, same_q, ctx)) is NotApplicable


def test_peak_monotone_check_does_not_rest_on_the_bound(monkeypatch):
    """Only the first pair of scales could be certified; its rounding straddles half the
    exact increase: the old rule rejected the example on one side only."""
    from verify.properties import peaks

    variant, ctx = variants.get("softmax"), RunContext(dtype="float64")
    z = [0.5, 1.5, 1.0]
    factors = (0.5, 1.0, 2.0, 4.0)
    ex = peaks.RowsExample([[f * t for t in z] for f in factors], [f"c = {f}" for f in factors])
    ref, _, _ = peaks._row_weights(variant, ex.rows, ctx)
    i = int(np.argmax(z))
    d0 = float(ref.exact[0, 0, 1, i] - ref.exact[0, 0, 0, i])
    results, old = [], []
    for f in STRADDLE:

        def make(b, f=f):
            out = np.zeros(b.shape)
            out[0, 0, :2, i] = d0 / 4 * f  # the first pair: rounding = d0 / 2 f
            out[0, 0, 2:, i] = 1.0  # the other pairs: never certified
            return out

        _bound_override(monkeypatch, peaks, make)
        results.append(_outcome(peaks._monotone_check, variant, ex, ctx))
        old.append(d0 > 2 * (d0 / 2 * f))
        monkeypatch.undo()
    assert old == [True, False]
    assert len(results[0]) == 3
    _same(*results)


def test_full_rank_and_causal_rank_checks_do_not_rest_on_the_bound(monkeypatch):
    """sigma_min (exp-kernel-full-rank) and sigma_T (linear-attention-rank, causal equal
    tokens) against twice the Frobenius bound: the old rule's rejection flips at 1 -+ 1e-9,
    the observation does not."""
    from verify.properties import injectivity as inj
    from verify.properties.support.common import exact_and_bound
    from verify.properties.support.inputs import weight_inputs

    ctx = RunContext(dtype="float64")
    ex = Example(None, {"q": [-1.0, 0.0, 1.0], "k": [-0.5, 0.25, 1.0]})
    soft = variants.get("softmax")
    x = weight_inputs(np.asarray(ex.choices["q"])[None, None, :, None],
                      np.asarray(ex.choices["k"])[None, None, :, None], ctx)  # fmt: skip
    ref, _ = exact_and_bound(soft, x, ctx, denominator="sum")
    n = 3
    low = float(inj._singular_values([[ref.exact[0, 0, i, j] for j in range(n)]
                                      for i in range(n)])[-1])  # fmt: skip
    lin = variants.get("linear-identity")
    T, w = 3, [0.5]
    tokens = [[[w] * T]]
    xc = weight_inputs(tokens, tokens, ctx, causal=True)
    refc, _ = exact_and_bound(lin, xc, ctx, denominator="sum")
    low_c = float(inj._singular_values([[refc.exact[0, 0, i, j] for j in range(T)]
                                        for i in range(T)])[T - 1])  # fmt: skip
    full, causal = [], []
    for f in STRADDLE:  # every entry beta: ||bound||_F = n beta = low / 2 f
        _bound_override(monkeypatch, inj, lambda b, f=f: low / (2 * n) * f)
        full.append(_outcome(inj._full_rank_check, soft, ex, ctx))
        monkeypatch.undo()
        _bound_override(monkeypatch, inj, lambda b, f=f: low_c / (2 * T) * f)
        causal.append(_outcome(inj._causal_rank, lin, w, T, "sum", ctx))
        monkeypatch.undo()
    for got, sigma, size in ((full, low, n), (causal, low_c, T)):
        frobs = [math.sqrt(size * size * (sigma / (2 * size) * f) ** 2) for f in STRADDLE]
        assert [sigma > 2 * fr for fr in frobs] == [True, False]  # the old rule flips
        assert not isinstance(got[0], Exception)
        _same(*got)


def test_claimed_scale_tells_uninformative_inputs_from_the_exact_outputs(monkeypatch):
    """Every candidate scale 'fits' when its bounds are large (the old rule rejected the
    example then); informativeness is now read off the exact outputs: q = 0 is rejected,
    other inputs report the claimed scale's observation whatever the candidates' bounds."""
    from verify.properties import scores

    variant, ctx = variants.get("softmax"), RunContext(dtype="float64")
    gen = torch.Generator().manual_seed(3)

    def several(scale_q: float):
        xs = []
        for d in scores.SCALE_DIMS:
            q, k, v = (torch.randn(1, 1, 2, n, generator=gen, dtype=torch.float64)
                       for n in (d, d, 1))  # fmt: skip
            xs.append(make_inputs(q * scale_q, k, v, causal=False))
        return Example(scores._Several(xs), {"dims": scores.SCALE_DIMS, "path": "forward"})

    ex = several(2.0)
    real = scores.error_bound
    results = []
    for big in (False, True):
        if big:  # the wrong candidates' bounds far above their errors: every candidate fits

            def loose(*a, **kw):
                eb = real(*a, **kw)
                return dataclasses.replace(eb, bound=eb.bound * 1e30)

            monkeypatch.setattr(scores, "error_bound", loose)
        results.append(_outcome(scores._scale_check, variant, ex, ctx))
    assert "fits: claimed" in results[1].detail and "1/d" in results[1].detail.split(";")[0]
    _same(*results)
    assert type(_outcome(scores._scale_check, variant, several(0.0), ctx)) is NotApplicable


def test_single_key_zero_scores_are_decided_exactly():
    """q.k_0 = 1e16 + 1 - 1e16 = 1: not 0, though a float sum in index order says 0."""
    from verify.properties.scores import _exact_zero_scores

    q = np.array([1e16, 1.0, -1e16]).reshape(1, 1, 1, 3)
    k0 = np.ones((1, 1, 3))
    assert not _exact_zero_scores(q, k0).any()
    assert (1e16 + 1.0) - 1e16 == 0.0  # the twin: one summation order finds a zero score
    assert _exact_zero_scores(np.array([1.0, -1.0]).reshape(1, 1, 1, 2), np.full((1, 1, 2), 2.0))


def test_qk_norm_floor_is_decided_exactly():
    """A row of norm just below GRADCHECK_NORM_FLOOR whose float norm rounds to the floor."""
    from verify.properties.gradients import GRADCHECK_NORM_FLOOR, _below_norm_floor

    f = Fraction(GRADCHECK_NORM_FLOOR)
    g = math.nextafter(GRADCHECK_NORM_FLOOR, 0.0)
    mid = (Fraction(g) + f) / 2  # norms in (mid, f) round to the floor
    h = math.sqrt(float((mid**2 + f**2) / 2 - Fraction(g) ** 2))
    assert mid**2 < Fraction(g) ** 2 + Fraction(h) ** 2 < f**2
    row = torch.tensor([[[[g, h]]]], dtype=torch.float64)
    big = torch.ones(1, 1, 1, 2, dtype=torch.float64)
    assert _below_norm_floor(row, big)
    assert not float(row.norm(dim=-1).min()) < GRADCHECK_NORM_FLOOR  # the twin: the float norm
    assert not _below_norm_floor(big, big)


def test_gradient_checks_reject_exact_zeros_and_keep_float_decisions(monkeypatch):
    """A vanishing kernel sum (q = 0, identity map) is rejected exactly; a float64 reference
    that is not finite elsewhere (an overflow) or finite differences unreliable at every entry
    (read off the variant's floats) leave the example without a statement."""
    from verify.properties import gradients
    from verify.spec.results import NoStatement

    variant, ctx = variants.get("linear-identity"), RunContext(dtype="float64")
    q = torch.tensor([[[[0.0], [1.0]]]], dtype=torch.float64)
    k = torch.tensor([[[[1.0], [0.5]]]], dtype=torch.float64)
    ex = Example(make_inputs(q, k, k.clone(), causal=False),
                 {"form": "forward", "denominator": "sum", "g_seed": 0})  # fmt: skip
    assert type(_outcome(gradients._reference_check, variant, ex, ctx)) is NotApplicable
    defined = Example(make_inputs(q + 1.0, k, k.clone(), causal=False), ex.choices)
    real = gradients.reference_gradients

    def overflowing(*a, **kw):
        return tuple(t * math.inf for t in real(*a, **kw))

    monkeypatch.setattr(gradients, "reference_gradients", overflowing)
    assert type(_outcome(gradients._reference_check, variant, defined, ctx)) is NoStatement
    monkeypatch.undo()
    # gradcheck: its domain test (support.grads.require_defined) and the finite differences
    from verify.properties.support import grads

    assert type(_outcome(grads.require_defined, variant, ex.inputs, "sum")) is NotApplicable
    monkeypatch.setattr(grads, "reference_gradients", overflowing)
    assert type(_outcome(grads.require_defined, variant, defined.inputs, "sum")) is NoStatement
    monkeypatch.undo()
    monkeypatch.setattr(gradients, "FD_TRUST", 0.0)  # every entry's differences "unreliable"
    got = _outcome(gradients._gradcheck_check, variant, defined, ctx)
    assert type(got) is NoStatement and "unreliable" in str(got)


def test_no_finite_bound_is_no_statement_an_empty_array_is_rejected():
    from verify.exact.errors import ErrorBound, compare
    from verify.properties.support.observe import array_observation, elementwise
    from verify.spec.results import NoStatement

    err, inf = np.zeros((1, 1, 2, 1)), np.full((1, 1, 2, 1), math.inf)
    for fn in (array_observation, elementwise):
        with pytest.raises(NoStatement):
            fn(err, inf, what="x") if fn is array_observation else fn(err, inf, "x")
    with pytest.raises(NotApplicable) as exc:
        array_observation(np.zeros(0), np.zeros(0), what="x")
    assert type(exc.value) is NotApplicable
    with pytest.raises(NoStatement):
        compare(err, ErrorBound(inf, err, "float64", "float64", 1.0, "test"))


def test_bounded_call_rejects_exact_zeros_and_keeps_float_decisions():
    from verify.properties.support.paths import bounded_call
    from verify.spec.results import NoStatement

    variant = variants.get("linear-identity")
    q = torch.zeros(1, 1, 2, 1, dtype=torch.float64)
    k = torch.ones(1, 1, 2, 1, dtype=torch.float64)
    inf = np.full((1, 1, 2, 1), math.inf)
    x = make_inputs(q, k, k.clone(), causal=False)
    with pytest.raises(NotApplicable) as exc:  # every row's kernel sum is exactly 0
        bounded_call(variant, "forward", "sum", x, inf)
    assert type(exc.value) is NotApplicable
    with pytest.raises(NoStatement):  # defined rows, a bound that is not finite
        bounded_call(variant, "forward", "sum", make_inputs(q + 1, k, k.clone(), causal=False), inf)


def test_undefined_rows_are_exact():
    """The kernel sum or norm vanishes exactly: rational kernels in Fractions (1e16 + 1 - 1e16
    is 1, whatever a float sum says), exp weights grouped by equal scores (e^x (v - v) = 0,
    e^x v - e^y v != 0 for x != y: Lindemann-Weierstrass)."""
    from verify.properties.support.defined import all_undefined, any_undefined, undefined_rows

    ident, soft = variants.get("linear-identity"), variants.get("softmax")
    k = torch.tensor([[[[1e16], [1.0], [-1e16]]]], dtype=torch.float64)
    one = torch.ones(1, 1, 1, 1, dtype=torch.float64)
    x = make_inputs(one, k, torch.ones(1, 1, 3, 1, dtype=torch.float64), causal=False)
    assert not undefined_rows(ident, x, "sum").any()  # exact sum 1
    assert (1e16 + 1.0) + -1e16 == 0.0  # the twin: the float sum in index order vanishes
    xz = make_inputs(0 * one, k, x.v, causal=False)
    assert all_undefined(ident, xz, "sum") and undefined_rows(ident, xz, "none") is not None
    assert not any_undefined(ident, xz, "none") and not any_undefined(soft, xz, "sum")
    keys = torch.tensor([[[[1.0], [1.0], [2.0]]]], dtype=torch.float64)
    v = torch.tensor([[[[1.0], [-1.0], [0.0]]]], dtype=torch.float64)  # equal scores cancel
    assert all_undefined(soft, make_inputs(one, keys, v, causal=False), "l2")
    v2 = torch.tensor([[[[1.0], [0.0], [-1.0]]]], dtype=torch.float64)  # e^1 - e^2 != 0
    assert not any_undefined(soft, make_inputs(one, keys, v2, causal=False), "l2")
    assert undefined_rows(variants.get("taylor-1"), x, "sum") is not None
    unknown = dataclasses.replace(ident, kernel="unknown")
    assert undefined_rows(unknown, x, "sum") is None


def test_convexity_of_an_unknown_signed_kernel_keeps_its_draws(monkeypatch):
    """Signed weights read off an unknown kernel (the variant's floats against a computed
    bound) leave the example without a statement, counted; the faulty twin (the old
    NotApplicable) rejects those draws and checks other ones."""
    from tests import unclaimed_variants as U

    variant = AttentionVariant("signed", U.identity_linear_guarded, kernel="unknown",
                               dtypes=("float64",))  # fmt: skip
    ctx = RunContext(max_examples=8)
    seen: list[str] = []
    res = run_property(_recorded(weights.CONVEX_COMBINATION, seen), variant, ctx)
    assert res.examples == 8 and "signed weights measured" in res.detail, res.detail
    monkeypatch.setattr(weights, "NoStatement", NotApplicable)
    twin: list[str] = []
    run_property(_recorded(weights.CONVEX_COMBINATION, twin), variant, ctx)
    assert twin != seen


def _recorded(prop, seen: list):
    def check(variant, ex, ctx, _check=prop.check):
        seen.append(repr(ex))
        return _check(variant, ex, ctx)

    return dataclasses.replace(prop, check=check)


@pytest.mark.parametrize(
    "prop_id, name, dtype",
    [
        ("taylor-not-shift-invariant", "taylor-1", "float64"),
        ("softmax-injectivity", "softmax", "float32"),
        ("softmax-peak-monotone", "softmax", "float64"),
        ("exp-kernel-full-rank", "softmax", "float64"),
    ],
)
def test_draws_do_not_depend_on_the_rounding_bounds(monkeypatch, prop_id, name, dtype):
    """The same draws and example counts with every D10 bound multiplied by 1e13 (bounds near
    the exact changes); the faulty twin re-imposes the old rule (NotApplicable where no change
    is certified, exact <= 2 bound) and its draws change."""
    from verify.exact import errors
    from verify.properties import catalogue

    prop = {p.id: p for p in catalogue()}[prop_id]
    variant, ctx = variants.get(name), RunContext(dtype=dtype, max_examples=6)
    real = errors.attention_error_bound

    def twin_check(variant, ex, ctx, _check=prop.check):
        out = _check(variant, ex, ctx)
        if any("<= 2 bound" in o.detail for o in (out if isinstance(out, list) else [out])):
            raise NotApplicable("not certified (the old rule)")
        return out

    twin = dataclasses.replace(prop, check=twin_check)
    runs = {}
    for factor in (1.0, 1e13):

        def scaled(*a, _f=factor, **kw):
            eb = real(*a, **kw)
            return dataclasses.replace(eb, bound=eb.bound * _f)

        monkeypatch.setattr(errors, "attention_error_bound", scaled)
        for which, p in (("check", prop), ("twin", twin)):
            seen: list[str] = []
            res = run_property(_recorded(p, seen), variant, ctx)
            runs[which, factor] = (seen, res.examples, res.status)
        monkeypatch.undo()
    assert runs["check", 1.0] == runs["check", 1e13]
    assert runs["check", 1.0][2] == "pass"
    assert runs["twin", 1.0] == runs["check", 1.0]  # every example certified at factor 1
    assert runs["twin", 1e13][0] != runs["twin", 1.0][0]


def test_oracle_agreement_keeps_its_draws_where_a_bound_is_not_finite(monkeypatch):
    """A machine on which some examples' bounds are not finite (emulated: every example with
    an odd T) checks the same draws as one on which all are finite; the faulty twin (the old
    NotApplicable in bounded_call) does not."""
    from verify.exact import errors
    from verify.properties import catalogue
    from verify.properties.support import paths
    from verify.spec.results import NoStatement

    prop = {p.id: p for p in catalogue()}["oracle-agreement"]
    prop = dataclasses.replace(prop, long_examples=None)
    variant, ctx = variants.get("softmax"), RunContext(dtype="float64", max_examples=8)
    real = errors.attention_error_bound

    def odd_t_infinite(kernel, q, *a, **kw):
        eb = real(kernel, q, *a, **kw)
        if q.shape[-2] % 2:
            return dataclasses.replace(eb, bound=np.full(eb.bound.shape, math.inf))
        return eb

    runs = {}
    for label, patch, twin in (("finite", False, False), ("odd", True, False),
                               ("twin", True, True)):  # fmt: skip
        if patch:
            monkeypatch.setattr(errors, "attention_error_bound", odd_t_infinite)
        if twin:
            monkeypatch.setattr(paths, "NoStatement", NotApplicable)
        seen: list[str] = []
        res = run_property(_recorded(prop, seen), variant, ctx)
        runs[label] = (seen, res.examples)
        monkeypatch.undo()
    assert runs["odd"] == runs["finite"] and runs["odd"][1] == 8
    assert NoStatement is not NotApplicable and runs["twin"][0] != runs["finite"][0]


def test_the_shown_counterexample_is_chosen_beyond_the_machine_factor():
    """vs_reference 1.1 on one machine and 0.9 on another must not change the example shown:
    only a reproducer beyond MACHINE_RATIO_FACTOR counts as showing the failure."""
    from verify.engine.groups import FailureGroup
    from verify.spec.results import PropertyResult

    def member(T: int, ratio: float):
        r = PropertyResult("oracle-agreement", "D10", "", "fail", "float64", "cpu")
        r.counterexample = f"T={T}"
        r.features = {"B": 1, "H": 1, "T": T, "S": T, "d": 1, "d_v": 1, "causal": False,
                      "mask": False, "vs_reference": ratio}  # fmt: skip
        return r

    for near in (1.1, 0.9):  # two machines
        group = FailureGroup(root=None, cause=(), members=[member(4, near), member(2, 3.0)])
        assert group.example.counterexample == "T=2"  # the smallest: no member beyond 16
    group = FailureGroup(root=None, cause=(), members=[member(4, 40.0), member(2, 3.0)])
    assert group.example.counterexample == "T=4"  # beyond the factor on every machine
    assert MACHINE_RATIO_FACTOR < 40.0


def test_the_kernel_free_threshold_misses_the_favor_feature_sums():
    """The dev profile's failure (single-key, linear-favor, float32, 1.2): FAVOR+'s tiny
    features put the example outside the D10 model, and the check used D11's kernel-free
    threshold alone, which charges the key sum and d + 1 products; the chunked and recurrent
    forms sum m = 64 feature terms per element. The threshold no longer stands for such a path
    (no statement there), while an element-wise map (m = d) keeps it."""
    from verify.properties.scores import _single_check

    variant, ctx = variants.get("linear-favor"), RunContext(dtype="float32")
    q = [[[[0.0]]]]
    x = make_inputs(
        torch.tensor(q, dtype=torch.float32),
        torch.tensor([[[[-0.843395471572876]]]], dtype=torch.float32),
        torch.tensor([[[[0.0, 0.5930440425872803]]]], dtype=torch.float32),
        causal=False,
    )
    fn = weights.path_callable(variant, "chunked/C=64")
    o = np64(fn.forward(x.q, x.k, x.v, causal=False, denominator="sum"))
    W = effective_weights(fn, x, {"denominator": "sum"}, causal=False)
    threshold = reorder_bound(W, np64(x.v), o, "float32", 1) / 2
    assert (np.abs(o - np64(x.v)) > threshold).any()  # the old statement fails correct code
    for form in ("chunked", "recurrent", "any"):
        assert kernel_free_gap(variant, form), form
    assert kernel_free_gap(variant, "parallel") is None
    assert kernel_free_gap(variants.get("linear-elu1"), "chunked") is None
    # with q's features tiny enough to leave the model, the example makes no statement
    far = dataclasses.replace(x, q=torch.tensor([[[[6.930172920227051]]]], dtype=torch.float32))
    with pytest.raises(NotApplicable):
        _single_check(variant, Example(far, {"path": "chunked/C=64"}), ctx)
