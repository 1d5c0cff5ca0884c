"""A FlashAttention-2-style backward (a custom autograd.Function) and its faulty twins, for
D21's identities (verify.exact.gradient_identities).

The forward saves the log-sum-exp; the backward recomputes P = exp(s - lse) in float32 and
forms dV = P^T dO, dP = dO V^T, delta = rowsum(dO o O) from the output it returned, dS =
P o (dP - delta), dQ = c dS K, dK = c dS^T Q (Dao, FlashAttention-2, Algorithm 2). Faults:

- ``delta-zero``: delta = 0 (a kernel that skips the preprocessing pass): dV right, (b) fails.
- ``delta-row``: delta of the next row (a race that reads another row's delta): dV right,
  (b) fails.
- ``dv-unnormalized``: dV from exp(s - m), the weights before the normalizer: (a) fails.
"""

from __future__ import annotations

import math

import torch

FAULTS = (None, "delta-zero", "delta-row", "dv-unnormalized")


def _scores(q, k, scale, bias, visible):
    s = scale * q @ k.transpose(-1, -2)
    if bias is not None:
        s = s + bias
    return s.masked_fill(~visible, -math.inf)


def _expand(t, heads):
    return t.repeat_interleave(heads // t.shape[1], dim=1)


class _FlashStyle(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, visible, bias, scale, fault):
        dt = q.dtype
        q32, k32, v32 = (t.float() for t in (q, k, v))
        H = q.shape[1]
        ke, ve = _expand(k32, H), _expand(v32, H)
        s = _scores(q32, ke, scale, bias, visible)
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(s - m)
        den = e.sum(-1, keepdim=True)
        lse = torch.where(den > 0, m + torch.log(den), torch.full_like(m, math.inf))
        o = (torch.exp(s - lse) @ ve).to(dt)
        ctx.save_for_backward(q, k, v, visible, o, lse, m)
        ctx.bias, ctx.scale, ctx.fault = bias, scale, fault
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, visible, o, lse, m = ctx.saved_tensors
        dt, H, G = q.dtype, q.shape[1], k.shape[1]
        q32, k32, v32, o32, do32 = (t.float() for t in (q, k, v, o, do))
        ke, ve = _expand(k32, H), _expand(v32, H)
        s = _scores(q32, ke, ctx.scale, ctx.bias, visible)
        P = torch.exp(s - lse)
        W = torch.exp(s - m) if ctx.fault == "dv-unnormalized" else P
        dv = W.transpose(-1, -2) @ do32
        dP = do32 @ ve.transpose(-1, -2)
        delta = (do32 * o32).sum(-1, keepdim=True)
        if ctx.fault == "delta-zero":
            delta = torch.zeros_like(delta)
        elif ctx.fault == "delta-row":
            delta = delta.roll(1, dims=-2)
        dS = P * (dP - delta)
        dq = ctx.scale * dS @ ke
        dk = ctx.scale * dS.transpose(-1, -2) @ q32
        B, _, S, _ = dk.shape
        dk = dk.reshape(B, G, H // G, S, -1).sum(2)
        dv = dv.reshape(B, G, H // G, S, -1).sum(2)
        return dq.to(dt), dk.to(dt), dv.to(dt), None, None, None, None


def flash_style(q, k, v, visible, *, bias=None, scale=None, fault=None):
    """Softmax attention with a FlashAttention-2-style backward (module docstring).

    Args:
        q (B, H, T, d), k (B, G, S, d), v (B, G, S, d_v): float tensors (G divides H).
        visible: bool (B or 1, H or 1, T, S), True = the query sees the key. bias: an additive
        score bias broadcastable to the scores, or None. scale: None = 1/sqrt(d). fault: one of
        :data:`FAULTS`.

    Returns:
        o (B, H, T, d_v) in q's dtype; rows with no visible key give zeros.

    Raises:
        ValueError: an unknown fault.
    """
    if fault not in FAULTS:
        raise ValueError(f"fault: expected one of {FAULTS}, got {fault!r}")
    c = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return _FlashStyle.apply(q, k, v, visible, bias, c, fault)
