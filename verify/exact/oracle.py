"""High-precision mpmath references for kernel attention (D1-D4, D7, D10).

The oracle evaluates softmax attention, Taylor-N attention (kernel kappa_N, D1/D2) and kernel
linear attention (D3) in ``mpmath`` at ``dps`` decimal digits (default 50, D10: ">= 50 digits")
and returns an :class:`OracleResult` with the exact output, its float64 value rounded once, and
the conditioning quantities the error model (``verify.errors``) needs.

Inputs are converted exactly: torch tensors of any float dtype are moved to the CPU and cast up to
float64 (exact for bf16/fp16/fp32), numpy float16/32/64 arrays likewise; each float64 becomes an
``mpf`` without rounding. Precision is set with ``mpmath.workdps`` inside each call; the global
mpmath context is never changed.

Conventions (the API contract in the README, mirrored exactly):

- Shapes: q (B, H, T, d), k (B, H, S, d), v (B, H, S, d_v); output (B, H, T, d_v).
- Scores x_ts = c (q_t . k_s). exp-type kernels (``exp``, ``taylor:N``, ``favor``): c = ``scale``,
  default 1/sqrt(d), c >= 0; kappa(x) = e^x, kappa_N(x) = sum_{n<=N} x^n/n!, or the FAVOR+ estimate
  phi(sqrt(c) q) . phi(sqrt(c) k). Element-wise maps (``identity``, ``elu1``, ``relu``) and user
  callables: kappa_ts = phi(a q_t) . phi(k_s) with a = ``scale`` (default 1, any finite real); the
  reported score is then a (q_t . k_s).
- Visibility: ``attn_mask`` (bool, True = keep, broadcastable to (B, H, T, S)) and ``causal``
  (s <= t, needs T == S). A hidden pair contributes exactly nothing.
- Denominators (D7), with n_t the number of visible keys and N_t = sum_s kappa_ts v_s,
  D_t = sum_s kappa_ts: ``sum`` N/(D + eps); ``none`` N; ``l2`` N/sqrt(||N||^2 + eps);
  ``rms`` N/sqrt(mean(N^2) + eps); ``layernorm`` (N - mean N)/sqrt(var N + eps) (biased variance,
  needs d_v >= 2); ``count`` N/(n + eps). A row with n_t = 0 is exactly zero. Otherwise a zero
  divisor gives the IEEE answer: +-inf, or nan for 0/0 (no eps is ever added silently).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from verify.spec.kernel import from_feature_map, parse_name, taylor_order
from verify.spec.visibility import visible
from verify.spec.vocabulary import DENOMINATORS, EPS_MODES, FEATURE_MAPS, one_of

__all__ = [
    "DEFAULT_DPS",
    "MIN_DPS",
    "OracleResult",
    "abs_error",
    "linear_reference",
    "reference",
    "softmax_reference",
    "taylor_reference",
    "to_float64",
    "to_mpf_array",
]

#: default working precision in decimal digits (D10: >= 50 digits)
DEFAULT_DPS = 50
#: smallest accepted precision: well above the 17 digits that pin a float64 down
MIN_DPS = 20


@dataclass(frozen=True, eq=False)
class OracleResult:
    """Exact attention output and the conditioning quantities of D10.

    Arrays of dtype ``object`` hold ``mpmath.mpf`` values accurate to about ``dps`` digits.
    Shapes use B batch, H heads, T queries, S keys, d_v value dimension.

    Attributes:
        exact: (B, H, T, d_v) object -- the output o_t.
        float64: (B, H, T, d_v) float64 -- ``exact`` rounded once to nearest (ties to even),
            never through another float type; +-inf on overflow, nan where ``exact`` is nan.
        scores: (B, H, T, S) object -- x_ts = c (q_t . k_s) at every position, visible or not
            (c: the resolved ``scale``; see the module docstring).
        visible: (B, H, T, S) bool -- mask AND causal.
        kernel_values: (B, H, T, S) object -- kappa_ts at visible positions, exactly 0 elsewhere.
        weights: (B, H, T, S) object -- kappa_ts / (D_t + eps) for ``sum``, kappa_ts / (n_t + eps)
            for ``count``, kappa_ts otherwise (``none``/``l2``/``rms``/``layernorm`` act on the
            numerator); 0 at hidden positions and on empty rows.
        numerator: (B, H, T, d_v) object -- N_t = sum_s kappa_ts v_s.
        denominator: (B, H, T) object -- D_t = sum_s kappa_ts over visible keys (whatever the
            denominator mode), 0 on empty rows.
        abs_denominator: (B, H, T) object -- sum_s |kappa_ts|.
        abs_numerator: (B, H, T, d_v) object -- sum_s |kappa_ts| |v_sj|.
        max_abs_score: (B, H, T) object -- max over visible s of |x_ts|, 0 on empty rows.
        count: (B, H, T) int64 -- n_t, the number of visible keys.
        kernel: ``"exp"``, ``"taylor:N"``, a feature-map name or ``"callable"``.
        denominator_mode: the D7 mode used.
        scale: the resolved scale (mpf).
        eps: the eps used (mpf).
        dps: working precision in decimal digits.
    """

    exact: np.ndarray
    float64: np.ndarray
    scores: np.ndarray
    visible: np.ndarray
    kernel_values: np.ndarray
    weights: np.ndarray
    numerator: np.ndarray
    denominator: np.ndarray
    abs_denominator: np.ndarray
    abs_numerator: np.ndarray
    max_abs_score: np.ndarray
    count: np.ndarray
    kernel: str
    denominator_mode: str
    scale: Any
    eps: Any
    dps: int

    @property
    def shape(self) -> tuple[int, ...]:
        """(B, H, T, d_v), the output shape."""
        return self.exact.shape


# ----------------------------------------------------------------------------- conversion


def _float64_array(x: object, name: str, *, finite: bool = True) -> np.ndarray:
    """``x`` as a float64 numpy array, exactly (no rounding); rejects what cannot be exact."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    if torch is not None and isinstance(x, torch.Tensor):
        if x.is_complex() or not x.is_floating_point():
            raise TypeError(f"{name}: expected a real floating tensor, got dtype {x.dtype}")
        if x.dtype not in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
            raise TypeError(
                f"{name}: expected float64/float32/float16/bfloat16 (exactly representable in "
                f"float64), got {x.dtype}"
            )
        arr = x.detach().to(device="cpu").to(torch.float64).numpy()
    elif isinstance(x, np.ndarray):
        if x.dtype.kind != "f" or x.dtype.itemsize > 8:
            raise TypeError(
                f"{name}: expected a numpy float16/float32/float64 array, got dtype {x.dtype}"
            )
        arr = x.astype(np.float64)  # exact: widening conversion
    else:
        raise TypeError(f"{name}: expected a torch.Tensor or numpy.ndarray, got {type(x).__name__}")
    if finite and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: expected finite values, got inf or nan")
    return arr


