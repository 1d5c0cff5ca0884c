"""Windows, grouped key/value heads, softcapping and ALiBi for the parallel forms (D12, D13, D15).

Conventions (``reports/derivations.md``, D15): a window ``(left, right)`` is FlashAttention's
``window_size`` -- bottom-right aligned, t' = t + S - T, key s visible from query t iff
t' - left <= s <= t' + right, -1 unbounded; ``causal=True`` sets right = 0. Grouped key/value
heads (``enable_gqa``, SDPA's name): query head h uses kv head h // (H / G)
(``repeat_interleave``). Softcapping s -> C tanh(s / C) acts on the scaled scores (D13), then
the ALiBi bias -m_h |t' - s| is added (FlashAttention's order: softcap, bias, mask).
"""

from __future__ import annotations

import math
import numbers

import torch

from derivations import structure as d15
from verify.attention._validate import check_bool, check_real


def check_window(window: object) -> tuple[int, int] | None:
    """``None`` or a pair of ints ``(left, right)``, each >= -1 (-1 = unbounded).

    Raises:
        TypeError: not a pair of ints (bools rejected).
        ValueError: a side < -1.
    """
    if window is None:
        return None
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise TypeError(f"window: expected a pair (left, right) of ints, got {window!r}")
    for side in window:
        if isinstance(side, bool) or not isinstance(side, numbers.Integral):
            raise TypeError(f"window: expected a pair (left, right) of ints, got {window!r}")
        if side < -1:
            raise ValueError(f"window: expected each side >= -1 (-1 = unbounded), got {window!r}")
    return int(window[0]), int(window[1])


def window_mask(queries: int, keys: int, window: tuple[int, int], *, device=None) -> torch.Tensor:
    """Bool (T, S): key s visible from query t under ``window`` (D15, bottom-right aligned).

    Raises:
        TypeError / ValueError: a bad ``window`` (see :func:`check_window`).
    """
    left, right = check_window(window)
    t = torch.arange(queries, device=device)[:, None] + (keys - queries)
    s = torch.arange(keys, device=device)[None, :]
    vis = torch.ones(queries, keys, dtype=torch.bool, device=device)
    if left >= 0:
        vis &= s >= t - left
    if right >= 0:
        vis &= s <= t + right
    return vis


def effective_window(window: tuple[int, int] | None, causal: bool) -> tuple[int, int] | None:
    """The window after ``causal`` (right = 0; FlashAttention's rule); None = no window."""
    if window is None:
        return None
    return (window[0], 0) if causal else window


def expand_kv(
    k: torch.Tensor, v: torch.Tensor, heads: int, enable_gqa: object
) -> tuple[torch.Tensor, torch.Tensor]:
    """k, v with G heads expanded to H by ``repeat_interleave`` (GQA, D15).

    Args:
        k: (B, G, S, d); v: (B, G, S, d_v); heads: H of the queries (0: q is not a 4-D
            tensor, nothing is expanded and ``check_qkv`` reports it); enable_gqa: bool.

    Raises:
        TypeError: ``enable_gqa`` not a bool.
        ValueError: G != H without ``enable_gqa``, or G does not divide H.
    """
    check_bool("enable_gqa", enable_gqa)
    if heads < 1 or not all(isinstance(x, torch.Tensor) and x.dim() == 4 for x in (k, v)):
        return k, v  # check_qkv names what is wrong
    g = k.shape[1]
    if g == heads:
        return k, v
    if not enable_gqa:
        raise ValueError(
            f"k: expected {heads} heads (from q), got {g}; pass enable_gqa=True for grouped "
            "key/value heads"
        )
    if g < 1 or heads % g or v.shape[1] != g:
        raise ValueError(
            f"k, v: expected a number of kv heads dividing {heads} (the heads of q), got "
            f"k with {g} and v with {v.shape[1]} heads"
        )
    # head h reads kv head d15.kv_head(h, H, G) = h // (H / G): repeat_interleave's map
    index = torch.tensor([d15.kv_head(h, heads, g) for h in range(heads)], device=k.device)
    return k.index_select(1, index), v.index_select(1, index)


def check_softcap(softcap: object) -> float | None:
    """``None`` or a finite cap C > 0 (D13)."""
    if softcap is None:
        return None
    c = check_real("softcap", softcap)
    if c <= 0:
        raise ValueError(f"softcap: expected a number > 0, got {softcap!r}")
    return c


