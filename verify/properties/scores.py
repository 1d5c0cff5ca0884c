"""Score properties: how the scores enter the output (the API contract).

The bounds are the D10 bounds of the claimed computation (and, for ``claimed-scale``, of each
candidate scale's), stated from the inputs alone, on every code path the variant exposes.

Ids: ``claimed-scale`` (exp-type kernels apply the claimed score scale once, told apart from the
usual wrong candidates), ``single-key`` (one key: the output is its value whatever the score).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.calls import call
from verify.properties.support.claims import normalized_structural_applies, oracle_applies
from verify.properties.support.common import (
    Example,
    causal_choices,
    claim_kwargs,
    error_bound,
    exact_and_bound,
    kernel_name,
    lengths,
    oracle_kernel,
)
from verify.properties.support.inputs import inputs, plain_inputs, shape_st
from verify.properties.support.observe import DPS, array_observation, diff, mp_diff, np64
from verify.properties.support.paths import (
    call_kwargs,
    convention_mode,
    form_kind,
    modes,
    path_callable,
    path_names,
    with_path,
)
from verify.properties.support.structure import (
    one_evaluation_bound,
)
from verify.spec.results import NotApplicable, VariantError

# --------------------------------------------------------------------------- scale once

SCALE_DIMS = (1, 2, 4)
#: exact outputs closer than this (relative, plus absolute) are one output: the oracle's
#: 50-digit arithmetic (D10: >= 50 digits) leaves differences far below it
ORACLE_REL = 10.0 ** (10 - DPS)


def _scale_applies(variant, ctx):
    if why := oracle_applies(variant, ctx):
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
    return modes(variant, (convention_mode(variant),)) or modes(variant, ("sum", "none"))


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

    from verify.strategies import sizes

    R = 4.0 if variant.order is None else max(radius_hi(variant.order), 0.5)

    @functools.cache
    def inputs_of(causal: bool, B: int, H: int, T: int, d: int, d_v: int):
        """The inputs strategy of one size combination, built once (a strategy built inside a
        draw pays hypothesis' reflection cost on every draw and every shrink candidate)."""
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
        return inputs(
            variant, ctx, shape, causal=causal, radius=radius, scale=variant.score_scale(d)
        )

    @st.composite
    def draw(draw_):
        T = draw_(lengths(variant, 2, 6))  # S = T >= 2: one key is v whatever the scale
        B, H, d_v = draw_(sizes(1, 2)), draw_(sizes(1, 2)), draw_(sizes(1, 3))
        causal = draw_(st.sampled_from(causal_choices(variant)))
        xs = [draw_(inputs_of(causal, B, H, T, d, d_v)) for d in SCALE_DIMS]
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
    informative = False  # some candidate's exact output differs from the claim's (mpmath)
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
                    kernel=oracle_kernel(kernel_name(variant)),
                    **claim_kwargs(variant, x, denominator=mode, scale=c(d)),
                )
                gap = mp_diff(r.exact, ref.exact)  # beyond the oracle's own precision
                informative |= bool((gap > ORACLE_REL * (1 + np.abs(ref.float64))).any())
                e = error_bound(variant, x, ctx, r, denominator=mode, form=kind, scale=c(d))
                try:
                    obs = compare(o, e, r)
                except NotApplicable:
                    continue
            worst[name] = max(worst[name], obs.ratio)
    # uninformative inputs (q = 0, equal values) are told from the exact outputs, the same on
    # every machine; which candidates fit is read off the measured ratios (the detail only),
    # since a draw rejected on them could differ between machines
    if not informative:
        raise NotApplicable("uninformative inputs: every candidate scale gives the same output")
    fits = [n for n, r in worst.items() if r <= 1.0]
    summary = ", ".join(f"{n}: {r:.3g}" for n, r in worst.items())
    obs = max(claimed_obs, key=lambda o: o.ratio)
    verdict = f"fits: {', '.join(fits) if fits else 'no candidate'}"
    obs.detail = f"{verdict}; worst error/bound per candidate scale at d in {SCALE_DIMS}: " + (
        f"{summary}; {obs.detail}"
    )
    return obs


CLAIMED_SCALE = declare("claimed-scale", _scale_applies, _scale_examples, _scale_check)


# --------------------------------------------------------------------------- single key


def _single_applies(variant, ctx):
    unnormalized = "the variant is not normalized: a single key gives kappa(x) v, not v"
    if why := normalized_structural_applies(variant, ctx, unnormalized=unnormalized):
        return why
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
    return with_path(variant, plain_inputs(variant, ctx, cases=("single_key",)))


def _single_check(variant, ex: Example, ctx):
    x, path = ex.inputs, ex.choices["path"]
    fn, kw = path_callable(variant, path), call_kwargs(variant, "sum")
    o = np64(call(fn, x.q, x.k, x.v, causal=x.causal, allow_nonfinite=True, **kw))
    bound, W = one_evaluation_bound(variant, x, ctx, fn, kw, o, form=form_kind(path))
    if np.isfinite(bound).all() and not np.isfinite(o).all():
        raise VariantError(f"{path}: S = 1 gives NaN/inf where the bound is finite")
    expected = np.broadcast_to(np64(x.v), o.shape)  # one key: o_t = v_0 for every t
    err, what = diff(o, expected), f"{path}: S = 1, o_t vs v_0 (T = {x.shape.T})"
    if kernel_name(variant) is None:
        # an unknown kernel may vanish at a zero score (a signed map: kappa = q.k); then the
        # query gives the key no weight and its row is empty (the empty-row convention), so
        # rows with q_t.k_0 = 0 exactly and no measured weight are not judged here
        zero = _exact_zero_scores(np64(x.q), np64(x.k)[..., 0, :])
        empty = zero & (W[..., 0] == 0)
        if empty.all():
            raise NotApplicable("every row has q.k_0 = 0 and no weight (an empty row)")
        if empty.any():
            err = np.where(empty[..., None], 0.0, err)
            what += f"; {int(empty.sum())} rows with q.k_0 = 0 and weight 0 left out"
    return array_observation(err, bound, what=what)


def _exact_zero_scores(q: np.ndarray, k0: np.ndarray) -> np.ndarray:
    """(B, H, T) bool: q_t . k_0 == 0 exactly (rational arithmetic: a float dot product may be
    0 in one summation order and not in another). q (B, H, T, d), k0 (B, H, d) float64."""
    from fractions import Fraction

    out = np.zeros(q.shape[:-1], dtype=bool)
    for b, h, t in np.ndindex(*out.shape):
        dot = sum(Fraction(float(a)) * Fraction(float(c)) for a, c in zip(q[b, h, t], k0[b, h]))
        out[b, h, t] = dot == 0
    return out


SINGLE_KEY = declare("single-key", _single_applies, _single_examples, _single_check)


PROPERTIES = (
    CLAIMED_SCALE,
    SINGLE_KEY,
)
