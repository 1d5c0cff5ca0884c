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
without a softcap's (identity (b)); ``verify.attention.identity_bound`` bounds identity (a) for
the normalized Taylor kernels through D19's backward bound (it stands on the attention layer).
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
