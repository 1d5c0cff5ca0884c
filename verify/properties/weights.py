"""Weight properties: how the values and the kernel weights enter the output (D2, D4 and the
API contract).

The bounds are stated as in ``dependence`` (the D10 bounds of the computations compared, from
the inputs alone; determinism is bitwise), on every code path the variant exposes.

Ids: ``linearity-in-v``, ``determinism``, ``convex-combination``, ``uniform-weights``.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.calls import call, prefill
from verify.properties.support.claims import (
    dtype_reason,
    normalized_structural_applies,
    oracle_applies,
    positivity_reason,
    structural_applies,
)
from verify.properties.support.common import Example, exact_and_bound, kernel_name
from verify.properties.support.inputs import plain_inputs, shaped_inputs, tensor_like
from verify.properties.support.observe import array_observation, np64
from verify.properties.support.paths import (
    call_kwargs,
    form_kind,
    mode_st,
    modes,
    path_callable,
    path_names,
    with_path,
    with_path_and_mode,
)
from verify.properties.support.structure import (
    combined,
    effective_weights,
    model_bound,
    one_evaluation_bound,
    reorder_bound,
    variant_empty_rows,
)
from verify.spec.results import NoStatement, NotApplicable, Observation, VariantError
from verify.spec.vocabulary import LINEAR_IN_V_DENOMINATORS

# --------------------------------------------------------------------------- linearity in V


def _linear_applies(variant, ctx):
    if why := structural_applies(variant, ctx):
        return why
    if not modes(variant, LINEAR_IN_V_DENOMINATORS):
        return f"no claimed denominator mode is linear in v (claimed: {modes(variant)})"
    return None


def _model_floor(variant, ctx) -> float:
    """The smallest power of two g >= 2^-12 such that a value of magnitude g is inside the claimed
    kernel's D10 standard model (``verify.exact.errors.outside_model``, one level per kernel
    and dtype: asked with q = k = 1 at scale 1, so the value decides); 0 without a model."""
    import torch

    from verify.exact import errors

    kernel = kernel_name(variant)
    if kernel is None:
        return 0.0
    one = torch.ones(1, 1, 1, 1, dtype=torch.float64)
    try:
        for e in range(-12, 1):
            if not errors.outside_model(kernel, one, one, one * 2.0**e, dtype=ctx.model_dtype,
                                        scale=1.0):  # fmt: skip
                return 2.0**e
    except ValueError:  # a kernel the error model does not describe (a declared map)
        return 0.0
    return 1.0


def _grid_size(dtype_name: str, floor: float = 0.0) -> int:
    """M with entries m/M (|m| <= M) such that a v1 + b v2 is exact for a, |b| in {1/2, 1, 2}:
    log2 M + 2 (exponent spread) + 1 (carry) <= precision bits; and 1/(2M) >= ``floor`` (a
    power of two, :func:`_model_floor`), so every nonzero entry of v1, v2 and of the exact
    combination (a multiple of 1/(2M)) is inside the claimed kernel's D10 model: every
    example gets the model's bound, decided from the grid alone, never from a computed float."""
    from derivations.rounding import precision_bits

    M = 2 ** min(precision_bits(dtype_name) - 3, 10)
    if floor > 0:
        M = min(M, max(1, int(0.5 / floor)))
    return M


def _linear_examples(variant, ctx):
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    M = _grid_size(ctx.dtype, _model_floor(variant, ctx))

    def combination(draw_, x):
        grid = hnp.arrays(np.int64, x.shape.v, elements=st.integers(-M, M))
        v1 = draw_(grid).astype(np.float64) / M
        v2 = draw_(grid).astype(np.float64) / M
        a = draw_(st.sampled_from((1.0, 2.0, 0.5, -1.0)))
        b = draw_(st.sampled_from((1.0, -2.0, 0.5, -0.5, 2.0)))
        return {"a": a, "b": b, "_v1": v1, "_v2": v2}

    base = plain_inputs(variant, ctx)
    return with_path_and_mode(variant, base, combination, LINEAR_IN_V_DENOMINATORS)


def _exact_residual(fw, f1, f2, a: float, b: float) -> np.ndarray:
    """|fw - a f1 - b f2| elementwise, the sum of three float64 values rounded once (fsum)."""
    out = np.empty(fw.shape)
    flat = out.reshape(-1)
    for i, (p, r, s) in enumerate(zip(fw.reshape(-1), f1.reshape(-1), f2.reshape(-1))):
        terms = (float(p), -a * float(r), -b * float(s))  # a, b powers of two: exact products
        flat[i] = abs(math.fsum(terms)) if all(map(math.isfinite, terms)) else math.nan
    return out


