"""Shared pieces of the property catalogue: input strategies that respect a variant's claims,
the exact reference and the stated bound for one call, and small example containers."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from verify.spec.results import NotApplicable, VariantError
from verify.spec.structure import describe, has_structure
from verify.spec.vocabulary import USER_MAP

#: sizes drawn by the catalogue (the mpmath oracle stays well under a second per example)
MAX_BATCH = 2
MAX_HEADS = 2
MAX_LEN = 10
MAX_DIM = 4
MAX_VALUE_DIM = 3
#: nonzero input magnitudes and score radii stay above these, so the products of a term stay in
#: the normal range where the D10 standard model holds (``verify.exact.errors.outside_model``)
MIN_MAGNITUDE = 2.0**-6
MIN_RADIUS = 2.0**-6


def kernel_name(variant) -> str | None:
    """The kernel string ``verify.exact.oracle.reference``/``verify.exact.errors`` understand, or
    None."""
    return variant.kernel if variant.parsed_kernel.known else None


def causal_choices(variant) -> tuple[bool, ...]:
    return {"yes": (True,), "no": (False,), "both": (False, True)}[variant.causal]


def lengths(variant, lo: int = 1, hi: int = MAX_LEN):
    """Strategy of sequence lengths allowed by the variant (multiples of ``length_multiple``,
    at least ``min_length``)."""
    from verify.strategies import sizes

    floor = getattr(variant, "min_length", 1)
    lo, hi = max(lo, floor), max(hi, floor)
    m = variant.length_multiple
    if m == 1:
        return sizes(lo, hi)
    top = max(hi // m, 1)
    first = max(lo // m, 1)
    return sizes(first * m, max(top, first) * m, step=m)


def outside_domain(variant, q_shape, k_shape, v_shape) -> str | None:
    """Why a call with these canonical ``(B, H, T|S, d|d_v)`` shapes lies outside the variant's
    declared or found restrictions (``dv_equals_d``, ``self_attention_only``,
    ``length_multiple``, ``head_dim_multiple``), or None. Such a
    call is never made: the example is rejected (a restriction is found, not failed)."""
    if getattr(variant, "dv_equals_d", False) and v_shape[-1] != q_shape[-1]:
        return f"d_v = {v_shape[-1]} != d = {q_shape[-1]}, outside the restriction d_v == d"
    if getattr(variant, "self_attention_only", False) and k_shape[-2] != q_shape[-2]:
        return f"S = {k_shape[-2]} != T = {q_shape[-2]}, outside the restriction T == S"
    hm = getattr(variant, "head_dim_multiple", 1)
    if hm > 1 and q_shape[-1] % hm:
        return f"d = {q_shape[-1]}: the head dimension must be a multiple of {hm}"
    m = getattr(variant, "length_multiple", 1)
    if m > 1 and (q_shape[-2] % m or k_shape[-2] % m):
        return f"T = {q_shape[-2]}, S = {k_shape[-2]}: lengths must be multiples of {m}"
    floor = getattr(variant, "min_length", 1)
    if min(q_shape[-2], k_shape[-2]) < floor:
        return f"T = {q_shape[-2]}, S = {k_shape[-2]}: lengths must be at least {floor}"
    return None


def within_domain(variant, shape):
    """``shape`` moved inside the variant's found or declared restrictions: d rounded up to a
    multiple of ``head_dim_multiple``, d_v = d when the value dimension must equal the head
    dimension, S = T for self-attention only (lengths already respect ``length_multiple``)."""
    import dataclasses

    from verify.spec.structure import fixed_heads

    changes = {}
    if (heads := fixed_heads(variant)) is not None and shape.H != heads:
        changes["H"] = heads  # per-head slopes or decays fix the head count
    hm = getattr(variant, "head_dim_multiple", 1)
    d = -(-shape.d // hm) * hm  # the head dimension rounded up to the restriction
    if d != shape.d:
        changes["d"] = d
    if variant.dv_equals_d and shape.d_v != d:
        changes["d_v"] = d
    if variant.self_attention_only and shape.S != shape.T:
        changes["S"] = shape.T
    return dataclasses.replace(shape, **changes) if changes else shape


def shape_strategy(
    variant,
    *,
    causal: bool,
    cross: bool = True,
    max_len: int = MAX_LEN,
    min_len: int = 1,
    max_dim: int = MAX_DIM,
    min_dim: int = 1,
):
    """Shapes within the catalogue's bounds, T == S when causal or when ``cross`` is False."""
    from hypothesis import strategies as st

    from verify.strategies import sized_shape

    @st.composite
    def draw(draw_):
        T = draw_(lengths(variant, min_len, max_len))
        S = T if (causal or not cross) else draw_(lengths(variant, 1, max_len))
        sizes = {"B": (1, MAX_BATCH), "H": (1, MAX_HEADS), "d_v": (1, MAX_VALUE_DIM)}
        return within_domain(variant, sized_shape(draw_, T, S, d=(min_dim, max_dim), **sizes))

    return draw()


