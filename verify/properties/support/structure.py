"""Kernel-free bounds of the structural properties (D11).

The structural properties compare two computations whose exact outputs are equal (a causal row
with and without later positions changed, a prefix, another batch element, a permuted key order,
a linear combination of values). Their bound must hold for any attention, whatever its kernel,
so it is stated from what the variant itself computes: its effective weights W_ts, read with
one-hot values (o = W v for attention linear in v), give for each output element the sums
A = sum_s |W_ts v_sj| and B = sum_s |W_ts|, and D11's reorder rule bounds what two correct
evaluations can differ by: T = tau (A + |o| B) + 2 u |o| (tau = 2 gamma_{n-1} for the n products
a row's sums may hold, :func:`reorder_bound`; u of the accumulation dtype), plus one rounding of
each output to a low-precision dtype. One evaluation's own error is at most T / 2.
Where the claimed kernel has an error model (D10), its bound is used too, and the larger of the
two applies: a correct claim cannot fail for rounding, and a wrong claim cannot make the bound
smaller than the variant's own rounding.
"""

from __future__ import annotations

import numpy as np

from derivations import leaks
from derivations.rounding import unit_roundoff
from verify.exact.errors import ACCUMULATION
from verify.properties.support.calls import call
from verify.properties.support.observe import np64
from verify.spec.results import NotApplicable, VariantError
from verify.spec.vocabulary import LINEAR_IN_V_DENOMINATORS, LOW_PRECISION_DTYPES


def effective_weights(fn, x, kw: dict, *, causal: bool) -> np.ndarray:
    """W (B, H, T, S) in float64: the output of ``fn`` on q, k (and mask) of ``x`` with one-hot
    values, value channel c holding key c (one call with d_v = S; if the variant rejects that
    value width, blocks of the inputs' own d_v).

    Raises:
        NotApplicable: the variant rejects one-hot values of both widths (the reason).
    """
    import torch

    B, H, S = x.k.shape[0], x.k.shape[1], x.k.shape[2]
    errors = []
    for width in dict.fromkeys((S, x.v.shape[-1])):
        cols = []
        try:
            for start in range(0, S, width):
                onehot = torch.zeros(B, H, S, width, dtype=x.v.dtype, device=x.v.device)
                for j in range(min(width, S - start)):
                    onehot[:, :, start + j, j] = 1.0
                out = np64(call(fn, x.q, x.k, onehot, causal=causal, allow_nonfinite=True, **kw))
                cols.append(out[..., : min(width, S - start)])
        except (VariantError, NotApplicable) as exc:  # rejected, or outside a restriction
            errors.append(f"d_v = {width}: {exc}")
            continue
        return np.concatenate(cols, axis=-1)
    raise NotApplicable("effective weights unreadable with one-hot values: " + "; ".join(errors))


def reorder_bound(W: np.ndarray, v: np.ndarray, o: np.ndarray, dtype: str, d: int) -> np.ndarray:
    """D11's threshold per output element (B, H, T, d_v): what two correct evaluations of
    o = W v can differ by. ``W`` (B, H, T, S) measured (widened by its own two roundings), ``v``
    (B, H, S, d_v) and ``o`` (B, H, T, d_v) in float64, ``d`` the head dimension.

    The terms: a row's sums hold at most n = (S + 1)(d + 1) products -- a score form (a d-term
    dot product per key, an S-term sum) or a feature form with up to d + 1 features per key --
    so tau = 2 gamma_{n-1}, for any order of the sums (Higham: gamma_{n-1} covers every order
    of an n-term sum). Signed feature forms are outside it (:func:`kernel_free_gap`)."""
    acc = ACCUMULATION[dtype]
    u = unit_roundoff(acc)
    n = (W.shape[-1] + 1) * (d + 1)
    absW = np.abs(W) * (1 + 2 * u)
    A = np.einsum("...ts,...sj->...tj", absW, np.abs(v))
    Bsum = absW.sum(-1)[..., None]
    o_abs = np.abs(o)
    with np.errstate(invalid="ignore", over="ignore"):
        tau = leaks.reorder_threshold(n, u)
        bound = tau * (A + o_abs * Bsum) + 2 * u * o_abs
        if acc != dtype:  # each of the two outputs rounded once more to the input dtype
            bound = bound + 2 * unit_roundoff(dtype) * o_abs
    return np.where(np.isnan(bound), np.inf, bound)