def _linear_check(variant, ex: Example, ctx):
    x = ex.inputs
    a, b = ex.choices["a"], ex.choices["b"]
    mode, path = ex.choices["denominator"], ex.choices["path"]
    v1, v2 = ex.choices["_v1"], ex.choices["_v2"]
    w = a * v1 + b * v2  # exact in float64 (grid values)
    xs = [dataclasses.replace(x, v=tensor_like(arr, x)) for arr in (v1, v2, w)]
    if not np.array_equal(np64(xs[2].v), w) or not np.array_equal(np64(xs[0].v), v1):
        raise AssertionError("linearity grid: the combination is not exact in the dtype")
    kind = form_kind(path)
    fn, kw = path_callable(variant, path), call_kwargs(variant, mode)
    outs = [
        np64(call(fn, xi.q, xi.k, xi.v, causal=x.causal, allow_nonfinite=True, **kw)) for xi in xs
    ]
    # each evaluation's own error: the model's bound, or half D11's two-evaluation threshold
    # on the weights the variant computes (the same q, k: the same weights in all three)
    models = [model_bound(variant, xi, ctx, mode=mode, form=kind, factor=1.0) for xi in xs]
    model = None
    if all(m is not None for m in models):
        model = abs(a) * models[0] + abs(b) * models[1] + models[2]
    free = None
    if mode in LINEAR_IN_V_DENOMINATORS:
        W = effective_weights(fn, x, kw, causal=x.causal)
        d = x.q.shape[-1]
        T = [reorder_bound(W, np64(xi.v), o, ctx.model_dtype, d) / 2 for xi, o in zip(xs, outs)]
        free = abs(a) * T[0] + abs(b) * T[1] + T[2]
    bound = combined(model, free)
    return array_observation(
        _exact_residual(outs[2], outs[0], outs[1], a, b),
        bound,
        what=f"{path}/{mode}: f(a v1 + b v2) - a f(v1) - b f(v2), a = {a}, b = {b}",
    )


LINEARITY_IN_V = declare("linearity-in-v", _linear_applies, _linear_examples, _linear_check)


# --------------------------------------------------------------------------- determinism

STATE_PREFILL = "state.prefill"


def _det_examples(variant, ctx):
    from hypothesis import strategies as st

    paths = path_names(variant)
    if variant.state_api is not None and variant.supports_causal(True):
        paths = (*paths, STATE_PREFILL)

    base = plain_inputs(variant, ctx)
    causal_only = shaped_inputs(variant, ctx, causal=True)

    @st.composite
    def draw(draw_):
        path = draw_(st.sampled_from(paths))
        x = draw_(causal_only if path == STATE_PREFILL else base)
        mode = draw_(mode_st(variant, x))
        return Example(x, {"path": path, "denominator": mode})

    return draw()


def bits(t) -> np.ndarray:
    """The bit patterns of a float tensor (so that NaN == NaN and -0.0 != 0.0)."""
    import torch

    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.detach().cpu().contiguous().view(ints).numpy()


def _det_check(variant, ex: Example, ctx):
    x = ex.inputs
    path, mode = ex.choices["path"], ex.choices["denominator"]
    if path == STATE_PREFILL:
        outs = [prefill(variant, x.q, x.k, x.v, allow_nonfinite=True)[0] for _ in range(2)]
    else:
        fn, kw = path_callable(variant, path), call_kwargs(variant, mode)
        outs = [
            call(fn, x.q, x.k, x.v, causal=x.causal, allow_nonfinite=True, **kw) for _ in range(2)
        ]
    differ = int((bits(outs[0]) != bits(outs[1])).sum())
    return Observation(
        float(differ),
        0.0,
        "exact",
        "",
        f"{path}/{mode}: {differ} of {outs[0].numel()} output elements differ bitwise "
        "between two calls on the same inputs",
    )


DETERMINISM = declare("determinism", dtype_reason, _det_examples, _det_check)


# --------------------------------------------------------------------------- convexity (D4)


def _convex_applies(variant, ctx):
    what = "convexity does not apply"
    unnormalized = f"the variant is not normalized (divides by no kernel sum): {what}"
    if why := normalized_structural_applies(variant, ctx, unnormalized=unnormalized):
        return why
    if not variant.parsed_kernel.known:
        return None  # positivity is read from the weights the variant computes, per example
    return positivity_reason(
        variant, unknown=f"kernel positivity unknown: {what}", what="convexity"
    )


def _convex_examples(variant, ctx):
    return with_path(variant, plain_inputs(variant, ctx, cases=("random", "unit_values")))


