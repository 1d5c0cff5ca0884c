"""Dependence properties: which inputs an output may depend on (D2 and the API contract).

Each property compares two computations (or one computation and a closed form) whose exact
values are equal by the definition o_t = sum_s kappa(x_ts) v_s / sum_s kappa(x_ts) (the notation
of D2 and D6); the bound is the sum of the two computations' D10 bounds
(``verify.exact.errors.attention_error_bound`` against the exact value), stated before the
variant's outputs are read. Every property runs on every code path the variant exposes
(``forward`` and each entry of ``forms``), with the form kind parsed from the form's name.

Restricted bounds: the D10 bound of an output row depends only on the inputs that row reads (its
query and its visible keys), so when two computations read the same inputs on some rows (rows
<= t of a causal pass, the unchanged batch elements or heads), their bound there is stated on
the restricted inputs (the prefix, the other elements). This also keeps the bound finite when
the other positions hold huge finite values (1e10, fault classes 8, 9).

Ids: ``causality``, ``prefix-invariance``, ``batch-independence``, ``head-independence``,
``permutation-equivariance``.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.calls import call
from verify.properties.support.claims import structural_applies
from verify.properties.support.common import MAX_BATCH, MAX_HEADS, MAX_LEN, Example
from verify.properties.support.inputs import (
    plain_inputs,
    poison_value,
    restrict,
    score_cases,
    shaped_inputs,
    tensor_like,
    values,
)
from verify.properties.support.observe import array_observation, diff, finite_rows, np64
from verify.properties.support.paths import (
    call_kwargs,
    form_kind,
    path_callable,
    with_path_and_mode,
)
from verify.properties.support.structure import (
    combined,
    model_bound,
    weights_bound,
)
from verify.spec.results import VariantError

# --------------------------------------------------------------------------- causality (D2)


_causality_applies = functools.partial(structural_applies, causal=True)


def _rows(bound, rows):
    return None if bound is None else bound[:, :, rows]


def _future(draw_, x) -> dict:
    """The last position kept, t, and new q, k, v at the positions > t: poison (huge) or
    random values."""
    from hypothesis import strategies as st

    s = x.shape
    t = draw_(st.integers(0, s.T - 2))
    kind = draw_(st.sampled_from(("huge", "random")))
    n = s.T - t - 1
    if kind == "huge":
        p = poison_value(x.dtype)
        new = (
            np.full((s.B, s.H, n, s.d), p),
            np.full((s.B, s.H, n, s.d), p),
            np.full((s.B, s.H, n, s.d_v), -p),
        )
    else:
        new = tuple(draw_(values((s.B, s.H, n, dim), x.dtype)) for dim in (s.d, s.d, s.d_v))
    return {"last_kept": t, "future": kind, "_future": new}


def _causality_examples(variant, ctx):
    base = shaped_inputs(variant, ctx, causal=True, T=(2, MAX_LEN), cases=score_cases(variant))
    return with_path_and_mode(variant, base, _future)


def _replace_rows(x, lo: int, new):
    q, k, v = x.q.clone(), x.k.clone(), x.v.clone()
    for tgt, arr in zip((q, k, v), new):
        tgt[:, :, lo:] = tensor_like(arr, x)
    return dataclasses.replace(x, q=q, k=k, v=v)


def _causality_check(variant, ex: Example, ctx):
    x, t = ex.inputs, ex.choices["last_kept"]
    mode, path = ex.choices["denominator"], ex.choices["path"]
    x2 = _replace_rows(x, t + 1, ex.choices["_future"])
    fn, kw = path_callable(variant, path), call_kwargs(variant, mode)
    rows = slice(0, t + 1)
    o1 = call(fn, x.q, x.k, x.v, causal=True, allow_nonfinite=True, **kw)
    o2 = call(fn, x2.q, x2.k, x2.v, causal=True, allow_nonfinite=True, **kw)
    # rows <= t read positions <= t only: the model's bound there is the prefix's
    bound = combined(
        model_bound(variant, restrict(x, length=t + 1), ctx, mode=mode, form=form_kind(path)),
        _rows(weights_bound(fn, x, kw, causal=True, mode=mode, dtype=ctx.model_dtype, o=o1), rows),
    )
    finite_rows(o1, rows, bound, f"{path}")
    finite_rows(o2, rows, bound, f"{path} with future positions changed")
    return array_observation(
        diff(np64(o1[:, :, rows]), np64(o2[:, :, rows])),
        bound,
        what=f"{path}/{mode}: rows <= {t} after changing q, k, v at positions > {t} "
        f"({ex.choices['future']})",
    )


CAUSALITY = declare("causality", _causality_applies, _causality_examples, _causality_check)


# --------------------------------------------------------------------------- prefix (D2)


def _prefix_examples(variant, ctx):
    from hypothesis import strategies as st

    m = variant.length_multiple

    def cut(draw_, x):
        return {"prefix": m * draw_(st.integers(1, x.shape.T // m - 1))}

    base = shaped_inputs(variant, ctx, causal=True, T=(2 * m, MAX_LEN), cases=score_cases(variant))
    return with_path_and_mode(variant, base, cut)


def _prefix_applies(variant, ctx):
    if why := structural_applies(variant, ctx, causal=True):
        return why
    if 2 * variant.length_multiple > MAX_LEN:
        return f"length_multiple {variant.length_multiple}: no proper prefix within T <= {MAX_LEN}"
    return None


def _prefix_check(variant, ex: Example, ctx):
    x, t = ex.inputs, ex.choices["prefix"]
    mode, path = ex.choices["denominator"], ex.choices["path"]
    px = restrict(x, length=t)
    fn, kw = path_callable(variant, path), call_kwargs(variant, mode)
    o_full = call(fn, x.q, x.k, x.v, causal=True, allow_nonfinite=True, **kw)
    o_pre = call(fn, px.q, px.k, px.v, causal=True, allow_nonfinite=True, **kw)
    bound = combined(
        model_bound(variant, px, ctx, mode=mode, form=form_kind(path)),
        weights_bound(fn, px, kw, causal=True, mode=mode, dtype=ctx.model_dtype, o=o_pre),
    )
    if np.isfinite(bound).all() and not np.isfinite(np64(o_pre)).all():
        raise VariantError(f"{path}: f(x[:{t}]) has NaN/inf where the bound is finite")
    finite_rows(o_full, slice(0, t), bound, path)
    return array_observation(
        diff(np64(o_full[:, :, :t]), np64(o_pre)),
        bound,
        what=f"{path}/{mode}: f(x)[:{t}] vs f(x[:{t}])",
    )


PREFIX_INVARIANCE = declare("prefix-invariance", _prefix_applies, _prefix_examples, _prefix_check)


# --------------------------------------------------------------------------- independence


def _independence(axis: str):
    """batch (axis 0) or head (axis 1) independence: changing element b' leaves the others."""
    from hypothesis import strategies as st

    ax = 0 if axis == "batch" else 1
    top = MAX_BATCH if axis == "batch" else MAX_HEADS

    def change(draw_, x):
        which = draw_(st.integers(0, x.q.shape[ax] - 1))
        new = []
        for t in (x.q, x.k, x.v):
            shp = list(t.shape)
            del shp[ax]
            new.append(draw_(values(tuple(shp), x.dtype)))
        return {f"changed_{axis}": which, "_new": tuple(new)}

    def examples(variant, ctx):
        sizes = {"B": (2, top)} if axis == "batch" else {"H": (2, top)}
        return with_path_and_mode(variant, plain_inputs(variant, ctx, **sizes), change)

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
        fn, kw = path_callable(variant, path), call_kwargs(variant, mode)
        o1 = call(fn, x.q, x.k, x.v, causal=x.causal, allow_nonfinite=True, **kw)
        o2 = call(fn, q, k, v, causal=x.causal, allow_nonfinite=True, **kw)
        idx = np.asarray(keep)
        free = weights_bound(fn, x, kw, causal=x.causal, mode=mode, dtype=ctx.model_dtype, o=o1)
        bound = combined(
            model_bound(variant, sub, ctx, mode=mode, form=form_kind(path)),
            None if free is None else free.take(idx, axis=ax),
        )
        a, b = np64(o1).take(idx, axis=ax), np64(o2).take(idx, axis=ax)
        return array_observation(
            diff(a, b), bound, what=f"{path}/{mode}: other {axis} elements after changing {which}"
        )

    return examples, check


