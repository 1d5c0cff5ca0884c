"""Properties of the structural claims (D15 and the API contract): the window a variant claims,
its grouped key/value heads, its key-padding mask.

- ``window-extent``: the weights the variant computes (read with one-hot values, D11) are zero
  outside the claimed window and nonzero inside it: a window one key too wide or too narrow,
  or aligned top-left, shows at the key it gets wrong.
- ``head-groups``: with G kv heads, the output equals the same call on k, v expanded to H heads
  by ``repeat_interleave`` (query head h reads kv head h // (H / G)); ``repeat`` (tiling) is
  another map and fails.
- ``key-padding``: keys a (B, S) ``key_padding_mask`` drops (False) have no influence on the
  outputs (poisoned with huge values) nor a gradient, and for non-causal calls of a
  position-independent kernel the output equals the call on the kept keys alone. Rows the
  variant's own visibility leaves without a kept key return its empty-row convention and are
  left out.

Bounds as in ``dependence``: two computations of the same exact value differ by at most the
larger of their D10 bounds (where the claim has a model) and D11's kernel-free threshold on the
weights the variant computes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.calls import call
from verify.properties.support.claims import structural_applies
from verify.properties.support.common import MAX_LEN, Example, claimed_visible
from verify.properties.support.inputs import (
    by_causal,
    make_inputs,
    poison_value,
    shaped_inputs,
    structural_examples,
)
from verify.properties.support.observe import array_observation, diff, np64
from verify.properties.support.paths import FORWARD, call_kwargs, convention_mode, form_kind
from verify.properties.support.structure import (
    combined,
    effective_weights,
    model_bound,
    variant_empty_rows,
    weights_bound,
)
from verify.spec.results import NotApplicable, Observation, VariantError

# --------------------------------------------------------------------------- window extent


def _window_applies(variant, ctx):
    if variant.window is None:
        return "no window claimed (window=None)"
    return structural_applies(variant, ctx)


def claimed_visibility(variant, x) -> np.ndarray:
    """(T, S) bool: the keys the claimed window (causal: right = 0) shows each query."""
    from verify.attention.structure import effective_window, window_mask

    win = effective_window(tuple(variant.window), x.causal)
    return window_mask(x.shape.T, x.shape.S, win).numpy()


def _window_check(variant, ex: Example, ctx):
    import torch

    x = ex.inputs
    kw = call_kwargs(variant, convention_mode(variant))
    W = effective_weights(variant, x, kw, causal=x.causal)  # (B, H, T, S)
    vis = claimed_visibility(variant, x)
    tiny = float(torch.finfo(x.dtype).tiny)  # an underflowed weight carries nothing
    Wa = np.where(np.isfinite(W), np.abs(W), np.inf)
    # a row the window leaves without a key returns the variant's empty-row convention
    Wa = np.where(vis.any(-1)[:, None], Wa, 0.0)
    outside = np.where(vis, 0.0, Wa)
    worst = np.unravel_index(int(np.argmax(outside)), outside.shape)
    obs = [
        Observation(
            observed=float(outside[worst]),
            bound=tiny,
            detail=f"largest |weight| outside the window {tuple(variant.window)} "
            f"(causal={x.causal}, T = {x.shape.T}, S = {x.shape.S}) at (t, s) = "
            f"{tuple(int(i) for i in worst[2:])}: must be 0 (below the dtype's smallest normal)",
        )
    ]
    inside = np.where(vis, Wa, np.inf)
    dead = np.isfinite(inside) & (inside == 0)  # a key in the window with no weight
    if dead.any():
        at = tuple(int(i) for i in np.argwhere(dead)[0])
        obs.append(
            Observation(
                observed=1.0,
                bound=0.0,
                detail=f"key {at[3]} lies in the window of query {at[2]} (window "
                f"{tuple(variant.window)}, causal={x.causal}, T = {x.shape.T}, S = {x.shape.S}) "
                "but gets weight 0: the window is narrower than claimed",
            )
        )
    return obs


WINDOW_EXTENT = declare("window-extent", _window_applies, structural_examples, _window_check)


# --------------------------------------------------------------------------- head groups


def _groups_applies(variant, ctx):
    if variant.kv_heads is None:
        return "no grouped kv heads claimed (kv_heads=None)"
    from verify.spec.structure import fixed_heads

    fixed = fixed_heads(variant)
    if fixed is not None and (fixed % variant.kv_heads or fixed == variant.kv_heads):
        return f"the claimed per-head values fix H = {fixed}: no grouping by {variant.kv_heads}"
    return structural_applies(variant, ctx)


def _groups_examples(variant, ctx):
    from hypothesis import strategies as st

    from verify.spec.structure import fixed_heads

    G = variant.kv_heads
    fixed = fixed_heads(variant)
    ratios = (fixed // G,) if fixed else (2, 3)  # two and three query heads per kv head
    strategies = [
        shaped_inputs(variant, ctx, causal=c, H=(G * r, G * r))
        for c in (False, True)
        if variant.supports_causal(c)
        for r in dict.fromkeys(ratios)
    ]
    return st.one_of(strategies).map(lambda x: Example(x, {"kv_heads": G}))


def _groups_check(variant, ex: Example, ctx):
    x = ex.inputs
    G = ex.choices["kv_heads"]
    r = x.q.shape[1] // G
    k_g, v_g = x.k[:, ::r].contiguous(), x.v[:, ::r].contiguous()  # G kv heads
    k_e, v_e = k_g.repeat_interleave(r, 1), v_g.repeat_interleave(r, 1)
    xe = dataclasses.replace(x, k=k_e, v=v_e)
    mode = convention_mode(variant)
    kw = call_kwargs(variant, mode)
    o_g = call(variant, x.q, k_g, v_g, causal=x.causal, allow_nonfinite=True, **kw)
    o_e = call(variant, x.q, k_e, v_e, causal=x.causal, allow_nonfinite=True, **kw)
    bound = combined(
        model_bound(variant, xe, ctx, mode=mode, form=form_kind(FORWARD)),
        weights_bound(variant, xe, kw, causal=x.causal, mode=mode, dtype=ctx.model_dtype, o=o_e),
    )
    return array_observation(
        diff(np64(o_g), np64(o_e)),
        bound,
        what=f"{G} kv heads for H = {x.q.shape[1]}: f(q, k, v) vs f(q, repeat_interleave(k), "
        "repeat_interleave(v)) (query head h reads kv head h // (H / G))",
    )


HEAD_GROUPS = declare("head-groups", _groups_applies, _groups_examples, _groups_check)


# --------------------------------------------------------------------------- key padding


def _padding_applies(variant, ctx):
    if not variant.key_padding:
        return "no key-padding mask claimed (key_padding=False)"
    return structural_applies(variant, ctx)


def _padding_examples(variant, ctx):
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    def with_mask(x):
        @st.composite
        def draw(draw_):
            s = x.shape
            keep = draw_(hnp.arrays(np.bool_, (s.B, s.S), elements=st.booleans()))
            keep[:, 0] = True  # every row keeps a key (an empty row is a convention)
            return Example(x, {"keep": keep.tolist()})

        return draw()

    return by_causal(
        variant, lambda c: shaped_inputs(variant, ctx, causal=c, T=(2, MAX_LEN))
    ).flatmap(with_mask)


def _padding_check(variant, ex: Example, ctx):
    import torch

    x = ex.inputs
    keep = torch.tensor(ex.choices["keep"], dtype=torch.bool, device=x.device)  # (B, S)
    mode = convention_mode(variant)
    kw = {**call_kwargs(variant, mode), "key_padding_mask": keep}
    xm = dataclasses.replace(x, attn_mask=keep[:, None, None, :])  # the same as an attn_mask
    p = poison_value(x.dtype)
    dead = ~keep[:, None, :, None]
    k2, v2 = x.k.masked_fill(dead, p), x.v.masked_fill(dead, -p)
    # rows the variant's own visibility (causal, a window) leaves without a kept key return
    # its empty-row convention: left out (``masks`` reports conventions)
    # (B, H, T, 1): no weight on a kept key, or not finite
    W = effective_weights(variant, x, kw, causal=x.causal)
    on_kept = np.where(keep.cpu().numpy()[:, None, None, :], np.nan_to_num(np.abs(W)), 0.0)
    # ... or no key the claims show (causal, a window) is kept
    claimed = ~claimed_visible(variant, xm).any(-1)
    empty = variant_empty_rows(W) | (on_kept.sum(-1) == 0) | claimed
    empty = torch.from_numpy(empty).to(x.device)[..., None]
    grad = variant.differentiable  # False: the forward statement only (no backward to call)
    q1, k1, v1 = (t.detach().clone().requires_grad_(grad) for t in (x.q, x.k, x.v))
    o1 = call(variant, q1, k1, v1, causal=x.causal, allow_nonfinite=True, **kw)
    o2 = call(variant, x.q, k2, v2, causal=x.causal, allow_nonfinite=True, **kw)
    bound = combined(
        model_bound(variant, xm, ctx, mode=mode, form=form_kind(FORWARD)),
        weights_bound(variant, x, kw, causal=x.causal, mode=mode, dtype=ctx.model_dtype, o=o1),
    )
    n_empty = int(empty.sum())
    rows = f" ({n_empty} rows without a kept key left out)" if n_empty else ""
    obs = [
        array_observation(
            diff(np64(o1.masked_fill(empty, 0.0)), np64(o2.masked_fill(empty, 0.0))),
            bound,
            what="f(q, k, v, key_padding_mask) vs the same with the dropped keys poisoned "
            f"(k = {p:.3g}, v = {-p:.3g}){rows}"
            + (
                ""
                if grad
                else "; gradients not checked: the variant declares it is not differentiable"
            ),
        )
    ]
    # a row without a kept key returns the variant's convention (NaN rows make every gradient
    # NaN): the gradient statement is made on calls without such rows
    if o1.requires_grad and not n_empty:
        g = torch.ones_like(o1)
        try:
            gk, gv = torch.autograd.grad(o1, (k1, v1), g, allow_unused=True)
        except RuntimeError as exc:
            raise VariantError(f"backward raised: {exc}") from exc
        for name, gr in (("dk", gk), ("dv", gv)):
            if gr is None:
                continue
            leak = float(gr.detach().abs().masked_fill(~dead, 0.0).max())
            obs.append(
                Observation(
                    observed=leak,
                    bound=float(torch.finfo(x.dtype).tiny),
                    detail=f"largest |{name}| at a dropped key: must be 0",
                )
            )
    from verify.spec.structure import position_dependent

    if not x.causal and not position_dependent(variant) and variant.parsed_kernel.known:
        for b in range(x.shape.B):
            idx = keep[b].nonzero().flatten()
            xb = make_inputs(x.q[b : b + 1], x.k[b : b + 1, :, idx], x.v[b : b + 1, :, idx])
            ob = call(variant, xb.q, xb.k, xb.v, causal=False, allow_nonfinite=True,
                      **call_kwargs(variant, mode))  # fmt: skip
            bb = combined(
                model_bound(variant, xb, ctx, mode=mode, form=form_kind(FORWARD)),
                weights_bound(variant, xb, call_kwargs(variant, mode), causal=False, mode=mode,
                              dtype=ctx.model_dtype, o=ob),
            )  # fmt: skip
            obs.append(
                array_observation(
                    diff(np64(o1[b : b + 1]), np64(ob)),
                    2 * bb,
                    what=f"batch {b}: f with key_padding_mask vs f on the {len(idx)} kept keys",
                )
            )
    return obs


KEY_PADDING = declare("key-padding", _padding_applies, _padding_examples, _padding_check)


# --------------------------------------------------------------------------- score bias


def _bias_applies(variant, ctx):
    if not variant.score_bias:
        return "no score bias claimed (score_bias=False)"
    if variant.kernel_family not in ("softmax", "sigmoid"):
        return f"kernel {variant.kernel}: the biased reference covers softmax and sigmoid"
    return structural_applies(variant, ctx)


def _bias_examples(variant, ctx):
    from hypothesis import strategies as st

    from verify.properties.support.inputs import values

    def with_bias(x):
        s = x.shape
        shapes = ((1, 1, s.T, s.S), (s.B, 1, s.T, s.S), (s.B, s.H, s.T, s.S))
        return st.sampled_from(shapes).flatmap(
            lambda shp: values(shp, x.dtype, bound=4.0).map(
                lambda b: Example(x, {"bias_shape": shp, "_bias": b})
            )
        )

    return by_causal(variant, lambda c: shaped_inputs(variant, ctx, causal=c)).flatmap(with_bias)


def _bias_check(variant, ex: Example, ctx):
    from verify.exact.errors import compare
    from verify.properties.support.common import biased_reference
    from verify.properties.support.inputs import tensor_like

    x = ex.inputs
    bias = tensor_like(ex.choices["_bias"], x)
    mode = convention_mode(variant)
    ref, eb = biased_reference(variant, x, ctx, bias, denominator=mode, form=form_kind(FORWARD))
    o = call(variant, x.q, x.k, x.v, causal=x.causal, attn_bias=bias, **call_kwargs(variant, mode))
    return compare(
        o, eb, ref, what=f"attn_bias of shape {ex.choices['bias_shape']} added to the scores"
    )


SCORE_BIAS = declare("score-bias", _bias_applies, _bias_examples, _bias_check)

PROPERTIES = [WINDOW_EXTENT, HEAD_GROUPS, KEY_PADDING, SCORE_BIAS]

__all__ = ["PROPERTIES", "NotApplicable", "claimed_visibility"]
