"""The error model: a stated, derived bound for every numeric comparison (D10).

Every bound here is composed from the functions that ``derivations.rounding`` (D10),
``derivations.norms`` (D7) and ``derivations.feature_maps`` (D1) export; nothing is retyped.
The recipe is the one in ``derivations/rounding.py``'s module docstring:

1. score error e_x = gamma_{d + r_c} c sum_i |q_i k_i| (r_c = 5 covers both scale conventions);
2. per-key weight error relative to a majorant W_s >= |w_s|: exp (shift by the row maximum,
   library exp ulps), kappa_N evaluated on scores (parallel form) or through features
   (recurrent/chunked forms: W_s = kappa_N(c sum_i |q_i||k_si|)); for a computation whose form
   is not known (a third-party variant) the larger of the two per key;
3. sums over keys -> num_rel, den_rel relative to A = sum_s W_s |v_sj|, B = sum_s W_s;
4. the output: ``kernel_attention_output_bound`` (conditioning-aware, so signed kernels are
   bounded relative to sum_s |kappa| |v| / |sum_s kappa|), or the D7 normalizations via
   ``normalization_sensitivity`` + ``normalization_rounding_bound``;
5. bf16/fp16 inputs: the fp32 accumulation bound, then ``low_precision_output_bound`` (two-level
   model, compared against the exact result on the *same rounded inputs*).

Majorants (A, B, |D| lower bound) are computed in float64 and inflated by their own float64
rounding bound, so they stay upper (lower) bounds. Comparisons are made in float64 space against
the mpmath oracle (``verify.exact.oracle``): |actual - exact| is measured exactly and rounded once,
or against :func:`float64_reference` (``exact=None``: recipe 6 adds the reference's own bound).

A bound is labelled ``derived``. :func:`compare` turns (actual, bound) into an
``Observation`` (observed error, bound, observed/bound, error in units of roundoff, where).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from derivations import feature_maps as d1
from derivations import norms as d7
from derivations import rounding as d10
from verify.spec.kernel import parse as parse_kernel
from verify.spec.visibility import visible
from verify.spec.vocabulary import DENOMINATORS
from verify.spec.vocabulary import FORMS as FORM_NAMES

#: roundings of forming and applying the score scale: 5 when sqrt(c) is absorbed on q and k
#: (the larger of the two conventions of ``derivations.rounding.score_abs_error``)
SCALE_ROUNDINGS = 5
ACCUMULATION = {
    "float64": "float64",
    "float32": "float32",
    "bfloat16": "float32",
    "float16": "float32",
}
DEFAULT_EXP_LIBRARY = {"cpu": "cpu-sleef-u10", "cuda": "cuda-expf"}
DEFAULT_DIV_LIBRARY = {"cpu": "ieee", "cuda": "ieee"}
_U64 = d10.unit_roundoff("float64")


@dataclass
class ErrorBound:
    """Elementwise bound on |computed - exact| for one attention computation.

    Attributes:
        bound: (B, H, T, d_v) float64, the stated bound per output element.
        exact_float64: (B, H, T, d_v) the exact output rounded once to float64 (or None).
        dtype: computation dtype name; accumulation: the dtype sums run in.
        cond: largest B/|D| over rows (1 for positive kernels; inf if a denominator may vanish).
        description: how the bound was composed (for reports).
    """

    bound: np.ndarray
    exact_float64: np.ndarray | None
    dtype: str
    accumulation: str
    cond: float
    description: str
    kind: str = "derived"
    notes: list[str] = field(default_factory=list)


def _np64(x: Any, name: str) -> np.ndarray:
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    arr = np.asarray(x, dtype=np.float64)
    return arr


def _inflate(x: np.ndarray, n: int) -> np.ndarray:
    """Turn a float64-computed non-negative sum of <= n-rounding terms into an upper bound."""
    return x * (1.0 + d10.gamma(n, _U64))


def _vec(fn, *arrays: np.ndarray) -> np.ndarray:
    """Apply a scalar derivation function elementwise (they validate scalar inputs).

    The bound functions are increasing in every argument they are given here, so an infinite
    or undefined (NaN: e.g. an exactly vanishing denominator) input gives an infinite bound:
    the comparison then says nothing about that element, and callers skip it.
    """
    flat = np.broadcast_arrays(*arrays)
    out = np.empty(flat[0].shape, dtype=np.float64)
    for idx in np.ndindex(out.shape):
        args = [float(a[idx]) for a in flat]
        if not all(math.isfinite(a) for a in args):
            out[idx] = math.inf
            continue
        try:
            out[idx] = fn(*args)
        except OverflowError:  # e.g. e^{huge} in an exp bound: the bound is not finite
            out[idx] = math.inf
    return out


def _kappa(order: int, x: np.ndarray) -> np.ndarray:
    """kappa_N(x) = sum_{n<=N} x^n/n! by Horner in float64 (coefficients: D1, rounded once).

    Error: gamma_{2N+1} kappa_N(|x|) (Higham eq. 5.3 and the rounded coefficients), the count
    ``_inflate(., 2N + 2)`` covers for a majorant (one more rounding for its argument).
    """
    coeffs = [float(d1.taylor_coefficient(n)) for n in range(order + 1)]
    out = np.full(np.shape(x), coeffs[-1])
    for a in reversed(coeffs[:-1]):
        out = out * x + a
    return out


def _row_max_increasing(fn, a: np.ndarray, b: np.ndarray, vis: np.ndarray) -> np.ndarray:
    """max over visible s of fn(a_s, b_s) per row (last axis), 0 on rows with no visible key.

    ``fn`` must be non-decreasing in both arguments, so the maximum is attained on the pairs
    not dominated by another visible pair (a' >= a and b' >= b): only those are evaluated
    (the same value as evaluating every pair, in far fewer scalar calls). A non-finite visible
    argument gives inf, as in :func:`_vec`.
    """
    a, b, vis = np.broadcast_arrays(a, b, vis)
    out = np.zeros(a.shape[:-1])
    bad = (vis & ~(np.isfinite(a) & np.isfinite(b))).any(-1)
    ok = vis & ~bad[..., None]
    a_m = np.where(ok, a, -np.inf)
    b_m = np.where(ok, b, -np.inf)
    order = np.lexsort((-b_m, -a_m), axis=-1)  # a descending, ties: b descending
    a_s = np.take_along_axis(a_m, order, -1)
    b_s = np.take_along_axis(b_m, order, -1)
    best_b = np.maximum.accumulate(b_s, axis=-1)
    prev = np.concatenate([np.full((*b_s.shape[:-1], 1), -np.inf), best_b[..., :-1]], -1)
    front = (b_s > prev) & np.isfinite(a_s)
    for idx in zip(*np.nonzero(front)):
        out[idx[:-1]] = max(out[idx[:-1]], fn(float(a_s[idx]), float(b_s[idx])))
    out[bad] = math.inf
    return out


def _parse_kernel(kernel: str) -> tuple[str, int | None, str | None]:
    """A kernel claim -> the error model's (family, order, map): ``exp``; ``taylor`` (kappa_N on
    the scores); ``taylor-features`` (kappa_N through its feature map); ``linear`` (a named map).

    Raises:
        ValueError: not a known kernel (``unknown`` has no error model).
    """
    kern = parse_kernel(kernel)
    if kern.family == "softmax":
        return "exp", None, None
    if kern.family == "taylor":
        return "taylor", kern.order, None
    if kern.taylor_map:
        return "taylor-features", kern.order, None
    if kern.family == "linear":
        return "linear", None, kern.map
    raise ValueError(f"kernel: expected softmax, taylor:N or linear:MAP, got {kernel!r}")


def _terms(
    family: str,
    order: int | None,
    fmap: str | None,
    q: np.ndarray,
    k: np.ndarray,
    vis: np.ndarray,
    c: float,
    u: float,
    *,
    form: str,
    basis: str | None,
    exp_ulps: float,
    projection: np.ndarray | None,
    shifted: bool,
):
    """Per key: signed kernel w (float64), majorant W >= |w| (inflated), the per-row relative
    coefficients num_rel, den_rel (relative to A = sum W|v|, B = sum W), a description, and the
    per-row natural log (..., T) of the factor by which an absolute underflow error of a
    computed weight reaches the output: m for exp weights computed shifted by the row maximum m
    and scaled back by e^m (unnormalized modes, D6), 0 otherwise."""
    d = q.shape[-1]
    uf_log = np.zeros(vis.shape[:-1])
    n_keys = np.maximum(vis.sum(-1), 1)  # (..., T)
    abs_dot = c * np.einsum("...ti,...si->...ts", np.abs(q), np.abs(k))
    abs_dot = _inflate(abs_dot, d + 2)
    x = c * np.einsum("...ti,...si->...ts", q, k)
    e_x = d10.gamma(d + SCALE_ROUNDINGS, u) * abs_dot

    if family == "exp":
        xm = np.where(vis, x, -np.inf)
        m = np.max(xm, axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        w = np.where(vis, np.exp(np.where(vis, x, m) - m), 0.0)  # shifted weights, w_max = 1
        W = _inflate(w, 4)  # float64 exp (<= 1 ulp) of a rounded argument: a few roundings
        # the argument error: score error + the subtraction of the (common) maximum
        shift = np.abs(np.where(vis, x - m, 0.0)) + e_x
        # the row's largest per-key weight error (non-decreasing in both arguments)
        e_row = _row_max_increasing(
            lambda ex, sh: d10.softmax_weight_relative_bound(ex, sh, u, exp_ulps),
            np.where(vis, e_x, 0.0),
            shift,
            vis,
        )
        if not shifted:  # unnormalized modes: w = e^{x - m} e^{m}: one more exp and a product
            # a shifted weight that underflows (absolute error <= eta) is scaled back by e^m
            uf_log[...] = m[..., 0]
            extra = d10.exp_relative_bound(0.0, u, exp_ulps)
            e_row = np.where(vis.any(-1), (1 + e_row) * (1 + extra) * (1 + u) - 1, 0.0)
            with np.errstate(over="ignore", invalid="ignore"):  # e^m past float64: inf bound
                W = W * np.exp(m)
                w = w * np.exp(m)
        num_rel = _vec(
            lambda n, e: d10.weighted_sum_relative_bound(int(n), e, u, True), n_keys, e_row
        )
        den_rel = _vec(
            lambda n, e: d10.weighted_sum_relative_bound(int(n), e, u, False), n_keys, e_row
        )
        return w, W, num_rel, den_rel, "exp weights (shifted by the row maximum)", uf_log

    if family in ("taylor", "taylor-features"):
        N = int(order)
        w = np.where(vis, _kappa(N, x), 0.0)
        # feature forms: W_feat = kappa_N(c sum |q||k|) = sum_alpha |phi_alpha(q)||phi_alpha(k)|
        # (``taylor_weight_majorant(N, a, 0)``, evaluated elementwise by _kappa)
        W_feat = _inflate(_kappa(N, abs_dot), 2 * N + 2)
        bases = (basis,) if basis else ("symmetric", "tensor")
        m = max(d1.feature_count(N, d, b) for b in bases)
        e_phi = d10.taylor_feature_relative_error(N, u)
        feat_num = _vec(
            lambda n: d10.feature_form_relative_bound(e_phi, m, int(n), u, True), n_keys
        )
        feat_den = _vec(
            lambda n: d10.feature_form_relative_bound(e_phi, m, int(n), u, False), n_keys
        )
        if family == "taylor-features" or form in ("recurrent",):
            W = np.where(vis, W_feat, 0.0)
            return w, W, feat_num, feat_den, f"kappa_{N} through {m} features", uf_log
        # parallel: kappa_N(x_hat) by a polynomial scheme (the worst of the three);
        # W_par = ``taylor_weight_majorant(N, |x|, e_x)`` = kappa_N(|x| + e_x)
        W_par = _inflate(_kappa(N, np.abs(x) + e_x), 2 * N + 2)
        # the bound is increasing in e_x: its row maximum is the bound at the largest e_x
        e_row = np.where(
            vis.any(-1),
            _vec(
                lambda ex: max(
                    d10.taylor_weight_relative_bound(N, ex, u, s) for s in d10.POLYNOMIAL_SCHEMES
                ),
                np.max(np.where(vis, e_x, 0.0), axis=-1),
            ),
            0.0,
        )
        par_num = _vec(
            lambda n, e: d10.weighted_sum_relative_bound(int(n), e, u, True), n_keys, e_row
        )
        par_den = _vec(
            lambda n, e: d10.weighted_sum_relative_bound(int(n), e, u, False), n_keys, e_row
        )
        if form == "parallel":
            W = np.where(vis, W_par, 0.0)
            return w, W, par_num, par_den, f"kappa_{N} evaluated on scores", uf_log
        # chunked or unknown: each key is charged the larger of the two per-key errors
        W = np.where(vis, np.maximum(W_par, W_feat), 0.0)
        return (
            w,
            W,
            np.maximum(par_num, feat_num),
            np.maximum(par_den, feat_den),
            f"kappa_{N}: the larger of the score and {m}-feature evaluations per key",
            uf_log,
        )

    # kernel linear attention with an elementwise map or FAVOR+
    if fmap in ("identity", "relu", "elu1"):
        qs = c * q
        phi = {
            "identity": lambda t: t,
            "relu": lambda t: np.maximum(t, 0.0),
            "elu1": lambda t: np.where(t > 0, t + 1.0, np.exp(np.minimum(t, 0.0))),
        }[fmap]
        pq, pk = phi(qs), phi(k)
        w = np.where(vis, np.einsum("...tm,...sm->...ts", pq, pk), 0.0)
        W = np.where(
            vis, _inflate(np.einsum("...tm,...sm->...ts", np.abs(pq), np.abs(pk)), d + 2), 0.0
        )
        if fmap == "elu1":
            xmax = float(max(np.max(np.abs(qs), initial=0.0), np.max(np.abs(k), initial=0.0)))
            e_phi = d10.elu1_feature_relative_error(xmax, u, exp_ulps)
        else:
            e_phi = u  # the scale product on q (relu and the identity are exact)
        m = d
    elif fmap == "favor":
        if projection is None:
            raise ValueError("projection: required for the favor feature map")
        P = np.asarray(projection, dtype=np.float64)
        m = P.shape[0]
        sc = math.sqrt(c)

        def feats(z):
            zs = sc * z
            sq = np.sum(zs * zs, axis=-1, keepdims=True)
            return np.exp(zs @ P.T - sq / 2) / math.sqrt(m), np.abs(zs) @ np.abs(P).T, sq

        pq, aq, sq_q = feats(q)
        pk, ak, sq_k = feats(k)
        w = np.where(vis, np.einsum("...tm,...sm->...ts", pq, pk), 0.0)
        W = np.where(vis, _inflate(w, m + 2 * d + 8), 0.0)
        # one feature error for all: the bound increases in both arguments, so its value at
        # the largest |w|.|x| and |x|^2 over queries, keys and features covers every feature
        a_max = float(max(np.max(aq, initial=0.0), np.max(ak, initial=0.0)))
        s_max = float(max(np.max(sq_q, initial=0.0), np.max(sq_k, initial=0.0)))
        e_phi = float(
            _vec(
                lambda a, s: d10.favor_feature_relative_error(a, s, d, u, exp_ulps),
                np.array(a_max),
                np.array(s_max),
            )
        )
        if not math.isfinite(e_phi):  # an exponent too large for a finite bound
            inf = np.full(vis.shape[:-1], math.inf)
            return w, W, inf, inf, f"favor features (m = {m}): exponent bound not finite", uf_log
    else:  # pragma: no cover - _parse_kernel rejects
        raise ValueError(f"kernel: unknown feature map {fmap!r}")
    num_rel = _vec(lambda n: d10.feature_form_relative_bound(e_phi, m, int(n), u, True), n_keys)
    den_rel = _vec(lambda n: d10.feature_form_relative_bound(e_phi, m, int(n), u, False), n_keys)
    return w, W, num_rel, den_rel, f"{fmap} features (m = {m})", uf_log


#: headroom (in powers of two) kept above the smallest normal number for the products of a
#: term: Taylor coefficients 1/sqrt(alpha!) >= 2^-5 for N <= 6, the scale, sums of terms
UNDERFLOW_HEADROOM_BITS = 40


def outside_model(
    kernel: str,
    q: Any,
    k: Any,
    v: Any,
    *,
    dtype: str,
    scale: float | None = None,
    denominator: str = "sum",
    projection: Any = None,
) -> str | None:
    """Why the D10 model does not cover these inputs (or None when it does).

    The standard model (Higham eq. 2.4) assumes no underflow. A product term of the
    computation is a monomial of degree ``deg`` in the (scaled) entries of q, k, v: 3 for
    scores times values (q_i k_i v_j), 2N + 1 for kappa_N through features (q^alpha k^alpha
    v_j); the l2/rms/layernorm modes square the numerator (degree doubled). If every nonzero
    entry has magnitude >= L with L^deg >= tiny * 2^UNDERFLOW_HEADROOM_BITS (tiny = the smallest
    normal number of the accumulation dtype), no such term reaches the subnormal range.

    Returns:
        A reason string when some nonzero entry is below L, else None.
    """
    import torch

    family, order, fmap = _parse_kernel(kernel)
    acc = ACCUMULATION[dtype]
    tiny = float(torch.finfo(getattr(torch, acc)).tiny)
    deg = 2 * order + 1 if family in ("taylor", "taylor-features") and order else 3
    if denominator in ("l2", "rms", "layernorm"):
        deg *= 2
    level = (tiny * 2.0**UNDERFLOW_HEADROOM_BITS) ** (1.0 / deg)
    qn, kn, vn = _np64(q, "q"), _np64(k, "k"), _np64(v, "v")
    d = qn.shape[-1]
    exp_type = family in ("exp", "taylor", "taylor-features") or fmap == "favor"
    c = float(scale) if scale is not None else (1.0 / math.sqrt(d) if exp_type else 1.0)
    scaled = (math.sqrt(c) * qn, math.sqrt(c) * kn) if exp_type else (c * qn, kn)
    arrays = [("q", scaled[0]), ("k", scaled[1]), ("v", vn)]
    if fmap == "favor" and projection is not None:
        # the FAVOR+ features exp(w.x - |x|^2/2)/sqrt(m) are the factors of each term
        P = _np64(projection, "projection")
        for name, z in (("phi(q)", scaled[0]), ("phi(k)", scaled[1])):
            sq = np.sum(z * z, axis=-1, keepdims=True)
            with np.errstate(over="ignore", under="ignore"):
                arrays.append((name, np.exp(z @ P.T - sq / 2) / math.sqrt(P.shape[0])))
    for name, arr in arrays:
        nz = np.abs(arr[arr != 0])
        if nz.size and float(nz.min()) < level:
            return (
                f"{name} has a nonzero entry {float(nz.min()):.3g} below {level:.3g}: degree-{deg} "
                f"products may underflow in {acc} (outside the D10 standard model)"
            )
    return None


def attention_error_bound(
    kernel: str,
    q: Any,
    k: Any,
    v: Any,
    *,
    dtype: str,
    exact: Any = None,
    causal: bool = False,
    attn_mask: Any = None,
    scale: float | None = None,
    denominator: str = "sum",
    eps: float = 0.0,
    projection: Any = None,
    form: str = "any",
    basis: str | None = None,
    device: str = "cpu",
    exp_library: str | None = None,
    div_library: str | None = None,
) -> ErrorBound:
    """Elementwise bound on |o_hat - o| for kernel attention computed in ``dtype``.

    Args:
        kernel: ``softmax``, ``taylor:N`` (kappa_N on scores or features), ``linear:MAP``
            (identity, elu1, relu, favor, taylor:N).
        q, k, v: the inputs the implementation received, (B, H, T, d), (B, H, S, d),
            (B, H, S, d_v), torch or numpy; bf16/fp16 tensors are cast up exactly.
        dtype: the implementation's input dtype name (bf16/fp16: fp32 accumulation, then the
            output rounded to the input dtype: the two-level model).
        exact: the exact output -- an ``OracleResult`` (``verify.exact.oracle``) or an array of the
            exact values rounded once to float64. If None, the comparison is meant against a
            float64 direct evaluation (:func:`float64_reference`): the bound then adds that
            reference's own float64 bound, the parallel form's (D10 recipe 6), and uses
            |o| <= sum_s W_s |v_s| / |D| instead of the exact |o|.
        causal, attn_mask, scale, denominator, eps, projection: as the implementation
            (the API conventions; scale None = 1/sqrt(d) for exp-type kernels, 1 otherwise).
        form: ``parallel``, ``recurrent``, ``chunked`` or ``any`` (the worst of them per key).
        basis: ``symmetric`` / ``tensor`` for Taylor feature forms; None = the larger.
        device: selects the cited library ulps (``cpu`` or ``cuda``).
        exp_library, div_library: keys of ``derivations.rounding.LIBRARY_EXP_ULPS`` /
            ``LIBRARY_DIV_ULPS`` overriding the device default (cited constants).

    Returns:
        :class:`ErrorBound` (``bound`` is 0 on rows with no visible key: zeros are required).

    Raises:
        ValueError, TypeError: unknown kernel/denominator/dtype/form, bad shapes.
    """
    if dtype not in ACCUMULATION:
        raise ValueError(f"dtype: expected one of {tuple(ACCUMULATION)}, got {dtype!r}")
    setup = _setup(
        kernel,
        q,
        k,
        v,
        causal=causal,
        attn_mask=attn_mask,
        scale=scale,
        denominator=denominator,
        eps=eps,
        projection=projection,
        form=form,
        basis=basis,
        device=device,
        exp_library=exp_library,
        div_library=div_library,
    )
    acc = ACCUMULATION[dtype]
    vis = setup["vis"]
    o_abs = None
    if exact is not None:
        o_exact = np.asarray(getattr(exact, "float64", exact), dtype=np.float64)
        o_abs = np.abs(o_exact)
    else:
        o_exact = None
    bound, cond, how = _core_bound(
        u=d10.unit_roundoff(acc), eta_log2=d10.underflow_abs_error_log2(acc), o_abs=o_abs, **setup
    )
    desc = how
    n_vis = vis.sum(-1)
    if dtype != acc:
        o_for_round = o_abs if o_abs is not None else _output_majorant(**setup)
        bound = _vec(lambda b, oa: d10.low_precision_output_bound(b, oa, dtype), bound, o_for_round)
        desc += f"; two-level model: {acc} accumulation, output rounded to {dtype}"
    notes = []
    if exact is None:
        # the reference (:func:`float64_reference`) evaluates kappa on the scores: its own
        # bound is that of the parallel form, whatever form the implementation uses
        ref_setup = {**setup, "form": "parallel"}
        if setup["family"] == "taylor-features":
            ref_setup["family"] = "taylor"
        ref, _, _ = _core_bound(
            u=_U64, eta_log2=d10.underflow_abs_error_log2("float64"), o_abs=None, **ref_setup
        )
        bound = bound + ref
        notes.append("includes the float64 reference's own bound (D10 recipe 6)")
    # NaN (e.g. inf * 0 when unshifted exp weights overflow float64) means no statement: inf
    bound = np.where(np.isnan(bound), np.inf, bound)
    bound = np.where(n_vis[..., None] == 0, 0.0, bound)
    return ErrorBound(
        bound=bound,
        exact_float64=o_exact,
        dtype=dtype,
        accumulation=acc,
        cond=cond,
        description=desc,
        notes=notes,
    )


FORMS = (*FORM_NAMES, "any")


def _setup(
    kernel: str,
    q: Any,
    k: Any,
    v: Any,
    *,
    causal: bool,
    attn_mask: Any,
    scale: float | None,
    denominator: str,
    eps: float,
    projection: Any,
    form: str,
    basis: str | None,
    device: str,
    exp_library: str | None,
    div_library: str | None,
) -> dict:
    """Validated float64 inputs and the choices every bound and the reference share."""
    family, order, fmap = _parse_kernel(kernel)
    if denominator not in DENOMINATORS:
        raise ValueError(f"denominator: expected one of {DENOMINATORS}, got {denominator!r}")
    if form not in FORMS:
        raise ValueError(f"form: expected one of {FORMS}, got {form!r}")
    dev = "cuda" if str(device).startswith("cuda") else "cpu"
    exp_ulps = d10.LIBRARY_EXP_ULPS[exp_library or DEFAULT_EXP_LIBRARY[dev]].value
    div_ulps = d10.LIBRARY_DIV_ULPS[div_library or DEFAULT_DIV_LIBRARY[dev]].value
    qn, kn, vn = _np64(q, "q"), _np64(k, "k"), _np64(v, "v")
    for name, arr in (("q", qn), ("k", kn), ("v", vn)):
        if arr.ndim != 4:
            raise ValueError(f"{name}: expected a 4-d (B, H, T, d) array, got shape {arr.shape}")
    lead = np.broadcast_shapes(qn.shape[:2], kn.shape[:2], vn.shape[:2])
    T, S, d = qn.shape[-2], kn.shape[-2], qn.shape[-1]
    exp_type = family in ("exp", "taylor", "taylor-features") or fmap == "favor"
    # exp weights are shifted by the row maximum unless the mode sees their absolute size
    # (eps is added to the unshifted denominator or norm, so eps needs it too)
    shifted = not eps and denominator in ("sum", "l2", "rms", "layernorm")
    return dict(
        family=family,
        order=order,
        fmap=fmap,
        q=qn,
        k=kn,
        v=vn,
        vis=visible(T, S, causal=causal, attn_mask=attn_mask, lead=lead, numpy=True),
        c=float(scale) if scale is not None else (1.0 / math.sqrt(d) if exp_type else 1.0),
        form=form,
        basis=basis,
        exp_ulps=exp_ulps,
        div_ulps=div_ulps,
        projection=None if projection is None else _np64(projection, "projection"),
        shifted=shifted,
        denominator=denominator,
        eps=float(eps),
    )


def float64_reference(
    kernel: str,
    q: Any,
    k: Any,
    v: Any,
    *,
    causal: bool = False,
    attn_mask: Any = None,
    scale: float | None = None,
    denominator: str = "sum",
    eps: float = 0.0,
    projection: Any = None,
) -> np.ndarray:
    """Kernel attention evaluated directly in float64 numpy: the reference of ``exact=None``.

    The weights are those the error model reasons about (``_terms``): exp shifted by the row
    maximum (unshifted for ``none``/``count`` and whenever ``eps`` > 0), kappa_N on the scores
    by Horner (also for ``linear:taylor:N``), phi(q).phi(k) for the other feature maps; masked
    weights exactly 0. Then N = w v, D = sum_s w and the D7 mode as ``verify.exact.oracle``
    defines it (sum: N/(D + eps); none: N; count: N/(n + eps); l2: N/sqrt(|N|^2 + eps); rms:
    N/sqrt(mean N^2 + eps); layernorm: (N - mean)/sqrt(mean (N - mean)^2 + eps)). Rows with no
    visible key are 0. Its own error is the float64 bound of the parallel form, which
    ``attention_error_bound(..., exact=None)`` adds (D10, recipe 6).

    Args:
        kernel, q, k, v, causal, attn_mask, scale, denominator, eps, projection: as
            :func:`attention_error_bound`; q (B, H, T, d), k (B, H, S, d), v (B, H, S, d_v).

    Returns:
        (B, H, T, d_v) float64 array (inf/nan where the arithmetic gives them, e.g. a vanishing
        denominator of a signed kernel).

    Raises:
        ValueError, TypeError: as :func:`attention_error_bound`.
    """
    st = _setup(
        kernel, q, k, v, causal=causal, attn_mask=attn_mask, scale=scale,
        denominator=denominator, eps=eps, projection=projection, form="parallel", basis=None,
        device="cpu", exp_library=None, div_library=None,
    )  # fmt: skip
    family = "taylor" if st["family"] == "taylor-features" else st["family"]
    vis = st["vis"]
    w = _terms(
        family, st["order"], st["fmap"], st["q"], st["k"], vis, st["c"], _U64,
        form="parallel", basis=None, exp_ulps=st["exp_ulps"], projection=st["projection"],
        shifted=st["shifted"],
    )[0]  # fmt: skip
    N = np.einsum("...ts,...sj->...tj", w, st["v"])
    n = vis.sum(-1)[..., None]
    eps = st["eps"]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if denominator == "sum":
            out = N / (w.sum(-1)[..., None] + eps)
        elif denominator == "count":
            out = N / (n + eps)
        elif denominator == "none":
            out = N
        else:
            y = N - N.mean(-1, keepdims=True) if denominator == "layernorm" else N
            power = np.sum(y * y, axis=-1, keepdims=True)
            if denominator != "l2":
                power = power / y.shape[-1]
            out = y / np.sqrt(power + eps)
    return np.where(n == 0, 0.0, out)


def _output_majorant(
    *,
    family,
    order,
    fmap,
    q,
    k,
    v,
    vis,
    c,
    form,
    basis,
    exp_ulps,
    div_ulps,
    projection,
    shifted,
    denominator,
    eps,
) -> np.ndarray:
    """An upper bound on |o_j| from float64 quantities: A/|D| (sum), A/n (count), A (none),
    and the norm of the normalized vector (1 for l2, sqrt(d_v) for rms and layernorm)."""
    w, W, _, _, _, _ = _terms(
        family,
        order,
        fmap,
        q,
        k,
        vis,
        c,
        _U64,
        form=form,
        basis=basis,
        exp_ulps=exp_ulps,
        projection=projection,
        shifted=shifted,
    )
    S = k.shape[-2]
    d_v = v.shape[-1]
    A = _inflate(np.einsum("...ts,...sj->...tj", W, np.abs(v)), S + 1)
    B = _inflate(W.sum(-1), S)
    n_vis = vis.sum(-1)
    if denominator == "sum":
        D_low = np.maximum(np.abs(w.sum(-1)) - d10.gamma(max(S, 1), _U64) * B, 0.0) + eps
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(D_low[..., None] > 0, A / D_low[..., None], np.inf)
    if denominator == "count":
        return A / (np.maximum(n_vis, 1) + eps)[..., None]
    if denominator == "none":
        return A
    return np.full(A.shape, 1.0 if denominator == "l2" else math.sqrt(d_v))


def _core_bound(
    *,
    u,
    eta_log2,
    o_abs,
    family,
    order,
    fmap,
    q,
    k,
    v,
    vis,
    c,
    form,
    basis,
    exp_ulps,
    div_ulps,
    projection,
    shifted,
    denominator,
    eps,
):
    """(bound array, cond, description) for arithmetic with unit roundoff ``u``.

    Besides the relative errors of the standard model, each computed weight and each product
    w_s v_sj may land in the subnormal range (e.g. the shifted exp weight e^{x - m} of a score
    far below the row maximum): an absolute error <= eta each (Higham eq. 2.8; additions of
    subnormals are exact), so N_tj and D_t carry n_t eta (|v|max + 1) and n_t eta more, and the
    final division or normalization one more eta. Exp weights computed shifted by the row
    maximum m and scaled back by e^m (the unnormalized modes, D6) carry their eta times e^m.
    """
    w, W, num_rel, den_rel, how, uf_log = _terms(
        family,
        order,
        fmap,
        q,
        k,
        vis,
        c,
        u,
        form=form,
        basis=basis,
        exp_ulps=exp_ulps,
        projection=projection,
        shifted=shifted,
    )
    S = k.shape[-2]
    d_v = v.shape[-1]
    n_vis = vis.sum(-1)
    # A_j = sum_s W_s |v_sj|, B = sum_s W_s (upper bounds); |D| >= |D_f| - gamma_S B (lower)
    A = _inflate(np.einsum("...ts,...sj->...tj", W, np.abs(v)), S + 1)
    B = _inflate(W.sum(-1), S)
    D_f = w.sum(-1)
    D_low = np.maximum(np.abs(D_f) - d10.gamma(max(S, 1), _U64) * B, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        cond_rows = np.where(D_low > 0, B / np.where(D_low > 0, D_low, 1.0), np.inf)
    cond = float(np.max(np.where(n_vis == 0, 1.0, cond_rows), initial=1.0))
    div_rel = d10.division_relative_bound(u, div_ulps)
    vmax = np.max(np.abs(v), axis=-2, keepdims=True)  # (..., 1, d_v)
    # (..., T): eta in the output's units (see _terms); from log2(eta), which for float64
    # (2^-1075) is below the smallest subnormal and would round to 0 before the scaling
    eta = 2.0**eta_log2
    with np.errstate(over="ignore", under="ignore"):
        eta_rows = np.exp(uf_log + math.log(2.0) * eta_log2)
    uf_N = (n_vis * eta_rows)[..., None] * (vmax + 1.0)  # subnormal results (see the docstring)
    uf_D = n_vis * eta_rows
    if o_abs is None:
        o_abs = _output_majorant(
            family=family,
            order=order,
            fmap=fmap,
            q=q,
            k=k,
            v=v,
            vis=vis,
            c=c,
            form=form,
            basis=basis,
            exp_ulps=exp_ulps,
            div_ulps=div_ulps,
            projection=projection,
            shifted=shifted,
            denominator=denominator,
            eps=eps,
        )
    if denominator == "sum":
        # eps is added to the computed D: one more rounding, relative to B + eps
        den_rel_e = (1 + den_rel) * (1 + u) - 1 if eps else den_rel
        bound = _vec(
            lambda en, ed, a, b, dd, oa: d10.kernel_attention_output_bound(
                num_rel=en,
                den_rel=ed,
                abs_numerator=a,
                abs_denominator=b,
                denominator=dd,
                output_abs=oa,
                div_rel=div_rel,
            ),
            num_rel[..., None],
            den_rel_e[..., None],
            A,
            (B + eps)[..., None],
            (D_low + eps)[..., None],
            np.minimum(o_abs, 1e300),
        )
        with np.errstate(divide="ignore", invalid="ignore"):  # inf * 0 (empty rows): nan
            margin = (D_low + eps - den_rel_e * (B + eps) - uf_D)[..., None]
            under = np.where(
                margin > 0,
                (uf_N + o_abs * uf_D[..., None]) / np.where(margin > 0, margin, 1.0),
                np.inf,
            )
        bound = bound + under * (1 + div_rel) + eta
        return bound, cond, f"{how}; kernel_attention_output_bound (D10, conditioning-aware)"
    if denominator == "none":
        bound = num_rel[..., None] * A + uf_N
        return bound, cond, f"{how}; numerator only: num_rel * A (D10)"
    if denominator == "count":
        n = (np.maximum(n_vis, 1) + eps)[..., None]
        bound = (num_rel[..., None] * A + uf_N) / n * (1 + div_rel) + div_rel * o_abs + eta
        return bound, cond, f"{how}; divided by the visible-key count (D7, D10)"
    # l2 | rms | layernorm of N_t: D7 sensitivity to the numerator error + D10 rounding
    N_f = np.einsum("...ts,...sj->...tj", w, v)
    err_N = np.sqrt(np.sum((num_rel[..., None] * A + uf_N) ** 2, axis=-1))  # ||N_hat - N||_2
    A_norm = np.sqrt(np.sum(A * A, axis=-1))
    ref_err = d10.gamma(S + d_v + 2, _U64) * A_norm  # float64 error of N_f and its norm
    if denominator == "layernorm":
        yc = N_f - N_f.mean(-1, keepdims=True)
        norm_low = np.maximum(np.sqrt(np.sum(yc * yc, axis=-1)) - 2 * ref_err, 0.0)
        mean_abs = np.abs(N_f.mean(-1)) + ref_err
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(norm_low > 0, mean_abs * math.sqrt(d_v) / norm_low, np.inf)
        rnd = _vec(
            lambda r: (
                d10.normalization_rounding_bound("layernorm", d_v, u, r)
                if math.isfinite(r)
                else math.inf
            ),
            ratio,
        )
    else:
        norm_low = np.maximum(np.sqrt(np.sum(N_f * N_f, axis=-1)) - ref_err, 0.0)
        rnd = np.full(norm_low.shape, d10.normalization_rounding_bound(denominator, d_v, u))
    sens = _vec(
        lambda e, ny: d7.normalization_sensitivity(denominator, e, ny, d_v, eps),
        err_N,
        norm_low,
    )
    bound = np.broadcast_to((sens + rnd + eta * math.sqrt(d_v))[..., None], A.shape).copy()
    return bound, cond, f"{how}; {denominator}(N_t): D7 sensitivity + D10 normalization rounding"


def roundoff_units(observed: float, reference_abs: float, dtype: str) -> float:
    """Error in units of roundoff of ``dtype``, relative to max(|reference|, tiny)."""
    u = d10.unit_roundoff(dtype)
    scale = max(abs(reference_abs), d10.underflow_abs_error(dtype))
    if scale == 0.0:
        return 0.0 if observed == 0 else math.inf
    return observed / (u * scale)


def compare(actual: Any, eb: ErrorBound, exact: Any = None, *, what: str = "output"):
    """Observed |actual - exact| against ``eb.bound``, elementwise; the worst element decides.

    Args:
        actual: the computed tensor/array (any float dtype; cast up exactly).
        eb: the stated bound (computed *before* ``actual`` is looked at).
        exact: an ``OracleResult`` (measured exactly in mpmath and rounded once) or a float64
            reference array; default ``eb.exact_float64``.
        what: label for messages.

    Returns:
        ``verify.spec.results.Observation`` (observed, bound, kind, where, detail with the
        ratio in units of roundoff).
    """
    from verify.spec.results import Observation

    if exact is not None and hasattr(exact, "exact"):
        from verify.exact.oracle import abs_error

        err = abs_error(actual, exact)
        ref = np.asarray(exact.float64, dtype=np.float64)
    else:
        ref = np.asarray(eb.exact_float64 if exact is None else exact, dtype=np.float64)
        err = np.abs(_np64(actual, "actual") - ref)
    bound = eb.bound
    # elements with an infinite bound (a denominator that may vanish, an overflowing exp
    # bound) carry no statement and are excluded; everything else must satisfy err <= bound
    silent = ~np.isfinite(bound)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, err / bound, np.where(err == 0, 0.0, np.inf))
    ratio = np.where(np.isnan(err), np.inf, ratio)
    ratio = np.where(silent, -1.0, ratio)  # never chosen as the worst element
    if ratio.size == 0:
        return Observation(0.0, 0.0, "derived", "", f"{what}: empty")
    idx = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    obs, bnd = float(err[idx]), float(bound[idx])
    units = roundoff_units(obs, float(ref[idx]), eb.dtype)
    detail = (
        f"{what}: max error {obs:.3e} vs bound {bnd:.3e} at {tuple(int(i) for i in idx)} "
        f"({units:.3g} u of {eb.dtype} relative to |o|); cond {eb.cond:.3g}"
    )
    if silent.any():
        detail += f"; {int(silent.sum())} of {silent.size} elements without a finite bound"
    if silent.all():
        from verify.spec.results import NotApplicable

        raise NotApplicable("no element has a finite bound (a denominator may vanish)")
    return Observation(obs, bnd, eb.kind, str(tuple(int(i) for i in idx)), detail)
