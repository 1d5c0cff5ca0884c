"""D21. Exact identities of attention's backward: the value gradients sum to the upstream
gradient, the key gradients of softmax sum to zero, and dV never reads delta.

For o_i = sum_j w_ij v_j over the visible keys of row i, w_ij = kappa(s_ij) / sum_l
kappa(s_il), s_ij = c q_i.k_j + b_ij (any mask, any additive score bias b: ALiBi, a window as a
mask), loss L with upstream gradient dO_i = dL/do_i. Results recorded here, each with checks
and the kernels for which a check fails:

* (a) sum_j dV_j = sum_{i: row i sees a key} dO_i for every normalized kernel kappa (softmax,
  Taylor-N, a linear feature map, one no claim names): dV = W^T dO, and each row of W sums to
  one. Proved for any row length with sympy; the whole backward verified on symbolic
  instances with kappa an undefined function. Unnormalized weights (sigmoid attention,
  unnormalized linear attention) break it (a counterexample).
* (b) sum_j dK_j = 0 for softmax under any mask and additive bias: translating every key by
  the same t adds c q_i.t to the whole row i, softmax is shift invariant, so L does not
  change and its directional derivative sum_j dK_j . t vanishes for every t. Proved with
  sympy (shift invariance for any row length; the translation's per-row constant);
  verified through the whole backward on symbolic instances. It fails for a softcap (the cap
  of a shifted row is not the shifted cap), Taylor-N and a linear feature map
  (counterexamples at exact rational points). With grouped kv heads the sum runs over the
  keys of one kv head, which every query head of its group reads.
* (c) FlashAttention-2's backward, dV = P^T dO, dP = dO V^T, dS = P o (dP - delta), delta_i =
  rowsum(dO o O)_i: dV does not depend on delta, dK does (proved); sum_j dS_ij =
  Delta_true_i - delta_i, so sum_j dK_j = c sum_i (Delta_true_i - delta_i) q_i exposes a wrong
  delta while dV stays right. A wrong log-sum-exp changes P and so dV as well (proved): an
  error confined to dQ, dK points at delta, dP or dS, not at the LSE.

Numeric exports (plain Python): ``identity_applies``.
"""

from __future__ import annotations

from derivations._latex import tex
from derivations._record import Derivation

#: kernels with normalized weights (identity (a)), as the catalogue's claim names them
NORMALIZED_KERNELS = ("softmax", "taylor", "linear", "unknown")
#: the kernels whose key gradients sum to zero (identity (b)): softmax without a softcap
SHIFT_INVARIANT_KERNELS = ("softmax",)
#: symbolic instance sizes (T queries, S keys, d = d_v) and their visibility masks
INSTANCE_T, INSTANCE_S, INSTANCE_D = 2, 3, 2
INSTANCE_MASKS = {
    "full": ((1, 1, 1), (1, 1, 1)),
    "causal bottom-right": ((1, 1, 0), (1, 1, 1)),
    "window + empty row": ((0, 1, 1), (0, 0, 0)),
}

VALUE_SUM = "sum_j dV_j = sum of dO over rows with a visible key, for normalized weights"
VALUE_SUM_INSTANCES = "identity (a) through the whole backward, kappa an undefined function"
VALUE_SUM_FAILS = "identity (a) fails for unnormalized weights (sigmoid, unnormalized linear)"
KEY_SUM = "sum_j dK_j = 0 for softmax under any mask and additive score bias"
KEY_SUM_INSTANCES = "identity (b) through the whole backward, symbolic q, k, v, dO, bias"
KEY_SUM_FAILS = "identity (b) fails for a softcap, Taylor-2 and a linear feature map"
DELTA_FREE = "dV does not read delta; dK does; a wrong LSE changes dV too"


