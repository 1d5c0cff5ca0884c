"""Input strategies and input surgery of the catalogue: shapes with given size ranges, attention
inputs under a variant's claims, exactly representable value arrays, and inputs restricted,
poisoned or rebuilt around given tensors."""

from __future__ import annotations

import dataclasses

import numpy as np

from verify.properties.support.common import (
    MAX_BATCH,
    MAX_DIM,
    MAX_HEADS,
    MAX_LEN,
    MAX_VALUE_DIM,
    MIN_MAGNITUDE,
    causal_choices,
    lengths,
    outside_domain,
    radius_strategy,
    within_domain,
)

#: the huge finite value put at positions that must have no influence (fault classes 8, 9)
POISON = 1e10


# --------------------------------------------------------------------------- strategies


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

    from verify.strategies import sized_shape

    @st.composite
    def draw(draw_):
        t = draw_(lengths(variant, *T))
        s = draw_(lengths(variant, *T)) if (cross and not causal) else t
        if distinct:
            assume(s != t)
        if distinct and variant.self_attention_only:
            assume(False)  # S != T is outside the variant's domain
        return within_domain(variant, sized_shape(draw_, t, s, B=B, H=H, d=d, d_v=d_v))

    return draw()


def small_shapes(
    variant,
    *,
    causal: bool,
    max_len: int = 8,
    max_dim: int = MAX_DIM,
    max_value_dim: int = MAX_VALUE_DIM,
    min_len: int = 1,
    min_dim: int = 1,
):
    """Shapes with B = H = 1 (kernel statements are per row; batch and head independence are
    properties of their own), T == S when causal. Fewer choices make shrinking fast."""
    from hypothesis import strategies as st

    from verify.strategies import Shape, sizes

    def build(T, S, d, d_v):
        return within_domain(variant, Shape(B=1, H=1, T=T, S=T if causal else S, d=d, d_v=d_v))

    return st.builds(
        build,
        lengths(variant, min_len, max_len),
        lengths(variant, 1, max_len),
        sizes(min_dim, max_dim),
        sizes(1, max_value_dim),
    )


def inputs(variant, ctx, shape, *, causal: bool, cases=("random",), radius=None, scale=None):
    """``verify.strategies.attention_inputs`` with the variant's score radius (or ``radius``),
    the run's dtype and device, and the catalogue's minimum magnitude (D10 model range)."""
    from verify.strategies import attention_inputs

    drawn = attention_inputs(
        shape,
        dtype=ctx.torch_dtype,
        device=ctx.device,
        causal=causal,
        radius=radius_strategy(variant, ctx) if radius is None else radius,
        scale=scale,
        cases=cases,
        min_magnitude=MIN_MAGNITUDE,
    )
    # a case that changes the shape (single_key: S = 1) may leave the variant's restrictions
    return drawn.filter(lambda x: not outside_domain(variant, x.shape.q, x.shape.k, x.shape.v))


def score_cases(variant, cases: tuple[str, ...] = ("random",)) -> tuple[str, ...]:
    """``cases`` and, for the shift-invariant softmax family, ``extreme_scores`` (every visible
    score of a row far negative or far positive, up to ``extreme_score_magnitude``: finite mask
    sentinels such as -1e4 and unsafe stabilizers are hit; sentinels at finfo.min are not)."""
    from verify.strategies import EXTREME_CASES

    return (*cases, *EXTREME_CASES) if variant.kernel_family == "softmax" else cases


def by_causal(variant, make, choices: tuple[bool, ...] | None = None):
    """``make(causal)`` for each supported causal flag, built once, drawn as ``one_of`` (a
    strategy built inside a draw pays hypothesis' reflection cost on every draw and shrink
    step)."""
    from hypothesis import strategies as st

    return st.one_of([make(c) for c in (causal_choices(variant) if choices is None else choices)])


def shaped_inputs(variant, ctx, *, causal: bool, cases=("random",), **shape_kw):
    """:func:`inputs` of one causal flag on :func:`shape_st` shapes (keywords)."""
    shape = shape_st(variant, causal=causal, **shape_kw)
    return inputs(variant, ctx, shape, causal=causal, cases=cases)


def plain_inputs(variant, ctx, **kw):
    """:func:`by_causal` of :func:`shaped_inputs` (keywords to it: ``cases``, shape sizes)."""
    return by_causal(variant, lambda c: shaped_inputs(variant, ctx, causal=c, **kw))


