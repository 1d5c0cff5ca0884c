"""FlashAttention-2's backward pass emulated in torch (a ``torch.autograd.Function`` whose forward
is ``verify.attention.flash``'s), with named defects of hand-written backward kernels.

FlashAttention-2, arXiv 2307.08691, Algorithm 2, as csrc/flash_attn/src/flash_bwd_kernel.h
computes it: the forward saves the output O (input type) and the log-sum-exp L; the backward
recomputes P = exp(y - L) in float32 from the same transformed scores y as the forward (the cap
by tanh.approx, ALiBi, the mask), dP = dO V^T (float32 accumulation), Delta = rowsum(dO o O)
from the stored O, dY = P o (dP - Delta), times the cap's derivative 1 - tanh^2 recomputed
from the forward's tanh (utils.h ``calculate_dtanh``), P and dY rounded to the input type before
the products dV = P^T dO, dQ = c dY K, dK = c dY^T Q (float32 accumulation, then the input type);
grouped kv heads sum their query heads' dK and dV.

``faults`` (one defect each, realistic for hand-written kernels; :data:`BACKWARD_FAULTS`):

* ``delta-unnormalized``: Delta from the output before its division by the row sum;
* ``mask-dropped``: P recomputed without the mask (masked keys receive gradient);
* ``dk-unscaled``: dK without the softmax scale;
* ``gqa-first-head``: a kv head's dK and dV taken from its first query head only (not summed);
* ``softcap-no-dtanh``: the cap's derivative left out of dY;
* ``lse-max-only``: P recomputed as exp(y - m), the row maximum instead of the log-sum-exp;
* ``dv-last-block-dropped``: the keys of the last partial block of 64 get no dV (S % 64 != 0);
* ``delta-wrong-row``: row t's Delta read from row t + 1's (the last row keeps its own): an
  indexing or race defect of the kind of FlashAttention PR #2481, where dV stays right.
"""

from __future__ import annotations

import math

import torch

from verify.attention.flash import LOG2E, TANH_APPROX_F32_REL, _kv_heads, _partial, _visible

BACKWARD_FAULTS = (
    "delta-unnormalized",
    "mask-dropped",
    "dk-unscaled",
    "gqa-first-head",
    "softcap-no-dtanh",
    "lse-max-only",
    "dv-last-block-dropped",
    "delta-wrong-row",
)
BLOCK = 64


def _scores(q, k, *, causal, scale, window, softcap, alibi_slopes, mask: bool):
    """Float32 transformed scores y (natural units, masked -inf unless ``mask`` is False), the
    tanh values t of the cap (or None) and the scale c."""
    T, S, d = q.shape[-2], k.shape[-2], q.shape[-1]
    f32 = torch.float32
    c = 1.0 / math.sqrt(d) if scale is None else float(scale)
    s = q.to(f32) @ k.to(f32).transpose(-1, -2)
    t = None
    if softcap is not None:
        t = torch.tanh(s * torch.tensor(c / softcap, dtype=f32)) * (1.0 + TANH_APPROX_F32_REL.value)
        y = t * softcap
    else:
        y = s * c
    if alibi_slopes is not None:  # as the forward: key-indexed on causal rows (alibi.h)
        mh = torch.as_tensor(alibi_slopes, dtype=f32)[:, None, None]
        cols = torch.arange(S, dtype=f32)[None, :]
        if causal:
            y = y + mh * cols
        else:
            rows = torch.arange(T, dtype=f32)[:, None] + (S - T)
            y = y - mh * (rows - cols).abs()
    if mask:
        y = y.masked_fill(~_visible(T, S, causal, window, False, q.device), -torch.inf)
    return y, t, c