def identity_applies(kernel: str, softcap: bool = False) -> tuple[bool, bool]:
    """(a holds, b holds) for a claimed kernel name (D21): (a) for the normalized kernels
    :data:`NORMALIZED_KERNELS`, (b) for softmax without a softcap.

    Raises:
        TypeError: ``kernel`` not a str or ``softcap`` not a bool.
    """
    if not isinstance(kernel, str):
        raise TypeError(f"kernel: expected a str, got {type(kernel).__name__}")
    if not isinstance(softcap, bool):
        raise TypeError(f"softcap: expected a bool, got {type(softcap).__name__}")
    return kernel in NORMALIZED_KERNELS, kernel in SHIFT_INVARIANT_KERNELS and not softcap


# -- symbolic instances -----------------------------------------------------------------------
def _symbols():
    import sympy

    T, S, d = INSTANCE_T, INSTANCE_S, INSTANCE_D
    q = sympy.Matrix(T, d, lambda i, m: sympy.Symbol(f"q{i}{m}", real=True))
    k = sympy.Matrix(S, d, lambda j, m: sympy.Symbol(f"k{j}{m}", real=True))
    v = sympy.Matrix(S, d, lambda j, m: sympy.Symbol(f"v{j}{m}", real=True))
    g = sympy.Matrix(T, d, lambda i, m: sympy.Symbol(f"g{i}{m}", real=True))
    b = sympy.Matrix(T, S, lambda i, j: sympy.Symbol(f"b{i}{j}", real=True))
    c = sympy.Symbol("c", positive=True)
    return q, k, v, g, b, c


def _loss(q, k, v, g, b, c, mask, weight, normalized=True):
    """L = sum_i dO_i . o_i of one head (rows with no visible key give o_i = 0)."""
    total = 0
    for i in range(q.rows):
        keys = [j for j in range(k.rows) if mask[i][j]]
        if not keys:
            continue
        w = {j: weight(q[i, :], k[j, :], c, b[i, j]) for j in keys}
        den = sum(w.values()) if normalized else 1
        for m in range(v.cols):
            total += g[i, m] * sum(w[j] * v[j, m] for j in keys) / den
    return total


def _grad_sums(loss, k, v):
    """(sum_j dK_j, sum_j dV_j) as lists over the d (resp. d_v) columns."""
    import sympy

    dk = [sum(sympy.diff(loss, k[j, m]) for j in range(k.rows)) for m in range(k.cols)]
    dv = [sum(sympy.diff(loss, v[j, m]) for j in range(v.rows)) for m in range(v.cols)]
    return dk, dv


def _zero_test(expr):
    """``expr`` as one cancelled fraction with each exp(.) a positive symbol: exactly 0 iff
    ``expr`` is 0 as a rational function of the exponentials (the identities hold so)."""
    import sympy

    atoms = sorted(expr.atoms(sympy.exp), key=str)
    names = {a: sympy.Symbol(f"E{n}", positive=True) for n, a in enumerate(atoms)}
    return sympy.cancel(sympy.together(expr.xreplace(names)))


def _softmax(qi, kj, c, bij):
    import sympy

    return sympy.exp(c * (qi.dot(kj)) + bij)


# -- claims -----------------------------------------------------------------------------------
def _claim_value_sum(rec, f) -> None:
    import sympy

    a = sympy.IndexedBase("a", positive=True)
    j, n = sympy.symbols("j n", integer=True, positive=True)
    rec.step(
        r"$o_i = \sum_j w_{ij} v_j$ is linear in $v$ with coefficients $w_{ij}$ that do not read "
        r"$v$, so $dV_j = \sum_i w_{ij}\, dO_i$ ($dV = W^\top dO$). Summing over $j$ and "
        r"exchanging the sums, $\sum_j dV_j = \sum_i (\sum_j w_{ij})\, dO_i$, and each row of "
        r"normalized weights sums to one, $\sum_j \kappa_j / \sum_l \kappa_l = 1$ for any row "
        r"length $n$ (rows with no visible key carry no weight and no $dO_i$ term).",
        sympy.Eq(sympy.Sum(a[j] / sympy.Sum(a[j], (j, 1, n)), (j, 1, n)), 1),
    )
    rec.prove(
        VALUE_SUM,
        lambda: sympy.simplify(
            sympy.summation(f["row"](a, j, n), (j, 1, n)) - 1
        ) == 0,
        "sympy: sum_{j=1}^n a_j / sum_l a_l = 1 for symbolic n and an indexed a > 0",
    )  # fmt: skip