#: long examples: key lengths S = LONG_BLOCK j + r past the common kernel block sizes (64, 128,
#: 512), j in [1, LONG_BLOCKS], r in [1, LONG_BLOCK - 1] (never a multiple of 64 or 128: a last
#: partial block), head dimensions up to LONG_DIM; B = 1 (the cost is the bound's, O(T S))
LONG_BLOCK = 64
LONG_BLOCKS = 16
LONG_DIM = 64
LONG_VALUE_DIM = 8


def long_lengths(variant, blocks: int = LONG_BLOCKS):
    """Strategy of key lengths past a 64-key block with a last partial block (shrinks to 65),
    up to ``blocks`` blocks, or multiples of the variant's ``length_multiple`` in that range."""
    from hypothesis import strategies as st

    from verify.strategies import sizes

    m = variant.length_multiple
    if m > 1:
        lo = (LONG_BLOCK // m + 1) * m
        return sizes(lo, max(lo, LONG_BLOCK * (blocks + 1)), step=m)

    @st.composite
    def draw(draw_):
        j = draw_(sizes(1, blocks))
        r = draw_(sizes(1, LONG_BLOCK - 1))
        return LONG_BLOCK * j + r

    return draw()


def long_shape_strategy(
    variant,
    *,
    causal: bool,
    blocks: int = LONG_BLOCKS,
    max_dim: int = LONG_DIM,
    heads=None,
    batch=(1, 1),
):
    """Long shapes: S from :func:`long_lengths`, T = S when causal or self-attention only, else
    S or any length up to S (decode-like rows of a long cache); B in ``batch`` (default 1), H
    in [1, 2] (``heads``: its bounds), d in [4, max_dim]."""
    from hypothesis import strategies as st

    from verify.strategies import sized_shape, sizes

    @st.composite
    def draw(draw_):
        S = draw_(long_lengths(variant, blocks))
        if causal or variant.self_attention_only:
            T = S
        else:
            T = draw_(st.one_of(st.just(S), sizes(1, S)))
        sizes_ = {"B": batch, "H": heads or (1, MAX_HEADS), "d_v": (2, LONG_VALUE_DIM)}
        return within_domain(variant, sized_shape(draw_, T, S, d=(4, max_dim), **sizes_))

    return draw()


def long_inputs_strategy(variant, ctx, *, beyond_overflow: bool = True, keys=("random",),
                         **shape_kw):  # fmt: skip
    """Long seeded inputs (``verify.seeded.seeded_attention_inputs``) on the variant's
    causal choices, with the radii of :func:`radius_strategy` (``keys``: the key structures
    drawn; ``shape_kw``: :func:`long_shape_strategy`'s bounds)."""
    from hypothesis import strategies as st

    from verify.seeded import seeded_attention_inputs

    per_causal = {
        c: seeded_attention_inputs(
            long_shape_strategy(variant, causal=c, **shape_kw),
            dtype=ctx.torch_dtype,
            device=ctx.device,
            causal=c,
            radius=radius_strategy(variant, ctx, beyond_overflow=beyond_overflow),
            min_magnitude=MIN_MAGNITUDE,
            keys=keys,
        )
        for c in causal_choices(variant)
    }
    return st.sampled_from(tuple(per_causal)).flatmap(per_causal.__getitem__)


#: (query, key) pairs beyond which the mpmath oracle is out of reach: such inputs (the long
#: examples, a long reproducer) are compared with the float64 reference, its bound included
LONG_PAIRS = 4096


def is_long(x) -> bool:
    """Whether inputs ``x`` have more than :data:`LONG_PAIRS` (query, key) pairs."""
    return x.shape.T * x.shape.S > LONG_PAIRS


def radius_strategy(variant, ctx, *, beyond_overflow: bool = False):
    """Score radii where a check is meaningful for the claimed kernel and dtype.

    Taylor-N: the D4-informative range (a moderate range keeps kappa_N and the conditioning
    finite); exp: up to 8 (far inside ``safe_exp_radius`` of every dtype, scores that still make
    softmax peaked), and with ``beyond_overflow`` also radii up to 4 x ``safe_exp_radius`` (the
    oracle checks: exact softmax is finite there); linear maps: None (no rescaling; elements
    bounded by 2).
    """
    from hypothesis import strategies as st

    from verify.strategies import safe_exp_radius, score_radius

    if variant.kernel_family == "taylor" or (variant.order is not None):
        return score_radius(variant.order).map(lambda r: max(r, MIN_RADIUS))
    if variant.softcap is not None:
        # scores inside the cap's linear range and beyond the cap (up to 3 C, where C tanh(s/C)
        # is within 1 % of C): a cap applied to the wrong scores, or not at all, shows
        cap = float(variant.softcap)
        return st.one_of(
            st.floats(MIN_RADIUS, min(8.0, cap), allow_subnormal=False),
            st.floats(cap, 3.0 * cap, allow_subnormal=False),
        )
    if variant.kernel_family == "softmax" and beyond_overflow:
        # moderate radii (peaked but typical rows), and radii beyond exp's overflow in the
        # dtype (4 x safe_exp_radius): exact softmax is finite there, so an implementation
        # without the max-subtraction of D6 fails
        big = 4.0 * safe_exp_radius(ctx.torch_dtype)
        return st.one_of(
            st.floats(MIN_RADIUS, 8.0, allow_subnormal=False),
            st.floats(8.0, big, allow_subnormal=False),
        )
    if variant.kernel_family in ("softmax", "sigmoid") or variant.linear_map == "favor":
        return st.floats(MIN_RADIUS, 8.0, allow_subnormal=False)
    return st.none()


def inputs_strategy(
    variant,
    ctx,
    *,
    causal: bool | None = None,
    cases=("random",),
    beyond_overflow: bool = False,
    **shape_kw,
):
    """``verify.strategies.attention_inputs`` respecting the variant's causal support, length
    restriction, dtype (the run context's) and device (``beyond_overflow``: see
    :func:`radius_strategy`)."""
    from hypothesis import strategies as st

    from verify.strategies import attention_inputs

    choices = causal_choices(variant) if causal is None else (causal,)
    # built once per property run: strategies constructed inside a draw cost ~0.1 s each
    per_causal = {
        c: attention_inputs(
            shape_strategy(variant, causal=c, **shape_kw),
            dtype=ctx.torch_dtype,
            device=ctx.device,
            causal=c,
            radius=radius_strategy(variant, ctx, beyond_overflow=beyond_overflow),
            cases=cases,
            min_magnitude=MIN_MAGNITUDE,
        )
        for c in choices
    }
    return st.sampled_from(choices).flatmap(per_causal.__getitem__)


@dataclass
class Example:
    """One drawn example of a property: the inputs plus the property's own choices."""

    inputs: Any
    choices: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        extra = ", ".join(f"{k}={v!r}" for k, v in self.choices.items())
        return f"Example({extra})\n{self.inputs!r}"

    def snippet(self) -> str:
        base = self.inputs.snippet() if hasattr(self.inputs, "snippet") else ""
        extra = "".join(f"# {k} = {_literal(v)}\n" for k, v in self.choices.items())
        return base + extra


def _literal(value) -> str:
    """A choice as a literal that rebuilds it exactly: numpy arrays as ``array([...])`` of
    their float64 values (``repr`` of an array keeps 8 digits), in tuples and lists too."""
    if isinstance(value, np.ndarray):
        return f"array({value.tolist()!r})"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(_literal(v) for v in value)
        if isinstance(value, tuple):
            return f"({inner}{',' if len(value) == 1 else ''})"
        return f"[{inner}]"
    return repr(value)


def tensor_snippet(
    tensors: dict[str, Any], *notes: str, inline: dict[str, str] | None = None
) -> str:
    """Python code that rebuilds a constructed example's float64 tensors: ``import torch``, a
    line ``name = torch.tensor(values, dtype=torch.float64)`` for each entry of ``tensors``
    (nested lists: ``repr`` round-trips every float64; ``inline``: a comment after a name's
    line), then a comment line for each of ``notes``."""
    inline = inline or {}
    lines = ["import torch"]
    for name, values in tensors.items():
        tail = f"  # {inline[name]}" if name in inline else ""
        lines.append(f"{name} = torch.tensor({values!r}, dtype=torch.float64){tail}")
    return "".join(f"{line}\n" for line in [*lines, *(f"# {n}" for n in notes)])


def claimed_visible(variant, x) -> np.ndarray:
    """(B, H, T, S) bool: the (query, key) pairs the claims show on inputs ``x``: the causal
    pattern and mask of ``x`` (``AttentionInputs.visible``), and the claimed window (D15,
    causal: right = 0)."""
    vis = x.visible()
    if variant.window is not None:
        from verify.attention.structure import effective_window, window_mask

        win = effective_window(tuple(variant.window), x.causal)
        vis = vis & window_mask(x.shape.T, x.shape.S, win).numpy()
    return vis


def eps_floor(variant, denominator: str, eps: float) -> dict[str, Any]:
    """``{"eps_mode": "floor"}`` when the variant's eps is a floor (N/max(D, eps),
    ``AttentionVariant.eps_mode``) and applies here (the ``sum`` denominator, eps > 0); else {}
    (the references' default, N/(D + eps))."""
    if getattr(variant, "eps_mode", "add") == "floor" and denominator == "sum" and eps:
        return {"eps_mode": "floor"}
    return {}


def claim_kwargs(variant, x, *, denominator: str, scale=None, eps=None) -> dict[str, Any]:
    """The oracle's and the error model's keyword arguments for the variant's claims on inputs
    ``x``: causal flag, mask, the claimed score scale (or ``scale``), ``denominator``, the
    declared eps (or ``eps``) and its floor convention (:func:`eps_floor`) and, for FAVOR+, the
    declared projection at x's dimension."""
    if has_structure(variant) or x.k.shape[1] != x.q.shape[1]:
        raise NotApplicable(
            "structural claims (" + "; ".join(describe(variant)) + "): this check has no "
            "reference for them (the modern reference covers the output)"
        )
    if variant.linear_map == USER_MAP:
        raise NotApplicable("a declared feature map (linear:phi): this check has no reference")
    d = x.q.shape[-1]
    kw: dict[str, Any] = dict(
        causal=x.causal,
        attn_mask=x.attn_mask,
        scale=variant.score_scale(d) if scale is None else scale,
        denominator=denominator,
        eps=variant.eps if eps is None else eps,
    )
    kw.update(eps_floor(variant, denominator, kw["eps"]))
    if variant.linear_map == "favor":
        import torch

        kw["projection"] = variant.projection(d, torch.float64, "cpu")
    return kw


def exact_and_bound(
    variant, x, ctx, *, denominator: str, form: str = "any", eps: float | None = None
):
    """(OracleResult, ErrorBound) for the variant's claimed kernel on inputs ``x``.

    The bound is stated from the inputs alone, before the variant's output is looked at.

    Raises:
        NotApplicable: the claimed kernel has no oracle (``unknown``), or FAVOR+ without a
            known projection.
    """
    from verify.exact import errors, oracle

    kernel = kernel_name(variant)
    if kernel is None:
        raise NotApplicable("kernel unknown: no oracle")
    if variant.linear_map == "favor" and variant.projection is None:
        raise NotApplicable("favor without a declared projection: no exact oracle")
    if variant.linear_map == USER_MAP:
        return user_map_reference(variant, x, ctx, denominator=denominator, form=form, eps=eps)
    if has_structure(variant) or x.k.shape[1] != x.q.shape[1]:
        return _structured(variant, x, ctx, kernel, denominator=denominator, form=form, eps=eps)
    kw = claim_kwargs(variant, x, denominator=denominator, eps=eps)
    why = errors.outside_model(
        kernel,
        x.q,
        x.k,
        x.v,
        dtype=ctx.model_dtype,
        scale=kw["scale"],
        denominator=denominator,
        projection=kw.get("projection"),
        form=form,
    )
    if why:
        raise NotApplicable(why)
    if is_long(x):  # the float64 reference, its own bound in the stated one (D10 recipe 6)
        ref = StructuredResult(errors.float64_reference(kernel, x.q, x.k, x.v, **kw))
        return ref, _bound(variant, x, ctx, None, form, kw)
    ref = oracle.reference(x.q, x.k, x.v, kernel=oracle_kernel(kernel), **kw)
    return ref, _bound(variant, x, ctx, ref, form, kw)


@dataclass(frozen=True)
class StructuredResult:
    """The modern reference's exact output rounded once to float64 (``float64``, (B, H, T, d_v)):
    what ``verify.exact.structure_oracle.structured_reference`` returns, in the attribute the
    generic checks read from an ``OracleResult``."""

    float64: np.ndarray

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.float64, dtype=dtype)


