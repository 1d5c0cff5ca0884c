"""D19. The backward pass of the RNN form is a reverse-time RNN.

Causal normalized kernel attention with features a_t = phi(q_t), b_s = phi(k_s) and an optional
scalar decay gamma (D12; gamma = 1 is the plain form):
S_t = gamma S_{t-1} + b_t v_t^T, z_t = gamma z_{t-1} + b_t, N_t = S_t^T a_t, D_t = a_t . z_t,
o_t = N_t / D_t. Given dO_t = dL/do_t, with g_t = dO_t / D_t and h_t = -(dO_t . o_t) / D_t
(the unnormalized form N_t: g_t = dO_t, h_t = 0), the gradients obey a recurrence that runs from
t = T down to 1 over states of the forward state's size:

    R_t = gamma R_{t+1} + a_t g_t^T,   r_t = gamma r_{t+1} + a_t h_t,   R_{T+1} = 0, r_{T+1} = 0,
    dL/dv_s = R_s^T b_s,   dL/db_s = R_s v_s + r_s,   dL/da_t = S_t g_t + z_t h_t,

and dL/dq_t = J_phi(q_t)^T dL/da_t, dL/dk_s = J_phi(k_s)^T dL/db_s: the key and value gradients
read the reverse-accumulated state, the query gradient the forward state. With augmented values
va_s = [v_s; 1] and cotangents ga_t = [g_t; h_t] the pair (R, r) is one state
Ra_t = gamma Ra_{t+1} + a_t ga_t^T of the forward augmented state's shape (m, d_v + 1).
Chunked (chunk [lo, hi) of length L, P the state before it, R' = dL/d(state after it)):
dL/dP = gamma^L R' + sum_j gamma^(j - lo + 1) a_j ga_j^T (the reverse state one chunk back).

Results, each closed by a check in ``derive()``:
- the quotient rule reduces the normalized loss to the bilinear form sum_t ga_t . [N_t; D_t]
  (proved, symbolic); the reverse recurrence unrolls to the decayed suffix sum (proved, all t);
  the gradient of the causal triangle sum at a key s is the column sum over t >= s (proved,
  symbolic T and s, any summand: phi abstract); the Taylor kernel's gradient
  grad_q kappa_N(c q.k) = c kappa_{N-1}(c q.k) k (proved, symbolic N);
- exact instances: T = 3, d = 2, N = 2, d_v = 2, both bases of D1, symbolic q, k, v, cotangents
  and gamma: the token-level reverse RNN and the chunk-level one (C = 1, 2, 4) equal the sympy
  gradient of the parallel form (verified);
- the rounding bound of the computed gradients (counting argument, the same structure as the
  forward feature-form sums, so D10's ``feature_form_relative_bound`` with the counts below) and
  its feature-derivative majorant (verified, d <= 3, N <= 4).

Numeric exports (plain Python): ``checkpoint_count``, ``feature_gradient_relative_bounds``,
``taylor_gradient_relative_bounds``, ``SCORE_ROUNDINGS``.
"""

from __future__ import annotations

from derivations import feature_maps as fm
from derivations import rounding as d10
from derivations._latex import tex
from derivations._record import Derivation
from derivations._validate import check_choice, check_dim, check_int, check_order

#: the exact instance: T tokens, head dimension d, Taylor order N, value dimension d_v
LENGTH = 3
DIM = 2
ORDER = 2
VALUE_DIM = 2
CHUNK_SIZES = (1, 2, 4)
#: faulty statements the wrong-statement tests inject (``derive(reverse_state=...)``)
REVERSE_STATES = ("accumulated", "not-accumulated", "off-by-one")
QUERY_STATES = ("current", "before")
#: r_c of ``derivations.rounding.score_abs_error``: the scale's roundings in a computed score
#: (5 covers both c * fl(q.k) and fl(c q).k and sqrt(c) absorbed on both sides)
SCORE_ROUNDINGS = 5
KATHAROPOULOS_GRADIENT = (
    "A. Katharopoulos, A. Vyas, N. Pappas, F. Fleuret, 'Transformers are RNNs: Fast "
    "Autoregressive Transformers with Linear Attention', ICML 2020 (arXiv:2006.16236), "
    "Sec. 3.3.1 'Gradient computation', eqs. (13)-(15)"
)
GRIEWANK = (
    "A. Griewank, A. Walther, 'Evaluating Derivatives: Principles and Techniques of Algorithmic "
    "Differentiation', 2nd ed., SIAM, 2008, Ch. 12 (checkpointing: store some states, recompute "
    "the others during the reverse sweep)"
)


