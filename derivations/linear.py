"""D3. Linear attention as the first-order truncation.

- The n = 1 term alone, q~_t^T (sum_{s<=t} k~_s v_s^T), is unnormalized linear attention with the
  identity feature map on q~ = sqrt(c) q, k~ = sqrt(c) k.
- Orders {0, 1} with the softmax normalization give kappa_1(x) = 1 + x: normalized first-order
  Taylor attention is kernel linear attention with phi(x) = [1, x~].
- Kernel linear attention o_t = phi(q_t)^T S_t / phi(q_t)^T z_t, S_t = sum_{s<=t} phi(k_s) v_s^T,
  z_t = sum_{s<=t} phi(k_s), equals the parallel form with kernel phi(q).phi(k) for *any* map.

Numeric exports (plain Python): ``FEATURE_MAPS``, ``parse_feature_map``, ``feature_dimension``.
"""

from __future__ import annotations

from derivations import feature_maps as fm
from derivations import recurrent as rc
from derivations._latex import tex
from derivations._record import Derivation, pick
from derivations._validate import check_choice, check_dim

#: feature-map names of the linear-attention API: "taylor" is written "taylor:N"
FEATURE_MAPS = ("identity", "elu1", "relu", "taylor", "favor")

LENGTH = 3
DIMS = (1, 2)
VALUE_DIM = 2
GENERIC_FEATURES = (1, 2, 3)


def parse_feature_map(name: str) -> tuple[str, int | None]:
    """Split a feature-map name into (kind, order): ``"taylor:2"`` -> ``("taylor", 2)``.

    Other names (``identity``, ``elu1``, ``relu``, ``favor``) return order ``None``.

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: unknown name, or a Taylor order that is not a non-negative int.
    """
    if not isinstance(name, str):
        raise TypeError(f"feature_map: expected a str, got {type(name).__name__} {name!r}")
    kind, sep, order = name.partition(":")
    if kind == "taylor":
        if not sep or not order.isdigit():
            raise ValueError(
                f"feature_map: expected 'taylor:N' with N a non-negative int, got {name!r}"
            )
        return "taylor", int(order)
    if sep or kind not in FEATURE_MAPS:
        raise ValueError(
            "feature_map: expected one of 'identity', 'elu1', 'relu', 'taylor:N', 'favor', "
            f"got {name!r}"
        )
    return kind, None


def feature_dimension(
    feature_map: str, d: int, *, num_features: int | None = None, basis: str = "symmetric"
) -> int:
    """Number m of features phi(x) has for a query/key of size ``d`` (the state is m x d_v).

    identity, elu1, relu: d; ``taylor:N``: C(N+d, N) (``basis="symmetric"``) or
    sum_{n<=N} d^n (``"tensor"``), D1/D5; in particular taylor:1 gives d + 1
    (phi(x) = [1, x~]); favor: ``num_features`` positive random features (D9).

    Raises:
        TypeError, ValueError: bad name, ``d``, ``basis``, or ``num_features`` (required for
        favor, and only for favor).
    """
    kind, order = parse_feature_map(feature_map)
    check_dim("d", d)
    if kind == "favor":
        if num_features is None:
            raise ValueError("num_features: required for feature_map='favor', got None")
        return check_dim("num_features", num_features)
    if num_features is not None:
        raise ValueError(
            f"num_features: only used with feature_map='favor', got {num_features!r} "
            f"for {feature_map!r}"
        )
    if kind == "taylor":
        return fm.feature_count(order, d, basis)
    check_choice("basis", basis, fm.BASES)
    return d


def first_order_map(x, r, one):
    """phi(x) = [1, r x] (r = sqrt(c)), built from the exported coefficients sqrt(1/n!), n <= 1.

    ``x`` holds ring elements; the weights must be squares of rationals (they are: 1 and 1).
    """
    import sympy
    from sympy import QQ

    w0, w1 = (sympy.sqrt(fm.to_sympy(fm.taylor_coefficient(n))) for n in (0, 1))
    return [QQ.convert(w0) * one] + [QQ.convert(w1) * r * xi for xi in x]


