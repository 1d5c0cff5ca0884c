"""Structural properties: what kernel attention must satisfy whatever its rounding (catalogue).

Each property compares two computations (or one computation and a closed form) whose exact
values are equal by the definition o_t = sum_s kappa(x_ts) v_s / sum_s kappa(x_ts) (THEORY.md
notation, D2, D6); the bound is the sum of the two computations' D10 bounds
(``verify.errors.attention_error_bound`` against the exact value), stated before the variant's
outputs are read. Every property runs on every code path the variant exposes (``forward`` and
each entry of ``forms``), with the form kind parsed from the form's name.

Restricted bounds: the D10 bound of an output row depends only on the inputs that row reads (its
query and its visible keys), so when two computations read the same inputs on some rows (rows
<= t of a causal pass, the unchanged batch elements or heads), their bound there is stated on
the restricted inputs (the prefix, the other elements). This also keeps the bound finite when
the other positions hold huge finite values (1e10, FAULTS.md 8, 9).

Ids: ``causality``, ``prefix-invariance``, ``batch-independence``, ``head-independence``,
``permutation-equivariance``, ``linearity-in-v``, ``determinism``, ``convex-combination``,
``uniform-weights``, ``scale-once``, ``single-key``, ``masks``, ``causal-alignment``,
``causal-mismatch-rejected``. Helpers shared with ``forms``: :func:`path_names`,
:func:`path_callable`, :func:`form_kind`, :func:`modes`, :func:`array_observation`,
:func:`error_bound`, :func:`oracle_applies`, :func:`inputs`, :func:`shape_st`, :func:`restrict`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction
from typing import Any

import numpy as np

from verify.properties.support.base import Property
from verify.properties.support.calls import call, to_layout
from verify.properties.support.common import (
    MAX_BATCH,
    MAX_DIM,
    MAX_HEADS,
    MAX_LEN,
    MAX_VALUE_DIM,
    MIN_MAGNITUDE,
    Example,
    causal_choices,
    exact_and_bound,
    kernel_name,
    lengths,
    radius_strategy,
)
from verify.spec.results import NotApplicable, Observation, VariantError
from verify.spec.visibility import visible
from verify.spec.vocabulary import LINEAR_IN_V_DENOMINATORS

# --------------------------------------------------------------------------- shared helpers

FORWARD = "forward"
#: the huge finite value put at positions that must have no influence (FAULTS.md 8, 9)
POISON = 1e10


class FormView:
    """One of ``variant.forms`` presented with the variant's layout, for ``_calls.call``."""

    def __init__(self, variant, form: str) -> None:
        self.forward = variant.forms[form]
        self.layout = variant.layout


def path_names(variant) -> tuple[str, ...]:
    """``forward`` and every entry of ``variant.forms`` (sorted): the code paths to check."""
    return (FORWARD, *sorted(variant.forms))


def path_callable(variant, name: str):
    return variant if name == FORWARD else FormView(variant, name)


def form_kind(name: str) -> str:
    """The D10 form kind of a path: ``parallel``/``recurrent``/``chunked`` from the form's name
    (its first ``/``-separated word), ``any`` (the worst of them) for ``forward`` or others."""
    head = name.split("/", 1)[0].split(":", 1)[0]
    return head if head in ("parallel", "recurrent", "chunked") else "any"


def modes(variant, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """Denominator modes to draw: the claimed ``denominators`` (or the ``normalized``
    convention), intersected with ``allowed``."""
    claimed = tuple(variant.denominators) or (("sum",) if variant.normalized else ("none",))
    if allowed is None:
        return claimed
    return tuple(m for m in claimed if m in allowed)


def mode_st(variant, x, allowed: tuple[str, ...] | None = None):
    """Strategy of the claimed modes (within ``allowed``) that apply to inputs ``x``:
    layernorm needs d_v >= 2 (D7); rejects the example when none does."""
    from hypothesis import assume
    from hypothesis import strategies as st

    ok = [m for m in modes(variant, allowed) if not (m == "layernorm" and x.shape.d_v < 2)]
    assume(ok)
    return st.sampled_from(ok)


def call_kwargs(variant, mode: str, attn_mask=None) -> dict[str, Any]:
    kw: dict[str, Any] = {}
    if variant.denominators:
        kw["denominator"] = mode
    if attn_mask is not None:
        kw["attn_mask"] = attn_mask
    return kw


def oracle_applies(variant, ctx, *, causal: bool | None = None) -> str | None:
    """Common applicability: a known kernel (oracle and error model), the run's dtype, and
    (if given) support of the causal flag."""
    if kernel_name(variant) is None:
        return "kernel unknown (kernel='unknown'): no exact reference or error model for a bound"
    if variant.linear_map == "favor" and variant.projection is None:
        return "FAVOR+ without a declared projection: no exact reference for a bound"
    if ctx.dtype not in variant.dtypes:
        return f"the variant does not claim {ctx.dtype}"
    if causal is not None and not variant.supports_causal(causal):
        return f"the variant does not support causal={causal}"
    return None


def np64(x) -> np.ndarray:
    import torch

    return x.detach().to("cpu", torch.float64).numpy()


def array_observation(err, bound, *, what: str, kind: str = "derived") -> Observation:
    """The worst element of ``err`` against ``bound`` (elementwise, float64 arrays).

    Elements with an infinite bound carry no statement (a denominator that may vanish); a NaN
    error where the bound is finite fails; a zero bound requires a zero error.

    Raises:
        NotApplicable: no element has a finite bound.
    """
    err = np.asarray(err, dtype=np.float64)
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), err.shape)
    silent = np.isinf(bound)
    if err.size == 0 or silent.all():
        raise NotApplicable("no element has a finite bound (a denominator may vanish)")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, err / bound, np.where(err == 0, 0.0, np.inf))
    ratio = np.where(np.isnan(err), np.inf, ratio)
    ratio = np.where(silent, -1.0, ratio)  # never the worst element
    idx = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    where = str(tuple(int(i) for i in idx))
    obs, bnd = float(err[idx]), float(bound[idx])
    detail = f"{what}: worst |difference| {obs:.3e} vs bound {bnd:.3e} at {where}"
    if silent.any():
        detail += f"; {int(silent.sum())} of {silent.size} elements without a finite bound"
    return Observation(obs, bnd, kind, where, detail)


