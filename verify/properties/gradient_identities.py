"""Exact identities of the backward pass (D21; fault classes 5, 12).

- ``gradient-identities``: for a softmax claim (sum denominator, no eps), the value gradients
  sum to the upstream gradient of the rows that see a key, sum_j dV_j = sum_i dO_i (identity
  (a)), and, without a softcap, the key gradients sum to zero, sum_j dK_j = 0 (identity (b):
  shift invariance), each kv head's keys summed (GQA), under the claimed window, ALiBi, key
  padding and drawn masks. Neither needs a reference: the residuals are compared with their
  derived rounding bounds (``verify.exact.gradient_identities``: D10's backward bounds summed
  over the keys plus the float64 evaluation of the sums). A wrong delta = rowsum(dO o O)
  leaves dV and (a) right and breaks (b) (D21 (c)).

Identity (a) holds exactly for every normalized kernel (D21). Besides softmax it is checked for
the Taylor kernels of even order (positive denominators) in float32/float64, causal or full
visibility, one kv head per query head: its bound is D19's backward bound with D10's forward
bound of the denominator (``verify.attention.identity_bound.kernel_identity_bound``). Other
kernels, their low-precision backward and their masked calls have no derived bound, and the
reason says so.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.calls import call
from verify.properties.support.claims import dtype_reason
from verify.properties.support.common import Example, model_applies, precision_of
from verify.properties.support.grads import (
    backward_grads,
    grad_inputs,
    masked_strategy,
    require_zero_rows,
    upstream_of,
    with_grad_output,
)
from verify.properties.support.paths import call_kwargs, modes, path_callable
from verify.spec.results import NotApplicable, Observation, VariantError

#: long draws: keys past one block of 64 with a partial last block, up to this many blocks
BLOCKS = 2
#: the share of keys a drawn key-padding mask drops (key 0 always kept)
PAD_DROP = 0.3


def _applies(variant, ctx) -> str | None:
    if not variant.differentiable:
        return "the variant declares it is not differentiable"
    if variant.kernel_family != "softmax":
        from verify.attention.identity_bound import kernel_feature_map
        from verify.spec.kernel import taylor_order

        fmap = kernel_feature_map(variant.kernel)
        if fmap is None:
            return (
                "identity (a) holds for every normalized kernel (D21), but only softmax and "
                "the Taylor kernels have derived backward bounds here (D10, D19): not checked"
            )
        if taylor_order(fmap) % 2:
            return (
                f"identity (a) for {variant.kernel}: its denominator reaches or crosses zero "
                "on drawn inputs (only kappa_N of even N is positive everywhere, D4), where "
                "the division's error has no bound: not checked"
            )
        if ctx.model_dtype not in ("float32", "float64"):
            return (
                f"identity (a) for {variant.kernel}: D19's backward bound is float32/float64; "
                f"there is no {ctx.model_dtype} backward model for this kernel: not checked"
            )
        if variant.kv_heads is not None or variant.window is not None or variant.decay:
            return (
                "identity (a) for a non-softmax kernel takes one kv head per query head, no "
                "window and no decay (D19's bound): not checked"
            )
    if "sum" not in modes(variant) or variant.eps:
        return "the identities' bounds take the sum denominator without eps"
    if variant.score_bias:
        return "a score-bias claim: the call's bias is not drawn here (gradients-vs-reference)"
    return dtype_reason(variant, ctx)


def _examples(variant, ctx):
    from hypothesis import strategies as st

    from verify.properties.support.common import long_inputs_strategy
    from verify.properties.support.inputs import by_causal, shaped_inputs
    from verify.seeded import KEY_STRUCTURES

    heads = None
    if variant.kv_heads is not None:
        heads = (2 * variant.kv_heads, 2 * variant.kv_heads)
    long = long_inputs_strategy(
        variant, ctx, beyond_overflow=False, keys=KEY_STRUCTURES, blocks=BLOCKS, heads=heads
    )
    base = grad_inputs(variant, ctx)
    if heads is not None:
        base = by_causal(variant, lambda c: shaped_inputs(variant, ctx, causal=c, H=heads))
    parts = [long, base] + ([masked_strategy(variant, ctx)] if variant.supports_mask else [])
    pad = st.integers(0, 2**31 - 1) if variant.key_padding else st.none()
    return with_grad_output(st.one_of(*parts), pad_seed=pad)


def _kv_heads_of(variant, x):
    """``x`` with k, v on the claimed G kv heads (query head h reads kv head h // (H / G))."""
    G, H = variant.kv_heads, x.q.shape[1]
    if G is None or H == G or H % G:
        return x
    r = H // G
    return dataclasses.replace(x, k=x.k[:, ::r].contiguous(), v=x.v[:, ::r].contiguous())


def _structure(variant, x) -> dict:
    from verify.exact.gradient_bounds import STRUCTURE
    from verify.properties.support.common import structure_kwargs

    skw = structure_kwargs(variant, x)
    other = sorted(k for k, v in skw.items() if k not in STRUCTURE and v not in (None, False))
    if other:
        raise NotApplicable(f"no derived backward bound for the claims {other}")
    return {k: v for k, v in skw.items() if k in STRUCTURE and v not in (None, False)}


def _keep(x, seed):
    """A (B, S) key-padding mask from ``seed``: about PAD_DROP of the keys dropped, key 0 kept."""
    rng = np.random.default_rng(seed)
    keep = rng.random((x.q.shape[0], x.k.shape[-2])) >= PAD_DROP
    keep[:, 0] = True
    return keep


def _gradients(variant, x, kw, g):
    import torch

    q, k, v = (t.detach().clone().requires_grad_(True) for t in (x.q, x.k, x.v))
    out = call(path_callable(variant, "forward"), q, k, v, causal=x.causal, **kw)
    try:
        grads = backward_grads(out, (q, k, v), g)
    except Exception as exc:
        raise VariantError(f"backward raised {type(exc).__name__}: {exc}") from exc
    grads = [torch.zeros_like(t) if gr is None else gr for t, gr in zip((q, k, v), grads)]
    for name, gr in zip(("dq", "dk", "dv"), grads):
        if not bool(torch.isfinite(gr).all()):
            raise VariantError(f"{name} has NaN/inf")
    return grads


def _check(variant, ex: Example, ctx) -> list[Observation]:
    import torch

    from verify.exact import gradient_identities as gi

    x = _kv_heads_of(variant, ex.inputs)
    if x.causal and x.q.shape[-2] != x.k.shape[-2]:
        raise NotApplicable("causal with T != S: the derived backward bounds take T == S")
    g = upstream_of(ex)
    if variant.kernel_family != "softmax":
        return _check_kernel(variant, x, g, ex, ctx)
    skw = _structure(variant, x)
    kw = call_kwargs(variant, "sum", x.attn_mask)
    mask = None if x.attn_mask is None else x.attn_mask.cpu().numpy()
    if ex.choices.get("pad_seed") is not None:
        keep = _keep(x, ex.choices["pad_seed"])
        kw["key_padding_mask"] = torch.from_numpy(keep).to(x.q.device)
        pad = keep[:, None, None, :]
        mask = pad if mask is None else np.logical_and(mask, pad)
        x = dataclasses.replace(x, attn_mask=torch.from_numpy(np.broadcast_to(
            mask, (*x.q.shape[:3], x.k.shape[-2])).copy()))  # fmt: skip
    require_zero_rows(variant, x)
    _, dk, dv = _gradients(variant, x, kw, g)
    opts = dict(causal=x.causal, attn_mask=mask, scale=variant.score_scale(x.q.shape[-1]))
    with model_applies():
        bounds = gi.identity_bounds(
            x.q, x.k, x.v, g, dk, dv, dtype=ctx.model_dtype, exp_library=variant.exp_library,
            device=ctx.device, precision=precision_of(variant, ctx, denominator="sum"),
            arithmetic=variant.arithmetic, **opts, **skw,
        )  # fmt: skip
    vis = gi.visibility(x.q, x.k, causal=x.causal, attn_mask=mask, **skw)
    res = gi.identity_residuals(dk, dv, g, vis)
    obs = [_observation(res, bounds, "value", "(a) sum_j dV_j - sum_i dO_i")]
    if bounds["key"] is not None:
        obs.append(_observation(res, bounds, "key", "(b) sum_j dK_j"))
        a, b = (o.ratio > 1 for o in obs)
        if b and not a:
            obs[1].detail += (
                "; (a) holds and (b) does not: dV = P^T dO is right, so the error is in dS = "
                "P o (dP - delta) -- delta = rowsum(dO o O), dP, or the scale (D21 (c))"
            )
    return obs


def _check_kernel(variant, x, g, ex: Example, ctx) -> list[Observation]:
    """Identity (a) for a Taylor kernel (D21, D19): full or causal visibility."""
    from verify.attention import identity_bound as ib
    from verify.exact import gradient_identities as gi

    if x.attn_mask is not None:  # a drawn key-padding seed is not passed: full visibility
        raise NotApplicable("a mask: D19's backward bound takes causal or full visibility")
    scale = variant.score_scale(x.q.shape[-1])
    try:  # before the call: a row with D ~ 0 makes a kernel without eps return NaN
        den = ib.kernel_denominator_bounds(variant.kernel, x.q, x.k, dtype=ctx.model_dtype,
                                           causal=x.causal, scale=scale)  # fmt: skip
    except ValueError as exc:
        raise NotApplicable(f"identity (a)'s bound does not apply: {exc}") from exc
    kw = call_kwargs(variant, "sum", None)
    _, dk, dv = _gradients(variant, x, kw, g)
    bound = ib.kernel_identity_bound(variant.kernel, x.q, x.k, x.v, g, dv, dtype=ctx.model_dtype,
                                     causal=x.causal, scale=scale, denominators=den)  # fmt: skip
    if not np.isfinite(bound).all():
        raise NotApplicable("identity (a)'s bound is not finite on this example")
    T, S = x.q.shape[-2], x.k.shape[-2]
    vis = np.tril(np.ones((T, S), dtype=bool)) if x.causal else np.ones((T, S), dtype=bool)
    res = gi.identity_residuals(dk, dv, g, vis)
    how = (f"D21 with D19's backward bound for {variant.kernel} and D10's bound of the "
           "denominator (verify.attention.identity_bound)")  # fmt: skip
    return [_observation(res, {"value": bound}, "value", "(a) sum_j dV_j - sum_i dO_i", how)]


#: how the softmax residuals' bounds are derived (``_observation``'s default)
SOFTMAX_HOW = ("D21 with D10's backward bounds summed over the keys and the float64 evaluation "
               "of the sums (verify.exact.gradient_identities)")  # fmt: skip


def _observation(res, bounds, name: str, what: str, how: str = SOFTMAX_HOW) -> Observation:
    from verify.properties.support.observe import ratios

    r, b = np.abs(res[name]), bounds[name]
    ratio = ratios(r, b)
    idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), ratio.shape))
    return Observation(
        float(r[idx]),
        float(b[idx]),
        kind="derived",
        where=f"{name}{idx}",
        detail=f"identity {what} = {float(r[idx]):.3e} at (batch, kv head, column) {idx} vs "
        f"its bound {float(b[idx]):.3e}; derived: {how}",
    )


GRADIENT_IDENTITIES = declare("gradient-identities", _applies, _examples, _check)

PROPERTIES = (GRADIENT_IDENTITIES,)