# -- numeric exports --------------------------------------------------------------------------
def checkpoint_count(length: int, chunk_size: int) -> int:
    """States the chunk-checkpointed backward stores: one before each chunk, ceil(T / C).

    Each has the forward augmented state's shape (m, d_v + 1); the reverse state is one more
    of that shape, carried, never stored per chunk. ``length == 0`` gives 0.

    Raises:
        TypeError: an argument is not an int. ValueError: length < 0 or chunk_size < 1.
    """
    check_int("length", length)
    check_int("chunk_size", chunk_size)
    check_order("length", length)
    check_dim("chunk_size", chunk_size)
    return -(-length // chunk_size)


def _decayed(rel, max_lag, u):
    """(1 + rel)(1 + gamma_{2n+2}) - 1 for a decay factor gamma^n with n <= max_lag (D12's
    charge: gamma rounded once, gamma^n by n products or a power and two products)."""
    if max_lag is None:
        return rel
    n = check_int("max_lag", max_lag, 0, array_ok=True)
    return (1.0 + rel) * (1.0 + d10.gamma(2 * n + 2, u)) - 1.0


def feature_gradient_relative_bounds(
    feature_rel_error: float,
    n_features: int,
    d_v: int,
    n_terms: int,
    u: float,
    *,
    jacobian_additions: int = 0,
    max_lag: int | None = None,
) -> tuple[float, float]:
    """(rel_qk, rel_v): relative errors of the reverse-RNN gradients through features (D19).

    Same structure as the forward sums (``derivations.rounding.feature_form_relative_bound``,
    with the counts below). dv_s = R_s^T b_s: each term a_t,m ga_t,j b_s,m carries two feature
    errors, two products and at most n_terms additions over queries (chunk joins included) and
    n_features - 1 over features: ``feature_form_relative_bound(e, m, n, u)``. dq_t =
    J(q_t)^T S_t ga_t (and dk_s = J(k_s)^T R_s va_s): the same two products and feature errors
    (a Jacobian entry alpha_i c^{n/2} q^(alpha - e_i) / sqrt(alpha!) has fewer roundings than the
    feature it differentiates), additions over keys (n_terms), over value columns (d_v), over
    features (n_features - 1) and ``jacobian_additions`` more where the chain rule merges
    (N (d - 1) for the Taylor product tree): ``feature_form_relative_bound(e, m + d_v +
    jacobian_additions, n, u)``. Relative to the majorant (every factor by its absolute value);
    ``max_lag``: decayed terms, see ``_decayed``.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    e = d10.check_real("feature_rel_error", feature_rel_error, nonneg=True)
    m = check_int("n_features", n_features, 1)
    dv = check_int("d_v", d_v, 1)
    extra = check_int("jacobian_additions", jacobian_additions, 0)
    rel_v = d10.feature_form_relative_bound(e, m, n_terms, u, True)
    rel_qk = d10.feature_form_relative_bound(e, m + dv + extra, n_terms, u, True)
    return _decayed(rel_qk, max_lag, u), _decayed(rel_v, max_lag, u)


def taylor_gradient_relative_bounds(
    order: int,
    d: int,
    d_v: int,
    n_terms: int,
    u: float,
    *,
    basis: str = "symmetric",
    max_lag: int | None = None,
) -> tuple[float, float]:
    """(rel_qk, rel_v) for Taylor-N gradients, any form: features or kappa on the scores (D19).

    The larger of two evaluations, per gradient: (i) through the D1 features
    (``feature_gradient_relative_bounds`` with e = ``taylor_feature_relative_error(N, u)``, m
    features, Jacobian merges N d); (ii) on the scores (the chunked form's intra-chunk part, and
    autograd of the parallel form): dv_s = sum_t kappa_N(x_ts) ga_t with e_w = gamma_{2N+1} + N
    delta, dq_t = sum_s c kappa_{N-1}(x_ts) (ga_t . va_s) k_s with e_d = gamma_{3N} + (N - 1)
    delta (Horner and its reverse sweep), delta = gamma_{d + SCORE_ROUNDINGS}: the score error
    e_x <= delta X, X = c sum_i |q_i||k_i|, enters as kappa_{N-1}(X') e_x <= N delta kappa_N(X')
    (X kappa_{N-1}(X) <= N kappa_N(X)); then one value dot (d_v + 1 terms), the products with c
    and k, and the sum over keys: ``feature_form_relative_bound(e_d, d_v + 1, n, u)`` and
    ``feature_form_relative_bound(e_w, 1, n, u)``. Relative to the majorant evaluated at
    (1 + delta)|q|, |k|, |va|, |ga| (kappa_N increasing on [0, inf) covers kappa_N(|x| + e_x)).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    n = check_int("order", order, 0)
    dd = check_int("d", d, 1)
    check_choice("basis", basis, fm.BASES)
    m = fm.feature_count(n, dd, basis)
    e_phi = d10.taylor_feature_relative_error(n, u)
    feat_qk, feat_v = feature_gradient_relative_bounds(
        e_phi, m, d_v, n_terms, u, jacobian_additions=n * dd
    )
    delta = d10.gamma(dd + SCORE_ROUNDINGS, u)
    e_w = d10.gamma(d10.polynomial_roundings(n), u) + n * delta
    e_d = d10.gamma(3 * n, u) + max(n - 1, 0) * delta
    score_v = d10.feature_form_relative_bound(e_w, 1, n_terms, u, True)
    score_qk = d10.feature_form_relative_bound(e_d, d_v + 1, n_terms, u, True)
    rel_qk = _decayed(_maximum(feat_qk, score_qk), max_lag, u)
    rel_v = _decayed(_maximum(feat_v, score_v), max_lag, u)
    return rel_qk, rel_v


def _maximum(a, b):
    try:
        return max(a, b)
    except (TypeError, ValueError):  # arrays
        import numpy as np

        return np.maximum(a, b)


# -- exact instances: polynomials over QQ(sqrt 2) ---------------------------------------------
def _ring():
    """QQ<sqrt 2>[r, g, q.., k.., v.., G.., h..]; r = sqrt(c), g = gamma, (G, h) the cotangents."""
    import sympy
    from sympy import QQ
    from sympy.polys.rings import ring

    T, d, dv = LENGTH, DIM, VALUE_DIM
    names = ["r", "g"]
    names += [f"q{t}_{i}" for t in range(T) for i in range(d)]
    names += [f"k{t}_{i}" for t in range(T) for i in range(d)]
    names += [f"v{t}_{j}" for t in range(T) for j in range(dv)]
    names += [f"G{t}_{j}" for t in range(T) for j in range(dv)]
    names += [f"h{t}" for t in range(T)]
    dom = QQ.algebraic_field(sympy.sqrt(2))
    R, *gens = ring(",".join(names), dom)
    it = iter(gens[2:])
    q = [[next(it) for _ in range(d)] for _ in range(T)]
    k = [[next(it) for _ in range(d)] for _ in range(T)]
    v = [[next(it) for _ in range(dv)] for _ in range(T)]
    G = [[next(it) for _ in range(dv)] for _ in range(T)]
    h = [next(it) for _ in range(T)]
    return {"R": R, "dom": dom, "r": gens[0], "g": gens[1], "q": q, "k": k, "v": v, "G": G, "h": h}


def _compile(exprs, xs, ctx):
    """Feature expressions in (r, x) -> a function of ring vectors (values and Jacobian)."""
    import sympy

    rs = sympy.Symbol("r", positive=True)
    polys = [sympy.Poly(sympy.sympify(e), rs, *xs, domain=ctx["dom"]) for e in exprs]
    jac = [[p.diff(x) for p in polys] for x in xs]  # jac[i][m] = d phi_m / d x_i
    R, r = ctx["R"], ctx["r"]

    def ev(p, x):
        acc = R.zero
        for mon, cf in p.terms():
            term = R(cf) * r ** mon[0]
            for xi, e in zip(x, mon[1:]):
                term = term * xi**e
            acc += term
        return acc

    def feats(x):
        return [ev(p, x) for p in polys], [[ev(p, x) for p in row] for row in jac]

    return feats


def _feature_fn(basis, ctx, builders):
    import sympy

    xs = sympy.symbols(f"x0:{DIM}")
    c = sympy.Symbol("r", positive=True) ** 2
    return _compile(builders[basis](list(xs), ORDER, c), xs, ctx)


def _kappa(x, coeffs, one):
    return sum((cf * x**n for n, cf in enumerate(coeffs)), 0 * one)


def _score(ctx, t, s):
    return ctx["r"] ** 2 * sum((a * b for a, b in zip(ctx["q"][t], ctx["k"][s])), ctx["R"].zero)


def _ga(ctx, t):
    return list(ctx["G"][t]) + [ctx["h"][t]]


def _va(ctx, s):
    return list(ctx["v"][s]) + [ctx["R"].one]


def _parallel_gradients(ctx, exp_coeffs, decayed):
    """sympy's gradient of sum_t ga_t . [N_t; D_t] of the masked parallel form (kappa_N from
    sympy's series of exp): an independent reference."""
    R, g = ctx["R"], ctx["g"]
    loss = R.zero
    for t in range(LENGTH):
        for s in range(t + 1):
            w = _kappa(_score(ctx, t, s), exp_coeffs, R.one) * (g ** (t - s) if decayed else 1)
            loss += w * sum((a * b for a, b in zip(_ga(ctx, t), _va(ctx, s))), R.zero)
    return {
        "dq": [[loss.diff(x) for x in row] for row in ctx["q"]],
        "dk": [[loss.diff(x) for x in row] for row in ctx["k"]],
        "dv": [[loss.diff(x) for x in row] for row in ctx["v"]],
    }


def _outer_add(state, a, b, scale):
    return [[scale * st + ai * bj for st, bj in zip(row, b)] for row, ai in zip(state, a)]


def _matvec(M, x, zero):
    return [sum((mij * xj for mij, xj in zip(row, x)), zero) for row in M]


def _jt(J, y, zero):
    """J^T y for J given as rows per coordinate: J[i][m] = d phi_m / d x_i."""
    return [sum((jm * ym for jm, ym in zip(row, y)), zero) for row in J]


def _reverse_rnn(ctx, feats, decayed, f):
    """Token-level: forward states for dq, the reverse state for dk and dv (D19's recurrence)."""
    R = ctx["R"]
    zero, gam = R.zero, ctx["g"] if decayed else R.one
    a, Ja = zip(*[feats(x) for x in ctx["q"]])
    b, Jb = zip(*[feats(x) for x in ctx["k"]])
    m, width = len(a[0]), VALUE_DIM + 1
    state = [[zero] * width for _ in range(m)]
    states = []
    for t in range(LENGTH):
        states.append(state)  # before token t
        state = _outer_add(state, b[t], _va(ctx, t), gam)
    states.append(state)
    dq = []
    for t in range(LENGTH):
        st = states[t + 1] if f["query_state"] == "current" else states[t]
        dq.append(_jt(Ja[t], _matvec(st, _ga(ctx, t), zero), zero))
    rev = [[zero] * width for _ in range(m)]
    rs = [None] * LENGTH
    for t in reversed(range(LENGTH)):
        prev = rev
        if f["reverse_state"] == "not-accumulated":
            rev = _outer_add([[zero] * width for _ in range(m)], a[t], _ga(ctx, t), gam)
        else:
            rev = _outer_add(rev, a[t], _ga(ctx, t), gam)
        rs[t] = prev if f["reverse_state"] == "off-by-one" else rev
    dk = [_jt(Jb[s], _matvec(rs[s], _va(ctx, s), zero), zero) for s in range(LENGTH)]
    dv = [
        [sum((rs[s][i][j] * b[s][i] for i in range(m)), zero) for j in range(VALUE_DIM)]
        for s in range(LENGTH)
    ]
    return {"dq": dq, "dk": dk, "dv": dv}


def _chunk_rnn(ctx, feats, decayed, chunk):
    """Chunk-level: kappa_N on the scores inside a chunk, states across chunks; the state
    gradient dL/dP = gamma^L R' + sum_j gamma^(j - lo + 1) a_j ga_j^T carried backwards."""
    R = ctx["R"]
    zero, gam = R.zero, ctx["g"] if decayed else R.one
    coeffs = [
        R(ctx["dom"].convert(fm.to_sympy(fm.taylor_coefficient(n)))) for n in range(ORDER + 1)
    ]
    dcoeffs = [(n + 1) * coeffs[n + 1] for n in range(ORDER)]  # kappa_N' = kappa_{N-1}
    a, Ja = zip(*[feats(x) for x in ctx["q"]])
    b, Jb = zip(*[feats(x) for x in ctx["k"]])
    m, width = len(a[0]), VALUE_DIM + 1
    bounds = [(lo, min(lo + chunk, LENGTH)) for lo in range(0, LENGTH, chunk)]
    state, befores = [[zero] * width for _ in range(m)], []
    for lo, hi in bounds:
        befores.append(state)
        state = [[gam ** (hi - lo) * x for x in row] for row in state]
        for i in range(lo, hi):
            state = _outer_add(state, [gam ** (hi - 1 - i) * x for x in b[i]], _va(ctx, i), 1)
    dq = [[zero] * DIM for _ in range(LENGTH)]
    dk = [[zero] * DIM for _ in range(LENGTH)]
    dv = [[zero] * VALUE_DIM for _ in range(LENGTH)]
    rev = [[zero] * width for _ in range(m)]  # dL/d(state after the chunk)
    for (lo, hi), P in reversed(list(zip(bounds, befores))):
        for j in range(lo, hi):  # the state before the chunk, read at j decayed by gamma^(j-lo+1)
            read = [gam ** (j - lo + 1) * x for x in _matvec(P, _ga(ctx, j), zero)]
            dq[j] = [x + y for x, y in zip(dq[j], _jt(Ja[j], read, zero))]
        for i in range(lo, hi):
            to_end = gam ** (hi - 1 - i)
            db = _matvec(rev, _va(ctx, i), zero)
            dk[i] = [x + to_end * y for x, y in zip(dk[i], _jt(Jb[i], db, zero))]
            dv[i] = [
                x + to_end * sum((rev[mm][jj] * b[i][mm] for mm in range(m)), zero)
                for jj, x in enumerate(dv[i])
            ]
        for j in range(lo, hi):  # intra-chunk part on the scores
            for i in range(lo, j + 1):
                lag = gam ** (j - i)
                x = _score(ctx, j, i)
                dw = sum((p * s for p, s in zip(_ga(ctx, j), _va(ctx, i))), zero)
                dx = lag * _kappa(x, dcoeffs, R.one) * dw * ctx["r"] ** 2
                dq[j] = [y + dx * kk for y, kk in zip(dq[j], ctx["k"][i])]
                dk[i] = [y + dx * qq for y, qq in zip(dk[i], ctx["q"][j])]
                w = lag * _kappa(x, coeffs, R.one)
                dv[i] = [y + w * gg for y, gg in zip(dv[i], ctx["G"][j])]
        new = [[gam ** (hi - lo) * x for x in row] for row in rev]
        for j in range(lo, hi):
            new = _outer_add(new, [gam ** (j - lo + 1) * x for x in a[j]], _ga(ctx, j), 1)
        rev = new
    return {"dq": dq, "dk": dk, "dv": dv}


def _same(a, b) -> bool:
    return all(
        len(ra) == len(rb) and all(x - y == 0 for x, y in zip(ra, rb))
        for key in ("dq", "dk", "dv")
        for ra, rb in zip(a[key], b[key])
    )


# -- the record, one function per claim group ----------------------------------------------------
def _statement(rec) -> None:
    rec.statement["forward"] = tex(
        r"S_t = \gamma S_{t-1} + \phi(k_t)\, v_t^{T}, \quad z_t = \gamma z_{t-1} + \phi(k_t),"
        r" \quad o_t = \frac{S_t^{T} \phi(q_t)}{z_t^{T} \phi(q_t)} \qquad (\gamma = 1:"
        r"\ \text{D2, D3};\ \gamma \in (0, 1]:\ \text{D12})",
        claim="exact instances: token-level reverse RNN == gradient of the parallel form "
        "(symmetric basis)",
    )
    rec.statement["cotangents"] = tex(
        r"g_t = \frac{\partial L / \partial o_t}{D_t}, \quad h_t = -\frac{(\partial L /"
        r" \partial o_t) \cdot o_t}{D_t} \qquad (\text{unnormalized } o_t = N_t:\ g_t ="
        r" \partial L / \partial o_t,\ h_t = 0)",
        claim="quotient rule: dL = g . dN + h dD with g = dO / D, h = -(dO . o) / D",
    )
    rec.statement["reverse_state"] = tex(
        r"R_t = \gamma R_{t+1} + \phi(q_t)\, g_t^{T}, \quad r_t = \gamma r_{t+1} +"
        r" \phi(q_t)\, h_t, \qquad R_{T+1} = 0,\ r_{T+1} = 0",
        claim="the reverse recursion unrolls to the decayed suffix sum (all t, T)",
    )
    rec.statement["gradients"] = tex(
        r"\frac{\partial L}{\partial v_s} = R_s^{T} \phi(k_s), \quad"
        r" \frac{\partial L}{\partial k_s} = J_\phi(k_s)^{T} (R_s v_s + r_s), \quad"
        r" \frac{\partial L}{\partial q_t} = J_\phi(q_t)^{T} (S_t g_t + z_t h_t)",
        claim="gradient of the causal triangle sum at s = column sum over t >= s (all T, s)",
    )


def _claim_quotient(rec) -> None:
    import sympy

    th = sympy.Symbol("theta")
    o_, n_, dd = sympy.Symbol("O"), sympy.Function("N"), sympy.Function("D")
    lhs = sympy.Derivative(o_ * n_(th) / dd(th), th)
    rhs = (o_ / dd(th)) * sympy.diff(n_(th), th) + (-(o_ * n_(th) / dd(th)) / dd(th)) * sympy.diff(
        dd(th), th
    )
    rec.step(
        r"Normalized outputs: per value column $j$, $\partial (O_j N_j / D) = (O_j / D)\,"
        r"\partial N_j - (O_j N_j / D^2)\, \partial D$; summed over $j$ the loss' differential "
        r"is $\sum_t g_t \cdot dN_t + h_t\, dD_t$ with $g_t = O_t / D_t$ and $h_t = -(O_t "
        r"\cdot o_t)/D_t$. So the normalized gradient is the gradient of the bilinear form "
        r"$\sum_t [g_t; h_t] \cdot [N_t; D_t]$ at fixed cotangents: one augmented state "
        r"$[R_t \mid r_t]$ with values $[v_s; 1]$. Unnormalized: $h_t = 0$.",
        sympy.Eq(lhs, rhs, evaluate=False),
    )
    rec.prove(
        "quotient rule: dL = g . dN + h dD with g = dO / D, h = -(dO . o) / D",
        lambda: sympy.simplify(lhs.doit() - rhs) == 0,
        "symbolic O, undefined N(theta), D(theta)",
    )


def _claim_reverse_unrolls(rec) -> None:
    import sympy
    from sympy.series.limitseq import difference_delta

    t, u_, big_t = sympy.symbols("t u T", integer=True, positive=True)
    gam = sympy.Symbol("gamma", positive=True)
    f, h = sympy.Function("f"), sympy.Function("h")

    def suffix(tt):
        return sympy.Sum(gam ** (u_ - tt) * f(u_), (u_, tt, big_t))

    rec.step(
        r"Reverse state: $R_t = \sum_{u = t}^{T} \gamma^{u - t} \phi(q_u) g_u^T$ satisfies "
        r"$R_t - \gamma R_{t+1} = \phi(q_t) g_t^T$ and $R_{T+1} = 0$ (empty sum): with $h(u) = "
        r"\gamma^u f(u)$, $\gamma^t R_t = P(T) - P(t - 1)$ for the prefix sums $P$ of $h$, so "
        r"$\gamma^t (R_t - \gamma R_{t+1}) = P(t) - P(t-1) = h(t)$. The recursion has one "
        r"solution: the reverse RNN holds the decayed suffix sum (it decays as the forward "
        r"state does).",
        sympy.Eq(suffix(t) - gam * suffix(t + 1), f(t)),
    )

    def unrolls() -> bool:
        split = sympy.simplify(
            sympy.Sum(h(u_), (u_, 1, t - 1))
            + sympy.Sum(h(u_), (u_, t, big_t))
            - sympy.Sum(h(u_), (u_, 1, big_t))
        )
        step = difference_delta(sympy.Sum(h(u_), (u_, 1, t)), t) == h(t + 1)
        # gamma^t (R_t - gamma R_{t+1}) with the prefix form, h(u) = gamma^u f(u)
        lhs = gam**t * suffix(t) - gam ** (t + 1) * suffix(t + 1)
        as_h = sympy.simplify(
            lhs
            - sympy.Sum(h(u_), (u_, t, big_t)).subs(h(u_), gam**u_ * f(u_))
            + sympy.Sum(h(u_), (u_, t + 1, big_t)).subs(h(u_), gam**u_ * f(u_))
        )
        empty = suffix(big_t + 1).doit() == 0
        return bool(split == 0 and step and as_h == 0 and empty)

    rec.prove(
        "the reverse recursion unrolls to the decayed suffix sum (all t, T)",
        unrolls,
        "symbolic t, T, gamma, undefined f: adjacent ranges merge, difference_delta of the "
        "prefix sum, the empty suffix R_{T+1} = 0",
    )


def _claim_columns(rec) -> None:
    import sympy

    t, s_, big_t = sympy.symbols("t s T", integer=True, positive=True)
    j = sympy.Symbol("j", integer=True, nonnegative=True)
    u_ = sympy.Symbol("u", integer=True, positive=True)
    w, g, v = sympy.IndexedBase("w"), sympy.IndexedBase("g"), sympy.IndexedBase("v")
    loss = sympy.Sum(sympy.Sum(w[t, u_] * g[t] * v[u_], (u_, 1, t)), (t, 1, big_t))
    column = sympy.Sum(w[t, s_] * g[t], (t, s_, big_t))
    rec.step(
        r"Exchange: the loss is a sum over the causal triangle $\{(t, u): u \le t\}$ of "
        r"$w_{t u}\, g_t \cdot v_u$ with $w_{t u} = \gamma^{t - u} \phi(q_t) \cdot \phi(k_u)$ "
        r"(any map $\phi$: the summand is abstract). Its derivative at key $s$ keeps the "
        r"column $u = s$, i.e. $t \ge s$: sympy differentiates the double sum (a Kronecker "
        r"delta), the range $1..T$ splits at $s$, the part $t < s$ vanishes and the rest is "
        r"the suffix over $t \ge s$. Hence $\partial L / \partial v_s = \sum_{t \ge s} w_{ts}"
        r" g_t = R_s^T \phi(k_s)$, $\partial L / \partial \phi(k_s) = \sum_{t \ge s}"
        r" \gamma^{t-s} \phi(q_t) (g_t \cdot v_s + h_t) = R_s v_s + r_s$, and by the rows "
        r"(fixed $t$, $u \le t$) $\partial L / \partial \phi(q_t) = S_t g_t + z_t h_t$; the "
        r"chain rule through $\phi$ multiplies by $J_\phi^T$.",
        sympy.Eq(sympy.Derivative(loss, v[s_]), column),
    )

    def columns() -> bool:
        d_loss = loss.diff(v[s_]).doit()
        if not isinstance(d_loss, sympy.Sum):
            return False
        term, (var, lo, hi) = d_loss.function, d_loss.limits[0]
        if not (var == t and lo == 1 and hi == big_t):
            return False
        split = sympy.simplify(
            sympy.Sum(term, (t, 1, big_t))
            - sympy.Sum(term, (t, 1, s_ - 1))
            - sympy.Sum(term, (t, s_, big_t))
        )
        below = sympy.simplify(term.subs(t, s_ - 1 - j))  # t < s
        above = sympy.simplify(term.subs(t, s_ + j))  # t >= s
        suffix = column.change_index(t, t - s_, j)
        return bool(
            split == 0 and below == 0 and suffix.function == above and suffix.limits[0][1] == 0
        )

    rec.prove(
        "gradient of the causal triangle sum at s = column sum over t >= s (all T, s)",
        columns,
        "symbolic T, s, indexed w, g, v: diff + doit gives Piecewise(s <= t); split at s; "
        "index shift t = s + j",
    )


def _claim_taylor_derivative(rec) -> None:
    import sympy

    big_n = sympy.Symbol("N", integer=True, positive=True)
    n = sympy.Symbol("n", integer=True, nonnegative=True)
    x = sympy.Symbol("x", real=True)
    kap_n = sympy.Sum(x**n / sympy.factorial(n), (n, 0, big_n))
    kap_n1 = sympy.Sum(x**n / sympy.factorial(n), (n, 0, big_n - 1))
    rec.step(
        r"Taylor kernels: $\nabla_q \kappa_N(c\, q \cdot k) = c\, \kappa_{N-1}(c\, q \cdot k)"
        r"\, k$ since $\kappa_N' = \kappa_{N-1}$; the chunked form's intra-chunk part "
        r"differentiates $\kappa_N$ on the scores, the state part through the features "
        r"$J_\phi^T$.",
        sympy.Eq(sympy.Derivative(kap_n, x), kap_n1),
    )
    rec.prove(
        "kappa_N' = kappa_{N-1}: grad_q kappa_N(c q.k) = c kappa_{N-1}(c q.k) k (symbolic N)",
        lambda: sympy.simplify(kap_n.diff(x) - kap_n1) == 0,
        "symbolic N (sympy Sum)",
    )


def _claim_instances(rec, f) -> None:
    import sympy

    rec.step(
        rf"Instances: $T = {LENGTH}$, $d = {DIM}$, $N = {ORDER}$, $d_v = {VALUE_DIM}$, "
        r"symbolic $q_t, k_t, v_t$, cotangents $g_t$ ($d_v$ entries) and $h_t$, "
        r"$r = \sqrt{c}$ and $\gamma$, in the polynomial ring $\mathbb{Q}(\sqrt 2)[\dots]$ (the "
        r"D1 weights $1/\sqrt{2}$). The reference is sympy's gradient of "
        r"$\sum_t [g_t; h_t] \cdot [N_t; D_t]$ of the masked parallel form with "
        r"$\kappa_N$ from sympy's series of $\exp$; the reverse RNN uses the D1 feature map "
        r"and its Jacobian (sympy's derivative of each feature), the chunked one also "
        r"$\kappa_{N-1}$ from the exported coefficients. $h_t = 0$ is the unnormalized form.",
    )
    builders = {
        "symmetric": lambda x, order, c: fm.symmetric_feature_map(x, order, c),
        "tensor": lambda x, order, c: fm.tensor_feature_map(x, order, c),
    }
    exp_coeffs = None

    def check(basis, chunked):
        def run() -> bool:
            nonlocal exp_coeffs
            ctx = _ring()
            feats = _feature_fn(basis, ctx, builders)
            if exp_coeffs is None:
                tt = sympy.Dummy("t")
                series = sympy.series(sympy.exp(tt), tt, 0, ORDER + 1).removeO()
                exp_coeffs = [series.coeff(tt, n) for n in range(ORDER + 1)]
            coeffs = [ctx["R"](ctx["dom"].convert(cf)) for cf in exp_coeffs]
            for decayed in (False, True):
                ref = _parallel_gradients(ctx, coeffs, decayed)
                if not chunked:
                    if not _same(_reverse_rnn(ctx, feats, decayed, f), ref):
                        return False
                    continue
                for chunk in CHUNK_SIZES:
                    if not _same(_chunk_rnn(ctx, feats, decayed, chunk), ref):
                        return False
            return True

        return run

    detail = (
        f"T = {LENGTH}, d = {DIM}, N = {ORDER}, d_v = {VALUE_DIM}; gamma = 1 and symbolic "
        "gamma; dq, dk, dv of every token; normalized (symbolic h) and unnormalized (h = 0 "
        "is a specialization of the same polynomials)"
    )
    for basis in ("symmetric", "tensor"):
        rec.verify(
            f"exact instances: token-level reverse RNN == gradient of the parallel form "
            f"({basis} basis)",
            check(basis, False),
            detail,
        )
    for basis in ("symmetric", "tensor"):
        rec.verify(
            f"exact instances: chunk-level reverse RNN == gradient of the parallel form "
            f"({basis} basis)",
            check(basis, True),
            detail + f"; chunk sizes {CHUNK_SIZES} (2 does not divide 3; 4 > T)",
        )


def _claim_majorant(rec) -> None:
    import sympy

    rec.step(
        r"Rounding (Higham's standard model, D10): each computed gradient is a sum of terms, "
        r"each a product of a query-side factor ($\phi(q_t)$ or $\partial_i \phi(q_t)$), a "
        r"key-side factor, a value entry and a cotangent entry. The reverse sums have the "
        r"forward feature-form sums' structure (states accumulated over tokens, read through "
        r"$m$ features), so D10's $(1 + e_\phi)^2 (1 + \gamma_k) - 1$ bounds them with $k$ = "
        r"tokens $n$ + features $m$ + 2 for $dv$, and $k = n + m + d_v + N d + 2$ for $dq$, "
        r"$dk$ (the $d_v + 1$ value columns of $S_t g_t + z_t h_t$ and $R_s v_s + r_s$, the "
        r"merges of the chain rule through the order-$N$ product tree); the intra-chunk part "
        r"on the scores has $\kappa_N$ by Horner ($e_w = \gamma_{2N+1} + N\delta$) and its "
        r"reverse sweep ($e_d = \gamma_{3N} + (N-1)\delta$), $\delta = \gamma_{d+5}$ the "
        r"relative score error; each gradient takes the larger coefficient. All relative to "
        r"the majorant: the exact gradient of the same form at $|q|(1 + \delta), |k|, |v|, "
        r"|g|, |h|$, whose feature-derivative part for Taylor features is $c\, |k_i|\, "
        r"\kappa_{N-1}(c \sum_j |q_j| |k_j|)$. A decay $\gamma^n$ adds $\gamma_{2n+2}$ (D12's "
        r"charge, D10's ``decayed``). Checkpointing stores $\lceil T / C \rceil$ states of "
        r"shape $(m, d_v + 1)$ and carries one reverse state: $O(T/C)$ states instead of the "
        r"$O(T)$ autograd keeps through the token loop.",
    )
    rec.cite(
        "standard model fl(x op y) = (x op y)(1 + delta), |delta| <= u; products of n factors "
        "(1 + delta_i) are 1 + theta_n, |theta_n| <= gamma_n (Lemma 3.1); sums in any order",
        d10.HIGHAM,
        "the model and gamma_n are Higham's; the term counts of the reverse sums are this "
        "project's",
    )
    nn = sympy.Symbol("n", positive=True)
    uu = sympy.Symbol("u", positive=True)
    gam_n = nn * uu / (1 - nn * uu)
    rec.prove(
        "gamma_n is increasing in n (so the largest count of a row bounds each of its terms)",
        lambda: sympy.simplify(sympy.diff(gam_n, nn) - uu / (1 - nn * uu) ** 2) == 0,
        "symbolic n, u: d gamma_n / dn = u / (1 - n u)^2 > 0 for n u < 1",
    )

    def majorant() -> bool:
        r = sympy.Symbol("r", positive=True)
        for d in (1, 2, 3):
            a = sympy.symbols(f"a0:{d}", nonnegative=True)  # |q_i|
            b = sympy.symbols(f"b0:{d}", nonnegative=True)  # |k_i|
            dot = sum(x * y for x, y in zip(a, b))
            for order in range(0, 5):
                k1 = fm.exp_taylor_polynomial(r**2 * dot, order - 1) if order else 0
                for build in (fm.symmetric_feature_map, fm.tensor_feature_map):
                    fa, fb = build(list(a), order, r**2), build(list(b), order, r**2)
                    for i in range(d):
                        lhs = sum(sympy.diff(x, a[i]) * y for x, y in zip(fa, fb))
                        if sympy.expand(lhs - r**2 * b[i] * k1) != 0:
                            return False
        return True

    rec.verify(
        "feature-derivative majorant: sum_alpha |d_i Phi_alpha(q)||Phi_alpha(k)| = "
        "c |k_i| kappa_{N-1}(c sum_j |q_j||k_j|)",
        majorant,
        "d = 1..3, N = 0..4, both bases (at |q|, |k|: every term non-negative)",
    )


def _tables(rec) -> None:
    u32 = d10.unit_roundoff("float32")
    rows = []
    for T in (64, 4096, 16384):
        for d in (4, 16):
            qk, v = taylor_gradient_relative_bounds(2, d, d, T, u32)
            rows.append([T, d, f"{qk:.3e}", f"{v:.3e}", checkpoint_count(T, 64)])
    rec.tables["Taylor-2 gradient coefficients (float32, d_v = d, chunk 64)"] = (
        ["T", "d", "rel_qk", "rel_v", "states stored"],
        rows,
    )


def derive(**wrong) -> Derivation:
    """Build the D19 record: the backward pass of the RNN form is a reverse-time RNN.

    Keyword overrides (wrong-statement tests): ``reverse_state`` (``"accumulated"``, right;
    ``"not-accumulated"``: R_t = phi(q_t) g_t^T without R_{t+1}; ``"off-by-one"``: the key at s
    reads R_{s+1}) and ``query_state`` (``"current"``, right; ``"before"``: the query at t
    reads S_{t-1}).

    Raises:
        TypeError: an unknown override name. ValueError: an override outside its choices.
    """
    f = fm.resolve_overrides(wrong, {"reverse_state": "accumulated", "query_state": "current"})
    check_choice("reverse_state", f["reverse_state"], REVERSE_STATES)
    check_choice("query_state", f["query_state"], QUERY_STATES)
    rec = Derivation("D19", "The backward pass of the RNN form is a reverse-time RNN")
    rec.cite(
        "the gradient of causal linear attention by cumulative sums: grad phi(q_i) = "
        "(sum_{j<=i} phi(k_j) v_j^T) grad o_i, grad phi(k_i) = (sum_{j>=i} phi(q_j) grad o_j^T) "
        "v_i, grad v_i = (sum_{j>=i} phi(q_j) grad o_j^T)^T phi(k_i)",
        KATHAROPOULOS_GRADIENT,
        "the numerator's cumulative-sum gradient is theirs; the denominator state r_t, the "
        "decay, the Taylor feature maps, the chunk-level reverse state and the rounding "
        "bound are this project's",
    )
    rec.cite(
        "checkpointing: store the state at chunk boundaries, recompute each chunk's states in "
        "the reverse sweep",
        GRIEWANK,
        "the technique is theirs; its use with one reverse state per chunk is this project's",
    )
    _statement(rec)
    _claim_quotient(rec)
    _claim_reverse_unrolls(rec)
    _claim_columns(rec)
    _claim_taylor_derivative(rec)
    _claim_instances(rec, f)
    _claim_majorant(rec)
    _tables(rec)
    rec.exports = [
        "checkpoint_count",
        "feature_gradient_relative_bounds",
        "taylor_gradient_relative_bounds",
        "SCORE_ROUNDINGS",
    ]
    return rec


if __name__ == "__main__":
    from derivations._record import main_for

    main_for(derive)