def _claim_value_instances(rec) -> None:
    import sympy

    kappa = sympy.Function("kappa", positive=True)

    def instances():
        q, k, v, g, b, c = _symbols()
        for mask in INSTANCE_MASKS.values():
            loss = _loss(q, k, v, g, b, c, mask, lambda qi, kj, c, bij: kappa(c * qi.dot(kj) + bij))
            _, dv = _grad_sums(loss, k, v)
            for m in range(v.cols):
                rhs = sum(g[i, m] for i in range(q.rows) if any(mask[i]))
                if sympy.cancel(dv[m] - rhs) != 0:
                    return False
        return True

    rec.verify(
        VALUE_SUM_INSTANCES,
        instances,
        f"T = {INSTANCE_T}, S = {INSTANCE_S}, d = d_v = {INSTANCE_D}, masks "
        f"{list(INSTANCE_MASKS)}, symbolic q, k, v, dO, c and bias b_ij, kappa undefined: sympy "
        "diff of L = sum_i dO_i . o_i and cancel",
    )

    def fails():
        q, k, v, g, b, c = _symbols()
        mask = INSTANCE_MASKS["full"]
        sig = lambda qi, kj, c, bij: 1 / (1 + sympy.exp(-(c * qi.dot(kj) + bij)))  # noqa: E731
        lin = lambda qi, kj, c, bij: 1 + c * qi.dot(kj)  # noqa: E731  (elu + 1 on x > 0)
        point = {s: sympy.Rational(1, 3) for s in (*q, *k, *b)} | {c: 1}
        for w in (sig, lin):
            _, dv = _grad_sums(_loss(q, k, v, g, b, c, mask, w, normalized=False), k, v)
            r = sympy.expand((dv[0] - sum(g[i, 0] for i in range(q.rows))).subs(point))
            if r == 0:
                return False
        return True

    rec.verify(
        VALUE_SUM_FAILS,
        fails,
        "sigmoid weights and 1 + c q.k without the normalizer, full mask, every q, k, b = 1/3, "
        "c = 1: the residual sum_j dV_j - sum_i dO_i is a nonzero expression in dO",
    )


def _claim_key_sum(rec, f) -> None:
    import sympy

    s = sympy.IndexedBase("s", real=True)
    j, n, ell = sympy.symbols("j n l", integer=True, positive=True)
    x = sympy.Symbol("x", real=True)
    qv = sympy.IndexedBase("q", real=True)
    kv = sympy.IndexedBase("k", real=True)
    tv = sympy.IndexedBase("t", real=True)
    m, d = sympy.symbols("m d", integer=True, positive=True)
    c = sympy.Symbol("c", positive=True)
    rec.step(
        r"Translate every key by one vector $t$: $s_{ij} \to s_{ij} + c\, q_i\cdot t$, the same "
        r"amount for every key of row $i$ (the bias, the mask, ALiBi and a window do not read "
        r"$k$). Softmax is shift invariant for any row length, so $L(k + t) = L(k)$ and "
        r"$0 = \frac{d}{d\epsilon} L(k + \epsilon t)|_0 = (\sum_j dK_j)\cdot t$ for every $t$.",
        sympy.Eq(
            sympy.exp(s[ell] + x) / sympy.Sum(sympy.exp(s[j] + x), (j, 1, n)),
            sympy.exp(s[ell]) / sympy.Sum(sympy.exp(s[j]), (j, 1, n)),
        ),
    )

    def general():
        kern = f["kernel"]
        lhs = kern(s[ell] + x) / sympy.Sum(kern(s[j] + x), (j, 1, n))
        rhs = kern(s[ell]) / sympy.Sum(kern(s[j]), (j, 1, n))
        shift_inv = sympy.simplify(sympy.factor_terms(sympy.expand(lhs)) - rhs) == 0
        added = sympy.simplify(
            c * sympy.Sum(sympy.expand(qv[m] * (kv[j, m] + tv[m])), (m, 1, d)).expand()
            - c * sympy.Sum(qv[m] * kv[j, m], (m, 1, d))
        )
        return shift_inv and j not in added.free_symbols and added != 0

    rec.prove(
        KEY_SUM,
        general,
        "sympy: exp(s_l + x) / sum_j exp(s_j + x) = exp(s_l) / sum_j exp(s_j) for symbolic n; "
        "sum_m q_m (k_jm + t_m) - sum_m q_m k_jm is free of j (symbolic d)",
    )