def diff(a, b) -> np.ndarray:
    """|a - b| elementwise in float64 (NaN where either is NaN; inf - inf is NaN)."""
    with np.errstate(invalid="ignore"):
        return np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))


def error_bound(variant, x, ctx, exact, *, denominator: str, form: str = "any", scale=None):
    """``attention_error_bound`` for the variant's claims on inputs ``x`` against ``exact``
    (an ``OracleResult``); ``scale`` overrides the claimed scale (candidate scales)."""
    import torch

    from verify.exact import errors

    d = x.q.shape[-1]
    kw: dict[str, Any] = dict(
        causal=x.causal,
        attn_mask=x.attn_mask,
        scale=variant.score_scale(d) if scale is None else scale,
        denominator=denominator,
        eps=variant.eps,
    )
    if variant.linear_map == "favor":
        kw["projection"] = variant.projection(d, torch.float64, "cpu")
    return errors.attention_error_bound(
        kernel_name(variant),
        x.q,
        x.k,
        x.v,
        dtype=ctx.dtype,
        exact=exact,
        form=form,
        device=ctx.device,
        exp_library=variant.exp_library,
        **kw,
    )


def shape_st(
    variant,
    *,
    causal: bool,
    B=(1, MAX_BATCH),
    H=(1, MAX_HEADS),
    T=(1, MAX_LEN),
    d=(1, MAX_DIM),
    d_v=(1, MAX_VALUE_DIM),
    cross: bool = True,
    distinct: bool = False,
):
    """Shapes with sizes in the given inclusive ranges; T (and S) respect ``length_multiple``;
    S == T when causal or not ``cross``; S != T when ``distinct``."""
    from hypothesis import assume
    from hypothesis import strategies as st

    from verify.strategies import Shape

    @st.composite
    def draw(draw_):
        t = draw_(lengths(variant, *T))
        s = draw_(lengths(variant, *T)) if (cross and not causal) else t
        if distinct:
            assume(s != t)
        return Shape(
            B=draw_(st.integers(*B)),
            H=draw_(st.integers(*H)),
            T=t,
            S=s,
            d=draw_(st.integers(*d)),
            d_v=draw_(st.integers(*d_v)),
        )

    return draw()


def inputs(variant, ctx, shape, *, causal: bool, cases=("random",), radius=None, scale=None):
    """``verify.strategies.attention_inputs`` with the variant's score radius (or ``radius``),
    the run's dtype and device, and the catalogue's minimum magnitude (D10 model range)."""
    from verify.strategies import attention_inputs

    return attention_inputs(
        shape,
        dtype=ctx.torch_dtype,
        device=ctx.device,
        causal=causal,
        radius=radius_strategy(variant, ctx) if radius is None else radius,
        scale=scale,
        cases=cases,
        min_magnitude=MIN_MAGNITUDE,
    )


def by_causal(variant, make, choices: tuple[bool, ...] | None = None):
    """``make(causal)`` for each supported causal flag, built once, drawn as ``one_of``."""
    from hypothesis import strategies as st

    return st.one_of([make(c) for c in (causal_choices(variant) if choices is None else choices)])


def plain_inputs(variant, ctx, **kw):
    """:func:`by_causal` of :func:`inputs` on :func:`shape_st` shapes (keywords to both:
    ``cases`` to inputs, the rest to shape_st)."""
    cases = kw.pop("cases", ("random",))
    return by_causal(
        variant,
        lambda c: inputs(variant, ctx, shape_st(variant, causal=c, **kw), causal=c, cases=cases),
    )