def to_mpf_array(x: object, name: str = "x") -> np.ndarray:
    """Exact conversion of a float tensor/array to an object array of ``mpmath.mpf``.

    Args:
        x: torch tensor (float64, float32, float16, bfloat16; any device) or numpy float16/32/64
            array; finite values.
        name: argument name used in error messages.

    Returns:
        Object array of the same shape; every element equals the input value exactly.

    Raises:
        TypeError: not a tensor/array, or a non-float (or wider than float64) dtype.
        ValueError: inf or nan in ``x``.
    """
    import mpmath

    arr = _float64_array(x, name)
    out = np.empty(arr.shape, dtype=object)
    flat = out.reshape(-1)
    # mpf(float) stores the 53-bit mantissa and exponent exactly (no rounding at any precision)
    for i, value in enumerate(arr.reshape(-1).tolist()):
        flat[i] = mpmath.mpf(value)
    return out


def _mpf_to_float(x: Any) -> float:
    """Round an mpf once to the nearest float64 (ties to even), subnormals included.

    ``float(mpf)`` first rounds to 53 bits and then lets ``ldexp`` round again in the subnormal
    range (double rounding); here the exact dyadic value man * 2^exp is divided as Python ints,
    which CPython rounds correctly.
    """
    import mpmath

    x = mpmath.mpf(x)
    if mpmath.isnan(x):
        return math.nan
    if mpmath.isinf(x):
        return math.inf if x > 0 else -math.inf
    sign, man, exp, bc = x._mpf_
    if man == 0:
        return 0.0
    top = exp + bc  # 2^(top-1) <= |x| < 2^top
    if top <= -1075:  # |x| < 2^-1075: below half the smallest subnormal
        value = 0.0
    elif top > 1024:  # |x| >= 2^1024: beyond the overflow threshold
        value = math.inf
    else:
        try:
            value = float(man << exp) if exp >= 0 else man / (1 << -exp)
        except OverflowError:
            value = math.inf
    return -value if sign else value