def inputs_with_radius(variant, ctx, radius, *, cases=("random",), **shape_kw):
    """Attention inputs on :func:`small_shapes` (keywords) with a given radius strategy, one
    strategy per supported causal flag (:func:`by_causal`)."""
    from verify.strategies import attention_inputs

    return by_causal(
        variant,
        lambda is_causal: attention_inputs(
            small_shapes(variant, causal=is_causal, **shape_kw),
            dtype=ctx.torch_dtype,
            device=ctx.device,
            causal=is_causal,
            radius=radius,
            cases=cases,
            min_magnitude=MIN_MAGNITUDE,
        ),
    )


def interval(lo: float, hi: float):
    """Strategy of finite floats in [lo, hi] without subnormals."""
    from hypothesis import strategies as st

    return st.floats(lo, hi, allow_nan=False, allow_subnormal=False)


def elements(dtype, bound: float = 2.0):
    """Floats in [-bound, bound] at the dtype's width (torch dtype or its name): 0 or a
    magnitude >= MIN_MAGNITUDE."""
    from hypothesis import strategies as st

    width = {"float64": 64, "float16": 16}.get(str(dtype).removeprefix("torch."), 32)
    mag = st.floats(MIN_MAGNITUDE, bound, allow_subnormal=False, width=width)
    return st.one_of(st.just(0.0), mag, mag.map(lambda t: -t))


def values(shape, dtype, *, bound: float = 2.0):
    """Strategy of a float64 array of ``shape`` with entries 0 or of magnitude in
    [MIN_MAGNITUDE, bound], exactly representable in ``dtype`` (torch)."""
    from hypothesis.extra import numpy as hnp

    def rounded(arr):
        import torch

        return torch.from_numpy(arr).to(dtype).to(torch.float64).numpy()

    return hnp.arrays(np.float64, shape, elements=elements(dtype, bound)).map(rounded)


# --------------------------------------------------------------------------- tensors


def ctx_tensor(values, ctx, shape=None):
    """float64 values -> a tensor of the run's dtype and device (rounded once to the dtype)."""
    import torch

    arr = np.asarray(values, dtype=np.float64)
    if shape is not None:
        arr = arr.reshape(shape)
    return torch.from_numpy(np.ascontiguousarray(arr)).to(dtype=ctx.torch_dtype, device=ctx.device)


def rounded(values, ctx) -> list:
    """float64 values rounded once to the run's dtype, back as (nested) lists of floats."""
    return ctx_tensor(values, ctx).double().tolist()


def tensor_like(arr, x):
    """A numpy array as a tensor of the dtype and device of ``x``."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(arr)).to(dtype=x.dtype, device=x.device)


def make_inputs(q, k, v, *, causal: bool = False, attn_mask=None, case: str = "constructed"):
    """An ``AttentionInputs`` around given canonical tensors (shape read from them)."""
    from verify.strategies import AttentionInputs, Shape

    B, H, T, d = q.shape
    return AttentionInputs(
        q=q,
        k=k,
        v=v,
        causal=causal,
        scale=None,
        radius=None,
        shape=Shape(B=B, H=H, T=T, S=k.shape[-2], d=d, d_v=v.shape[-1]),
        attn_mask=attn_mask,
        case=case,
    )


def weight_inputs(q, k, ctx, *, causal: bool = False, case: str = "constructed"):
    """Constructed inputs that read weights: float64 queries ``q`` (B, H, T, d) and keys ``k``
    (B, H, S, d), arrays or nested lists, rounded once to the run's dtype, and v = identity
    (d_v = S), so that the output row t is the weight row of query t."""
    qt, kt = ctx_tensor(q, ctx), ctx_tensor(k, ctx)
    B, H, S = kt.shape[0], kt.shape[1], kt.shape[-2]
    eye = ctx_tensor(np.tile(np.eye(S), (B, H, 1, 1)), ctx)
    return make_inputs(qt, kt, eye, causal=causal, case=case)


def identity_values(x):
    """The same inputs with v = identity (S keys, d_v = S): the output row t is the weights."""
    import torch

    B, H, S = x.q.shape[0], x.q.shape[1], x.k.shape[-2]
    eye = torch.eye(S, dtype=x.q.dtype, device=x.q.device).expand(B, H, S, S).contiguous()
    return make_inputs(
        x.q, x.k, eye, causal=x.causal, attn_mask=x.attn_mask, case=getattr(x, "case", "x")
    )


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


def structural_examples(variant, ctx):
    """Plain examples of the variant's claimed shapes, causal as claimed (no choices): the
    examples of every property that reads a claimed structure's visibility."""
    return by_causal(variant, lambda c: shaped_inputs(variant, ctx, causal=c)).map(
        lambda x: _example(x)
    )


def _example(x):
    from verify.properties.support.common import Example

    return Example(x, {})
