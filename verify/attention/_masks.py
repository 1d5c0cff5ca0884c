"""Visibility of keys for the parallel forms: causal mask and boolean ``attn_mask`` combined.

A masked weight is made exactly zero with ``torch.where`` (never an additive finite sentinel,
D6). Queries that see no key and keys that no query sees are replaced by zeros before any
arithmetic, so large finite values there (e.g. 1e10, fault class 8) cannot overflow into inf and
reach the gradients as 0 * inf.
"""

from __future__ import annotations

import torch

from verify.spec.shape import Shape
from verify.spec.visibility import visible


def visible_mask(
    attn_mask: torch.Tensor | None,
    causal: bool,
    dims: Shape,
    device: torch.device,
    *,
    window: tuple[int, int] | None = None,
) -> torch.Tensor | None:
    """Bool (B|1, H|1, T, S) of visible (query, key) pairs, or None when all are visible.

    ``window`` (D15, already combined with ``causal``) is and-ed in.
    """
    if attn_mask is None and not causal and window is None:
        return None
    vis = visible(dims.T, dims.S, causal=causal, attn_mask=attn_mask, device=device)
    if window is not None:
        from verify.attention.structure import window_mask

        vis = vis & window_mask(dims.T, dims.S, window, device=device)
    return vis


def sanitize(qa, ka, va, vis):
    """Zero the queries with no visible key and the keys/values no query sees."""
    if vis is None:
        return qa, ka, va
    rows = vis.any(-1)[..., None]
    cols = vis.any(-2)[..., None]
    return torch.where(rows, qa, 0.0), torch.where(cols, ka, 0.0), torch.where(cols, va, 0.0)


def visible_count(vis: torch.Tensor | None, dims: Shape, dtype, device) -> torch.Tensor:
    """Number of visible keys per query, (B, H, T) in ``dtype`` (0 marks an empty row)."""
    if vis is None:
        return torch.full((dims.B, dims.H, dims.T), float(dims.S), dtype=dtype, device=device)
    return vis.sum(-1, dtype=dtype).expand(dims.B, dims.H, dims.T)