def to_float64(x: Any) -> Any:
    """Correctly rounded float64 of an mpf (-> float) or an object array of mpf (-> ndarray).

    Each element is rounded once to nearest, ties to even (subnormals and overflow included);
    no intermediate float type is involved.
    """
    if isinstance(x, np.ndarray):
        out = np.empty(x.shape, dtype=np.float64)
        flat = out.reshape(-1)
        for i, value in enumerate(x.reshape(-1).tolist()):
            flat[i] = _mpf_to_float(value)
        return out
    return _mpf_to_float(x)


# ----------------------------------------------------------------------------- validation


def _check_dps(dps: object) -> int:
    if isinstance(dps, bool) or not isinstance(dps, numbers.Integral):
        raise TypeError(f"dps: expected an int >= {MIN_DPS}, got {type(dps).__name__} {dps!r}")
    if dps < MIN_DPS:
        raise ValueError(f"dps: expected an int >= {MIN_DPS}, got {dps}")
    return int(dps)


def _check_real(name: str, value: object, *, minimum: float | None = None) -> Any:
    """A finite real (int, float or mpf; bool rejected) converted exactly to mpf."""
    import mpmath

    if isinstance(value, bool) or not isinstance(value, (numbers.Real, mpmath.mpf)):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__} {value!r}")
    out = mpmath.mpf(value)
    if not mpmath.isfinite(out):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    if minimum is not None and out < minimum:
        raise ValueError(f"{name}: expected a number >= {minimum}, got {value!r}")
    return out