def values(shape, dtype, *, bound: float = 2.0):
    """Strategy of a float64 array of ``shape`` with entries 0 or of magnitude in
    [MIN_MAGNITUDE, bound], exactly representable in ``dtype`` (torch)."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    width = 16 if str(dtype) == "torch.float16" else (64 if str(dtype) == "torch.float64" else 32)
    mag = st.floats(MIN_MAGNITUDE, bound, allow_subnormal=False, width=width)
    elems = st.one_of(st.just(0.0), mag, mag.map(lambda z: -z))

    def rounded(arr):
        import torch

        return torch.from_numpy(arr).to(dtype).to(torch.float64).numpy()

    return hnp.arrays(np.float64, shape, elements=elems).map(rounded)


def tensor_like(arr, x):
    import torch

    return torch.from_numpy(np.ascontiguousarray(arr)).to(dtype=x.dtype, device=x.device)


def restrict(x, *, batch=None, heads=None, length: int | None = None):
    """The inputs restricted to some batch elements / heads, or to the first ``length``
    positions (queries and keys; the causal prefix)."""
    q, k, v, mask = x.q, x.k, x.v, x.attn_mask
    shp = x.shape
    if batch is not None:
        q, k, v = q[batch], k[batch], v[batch]
        if mask is not None and mask.shape[0] != 1:
            mask = mask[batch]
        shp = dataclasses.replace(shp, B=len(batch))
    if heads is not None:
        q, k, v = q[:, heads], k[:, heads], v[:, heads]
        if mask is not None and mask.shape[1] != 1:
            mask = mask[:, heads]
        shp = dataclasses.replace(shp, H=len(heads))
    if length is not None:
        q, k, v = q[:, :, :length], k[:, :, :length], v[:, :, :length]
        if mask is not None:
            mask = mask[:, :, :length, :length]
        shp = dataclasses.replace(shp, T=length, S=length)
    return dataclasses.replace(x, q=q, k=k, v=v, attn_mask=mask, shape=shp)


def poison_value(dtype) -> float:
    """min(1e10, finfo.max / 4) rounded to the dtype (the masked_inputs convention)."""
    import torch

    p = min(POISON, torch.finfo(dtype).max / 4)
    return float(torch.tensor(p, dtype=torch.float64).to(dtype))


def finite_rows(out, rows, bound, what: str) -> None:
    """NaN/inf in the rows that carry a statement is a variant failure."""
    import torch

    o = out[:, :, rows]
    stated = torch.from_numpy(np.isfinite(bound)).to(o.device)
    bad = (~torch.isfinite(o)) & stated
    if bool(bad.any()):
        raise VariantError(f"{what}: output has NaN/inf at index {bad.nonzero()[0].tolist()}")


# --------------------------------------------------------------------------- causality (D2)


def _causality_applies(variant, ctx):
    return oracle_applies(variant, ctx, causal=True)


def _causality_examples(variant, ctx):
    from hypothesis import strategies as st

    base = inputs(variant, ctx, shape_st(variant, causal=True, T=(2, MAX_LEN)), causal=True)

    @st.composite
    def draw(draw_):
        x = draw_(base)
        T = x.shape.T
        t = draw_(st.integers(0, T - 2))
        kind = draw_(st.sampled_from(("huge", "random")))
        n = T - t - 1
        s = x.shape
        if kind == "huge":
            p = poison_value(x.dtype)
            new = (
                np.full((s.B, s.H, n, s.d), p),
                np.full((s.B, s.H, n, s.d), p),
                np.full((s.B, s.H, n, s.d_v), -p),
            )
        else:
            new = tuple(draw_(values((s.B, s.H, n, dim), x.dtype)) for dim in (s.d, s.d, s.d_v))
        choices = {
            "last_kept": t,
            "future": kind,
            "path": draw_(st.sampled_from(path_names(variant))),
            "denominator": draw_(mode_st(variant, x)),
        }
        return Example(x, dict(choices, _future=new))

    return draw()


def _replace_rows(x, lo: int, new):
    q, k, v = x.q.clone(), x.k.clone(), x.v.clone()
    for tgt, arr in zip((q, k, v), new):
        tgt[:, :, lo:] = tensor_like(arr, x)
    return dataclasses.replace(x, q=q, k=k, v=v)


def _causality_check(variant, ex: Example, ctx):
    x, t = ex.inputs, ex.choices["last_kept"]
    mode, path = ex.choices["denominator"], ex.choices["path"]
    x2 = _replace_rows(x, t + 1, ex.choices["_future"])
    # rows <= t read positions <= t only: each computation's bound there is the prefix's
    ref, eb = exact_and_bound(
        variant, restrict(x, length=t + 1), ctx, denominator=mode, form=form_kind(path)
    )
    bound = 2.0 * eb.bound
    fn, kw = path_callable(variant, path), call_kwargs(variant, mode)
    rows = slice(0, t + 1)
    o1 = call(fn, x.q, x.k, x.v, causal=True, allow_nonfinite=True, **kw)
    o2 = call(fn, x2.q, x2.k, x2.v, causal=True, allow_nonfinite=True, **kw)
    finite_rows(o1, rows, bound, f"{path}")
    finite_rows(o2, rows, bound, f"{path} with future positions changed")
    return array_observation(
        diff(np64(o1[:, :, rows]), np64(o2[:, :, rows])),
        bound,
        what=f"{path}/{mode}: rows <= {t} after changing q, k, v at positions > {t} "
        f"({ex.choices['future']})",
    )


CAUSALITY = Property(
    id="causality",
    statement="with causal=True, changing q, k, v after position t (random or huge finite "
    "values) leaves outputs at positions <= t unchanged, on every code path",
    derivation="D2",
    applies=_causality_applies,
    examples=_causality_examples,
    check=_causality_check,
    faults=(8, 9),
    low_precision=True,
)


# --------------------------------------------------------------------------- prefix (D2)


def _prefix_examples(variant, ctx):
    from hypothesis import strategies as st

    m = variant.length_multiple

    base = inputs(variant, ctx, shape_st(variant, causal=True, T=(2 * m, MAX_LEN)), causal=True)

    @st.composite
    def draw(draw_):
        x = draw_(base)
        cut = m * draw_(st.integers(1, x.shape.T // m - 1))
        choices = {
            "prefix": cut,
            "path": draw_(st.sampled_from(path_names(variant))),
            "denominator": draw_(mode_st(variant, x)),
        }
        return Example(x, choices)

    return draw()


def _prefix_applies(variant, ctx):
    why = oracle_applies(variant, ctx, causal=True)
    if why:
        return why
    if 2 * variant.length_multiple > MAX_LEN:
        return f"length_multiple {variant.length_multiple}: no proper prefix within T <= {MAX_LEN}"
    return None


def _prefix_check(variant, ex: Example, ctx):
    x, t = ex.inputs, ex.choices["prefix"]
    mode, path = ex.choices["denominator"], ex.choices["path"]
    px = restrict(x, length=t)
    ref, eb = exact_and_bound(variant, px, ctx, denominator=mode, form=form_kind(path))
    bound = 2.0 * eb.bound
    fn, kw = path_callable(variant, path), call_kwargs(variant, mode)
    finite = bool(np.isfinite(bound).all())
    o_full = call(fn, x.q, x.k, x.v, causal=True, allow_nonfinite=True, **kw)
    o_pre = call(fn, px.q, px.k, px.v, causal=True, allow_nonfinite=not finite, **kw)
    finite_rows(o_full, slice(0, t), bound, path)
    return array_observation(
        diff(np64(o_full[:, :, :t]), np64(o_pre)),
        bound,
        what=f"{path}/{mode}: f(x)[:{t}] vs f(x[:{t}])",
    )


PREFIX_INVARIANCE = Property(
    id="prefix-invariance",
    statement="with causal=True, f(x)[:t] == f(x[:t]) for every prefix length t allowed by "
    "length_multiple, on every code path",
    derivation="D2",
    applies=_prefix_applies,
    examples=_prefix_examples,
    check=_prefix_check,
    faults=(2, 9),
    low_precision=True,
)


# --------------------------------------------------------------------------- independence


def _independence(axis: str):
    """batch (axis 0) or head (axis 1) independence: changing element b' leaves the others."""
    from hypothesis import strategies as st

    ax = 0 if axis == "batch" else 1
    top = MAX_BATCH if axis == "batch" else MAX_HEADS

    def examples(variant, ctx):
        sizes = {"B": (2, top)} if axis == "batch" else {"H": (2, top)}
        base = by_causal(
            variant, lambda c: inputs(variant, ctx, shape_st(variant, causal=c, **sizes), causal=c)
        )

        @st.composite
        def draw(draw_):
            x = draw_(base)
            n = x.q.shape[ax]
            which = draw_(st.integers(0, n - 1))
            new = []
            for t in (x.q, x.k, x.v):
                shp = list(t.shape)
                del shp[ax]
                new.append(draw_(values(tuple(shp), x.dtype)))
            choices = {
                f"changed_{axis}": which,
                "path": draw_(st.sampled_from(path_names(variant))),
                "denominator": draw_(mode_st(variant, x)),
            }
            return Example(x, dict(choices, _new=tuple(new)))

        return draw()

    def check(variant, ex: Example, ctx):
        x = ex.inputs
        which = ex.choices[f"changed_{axis}"]
        mode, path = ex.choices["denominator"], ex.choices["path"]
        n = x.q.shape[ax]
        keep = [i for i in range(n) if i != which]
        q, k, v = x.q.clone(), x.k.clone(), x.v.clone()
        for tgt, arr in zip((q, k, v), ex.choices["_new"]):
            tgt.select(ax, which).copy_(tensor_like(arr, x))
        sub = restrict(x, **({"batch": keep} if axis == "batch" else {"heads": keep}))
        ref, eb = exact_and_bound(variant, sub, ctx, denominator=mode, form=form_kind(path))
        bound = 2.0 * eb.bound
        fn, kw = path_callable(variant, path), call_kwargs(variant, mode)
        o1 = call(fn, x.q, x.k, x.v, causal=x.causal, allow_nonfinite=True, **kw)
        o2 = call(fn, q, k, v, causal=x.causal, allow_nonfinite=True, **kw)
        idx = np.asarray(keep)
        a, b = np64(o1).take(idx, axis=ax), np64(o2).take(idx, axis=ax)
        return array_observation(
            diff(a, b), bound, what=f"{path}/{mode}: other {axis} elements after changing {which}"
        )

    return examples, check


