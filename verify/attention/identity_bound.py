"""Identity (a)'s rounding bound for normalized Taylor-kernel attention (D21, D19, D10).

D21 (``derivations.gradient_identities``): for normalized weights sum_s dV_s = sum_t dO_t. For
softmax the residual's bound is ``verify.exact.gradient_identities.identity_bounds``; here it
is bounded for kernel attention with a Taylor kernel (``taylor:N``, ``linear:taylor:N``),
float32/float64, through D19's backward bound (``verify.attention.reverse_bound``) and D10's
forward bound of the denominator.
"""

from __future__ import annotations

import numpy as np

from derivations import rounding as d10
from verify.exact.gradient_identities import _U64, _f64, _sum_keys
from verify.spec.kernel import taylor_order

#: the kernel claims with a bound here besides softmax
KERNEL_IDENTITY_MAPS = ("taylor:N", "linear:taylor:N")


def kernel_feature_map(kernel: str) -> str | None:
    """D19's ``taylor:N`` for a Taylor kernel claim (``taylor:N``, ``linear:taylor:N``), or None:
    no bound here."""
    name = kernel.removeprefix("linear:")
    return name if taylor_order(name) is not None else None


def kernel_denominator_bounds(kernel, q, k, *, dtype: str, causal: bool, scale: float):
    """(l, e), each (B, H, T) float64: D_t >= l_t for the exact denominator and |D_hat_t - D_t|
    <= e_t for one computed in ``dtype`` by any form (D10's forward bound with v = 1 and no
    denominator, which adds the float64 reference's own error), l = D64 - e.

    Raises:
        ValueError: a kernel or dtype without a backward bound here; a row whose denominator is
            not above twice its rounding bound (the division's error is then not bounded, and
            a kernel without eps may return NaN there).
    """
    import torch

    from verify.exact.errors import attention_error_bound, float64_reference

    if kernel_feature_map(kernel) is None:
        raise ValueError(f"kernel: expected one of {KERNEL_IDENTITY_MAPS}, got {kernel!r}")
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype: expected float32 or float64 (D19), got {dtype!r}")
    qt, kt = (torch.as_tensor(_f64(t, n)) for t, n in zip((q, k), ("q", "k")))
    ones = torch.ones(*kt.shape[:-1], 1, dtype=torch.float64)
    opts = dict(causal=causal, scale=scale, denominator="none")
    e = attention_error_bound(kernel, qt, kt, ones, dtype=dtype, exact=None, form="any",
                              **opts).bound[..., 0]  # fmt: skip
    low = float64_reference(kernel, qt, kt, ones, **opts)[..., 0] - e
    if not bool((low > e).all()):
        raise ValueError("q, k: a row's denominator is not above twice its rounding bound")
    return low, e