def _claim_key_instances(rec) -> None:
    import sympy

    def instances():
        q, k, v, g, b, c_ = _symbols()
        for mask in INSTANCE_MASKS.values():
            dk, _ = _grad_sums(_loss(q, k, v, g, b, c_, mask, _softmax), k, v)
            if any(_zero_test(e) != 0 for e in dk):
                return False
        return True

    rec.verify(
        KEY_SUM_INSTANCES,
        instances,
        f"softmax, T = {INSTANCE_T}, S = {INSTANCE_S}, d = d_v = {INSTANCE_D}, masks "
        f"{list(INSTANCE_MASKS)}, symbolic q, k, v, dO, c and bias b_ij: sympy diff, then "
        "cancel with each exp a symbol",
    )

    def fails():
        q, k, v, g, b, c_ = _symbols()
        mask = INSTANCE_MASKS["full"]
        cap = sympy.Integer(2)
        kernels = {
            "softcap": lambda qi, kj, c, bij: sympy.exp(cap * sympy.tanh(c * qi.dot(kj) / cap)),
            "taylor-2": lambda qi, kj, c, bij: 1 + (c * qi.dot(kj)) + (c * qi.dot(kj)) ** 2 / 2,
            "linear elu+1": lambda qi, kj, c, bij: sum((1 + a) * (1 + e) for a, e in zip(qi, kj)),
        }
        point = {sym: sympy.Rational(p, 5) for p, sym in enumerate((*q, *k, *v), 1)}
        point |= {sym: 1 for sym in g} | {c_: 1}
        eps = sympy.Symbol("epsilon", real=True)
        moved = {k[j, 0]: point[k[j, 0]] + eps for j in range(k.rows)}  # every key by eps e_0
        for kern in kernels.values():
            loss = _loss(q, k, v, g, b, c_, mask, kern).xreplace({**point, **moved})
            val = sympy.diff(loss, eps).subs(eps, 0)  # (sum_j dK_j)_0 at the point
            if not (abs(sympy.N(val, 30)) > sympy.Rational(1, 10**6)):
                return False
        return True

    rec.verify(
        KEY_SUM_FAILS,
        fails,
        "softcap C = 2 on exp, 1 + x + x^2/2, and the feature map elu(x) + 1 on x > 0 "
        "(x + 1), full mask, q, k, v at the rationals 1/5, 2/5, ..., dO = 1, c = 1: the first "
        "column of sum_j dK_j is nonzero (30-digit evaluation)",
    )