_batch_examples, _batch_check = _independence("batch")
_head_examples, _head_check = _independence("head")

BATCH_INDEPENDENCE = Property(
    id="batch-independence",
    statement="changing q, k, v of one batch element leaves every other batch element's "
    "output unchanged, on every code path",
    derivation="contract",
    applies=oracle_applies,
    examples=_batch_examples,
    check=_batch_check,
    faults=(4,),
    low_precision=True,
)

HEAD_INDEPENDENCE = Property(
    id="head-independence",
    statement="changing q, k, v of one head leaves every other head's output unchanged, on "
    "every code path",
    derivation="contract",
    applies=oracle_applies,
    examples=_head_examples,
    check=_head_check,
    faults=(4,),
    low_precision=True,
)


# --------------------------------------------------------------------------- permutation


def _perm_applies(variant, ctx):
    return oracle_applies(variant, ctx, causal=False)


def _perm_examples(variant, ctx):
    from hypothesis import strategies as st

    base = inputs(variant, ctx, shape_st(variant, causal=False, T=(2, MAX_LEN)), causal=False)

    @st.composite
    def draw(draw_):
        x = draw_(base)
        choices = {
            "query_perm": draw_(st.permutations(range(x.shape.T))),
            "key_perm": draw_(st.permutations(range(x.shape.S))),
            "path": draw_(st.sampled_from(path_names(variant))),
            "denominator": draw_(mode_st(variant, x)),
        }
        return Example(x, choices)

    return draw()


def _perm_check(variant, ex: Example, ctx):
    x = ex.inputs
    pt, ps = list(ex.choices["query_perm"]), list(ex.choices["key_perm"])
    mode, path = ex.choices["denominator"], ex.choices["path"]
    # the bound is a symmetric function of the keys: the same for both computations
    ref, eb = exact_and_bound(variant, x, ctx, denominator=mode, form=form_kind(path))
    bound = 2.0 * eb.bound[:, :, pt]
    fn, kw = path_callable(variant, path), call_kwargs(variant, mode)
    finite = bool(np.isfinite(eb.bound).all())
    o1 = call(fn, x.q, x.k, x.v, causal=False, allow_nonfinite=not finite, **kw)
    o2 = call(
        fn,
        x.q[:, :, pt],
        x.k[:, :, ps],
        x.v[:, :, ps],
        causal=False,
        allow_nonfinite=not finite,
        **kw,
    )
    return array_observation(
        diff(np64(o2), np64(o1)[:, :, pt]),
        bound,
        what=f"{path}/{mode}: f(q[P], k[Q], v[Q]) vs f(q, k, v)[P]",
    )


PERMUTATION_EQUIVARIANCE = Property(
    id="permutation-equivariance",
    statement="without a causal mask, permuting keys and values together leaves the outputs "
    "unchanged and permuting queries permutes the outputs",
    derivation="contract",
    applies=_perm_applies,
    examples=_perm_examples,
    check=_perm_check,
    low_precision=True,
)


# --------------------------------------------------------------------------- linearity in V


def _linear_applies(variant, ctx):
    why = oracle_applies(variant, ctx)
    if why:
        return why
    if not modes(variant, LINEAR_IN_V_DENOMINATORS):
        return f"no claimed denominator mode is linear in v (claimed: {modes(variant)})"
    return None


def _grid_size(dtype_name: str) -> int:
    """M with entries m/M (|m| <= M) such that a v1 + b v2 is exact for a, |b| in {1/2, 1, 2}:
    log2 M + 2 (exponent spread) + 1 (carry) <= precision bits."""
    from derivations.rounding import precision_bits

    return 2 ** min(precision_bits(dtype_name) - 3, 10)


def _linear_examples(variant, ctx):
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    M = _grid_size(ctx.dtype)

    base = by_causal(variant, lambda c: inputs(variant, ctx, shape_st(variant, causal=c), causal=c))

    @st.composite
    def draw(draw_):
        x = draw_(base)
        grid = hnp.arrays(np.int64, x.shape.v, elements=st.integers(-M, M))
        v1 = draw_(grid).astype(np.float64) / M
        v2 = draw_(grid).astype(np.float64) / M
        choices = {
            "a": draw_(st.sampled_from((1.0, 2.0, 0.5, -1.0))),
            "b": draw_(st.sampled_from((1.0, -2.0, 0.5, -0.5, 2.0))),
            "path": draw_(st.sampled_from(path_names(variant))),
            "denominator": draw_(mode_st(variant, x, LINEAR_IN_V_DENOMINATORS)),
        }
        return Example(x, dict(choices, _v1=v1, _v2=v2))

    return draw()


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
    ebs = [exact_and_bound(variant, xi, ctx, denominator=mode, form=kind)[1] for xi in xs]
    bound = abs(a) * ebs[0].bound + abs(b) * ebs[1].bound + ebs[2].bound
    fn, kw = path_callable(variant, path), call_kwargs(variant, mode)
    outs = [
        np64(call(fn, xi.q, xi.k, xi.v, causal=x.causal, allow_nonfinite=True, **kw)) for xi in xs
    ]
    return array_observation(
        _exact_residual(outs[2], outs[0], outs[1], a, b),
        bound,
        what=f"{path}/{mode}: f(a v1 + b v2) - a f(v1) - b f(v2), a = {a}, b = {b}",
    )


