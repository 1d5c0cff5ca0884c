"""Mask properties: masked keys, causal alignment for T != S and its rejection (D6 and the
API contract).

The bounds are stated as in ``dependence``: the D10 bound of the inputs with ordinary values at
the masked keys, on every code path (``forward`` and each entry of ``forms``).

Ids: ``masks``, ``causal-alignment``, ``causal-mismatch-rejected``.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.calls import call, to_layout, unrepresentable
from verify.properties.support.claims import oracle_applies
from verify.properties.support.common import (
    MAX_LEN,
    MIN_MAGNITUDE,
    Example,
    claimed_visible,
    exact_and_bound,
    flex_reason,
    radius_strategy,
)
from verify.properties.support.inputs import (
    POISON,
    by_causal,
    inputs,
    poison_value,
    score_cases,
    shape_st,
    shaped_inputs,
    tensor_like,
    values,
)
from verify.properties.support.observe import array_observation, diff, np64
from verify.properties.support.paths import (
    FORWARD,
    call_kwargs,
    convention_mode,
    form_kind,
    mode_st,
    path_callable,
    path_names,
    require_mode,
    with_path,
)
from verify.spec.results import NotApplicable, Observation, VariantError
from verify.spec.visibility import visible

# --------------------------------------------------------------------------- masks (D6)


def _mask_applies(variant, ctx):
    if why := oracle_applies(variant, ctx):
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
            cases=score_cases(variant),
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
    require_mode(mode, x.shape.d_v)
    dead = torch.from_numpy(np.ascontiguousarray(_dead_keys(x))).to(x.device)
    k_alt, v_alt = (tensor_like(a, x) for a in ex.choices["_alt"])
    x_alt = dataclasses.replace(
        x,
        k=torch.where(dead[..., None], k_alt, x.k),
        v=torch.where(dead[..., None], v_alt, x.v),
    )
    # unnormalized exp weights beyond the dtype's range (extreme scores): no statement (D6)
    unrepresentable(variant, x_alt.q, x_alt.k, mode, visible=x.visible())
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
    empty = ~claimed_visible(variant, x).any(axis=-1)  # (B, H, T)
    obs = []
    if empty.any():
        # what a row with no visible key returns is a convention: judged against a declared one
        # only (``empty_rows``), then left out of the comparisons below
        rows = torch.from_numpy(np.ascontiguousarray(empty)).to(o.device)
        declared = variant.empty_rows
        for label, out in (("", o), (" (other values at masked keys)", o_alt)):
            seen = _empty_row_convention(out, rows, x if out is o else x_alt, ctx, declared)
            if declared not in (None, "other") and seen != declared:
                obs.append(
                    Observation(
                        1.0,
                        0.0,
                        "exact",
                        "empty rows",
                        f"{path}/{mode}: {int(empty.sum())} rows with no visible key return "
                        f"{seen}{label}; the declared empty_rows convention is {declared}",
                    )
                )
                break
        o = o.masked_fill(rows[..., None], 0.0)
        o_alt = o_alt.masked_fill(rows[..., None], 0.0)
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


MASKS = declare("masks", _mask_applies, _mask_examples, _mask_check)


# --------------------------------------------------------------------------- alignment


def _align_applies(variant, ctx):
    if why := oracle_applies(variant, ctx, causal=True) or flex_reason(variant):
        return why
    if variant.causal_alignment is None:
        return "the variant declares no causal alignment for T != S (causal_alignment=None)"
    if MAX_LEN < 2 * variant.length_multiple:
        return "length_multiple leaves no two distinct lengths"
    return None


def _align_examples(variant, ctx):
    return with_path(variant, shaped_inputs(variant, ctx, causal=False, distinct=True))


def _align_check(variant, ex: Example, ctx):
    from verify.exact.errors import compare

    x, path = ex.inputs, ex.choices["path"]
    align = variant.causal_alignment
    vis = visible(x.shape.T, x.shape.S, causal=True, alignment=align, device=x.device)[None, None]
    xm = dataclasses.replace(x, attn_mask=vis)
    mode = convention_mode(variant)
    ref, eb = exact_and_bound(variant, xm, ctx, denominator=mode, form=form_kind(path))
    fn, kw = path_callable(variant, path), call_kwargs(variant, mode)
    o = call(fn, x.q, x.k, x.v, causal=True, allow_nonfinite=True, **kw)
    # rows the alignment leaves without a key: what they return is a convention (empty_rows),
    # judged only against a declared one; the rows with keys follow the alignment
    empty = (~vis.any(-1)).expand(o.shape[:-1]).cpu()
    what = f"{path}: causal, T = {x.shape.T}, S = {x.shape.S}, {align}"
    declared = variant.empty_rows
    seen = _empty_row_convention(o, empty, x, ctx, declared) if bool(empty.any()) else None
    if not np.isfinite(np64(o[~empty])).all() and np.isfinite(eb.bound).all():
        raise VariantError(f"{what}: NaN/inf in a row that sees keys")
    obs = compare(o.masked_fill(empty[..., None].to(o.device), 0.0), eb, ref, what=what)
    if seen is not None:
        obs.detail += f"; rows without a key return {seen} (the empty-row convention)"
        declared = variant.empty_rows
        if declared not in (None, "other") and seen != declared:
            return Observation(
                1.0,
                0.0,
                "exact",
                where="empty rows",
                detail=f"{what}: rows without a key "
                f"return {seen}, the declared empty_rows convention is {declared}",
            )
    return obs


def _empty_row_convention(o, empty, x, ctx, declared=None) -> str:
    """``zeros``, ``nan``, ``uniform`` (the mean of the row's own values, within the D10 bound
    of the run's dtype: ``verify.spec.empty_rows.empty_row_kinds``) or ``other``: what the
    rows of ``o`` (B, H, T, d_v) that ``empty`` (B, H, T) marks hold; the ``declared``
    convention when they fit it among others (values 0 fit zeros and uniform alike)."""
    from verify.spec.empty_rows import empty_row_kinds

    mark = np.asarray(empty.cpu() if hasattr(empty, "cpu") else empty, dtype=bool)
    mark = np.broadcast_to(mark, o.shape[:-1])
    v = np64(x.v)  # (B, H, S, d_v): each empty row is compared with its own element's values
    per_row = np.broadcast_to(v[:, :, None], (*mark.shape, *v.shape[-2:]))[mark]
    kinds = empty_row_kinds(np64(o)[mark], per_row, ctx.dtype, ctx.model_dtype)
    if declared in kinds:
        return declared
    return kinds[0] if kinds else "other"


CAUSAL_ALIGNMENT = declare("causal-alignment", _align_applies, _align_examples, _align_check)


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


CAUSAL_MISMATCH_REJECTED = declare(
    "causal-mismatch-rejected", _mismatch_applies, _align_examples, _mismatch_check
)


PROPERTIES = (
    MASKS,
    CAUSAL_ALIGNMENT,
    CAUSAL_MISMATCH_REJECTED,
)