class FlashAttentionFunction(torch.autograd.Function):
    """o = softmax attention (FlashAttention-2's forward emulation, one split), backward as
    FlashAttention-2's (module docstring). Arguments after v: causal, scale, window, softcap,
    alibi_slopes, faults (backward defects)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, window, softcap, alibi_slopes, faults):
        H = q.shape[1]
        ke, ve = _kv_heads(k, v, H, False)
        out, lse = _partial(q, ke, ve, (0, ke.shape[-2]), causal=causal, scale=scale,
                            window=window, softcap=softcap, alibi_slopes=alibi_slopes,
                            block_n=BLOCK, faults=())  # fmt: skip
        unnormalized = out  # the float32 output before its rounding to the input type
        o = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, o, lse, unnormalized)
        ctx.args = (causal, scale, window, softcap, alibi_slopes, tuple(faults))
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse, out32 = ctx.saved_tensors
        causal, scale, window, softcap, alibi_slopes, faults = ctx.args
        dt, f32 = q.dtype, torch.float32
        H, G = q.shape[1], k.shape[1]
        ke, ve = _kv_heads(k, v, H, False)
        y, t, c = _scores(q, ke, causal=causal, scale=scale, window=window, softcap=softcap,
                          alibi_slopes=alibi_slopes, mask="mask-dropped" not in faults)  # fmt: skip
        if "lse-max-only" in faults:
            ref = y.amax(-1, keepdim=True)
            ref = torch.where(torch.isfinite(ref), ref, torch.zeros_like(ref))
        else:
            ref = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))[..., None]
        P = torch.exp2((y - ref) * LOG2E)
        if "mask-dropped" not in faults:
            P = torch.where(torch.isfinite(lse)[..., None], P, torch.zeros_like(P))
        dof = do.to(f32)
        dP = dof @ ve.to(f32).transpose(-1, -2)
        if "delta-unnormalized" in faults:  # the output before 1 / l: acc = o * l
            l_row = torch.exp(lse - y.amax(-1)).nan_to_num(0.0)
            delta = (dof * out32 * l_row[..., None]).sum(-1, keepdim=True)
        else:
            delta = (dof * o.to(f32)).sum(-1, keepdim=True)
        if "delta-wrong-row" in faults and delta.shape[-2] > 1:
            delta = torch.cat([delta[..., 1:, :], delta[..., -1:, :]], -2)
        dS = P * (dP - delta)
        if t is not None and "softcap-no-dtanh" not in faults:
            dS = dS * (1.0 - t * t)
        Pt, dSt = P.to(dt).to(f32), dS.to(dt).to(f32)
        dv = Pt.transpose(-1, -2) @ dof
        if "dv-last-block-dropped" in faults and ke.shape[-2] % BLOCK:
            dv[..., ke.shape[-2] // BLOCK * BLOCK :, :] = 0.0
        dq = c * (dSt @ ke.to(f32))
        dk = dSt.transpose(-1, -2) @ q.to(f32)
        if "dk-unscaled" not in faults:
            dk = c * dk
        if G != H:  # a kv head's gradient: the sum over its H / G query heads
            r = H // G
            dk = dk.reshape(dk.shape[0], G, r, *dk.shape[2:])
            dv = dv.reshape(dv.shape[0], G, r, *dv.shape[2:])
            first = "gqa-first-head" in faults
            dk = dk[:, :, 0] if first else dk.sum(2)
            dv = dv[:, :, 0] if first else dv.sum(2)
        return dq.to(dt), dk.to(dt), dv.to(dt), None, None, None, None, None, None


def flash_attention_trainable(q, k, v, *, causal=False, scale=None, window=None, softcap=None,
                              alibi_slopes=None, faults=()):  # fmt: skip
    """FlashAttention-2's forward and backward, emulated (module docstring); k, v may have G
    heads dividing H.

    Raises:
        ValueError: unknown ``faults``.
    """
    bad = [f for f in faults if f not in BACKWARD_FAULTS]
    if bad:
        raise ValueError(f"faults: expected names from {BACKWARD_FAULTS}, got {bad}")
    return FlashAttentionFunction.apply(q, k, v, causal, scale, window, softcap, alibi_slopes,
                                        tuple(faults))  # fmt: skip