def _check_qkv(q: object, k: object, v: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    arrays = {}
    for name, x in (("q", q), ("k", k), ("v", v)):
        arr = to_mpf_array(x, name)
        if arr.ndim != 4:
            raise ValueError(
                f"{name}: expected 4 dimensions (B, H, seq, dim), got shape {tuple(arr.shape)}"
            )
        if 0 in arr.shape:
            raise ValueError(f"{name}: expected non-empty axes, got shape {tuple(arr.shape)}")
        arrays[name] = arr
    Q, K, V = arrays["q"], arrays["k"], arrays["v"]
    B, H, _, d = Q.shape
    for name, arr in (("k", K), ("v", V)):
        if arr.shape[:2] != (B, H):
            raise ValueError(
                f"{name}: expected batch and heads (B, H) = {(B, H)} (from q), "
                f"got {tuple(arr.shape[:2])}"
            )
    if K.shape[3] != d:
        raise ValueError(f"k: expected head dimension d = {d} (from q), got {K.shape[3]}")
    if V.shape[2] != K.shape[2]:
        raise ValueError(f"v: expected key length S = {K.shape[2]} (from k), got {V.shape[2]}")
    return Q, K, V


def _visibility(attn_mask: object, causal: object, B: int, H: int, T: int, S: int) -> np.ndarray:
    import torch

    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected a bool, got {type(causal).__name__} {causal!r}")
    if causal and T != S:
        raise ValueError(
            f"causal: requires query length T == key length S, got T = {T}, S = {S} "
            "(causal alignment for T != S is a convention the oracle does not choose)"
        )
    if attn_mask is not None:
        if isinstance(attn_mask, torch.Tensor):
            if attn_mask.dtype != torch.bool:
                raise TypeError(
                    f"attn_mask: expected dtype torch.bool (True = keep), got {attn_mask.dtype}"
                )
        elif isinstance(attn_mask, np.ndarray):
            if attn_mask.dtype != np.bool_:
                raise TypeError(
                    f"attn_mask: expected a bool array (True = keep), got dtype {attn_mask.dtype}"
                )
        else:
            raise TypeError(
                f"attn_mask: expected a bool torch.Tensor or numpy array, "
                f"got {type(attn_mask).__name__}"
            )
    return visible(T, S, causal=causal, attn_mask=attn_mask, lead=(B, H), numpy=True)


# ----------------------------------------------------------------------------- kernels


def _taylor_kernel(order: int) -> Callable[[Any], Any]:
    """kappa_N(x) = sum_{n<=N} x^n / n! (D1), coefficients from ``derivations.feature_maps``."""
    import mpmath

    from derivations.feature_maps import taylor_coefficients

    coeffs = [mpmath.mpf(c.numerator) / c.denominator for c in taylor_coefficients(order)]

    def kappa(x: Any) -> Any:
        acc = mpmath.mpf(0)
        for c in reversed(coeffs):  # Horner; exact up to dps rounding
            acc = acc * x + c
        return acc

    return kappa


def _elementwise_map(name: str) -> Callable[[list], list]:
    import mpmath

    if name == "identity":
        return lambda x: list(x)
    if name == "relu":
        return lambda x: [xi if xi > 0 else mpmath.mpf(0) for xi in x]
    # elu(x) + 1: x + 1 for x > 0, e^x otherwise
    return lambda x: [xi + 1 if xi > 0 else mpmath.exp(xi) for xi in x]


def _favor_map(projection: np.ndarray) -> Callable[[list], list]:
    """FAVOR+ positive features phi(x)_i = exp(w_i . x - |x|^2/2) / sqrt(m) (D9)."""
    import mpmath

    rows = [list(r) for r in projection.tolist()]
    inv_sqrt_m = 1 / mpmath.sqrt(len(rows))

    def phi(x: list) -> list:
        half_sq = mpmath.fdot(x, x) / 2
        return [mpmath.exp(mpmath.fdot(w, x) - half_sq) * inv_sqrt_m for w in rows]

    return phi


def _apply_user_map(feature_map: Callable, x: list, name: str) -> list:
    import mpmath

    out = feature_map(x)
    if isinstance(out, (str, bytes)) or not isinstance(out, Sequence | np.ndarray):
        raise TypeError(
            f"{name}: a callable feature map must return a sequence of numbers, "
            f"got {type(out).__name__}"
        )
    try:
        vals = [mpmath.mpf(e) for e in out]
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name}: feature values must be real numbers ({err})") from None
    if not vals:
        raise ValueError(f"{name}: the callable feature map returned no features")
    return vals


# ----------------------------------------------------------------------------- core


