"""Residuals of D21's exact backward identities and their derived rounding bounds.

D21 (``derivations.gradient_identities``): for normalized weights the value gradients sum to
the upstream gradient of the rows that see a key, (a) sum_j dV_j = sum_{i: row i sees a key}
dO_i; for softmax without a softcap the key gradients sum to zero, (b) sum_j dK_j = 0, under
any mask, window, ALiBi or additive bias. With grouped kv heads both sums run over one kv
head's keys, and (a)'s right side over the rows of every query head of its group.

Both identities hold exactly for the exact gradients, so the computed residual is bounded by
the summed elementwise errors of the computed gradients (the triangle inequality) plus the
float64 evaluation of the sums:

    |sum_j dV_hat_j - sum_i dO_i| <= sum_j E_dv_j + gamma_S(u_64) sum_j |dV_hat_j|
                                     + gamma_n(u_64) sum_i |dO_i|,
    |sum_j dK_hat_j|              <= sum_j E_dk_j + gamma_S(u_64) sum_j |dK_hat_j|,

with E_dv, E_dk the D10 backward bounds of ``verify.exact.gradient_bounds`` (they compose the
weights' error e_P of the claimed precision model, dP's and delta's errors, the matrix
products' gamma, GQA's group sums and the output's rounding to the input type) and n the rows
summed. Summed over j, E_dv's weight terms are sum_i (e_P,i + S eta) |dO_i| + gamma_T(u_mma)
sum_j sum_i P_hat_ij |dO_i|: the weights' row-sum error times |dO| plus the products' rounding.
gamma_S(u_64) covers S - 1 additions and the final subtraction (gamma_{n-1} + u(1 +
gamma_{n-1}) <= gamma_n). :func:`identity_bounds` is softmax's (identity (a)) and softmax
without a softcap's (identity (b)); :func:`kernel_identity_bound` bounds identity (a) for the
normalized Taylor and linear (identity, ReLU) kernels in float32/float64 through D19's backward
bound and D10's forward bound of the denominator. Other kernels (elu+1, FAVOR+) and their
low-precision backward have no derived bound here.
"""

from __future__ import annotations

import numpy as np

from derivations import gradient_identities as d21
from derivations import rounding as d10

_U64 = d10.unit_roundoff("float64")


def _sum_keys(x: np.ndarray) -> np.ndarray:
    return x.sum(-2)


