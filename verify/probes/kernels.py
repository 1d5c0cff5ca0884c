"""The candidate kernels and the measurement of the weights against one of them.

The family: exp, kappa_0..kappa_8 (D1), kernel linear attention with the identity, elu+1 and
relu maps (D3), each at the scale conventions of :data:`CONVENTIONS`. :func:`read_ident` reads
the weights at one head dimension; :func:`candidate_ratio` is the largest observed/bound of the
read weights against one candidate (the D10 bound, through :func:`~verify.probes.runner.ratio_bound`
for normalized variants).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from verify.probes.runner import BLACK_BOX_EXP, Runner, grid, ratio_bound, value_identity
from verify.spec.kernel import taylor_order
from verify.spec.visibility import visible

#: score scale conventions c(d) told apart by varying d
CONVENTIONS: dict[str, Callable[[int], float]] = {
    "1/sqrt(d)": lambda d: d**-0.5,
    "1/d": lambda d: 1.0 / d,
    "d^-1/4": lambda d: d**-0.25,
    "1": lambda d: 1.0,
}
MAX_TAYLOR_ORDER = 8
#: the kernel family: exp, kappa_0..kappa_8 (D1), identity (kappa(x) = x), elu+1, relu (D3)
FAMILY = (
    ("softmax",)
    + tuple(f"taylor:{n}" for n in range(MAX_TAYLOR_ORDER + 1))
    + ("linear:identity", "linear:elu1", "linear:relu")
)
ELEMENTWISE = ("linear:elu1", "linear:relu")
#: candidates re-tested at float32 accuracy when none fits the output precision's bound
FALLBACK_CANDIDATES = 5

IDENT_DIMS = (4, 2, 8)
N_KEYS = 12  # keys read by kernel identification (key 0 is the zero vector: kappa(q.0) = kappa(0))


# -- kernel identification -------------------------------------------------------------------
def kappa_taylor(n: int, x: np.ndarray) -> np.ndarray:
    from derivations.feature_maps import taylor_coefficient

    out = np.zeros_like(x)
    for j in range(n, -1, -1):  # Horner
        out = out * x + float(taylor_coefficient(j))
    return out


def _elu1(t: np.ndarray) -> np.ndarray:
    return np.where(t > 0, t + 1.0, np.exp(np.minimum(t, 0.0)))


def kernel_values(kernel: str, c: float, q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Unnormalized kernel matrix (T, S) in float64 for a member of ``FAMILY`` at scale c.

    exp-type (``softmax``, ``taylor:N``): kappa(c q.k); ``linear:identity``: c q.k; the
    element-wise maps: phi(c q) . phi(k) (D1, D3; the scale convention of
    ``verify.spec.kernel.Kernel.default_scale``).

    Args:
        q: (T, d), k: (S, d) float64 arrays. c: the scale (> 0).

    Raises:
        ValueError: a kernel outside ``FAMILY``.
    """
    x = c * (q @ k.T)
    if kernel == "softmax":
        return np.exp(x)
    n = taylor_order(kernel)
    if n is not None:
        return kappa_taylor(n, x)
    if kernel == "linear:identity":
        return x
    if kernel == "linear:relu":
        return np.maximum(c * q, 0.0) @ np.maximum(k, 0.0).T
    if kernel == "linear:elu1":
        return _elu1(c * q) @ _elu1(k).T
    raise ValueError(f"kernel: expected one of {FAMILY}, got {kernel!r}")


def scale_free(kernel: str, normalized: bool) -> bool:
    """Kernels whose normalized weights do not depend on the scale."""
    return kernel == "taylor:0" or (normalized and kernel in ("linear:identity", "linear:relu"))


@dataclass
class Ident:
    """Inputs and measured weights of one identification read at head dimension d."""

    d: int
    q: Any  # (1, 1, T, d) float64 torch
    k: Any
    v: Any  # V = identity on the first N_KEYS keys
    causal: bool
    A: np.ndarray  # (n, n) measured weights
    vis: np.ndarray  # (n, n) visible entries
    raw: np.ndarray  # (n, n) raw scores q.k
    window: tuple[int, int] | None = None  # the window the read honours (claimed or found)


def _ident_inputs(run: Runner, d: int, T: int):
    """Queries/keys with raw scores q.k spanning [-4d, 4d] and key 0 = 0 (score 0).

    Row 0's keys are placed at evenly spaced raw scores; other rows see random ones. With
    c in [1/d, 1], the scaled scores reach 4 (c = 1/d) to 4d (c = 1): |x| >= 2 everywhere, where
    kappa_N (N <= 8) and exp differ by far more than rounding (D4).
    """
    import torch

    n = N_KEYS
    R = 4.0 * d
    rn = math.sqrt(R)
    q = torch.randn(n, d, generator=run.gen, dtype=torch.float64)
    q = rn * q / q.norm(dim=-1, keepdim=True)
    q0 = q[0]
    targets = torch.linspace(-R, R, n - 1, dtype=torch.float64)
    w = torch.randn(n - 1, d, generator=run.gen, dtype=torch.float64)
    w = w - (w @ q0)[:, None] * q0 / (q0 @ q0)
    w = 0.25 * rn * w / w.norm(dim=-1, keepdim=True).clamp_min(1e-3)
    k = torch.zeros(n, d, dtype=torch.float64)
    k[1:] = targets[:, None] * q0 / (q0 @ q0) + w
    q, k = run.exact(grid(q)), run.exact(grid(k))
    Q = torch.zeros(1, 1, T, d, dtype=torch.float64)
    K = torch.zeros(1, 1, T, d, dtype=torch.float64)
    Q[0, 0, :n], K[0, 0, :n] = q, k
    return Q, K