def _core(
    q: object,
    k: object,
    v: object,
    *,
    kernel: str,
    feature_map: Callable | str | None,
    projection: object,
    causal: object,
    scale: object,
    attn_mask: object,
    denominator: object,
    eps: object,
    dps: object,
) -> OracleResult:
    import mpmath

    dps = _check_dps(dps)
    if not isinstance(denominator, str):
        raise TypeError(
            f"denominator: expected one of {DENOMINATORS}, got {type(denominator).__name__}"
        )
    if denominator not in DENOMINATORS:
        raise ValueError(f"denominator: expected one of {DENOMINATORS}, got {denominator!r}")

    with mpmath.workdps(dps):
        eps_m = _check_real("eps", eps, minimum=0)
        Q, K, V = _check_qkv(q, k, v)
        B, H, T, d = Q.shape
        S, d_v = V.shape[2], V.shape[3]
        if denominator == "layernorm" and d_v < 2:
            raise ValueError(
                f"denominator: 'layernorm' needs value dimension d_v >= 2 (D7), got d_v = {d_v}"
            )
        visible = _visibility(attn_mask, causal, B, H, T, S)

        # kernel: either a scalar function of the score, or a feature map on vectors
        order = taylor_order(kernel)
        exp_type = kernel in ("exp", "favor") or order is not None
        if scale is None:
            c = 1 / mpmath.sqrt(d) if exp_type else mpmath.mpf(1)
        else:
            c = _check_real("scale", scale, minimum=0 if exp_type else None)
        score_fn = None
        phi_q = phi_k = None
        if kernel == "exp":
            score_fn = mpmath.exp
        elif order is not None:
            score_fn = _taylor_kernel(order)
        else:
            if kernel == "favor":
                P = to_mpf_array(projection, "projection")
                if P.ndim != 2 or P.shape[1] != d or P.shape[0] == 0:
                    raise ValueError(
                        f"projection: expected shape (m, d) with m >= 1 and d = {d}, "
                        f"got {tuple(P.shape)}"
                    )
                phi = _favor_map(P)
                root_c = mpmath.sqrt(c)
                q_factor = k_factor = root_c
            else:
                if kernel == "callable":
                    user = feature_map

                    def phi(x, _user=user):
                        return _apply_user_map(_user, x, "feature_map")
                else:
                    phi = _elementwise_map(kernel)
                q_factor, k_factor = c, mpmath.mpf(1)
            phi_q = [
                [[phi([q_factor * e for e in Q[b, h, t]]) for t in range(T)] for h in range(H)]
                for b in range(B)
            ]
            phi_k = [
                [[phi([k_factor * e for e in K[b, h, s]]) for s in range(S)] for h in range(H)]
                for b in range(B)
            ]
            m = len(phi_q[0][0][0])
            for feats in (phi_q, phi_k):
                for fb in feats:
                    for fh in fb:
                        for f in fh:
                            if len(f) != m:
                                raise ValueError(
                                    "feature_map: expected the same number of features for "
                                    f"every vector, got {m} and {len(f)}"
                                )

        zero = mpmath.mpf(0)
        scores = np.empty((B, H, T, S), dtype=object)
        kv = np.full((B, H, T, S), zero, dtype=object)
        weights = np.full((B, H, T, S), zero, dtype=object)
        numer = np.full((B, H, T, d_v), zero, dtype=object)
        abs_numer = np.full((B, H, T, d_v), zero, dtype=object)
        out = np.full((B, H, T, d_v), zero, dtype=object)
        denom = np.full((B, H, T), zero, dtype=object)
        abs_denom = np.full((B, H, T), zero, dtype=object)
        max_abs = np.full((B, H, T), zero, dtype=object)
        count = visible.sum(axis=-1).astype(np.int64)

        for b in range(B):
            for h in range(H):
                qs = [list(Q[b, h, t]) for t in range(T)]
                ks = [list(K[b, h, s]) for s in range(S)]
                vcols = [list(V[b, h, :, j]) for j in range(d_v)]
                abs_vcols = [[abs(e) for e in col] for col in vcols]
                for t in range(T):
                    vis = [s for s in range(S) if visible[b, h, t, s]]
                    row_scores = [c * mpmath.fdot(qs[t], ks[s]) for s in range(S)]
                    scores[b, h, t, :] = row_scores
                    if not vis:
                        continue  # empty row: zeros everywhere (the API contract, README)
                    if score_fn is not None:
                        kap = {s: score_fn(row_scores[s]) for s in vis}
                    else:
                        kap = {s: mpmath.fdot(phi_q[b][h][t], phi_k[b][h][s]) for s in vis}
                    kvals = [kap[s] for s in vis]
                    abs_k = [abs(x) for x in kvals]
                    D = mpmath.fsum(kvals)
                    N = [mpmath.fdot(kvals, [vcols[j][s] for s in vis]) for j in range(d_v)]
                    denom[b, h, t] = D
                    abs_denom[b, h, t] = mpmath.fsum(abs_k)
                    max_abs[b, h, t] = max(abs(row_scores[s]) for s in vis)
                    for j in range(d_v):
                        numer[b, h, t, j] = N[j]
                        abs_numer[b, h, t, j] = mpmath.fdot(abs_k, [abs_vcols[j][s] for s in vis])
                    o, w_div = _normalize(N, D, len(vis), denominator, eps_m)
                    out[b, h, t, :] = o
                    for s, kval in zip(vis, kvals):
                        kv[b, h, t, s] = kval
                        weights[b, h, t, s] = kval if w_div is None else _div(kval, w_div)

        return OracleResult(
            exact=out,
            float64=to_float64(out),
            scores=scores,
            visible=visible,
            kernel_values=kv,
            weights=weights,
            numerator=numer,
            denominator=denom,
            abs_denominator=abs_denom,
            abs_numerator=abs_numer,
            max_abs_score=max_abs,
            count=count,
            kernel=kernel,
            denominator_mode=denominator,
            scale=c,
            eps=eps_m,
            dps=dps,
        )