def kernel_free_bound(fn, x, kw: dict, *, causal: bool, mode: str, dtype: str, o) -> np.ndarray:
    """:func:`reorder_bound` for the outputs ``o`` of ``fn`` on ``x`` in the D7 ``mode``.

    Raises:
        NotApplicable: a mode that is not linear in v (l2, rms, layernorm: no effective
            weights), or weights that cannot be read.
    """
    if mode not in LINEAR_IN_V_DENOMINATORS:
        raise NotApplicable(f"denominator {mode!r} is not linear in v: no kernel-free bound")
    W = effective_weights(fn, x, kw, causal=causal)
    return reorder_bound(W, np64(x.v), np64(o), dtype, x.q.shape[-1])


def combined(*bounds) -> np.ndarray:
    """The elementwise larger of the available bounds (None: not available).

    Raises:
        NotApplicable: none is available.
    """
    have = [b for b in bounds if b is not None]
    if not have:
        raise NotApplicable("no bound: neither an error model for the claimed kernel nor weights")
    out = have[0]
    for b in have[1:]:
        out = np.maximum(out, b)
    return out


def kernel_free_gap(variant, form: str) -> str | None:
    """Why :func:`reorder_bound` does not bound path kind ``form`` (``parallel``, ``recurrent``,
    ``chunked`` or ``any``) of the variant's claimed kernel, or None when it does.

    The threshold charges (S + 1)(d + 1) products per output element relative to
    sum_s |W_ts| |v_sj|: right where v enters after the weights (a score form: the v-dependent
    roundings are the products W_ts v_sj and the key sum) and for nonnegative features. A
    recurrent or chunked form -- or a form not known (``any``) -- of a kernel with signed
    features (kappa_N through its C(N + d, N) monomials, the identity map) rounds the terms
    phi_m(q) (phi_m(k_s) v_sj): m + S of them per element, of total magnitude
    sum_m |phi_m(q)||phi_m(k_s)| |v_sj| (for kappa_N: kappa_N(c sum_i |q_i||k_si|) |v_sj|, D1),
    which exceeds |W_ts| |v_sj| wherever the signed terms cancel (e.g. kappa_6 at a score of
    -1.48: 4.38 against 0.23). A map with more features than an element-wise one (FAVOR+'s m
    random features, a declared phi) rounds m + S terms where the threshold charges the key
    sum and d + 1 products: a single key at d = 1 in float32 measured 8.4 u |v| against the
    threshold's 7 u |v| (FAVOR+, m = 64, chunked). Such a path has the D10 feature-form bound or
    no statement.
    """
    kern = variant.parsed_kernel
    signed_features = kern.family == "taylor" or kern.taylor_map or kern.map == "identity"
    many_features = kern.family == "linear" and not kern.elementwise and not kern.taylor_map
    if form == "parallel" or not (signed_features or many_features):
        return None
    if many_features:
        return (
            f"{variant.kernel} in a {form} form sums m feature terms per element, more than "
            "the kernel-free threshold counts: it does not apply"
        )
    return (
        f"{variant.kernel} in a {form} form sums signed feature terms whose magnitudes "
        "|W| |v| does not bound: the kernel-free threshold does not apply"
    )


def model_bound(variant, x, ctx, *, mode: str, form: str, factor: float = 2.0):
    """``factor`` times the D10 bound of the claimed kernel on ``x`` (two computations), or
    None where the claim has no error model there (an unknown kernel, FAVOR+ without its
    projection, inputs outside the standard model) and the kernel-free threshold covers the
    path (:func:`kernel_free_gap`).

    Raises:
        NotApplicable: no model here and the kernel-free threshold does not cover the path
            (both reasons).
    """
    from verify.properties.support.common import exact_and_bound
    from verify.spec.flex import has_flex

    if has_flex(variant):
        return _flex_model_bound(variant, x, ctx, mode=mode, factor=factor)
    try:
        _, eb = exact_and_bound(variant, x, ctx, denominator=mode, form=form)
    except NotApplicable as exc:
        if gap := kernel_free_gap(variant, form):
            raise NotApplicable(f"{exc}; {gap}") from exc
        return None
    return factor * eb.bound


