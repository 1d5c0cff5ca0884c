"""Denominator replacements of D7 (Mongaras & Larson, arXiv 2507.23632).

Kernel attention forms a numerator N_t = sum_s kappa(x_ts) v_s (shape (..., d_v)) and a
denominator D_t = sum_s kappa(x_ts) (shape (...)) per query. ``apply_denominator`` turns them into
the output for each ``denominator`` mode:

=========== =============================================== ==================================
mode        output                                          with ``eps``
=========== =============================================== ==================================
``sum``     N / D (softmax normalization)                   N / (D + eps)
``none``    N (unnormalized)                                eps unused
``l2``      N / ||N||_2                                     N / sqrt(||N||^2 + eps)
``rms``     N / sqrt(mean(N^2))                             N / sqrt(mean(N^2) + eps)
``layernorm`` (N - mean(N)) / sqrt(var(N)) (biased var)     (N - mean) / sqrt(var + eps)
``count``   N / n, n = number of visible keys               N / (n + eps)
=========== =============================================== ==================================

``l2``, ``rms`` and ``layernorm`` (no eps, no affine parameters) are invariant to positive scaling,
so Norm(N_t) = Norm(o_t) exactly when D_t > 0 (D7). ``layernorm`` needs d_v >= 2.

Without eps, the scale-invariant modes normalize N rescaled by an exact power of two
(``exact_unit_scale``), so a tiny N (a shifted softmax's numerator) does not square to zero.
A row with no visible key (n = 0) returns zeros with finite gradients. Otherwise the IEEE result
is returned (a vanishing D or ||N|| gives inf/nan) unless ``eps`` is given; no eps is ever added
silently.
"""

from __future__ import annotations

import torch

from verify.attention._validate import check_choice, check_real
from verify.spec.vocabulary import DENOMINATORS

#: the denominator modes of D7


def l2_normalize(x: torch.Tensor, *, eps: float = 0.0) -> torch.Tensor:
    """x / sqrt(sum_i x_i^2 + eps) over the last axis; shape and dtype of ``x`` (D7)."""
    return x / torch.sqrt(x.square().sum(-1, keepdim=True) + eps)


def rms_normalize(x: torch.Tensor, *, eps: float = 0.0) -> torch.Tensor:
    """RMSNorm without affine weight: x / sqrt(mean_i x_i^2 + eps) over the last axis (D7)."""
    return x / torch.sqrt(x.square().mean(-1, keepdim=True) + eps)


def layer_normalize(x: torch.Tensor, *, eps: float = 0.0) -> torch.Tensor:
    """LayerNorm without affine parameters over the last axis (biased variance, D7).

    (x - mean(x)) / sqrt(var(x) + eps); needs x.shape[-1] >= 2 to be non-degenerate.
    """
    centred = x - x.mean(-1, keepdim=True)
    return centred / torch.sqrt(centred.square().mean(-1, keepdim=True) + eps)


def exact_unit_scale(x: torch.Tensor) -> torch.Tensor:
    """``x`` times a power of two per row (last axis) that brings max|x| into [1/2, 1).

    Exact (no rounding unless an element is 2^126 below its row's largest), so a
    scale-invariant normalization of the result equals that of ``x`` in exact arithmetic and
    rounds the same way, and its squares cannot underflow: the numerator of a shifted softmax
    can be ~1e-37, whose square is 0 in float32 and made N / ||N|| = inf. The power is applied
    in two halves so that neither factor overflows; a zero row is left unchanged. The factor
    is a constant for autograd (the normalizations are scale-invariant).
    """
    amax = x.detach().abs().amax(-1, keepdim=True)
    _, e = torch.frexp(amax)  # amax = m 2^e, m in [1/2, 1); amax = 0 gives e = 0
    half = torch.div(-e, 2, rounding_mode="floor")
    one = torch.ones_like(amax)
    return x * torch.ldexp(one, half) * torch.ldexp(one, -e - half)


def check_denominator(denominator: object, d_v: int) -> str:
    """Validate a denominator mode (and d_v >= 2 for ``layernorm``)."""
    check_choice("denominator", denominator, DENOMINATORS)
    if denominator == "layernorm" and d_v < 2:
        raise ValueError(
            f"denominator: 'layernorm' needs value dimension d_v >= 2 (D7), got d_v = {d_v}"
        )
    return denominator


def check_eps(eps: object) -> float:
    return check_real("eps", eps, minimum=0.0)


def apply_denominator(
    numerator: torch.Tensor,
    denominator: torch.Tensor,
    count: torch.Tensor,
    *,
    mode: str,
    eps: float = 0.0,
    log_shift: torch.Tensor | None = None,
) -> torch.Tensor:
    """The attention output from numerator, denominator and visible-key count (D7).

    Args:
        numerator: N, shape (..., d_v), float.
        denominator: D, shape (...), same dtype.
        count: number of visible keys n, shape (...), same dtype (0 marks an empty row).
        mode: one of ``DENOMINATORS``.
        eps: >= 0, see the module table; 0 gives the IEEE result.
        log_shift: optional m of shape (...): the true N and D are e^m times the ones given
            (softmax's max-subtraction, D6). Every mode is evaluated on the true N, D exactly:
            scale-invariant modes ignore the shift, eps is rescaled by e^{-m} or e^{-2m}.

    Returns:
        Tensor of shape (..., d_v); rows with ``count == 0`` are exactly zero.

    Raises:
        ValueError, TypeError: bad ``mode`` or ``eps``.
    """
    check_choice("mode", mode, DENOMINATORS)
    eps = check_real("eps", eps, minimum=0.0)
    empty = count == 0
    if not bool(empty.any()):  # no empty row: skip the guards (same values)
        empty = None
    e1 = None if empty is None else empty[..., None]
    if mode in ("l2", "rms", "layernorm"):
        # a stand-in with non-zero norm and variance on empty rows keeps gradients finite
        one_hot = torch.zeros(numerator.shape[-1], dtype=numerator.dtype, device=numerator.device)
        one_hot[0] = 1.0
        safe = numerator if e1 is None else torch.where(e1, one_hot, numerator)
        eps_eff = eps
        if eps != 0.0 and log_shift is not None:
            eps_eff = eps * torch.exp(-2.0 * log_shift)[..., None]
        fn = {"l2": l2_normalize, "rms": rms_normalize, "layernorm": layer_normalize}[mode]
        if eps == 0.0:  # scale-invariant: normalize an exactly rescaled N (no underflow)
            safe = exact_unit_scale(safe)
        out = fn(safe, eps=eps_eff)
    elif mode == "sum":
        d = denominator
        if eps != 0.0:
            d = d + (eps if log_shift is None else eps * torch.exp(-log_shift))
        out = (
            numerator
            / (d if empty is None else torch.where(empty, torch.ones_like(d), d))[..., None]
        )
    elif mode == "count":
        n = count + eps if eps != 0.0 else count
        scaled = numerator if log_shift is None else numerator * torch.exp(log_shift)[..., None]
        out = (
            scaled / (n if empty is None else torch.where(empty, torch.ones_like(n), n))[..., None]
        )
    else:  # none
        out = numerator if log_shift is None else numerator * torch.exp(log_shift)[..., None]
    return out if e1 is None else torch.where(e1, torch.zeros_like(out), out)