def _div(a: Any, b: Any) -> Any:
    """a / b with the IEEE answer for b == 0: +-inf, or nan for 0/0."""
    import mpmath

    if b != 0:
        return a / b
    if a == 0:
        return mpmath.nan
    return mpmath.inf if a > 0 else -mpmath.inf


def _normalize(N: list, D: Any, n: int, mode: str, eps: Any) -> tuple[list, Any]:
    """Output row and the weight divisor (None: weights are kappa itself) for a D7 mode."""
    import mpmath

    if mode == "sum":
        div = D + eps
        return [_div(x, div) for x in N], div
    if mode == "count":
        div = n + eps
        return [_div(x, div) for x in N], div
    if mode == "none":
        return list(N), None
    d_v = len(N)
    if mode == "l2":
        div = mpmath.sqrt(mpmath.fdot(N, N) + eps)
        return [_div(x, div) for x in N], None
    if mode == "rms":
        div = mpmath.sqrt(mpmath.fdot(N, N) / d_v + eps)
        return [_div(x, div) for x in N], None
    # layernorm, biased variance
    mean = mpmath.fsum(N) / d_v
    centred = [x - mean for x in N]
    div = mpmath.sqrt(mpmath.fdot(centred, centred) / d_v + eps)
    return [_div(x, div) for x in centred], None


# ----------------------------------------------------------------------------- public


_COMMON_DOC = """
    Args:
        q: (B, H, T, d) float tensor (any float dtype, any device) or numpy float array.
        k: (B, H, S, d), same kinds.
        v: (B, H, S, d_v), same kinds.
        causal: query t sees key s iff s <= t; needs T == S.
        scale: see the module docstring (exp-type: score scale c, default 1/sqrt(d), >= 0;
            element-wise maps: factor on q, default 1). Converted exactly.
        attn_mask: bool torch tensor or numpy array, True = keep, broadcastable to (B, H, T, S).
        denominator: one of ``DENOMINATORS`` (D7).
        eps: >= 0, used as in the module docstring's table.
        dps: working precision in decimal digits, >= ``MIN_DPS`` (default 50).

    Returns:
        :class:`OracleResult`.

    Raises:
        TypeError: an input of the wrong type or dtype (non-float tensors, non-bool masks,
            non-bool ``causal``, non-int ``dps``).
        ValueError: wrong number of dimensions, mismatched B/H/d/S, empty axes, non-finite
            inputs, causal with T != S, mask not broadcastable, unknown denominator,
            ``layernorm`` with d_v < 2, negative eps or (exp-type) negative scale, dps too small.
"""


def softmax_reference(
    q: object,
    k: object,
    v: object,
    *,
    causal: bool = False,
    scale: float | None = None,
    attn_mask: object = None,
    denominator: str = "sum",
    eps: float = 0.0,
    dps: int = DEFAULT_DPS,
) -> OracleResult:
    """Softmax attention (kernel exp) in mpmath: o_t = sum_s e^{x_ts} v_s / sum_s e^{x_ts}.

    Source: the notation of reports/derivations.md, D2 (kernel exp), D7 (denominator modes).
    """
    return _core(
        q, k, v, kernel="exp", feature_map=None, projection=None, causal=causal, scale=scale,
        attn_mask=attn_mask, denominator=denominator, eps=eps, dps=dps,
    )  # fmt: skip