def _linear_rows(fq, fk, v, one):
    """Kernel linear attention, recurrent: S_t = S_{t-1} + phi(k_t) v_t^T, out = phi(q_t)^T S_t."""
    m = len(fk[0])
    state = [[0 * one] * len(v[0]) for _ in range(m)]
    rows = []
    for t in range(len(fq)):
        state = [[sj + fk[t][i] * vj for sj, vj in zip(state[i], v[t])] for i in range(m)]
        rows.append([sum(fq[t][i] * state[i][j] for i in range(m)) for j in range(len(v[0]))])
    return rows


def _kernel_rows(kern, v, one):
    """Parallel form: row t = sum_{s<=t} kern[t][s] v_s."""
    rows = []
    for t in range(len(kern)):
        row = [0 * one] * len(v[0])
        for s in range(t + 1):
            row = [a + kern[t][s] * vj for a, vj in zip(row, v[s])]
        rows.append(row)
    return rows


def _ring(names):
    from sympy import QQ
    from sympy.polys.rings import ring

    ring_, *gens = ring(",".join(names), QQ)
    return ring_.one, gens


def _token_ring(lead, blocks):
    """QQ[lead, then per (prefix, width) in ``blocks`` the LENGTH x width generators prefix{t}_{i}].

    Returns (one, the ``lead`` generators, per block its LENGTH rows of ``width`` generators).
    """
    names = list(lead)
    for prefix, width in blocks:
        names += [f"{prefix}{t}_{i}" for t in range(LENGTH) for i in range(width)]
    one, gens = _ring(names)
    head, rest, rows = gens[: len(lead)], gens[len(lead) :], []
    for _, width in blocks:
        rows.append([rest[t * width : (t + 1) * width] for t in range(LENGTH)])
        rest = rest[LENGTH * width :]
    return one, head, rows


def _forms_agree(fq, fk, kern, v, one) -> bool:
    """Recurrent == parallel rows, for the numerator (values ``v``) and the denominator (v = 1)."""
    for vals in (v, [[one]] * LENGTH):
        lin, par = _linear_rows(fq, fk, vals, one), _kernel_rows(kern, vals, one)
        if any(a - b != 0 for ra, rb in zip(lin, par) for a, b in zip(ra, rb)):
            return False
    return True


# -- the record, one function per claim group ----------------------------------------------------
def _syms():
    """Symbols of the D3 statement and proofs (equal symbols compare equal)."""
    import sympy

    d, d_v = sympy.symbols("d d_v", integer=True, positive=True)
    return {
        "d": d,
        "d_v": d_v,
        "c": sympy.Symbol("c", positive=True),
        "x": sympy.Symbol("x"),
        "q": sympy.MatrixSymbol("q", d, 1),
        "ks": [sympy.MatrixSymbol(f"k{i}", d, 1) for i in range(1, LENGTH + 1)],
        "vs": [sympy.MatrixSymbol(f"v{i}", d_v, 1) for i in range(1, LENGTH + 1)],
    }