LINEARITY_IN_V = Property(
    id="linearity-in-v",
    statement="f(q, k, a v1 + b v2) == a f(q, k, v1) + b f(q, k, v2) (modes sum, none, count; "
    "a, b powers of two and grid values, so the combination is exact)",
    derivation="contract",
    applies=_linear_applies,
    examples=_linear_examples,
    check=_linear_check,
    faults=(6,),
    low_precision=True,
)


# --------------------------------------------------------------------------- determinism

STATE_PREFILL = "state.prefill"


def _det_applies(variant, ctx):
    if ctx.dtype not in variant.dtypes:
        return f"the variant does not claim {ctx.dtype}"
    return None


def _det_examples(variant, ctx):
    from hypothesis import strategies as st

    paths = path_names(variant)
    if variant.state_api is not None and variant.supports_causal(True):
        paths = (*paths, STATE_PREFILL)

    base = plain_inputs(variant, ctx)
    causal_only = inputs(variant, ctx, shape_st(variant, causal=True), causal=True)

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
        from verify.properties.forms import prefill

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


DETERMINISM = Property(
    id="determinism",
    statement="two calls on the same inputs return bitwise identical outputs, on every code "
    "path and the state API's prefill",
    derivation="contract",
    applies=_det_applies,
    examples=_det_examples,
    check=_det_check,
    low_precision=True,
)


# --------------------------------------------------------------------------- convexity (D4)


def _normalized_modes(variant) -> tuple[str, ...]:
    return modes(variant, ("sum",))


def _convex_applies(variant, ctx):
    why = oracle_applies(variant, ctx)
    if why:
        return why
    if not _normalized_modes(variant):
        return "the variant is not normalized (divides by no kernel sum): convexity does not apply"
    if variant.positive_kernel is None:
        return "kernel positivity unknown: convexity does not apply"
    if not variant.positive_kernel:
        return f"signed kernel ({variant.kernel}): convexity does not apply"
    return None


def _convex_examples(variant, ctx):
    from hypothesis import strategies as st

    base = plain_inputs(variant, ctx, cases=("random", "unit_values"))

    @st.composite
    def draw(draw_):
        x = draw_(base)
        return Example(x, {"path": draw_(st.sampled_from(path_names(variant)))})

    return draw()


def _convex_check(variant, ex: Example, ctx):
    x, path = ex.inputs, ex.choices["path"]
    ref, eb = exact_and_bound(variant, x, ctx, denominator="sum", form=form_kind(path))
    fn, kw = path_callable(variant, path), call_kwargs(variant, "sum")
    o = np64(call(fn, x.q, x.k, x.v, causal=x.causal, **kw))
    vis = x.visible()[..., None]  # (B, H, T, S, 1)
    v = np64(x.v)[:, :, None]  # (B, H, 1, S, d_v)
    lo = np.where(vis, v, np.inf).min(axis=3)
    hi = np.where(vis, v, -np.inf).max(axis=3)
    if variant.eps:  # weights sum to D/(D + eps) < 1: a sub-convex combination, 0 in the box
        lo, hi = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
    outside = np.maximum(np.maximum(lo - o, o - hi), 0.0)  # exact: differences of close floats
    return array_observation(
        outside,
        eb.bound,
        what=f"{path}: distance of o_t from [min_s v_s, max_s v_s] over visible keys "
        f"({x.case} values{', widened to 0: declared eps' if variant.eps else ''})",
    )


CONVEX_COMBINATION = Property(
    id="convex-combination",
    statement="normalized attention with a positive kernel puts each output in the box "
    "[min_s v_s, max_s v_s] of the visible values (v == 1 gives 1; with a declared eps the "
    "box includes 0), on every code path",
    derivation="D4",
    applies=_convex_applies,
    examples=_convex_examples,
    check=_convex_check,
    faults=(6,),
    low_precision=True,
)


# --------------------------------------------------------------------------- uniform (D2)


def _uniform_modes(variant, d: int | None = None) -> tuple[str, ...]:
    k0 = variant.parsed_kernel.kappa_at_zero(1 if d is None else d)
    ms = modes(variant, LINEAR_IN_V_DENOMINATORS)
    return tuple(m for m in ms if not (m == "sum" and k0 == 0))


def _uniform_applies(variant, ctx):
    why = oracle_applies(variant, ctx)
    if why:
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
    from hypothesis import strategies as st

    base = plain_inputs(variant, ctx, cases=("zeros",))

    @st.composite
    def draw(draw_):
        x = draw_(base)
        choices = {
            "path": draw_(st.sampled_from(path_names(variant))),
            "denominator": draw_(mode_st(variant, x, _uniform_modes(variant))),
        }
        return Example(x, choices)

    return draw()


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
    err = np.empty(o.shape)
    for b, h, t in np.ndindex(*o.shape[:3]):
        keys = np.nonzero(vis[b, h, t])[0]
        n = len(keys)
        for j in range(o.shape[3]):
            total = sum((Fraction(float(v[b, h, s, j])) for s in keys), Fraction(0))
            if n == 0:
                exact = Fraction(0)
            elif mode == "sum":
                exact = k0 * total / (k0 * n + eps)
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


UNIFORM_WEIGHTS = Property(
    id="uniform-weights",
    statement="q = k = 0 gives every visible key the weight kappa(0) (1 for exp, kappa_N, "
    "FAVOR+; d for elu1): the mean of the visible values (sum, count) or kappa(0) times "
    "their sum (none)",
    derivation="D2",
    applies=_uniform_applies,
    examples=_uniform_examples,
    check=_uniform_check,
    faults=(4, 6),
    low_precision=True,
)


# --------------------------------------------------------------------------- scale once

SCALE_DIMS = (1, 2, 4)