def _check_order(order: object) -> int:
    if isinstance(order, bool) or not isinstance(order, numbers.Integral):
        raise TypeError(f"order: expected an int >= 0, got {type(order).__name__} {order!r}")
    if order < 0:
        raise ValueError(f"order: expected an int >= 0, got {order}")
    return int(order)


def taylor_reference(
    q: object,
    k: object,
    v: object,
    *,
    order: int,
    causal: bool = False,
    scale: float | None = None,
    attn_mask: object = None,
    denominator: str = "sum",
    eps: float = 0.0,
    dps: int = DEFAULT_DPS,
) -> OracleResult:
    """Taylor-N attention in mpmath: kernel kappa_N(x) = sum_{n<=N} x^n/n! on x_ts = c q_t.k_s.

    Evaluated on the scores (equal to the feature form phi(q).phi(k) of either basis, D1), so
    the result does not depend on ``basis`` or ``form``. ``order`` is N >= 0 (N = 0: kappa = 1).

    Source: D1 (kappa_N), D2 (Taylor-N attention), D4, D7.
    """
    order = _check_order(order)
    return _core(
        q, k, v, kernel=f"taylor:{order}", feature_map=None, projection=None, causal=causal,
        scale=scale, attn_mask=attn_mask, denominator=denominator, eps=eps, dps=dps,
    )  # fmt: skip


def linear_reference(
    q: object,
    k: object,
    v: object,
    *,
    feature_map: str | Callable[[list], Sequence],
    causal: bool = False,
    scale: float | None = None,
    attn_mask: object = None,
    denominator: str = "sum",
    eps: float = 0.0,
    projection: object = None,
    dps: int = DEFAULT_DPS,
) -> OracleResult:
    """Kernel linear attention in mpmath: kappa_ts = phi(q_t) . phi(k_s) (D3).

    ``feature_map``:
      - ``"identity"``: phi(x) = x; ``"relu"``: max(x, 0); ``"elu1"``: elu(x) + 1 (x + 1 for
        x > 0, e^x otherwise) -- element-wise, applied to (a q) and k, a = ``scale`` (default 1).
      - ``"taylor:N"``: kappa_N(c q.k) (the D1 feature maps' kernel; same as
        :func:`taylor_reference`).
      - ``"favor"``: FAVOR+ positive features phi(x)_i = exp(w_i.x - |x|^2/2)/sqrt(m) on
        x = sqrt(c) q and sqrt(c) k (c = ``scale``, default 1/sqrt(d)); ``projection`` is the
        (m, d) matrix of rows w_i (torch or numpy float, converted exactly). The oracle gives the
        exact value of this random-feature estimate for the given w, not exp (D9).
      - a callable taking a list of d ``mpf`` and returning a sequence of m real numbers (the same
        m for every vector); treated like an element-wise map (a = ``scale``, default 1, on q).
        Its arithmetic should use mpmath to keep the reference's precision.

    Raises (besides the common ones):
        ValueError: unknown feature-map name, ``projection`` missing for ``favor`` or given for
            another map, ``projection`` not of shape (m, d), a callable returning varying lengths.
        TypeError: ``feature_map`` neither a str nor a callable; a callable returning non-numbers.

    Source: D3 (kernel linear attention), D1 (Taylor maps), D9 (FAVOR+), D7.
    """
    if isinstance(feature_map, str):
        try:
            kernel = from_feature_map(feature_map).feature_map
        except ValueError:
            raise ValueError(
                f"feature_map: expected one of {FEATURE_MAPS} or a callable, got {feature_map!r}"
            ) from None
    elif callable(feature_map):
        kernel = "callable"
    else:
        raise TypeError(
            f"feature_map: expected a name in {FEATURE_MAPS} or a callable, "
            f"got {type(feature_map).__name__}"
        )
    if kernel == "favor" and projection is None:
        raise ValueError("projection: feature_map='favor' needs the (m, d) projection matrix")
    if kernel != "favor" and projection is not None:
        raise ValueError(f"projection: only used with feature_map='favor', got {feature_map!r}")
    return _core(
        q, k, v, kernel=kernel, feature_map=feature_map, projection=projection, causal=causal,
        scale=scale, attn_mask=attn_mask, denominator=denominator, eps=eps, dps=dps,
    )  # fmt: skip