def _statement(rec) -> None:
    import sympy

    xs = _syms()["x"]
    # Matrix products over the tokens and the block feature map: hand-written templates
    # (derivations._latex) naming the claim that proves each; kappa_1 is a sympy object.
    rec.statement["first_order_term"] = tex(
        r"\tilde{q}_t^{T} \sum_{s \le t} \tilde{k}_s v_s^{T}"
        r" = \sum_{s \le t} (\tilde{q}_t \cdot \tilde{k}_s)\, v_s^{T}"
        r" \qquad (\tilde{q} = \sqrt{c}\, q,\ \tilde{k} = \sqrt{c}\, k)",
        claim="exchange of the feature and token sums (all T, d, any feature map)",
    )
    rec.statement["kappa_1"] = sympy.Eq(sympy.Function("kappa_1")(xs), 1 + xs)
    rec.statement["first_order_map"] = tex(
        r"\phi(x) = (1, \sqrt{c}\, x) \in \mathbb{R}^{d+1},"
        r" \qquad \phi(q) \cdot \phi(k) = 1 + c\, q \cdot k = \kappa_1(c\, q \cdot k)",
        claim="[1, sqrt(c) q] . [1, sqrt(c) k] = 1 + c q.k (all d)",
    )
    rec.statement["kernel_linear_attention"] = tex(
        r"o_t = \frac{\phi(q_t)^{T} S_t}{\phi(q_t)^{T} z_t}, \qquad"
        r" S_t = S_{t-1} + \phi(k_t)\, v_t^{T}, \quad z_t = z_{t-1} + \phi(k_t),"
        r" \quad S_0 = 0,\ z_0 = 0 \qquad (\phi(q_t)^{T} z_t \ne 0)",
        claim="normalized Taylor-1 attention == kernel linear attention with phi = [1, x~]",
    )


def _claim_first_order_term(rec, f) -> None:
    """1. The n = 1 term is unnormalized linear attention (weight 1, associativity, exchange)."""
    import sympy
    from sympy.simplify.simplify import factor_sum

    d, d_v, q, ks, vs = pick(_syms(), "d", "d_v", "q", "ks", "vs")
    rec.step(
        r"The $n = 1$ term of the Taylor numerator has weight taylor_coefficient(1) "
        r"$= 1 / 1! = 1$; by associativity and distributivity it is unnormalized linear "
        r"attention with the identity feature map on $\tilde{q}$, $\tilde{k}$:",
        rec.statement["first_order_term"],
    )
    rec.verify(
        "weight of the n = 1 term is 1",
        lambda: (
            fm.to_sympy(f["taylor_coefficient"](1)) == 1
            and fm.to_sympy(f["taylor_coefficient"](0)) == 1
        ),
        "taylor_coefficient(0) = taylor_coefficient(1) = 1",
    )

    def assoc():
        for length in range(1, LENGTH + 1):
            state = sum(
                (k * v.T for k, v in zip(ks[:length], vs[:length])), sympy.ZeroMatrix(d, d_v)
            )
            lhs = (q.T * state).expand()
            rhs = sum(
                ((q.T * k) * v.T for k, v in zip(ks[:length], vs[:length])),
                sympy.ZeroMatrix(1, d_v),
            )
            diff = sympy.simplify(lhs - rhs)
            if diff != sympy.ZeroMatrix(1, d_v):
                return False
        return True

    rec.verify(
        "q~^T sum_s k~_s v_s^T = sum_s (q~.k~_s) v_s^T",
        assoc,
        f"matrix symbols with symbolic d, d_v; T = 1..{LENGTH}",
    )
    qf, kf, vf = sympy.Function("Q"), sympy.Function("K"), sympy.Function("V")
    i_, s_ = sympy.symbols("i s", integer=True)
    t_ = sympy.Symbol("t", integer=True, positive=True)

    def exchange():
        inner = factor_sum(sympy.Sum(qf(i_) * kf(i_, s_) * vf(s_), (s_, 1, t_)))
        flat = sympy.Sum(qf(i_) * kf(i_, s_) * vf(s_), (s_, 1, t_), (i_, 1, d)).reorder((0, 1))
        swapped = factor_sum(sympy.Sum(flat.function, flat.limits[0]))
        return inner == qf(i_) * sympy.Sum(kf(i_, s_) * vf(s_), (s_, 1, t_)) and swapped == vf(
            s_
        ) * sympy.Sum(qf(i_) * kf(i_, s_), (i_, 1, d))

    rec.prove(
        "exchange of the feature and token sums (all T, d, any feature map)",
        exchange,
        "entries sum_i Q_i sum_s K_is V_s = sum_s V_s sum_i Q_i K_is; symbolic d, t; "
        "sympy factor_sum + Sum.reorder",
    )