def _scale_applies(variant, ctx):
    why = oracle_applies(variant, ctx)
    if why:
        return why
    if not variant.exp_type:
        return (
            f"{variant.kernel} is an element-wise feature map: its scale is a factor on q, not "
            "a score scale"
        )
    if variant.order == 0:
        return "kappa_0 = 1 is constant: the scale has no effect"
    if not _plain_modes(variant):
        return f"no claimed denominator mode is sum or none (claimed: {modes(variant)})"
    return None


def _plain_modes(variant) -> tuple[str, ...]:
    return modes(variant, ("sum",) if variant.normalized else ("none",)) or modes(
        variant, ("sum", "none")
    )


def scale_candidates(variant) -> dict[str, Any]:
    """Candidate score scales as functions of d: the claim, the claim applied twice, 1/d,
    d^-1/4, 1/sqrt(d) and 1 (no scale); names merged where two coincide for every d > 1."""
    raw = {
        "claimed": variant.score_scale,
        "claimed applied twice": lambda d: variant.score_scale(d) ** 2,
        "1/d": lambda d: 1.0 / d,
        "d^-1/4": lambda d: d**-0.25,
        "1/sqrt(d)": lambda d: 1.0 / math.sqrt(d),
        "1": lambda d: 1.0,
    }
    groups: list[tuple[list[str], Any]] = []  # insertion order kept: the claim first
    for name, fn in raw.items():
        for names, other in groups:
            if all(math.isclose(fn(d), other(d), rel_tol=1e-15) for d in (2, 3, 4)):
                names.append(name)
                break
        else:
            groups.append(([name], fn))
    return {" = ".join(names): fn for names, fn in groups}


def _scale_examples(variant, ctx):
    from hypothesis import strategies as st

    R = 4.0 if variant.order is None else max(radius_hi(variant.order), 0.5)

    @st.composite
    def draw(draw_):
        T = draw_(lengths(variant, 2, 6))  # S = T >= 2: one key is v whatever the scale
        B, H, d_v = draw_(st.integers(1, 2)), draw_(st.integers(1, 2)), draw_(st.integers(1, 3))
        causal = draw_(st.sampled_from(causal_choices(variant)))
        xs = []
        for d in SCALE_DIMS:
            shape = shape_st(
                variant,
                causal=causal,
                B=(B, B),
                H=(H, H),
                T=(T, T),
                d=(d, d),
                d_v=(d_v, d_v),
                cross=False,
            )
            radius = st.floats(R / 2, R)
            xs.append(
                draw_(
                    inputs(
                        variant,
                        ctx,
                        shape,
                        causal=causal,
                        radius=radius,
                        scale=variant.score_scale(d),
                    )
                )
            )
        choices = {"dims": SCALE_DIMS, "path": draw_(st.sampled_from(path_names(variant)))}
        return Example(_Several(xs), choices)

    return draw()


@functools.cache
def radius_hi(order: int) -> float:
    from derivations.truncation import informative_radius

    return informative_radius(order, 0.5)


class _Several:
    """Several AttentionInputs shown as one example."""

    def __init__(self, items) -> None:
        self.items = list(items)

    def __repr__(self) -> str:
        return "\n".join(repr(x) for x in self.items)

    def snippet(self) -> str:
        return "\n".join(f"# --- input {i}\n{x.snippet()}" for i, x in enumerate(self.items))


def _scale_check(variant, ex: Example, ctx):
    from verify.exact import oracle
    from verify.exact.errors import compare

    path = ex.choices["path"]
    mode = _plain_modes(variant)[0]
    fn, kw = path_callable(variant, path), call_kwargs(variant, mode)
    kind = form_kind(path)
    cands = scale_candidates(variant)
    claimed_name = next(iter(cands))  # the claim comes first (merged with what it equals)
    worst: dict[str, float] = dict.fromkeys(cands, 0.0)
    claimed_obs = []
    for x in ex.inputs.items:
        d = x.shape.d
        ref, eb = exact_and_bound(variant, x, ctx, denominator=mode, form=kind)
        o = call(fn, x.q, x.k, x.v, causal=x.causal, **kw)
        c_claimed = cands[claimed_name](d)
        mine = compare(o, eb, ref, what=f"{path} at d = {d}, claimed scale")
        claimed_obs.append(mine)
        for name, c in cands.items():
            if name == claimed_name or c(d) == c_claimed:  # the same computation (e.g. d = 1)
                obs = mine
            else:
                r = oracle.reference(
                    x.q,
                    x.k,
                    x.v,
                    kernel=_oracle_kernel(variant),
                    **_oracle_kw(variant, x, mode, c(d)),
                )
                e = error_bound(variant, x, ctx, r, denominator=mode, form=kind, scale=c(d))
                try:
                    obs = compare(o, e, r)
                except NotApplicable:
                    continue
            worst[name] = max(worst[name], obs.ratio)
    fits = [n for n, r in worst.items() if r <= 1.0]
    if len(fits) == len(worst):  # e.g. q = 0 or equal values: the scale cannot show
        raise NotApplicable("uninformative inputs: every candidate scale fits")
    summary = ", ".join(f"{n}: {r:.3g}" for n, r in worst.items())
    obs = max(claimed_obs, key=lambda o: o.ratio)
    verdict = f"fits: {', '.join(fits) if fits else 'no candidate'}"
    obs.detail = f"{verdict}; worst error/bound per candidate scale at d in {SCALE_DIMS}: " + (
        f"{summary}; {obs.detail}"
    )
    return obs


def _oracle_kernel(variant) -> str:
    name = kernel_name(variant)
    return "exp" if name == "softmax" else name


def _oracle_kw(variant, x, mode, scale) -> dict[str, Any]:
    import torch

    kw: dict[str, Any] = dict(
        causal=x.causal, attn_mask=x.attn_mask, scale=scale, denominator=mode, eps=variant.eps
    )
    if variant.linear_map == "favor":
        kw["projection"] = variant.projection(x.shape.d, torch.float64, "cpu")
    return kw


SCALE_ONCE = Property(
    id="scale-once",
    statement="exp-type kernels use the claimed score scale at d = 1, 2, 4 (not 1/d, d^-1/4, "
    "1/sqrt(d), 1 or the claim applied twice); the detail names the candidates that fit",
    derivation="contract",
    applies=_scale_applies,
    examples=_scale_examples,
    check=_scale_check,
)


