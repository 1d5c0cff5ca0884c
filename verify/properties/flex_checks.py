"""FlexAttention's functions as claims (``verify.spec.flex``): a declared ``score_mod`` and
``mask_mod`` checked on the output, and a declared ``BlockMask`` against its ``mask_mod``.

- ``flex-score-mod``: the output equals softmax attention on the transformed scores
  ``score_mod(c q.k, b, h, q_idx, kv_idx)`` over the keys ``mask_mod`` and the causal flag (and
  a claimed window) show, within D10's bound with D16's score error propagated through the
  score_mod (``verify.spec.flex.propagate``: monotone on each score's error interval, the
  declared roundings). The reference (:func:`flex_reference`) is built from the user's own
  functions: the scores c q.k in mpmath, rounded once to float64, the score_mod evaluated on
  them in float64 torch, the softmax and the weighted sum in mpmath; the float64 steps' own
  error is in the bound (``verify.spec.flex.score_map``). Eager ``flex_attention`` is never
  the reference. Rows with no visible key carry no statement here (their convention is
  ``edge-cases``'). Then a few long examples past flex's 128-key block (:data:`FLEX_BLOCK`; up
  to :data:`LONG_FLEX_BLOCKS` blocks of 64, a last partial block) against the float64 reference
  (:func:`float64_flex_reference`), whose own bound the stated one includes (D10 recipe 6).
- ``flex-block-mask``: the token visibility a block-sparse kernel computes from the declared
  ``block_mask(B, H, T, S)`` (listed partial blocks where mask_mod holds, listed full blocks
  whole) equals mask_mod at every (b, h, q_idx, kv_idx): a block missing, a full block that is
  not full (a document or window boundary inside it), a block mask built or reused at another
  block size, a stored mask_mod other than the claim's. Exact: a count of wrong keys against 0.
  Lengths reach past three blocks of the mask's own size, with a last partial block.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.calls import call
from verify.properties.support.claims import structural_applies
from verify.properties.support.common import Example
from verify.properties.support.flex_model import flex_bound, flex_visible
from verify.properties.support.inputs import structural_examples
from verify.properties.support.observe import np64
from verify.spec import flex
from verify.spec.results import NotApplicable, Observation, VariantError


def flex_reference(q, k, v, *, scale: float, score_mod, visible: np.ndarray, dps: int = 50):
    """(output, visible): softmax attention on ``score_mod`` of the exact scores, (B, H, T, d_v)
    float64 rounded once, and the visibility used (``visible`` less the keys the score_mod sets
    to -inf).

    Args:
        q, k, v: (B, H, T, d), (B, H, S, d), (B, H, S, d_v) tensors or arrays of any float dtype.
        scale: c of the scores c q.k.
        score_mod: torch's ``score_mod`` or None (the scores themselves).
        visible: (B, H, T, S) bool, True = the key may be attended.

    Raises:
        NotApplicable: the score_mod raised or returned NaN/+inf (``verify.spec.flex``).
    """
    import mpmath

    from verify.exact.oracle import to_float64, to_mpf_array

    with mpmath.workdps(dps):
        Q, K, V = (to_mpf_array(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
        B, H, T, _ = Q.shape
        S, dv = K.shape[2], V.shape[-1]
        c = mpmath.mpf(scale)
        x = np.empty((B, H, T, S), dtype=np.float64)
        for b, h, t, s in np.ndindex(B, H, T, S):
            x[b, h, t, s] = float(c * mpmath.fdot(Q[b, h, t], K[b, h, s]))
        y = x if score_mod is None else flex.score_grid(score_mod, x)
        vis = np.asarray(visible, dtype=bool) & ~np.isneginf(y)
        out = np.zeros((B, H, T, dv), dtype=object)
        for b, h, t in np.ndindex(B, H, T):
            keys = np.flatnonzero(vis[b, h, t])
            if not keys.size:
                out[b, h, t] = [mpmath.mpf(0)] * dv
                continue
            m = max(mpmath.mpf(float(y[b, h, t, s])) for s in keys)
            w = {s: mpmath.exp(mpmath.mpf(float(y[b, h, t, s])) - m) for s in keys}
            den = mpmath.fsum(w.values())
            out[b, h, t] = [
                mpmath.fsum(w[s] * V[b, h, s, j] for s in keys) / den for j in range(dv)
            ]
        return to_float64(out), vis


# --------------------------------------------------------------------------- score_mod


def _mod_applies(variant, ctx):
    if not flex.has_flex(variant):
        return "no score_mod or mask_mod claimed (--score-mod, --mask-mod)"
    if not variant.normalized or variant.eps or variant.denominators not in ((), ("sum",)):
        return "flex claims are modelled with the softmax sum denominator and no eps"
    return structural_applies(variant, ctx)


def float64_flex_reference(variant, x, *, scale: float, visible: np.ndarray):
    """(output, visible) of the long examples: ``errors.float64_reference`` of softmax on the
    score_mod's map of the float64 scores (the map :func:`flex_bound` bounds), over the keys
    ``visible`` shows and the score_mod does not send to -inf."""
    from verify.exact import errors

    extra: dict[str, Any] = {}
    vis = np.asarray(visible, dtype=bool)
    if variant.score_mod is not None:
        scores = scale * (np64(x.q) @ np.swapaxes(np64(x.k), -1, -2))
        vis = vis & ~np.isneginf(flex.score_grid(variant.score_mod, scores))
        extra["score_map"] = flex.score_map(variant.score_mod, variant.score_mod_roundings)
    ref = errors.float64_reference("softmax", x.q, x.k, x.v, attn_mask=vis, scale=scale, **extra)
    return ref, vis


def _mod_check(variant, ex: Example, ctx):
    from verify.exact.errors import compare
    from verify.properties.support.common import is_long

    x = ex.inputs
    if x.k.shape[1] != x.q.shape[1]:
        raise NotApplicable("grouped kv heads: the flex reference reads one kv head per head")
    scale = variant.score_scale(x.q.shape[-1])
    long = is_long(x)
    if long:
        ref, vis = float64_flex_reference(variant, x, scale=scale, visible=flex_visible(variant, x))
    else:
        ref, vis = flex_reference(
            x.q, x.k, x.v, scale=scale, score_mod=variant.score_mod,
            visible=flex_visible(variant, x),
        )  # fmt: skip
    if not vis.any():
        raise NotApplicable("no visible key under the mask_mod and the causal flag")
    # a long example's bound adds the float64 reference's own (exact=None, D10 recipe 6)
    eb = flex_bound(variant, x, ctx, None if long else ref, vis)
    o = call(variant, x.q, x.k, x.v, causal=x.causal, allow_nonfinite=True)
    claims = "; ".join(flex.describe(variant))
    return compare(o, eb, ref, what=f"output under {claims}, causal={x.causal}")


def _mod_long(variant, ctx):
    from verify.properties.support.common import long_inputs_strategy

    long = long_inputs_strategy(variant, ctx, beyond_overflow=False, blocks=LONG_FLEX_BLOCKS)
    # past flex's own block of 128 keys (long lengths start past one block of 64)
    return long.filter(lambda x: x.shape.S > FLEX_BLOCK).map(lambda x: Example(x, {}))


#: FlexAttention's default block size (torch.nn.attention.flex_attention's
#: _DEFAULT_SPARSE_BLOCK_SIZE = 128)
FLEX_BLOCK = 128
#: long ``flex-score-mod`` examples: at most this many 64-key blocks (S in (128, 320))
LONG_FLEX_BLOCKS = 4

FLEX_SCORE_MOD = declare(
    "flex-score-mod", _mod_applies, structural_examples, _mod_check, long_examples=_mod_long
)


# --------------------------------------------------------------------------- BlockMask


def _block_applies(variant, ctx):
    if variant.block_mask is None:
        return "no block_mask declared (--block-mask)"
    return structural_applies(variant, ctx)


def _block_examples(variant, ctx):
    from hypothesis import strategies as st

    from verify.properties.support.common import LONG_BLOCK

    def length():
        return st.tuples(st.integers(0, 3), st.integers(1, LONG_BLOCK)).map(
            lambda jr: jr[0] * LONG_BLOCK + jr[1]
        )

    return st.tuples(st.integers(1, 2), st.integers(1, 2), length(), length()).map(
        lambda bhts: Example(None, {"B": bhts[0], "H": bhts[1], "T": bhts[2], "S": bhts[3]})
    )


def _block_check(variant, ex: Example, ctx):
    B, H, T, S = (ex.choices[n] for n in "BHTS")
    try:
        bm = variant.block_mask(B, H, T, S)
    except Exception as exc:
        raise VariantError(f"block_mask raised {type(exc).__name__}: {exc}") from exc
    try:
        problems = flex.block_mask_problems(bm, variant.mask_mod, B, H, T, S)
    except ValueError as exc:
        raise VariantError(str(exc)) from exc
    detail = (
        "; ".join(problems) or f"the BlockMask equals mask_mod on (B, H, T, S) = {(B, H, T, S)}"
    )
    return Observation(float(len(problems)), 0.0, "exact", detail=detail)


FLEX_BLOCK_MASK = declare("flex-block-mask", _block_applies, _block_examples, _block_check)

PROPERTIES: tuple[Any, ...] = (FLEX_SCORE_MOD, FLEX_BLOCK_MASK)

__all__ = ["PROPERTIES", "flex_bound", "flex_reference", "flex_visible", "np64"]