def reference(
    q: object, k: object, v: object, *, kernel: str | Callable, **kwargs: Any
) -> OracleResult:
    """Dispatch on a kernel name: ``"exp"`` or ``"softmax"`` -> :func:`softmax_reference`,
    ``"taylor:N"`` -> :func:`taylor_reference`, a feature-map name or callable ->
    :func:`linear_reference` (``"linear:<map>"`` is accepted too). Keyword arguments pass through,
    but ``eps_mode="floor"`` (the ``sum`` denominator as N/max(D, eps), ``verify.exact.eps_floor``).

    Raises:
        ValueError: an unknown kernel name or eps_mode; TypeError: ``kernel`` neither str nor
            callable.
    """
    eps_mode = kwargs.pop("eps_mode", "add")
    one_of("eps_mode", eps_mode, EPS_MODES)
    if eps_mode == "floor":  # N/max(D, eps): the eps-free result, floored
        from verify.exact.eps_floor import floored

        eps = kwargs.pop("eps", 0.0)
        res = reference(q, k, v, kernel=kernel, eps=0.0, **kwargs)
        out, weights, e = floored(res, eps)
        return replace(res, exact=out, float64=to_float64(out), weights=weights, eps=e)
    if callable(kernel) and not isinstance(kernel, str):
        return linear_reference(q, k, v, feature_map=kernel, **kwargs)
    if not isinstance(kernel, str):
        raise TypeError(f"kernel: expected a str or callable, got {type(kernel).__name__}")
    kern = parse_name(kernel)
    if kern.family == "softmax":
        return softmax_reference(q, k, v, **kwargs)
    if kern.family == "taylor":
        return taylor_reference(q, k, v, order=kern.order, **kwargs)
    if kern.family == "linear":
        return linear_reference(q, k, v, feature_map=kern.map, **kwargs)
    raise ValueError(f"kernel: {kernel!r} has no oracle")


for _fn in (softmax_reference, taylor_reference, linear_reference):
    _fn.__doc__ = (_fn.__doc__ or "") + _COMMON_DOC


def abs_error(actual: object, result: OracleResult) -> np.ndarray:
    """|a_hat - a_exact| per output element, measured in float64 space (D10).

    Each element of ``actual`` is cast up exactly to mpf, subtracted from the exact reference at
    ``result.dps`` digits and the absolute difference is rounded once to float64. Non-finite
    elements: the same non-finite value as the reference (nan/nan, +inf/+inf, -inf/-inf) counts
    as 0; any other pairing with a non-finite value gives +inf.

    Args:
        actual: (B, H, T, d_v) torch tensor of any float dtype/device, or numpy float array.
        result: the :class:`OracleResult` for the same inputs.

    Returns:
        float64 ndarray of shape (B, H, T, d_v).

    Raises:
        TypeError: ``actual`` not a float tensor/array; ``result`` not an OracleResult.
        ValueError: shape of ``actual`` differs from ``result.shape``.
    """
    import mpmath

    if not isinstance(result, OracleResult):
        raise TypeError(f"result: expected an OracleResult, got {type(result).__name__}")
    arr = _float64_array(actual, "actual", finite=False)
    if arr.shape != result.shape:
        raise ValueError(
            f"actual: expected shape {result.shape} (the reference output), got {arr.shape}"
        )
    out = np.empty(arr.shape, dtype=np.float64)
    flat_out = out.reshape(-1)
    with mpmath.workdps(result.dps):
        for i, (a, e) in enumerate(zip(arr.reshape(-1).tolist(), result.exact.reshape(-1))):
            if not math.isfinite(a) or not mpmath.isfinite(e):
                same = (math.isnan(a) and mpmath.isnan(e)) or (
                    math.isinf(a) and mpmath.isinf(e) and (a > 0) == (e > 0)
                )
                flat_out[i] = 0.0 if same else math.inf
                continue
            flat_out[i] = _mpf_to_float(abs(mpmath.mpf(a) - e))
    return out