def _claim_delta(rec, f) -> None:
    import sympy

    T, S = 2, 2
    P = sympy.Matrix(T, S, lambda i, j: sympy.Symbol(f"P{i}{j}", positive=True))
    dO = sympy.Matrix(T, 1, lambda i, _: sympy.Symbol(f"g{i}", real=True))
    V = sympy.Matrix(S, 1, lambda j, _: sympy.Symbol(f"v{j}", real=True))
    Q = sympy.Matrix(T, 1, lambda i, _: sympy.Symbol(f"q{i}", real=True))
    delta = sympy.Matrix(T, 1, lambda i, _: sympy.Symbol(f"delta{i}", real=True))
    lse = sympy.Symbol("lse", real=True)
    c = sympy.Symbol("c", positive=True)
    rec.step(
        r"FlashAttention-2's backward: $dV = P^\top dO$, $dP = dO\,V^\top$, "
        r"$dS = P \circ (dP - \delta)$, $dQ = c\, dS\, K$, $dK = c\, dS^\top Q$ with "
        r"$\delta_i = \sum_j P_{ij} dP_{ij} = dO_i\cdot o_i$. $dV$ reads $P$ and $dO$ only; "
        r"$\sum_j dS_{ij} = \sum_j P_{ij} dP_{ij} - \delta_i \sum_j P_{ij}$, zero for the right "
        r"$\delta$ and normalized $P$, and $c \sum_i (\Delta_i - \hat\delta_i)\, q_i$ summed into "
        r"$dK$ for a wrong $\hat\delta$. $P = e^{s - \mathrm{lse}}$ reads the LSE, so a wrong "
        r"LSE moves $dV$ as well.",
    )

    def check():
        Pl = P.applyfunc(lambda p: p * sympy.exp(-lse))  # P recomputed from an LSE shifted by lse
        dV = f["dv"](Pl, dO, delta)
        dP = dO * V.T
        dS = Pl.multiply_elementwise(dP - delta * sympy.ones(1, S))
        dK = c * dS.T * Q
        no_delta = all(sympy.diff(e, s) == 0 for e in dV for s in delta)
        reads = any(sympy.diff(e, s) != 0 for e in dK for s in delta)
        lse_moves = any(sympy.diff(e, lse) != 0 for e in dV)
        return no_delta and reads and lse_moves

    rec.prove(
        DELTA_FREE,
        check,
        "sympy diff of FlashAttention-2's formulas (symbolic P, dO, V, Q, delta, and an LSE "
        "offset lse): d dV / d delta = 0, d dK / d delta != 0, d dV / d lse != 0",
    )


def derive(**wrong) -> Derivation:
    """Build the D21 record.

    Keyword overrides (wrong-statement tests): ``row`` (a normalized weight of row length n:
    ``(a, j, n) -> a_j / sum a``; wrong: a dropped normalizer), ``kernel`` (the shift-invariant
    score kernel; wrong: a softcapped exp), ``dv`` (FlashAttention-2's dV from (P, dO, delta);
    wrong: one that reads delta).

    Raises:
        TypeError: an unknown override name.
    """
    import sympy

    from derivations.feature_maps import resolve_overrides

    f = resolve_overrides(
        wrong,
        {
            "row": lambda a, j, n: a[j] / sympy.Sum(a[j], (j, 1, n)),
            "kernel": sympy.exp,
            "dv": lambda P, dO, delta: P.T * dO,
        },
    )
    rec = Derivation("D21", "Exact identities of attention's backward")
    rec.cite(
        "FlashAttention-2's backward (dV = P^T dO, delta = rowsum(dO o O), dS = P o (dP - "
        "delta)); the shift invariance of softmax",
        "Dao, 'FlashAttention-2', arXiv:2307.08691, Algorithm 2; Bridle, 'Probabilistic "
        "interpretation of feedforward classification network outputs', 1990 (softmax)",
        "the formulas; the identities (a), (b), their kernel conditions, counterexamples and "
        "the reading of delta are this project's",
    )
    rec.statement["value sum"] = tex(
        r"\sum_j dV_j = \sum_{i:\ \exists j\ \mathrm{visible}} dO_i \quad (\textstyle\sum_j "
        r"w_{ij} = 1)",
        claim=VALUE_SUM,
    )
    rec.statement["key sum"] = tex(
        r"\sum_j dK_j = c \sum_i \Big(\sum_j dS_{ij}\Big) q_i = 0 \quad (\text{softmax, any mask "
        r"and additive bias, no softcap})",
        claim=KEY_SUM,
    )
    rec.statement["delta"] = tex(
        r"\partial\, dV / \partial \delta = 0,\quad \sum_j dK_j = c \sum_i (\Delta_i - "
        r"\hat\delta_i)\, q_i",
        claim=DELTA_FREE,
    )
    _claim_value_sum(rec, f)
    _claim_value_instances(rec)
    _claim_key_sum(rec, f)
    _claim_key_instances(rec)
    _claim_delta(rec, f)
    rec.exports = ["identity_applies"]
    return rec


if __name__ == "__main__":
    from derivations._record import main_for

    main_for(derive)
