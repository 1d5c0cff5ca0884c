"""The terms of the D10 error model: per-key weights and their majorants, the per-row relative
coefficients of numerator and denominator, and the elementwise output bound they add up to
(``verify.exact.errors.attention_error_bound`` assembles them)."""

from __future__ import annotations

import math

import numpy as np

from derivations import feature_maps as d1
from derivations import norms as d7
from derivations import rounding as d10
from derivations import transform_rounding as d16

_U64 = d10.unit_roundoff("float64")
#: roundings of forming and applying the score scale: 5 when sqrt(c) is absorbed on q and k
#: (the larger of the two conventions of ``derivations.rounding.score_abs_error``)
SCALE_ROUNDINGS = 5


def inflate(x: np.ndarray, n: int) -> np.ndarray:
    """Turn a float64-computed non-negative sum of <= n-rounding terms into an upper bound."""
    return x * (1.0 + d10.gamma(n, _U64))


def vec(fn, *arrays: np.ndarray) -> np.ndarray:
    """Apply a derivation function elementwise.

    The bound functions are increasing in every argument they are given here, so an infinite
    or undefined (NaN: e.g. an exactly vanishing denominator) input gives an infinite bound:
    the comparison then says nothing about that element, and callers skip it.

    Most derivation bounds take numpy arrays (``array_ok`` validation, elementwise formulas):
    ``fn`` is then called once on the whole arrays, with each argument's non-finite elements
    replaced by 0 and the results there set to inf. A function that rejects arrays (TypeError)
    is applied element by element, as scalars.
    """
    flat = np.broadcast_arrays(*[np.asarray(a, dtype=np.float64) for a in arrays])
    shape = flat[0].shape
    finite = np.ones(shape, dtype=bool)
    for a in flat:
        finite &= np.isfinite(a)
    try:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            res = np.asarray(fn(*[np.where(np.isfinite(a), a, 0.0) for a in flat]), np.float64)
    except TypeError:
        return _vec_scalar(fn, flat)
    res = np.broadcast_to(res, shape)
    return np.where(finite & ~np.isnan(res), res, math.inf)


def count(n):
    """A count (keys, lags) as the derivation bounds take it: an int64 array, or an int."""
    if isinstance(n, np.ndarray):
        return n.astype(np.int64)
    return int(n)