# --------------------------------------------------------------------------- single key


def _single_applies(variant, ctx):
    why = oracle_applies(variant, ctx)
    if why:
        return why
    if not _normalized_modes(variant):
        return "the variant is not normalized: a single key gives kappa(x) v, not v"
    if variant.eps:
        return (
            f"declared eps = {variant.eps}: a single key gives v kappa/(kappa + eps), not v "
            "(oracle-agreement covers it)"
        )
    if variant.length_multiple > 1:
        m = variant.length_multiple
        return f"S = 1 is not a length the variant accepts (length_multiple {m})"
    return None


def _single_examples(variant, ctx):
    from hypothesis import strategies as st

    base = plain_inputs(variant, ctx, cases=("single_key",))

    @st.composite
    def draw(draw_):
        x = draw_(base)
        return Example(x, {"path": draw_(st.sampled_from(path_names(variant)))})

    return draw()


def _single_check(variant, ex: Example, ctx):
    x, path = ex.inputs, ex.choices["path"]
    ref, eb = exact_and_bound(variant, x, ctx, denominator="sum", form=form_kind(path))
    fn, kw = path_callable(variant, path), call_kwargs(variant, "sum")
    finite = bool(np.isfinite(eb.bound).all())
    o = np64(call(fn, x.q, x.k, x.v, causal=x.causal, allow_nonfinite=not finite, **kw))
    expected = np.broadcast_to(np64(x.v), o.shape)  # one key: o_t = v_0 for every t
    return array_observation(
        diff(o, expected), eb.bound, what=f"{path}: S = 1, o_t vs v_0 (T = {x.shape.T})"
    )


SINGLE_KEY = Property(
    id="single-key",
    statement="normalized attention over a single key returns that key's value (where "
    "kappa != 0 at its score), on every code path",
    derivation="contract",
    applies=_single_applies,
    examples=_single_examples,
    check=_single_check,
    faults=(6, 12),
    low_precision=True,
)


# --------------------------------------------------------------------------- masks (D6)


def _mask_applies(variant, ctx):
    why = oracle_applies(variant, ctx)
    if why:
        return why
    if not variant.supports_mask:
        return "the variant does not claim mask support (supports_mask=False)"
    return None


def _dead_keys(x) -> np.ndarray:
    return ~x.visible().any(axis=2)  # (B, H, S): keys no query sees