def structure_kwargs(variant, x) -> dict[str, Any]:
    """The structural keywords (window, softcap, ALiBi slopes, decay, sigmoid bias, GQA) of the
    variant's claims for inputs ``x`` (``verify.spec.structure.reference_kwargs``)."""
    from verify.spec.structure import reference_kwargs

    return reference_kwargs(variant, x.q.shape[1], enable_gqa=x.k.shape[1] != x.q.shape[1])


def flex_reason(variant) -> str | None:
    """Why a property comparing with the exact reference skips under score_mod/mask_mod claims
    (None without them): decided once, not on every drawn example."""
    from verify.spec.flex import has_flex

    if has_flex(variant):
        return (
            "score_mod/mask_mod claims: the output against their exact reference is "
            "flex-score-mod's (the other references do not apply them)"
        )
    return None


def _structured(variant, x, ctx, kernel: str, *, denominator: str, form: str, eps, **extra):
    """(StructuredResult, ErrorBound) of the structural claims (D12-D16): the modern reference
    and ``attention_error_bound`` with the same keywords (``extra``: more of them, e.g. a
    drawn ``score_bias``)."""
    from verify.exact import errors
    from verify.exact.structure_oracle import structured_reference

    if why := flex_reason(variant):
        raise NotApplicable(why)
    if variant.kernel_family not in ("softmax", "sigmoid", "taylor"):
        raise NotApplicable(
            f"structural claims on {variant.kernel}: the modern reference and error model cover "
            "softmax, sigmoid and Taylor-N kernels"
        )
    want = "none" if variant.kernel_family == "sigmoid" else "sum"
    used_eps = variant.eps if eps is None else eps
    if denominator != want or used_eps:
        raise NotApplicable(
            f"structural claims are modelled with the {want!r} denominator and no eps "
            f"(asked: {denominator!r}, eps {used_eps})"
        )
    skw = {**structure_kwargs(variant, x), **extra}
    for name in ("alibi_slopes", "decay"):
        if name in skw and len(skw[name]) != x.q.shape[1]:
            raise NotApplicable(
                f"{name}: {len(skw[name])} per-head values for {x.q.shape[1]} heads (the inputs "
                "are a subset of the heads)"
            )
    scale = variant.score_scale(x.q.shape[-1])
    long = is_long(x)
    if long:  # the float64 reference, its own bound in the stated one (D10 recipe 6)
        ref = StructuredResult(
            errors.float64_reference(
                kernel, x.q, x.k, x.v, causal=x.causal, scale=scale, attn_mask=x.attn_mask,
                denominator=denominator, **skw,
            )
        )  # fmt: skip
    else:
        ref = StructuredResult(
            structured_reference(
                x.q, x.k, x.v, kernel=kernel, causal=x.causal, scale=scale,
                attn_mask=x.attn_mask, **skw,
            )
        )  # fmt: skip
    precision = precision_of(variant, ctx, denominator=denominator, eps=0.0)
    with model_applies():
        eb = errors.attention_error_bound(
            kernel, x.q, x.k, x.v, dtype=ctx.model_dtype, exact=None if long else ref.float64,
            causal=x.causal,
            attn_mask=x.attn_mask, scale=scale, denominator=denominator, eps=0.0, form=form,
            device=ctx.device, exp_library=variant.exp_library, precision=precision,
            arithmetic=variant.arithmetic, **skw,
        )  # fmt: skip
    return ref, eb