def _claim_kappa_1(rec, f) -> None:
    """2. kappa_1(x) = 1 + x and the map [1, x~]: block product, sizes against the exports."""
    import sympy

    c, xs, q, ks = pick(_syms(), "c", "x", "q", "ks")
    rec.step(
        r"Orders 0 and 1: $\kappa_1$ is the first-order Taylor polynomial of $\exp$. The map "
        r"$\phi(x) = (1, \sqrt{c}\, x)$ has $\phi(q) \cdot \phi(k) = 1 + c\, q \cdot k = "
        r"\kappa_1(c\, q \cdot k)$ (block product, symbolic $d$).",
        rec.statement["kappa_1"],
    )
    rec.verify(
        "kappa_1(x) = 1 + x (exp series and exported coefficients)",
        lambda: (
            sympy.expand(fm.exp_taylor_polynomial(xs, 1) - (1 + xs)) == 0
            and sum(fm.to_sympy(f["taylor_coefficient"](n)) * xs**n for n in (0, 1)) == 1 + xs
        ),
        "sympy.series(exp) to order 1; taylor_coefficient(0..1)",
    )

    def block_identity():
        one = sympy.Identity(1)
        pq = sympy.BlockMatrix([[one], [sympy.sqrt(c) * q]])
        pk = sympy.BlockMatrix([[one], [sympy.sqrt(c) * ks[0]]])
        diff = sympy.simplify(sympy.block_collapse(pq.T * pk) - (one + c * q.T * ks[0]))
        return diff == sympy.ZeroMatrix(1, 1)

    rec.prove(
        "[1, sqrt(c) q] . [1, sqrt(c) k] = 1 + c q.k (all d)",
        block_identity,
        "block matrices with symbolic d; sympy block_collapse",
    )

    def map_matches_exports():
        for dd in (1, 2, 3, 5, 64):
            one, gens = _ring(["r"] + [f"x{i}" for i in range(dd)])
            feats = f["feature_map"](gens[1:], gens[0], one)
            if len(feats) != f["feature_dimension"]("taylor:1", dd):
                return False
            if not (len(feats) == dd + 1 == fm.feature_count(1, dd)):
                return False
        return True

    rec.verify(
        "phi(x) = [1, x~] has feature_dimension('taylor:1', d) = d + 1 = feature_count(1, d)",
        map_matches_exports,
        "d in (1, 2, 3, 5, 64)",
    )

    def dims():
        for dd in (1, 2, 3, 8, 64):
            ok = (
                f["feature_dimension"]("identity", dd) == dd
                and f["feature_dimension"]("elu1", dd) == dd
                and f["feature_dimension"]("relu", dd) == dd
                and f["feature_dimension"]("favor", dd, num_features=3 * dd) == 3 * dd
                and all(
                    f["feature_dimension"](f"taylor:{n}", dd, basis=b) == fm.feature_count(n, dd, b)
                    for n in range(4)
                    for b in fm.BASES
                )
            )
            if not ok:
                return False
        return True

    rec.verify(
        "feature_dimension matches each map's definition",
        dims,
        "d in (1, 2, 3, 8, 64); taylor:N (N <= 3) against feature_count (D1)",
    )


def _claim_normalized_first_order(rec, f) -> None:
    """3. Normalized first-order Taylor attention == kernel linear attention with [1, x~]."""
    import sympy
    from sympy import QQ

    rec.step(
        r"Normalized first-order Taylor attention $o_t = \sum_s \kappa_1(x_{t,s}) v_s / "
        r"\sum_s \kappa_1(x_{t,s})$ against kernel linear attention with "
        r"$\phi(x) = (1, \tilde{x})$ in recurrent form: numerator and denominator compared as "
        r"exact polynomials in $\mathbb{Q}[r, q, k, v]$, $r = \sqrt{c}$. The recurrent form is",
        rec.statement["kernel_linear_attention"],
    )
    tt = sympy.Dummy("t")
    kappa1 = [QQ.convert(fm.exp_taylor_polynomial(tt, 1).coeff(tt, n)) for n in (0, 1)]

    def first_order_equal(dd):
        one, (r,), (qq, kk, vv) = _token_ring(["r"], [("q", dd), ("k", dd), ("v", VALUE_DIM)])
        fq = [f["feature_map"](x, r, one) for x in qq]
        fk = [f["feature_map"](x, r, one) for x in kk]
        kern = [
            [
                kappa1[0] * one + kappa1[1] * r * r * sum(a * b for a, b in zip(qt, ks_))
                for ks_ in kk
            ]
            for qt in qq
        ]
        return _forms_agree(fq, fk, kern, vv, one)

    rec.verify(
        "normalized Taylor-1 attention == kernel linear attention with phi = [1, x~]",
        lambda: all(first_order_equal(dd) for dd in DIMS),
        f"T = {LENGTH} (causal rows t = 1..3), d in {DIMS}, d_v = {VALUE_DIM}; "
        "numerator and denominator separately",
    )