def check_alibi_slopes(slopes: object, heads: int, device) -> torch.Tensor | None:
    """``None`` or H slopes m_h >= 0 as a float64 tensor on ``device`` (D12).

    Accepts a sequence of reals or a 1-D float tensor of length H.

    Raises:
        TypeError: not a sequence of reals / a float tensor.
        ValueError: wrong length, a negative or non-finite slope.
    """
    if slopes is None:
        return None
    if isinstance(slopes, torch.Tensor):
        if not slopes.is_floating_point() or slopes.dim() != 1:
            raise TypeError(
                f"alibi_slopes: expected a 1-D float tensor of {heads} slopes, got "
                f"{slopes.dtype} of shape {tuple(slopes.shape)}"
            )
        vals = [float(x) for x in slopes.detach().cpu().double()]
    elif isinstance(slopes, (list, tuple)):
        vals = [check_real("alibi_slopes", x) for x in slopes]
    else:
        raise TypeError(
            f"alibi_slopes: expected a sequence of {heads} slopes, got {type(slopes).__name__}"
        )
    if len(vals) != heads:
        raise ValueError(f"alibi_slopes: expected {heads} slopes (one per head), got {len(vals)}")
    if any(not math.isfinite(x) or x < 0 for x in vals):
        raise ValueError(f"alibi_slopes: expected finite slopes >= 0, got {vals}")
    return torch.tensor(vals, dtype=torch.float64, device=device)


def transform_scores(
    x: torch.Tensor, *, softcap: float | None, alibi_slopes: torch.Tensor | None
) -> torch.Tensor:
    """Scaled scores (B, H, T, S) -> softcapped, then ALiBi-biased scores (D13, D12).

    The bias is -m_h |t' - s| with t' = t + S - T (FlashAttention's non-causal ALiBi; under a
    causal mask only s <= t' remains and it is -m_h (t' - s)).
    """
    if softcap is not None:
        x = softcap * torch.tanh(x / softcap)
    if alibi_slopes is not None:
        T, S = x.shape[-2], x.shape[-1]
        t = torch.arange(T, device=x.device)[:, None] + (S - T)
        s = torch.arange(S, device=x.device)[None, :]
        dist = (t - s).abs().to(x.dtype)
        x = x - alibi_slopes.to(x.dtype)[None, :, None, None] * dist
    return x


def check_decay(
    decay: object, heads: int, *, causal: bool, mode: str, device
) -> torch.Tensor | None:
    """``None`` or H decays gamma_h in (0, 1] as a float64 tensor on ``device`` (D12).

    The decayed RNN S_t = gamma S_{t-1} + phi(k_t) v_t^T weighs key s by gamma^(t-s) (D12); it
    needs ``causal=True``, and a denominator other than ``count`` (a decayed weight is not a
    count of keys). gamma = e^(-m) is ALiBi with slope m (``derivations.decay``).

    Raises:
        TypeError: not a sequence of reals / a float tensor.
        ValueError: wrong length, a decay outside (0, 1], ``causal=False`` or ``count``.
    """
    if decay is None:
        return None
    if isinstance(decay, torch.Tensor):
        if not decay.is_floating_point() or decay.dim() != 1:
            raise TypeError(
                f"decay: expected a 1-D float tensor of {heads} decays, got {decay.dtype} of "
                f"shape {tuple(decay.shape)}"
            )
        vals = [float(x) for x in decay.detach().cpu().double()]
    elif isinstance(decay, (list, tuple)):
        vals = [check_real("decay", x) for x in decay]
    else:
        raise TypeError(f"decay: expected a sequence of {heads} decays, got {type(decay).__name__}")
    if len(vals) != heads:
        raise ValueError(f"decay: expected {heads} decays (one per head), got {len(vals)}")
    if any(not 0 < x <= 1 for x in vals):
        raise ValueError(f"decay: expected each decay in (0, 1], got {vals}")
    if not causal:
        raise ValueError("decay: the decayed RNN form needs causal=True (D12)")
    if mode == "count":
        raise ValueError(
            "decay: not defined with denominator='count' (decayed weights are not counts)"
        )
    return torch.tensor(vals, dtype=torch.float64, device=device)


def decay_powers(gamma: torch.Tensor, lags: torch.Tensor, dtype) -> torch.Tensor:
    """gamma_h^lag for lags >= 0 (0 where lag < 0): shape (H, *lags.shape) in ``dtype``."""
    g = gamma.to(dtype).reshape((-1,) + (1,) * lags.dim())
    lag = lags.to(dtype)
    return torch.where(lag >= 0, g ** lag.clamp(min=0), 0.0)