_batch_examples, _batch_check = _independence("batch")
_head_examples, _head_check = _independence("head")

BATCH_INDEPENDENCE = declare(
    "batch-independence", structural_applies, _batch_examples, _batch_check
)

HEAD_INDEPENDENCE = declare("head-independence", structural_applies, _head_examples, _head_check)


# --------------------------------------------------------------------------- permutation


def _perm_applies(variant, ctx):
    if why := structural_applies(variant, ctx, causal=False):
        return why
    if not variant.parsed_kernel.known:
        # a kernel of q.k is position free; an unknown one may be windowed or biased by position
        return "kernel unknown: position independence (no window, no positional bias) not claimed"
    return None


def _permutations(draw_, x) -> dict:
    from hypothesis import strategies as st

    return {
        "query_perm": draw_(st.permutations(range(x.shape.T))),
        "key_perm": draw_(st.permutations(range(x.shape.S))),
    }


def _perm_examples(variant, ctx):
    base = shaped_inputs(variant, ctx, causal=False, T=(2, MAX_LEN))
    return with_path_and_mode(variant, base, _permutations)


def _perm_check(variant, ex: Example, ctx):
    x = ex.inputs
    pt, ps = list(ex.choices["query_perm"]), list(ex.choices["key_perm"])
    mode, path = ex.choices["denominator"], ex.choices["path"]
    fn, kw = path_callable(variant, path), call_kwargs(variant, mode)
    o1 = call(fn, x.q, x.k, x.v, causal=False, allow_nonfinite=True, **kw)
    o2 = call(
        fn, x.q[:, :, pt], x.k[:, :, ps], x.v[:, :, ps], causal=False, allow_nonfinite=True, **kw
    )
    # both bounds are symmetric functions of the keys: the same for both computations
    free = weights_bound(fn, x, kw, causal=False, mode=mode, dtype=ctx.model_dtype, o=o1)
    model = model_bound(variant, x, ctx, mode=mode, form=form_kind(path))
    bound = combined(
        None if model is None else model[:, :, pt], None if free is None else free[:, :, pt]
    )
    return array_observation(
        diff(np64(o2), np64(o1)[:, :, pt]),
        bound,
        what=f"{path}/{mode}: f(q[P], k[Q], v[Q]) vs f(q, k, v)[P]",
    )


PERMUTATION_EQUIVARIANCE = declare(
    "permutation-equivariance", _perm_applies, _perm_examples, _perm_check
)


PROPERTIES = (
    CAUSALITY,
    PREFIX_INVARIANCE,
    BATCH_INDEPENDENCE,
    HEAD_INDEPENDENCE,
    PERMUTATION_EQUIVARIANCE,
)