def _claim_any_feature_map(rec) -> None:
    """4. Kernel linear attention: state form == parallel form for symbolic feature values."""
    rec.step(
        r"Any feature map: with symbolic feature values $\phi(q_t)_i$, $\phi(k_s)_i$ "
        "(identity, elu+1 of Katharopoulos et al. 2020, relu, Taylor-N -- at N = 2 Based's map, "
        "D1 -- and FAVOR+ enter only through these values), the "
        r"recurrent state form equals the parallel form with kernel $\phi(q_t) \cdot "
        r"\phi(k_s)$.",
    )

    def generic_map(m):
        one, _, (fq, fk, vv) = _token_ring([], [("fq", m), ("fk", m), ("v", VALUE_DIM)])
        kern = [[sum(a * b for a, b in zip(a_, b_)) for b_ in fk] for a_ in fq]
        return _forms_agree(fq, fk, kern, vv, one)

    rec.verify(
        "kernel linear attention: state form == parallel form (symbolic features)",
        lambda: all(generic_map(m) for m in GENERIC_FEATURES),
        f"T = {LENGTH}, feature dimension m in {GENERIC_FEATURES}, d_v = {VALUE_DIM}",
    )


def derive(**wrong) -> Derivation:
    """Build the D3 record.

    Keyword overrides (wrong-statement tests): ``feature_map`` (signature ``(x, r, one) ->
    list`` with ``r = sqrt(c)``; e.g. ``lambda x, r, one: [r * xi for xi in x]`` drops the
    constant feature), ``taylor_coefficient``, ``feature_dimension``.

    Raises:
        TypeError: an unknown override name.
    """
    f = fm.resolve_overrides(
        wrong,
        {
            "feature_map": first_order_map,
            "taylor_coefficient": fm.taylor_coefficient,
            "feature_dimension": feature_dimension,
        },
    )
    rec = Derivation("D3", "Linear attention as the first-order truncation")
    rec.cite(
        "kernel linear attention o_t = phi(q_t)^T S_t / phi(q_t)^T z_t with its recurrent state, "
        "and the elu+1 feature map phi(x) = elu(x) + 1",
        rc.KATHAROPOULOS,
        "the form, its recurrent (RNN) reading and the elu+1 map are theirs; linear attention "
        "as the first-order Taylor truncation is the view of Mongaras & Larson 2025 (cited in "
        "D2); the identities and the checks below are this project's",
    )
    _statement(rec)
    _claim_first_order_term(rec, f)
    _claim_kappa_1(rec, f)
    _claim_normalized_first_order(rec, f)
    _claim_any_feature_map(rec)
    rec.exports = ["FEATURE_MAPS", "parse_feature_map", "feature_dimension"]
    rec.tables["feature_dimension_d64"] = (
        ["feature map", "m (symmetric)", "m (tensor)"],
        [
            [name, feature_dimension(name, 64), feature_dimension(name, 64, basis="tensor")]
            for name in ("identity", "elu1", "relu", "taylor:1", "taylor:2")
        ],
    )
    return rec


if __name__ == "__main__":
    from derivations._record import main_for

    main_for(derive)
