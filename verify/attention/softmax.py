"""Softmax attention, the reference form (D2, D6, D7)."""

from __future__ import annotations

import torch

from verify.attention import _masks, structure
from verify.attention._validate import (
    accumulation_dtype,
    check_bool,
    check_causal,
    check_mask,
    check_qkv,
    resolve_scale,
)
from verify.attention.norms import apply_denominator, check_denominator, check_eps


def softmax_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    attn_mask: torch.Tensor | None = None,
    denominator: str = "sum",
    eps: float = 0.0,
    window: tuple[int, int] | None = None,
    softcap: float | None = None,
    alibi_slopes=None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """Softmax attention o_t = sum_s exp(x_ts) v_s / sum_s exp(x_ts), x_ts = c q_t.k_s.

    Numerically stable: the maximum over *visible* scores of each row is subtracted before exp,
    which is exact for every denominator mode (D6: the true N, D are e^m times the shifted ones;
    ``norms.apply_denominator`` undoes the shift where it matters). Masked weights are exactly zero
    (``torch.where``); a row with no visible key returns zeros with finite gradients (the
    convention of recent SDPA versions; fault class 8).

    Args:
        q: (B, H, T, d); k: (B, H, S, d); v: (B, H, S, d_v). One float dtype, one device.
        causal: query t sees key s iff s <= t; requires T == S.
        scale: c, default 1/sqrt(d) (as SDPA); finite, >= 0.
        attn_mask: bool, True = keep, broadcastable to (B, H, T, S).
        denominator: one of ``verify.spec.vocabulary.DENOMINATORS`` (D7); ``sum`` is softmax.
        eps: >= 0, only used by the denominator modes (see ``norms``); 0 = IEEE result.
        window: ``(left, right)`` in FlashAttention's convention (D15; bottom-right aligned,
            -1 unbounded); with ``causal=True`` right is 0 and T != S is allowed.
        softcap: C > 0: scores become C tanh(x / C) before the bias and the mask (D13).
        alibi_slopes: H slopes m_h >= 0 (sequence or 1-D tensor): the bias -m_h |t' - s|
            (D12; ``derivations.decay.alibi_slopes`` gives the reference slopes).
        enable_gqa: k and v may have G heads, G dividing H; query head h uses kv head
            h // (H / G) (D15, SDPA's ``enable_gqa``).

    Returns:
        (B, H, T, d_v) in the dtype of q. float64/float32 compute in their own dtype; bf16/fp16
        compute in float32 and round once at the end.

    Raises:
        TypeError, ValueError: any invalid argument (named in the message).
    """
    heads = q.shape[1] if isinstance(q, torch.Tensor) and q.dim() == 4 else 0
    k, v = structure.expand_kv(k, v, heads, enable_gqa)
    dims = check_qkv(q, k, v)
    win = structure.check_window(window)
    causal = check_causal(causal, dims) if win is None else check_bool("causal", causal)
    win = structure.effective_window(win, causal)
    cap = structure.check_softcap(softcap)
    slopes = structure.check_alibi_slopes(alibi_slopes, dims.H, q.device)
    c = resolve_scale(scale, dims.d, exp_type=True)
    mask = check_mask(attn_mask, dims, q.device)
    mode = check_denominator(denominator, dims.d_v)
    eps = check_eps(eps)

    acc = accumulation_dtype(q.dtype)
    vis = _masks.visible_mask(mask, causal and win is None, dims, q.device, window=win)
    qa, ka, va = _masks.sanitize(q.to(acc), k.to(acc), v.to(acc), vis)
    x = structure.transform_scores(
        c * (qa @ ka.transpose(-1, -2)), softcap=cap, alibi_slopes=slopes
    )
    if vis is None:
        m = x.amax(-1, keepdim=True).detach()
        w = torch.exp(x - m)
    else:
        m = torch.where(vis, x, float("-inf")).amax(-1, keepdim=True)
        m = torch.where(vis.any(-1, keepdim=True), m, 0.0).detach()
        # exp of masked entries is taken at the shift itself (finite), then dropped exactly
        w = torch.where(vis, torch.exp(torch.where(vis, x, m) - m), 0.0)
    # m is detached: e^m * sum exp(x - m) equals sum exp(x) for any constant m, so gradients
    # through the rest of the graph are exact
    count = _masks.visible_count(vis, dims, acc, q.device)
    out = apply_denominator(w @ va, w.sum(-1), count, mode=mode, eps=eps, log_shift=m.squeeze(-1))
    return out.to(q.dtype)