def feature_map(variant, x):
    """``variant.feature_map(x)`` validated: a (..., m) tensor of x's dtype, finite.

    Raises:
        VariantError: it raised, or returned a non-tensor, a wrong shape or dtype, or NaN/inf.
    """
    import torch

    try:
        out = variant.feature_map(x)
    except Exception as exc:
        raise VariantError(f"feature_map raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(out, torch.Tensor):
        raise VariantError(f"feature_map returned {type(out).__name__}, expected a tensor")
    if out.dim() != x.dim() or tuple(out.shape[:-1]) != tuple(x.shape[:-1]):
        raise VariantError(
            f"feature_map: output shape {tuple(out.shape)}, expected {tuple(x.shape[:-1])} + (m,)"
        )
    if out.dtype != x.dtype:
        raise VariantError(f"feature_map: output dtype {out.dtype}, expected {x.dtype}")
    if not torch.isfinite(out).all():
        raise VariantError("feature_map: output has NaN/inf")
    return out


def user_features(variant, x):
    """(phi(c q), phi(k)) of the variant's declared feature map (kernel ``linear:phi``) at the
    inputs' dtype: the features the kernel claim is about, taken as exact.

    Raises:
        VariantError: the map raised, or returned a bad shape or dtype, NaN/inf, or a query
            feature count different from the key one.
    """
    c = variant.score_scale(x.q.shape[-1])
    fq = feature_map(variant, x.q if c == 1 else x.q * c)
    fk = feature_map(variant, x.k)
    if fq.shape[-1] != fk.shape[-1]:
        raise VariantError(
            f"feature_map: {fq.shape[-1]} query features vs {fk.shape[-1]} key features"
        )
    return fq, fk


def user_map_reference(variant, x, ctx, *, denominator: str, form: str = "any", eps=None):
    """(OracleResult, ErrorBound) of kernel ``linear:phi``: kernel linear attention with the
    identity map on the declared features phi(c q), phi(k) (``user_features``), exact, and
    D10's bound of that computation (D3)."""
    from verify.exact import errors, oracle

    fq, fk = user_features(variant, x)
    kw: dict[str, Any] = dict(
        causal=x.causal,
        attn_mask=x.attn_mask,
        scale=1.0,
        denominator=denominator,
        eps=variant.eps if eps is None else eps,
    )
    kw.update(eps_floor(variant, denominator, kw["eps"]))
    why = errors.outside_model(
        "linear:identity", fq, fk, x.v, dtype=ctx.model_dtype, scale=1.0, denominator=denominator
    )
    if why:
        raise NotApplicable(f"declared features: {why}")
    ref = oracle.reference(fq, fk, x.v, kernel="identity", **kw)
    with model_applies():
        eb = errors.attention_error_bound(
            "linear:identity", fq, fk, x.v, dtype=ctx.model_dtype, exact=ref, form=form,
            device=ctx.device, **kw,
        )  # fmt: skip
    return ref, eb


def biased_reference(variant, x, ctx, bias, *, denominator: str, form: str = "any"):
    """(StructuredResult, ErrorBound) of the variant's claims with an additive score ``bias``
    (broadcastable to (B, H, T, S); D16): the modern reference and its bound."""
    kernel = kernel_name(variant)
    if kernel is None:
        raise NotApplicable("kernel unknown: no reference for a biased score")
    return _structured(
        variant, x, ctx, kernel, denominator=denominator, form=form, eps=None, score_bias=bias
    )


def error_bound(variant, x, ctx, exact, *, denominator: str, form: str = "any", scale=None):
    """``attention_error_bound`` for the variant's claims on inputs ``x`` against ``exact``
    (an ``OracleResult``); ``scale`` overrides the claimed scale (candidate scales)."""
    if variant.linear_map == USER_MAP:
        if scale is not None:
            raise NotApplicable("a declared feature map: bounds at the claimed scale only")
        return user_map_reference(variant, x, ctx, denominator=denominator, form=form)[1]
    if has_structure(variant) or x.k.shape[1] != x.q.shape[1]:
        if scale is not None:
            raise NotApplicable("structural claims: bounds at the claimed scale only")
        return _structured(
            variant, x, ctx, kernel_name(variant), denominator=denominator, form=form, eps=None
        )[1]
    kw = claim_kwargs(variant, x, denominator=denominator, scale=scale)
    return _bound(variant, x, ctx, exact, form, kw)


def precision_of(variant, ctx, *, denominator: str, eps: float | None = None) -> str | None:
    """The precision model the bounds of this run use (``derivations.precision_models``): the
    variant's ``precision`` claim (declared or found by the probes), else ``envelope`` for a
    softmax kernel in bfloat16/float16; None (two-level) for other kernels, other denominators,
    an eps, and float32/float64 runs without a claim."""

    eps = variant.eps if eps is None else eps
    if variant.kernel_family != "softmax" or denominator != "sum" or eps:
        return None
    if variant.precision:
        return variant.precision
    from verify.exact.errors import default_precision

    model = default_precision(ctx.model_dtype)
    return None if model == "two-level" else model


def _bound(variant, x, ctx, exact, form: str, kw: dict[str, Any]):
    from verify.exact import errors

    with model_applies():
        return errors.attention_error_bound(
            kernel_name(variant),
            x.q,
            x.k,
            x.v,
            dtype=ctx.model_dtype,
            exact=exact,
            form=form,
            device=ctx.device,
            exp_library=variant.exp_library,
            precision=precision_of(variant, ctx, denominator=kw["denominator"], eps=kw["eps"]),
            arithmetic=variant.arithmetic,
            **kw,
        )


@contextlib.contextmanager
def model_applies():
    """A precision model without a bound here (``ModelNotApplicable``) -> NotApplicable."""
    from derivations.precision_models import ModelNotApplicable

    try:
        yield
    except ModelNotApplicable as exc:
        raise NotApplicable(f"precision model: {exc}") from exc


def oracle_kernel(kernel: str) -> str:
    """The oracle's name of a claimed kernel (``softmax`` is the oracle's ``exp``)."""
    return "exp" if kernel == "softmax" else kernel