def _key_padding_inputs(variant, ctx, shape, causal):
    """Inputs with a key-padding mask (B|1, H|1, 1, S); dead keys poisoned (k = p, v = -p)."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    base = inputs(variant, ctx, shape, causal=causal)

    @st.composite
    def draw(draw_):
        x = draw_(base)
        s = x.shape
        b = draw_(st.sampled_from((s.B, 1)))
        h = draw_(st.sampled_from((s.H, 1)))
        keep = draw_(hnp.arrays(np.bool_, (b, h, 1, s.S), elements=st.booleans()))
        import torch

        x = dataclasses.replace(x, attn_mask=torch.from_numpy(keep).to(x.device))
        return _poisoned(x)

    return draw()


def _poisoned(x):
    import torch

    p = poison_value(x.dtype)
    dead = torch.from_numpy(np.ascontiguousarray(_dead_keys(x))).to(x.device)
    k, v = x.k.clone(), x.v.clone()
    k[dead] = p
    v[dead] = -p
    return dataclasses.replace(x, k=k, v=v, case="masked")


def _mask_examples(variant, ctx):
    from hypothesis import strategies as st

    from verify.strategies import masked_inputs

    general = by_causal(  # general (B|1, H|1, T, S) masks on forward
        variant,
        lambda c: masked_inputs(
            poison=POISON,
            shape=shape_st(variant, causal=c),
            dtype=ctx.torch_dtype,
            device=ctx.device,
            causal=c,
            radius=radius_strategy(variant, ctx),
            min_magnitude=MIN_MAGNITUDE,
        ),
    )
    # forms consume keys into a state: key-padding masks
    padding = by_causal(
        variant, lambda c: _key_padding_inputs(variant, ctx, shape_st(variant, causal=c), c)
    )

    @st.composite
    def draw(draw_):
        path = draw_(st.sampled_from(path_names(variant)))
        x = draw_(general if path == FORWARD else padding)
        s = x.shape
        alt = (
            draw_(values((s.B, s.H, s.S, s.d), x.dtype)),
            draw_(values((s.B, s.H, s.S, s.d_v), x.dtype)),
        )
        choices = {"path": path, "denominator": draw_(mode_st(variant, x))}
        return Example(x, dict(choices, _alt=alt))

    return draw()


def _mask_check(variant, ex: Example, ctx):
    import torch

    from verify.exact.errors import compare

    x, path, mode = ex.inputs, ex.choices["path"], ex.choices["denominator"]
    if mode == "layernorm" and x.shape.d_v < 2:
        raise NotApplicable("layernorm needs d_v >= 2 (D7)")
    dead = torch.from_numpy(np.ascontiguousarray(_dead_keys(x))).to(x.device)
    k_alt, v_alt = (tensor_like(a, x) for a in ex.choices["_alt"])
    x_alt = dataclasses.replace(
        x,
        k=torch.where(dead[..., None], k_alt, x.k),
        v=torch.where(dead[..., None], v_alt, x.v),
    )
    # masked keys contribute nothing (D6): both computations round the same visible terms,
    # so the bound of each is the bound stated on x_alt (ordinary values at masked keys)
    ref, eb = exact_and_bound(variant, x_alt, ctx, denominator=mode, form=form_kind(path))
    fn = path_callable(variant, path)
    s = x.shape
    # forward: the claimed (B, H, T, S) mask shape; forms: key-padding (B|1, H|1, 1, S)
    mask = x.attn_mask.expand(s.B, s.H, s.T, s.S) if path == FORWARD else x.attn_mask
    kw = call_kwargs(variant, mode, mask)
    o = call(fn, x.q, x.k, x.v, causal=x.causal, allow_nonfinite=True, **kw)
    o_alt = call(fn, x_alt.q, x_alt.k, x_alt.v, causal=x.causal, allow_nonfinite=True, **kw)
    empty = ~x.visible().any(axis=-1)  # (B, H, T)
    obs = []
    if empty.any():
        there = np.concatenate([np.abs(np64(t))[empty].ravel() for t in (o, o_alt)])
        worst = math.inf if np.isnan(there).any() else float(there.max())
        obs.append(
            Observation(
                worst,
                0.0,
                "exact",
                "",
                f"{path}/{mode}: "
                f"{int(empty.sum())} rows with no visible key must be exactly "
                f"zero; largest |o| there {worst:.3e}",
            )
        )
    obs.append(
        array_observation(
            diff(np64(o), np64(o_alt)),
            2.0 * eb.bound,
            what=f"{path}/{mode}: masked keys poisoned ({poison_value(x.dtype):.3g}) vs "
            "replaced by other values",
        )
    )
    try:
        obs.append(compare(o_alt, eb, ref, what=f"{path}/{mode}: masked output vs oracle"))
    except NotApplicable:
        pass
    return obs


MASKS = Property(
    id="masks",
    statement="masked keys holding huge finite values (1e10) have no influence, rows with no "
    "visible key are exactly zero, and masked outputs match the oracle (general masks on "
    "forward, key-padding masks on the forms)",
    derivation="D6",
    applies=_mask_applies,
    examples=_mask_examples,
    check=_mask_check,
    faults=(8,),
    low_precision=True,
)


# --------------------------------------------------------------------------- alignment


def _align_applies(variant, ctx):
    why = oracle_applies(variant, ctx, causal=True)
    if why:
        return why
    if variant.causal_alignment is None:
        return "the variant declares no causal alignment for T != S (causal_alignment=None)"
    if MAX_LEN < 2 * variant.length_multiple:
        return "length_multiple leaves no two distinct lengths"
    return None


def _align_examples(variant, ctx):
    from hypothesis import strategies as st

    base = inputs(variant, ctx, shape_st(variant, causal=False, distinct=True), causal=False)

    @st.composite
    def draw(draw_):
        x = draw_(base)
        return Example(x, {"path": draw_(st.sampled_from(path_names(variant)))})

    return draw()


def _align_check(variant, ex: Example, ctx):
    from verify.exact.errors import compare

    x, path = ex.inputs, ex.choices["path"]
    align = variant.causal_alignment
    vis = visible(x.shape.T, x.shape.S, causal=True, alignment=align, device=x.device)[None, None]
    xm = dataclasses.replace(x, attn_mask=vis)
    mode = "sum" if variant.normalized else "none"
    ref, eb = exact_and_bound(variant, xm, ctx, denominator=mode, form=form_kind(path))
    fn, kw = path_callable(variant, path), call_kwargs(variant, mode)
    finite = bool(np.isfinite(eb.bound).all())
    o = call(fn, x.q, x.k, x.v, causal=True, allow_nonfinite=not finite, **kw)
    return compare(o, eb, ref, what=f"{path}: causal, T = {x.shape.T}, S = {x.shape.S}, {align}")


CAUSAL_ALIGNMENT = Property(
    id="causal-alignment",
    statement="causal=True with T != S follows the declared alignment (top-left: s <= t; "
    "bottom-right: s <= t + S - T) against the oracle, on every code path",
    derivation="contract",
    applies=_align_applies,
    examples=_align_examples,
    check=_align_check,
    faults=(7,),
    low_precision=True,
)


#: modules of this project's own implementations (adapters of third-party code are not)
PROJECT_MODULES = ("verify.builtins", "verify.attention")


def project_owned(variant) -> bool:
    """Whether the variant's forward is this project's own implementation (defined in one of
    ``PROJECT_MODULES``; ``verify.adapters`` wrap third-party code and do not count)."""
    fn = variant.forward
    while isinstance(fn, functools.partial):
        fn = fn.func
    mod = str(getattr(fn, "__module__", ""))
    return any(mod == m or mod.startswith(m + ".") for m in PROJECT_MODULES)


def _mismatch_applies(variant, ctx):
    if ctx.dtype not in variant.dtypes:
        return f"the variant does not claim {ctx.dtype}"
    if not variant.supports_causal(True):
        return "the variant does not support causal=True"
    if variant.causal_alignment is not None:
        return f"the variant declares {variant.causal_alignment} alignment (causal-alignment)"
    if not project_owned(variant):
        return (
            "third-party variant without a declared causal alignment: what it does for causal "
            "T != S is not claimed (declare causal_alignment to have it checked)"
        )
    return None


def _mismatch_check(variant, ex: Example, ctx):
    x, path = ex.inputs, ex.choices["path"]
    fn = path_callable(variant, path)
    lay = variant.layout
    what = f"{path}: causal=True with T = {x.shape.T}, S = {x.shape.S}"
    try:
        fn.forward(to_layout(x.q, lay), to_layout(x.k, lay), to_layout(x.v, lay), causal=True)
    except ValueError as exc:
        if "causal" in str(exc):
            return Observation(0.0, 0.0, "exact", "", f"{what}: ValueError {exc}")
        return Observation(1.0, 0.0, "exact", "", f"{what}: ValueError not naming 'causal': {exc}")
    except Exception as exc:
        return Observation(
            1.0, 0.0, "exact", "", f"{what}: raised {type(exc).__name__} ({exc}), not ValueError"
        )
    return Observation(1.0, 0.0, "exact", "", f"{what}: returned an output instead of raising")


CAUSAL_MISMATCH_REJECTED = Property(
    id="causal-mismatch-rejected",
    statement="the project's API rejects causal=True with T != S by a ValueError naming "
    "'causal' (alignment is ambiguous; decode through the state API), on every code path",
    derivation="contract",
    applies=_mismatch_applies,
    examples=_align_examples,
    check=_mismatch_check,
    faults=(7,),
)


PROPERTIES = (
    CAUSALITY,
    PREFIX_INVARIANCE,
    BATCH_INDEPENDENCE,
    HEAD_INDEPENDENCE,
    PERMUTATION_EQUIVARIANCE,
    LINEARITY_IN_V,
    DETERMINISM,
    CONVEX_COMBINATION,
    UNIFORM_WEIGHTS,
    SCALE_ONCE,
    SINGLE_KEY,
    MASKS,
    CAUSAL_ALIGNMENT,
    CAUSAL_MISMATCH_REJECTED,
)
