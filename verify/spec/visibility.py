"""Which keys a query sees: the causal pattern (with its alignment when T != S) and a boolean
``attn_mask`` (True = keep), combined. The one place the suite computes visibility: the attention
forms, the oracle, the error model, the strategies and the checks all call :func:`visible`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verify.spec.vocabulary import ALIGNMENTS


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def visible(
    T: int,
    S: int,
    *,
    causal: bool,
    attn_mask: Any = None,
    alignment: str | None = None,
    lead: tuple[int, ...] | None = None,
    device: Any = None,
    numpy: bool | None = None,
):
    """Bool array of visible (query t, key s) pairs.

    Causal: key s is visible from query t iff s <= t + offset, with offset 0 (``top-left``, SDPA)
    or S - T (``bottom-right``, FlashAttention >= 2.1); ``alignment=None`` requires T == S.
    ``attn_mask`` (bool, broadcastable to ``(..., T, S)``; a torch tensor or numpy array) is
    and-ed in.

    Returns a torch bool tensor when ``attn_mask`` is a torch tensor or ``device`` is given (on
    the mask's device, or ``device``), a numpy bool array otherwise; ``numpy`` forces either.
    Shape ``(*lead, T, S)`` when ``lead`` is given; otherwise (T, S) without a mask, and with a
    mask the mask's shape raised to 4 dims (leading singleton axes) and broadcast with (T, S).

    Raises:
        ValueError: causal with T != S and no alignment; an unknown alignment; a mask shape not
            broadcastable to ``(*lead, T, S)``.
        TypeError: a mask that is not boolean.
    """
    if alignment is not None and alignment not in ALIGNMENTS:
        raise ValueError(f"alignment: expected one of {ALIGNMENTS}, got {alignment!r}")
    if causal and alignment is None and T != S:
        raise ValueError(f"causal: requires T == S, got T={T}, S={S}")
    use_torch = (_is_torch(attn_mask) or device is not None) if numpy is None else not numpy
    if use_torch:
        import torch

        dev = device if device is not None else getattr(attn_mask, "device", "cpu")
        if attn_mask is not None and not _is_torch(attn_mask):
            attn_mask = torch.as_tensor(np.asarray(attn_mask), device=dev)
        xp_ones = lambda shape: torch.ones(shape, dtype=torch.bool, device=dev)  # noqa: E731
        arange = lambda n: torch.arange(n, device=dev)  # noqa: E731
        mask_dtype_ok = attn_mask is None or attn_mask.dtype == torch.bool
    else:
        if _is_torch(attn_mask):
            attn_mask = attn_mask.detach().cpu().numpy()
        elif attn_mask is not None:
            attn_mask = np.asarray(attn_mask)
        xp_ones = lambda shape: np.ones(shape, dtype=bool)  # noqa: E731
        arange = np.arange
        mask_dtype_ok = attn_mask is None or attn_mask.dtype == np.bool_
    if not mask_dtype_ok:
        raise TypeError(f"attn_mask: expected a bool tensor, got dtype {attn_mask.dtype}")
    if causal:
        off = S - T if alignment == "bottom-right" else 0
        vis = arange(S)[None, :] <= arange(T)[:, None] + off
    else:
        vis = xp_ones((T, S))
    if attn_mask is not None:
        m = attn_mask
        if lead is None and m.ndim < 4:
            m = m.reshape((1,) * (4 - m.ndim) + tuple(m.shape))
        try:
            vis = vis & m if lead is None else vis & _broadcast(m, (*lead, T, S), use_torch)
        except (ValueError, RuntimeError):
            want = (*lead, T, S) if lead is not None else ("...", T, S)
            raise ValueError(
                f"attn_mask: expected a shape broadcastable to {want}, got {tuple(m.shape)}"
            ) from None
    if lead is not None:
        vis = _broadcast(vis, (*lead, T, S), use_torch)
    return vis


def _broadcast(x, shape, use_torch: bool):
    return x.expand(shape) if use_torch else np.broadcast_to(x, shape).copy()