def _convex_check(variant, ex: Example, ctx):
    x, path = ex.inputs, ex.choices["path"]
    fn, kw = path_callable(variant, path), call_kwargs(variant, "sum")
    o = np64(call(fn, x.q, x.k, x.v, causal=x.causal, allow_nonfinite=True, **kw))
    bound, W = one_evaluation_bound(variant, x, ctx, fn, kw, o, form=form_kind(path))
    empty = variant_empty_rows(W)  # rows the variant's own visibility (a window) leaves empty
    if empty.all():
        raise NotApplicable("every row is empty under the variant's own visibility")
    if not np.isfinite(o[~empty]).all():
        raise VariantError(f"{path}: NaN/inf in a row that has visible keys")
    if not variant.parsed_kernel.known and (W[~empty] < -bound.max(initial=0.0)).any():
        # read off the variant's weights against a computed bound: no draw rejected on it
        raise NoStatement(f"signed weights measured (min {W.min():.3g}): no convexity")
    o = np.where(empty[..., None], 0.0, o)
    bound = np.where(empty[..., None], np.inf, bound)  # the empty-row convention: no statement
    vis = x.visible()[..., None]  # (B, H, T, S, 1)
    v = np64(x.v)[:, :, None]  # (B, H, 1, S, d_v)
    lo = np.where(vis, v, np.inf).min(axis=3)
    hi = np.where(vis, v, -np.inf).max(axis=3)
    if variant.eps:  # weights sum to D/(D + eps) < 1: a sub-convex combination, 0 in the box
        lo, hi = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
    outside = np.maximum(np.maximum(lo - o, o - hi), 0.0)  # exact: differences of close floats
    return array_observation(
        outside,
        bound,
        what=f"{path}: distance of o_t from [min_s v_s, max_s v_s] over visible keys "
        f"({x.case} values{', widened to 0: declared eps' if variant.eps else ''})",
    )


CONVEX_COMBINATION = declare("convex-combination", _convex_applies, _convex_examples, _convex_check)


# --------------------------------------------------------------------------- uniform (D2)


def _uniform_modes(variant, d: int | None = None) -> tuple[str, ...]:
    k0 = variant.parsed_kernel.kappa_at_zero(1 if d is None else d)
    ms = modes(variant, LINEAR_IN_V_DENOMINATORS)
    return tuple(m for m in ms if not (m == "sum" and k0 == 0))


def _uniform_applies(variant, ctx):
    if why := oracle_applies(variant, ctx):
        return why
    if variant.parsed_kernel.kappa_at_zero(1) is None:
        return f"kappa(0) unknown for kernel {variant.kernel}"
    if not _uniform_modes(variant):
        return (
            f"kappa(0) = 0 for {variant.kernel}: normalized uniform weights are 0/0 and no "
            "unnormalized mode is claimed"
        )
    return None


def _uniform_examples(variant, ctx):
    base = plain_inputs(variant, ctx, cases=("zeros",))
    return with_path_and_mode(variant, base, allowed=_uniform_modes(variant))


def _uniform_check(variant, ex: Example, ctx):
    x = ex.inputs
    path, mode = ex.choices["path"], ex.choices["denominator"]
    d = x.shape.d
    k0 = variant.parsed_kernel.kappa_at_zero(d)
    ref, eb = exact_and_bound(variant, x, ctx, denominator=mode, form=form_kind(path))
    fn, kw = path_callable(variant, path), call_kwargs(variant, mode)
    o = np64(call(fn, x.q, x.k, x.v, causal=x.causal, **kw))
    vis = x.visible()
    v = np64(x.v)
    eps = Fraction(variant.eps)
    floor = variant.eps_mode == "floor"  # N/max(D, eps) (verify.exact.eps_floor)
    err = np.empty(o.shape)
    for b, h, t in np.ndindex(*o.shape[:3]):
        keys = np.nonzero(vis[b, h, t])[0]
        n = len(keys)
        for j in range(o.shape[3]):
            total = sum((Fraction(float(v[b, h, s, j])) for s in keys), Fraction(0))
            if n == 0:
                exact = Fraction(0)
            elif mode == "sum":
                exact = k0 * total / (max(k0 * n, eps) if floor else k0 * n + eps)
            elif mode == "count":
                exact = k0 * total / (n + eps)
            else:
                exact = k0 * total
            err[b, h, t, j] = float(abs(Fraction(float(o[b, h, t, j])) - exact))
    return array_observation(
        err,
        eb.bound,
        what=f"{path}/{mode}: q = k = 0, kappa(0) = {k0}: o_t vs the closed form "
        f"({'mean' if mode != 'none' else 'kappa(0) * sum'} of the visible values)",
    )


UNIFORM_WEIGHTS = declare("uniform-weights", _uniform_applies, _uniform_examples, _uniform_check)


PROPERTIES = (
    LINEARITY_IN_V,
    DETERMINISM,
    CONVEX_COMBINATION,
    UNIFORM_WEIGHTS,
)
