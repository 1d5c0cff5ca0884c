"""Taylor-N attention: softmax's exp replaced by kappa_N(x) = sum_{n<=N} x^n/n! (D1-D4).

Three forms that agree to rounding (D2):
- ``parallel``: the masked T x S matrix kappa_N(c q.k) (Horner on the scores; no features);
- ``recurrent``: the Taylor feature map (D1) with state S_t = S_{t-1} + phi(k_t) v_t^T,
  z_t = z_{t-1} + phi(k_t), one token at a time (the reference for the step API);
- ``chunked``: exact within-chunk weights kappa_N on the scores plus the state before the chunk
  read through the feature map; chunk states by a cumulative sum over chunks.

The recurrent and chunked forms first rescale (q, k) to (lam q, k / lam) per batch and head, with
lam a power of two balancing max|q| and max|k| (exact; every order block is homogeneous), so the
features stay representable whenever the scores are. The streaming state API cannot do this (its
state fixes the coordinates): there, |sqrt(c) x|^N must be representable.
"""

from __future__ import annotations

import torch

from verify.attention import _scan, reverse
from verify.attention._kernels import resolve_kernel, taylor_kernel
from verify.attention._validate import check_choice, check_int, resolve_scale
from verify.attention.feature_maps import FEATURE_BUDGET
from verify.spec.vocabulary import BASES

__all__ = ["taylor_attention", "taylor_kernel"]


def taylor_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    order: int,
    causal: bool = False,
    scale: float | None = None,
    attn_mask: torch.Tensor | None = None,
    denominator: str = "sum",
    form: str = "parallel",
    basis: str = "symmetric",
    chunk_size: int = 64,
    eps: float = 0.0,
    feature_budget: int = FEATURE_BUDGET,
    decay=None,
    backward: str = "reverse",
) -> torch.Tensor:
    """Taylor-N attention o_t = sum_s kappa_N(x_ts) v_s / sum_s kappa_N(x_ts), x_ts = c q_t.k_s.

    Args:
        q: (B, H, T, d); k: (B, H, S, d); v: (B, H, S, d_v). One float dtype, one device.
        order: N >= 0 (int, bool rejected). Odd N gives a signed kernel whose denominator can
            vanish (D4): the IEEE result is returned unless ``eps`` is given.
        causal: query t sees key s iff s <= t; requires T == S.
        scale: c, default 1/sqrt(d), finite >= 0; absorbed as sqrt(c) on q and k in feature form.
        attn_mask: bool, True = keep, broadcastable to (B, H, T, S). The recurrent and chunked
            forms accept key-padding masks only (broadcastable to (B, H, 1, S)): a masked key
            never enters the state. Other masks raise ValueError there.
        denominator: one of ``verify.spec.vocabulary.DENOMINATORS`` (D7).
        form: ``parallel`` | ``recurrent`` | ``chunked``. Non-causal recurrent/chunked forms
            build the full-sequence state and every query reads the final state.
        basis: ``symmetric`` (C(n+d-1, n) features per order) or ``tensor`` (d^n); used by the
            recurrent and chunked forms (the parallel form evaluates kappa_N on the scores).
        chunk_size: C >= 1 (chunked form; any C, whether or not it divides T).
        eps: >= 0, see ``norms``; 0 = IEEE result.
        feature_budget: maximum features per token for the recurrent/chunked forms; exceeding
            it raises ValueError before anything is built (``feature_maps.FEATURE_BUDGET``).
        decay: H decays gamma_h in (0, 1] (sequence or 1-D tensor), causal only: key s weighs
            gamma^(t-s) kappa, the decayed RNN S_t = gamma S_{t-1} + phi(k_t) v_t^T in every
            form (D12; gamma = e^(-m) is ALiBi with slope m).
        backward: ``reverse`` (default) or ``autograd``: how the recurrent and chunked forms
            are differentiated. ``reverse``: the reverse-time RNN of D19 with chunk
            checkpoints (``verify.attention.reverse``; O(T / chunk_size) stored states), the
            same forward values bit for bit; ``autograd``: torch autograd through the token
            or chunk loop (O(T) stored states). The parallel form always uses autograd.

    Returns:
        (B, H, T, d_v) in the dtype of q (bf16/fp16 accumulate in float32).

    Raises:
        TypeError, ValueError: any invalid argument (named in the message).
    """
    call = _scan.check_form_call(
        q, k, v, causal, attn_mask, denominator, form, chunk_size, eps, feature_budget, decay,
        backward,
    )  # fmt: skip
    order = check_int("order", order, 0)
    c = resolve_scale(scale, call.dims.d, exp_type=True)
    basis = check_choice("basis", basis, BASES)
    kernel = resolve_kernel(
        f"taylor:{order}",
        name="order",
        d=call.dims.d,
        device=q.device,
        dtype=q.dtype,
        basis=basis,
        feature_budget=feature_budget,
        need_features=call.form != "parallel",
    )
    return _scan.kernel_attention(kernel, q, k, v, call, c=c, scan_fn=reverse.scan_for(call))
