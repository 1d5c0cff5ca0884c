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


#: faults of the Taylor-2 backward below
TAYLOR_FAULTS = (None, "dv-denominator-row")


class _Taylor2(torch.autograd.Function):
    """Normalized causal Taylor-2 attention, o_t = sum_s k2(c q_t.k_s) v_s / D_t, with a
    hand-written backward: gN = dO / D, dV = W^T gN, dW = (gN v^T - (gN . o) 1^T) masked,
    dX = dW o (1 + X) (k2' = k1), dq = c dX k, dk = c dX^T q. Fault ``dv-denominator-row``:
    dV divides row t's dO by row t + 1's denominator (a wrong row stride); dq and dk stay right."""

    @staticmethod
    def forward(ctx, q, k, v, scale, fault):
        T, S = q.shape[-2], k.shape[-2]
        X = scale * q @ k.transpose(-1, -2)
        keep = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
        W = (1 + X + 0.5 * X * X) * keep
        D = W.sum(-1, keepdim=True)
        o = (W @ v) / D
        ctx.save_for_backward(q, k, v, X, W, D, o)
        ctx.scale, ctx.fault = scale, fault
        return o

    @staticmethod
    def backward(ctx, dO):
        q, k, v, X, W, D, o = ctx.saved_tensors
        gN = dO / D
        gN_v = dO / D.roll(-1, dims=-2) if ctx.fault == "dv-denominator-row" else gN
        dv = W.transpose(-1, -2) @ gN_v
        dW = gN @ v.transpose(-1, -2) - (gN * o).sum(-1, keepdim=True)
        dX = dW * (1 + X) * (W != 0)
        dq = ctx.scale * dX @ k
        dk = ctx.scale * dX.transpose(-1, -2) @ q
        return dq, dk, dv, None, None


def taylor2_style(q, k, v, *, causal=True, fault=None):
    """Causal normalized Taylor-2 attention with the hand-written backward of ``_Taylor2``.

    Args:
        q (B, H, T, d), k (B, H, S, d), v (B, H, S, d_v): float32/float64 tensors; causal must
        be True (bottom-right aligned). fault: one of :data:`TAYLOR_FAULTS`.

    Returns:
        o (B, H, T, d_v) in q's dtype.

    Raises:
        ValueError: an unknown fault, or causal False.
    """
    if fault not in TAYLOR_FAULTS:
        raise ValueError(f"fault: expected one of {TAYLOR_FAULTS}, got {fault!r}")
    if not causal:
        raise ValueError("causal: this kernel is causal only")
    return _Taylor2.apply(q, k, v, 1.0 / math.sqrt(q.shape[-1]), fault)