def window_visible(n: int, causal: bool, window: tuple[int, int] | None) -> np.ndarray:
    """(n, n) visible pairs of the first n queries and keys of a T = S call, with ``window``
    (FlashAttention's (left, right), D15) when one is claimed or found: a windowed kernel's
    weights outside it are zero, not the kernel's."""
    vis = visible(n, n, causal=causal)
    if window is not None:
        from verify.attention.structure import window_mask

        vis = vis & window_mask(n, n, tuple(window)).numpy()
    return vis


def read_ident(run: Runner, d: int, T: int, causal: bool, notes: list[str], window=None) -> Ident:
    q, k = _ident_inputs(run, d, T)
    n = N_KEYS
    A = run.weights(q, k, causal, n, allow_nonfinite=True)[0, 0, :n]
    vis = window_visible(n, causal, window)
    bad = ~np.isfinite(A).all(axis=-1)
    if bad.any():  # e.g. 0/0 where a signed or vanishing kernel's denominator is zero (IEEE)
        notes.append(f"identification at d = {d}: rows {np.nonzero(bad)[0].tolist()} not finite")
        vis[bad] = False
        A = np.where(bad[:, None], 0.0, A)
    qq, kk = q[0, 0, :n].numpy(), k[0, 0, :n].numpy()
    return Ident(d, q, k, value_identity(T, n), causal, A, vis, qq @ kk.T, window)


def numerator_bound(run: Runner, ident: Ident, kernel: str, c: float, dtype: str):
    """(n, n) D10 bound on the numerator kappa_hat(x_ts) of (kernel, c) for the read rows, or
    None when no bound exists (e.g. gamma_n undefined in a low precision)."""
    from verify.exact import errors

    n = N_KEYS
    k, v = ident.k, ident.v
    if ident.causal:  # rows < n see keys < n only
        k, v = k[..., :n, :], v[..., :n, :]
    try:
        return errors.attention_error_bound(
            kernel,
            ident.q[..., :n, :],
            k,
            v,
            dtype=dtype,
            causal=ident.causal,
            scale=c,
            denominator="none",
            device=run.device,
            exp_library=BLACK_BOX_EXP[run.device],
        ).bound[0, 0]
    except (ValueError, OverflowError):
        return None


def candidate_ratio(
    run: Runner,
    ident: Ident,
    kernel: str,
    c: float,
    normalized: bool,
    bound_dtype: str,
    extra: np.ndarray | None = None,
    ref0: bool = False,
) -> tuple[float, str]:
    """max observed/bound of the measured weights against (kernel, c); inf when no bound
    exists. Normalized variants: ratios to a reference key per row (:func:`ratio_bound`);
    numerator-only variants: the weights themselves. ``extra`` adds an allowance per element
    (fitted scales); ``ref0`` uses key 0 as the reference of every row."""
    from derivations import rounding as d10

    n = N_KEYS
    b = numerator_bound(run, ident, kernel, c, bound_dtype)
    if b is None:
        return math.inf, "no bound"
    W = kernel_values(kernel, c, ident.q[0, 0, :n].numpy(), ident.k[0, 0, :n].numpy())
    if extra is not None:
        b = b + extra
    A = ident.A
    worst, where = 0.0, ""
    u = d10.unit_roundoff(bound_dtype)
    eta = d10.underflow_abs_error(run.bound_dtype)  # subnormal outputs of that precision
    checked = 0
    for t in range(n):
        cols = np.nonzero(ident.vis[t])[0]
        if normalized:
            if len(cols) < 2:
                continue
            ref = 0 if ref0 else int(cols[np.argmax(np.abs(W[t, cols]))])
            if not np.any(W[t, cols]) and not np.any(b[t, cols]):
                return math.inf, f"row {t}: the candidate has no weight (0/0) but the row is finite"
            if A[t, ref] == 0:
                return math.inf, f"row {t}: measured reference weight is 0"
            j_ref = int(np.where(cols == ref)[0][0])
            beta = ratio_bound(W[t, cols], b[t, cols], j_ref, u, eta, A[t, ref])
            if not np.isfinite(beta).all():
                continue  # the reference's bound exceeds it: the row carries no information
            obs = np.abs(A[t, cols] / A[t, ref] - W[t, cols] / W[t, ref])
        else:
            beta, obs = b[t, cols], np.abs(A[t, cols] - W[t, cols])
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            r = np.where(beta > 0, obs / beta, np.where(obs == 0, 0.0, np.inf))
        checked += len(cols)
        j = int(np.argmax(r))
        if r[j] > worst or not where:
            worst, where = float(r[j]), f"row {t}, key {int(cols[j])}"
    if not checked:
        return math.inf, "no row carries information"
    return worst, where
