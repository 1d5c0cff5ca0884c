"""Kernel linear attention o_t = phi(q_t)^T S_t / phi(q_t)^T z_t (D3, D9).

S_t = sum_s phi(k_s) v_s^T and z_t = sum_s phi(k_s) over the visible keys (s <= t when causal).
Feature maps: ``identity``, ``elu1``, ``relu``, ``taylor:N`` (symmetric basis, D1), ``favor``
(FAVOR+ positive random features, D9) or a callable (..., d) -> (..., m). Forms as for
``taylor_attention``: parallel (T x S weight matrix), recurrent (token loop), chunked.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from verify.attention import _scan, reverse
from verify.attention._kernels import resolve_kernel
from verify.attention._validate import resolve_scale
from verify.attention.feature_maps import FEATURE_BUDGET

__all__ = ["linear_attention"]


def linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    feature_map: str | Callable[[torch.Tensor], torch.Tensor],
    causal: bool = False,
    scale: float | None = None,
    attn_mask: torch.Tensor | None = None,
    denominator: str = "sum",
    form: str = "parallel",
    chunk_size: int = 64,
    eps: float = 0.0,
    projection: torch.Tensor | None = None,
    num_features: int | None = None,
    orthogonal: bool = True,
    generator: torch.Generator | None = None,
    feature_budget: int = FEATURE_BUDGET,
    decay=None,
    backward: str = "reverse",
) -> torch.Tensor:
    """Kernel linear attention with a named or callable feature map (D3).

    Scale (applied exactly once): for ``taylor:N`` and ``favor`` the score scale c of
    kappa(c q.k), default 1/sqrt(d), absorbed as sqrt(c) on q and k; for ``identity``, ``elu1``,
    ``relu`` and callables a factor on q before the map, default 1: phi(c q).

    Args:
        q: (B, H, T, d); k: (B, H, S, d); v: (B, H, S, d_v). One float dtype, one device.
        feature_map: ``identity`` | ``elu1`` | ``relu`` | ``taylor:N`` | ``favor`` | callable
            mapping (..., d) -> (..., m) that keeps dtype and device (called on the
            accumulation-dtype tensors).
        causal, scale, attn_mask, denominator, form, chunk_size, eps: as ``taylor_attention``
            (signed maps -- identity, odd Taylor -- can give a vanishing denominator: IEEE
            result unless ``eps``; ``sum`` divides by D + eps).
        projection: FAVOR+ directions (m, d) from ``feature_maps.favor_projection``, dtype of q
            (or its accumulation dtype), device of q. Reuse it to apply the same map elsewhere.
        num_features, orthogonal, generator: draw a projection when none is given (FAVOR+
            only); ``generator`` (torch.Generator) is required then; num_features defaults to d.
        feature_budget: Taylor feature budget for the recurrent/chunked forms.
        decay: H decays in (0, 1], causal only: the decayed RNN of D12 (as ``taylor_attention``).
        backward: ``reverse`` (default) | ``autograd``, as ``taylor_attention`` (D19); a callable
            feature map always uses autograd (its parameters need their gradients).

    Returns:
        (B, H, T, d_v) in the dtype of q (bf16/fp16 accumulate in float32).

    Raises:
        TypeError, ValueError: any invalid argument (named in the message).
    """
    call = _scan.check_form_call(
        q, k, v, causal, attn_mask, denominator, form, chunk_size, eps, feature_budget, decay,
        backward,
    )  # fmt: skip
    kernel = resolve_kernel(
        feature_map,
        name="feature_map",
        d=call.dims.d,
        device=q.device,
        dtype=q.dtype,
        projection=projection,
        num_features=num_features,
        orthogonal=orthogonal,
        generator=generator,
        feature_budget=feature_budget,
        need_features=call.form != "parallel",
    )
    c = resolve_scale(scale, call.dims.d, exp_type=kernel.exp_type)
    return _scan.kernel_attention(kernel, q, k, v, call, c=c, scan_fn=reverse.scan_for(call))
