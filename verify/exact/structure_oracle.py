"""mpmath references of the modern forms: windows, grouped kv heads, softcapping, ALiBi, decay and
sigmoid attention (D12-D15), beside ``verify.exact.oracle`` (which they do not change).

Written as plain loops over the definitions, independently of ``verify.attention``: visibility
from ``derivations.structure.window_visible`` (FlashAttention's window, causal = right 0,
bottom-right aligned), kv head ``derivations.structure.kv_head``, the cap C tanh(x / C), the ALiBi
bias -m_h |t' - s|, the decay gamma_h^(t-s) and sigma(x + b). Inputs are converted exactly (torch
or numpy floats to mpf); the result is rounded once to float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from derivations import structure as d15
from verify.exact.oracle import _taylor_kernel, to_float64, to_mpf_array
from verify.spec.kernel import taylor_order
from verify.spec.vocabulary import QK_NORM_EPS

__all__ = ["structured_reference"]

KERNELS = ("softmax", "sigmoid")


def structured_reference(
    q: Any,
    k: Any,
    v: Any,
    *,
    kernel: str = "softmax",
    causal: bool = False,
    scale: float | None = None,
    attn_mask: Any = None,
    window: tuple[int, int] | None = None,
    enable_gqa: bool = False,
    softcap: float | None = None,
    alibi_slopes: Any = None,
    decay: Any = None,
    sigmoid_bias: float = 0.0,
    qk_norm: bool = False,
    score_bias: Any = None,
    dps: int = 50,
) -> np.ndarray:
    """Exact attention output of a modern form, rounded once to float64, (B, H, T, d_v).

    Args:
        q: (B, H, T, d); k, v: (B, G, S, d), (B, G, S, d_v) with G = H, or G dividing H with
            ``enable_gqa``. Torch tensors or numpy arrays of any float dtype.
        kernel: ``softmax`` (normalized exp), ``sigmoid`` (unnormalized sigma(x + b)) or
            ``taylor:N`` (normalized kappa_N; with ``decay``, the decayed Taylor-N RNN, D12).
        causal: right side of the window 0 (with no window: s <= t, T == S).
        scale: c, default 1/sqrt(d).
        attn_mask: bool, True = keep, broadcastable to (B, H, T, S).
        window, softcap, alibi_slopes, decay, sigmoid_bias: as ``verify.attention``.
        score_bias: an additive bias broadcastable to (B, H, T, S), added after the scale and
            the softcap (before ALiBi), taken exactly.
        qk_norm: score c q~.k~ with q~ = q / max(|q|, eps) (cosine attention, QK-norm;
            ``verify.spec.vocabulary.QK_NORM_EPS``, F.normalize's default).
        dps: decimal digits.

    Raises:
        ValueError: an unknown kernel, shapes that do not match, causal T != S without a window.
    """
    import mpmath

    order = taylor_order(kernel) if kernel.startswith("taylor:") else None
    if kernel not in KERNELS and order is None:
        raise ValueError(f"kernel: expected one of {KERNELS} or taylor:N, got {kernel!r}")
    with mpmath.workdps(dps):
        Q, K, V = (to_mpf_array(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
        B, H, T, d = Q.shape
        G, S = K.shape[1], K.shape[2]
        if G != H and not (enable_gqa and H % G == 0):
            raise ValueError(f"k: expected {H} heads, or a divisor with enable_gqa, got {G}")
        if window is None and causal and T != S:
            raise ValueError(f"causal: T == S needed without a window, got T = {T}, S = {S}")
        c = 1 / mpmath.sqrt(d) if scale is None else mpmath.mpf(scale)
        left, right = (-1, -1) if window is None else window
        if causal:
            right = 0
        mask = None if attn_mask is None else np.broadcast_to(np.asarray(attn_mask), (B, H, T, S))
        bias = None
        if score_bias is not None:
            raw = score_bias
            if hasattr(raw, "detach"):
                raw = raw.detach().cpu().double().numpy()
            bias = np.broadcast_to(np.asarray(raw, dtype=np.float64), (B, H, T, S))
        kappa = None if order is None else _taylor_kernel(order)  # D1's coefficients
        slopes = None if alibi_slopes is None else [mpmath.mpf(float(m)) for m in alibi_slopes]
        gammas = None if decay is None else [mpmath.mpf(float(g)) for g in decay]
        out = np.empty((B, H, T, V.shape[-1]), dtype=object)
        for b in range(B):
            for h in range(H):
                g = d15.kv_head(h, H, G)
                for t in range(T):
                    tp = t + S - T
                    num = [mpmath.mpf(0)] * V.shape[-1]
                    den = mpmath.mpf(0)
                    for s in range(S):
                        if window is not None or causal:
                            if not d15.window_visible(t, s, T, S, left, right):
                                continue
                        if mask is not None and not mask[b, h, t, s]:
                            continue
                        x = c * mpmath.fdot(Q[b, h, t], K[b, g, s])
                        if qk_norm:  # x / max(|x|, eps), F.normalize's rule
                            nq = max(mpmath.norm(Q[b, h, t]), QK_NORM_EPS)
                            x = x / (nq * max(mpmath.norm(K[b, g, s]), QK_NORM_EPS))
                        if softcap is not None:
                            x = softcap * mpmath.tanh(x / softcap)
                        if bias is not None:
                            x = x + mpmath.mpf(float(bias[b, h, t, s]))
                        if slopes is not None:
                            x = x - slopes[h] * abs(tp - s)
                        if kernel == "sigmoid":
                            w = 1 / (1 + mpmath.exp(-(x + sigmoid_bias)))
                        elif order is not None:
                            w = kappa(x)
                        else:
                            w = mpmath.exp(x)
                        if gammas is not None:
                            w = w * gammas[h] ** (tp - s)
                        den += w
                        num = [a + w * V[b, g, s, j] for j, a in enumerate(num)]
                    if kernel == "sigmoid" or den == 0:
                        out[b, h, t] = num
                    else:
                        out[b, h, t] = [a / den for a in num]
        return to_float64(out)
