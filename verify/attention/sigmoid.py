"""Sigmoid attention: o_t = sum_s sigma(c q_t.k_s + b) v_s, unnormalized (D14).

Ramapuram et al. 2025 ("Theory, Analysis, and Best Practices for Sigmoid Self-Attention",
arXiv:2409.04431) use the bias b = -ln S. The weights lie in (0, 1) and need no normalization,
so there is no denominator and no shift by the row maximum.
"""

from __future__ import annotations

import torch

from verify.attention import _masks, structure
from verify.attention._validate import (
    accumulation_dtype,
    check_bool,
    check_causal,
    check_mask,
    check_qkv,
    check_real,
    resolve_scale,
)


def sigmoid_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    bias: float = 0.0,
    causal: bool = False,
    scale: float | None = None,
    attn_mask: torch.Tensor | None = None,
    window: tuple[int, int] | None = None,
    softcap: float | None = None,
    alibi_slopes=None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """Sigmoid attention o_t = sum_{s visible} sigma(x_ts + b) v_s, x_ts = c q_t.k_s (D14).

    Args:
        q: (B, H, T, d); k: (B, H|G, S, d); v: (B, H|G, S, d_v). One float dtype, one device.
        bias: b, a finite real (e.g. -ln S, Ramapuram et al.).
        causal, scale, attn_mask, window, softcap, alibi_slopes, enable_gqa: as
            ``softmax_attention`` (scale c default 1/sqrt(d)); a masked weight is exactly 0.

    Returns:
        (B, H, T, d_v) in the dtype of q (bf16/fp16 computed in float32, rounded once).

    Raises:
        TypeError, ValueError: any invalid argument (named in the message).
    """
    heads = q.shape[1] if isinstance(q, torch.Tensor) and q.dim() == 4 else 0
    k, v = structure.expand_kv(k, v, heads, enable_gqa)
    dims = check_qkv(q, k, v)
    b = check_real("bias", bias)
    win = structure.check_window(window)
    causal = check_causal(causal, dims) if win is None else check_bool("causal", causal)
    win = structure.effective_window(win, causal)
    c = resolve_scale(scale, dims.d, exp_type=True)
    mask = check_mask(attn_mask, dims, q.device)
    cap = structure.check_softcap(softcap)
    slopes = structure.check_alibi_slopes(alibi_slopes, dims.H, q.device)

    acc = accumulation_dtype(q.dtype)
    vis = _masks.visible_mask(mask, causal and win is None, dims, q.device, window=win)
    qa, ka, va = _masks.sanitize(q.to(acc), k.to(acc), v.to(acc), vis)
    x = structure.transform_scores(
        c * (qa @ ka.transpose(-1, -2)), softcap=cap, alibi_slopes=slopes
    )
    w = torch.sigmoid(x + b)
    if vis is not None:
        w = torch.where(vis, w, 0.0)
    return (w @ va).to(q.dtype)
