"""Element-wise rounding bounds of kernel-attention gradients, any form (D19, D10).

``gradient_bound`` bounds |computed - exact| of dq, dk and dva for the function
(q, k, va) -> [N_t; D_t] = sum_s w_ts va_s (the output of ``_scan.scan`` and of the parallel
form before the denominator mode), given the cotangent ga = dL/d[N; D]: the relative
coefficients of ``derivations.reverse_rnn`` (the forward feature-form bound of D10 with the
reverse sums' term counts; the score path for Taylor kernels) times the majorant, the exact
gradient at absolute values:

    M_dq[t, i] = c sum_s K1_ts P_ts |k_si|,   M_dk[s, i] = c (1 + delta) sum_t K1_ts P_ts |q_ti|,
    M_dva[s, j] = sum_t K0_ts |ga_tj|,        P_ts = |ga_t| . |va_s|,

with X_ts = c (1 + delta) |q_t| . |k_s|, K0 = kappa_N(X), K1 = kappa_{N-1}(X) for ``taylor:N``
(``derivations.reverse_rnn`` verifies sum_alpha |d_i phi_alpha(q)||phi_alpha(k)| = c |k_i|
kappa_{N-1}(c |q|.|k|)), K0 = X, K1 = 1 for ``identity`` and ``relu``, times gamma^(t-s) (D12)
and the causal mask. ``reference``: the bound of a second evaluation (e.g. float64 autograd of
the parallel form) is added, as D10 adds a reference's own error.
"""

from __future__ import annotations

import numpy as np
import torch

from derivations import reverse_rnn as d19
from derivations.rounding import gamma, unit_roundoff
from verify.attention._kernels import taylor_kernel
from verify.spec.kernel import taylor_order

#: feature maps with a derived gradient bound here
BOUNDED_MAPS = ("taylor:N", "identity", "relu")


def _rel(feature_map, d, d_v, n, u, basis, lag):
    order = taylor_order(feature_map)
    if order is not None:
        return d19.taylor_gradient_relative_bounds(order, d, d_v, n, u, basis=basis, max_lag=lag)
    # phi(c q) and phi(k): one rounding (the scale product) per query feature, exact otherwise;
    # the Jacobian c diag(phi') adds one product
    return d19.feature_gradient_relative_bounds(u, d, d_v, n, u, jacobian_additions=1, max_lag=lag)


def _rows(feature_map, d, d_v, counts, lags, dtypes, basis):
    """(rel_qk, rel_v) per row, summed over the evaluations in ``dtypes``."""
    qk, v = np.zeros(len(counts)), np.zeros(len(counts))
    for i, (n, lag) in enumerate(zip(counts, lags)):
        for dt in dtypes:
            a, b = _rel(feature_map, d, d_v, max(int(n), 1), unit_roundoff(dt), basis, lag)
            qk[i] += a
            v[i] += b
    return qk, v


def gradient_bound(
    feature_map: str,
    q: torch.Tensor,
    k: torch.Tensor,
    va: torch.Tensor,
    ga: torch.Tensor,
    *,
    scale: float,
    causal: bool,
    dtype: str,
    reference: str | None = "float64",
    basis: str = "symmetric",
    decay=None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Bounds on |dq - dq_exact|, |dk - dk_exact|, |dva - dva_exact| (D19), float64 tensors.

    Args:
        feature_map: ``taylor:N`` | ``identity`` | ``relu`` (``BOUNDED_MAPS``).
        q: (B, H, T, d); k: (B, H, S, d); va: (B, H, S, d_v + 1) augmented values (ones
            column last); ga: (B, H, T, d_v + 1) the cotangent of [N; D]. Any float dtype (the
            values as the evaluations saw them).
        scale: the resolved scale c (exp-type: kappa(c q.k); element-wise: phi(c q)).
        causal: s <= t only (needs T == S).
        dtype: the evaluated arithmetic (``float64`` | ``float32``).
        reference: a second evaluation whose bound is added (None: bound of one evaluation).
        basis: Taylor basis of the feature forms.
        decay: H decays (D12), causal only, or None.

    Returns:
        (bound_dq (B, H, T, d), bound_dk (B, H, S, d), bound_dva (B, H, S, d_v + 1)), float64.

    Raises:
        ValueError: a feature map without a bound here, or causal with T != S.
    """
    order = taylor_order(feature_map)
    if order is None and feature_map not in ("identity", "relu"):
        raise ValueError(f"feature_map: expected one of {BOUNDED_MAPS}, got {feature_map!r}")
    qa, ka = q.detach().double().abs(), k.detach().double().abs()
    vabs, gabs = va.detach().double().abs(), ga.detach().double().abs()
    T, S, d, d_v = qa.shape[-2], ka.shape[-2], qa.shape[-1], va.shape[-1] - 1
    if causal and T != S:
        raise ValueError(f"q: causal needs T == S, got T = {T}, S = {S}")
    delta = gamma(d + d19.SCORE_ROUNDINGS, unit_roundoff(dtype)) if order is not None else 0.0
    X = (scale * (1.0 + delta)) * (qa @ ka.transpose(-1, -2))
    if order is not None:
        K0 = taylor_kernel(X, order)
        K1 = taylor_kernel(X, order - 1) if order > 0 else torch.zeros_like(X)
    else:
        K0, K1 = X, torch.ones_like(X)
    t_idx, s_idx = torch.arange(T)[:, None], torch.arange(S)[None, :]
    factor = torch.ones(T, S, dtype=torch.float64)
    if causal:
        factor = (s_idx <= t_idx).double()
    if decay is not None:
        g = torch.as_tensor(decay, dtype=torch.float64)[:, None, None]
        factor = factor * g ** (t_idx - s_idx).clamp(min=0)
    P = gabs @ vabs.transpose(-1, -2)
    W1 = K1 * P * factor
    M_dq = scale * (W1 @ ka)
    M_dk = scale * (1.0 + delta) * (W1.transpose(-1, -2) @ qa)
    M_dva = (K0 * factor).transpose(-1, -2) @ gabs
    dtypes = [dtype] + ([reference] if reference else [])
    n_q = np.arange(1, T + 1) if causal else np.full(T, S)
    n_k = np.arange(T, T - S, -1) if causal else np.full(S, T)
    lag_q = list(range(T)) if decay is not None else [None] * T
    lag_k = list(range(T - 1, T - 1 - S, -1)) if decay is not None else [None] * S
    rq, _ = _rows(feature_map, d, d_v, n_q, lag_q, dtypes, basis)
    rk, rv = _rows(feature_map, d, d_v, n_k, lag_k, dtypes, basis)
    # the majorant's own float64 evaluation: non-negative terms, at most this many roundings
    own = 1.0 + gamma(max(T, S) + d + d_v + 2 * (order or 1) + 10, unit_roundoff("float64"))
    as_col = lambda r: torch.as_tensor(r, dtype=torch.float64)[:, None]  # noqa: E731
    return (
        own * as_col(rq) * M_dq,
        own * as_col(rk) * M_dk,
        own * as_col(rv) * M_dva,
    )