def identity_residuals(dk, dv, g, visible, heads: int | None = None) -> dict[str, np.ndarray]:
    """The residuals of D21's identities (a) and (b), evaluated in float64.

    Args:
        dk (B, G, S, d), dv (B, G, S, d_v): the computed key and value gradients (any float
            dtype; cast up exactly). g (B, H, T, d_v): the upstream gradient dO. visible: bool,
            broadcastable to (B, H, T, S), True where query row i sees key j. heads: H (None:
            g's second dimension); G must divide H.

    Returns:
        {"value": (B, G, d_v) sum_j dV_j - sum_{i sees a key} dO_i, "key": (B, G, d)
        sum_j dK_j}.

    Raises:
        ValueError: shapes that do not match, or G not dividing H.
    """
    dk, dv, g = (_f64(t, n) for t, n in zip((dk, dv, g), ("dk", "dv", "g")))
    H = g.shape[1] if heads is None else heads
    if dk.ndim != 4 or dv.ndim != 4 or g.ndim != 4:
        raise ValueError(f"dk, dv, g: expected 4-d arrays, got {dk.shape}, {dv.shape}, {g.shape}")
    G = dv.shape[1]
    if G == 0 or H % G or dk.shape[:3] != dv.shape[:3]:
        raise ValueError(f"dk, dv: expected (B, G, S, .) with G dividing H = {H}, got "
                         f"{dk.shape}, {dv.shape}")  # fmt: skip
    vis = np.broadcast_to(np.asarray(visible, dtype=bool), (*g.shape[:3], dv.shape[2]))
    seen = vis.any(-1)[..., None]  # (B, H, T, 1): row i sees a key
    rows = np.where(seen, g, 0.0).sum(-2)  # (B, H, d_v)
    rows = rows.reshape(g.shape[0], G, H // G, g.shape[-1]).sum(2)
    return {"value": _sum_keys(dv) - rows, "key": _sum_keys(dk)}


def identity_bounds(
    q, k, v, g, dk, dv, *, dtype: str, causal=False, attn_mask=None, scale=None,
    precision: str | None = None, **options,
) -> dict[str, np.ndarray | None]:  # fmt: skip
    """Derived bounds on the residuals of :func:`identity_residuals` for softmax attention
    (module docstring; D21 with D10's backward model).

    Args:
        q (B, H, T, d), k (B, G, S, d), v (B, G, S, d_v), g (B, H, T, d_v): what the kernel
            received. dk, dv: what it returned (the evaluation's rounding scales with them).
        dtype, causal, attn_mask, scale, precision: as
            ``verify.exact.gradient_bounds.gradient_bounds``; options: its device, libraries,
            arithmetic and structure (window, softcap, alibi_slopes, score_bias, enable_gqa).

    Returns:
        {"value": (B, G, d_v), "key": (B, G, d) or None under a softcap (identity (b) does not
        hold there, D21)} float64 bounds.

    Raises:
        ValueError, ModelNotApplicable: as ``gradient_bounds``.
    """
    from verify.exact.gradient_bounds import gradient_bounds

    b = gradient_bounds(q, k, v, g, dtype=dtype, causal=causal, attn_mask=attn_mask,
                        scale=scale, precision=precision, **options)  # fmt: skip
    dk, dv, g = (_f64(t, n) for t, n in zip((dk, dv, g), ("dk", "dv", "g")))
    S = dv.shape[2]
    G, H = dv.shape[1], g.shape[1]
    n_rows = g.shape[2] * (H // G)
    ga = np.abs(g).sum(-2).reshape(g.shape[0], G, H // G, g.shape[-1]).sum(2)
    value = (_sum_keys(b["dv"]) + d10.gamma(max(S, 1), _U64) * _sum_keys(np.abs(dv))
             + d10.gamma(max(n_rows, 1), _U64) * ga)  # fmt: skip
    _, shift_invariant = d21.identity_applies("softmax", bool(options.get("softcap")))
    key = None
    if shift_invariant:
        key = _sum_keys(b["dk"]) + d10.gamma(max(S, 1), _U64) * _sum_keys(np.abs(dk))
    return {"value": value, "key": key}


#: kernels whose identity (a) residual has a derived bound here besides softmax (D19's maps)
KERNEL_IDENTITY_MAPS = ("taylor:N", "linear:identity", "linear:relu")


def kernel_feature_map(kernel: str) -> str | None:
    """D19's feature-map name for a normalized kernel claim, or None without a bound here."""
    from verify.spec.kernel import taylor_order

    if taylor_order(kernel) is not None:
        return kernel
    if kernel in ("linear:identity", "linear:relu"):
        return kernel.split(":", 1)[1]
    if kernel.startswith("linear:") and taylor_order(kernel.split(":", 1)[1]) is not None:
        return kernel.split(":", 1)[1]
    return None


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
                          scale: float) -> np.ndarray:  # fmt: skip
    """Derived bound on identity (a)'s residual, |sum_s dV_hat_s - sum_t dO_t|, for normalized
    kernel attention o_t = N_t / D_t (sum denominator, no eps) with a Taylor or linear kernel
    (D21 with D19's backward bound and D10's forward bound of the denominator).

    For every form the value gradient is dV_s = sum_t w_ts gN_t with gN_t = dO_t / D_t (D does
    not depend on v). A backward computes gN_hat_t = fl(dO_t / D_hat_t) from a computed
    denominator with |D_hat_t - D_t| <= e_t (the forward bound of D: ``attention_error_bound``
    with v = 1 and no denominator, any form), so with D_t >= l_t = D64_t - e_t > e_t and
    r_t = e_t / l_t, |gN_hat_t - gN_t| <= rho_t |dO_t| / D_t, rho_t = (u + r_t) / (1 - r_t)
    ((1 + u) D / D_hat - 1 <= (1 + u) / (1 - r) - 1). Then

        |dV_hat_s - dV_s| <= E_s + sum_t |w_ts| rho_t |dO_t| / D_t,

    E the D19 bound of the reverse pass given the computed cotangent (|gN_hat_t| <= |dO_t|
    (1 + rho_t) / l_t; both bases), and summed over s with |w_ts| <= K0_ts (D19's majorant
    kernel at |q|.|k|):

        |residual| <= sum_s E_s + sum_t rho_t |dO_t| sum_s K0_ts / l_t
                      + gamma_S(u_64) sum_s |dV_hat_s| + gamma_T(u_64) sum_t |dO_t|,

    the last two terms the float64 evaluation of the sums (as for softmax), the second's own
    float64 evaluation covered by a factor 1 + gamma_{S + d + 2N + 4}(u_64).

    Args:
        kernel: ``taylor:N``, ``linear:identity``, ``linear:relu`` or ``linear:taylor:N``.
        q (B, H, T, d), k (B, H, S, d), v (B, H, S, d_v), g (B, H, T, d_v): what the kernel
            received; dv (B, H, S, d_v) what it returned. scale: the resolved scale c.
        dtype: ``float32`` or ``float64`` (D19's arithmetic). causal: s <= t (needs T == S).

    Returns:
        (B, H, d_v) float64 bound.

    Raises:
        ValueError: a kernel or dtype without a bound here; a row whose denominator is not
            above twice its error bound (the division's error is then not bounded).
    """
    import torch

    from verify.attention.reverse_bound import gradient_bound

    fmap = kernel_feature_map(kernel)
    qt, kt, vt, gt = (torch.as_tensor(_f64(t, n)) for t, n in
                      zip((q, k, v, g), ("q", "k", "v", "g")))  # fmt: skip
    low, e = kernel_denominator_bounds(kernel, qt, kt, dtype=dtype, causal=causal, scale=scale)
    r = e / low
    rho = (d10.unit_roundoff(dtype) + r) / (1.0 - r)  # (B, H, T)
    gabs = gt.abs()
    gN = gabs * torch.as_tensor((1.0 + rho) / low)[..., None]
    ga = torch.cat([gN, torch.zeros_like(gN[..., :1])], -1)
    va = torch.cat([vt, torch.ones_like(vt[..., :1])], -1)
    E = None
    for basis in ("symmetric", "tensor"):
        _, _, bva = gradient_bound(fmap, qt, kt, va, ga, scale=scale, causal=causal,
                                   dtype=dtype, basis=basis)  # fmt: skip
        E = bva[..., :-1] if E is None else torch.maximum(E, bva[..., :-1])
    E = E.numpy()
    from verify.attention._kernels import taylor_kernel
    from verify.spec.kernel import taylor_order

    T, S, d = qt.shape[-2], kt.shape[-2], qt.shape[-1]
    X = scale * (qt.abs() @ kt.abs().transpose(-1, -2))
    order = taylor_order(fmap)
    K0 = taylor_kernel(X, order) if order is not None else X
    if causal:
        K0 = K0 * torch.ones(T, S, dtype=torch.float64).tril()
    own = 1.0 + d10.gamma(S + d + 2 * (order or 1) + 4, _U64)
    weight_term = own * ((rho / low) * K0.sum(-1).numpy())[..., None] * _f64(gabs, "g")
    dv64 = np.abs(_f64(dv, "dv"))
    return (
        _sum_keys(E) + weight_term.sum(-2) + d10.gamma(max(S, 1), _U64) * _sum_keys(dv64)
        + d10.gamma(max(T, 1), _U64) * np.abs(_f64(g, "g")).sum(-2)
    )  # fmt: skip


def visibility(q, k, *, causal=False, attn_mask=None, **structure) -> np.ndarray:
    """Which key each query row sees, (B, H, T, S) bool, under the mask, the causal flag and
    the window of ``structure`` (the visibility ``verify.exact.errors`` states bounds on; the
    other structural keywords do not hide keys).

    Raises:
        ValueError: as ``verify.exact.gradient_bounds.gradient_bounds``.
    """
    from verify.exact.errors import _setup
    from verify.exact.gradient_bounds import _check_structure

    structure = _check_structure(structure)
    qn, kn = _f64(q, "q"), _f64(k, "k")
    st = _setup(
        "softmax", qn, kn, kn[..., :1], causal=causal, attn_mask=attn_mask, scale=None,
        denominator="sum", eps=0.0, projection=None, form="parallel", basis=None, device="cpu",
        exp_library=None, div_library=None, **structure,
    )  # fmt: skip
    return np.broadcast_to(st["vis"], (*qn.shape[:3], kn.shape[2])).copy()


def _f64(t, name: str) -> np.ndarray:
    if hasattr(t, "detach"):
        import torch

        return t.detach().cpu().to(torch.float64).numpy()
    try:
        return np.asarray(t, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name}: expected a tensor or array, got {type(t).__name__}") from exc