def _vec_scalar(fn, flat: list[np.ndarray]) -> np.ndarray:
    """:func:`vec` for a function of scalars only: one call per element."""
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
    ``inflate(., 2N + 2)`` covers for a majorant (one more rounding for its argument).
    """
    coeffs = [float(d1.taylor_coefficient(n)) for n in range(order + 1)]
    out = np.full(np.shape(x), coeffs[-1])
    for a in reversed(coeffs[:-1]):
        out = out * x + a
    return out


def _row_max_increasing(fn, a: np.ndarray, b: np.ndarray, vis: np.ndarray) -> np.ndarray:
    """max over visible s of fn(a_s, b_s) per row (last axis), 0 on rows with no visible key;
    ``fn`` evaluated once on the whole arrays (:func:`vec`: a non-finite visible argument gives
    inf)."""
    a, b, vis = np.broadcast_arrays(a, b, vis)
    vals = vec(fn, np.where(vis, a, 0.0), np.where(vis, b, 0.0))
    return np.max(np.where(vis, vals, 0.0), axis=-1, initial=0.0)


def terms(family, order, fmap, q, k, vis, c, u, *, transform: dict | None = None, **kw):
    """:func:`_terms`, then a declared decay (D12) applied to the weights (:func:`decayed`)."""
    out = _terms(family, order, fmap, q, k, vis, c, u, transform=transform, **kw)
    if transform and transform.get("decay") is not None:
        return decayed(out, transform["decay"], vis, u)
    return out


def decayed(out: tuple, gammas: np.ndarray, vis: np.ndarray, u: float) -> tuple:
    """The :func:`_terms` tuple of decayed weights gamma_h^(t' - s) w_ts (D12).

    The decay factor of a key lag n = t' - s >= 0 is computed from gamma rounded to the working
    dtype (relative error <= u, so gamma_hat^n has <= gamma_n(u)) by n products (a recurrent
    state multiplied once per step: gamma_n(u) more) or a power and two products (the parallel
    and chunked forms, fewer): each weight gains the relative factor (1 + theta), |theta| <=
    gamma_{2n+2}(u), so with the row's largest lag n_max the per-row coefficients become
    (1 + rel)(1 + gamma_{2 n_max + 2}(u)) - 1 (the weighted-sum bounds multiply per-term factors,
    ``derivations.rounding.weighted_sum_relative_bound``). The majorant W is scaled by the exact
    factor (inflated by 4 float64 roundings)."""
    w, W, num_rel, den_rel, desc, uf_log = out
    T, S = vis.shape[-2], vis.shape[-1]
    lag = np.arange(T)[:, None] + (S - T) - np.arange(S)[None, :]  # (T, S)
    g = np.asarray(gammas, dtype=np.float64)[:, None, None]  # (H, 1, 1)
    factor = np.broadcast_to(g ** np.maximum(lag, 0), vis.shape)
    w = np.where(vis, w * factor, 0.0)
    W = np.where(vis, inflate(W * factor, 4), 0.0)
    n_max = np.max(np.where(vis, lag, 0), axis=-1)  # (..., T)
    extra = vec(lambda n: d10.gamma(2 * count(n) + 2, u), n_max)
    num_rel = (1 + num_rel) * (1 + extra) - 1
    den_rel = (1 + den_rel) * (1 + extra) - 1
    return w, W, num_rel, den_rel, desc + ", decayed by gamma^(t-s) (D12)", uf_log


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
    transform: dict | None = None,
):
    """Per key: signed kernel w (float64), majorant W >= |w| (inflated), the per-row relative
    coefficients num_rel, den_rel (relative to A = sum W|v|, B = sum W), a description, and the
    per-row natural log (..., T) of the factor by which an absolute underflow error of a
    computed weight reaches the output: m for exp weights computed shifted by the row maximum m
    and scaled back by e^m (unnormalized modes, D6), 0 otherwise.

    ``transform`` (score kernels ``exp`` and ``sigmoid``): ``softcap`` C and ``alibi`` (H,)
    slopes change the scores and their error bound (D16) before the weights; ``sigmoid_bias``
    b is the bias of the ``sigmoid`` family."""
    d = q.shape[-1]
    uf_log = np.zeros(vis.shape[:-1])
    n_keys = np.maximum(vis.sum(-1), 1)  # (..., T)
    abs_dot = c * (np.abs(q) @ np.swapaxes(np.abs(k), -1, -2))
    abs_dot = inflate(abs_dot, d + 2)
    x = c * (q @ np.swapaxes(k, -1, -2))
    e_x = d10.gamma(d + SCALE_ROUNDINGS, u) * abs_dot
    if transform and transform.get("qk_norm"):
        x, e_x, abs_dot = normalized_scores(q, k, c, u)
    if transform:
        x, e_x = transformed_scores(x, e_x, transform, u)

    if family == "sigmoid":  # unnormalized sigma(x + b) weights (D14), errors from D16
        b = float(transform["sigmoid_bias"])
        w = np.where(vis, 1.0 / (1.0 + np.exp(-(x + b))), 0.0)
        W = inflate(w, 4)
        e_key = vec(
            lambda ex, xa: d16.sigmoid_weight_relative_bound(ex, xa, b, u, exp_ulps),
            np.where(vis, e_x, 0.0),
            np.where(vis, np.abs(x), 0.0),
        )
        e_row = np.max(np.where(vis, e_key, 0.0), axis=-1)
        num_rel = vec(
            lambda n, e: d10.weighted_sum_relative_bound(count(n), e, u, True), n_keys, e_row
        )
        den_rel = vec(
            lambda n, e: d10.weighted_sum_relative_bound(count(n), e, u, False), n_keys, e_row
        )
        return w, W, num_rel, den_rel, "sigmoid weights (D14, D16)", uf_log

    if family == "exp":
        xm = np.where(vis, x, -np.inf)
        m = np.max(xm, axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        w = np.where(vis, np.exp(np.where(vis, x, m) - m), 0.0)  # shifted weights, w_max = 1
        W = inflate(w, 4)  # float64 exp (<= 1 ulp) of a rounded argument: a few roundings
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
        num_rel = vec(
            lambda n, e: d10.weighted_sum_relative_bound(count(n), e, u, True), n_keys, e_row
        )
        den_rel = vec(
            lambda n, e: d10.weighted_sum_relative_bound(count(n), e, u, False), n_keys, e_row
        )
        return w, W, num_rel, den_rel, "exp weights (shifted by the row maximum)", uf_log

    if family in ("taylor", "taylor-features"):
        N = int(order)
        w = np.where(vis, _kappa(N, x), 0.0)
        # feature forms: W_feat = kappa_N(c sum |q||k|) = sum_alpha |phi_alpha(q)||phi_alpha(k)|
        # (``taylor_weight_majorant(N, a, 0)``, evaluated elementwise by _kappa)
        W_feat = inflate(_kappa(N, abs_dot), 2 * N + 2)
        bases = (basis,) if basis else ("symmetric", "tensor")
        m = max(d1.feature_count(N, d, b) for b in bases)
        e_phi = d10.taylor_feature_relative_error(N, u)
        feat_num = vec(
            lambda n: d10.feature_form_relative_bound(e_phi, m, count(n), u, True), n_keys
        )
        feat_den = vec(
            lambda n: d10.feature_form_relative_bound(e_phi, m, count(n), u, False), n_keys
        )
        if family == "taylor-features" or form in ("recurrent",):
            W = np.where(vis, W_feat, 0.0)
            return w, W, feat_num, feat_den, f"kappa_{N} through {m} features", uf_log
        # parallel: kappa_N(x_hat) by a polynomial scheme (the worst of the three);
        # W_par = ``taylor_weight_majorant(N, |x|, e_x)`` = kappa_N(|x| + e_x)
        W_par = inflate(_kappa(N, np.abs(x) + e_x), 2 * N + 2)
        # the bound is increasing in e_x: its row maximum is the bound at the largest e_x
        e_row = np.where(
            vis.any(-1),
            vec(
                lambda ex: np.max(
                    [d10.taylor_weight_relative_bound(N, ex, u, s) for s in d10.POLYNOMIAL_SCHEMES],
                    axis=0,
                ),
                np.max(np.where(vis, e_x, 0.0), axis=-1),
            ),
            0.0,
        )
        par_num = vec(
            lambda n, e: d10.weighted_sum_relative_bound(count(n), e, u, True), n_keys, e_row
        )
        par_den = vec(
            lambda n, e: d10.weighted_sum_relative_bound(count(n), e, u, False), n_keys, e_row
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
        w = np.where(vis, (pq @ np.swapaxes(pk, -1, -2)), 0.0)
        W = np.where(vis, inflate((np.abs(pq) @ np.swapaxes(np.abs(pk), -1, -2)), d + 2), 0.0)
        shift = np.zeros(vis.shape[:-1])  # per row: the absolute feature error's share rho
        if fmap == "elu1":
            xmax = float(max(np.max(np.abs(qs), initial=0.0), np.max(np.abs(k), initial=0.0)))
            e_phi = d10.elu1_feature_relative_error(xmax, u, exp_ulps)
            W, shift = _elu1_absolute(pq, pk, qs, k, vis, W, e_phi, u, exp_ulps)
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
        w = np.where(vis, (pq @ np.swapaxes(pk, -1, -2)), 0.0)
        W = np.where(vis, inflate(w, m + 2 * d + 8), 0.0)
        # one feature error for all: the bound increases in both arguments, so its value at
        # the largest |w|.|x| and |x|^2 over queries, keys and features covers every feature
        a_max = float(max(np.max(aq, initial=0.0), np.max(ak, initial=0.0)))
        s_max = float(max(np.max(sq_q, initial=0.0), np.max(sq_k, initial=0.0)))
        e_phi = float(
            vec(
                lambda a, s: d10.favor_feature_relative_error(a, s, d, u, exp_ulps),
                np.array(a_max),
                np.array(s_max),
            )
        )
    else:  # pragma: no cover - _parse_kernel rejects
        raise ValueError(f"kernel: unknown feature map {fmap!r}")
    if not math.isfinite(e_phi):  # an exponent too large for a finite bound (never an overflow)
        inf = np.full(vis.shape[:-1], math.inf)
        return w, W, inf, inf, f"{fmap} features (m = {m}): feature error bound not finite", uf_log
    num_rel = vec(lambda n: d10.feature_form_relative_bound(e_phi, m, count(n), u, True), n_keys)
    den_rel = vec(lambda n: d10.feature_form_relative_bound(e_phi, m, count(n), u, False), n_keys)
    if fmap == "elu1":  # the absolute feature error's per-row share (``_elu1_absolute``)
        num_rel, den_rel = num_rel + shift, den_rel + shift
    return w, W, num_rel, den_rel, f"{fmap} features (m = {m})", uf_log


def _elu1_absolute(pq, pk, qs, k, vis, W, e_phi: float, u: float, exp_ulps: float):
    """The elu+1 features' absolute error (``elu1_feature_absolute_error`` a, x <= 0 only) as a
    majorant and a per-row relative share.

    phi_hat = phi (1 + t) + alpha, |t| <= e_phi, |alpha| <= a [x <= 0], reads phi_hat = phi'
    (1 + t) with |phi' - phi| <= a' = a / (1 - e_phi): the relative model (D10's feature-form
    bound) holds for phi', whose majorant is W' = (|phi(q)| + a'[q <= 0]) . (|phi(k)| +
    a'[k <= 0]), and the exact sums of phi' and phi differ by dW = W' - |phi(q)|.|phi(k)|
    (every elu+1 feature is positive) per key, <= rho_t W'_ts with rho_t the row's largest
    dW/W'. So |N_hat - N| <= (num_rel + rho_t) sum_s W'_ts |v_s| (and the denominator alike).
    Where features are O(1), rho is a few u; where a row's features are all far below a,
    rho tends to 1: no digit of such a row is certain. Returns (W', rho (..., T)).
    """
    from derivations import rounding as d10

    if e_phi >= 1.0:
        return W, np.full(vis.shape[:-1], math.inf)
    a = d10.elu1_feature_absolute_error(u, exp_ulps) / (1.0 - e_phi)
    mq, mk = (qs <= 0).astype(np.float64) * a, (k <= 0).astype(np.float64) * a
    aq, ak = np.abs(pq), np.abs(pk)

    def dot(x, y):
        return x @ np.swapaxes(y, -1, -2)

    d = pq.shape[-1]
    dW = np.where(vis, inflate(dot(mq, ak) + dot(aq, mk) + dot(mq, mk), d + 2), 0.0)
    W2 = np.where(vis, W + dW, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(vis & (W2 > 0), dW / W2, 0.0)
    return W2, np.minimum(1.0, inflate(np.max(ratio, axis=-1, initial=0.0), 1))


def normalized_scores(q: np.ndarray, k: np.ndarray, c: float, u: float):
    """Scores x = c q~.k~ with q~ = q / max(|q|, eps) (``QK_NORM_EPS``, F.normalize's rule),
    their error bound (D16's ``normalized_score_abs_error``: max(n, eps) is within the norm's
    relative error of max(n_hat, eps); plus the float64 evaluation of x here, gamma_{2d+6}(u64)
    c sum |q~||k~|) and the majorant c sum_i |q~_i k~_i|, each (..., T, S)."""
    from verify.spec.vocabulary import QK_NORM_EPS

    d = q.shape[-1]

    def unit(a):
        n = np.sqrt(np.einsum("...i,...i->...", a, a))[..., None]
        return a / np.maximum(n, QK_NORM_EPS)

    qn, kn = unit(q), unit(k)
    unit_abs = inflate((np.abs(qn) @ np.swapaxes(np.abs(kn), -1, -2)), 2 * d + 6)
    x = c * (qn @ np.swapaxes(kn, -1, -2))
    e_x = vec(lambda a: d16.normalized_score_abs_error(d, c, a, u), unit_abs)
    e_x = e_x + d10.gamma(2 * d + 6, _U64) * c * unit_abs
    return x, e_x, inflate(c * unit_abs, 1)


def transformed_scores(
    x: np.ndarray, e_x: np.ndarray, transform: dict, u: float, *, arith=None, tanh_rel=None
):
    """Scores (..., T, S) and their error bound after softcapping, then a given additive bias
    (D16's ALiBi bound with b = |bias|: one rounded addition; its u b term, the rounding of
    fl(m d), only adds margin for an exact bias), then the ALiBi bias.

    The bias is -m_h |t' - s| with t' = t + S - T (``verify.attention.structure``). ``arith``
    (D17's ``KernelArithmetic``, default D10's) sets the softcap's argument roundings, tanh
    error and cap product, the ALiBi bias's roundings and anchor (``key-index``: the bias
    m_h s FlashAttention adds on causal rows, same softmax; ``either``: the larger magnitude);
    ``tanh_rel`` overrides the tanh's relative error. A ``score_map`` ``(x, e_x, u) -> (y,
    e_y)`` (a declared FlexAttention score_mod, ``verify.spec.flex.score_map``) is applied last,
    at the unit roundoff of the transforms.
    """
    from derivations import kernel_arithmetic as ka

    arith = ka.parse_arithmetic(arith)
    cap = transform.get("softcap")
    if cap is not None:
        k_arg = ka.SOFTCAP_ARGUMENT_ROUNDINGS[arith.softcap_argument]
        r_tanh = tanh_rel if tanh_rel is not None else ka.tanh_relative(arith, u)
        # |x| - e_x is a lower bound on the exact |x|: e_x also covers the float64
        # evaluation of x (a bound at u_acc >= u_64 on the same sum), so the saturated cap's
        # small slope applies (D16's local Lipschitz constant)
        e_x = vec(
            lambda ex, xa, lo: d16.softcap_score_abs_error(
                ex, xa, cap, u, d16.TANH_ULPS.value, argument_roundings=k_arg,
                tanh_rel=r_tanh, product_rounded=arith.softcap_product, score_low=lo,
            ),
            e_x,
            np.abs(x),
            np.maximum(np.abs(x) - e_x, 0.0),
        )  # fmt: skip
        x = cap * np.tanh(x / cap)
    given = transform.get("bias")
    if given is not None:  # an additive score bias given exactly: one rounded addition
        b = np.broadcast_to(np.asarray(given, dtype=np.float64), x.shape)
        e_x = vec(
            lambda ex, xa, ba: d16.alibi_score_abs_error(ex, xa, ba, u), e_x, np.abs(x), np.abs(b)
        )
        x = x + b
    slopes = transform.get("alibi")
    if slopes is not None:
        T, S = x.shape[-2], x.shape[-1]
        dist = np.abs(np.arange(T)[:, None] + (S - T) - np.arange(S)[None, :])
        slope = np.asarray(slopes, dtype=np.float64)[:, None, None]
        bias = np.broadcast_to(slope * dist, x.shape)  # (H, T, S)
        size = bias  # the magnitude of the bias the kernel adds (its rounding scales with it)
        if arith.alibi_anchor != "distance":
            keyed = np.broadcast_to(slope * np.arange(S)[None, :], x.shape)
            size = keyed if arith.alibi_anchor == "key-index" else np.maximum(bias, keyed)
        kb = arith.bias_roundings
        e_x = vec(
            lambda ex, xa, b: d16.alibi_score_abs_error(ex, xa, b, u, bias_roundings=kb),
            e_x,
            np.abs(x),
            size,
        )
        x = x - bias
    score_map = transform.get("score_map")
    if score_map is not None:  # a declared map of the scores with its own error rule
        x, e_x = score_map(x, e_x, u)
    return x, e_x


def _weighted_sums(st: dict, u: float):
    """(the :func:`terms` tuple, A, B, D_low) for the setup ``st`` (``errors._setup``):
    A_j = sum_s W_s |v_sj| and B = sum_s W_s (upper bounds, inflated by their own float64
    rounding) and |D| >= D_low = |D_f| - gamma_S B. Cached in ``st`` per (u, form, family)."""
    key = (u, st["form"], st["family"])
    cache = st.setdefault("_sums", {})
    if key in cache:
        return cache[key]
    t = terms(
        st["family"], st["order"], st["fmap"], st["q"], st["k"], st["vis"], st["c"], u,
        form=st["form"], basis=st["basis"], exp_ulps=st["exp_ulps"],
        projection=st["projection"], shifted=st["shifted"], transform=st.get("transform"),
    )  # fmt: skip
    w, W = t[0], t[1]
    S = st["k"].shape[-2]
    A = inflate((W @ np.abs(st["v"])), S + 1)
    B = inflate(W.sum(-1), S)
    with np.errstate(invalid="ignore"):  # inf - inf (weights past float64): NaN, inf bound
        D_low = np.maximum(np.abs(w.sum(-1)) - d10.gamma(max(S, 1), _U64) * B, 0.0)
    cache[key] = (t, A, B, D_low)
    return cache[key]


def output_majorant(st: dict) -> np.ndarray:
    """An upper bound on |o_j| from float64 quantities: A/|D| (sum), A/n (count), A (none),
    and the norm of the normalized vector (1 for l2, sqrt(d_v) for rms and layernorm)."""
    t, A, B, D_low = _weighted_sums(st, _U64)
    v, vis, denominator, eps = st["v"], st["vis"], st["denominator"], st["eps"]
    d_v = v.shape[-1]
    n_vis = vis.sum(-1)
    if denominator == "sum":
        D_low = _sum_divisor(st, t[0], t[3], B, D_low)[2]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(D_low[..., None] > 0, A / D_low[..., None], np.inf)
    if denominator == "count":
        return A / (np.maximum(n_vis, 1) + eps)[..., None]
    if denominator == "none":
        return A
    return np.full(A.shape, 1.0 if denominator == "l2" else math.sqrt(d_v))


def _sum_divisor(st: dict, w, den_rel, B: np.ndarray, D_low: np.ndarray, u: float = _U64):
    """(relative error of the computed divisor, its majorant, a lower bound on it) for the
    ``sum`` denominator: D + eps adds one rounding relative to B + eps; the floor max(D, eps)
    (``verify.exact.eps_floor``) is exact, so it keeps D's error den_rel B and is at least
    max(D_f - gamma_S B, eps). ``w``, ``den_rel``: the weights and the denominator's relative
    coefficient of :func:`terms`."""
    from verify.exact.eps_floor import floor_low

    eps = st["eps"]
    if st.get("eps_floor"):
        S = max(st["k"].shape[-2], 1)
        return den_rel, B, floor_low(w.sum(-1), B, eps, d10.gamma(S, _U64))
    # eps is added to the computed D: one more rounding, relative to B + eps
    return ((1 + den_rel) * (1 + u) - 1 if eps else den_rel), B + eps, D_low + eps


def core_bound(st: dict, *, u: float, eta_log2: int, o_abs):
    """(bound array, cond, description) for arithmetic with unit roundoff ``u``.

    Besides the relative errors of the standard model, each computed weight and each product
    w_s v_sj may land in the subnormal range (e.g. the shifted exp weight e^{x - m} of a score
    far below the row maximum): an absolute error <= eta each (Higham eq. 2.8; additions of
    subnormals are exact), so N_tj and D_t carry n_t eta (|v|max + 1) and n_t eta more, and the
    final division or normalization one more eta. Exp weights computed shifted by the row
    maximum m and scaled back by e^m (the unnormalized modes, D6) carry their eta times e^m.
    """
    (w, W, num_rel, den_rel, how, uf_log), A, B, D_low = _weighted_sums(st, u)
    k, v, vis, div_ulps = st["k"], st["v"], st["vis"], st["div_ulps"]
    denominator, eps = st["denominator"], st["eps"]
    S = k.shape[-2]
    d_v = v.shape[-1]
    n_vis = vis.sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        cond_rows = np.where(D_low > 0, B / np.where(D_low > 0, D_low, 1.0), np.inf)
    cond = float(np.max(np.where(n_vis == 0, 1.0, cond_rows), initial=1.0))
    div_rel = d10.division_relative_bound(u, div_ulps)
    vmax = np.max(np.abs(v), axis=-2, keepdims=True)  # (..., 1, d_v)
    # (..., T): eta in the output's units (see _terms); from log2(eta), which for float64
    # (2^-1075) is below the smallest subnormal and would round to 0 before the scaling
    eta = 2.0**eta_log2
    log_eta = uf_log + math.log(2.0) * eta_log2  # (..., T)
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        eta_rows = np.exp(log_eta)
        # times |v| in the log domain: eta e^m alone underflows float64 where eta e^m |v| does
        # not (e^m = e^-14.5, |v| = 6.5e38: the dev profile's count-mode row, float64)
        uf_N = n_vis[..., None] * np.exp(log_eta[..., None] + np.log(vmax + 1.0))
    uf_D = n_vis * eta_rows
    if o_abs is None:
        o_abs = output_majorant(st)
    if denominator == "sum":
        den_rel_e, B_e, D_low_e = _sum_divisor(st, w, den_rel, B, D_low, u)
        bound = vec(
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
            B_e[..., None],
            D_low_e[..., None],
            np.minimum(o_abs, 1e300),
        )
        with np.errstate(divide="ignore", invalid="ignore"):  # inf * 0 (empty rows): nan
            margin = (D_low_e - den_rel_e * B_e - uf_D)[..., None]
            under = np.where(
                margin > 0,
                (uf_N + o_abs * uf_D[..., None]) / np.where(margin > 0, margin, 1.0),
                np.inf,
            )
        bound = bound + under * (1 + div_rel) + eta
        return bound, cond, f"{how}; kernel_attention_output_bound (D10, conditioning-aware)"
    if denominator in ("none", "count"):
        # the scale back by e^m (D6): an e^m below the normal range is itself rounded by up to
        # eta, which the product carries times the shifted numerator sum_s e^{x_s - m} |v_s| <=
        # n_t |v|max (1 + num_rel); the product may round subnormally too (one more eta)
        tiny_log = (eta_log2 - math.log2(u)) * math.log(2.0)  # ln of the smallest normal
        scaled_back = np.where(uf_log < tiny_log, n_vis * (1 + num_rel), 0.0)
        with np.errstate(divide="ignore", under="ignore"):
            eta_v = np.exp(np.log(vmax) + math.log(2.0) * eta_log2)  # eta |v|max, as above
        uf_N = uf_N + scaled_back[..., None] * eta_v + eta
    if denominator == "none":
        bound = num_rel[..., None] * A + uf_N
        return bound, cond, f"{how}; numerator only: num_rel * A (D10)"
    if denominator == "count":
        n = (np.maximum(n_vis, 1) + eps)[..., None]
        with np.errstate(invalid="ignore"):  # inf * 0 (weights past float64): NaN, no statement
            bound = (num_rel[..., None] * A + uf_N) / n * (1 + div_rel) + div_rel * o_abs + eta
        return bound, cond, f"{how}; divided by the visible-key count (D7, D10)"
    # l2 | rms | layernorm of N_t: D7 sensitivity to the numerator error + D10 rounding
    N_f = w @ v
    err_N = np.sqrt(np.sum((num_rel[..., None] * A + uf_N) ** 2, axis=-1))  # ||N_hat - N||_2
    A_norm = np.sqrt(np.sum(A * A, axis=-1))
    ref_err = d10.gamma(S + d_v + 2, _U64) * A_norm  # float64 error of N_f and its norm
    if denominator == "layernorm":
        yc = N_f - N_f.mean(-1, keepdims=True)
        norm_low = np.maximum(np.sqrt(np.sum(yc * yc, axis=-1)) - 2 * ref_err, 0.0)
        mean_abs = np.abs(N_f.mean(-1)) + ref_err
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(norm_low > 0, mean_abs * math.sqrt(d_v) / norm_low, np.inf)
        rnd = vec(
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
    if not eps:
        # the squares of a tiny N_t (shifted weights far below 1 on the nonzero values) may be
        # subnormal: absolute error eta each, d_v eta on the sum of squares ||y||^2, relative
        # r = d_v eta / ||y||^2, so the norm is off by <= r / (1 - r) relative and the output
        # (norm 1, or sqrt(d_v)) by that times its norm; r >= 1: the sum may be 0 (no bound)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            r_sq = np.where(norm_low > 0, d_v * eta / np.square(norm_low), np.inf)
            out_norm = 1.0 if denominator == "l2" else math.sqrt(d_v)
            rnd = rnd + np.where(r_sq < 1, out_norm * r_sq / (1 - r_sq), np.inf)
    sens = vec(
        lambda e, ny: d7.normalization_sensitivity(denominator, e, ny, d_v, eps),
        err_N,
        norm_low,
    )
    bound = np.broadcast_to((sens + rnd + eta * math.sqrt(d_v))[..., None], A.shape).copy()
    return bound, cond, f"{how}; {denominator}(N_t): D7 sensitivity + D10 normalization rounding"