def _flex_model_bound(variant, x, ctx, *, mode: str, factor: float):
    """``factor`` times flex-score-mod's bound (D10 with D16's score map, softmax over the
    mask_mod's visibility, against the float64 reference with its own bound) on ``x``, or None
    where it has none. Two evaluations of a FlexAttention call at other lengths tile their
    scores differently (a prefix, another batch size): each score rounds by up to
    gamma_d c sum |q_i k_i|, which at scores near 1e5 moves a weight by 1e-11 relative, while
    the kernel-free threshold assumes both evaluations computed the same weights. Rows with no
    visible key are left to that threshold (0 here)."""
    from verify.properties.support.flex_model import flex_bound, flex_visible

    if mode != "sum" or variant.eps or x.k.shape[1] != x.q.shape[1]:
        return None
    vis = flex_visible(variant, x)
    try:
        eb = flex_bound(variant, x, ctx, None, vis)
    except NotApplicable:
        return None
    return np.where(vis.any(-1)[..., None], factor * eb.bound, 0.0)


def weights_bound(fn, x, kw: dict, *, causal: bool, mode: str, dtype: str, o):
    """:func:`kernel_free_bound`, or None where it does not exist (a mode not linear in v,
    weights that cannot be read)."""
    try:
        return kernel_free_bound(fn, x, kw, causal=causal, mode=mode, dtype=dtype, o=o)
    except NotApplicable:
        return None


#: why a path property has no bound in a 16-bit dtype without the claim's model
LOW_PRECISION_PATH_GAP = (
    "no two-evaluation bound in {dtype} without the kernel's model: a path recomputes the "
    "weights, whose roundings to the input type depend on the kernel; claim the kernel "
    "(--kernel) to check this path in low precision"
)


def path_dtype_gap(variant, ctx) -> str | None:
    """Why :func:`path_bound` has no bound for ``variant`` in ``ctx.dtype`` whatever the
    example (a 16-bit dtype and no claimed kernel), or None: the ``applies`` of the path
    properties say it before drawing."""
    if ctx.dtype in LOW_PRECISION_DTYPES and not variant.parsed_kernel.known:
        return LOW_PRECISION_PATH_GAP.format(dtype=ctx.dtype)
    return None


def path_bound(variant, x, ctx, kw: dict, *, causal: bool, mode: str, o) -> np.ndarray:
    """What a second correct computation of the rows of ``o`` (the forward on ``x``) may differ
    by, for the path properties (decode, packed documents): the larger of twice the claim's D10
    bound and D11's kernel-free threshold on the forward's own weights.

    In bfloat16/float16 the path recomputes every weight under another tiling (a decode step's
    running max, a document's own blocks) and rounds its scores and weights to the input type
    on the way -- perturbations of a size set by the kernel (for exp, u_in |score|), which the
    kernel-free threshold (identical weights, float32 sums) does not hold: there the claim's
    model is required.

    Raises:
        NotApplicable: no bound exists (no model and unreadable weights), or a 16-bit dtype
            with no model for the claim (an unknown kernel).
    """
    model = model_bound(variant, x, ctx, mode=mode, form="any")
    if ctx.dtype in LOW_PRECISION_DTYPES:
        if model is None:
            raise NotApplicable(LOW_PRECISION_PATH_GAP.format(dtype=ctx.dtype))
        return model
    free = weights_bound(variant, x, kw, causal=causal, mode=mode, dtype=ctx.model_dtype, o=o)
    return combined(model, free)


def one_evaluation_bound(
    variant, x, ctx, fn, kw: dict, o, *, form: str
) -> tuple[np.ndarray, np.ndarray]:
    """The error of one normalized evaluation against the same computed weights' exact
    combination (``sum`` mode): the larger of the model's bound (where the claim has one) and
    half D11's threshold on the weights the variant computes (the two evaluations' bound
    halved: one evaluation's own error). Returns (bound, the measured weights W)."""
    model = model_bound(variant, x, ctx, mode="sum", form=form, factor=1.0)
    W = effective_weights(fn, x, kw, causal=x.causal)
    free = reorder_bound(W, np64(x.v), np64(o), ctx.model_dtype, x.q.shape[-1]) / 2
    return combined(model, free), W


def variant_empty_rows(W: np.ndarray) -> np.ndarray:
    """(B, H, T) rows whose measured weights are all zero or not finite: rows the variant's
    own visibility (a window, a bottom-right causal mask with T > S) leaves without a key. What
    such a row returns is a convention (zeros, NaN, ...), reported, not judged here."""
    with np.errstate(invalid="ignore"):
        return ~np.isfinite(W).all(-1) | (np.abs(W).sum(-1) == 0)