def kernel_identity_bound(kernel, q, k, v, g, dv, *, dtype: str, causal: bool = False,
                          scale: float, denominators=None) -> np.ndarray:  # fmt: skip
    """Derived bound on identity (a)'s residual, |sum_s dV_hat_s - sum_t dO_t|, for normalized
    kernel attention o_t = N_t / D_t (sum denominator, no eps) with a Taylor kernel (D21 with
    D19's backward bound and D10's forward bound of the denominator).

    For every form the value gradient is dV_s = sum_t w_ts gN_t with gN_t = dO_t / D_t (D does
    not depend on v). A backward computes gN_hat_t = dO_t / D_hat_t with one rounding (a
    division) or two (a reciprocal, then a product), from a computed denominator with
    |D_hat_t - D_t| <= e_t (the forward bound of D: ``attention_error_bound`` with v = 1 and no
    denominator, any form). With D_t >= l_t = D64_t - e_t > e_t and r_t = e_t / l_t, D / D_hat
    lies in [1 / (1 + r), 1 / (1 - r)], so |gN_hat_t - gN_t| <= rho_t |dO_t| / D_t with
    rho_t = (1 + u)^2 / (1 - r_t) - 1 (the larger side). Then

        |dV_hat_s - dV_s| <= E_s + sum_t |w_ts| rho_t |dO_t| / D_t,

    E the D19 bound of the reverse pass given the computed cotangent (|gN_hat_t| <= |dO_t|
    (1 + rho_t) / l_t; both bases), and summed over s with |w_ts| <= K0_ts (D19's majorant
    kernel at |q|.|k|):

        |residual| <= sum_s E_s + sum_t rho_t |dO_t| sum_s K0_ts / l_t
                      + gamma_S(u_64) sum_s |dV_hat_s| + gamma_T(u_64) sum_t |dO_t|,

    the last two terms the float64 evaluation of the sums (as for softmax); E is D19's bound of
    one evaluation (the identity is exact: no reference evaluation is added), and the whole
    float64 evaluation of this bound (non-negative terms only) is covered by a factor
    1 + gamma_{S + T + d + 2N + 8}(u_64).

    Args:
        kernel: ``taylor:N`` or ``linear:taylor:N``.
        q (B, H, T, d), k (B, H, S, d), v (B, H, S, d_v), g (B, H, T, d_v): what the kernel
            received; dv (B, H, S, d_v) what it returned. scale: the resolved scale c.
        dtype: ``float32`` or ``float64`` (D19's arithmetic). causal: s <= t (needs T == S).
        denominators: (l, e) of :func:`kernel_denominator_bounds` on the same arguments, or
            None to compute them.

    Returns:
        (B, H, d_v) float64 bound.

    Raises:
        ValueError: a kernel or dtype without a bound here; a row whose denominator is not
            above twice its error bound (the division's error is then not bounded).
    """
    import torch

    from verify.attention._kernels import taylor_kernel
    from verify.attention.reverse_bound import gradient_bound

    fmap = kernel_feature_map(kernel)
    qt, kt, vt, gt = (torch.as_tensor(_f64(t, n)) for t, n in
                      zip((q, k, v, g), ("q", "k", "v", "g")))  # fmt: skip
    if denominators is None:
        denominators = kernel_denominator_bounds(kernel, qt, kt, dtype=dtype, causal=causal,
                                                 scale=scale)  # fmt: skip
    low, e = denominators
    r = e / low
    u = d10.unit_roundoff(dtype)
    rho = (r + 2.0 * u + u * u) / (1.0 - r)  # (1 + u)^2 / (1 - r) - 1, without cancellation
    gabs = gt.abs()
    gN = gabs * torch.as_tensor((1.0 + rho) / low)[..., None]
    ga = torch.cat([gN, torch.zeros_like(gN[..., :1])], -1)
    va = torch.cat([vt, torch.ones_like(vt[..., :1])], -1)
    E = None
    for basis in ("symmetric", "tensor"):
        _, _, bva = gradient_bound(fmap, qt, kt, va, ga, scale=scale, causal=causal,
                                   dtype=dtype, basis=basis, reference=None)  # fmt: skip
        E = bva[..., :-1] if E is None else torch.maximum(E, bva[..., :-1])
    E = E.numpy()
    T, S, d = qt.shape[-2], kt.shape[-2], qt.shape[-1]
    order = taylor_order(fmap)
    K0 = taylor_kernel(scale * (qt.abs() @ kt.abs().transpose(-1, -2)), order)  # >= |w|
    if causal:
        K0 = K0 * torch.ones(T, S, dtype=torch.float64).tril()
    weight_term = ((rho / low) * K0.sum(-1).numpy())[..., None] * _f64(gabs, "g")
    dv64 = np.abs(_f64(dv, "dv"))
    total = (
        _sum_keys(E) + weight_term.sum(-2) + d10.gamma(max(S, 1), _U64) * _sum_keys(dv64)
        + d10.gamma(max(T, 1), _U64) * np.abs(_f64(g, "g")).sum(-2)
    )  # fmt: skip
    # every term above is a float64 sum of products of non-negative numbers: at most
    # S + T + d + 2N + 8 roundings on any path
    return (1.0 + d10.gamma(S + T + d + 2 * order + 8, _U64)) * total
