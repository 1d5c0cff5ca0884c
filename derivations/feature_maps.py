"""D1. The exponential kernel as a sum of tensor-power kernels.

Numeric exports (plain Python, no sympy at import) used by ``verify/``:
``taylor_coefficient``, ``taylor_coefficients``, ``multi_indices``, ``monomial_weight``,
``symmetric_block_size``, ``tensor_block_size``, ``feature_count``.

Convention: exp(c q.k) = sum_alpha Phi(q)_alpha Phi(k)_alpha with
Phi(x)_alpha = (sqrt(c) x)^alpha / sqrt(alpha!), so ``monomial_weight(alpha) = 1/alpha!`` is the
*squared* feature coefficient (it already contains the 1/n! of the Taylor series). The tensor map
up to order 2, (1, x, x (x) x / sqrt(2)), is Based's Taylor feature map (Arora et al. 2024, cited
in the record).
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction

from derivations._latex import tex
from derivations._record import Derivation, pick
from derivations._validate import check_choice, check_dim, check_order

BASES = ("symmetric", "tensor")
#: the cited order-2 map (D1's tensor map at N = 2)
BASED = (
    "the 1/sqrt(2)-weighted Taylor-2 feature map phi(x) = (1, x, x (x) x / sqrt(2)): "
    "phi(q).phi(k) = 1 + q.k + (q.k)^2 / 2"
)


def taylor_coefficient(n: int) -> Fraction:
    """Coefficient 1/n! of x^n in exp(x) (D1). Exact ``Fraction``.

    Raises:
        TypeError, ValueError: ``n`` is not a non-negative int.
    """
    return Fraction(1, math.factorial(check_order("n", n)))


def taylor_coefficients(order: int) -> list[Fraction]:
    """[1/0!, 1/1!, ..., 1/N!] for N = ``order``: the coefficients of kappa_N."""
    return [taylor_coefficient(n) for n in range(check_order("order", order) + 1)]


def multi_indices(n: int, d: int) -> list[tuple[int, ...]]:
    """All multi-indices alpha of length ``d`` with |alpha| = ``n``, in canonical order.

    The order is that of ``itertools.combinations_with_replacement(range(d), n)``: the sorted
    index tuple (i_1 <= ... <= i_n) is mapped to its exponent vector alpha. Its length is
    ``symmetric_block_size(n, d)`` = C(n+d-1, n).
    """
    check_order("n", n)
    check_dim("d", d)
    out = []
    for combo in itertools.combinations_with_replacement(range(d), n):
        alpha = [0] * d
        for i in combo:
            alpha[i] += 1
        out.append(tuple(alpha))
    return out


def monomial_weight(alpha: tuple[int, ...]) -> Fraction:
    """1/alpha! = 1/prod(alpha_i!): the squared coefficient of x^alpha in the symmetric map."""
    if not all(isinstance(a, int) and not isinstance(a, bool) and a >= 0 for a in alpha):
        raise ValueError(f"alpha: expected a tuple of non-negative ints, got {alpha!r}")
    return Fraction(1, math.prod(math.factorial(a) for a in alpha))


def symmetric_block_size(n: int, d: int) -> int:
    """Number of order-n symmetric monomial features: C(n+d-1, n) (D1, D5)."""
    return math.comb(check_order("n", n) + check_dim("d", d) - 1, n)


def tensor_block_size(n: int, d: int) -> int:
    """Number of order-n tensor-power features: d^n (D1, D5)."""
    return check_dim("d", d) ** check_order("n", n)


def feature_count(order: int, d: int, basis: str = "symmetric") -> int:
    """Total features of orders 0..``order``: C(N+d, N) (symmetric) or sum_n d^n (tensor).

    Raises:
        ValueError: ``basis`` is not ``"symmetric"`` or ``"tensor"``.
    """
    check_order("order", order)
    check_choice("basis", basis, BASES)
    block = symmetric_block_size if basis == "symmetric" else tensor_block_size
    return sum(block(n, d) for n in range(order + 1))


# ---------------------------------------------------------------------------------------------
# The derivation record (sympy is imported inside the functions: ``import derivations`` is cheap)
# ---------------------------------------------------------------------------------------------

#: names ``derive`` accepts as keyword overrides (each replaces the export of the same name;
#: ``feature_map`` replaces the symmetric feature-map builder)
OVERRIDABLE = (
    "taylor_coefficient",
    "monomial_weight",
    "multi_indices",
    "symmetric_block_size",
    "tensor_block_size",
    "feature_count",
    "feature_map",
)

#: instances of the exact kernel identity: d <= 3, N <= 4 (exact expansion stays fast)
KERNEL_DIMS = (1, 2, 3)
KERNEL_ORDERS = (0, 1, 2, 3, 4)


def resolve_overrides(wrong: dict, defaults: dict) -> dict:
    """Merge ``derive(**wrong)`` keyword overrides into ``defaults`` (name -> callable).

    Shared by the D1-D5 modules. Raises ``TypeError`` naming the unknown keyword.
    """
    unknown = sorted(set(wrong) - set(defaults))
    if unknown:
        raise TypeError(
            f"derive: unexpected override(s) {unknown}; expected a subset of {sorted(defaults)}"
        )
    return {**defaults, **wrong}


def to_sympy(value):
    """Exact sympy number from an int / Fraction / sympy value (floats are kept as Float)."""
    import sympy

    if isinstance(value, Fraction):
        return sympy.Rational(value.numerator, value.denominator)
    return sympy.sympify(value)


def symmetric_feature_map(x, order, c, *, indices=multi_indices, weight=monomial_weight):
    """Symbolic symmetric monomial map [c^(|a|/2) x^a / sqrt(a!)] over |a| <= ``order``.

    ``x`` is a list of sympy expressions (one vector), ``c`` the (positive) score scale. Built
    from the exports ``multi_indices`` (``indices``) and ``monomial_weight`` (``weight``, 1/a!),
    so a wrong export gives a wrong map. Used by D1-D3.
    """
    import sympy

    feats = []
    for n in range(order + 1):
        for alpha in indices(n, len(x)):
            mono = sympy.Mul(*[xi**ai for xi, ai in zip(x, alpha)])
            feats.append(sympy.sqrt(c) ** n * sympy.sqrt(to_sympy(weight(alpha))) * mono)
    return feats


def tensor_feature_map(x, order, c, *, coefficient=taylor_coefficient):
    """Symbolic tensor-power map [sqrt(c^n / n!) x^(tensor n)] for n <= ``order`` (flattened)."""
    import sympy

    feats = []
    for n in range(order + 1):
        w = sympy.sqrt(to_sympy(coefficient(n))) * sympy.sqrt(c) ** n
        for idx in itertools.product(range(len(x)), repeat=n):
            feats.append(w * sympy.Mul(*[x[i] for i in idx]))
    return feats


def elementwise_square_map(x, order, c):
    """The *wrong* element-wise-square map (a published bug class), per order n:
    [(sqrt(c) x_i)^n / sqrt(n!)] for each entry x_i instead of the tensor power x^(tensor n).

    Exact only for d = 1 (or order <= 1); kept here so the wrong-statement tests can inject it.
    """
    import sympy

    feats = [sympy.Integer(1)]
    for n in range(1, order + 1):
        feats += [(sympy.sqrt(c) * xi) ** n / sympy.sqrt(sympy.factorial(n)) for xi in x]
    return feats


@functools.cache
def _exp_series_coefficients(order: int) -> tuple:
    """Coefficients of sympy's Maclaurin series of exp up to x^order (cached: series is slow)."""
    import sympy

    t = sympy.Symbol("t")
    poly = sympy.series(sympy.exp(t), t, 0, order + 1).removeO()
    return tuple(poly.coeff(t, n) for n in range(order + 1))


def exp_taylor_polynomial(x, order):
    """kappa_N(x) from sympy's own Maclaurin series of exp (independent of the exports)."""
    return sum(c * x**n for n, c in enumerate(_exp_series_coefficients(order)))


def hockey_stick_step(closed_form) -> bool:
    """Induction step of sum_{m<=n} C(m+e-1, m) = F(n, e) for symbolic n, e (Pascal's rule).

    ``closed_form(n, e)`` is the claimed right-hand side (C(n+e, n) when right). Returns True iff
    F(0, e) = 1 and F(n, e) + C(n+e, n+1) - F(n+1, e) simplifies to 0 for general n >= 0, e >= 1.
    """
    import sympy

    n = sympy.Symbol("n", integer=True, nonnegative=True)
    e = sympy.Symbol("e", integer=True, positive=True)
    base = sympy.simplify(closed_form(sympy.Integer(0), e) - 1) == 0
    step = closed_form(n, e) + sympy.binomial(n + 1 + e - 1, n + 1) - closed_form(n + 1, e)
    return bool(base and sympy.simplify(sympy.gammasimp(step)) == 0)


# -- the record, one function per claim group ----------------------------------------------------
def _syms():
    """The symbols of the D1 statement (recreated per claim: equal symbols compare equal)."""
    import sympy

    return {
        "c": sympy.Symbol("c", positive=True),
        "n": sympy.Symbol("n", integer=True, nonnegative=True),
        "N": sympy.Symbol("N", integer=True, nonnegative=True),
        "d": sympy.Symbol("d", integer=True, positive=True),
        "i": sympy.Symbol("i", integer=True),
        "s": sympy.Symbol("s"),
    }


def _dot():
    """q.k as the sympy sum over the d coordinates (the statement's symbols)."""
    import sympy

    d, i = pick(_syms(), "d", "i")
    return sympy.Sum(sympy.IndexedBase("q")[i] * sympy.IndexedBase("k")[i], (i, 1, d))


def _builders(f):
    """The symmetric and tensor-power map builders ``(x, order, c) -> list`` from the overrides."""
    if f["feature_map"] is None:

        def f_sym(x, order, c):
            return symmetric_feature_map(
                x, order, c, indices=f["multi_indices"], weight=f["monomial_weight"]
            )

    else:
        f_sym = f["feature_map"]

    def f_ten(x, order, c):
        return tensor_feature_map(x, order, c, coefficient=f["taylor_coefficient"])

    return f_sym, f_ten


def _statement(rec) -> None:
    import sympy

    c, n, big_n, d, i, s = pick(_syms(), "c", "n", "N", "d", "i", "s")
    qk = _dot()
    rec.statement["exp_series"] = sympy.Eq(
        sympy.exp(s), sympy.Sum(s**n / sympy.factorial(n), (n, 0, sympy.oo))
    )
    # The tensor power, multi-indices and feature maps have no sympy object: hand-written
    # templates (derivations._latex) whose sympy parts are slots and which name their claim.
    rec.statement["tensor_power"] = tex(
        r"@qk = \langle q^{\otimes n}, k^{\otimes n} \rangle"
        r" \qquad (q, k \in \mathbb{R}^d,\ n \ge 0)",
        claim="<q^(tensor n), k^(tensor n)> = (q.k)^n for all n, d",
        qk=qk**n,
    )
    rec.statement["multinomial"] = tex(
        r"@qk = \sum_{\alpha \in \mathbb{N}^d,\ \lvert\alpha\rvert = n}"
        r" \frac{n!}{\alpha!}\, q^{\alpha} k^{\alpha}",
        claim="multinomial theorem (q.k)^n = sum_{|alpha|=n} n!/alpha! q^alpha k^alpha",
        qk=qk**n,
    )
    rec.statement["symmetric_map"] = tex(
        r"\Phi(x)_{\alpha} = \frac{c^{\lvert\alpha\rvert/2}\, x^{\alpha}}{\sqrt{\alpha!}}"
        r" \qquad (\alpha \in \mathbb{N}^d,\ \lvert\alpha\rvert \le N,\ c > 0)",
        claim="symmetric map: <Phi(q), Phi(k)> = kappa_N(c q.k)",
    )
    rec.statement["tensor_map"] = tex(
        r"\Phi_n(x) = \frac{(\sqrt{c}\, x)^{\otimes n}}{\sqrt{n!}}"
        r" \in (\mathbb{R}^d)^{\otimes n} \qquad (0 \le n \le N,\ c > 0)",
        claim="tensor-power map: <Phi(q), Phi(k)> = kappa_N(c q.k)",
    )
    rec.statement["kappa_N"] = sympy.Eq(
        sympy.Function("kappa_N")(s), sympy.Sum(s**n / sympy.factorial(n), (n, 0, big_n))
    )
    rec.statement["block_sizes"] = tex(
        r"\left\lvert \lbrace \alpha \in \mathbb{N}^d : \lvert\alpha\rvert = n \rbrace"
        r" \right\rvert = @sym, \qquad \left\lvert [d]^n \right\rvert = @ten",
        claim="symmetric block size = C(n+d-1, n) for all n, d",
        sym=sympy.binomial(n + d - 1, n),
        ten=sympy.Pow(d, n, evaluate=False),
    )


def _claim_taylor_coefficients(rec, f) -> None:
    """1. The exported Taylor coefficients are sympy's Maclaurin coefficients of exp."""
    rec.step(
        r"$\exp$ is entire; its Maclaurin coefficients are $1 / n!$. The export "
        "taylor_coefficient(n) must equal sympy's series coefficient.",
        rec.statement["exp_series"],
    )
    series = _exp_series_coefficients(20)  # sympy.series(exp(s), s, 0, 21), n = 0..20
    rec.verify(
        "taylor_coefficient(n) = [s^n] exp(s)",
        lambda: all(to_sympy(f["taylor_coefficient"](k)) == c for k, c in enumerate(series)),
        "n = 0..20 against sympy.series(exp(s), s, 0, 21)",
    )


def _claim_tensor_power(rec) -> None:
    """2. <q^(tensor n), k^(tensor n)> = (q.k)^n for general d and n (induction)."""
    import sympy

    n, d, i, s = pick(_syms(), "n", "d", "i", "s")
    a_fn, b_fn = sympy.Function("a"), sympy.Function("b")
    big_i = sympy.Symbol("I", integer=True)
    m_sym = sympy.Symbol("M", integer=True, positive=True)
    rec.step(
        r"Tensor power, by induction on $n$: index $[d]^{n+1}$ as $[d]^n \times [d]$. With "
        r"$a(I) = (q^{\otimes n})_I (k^{\otimes n})_I$ and $b(i) = q_i k_i$ the double sum "
        r"factors, so $\langle q^{\otimes (n+1)}, k^{\otimes (n+1)} \rangle = \langle "
        r"q^{\otimes n}, k^{\otimes n} \rangle\, (q \cdot k)$; with $\langle q^{\otimes 0}, "
        r"k^{\otimes 0} \rangle = 1$ this gives $(q \cdot k)^n$:",
        sympy.Eq(
            sympy.Sum(a_fn(big_i) * b_fn(i), (i, 1, d), (big_i, 1, m_sym)),
            sympy.Sum(a_fn(big_i), (big_i, 1, m_sym)) * sympy.Sum(b_fn(i), (i, 1, d)),
        ),
    )

    def tensor_induction():
        from sympy.simplify.simplify import factor_sum

        inner = factor_sum(sympy.Sum(a_fn(big_i) * b_fn(i), (i, 1, d)))
        outer = factor_sum(sympy.Sum(inner, (big_i, 1, m_sym)))
        step_ok = (
            outer - sympy.Sum(a_fn(big_i), (big_i, 1, m_sym)) * sympy.Sum(b_fn(i), (i, 1, d))
        ) == 0
        p = sympy.Function("P")
        sol = sympy.rsolve(p(n + 1) - p(n) * s, p(n), {p(0): 1})
        return bool(step_ok and sympy.simplify(sol - s**n) == 0)

    rec.prove(
        "<q^(tensor n), k^(tensor n)> = (q.k)^n for all n, d",
        tensor_induction,
        "symbolic d and number of index tuples M; sympy factor_sum + rsolve",
    )


def _claim_multinomial(rec, f) -> None:
    """3. The multinomial theorem (cited) and the exported monomial weights (enumeration)."""
    rec.step(
        r"Grouping the $d^n$ index tuples $I$ by their count vector $\alpha$ "
        r"($\lvert \alpha \rvert = n$): the number of tuples with counts $\alpha$ is the "
        r"multinomial coefficient $n! / \alpha!$, so",
        rec.statement["multinomial"],
    )
    rec.cite(
        "multinomial theorem (q.k)^n = sum_{|alpha|=n} n!/alpha! q^alpha k^alpha",
        "NIST DLMF, Sec. 26.4 (multinomial coefficients, eq. 26.4.9); formal proof in "
        "Lean mathlib, Mathlib/Data/Nat/Choose/Multinomial.lean",
        "general n, d",
    )

    def multinomial_counts():
        for dd in (1, 2, 3):
            for nn in range(6):
                counts: dict[tuple[int, ...], int] = {}
                for idx in itertools.product(range(dd), repeat=nn):
                    alpha = tuple(idx.count(j) for j in range(dd))
                    counts[alpha] = counts.get(alpha, 0) + 1
                for alpha, cnt in counts.items():
                    if Fraction(cnt) != math.factorial(nn) * Fraction(f["monomial_weight"](alpha)):
                        return False
        return True

    rec.verify(
        "#{I in [d]^n with counts alpha} = n! * monomial_weight(alpha)",
        multinomial_counts,
        "enumeration, d = 1..3, n = 0..5",
    )


def _claim_block_sizes(rec, f) -> None:
    """4. Block sizes C(n+d-1, n) and d^n: proved by recursion, exports checked by enumeration."""
    import sympy

    n = _syms()["n"]
    rec.step(
        r"Block sizes. Multi-indices of length $d$ and size $n$: fixing $\alpha_d = j$ leaves "
        r"one of length $d - 1$ and size $n - j$, so $M(n, d) = \sum_{m \le n} M(m, d - 1)$, "
        r"$M(n, 1) = 1$; $\binom{n + d - 1}{n}$ obeys the same recursion (hockey-stick "
        r"identity, proved by induction with Pascal's rule), hence $M(n, d) = "
        r"\binom{n + d - 1}{n}$. Tensor tuples: $\lvert [d]^n \rvert = d^n$.",
        rec.statement["block_sizes"],
    )

    def block_recursion():
        e = sympy.Symbol("e", integer=True, positive=True)
        base = sympy.binomial(n + 1 - 1, n) == 1  # M(n, 1) = C(n, n) = 1
        # sum_{m<=n} C(m+(d-1)-1, m) = C(n+d-1, n): the hockey-stick identity with e = d-1
        return bool(
            base
            and hockey_stick_step(lambda nn, ee: sympy.binomial(nn + ee, nn))
            and sympy.simplify(sympy.binomial(n + (e + 1) - 1, n) - sympy.binomial(n + e, n)) == 0
        )

    rec.prove(
        "symmetric block size = C(n+d-1, n) for all n, d",
        block_recursion,
        "recursion over alpha_d + hockey-stick identity (induction, symbolic n, e)",
    )

    def enumerate_blocks():
        for dd in range(1, 5):
            total_sym = total_ten = 0
            for nn in range(7):
                idx = f["multi_indices"](nn, dd)
                brute = sorted(
                    a for a in itertools.product(range(nn + 1), repeat=dd) if sum(a) == nn
                )
                if sorted(idx) != brute or len(set(idx)) != len(idx):
                    return False
                size = f["symmetric_block_size"](nn, dd)
                if not (len(idx) == math.comb(nn + dd - 1, nn) == size):
                    return False
                tuples = sum(1 for _ in itertools.product(range(dd), repeat=nn))
                if not (tuples == dd**nn == f["tensor_block_size"](nn, dd)):
                    return False
                total_sym += len(idx)
                total_ten += tuples
                if f["feature_count"](nn, dd, "symmetric") != total_sym:
                    return False
                if f["feature_count"](nn, dd, "tensor") != total_ten:
                    return False
        return True

    rec.verify(
        "multi_indices / symmetric_block_size / tensor_block_size / feature_count by enumeration",
        enumerate_blocks,
        "d = 1..4, n = 0..6: multi_indices(n, d) equals the brute-force set of "
        "exponent vectors, without repeats; sizes equal the enumeration counts",
    )


def _claim_kernel_identity(rec, f, f_sym, f_ten) -> None:
    """5. <Phi(q), Phi(k)> = kappa_N(c q.k) for both maps, with symbolic entries."""
    import sympy

    c = _syms()["c"]
    rec.step(
        r"Feature maps from the exports: symmetric $\Phi(x)_\alpha = c^{\lvert \alpha \rvert "
        r"/ 2} \sqrt{w(\alpha)}\, x^\alpha$ with $w$ = monomial_weight, tensor "
        r"$\Phi_n(x) = \sqrt{c^n\, t_n}\, x^{\otimes n}$ with $t_n$ = taylor_coefficient(n). "
        r"Summing the multinomial identity with weights $c^n / n!$ over $n \le N$ gives the "
        "truncated exponential kernel:",
        tex(
            r"\langle \Phi(q), \Phi(k) \rangle = @kappa",
            claim="symmetric map: <Phi(q), Phi(k)> = kappa_N(c q.k)",
            kappa=sympy.Function("kappa_N")(c * _dot()),
        ),
    )
    rec.step(
        r"Order 2: the tensor map up to order 2, $(1, x, x \otimes x / \sqrt{2})$ with $c$ "
        r"absorbed in $x$, is the Taylor feature map of Based (Arora et al. 2024), "
        r"$\phi(q) \cdot \phi(k) = 1 + q \cdot k + (q \cdot k)^2 / 2$; the symmetric map keeps "
        r"each $x_i x_j$ ($i < j$) once, with weight $1 = \sqrt{2} \cdot \sqrt{2} / 2$ for its "
        r"two tensor coordinates, and $1 / \sqrt{2}$ on $x_i^2$; an element-wise square "
        r"$x_i^2$ alone misses the cross terms for $d > 1$. The order-2 coordinates ($c = 1$) are",
        tex(
            r"\Phi(x)_{2 e_i} = @w\, x_i^2, \qquad \Phi(x)_{e_i + e_j} = x_i x_j \quad (i < j)",
            claim="order-2 weights: 1/sqrt(2) on squares, 1 on cross terms",
            w=sympy.sqrt(sympy.Rational(1, 2)),
        ),
    )
    rec.cite(
        BASED,
        "S. Arora, S. Eyuboglu, M. Zhang, A. Timalsina, S. Alberti, D. Zinsley, J. Zou, A. Rudra, "
        "C. Re, 'Simple linear attention language models balance the recall-throughput "
        "tradeoff', ICML 2024 (arXiv:2402.18668): Based's Taylor feature map",
        "the order-2 map (1, x, x (x) x / sqrt(2)) is theirs; its order-N generalization by the "
        "multinomial theorem, the symmetric basis and the checks here are this project's",
    )
    rec.verify(
        "order-2 weights: 1/sqrt(2) on squares, 1 on cross terms",
        lambda: (
            sympy.sqrt(to_sympy(f["monomial_weight"]((2, 0)))) == 1 / sympy.sqrt(2)
            and sympy.sqrt(to_sympy(f["monomial_weight"]((1, 1)))) == 1
        ),
        "monomial_weight((2, 0)) and monomial_weight((1, 1))",
    )

    def kernel_identity(builder):
        def check():
            for dd in KERNEL_DIMS:
                q = sympy.symbols(f"q1:{dd + 1}", real=True)
                k = sympy.symbols(f"k1:{dd + 1}", real=True)
                dot = sum(a * b for a, b in zip(q, k))
                for order in KERNEL_ORDERS:
                    lhs = sum(a * b for a, b in zip(builder(q, order, c), builder(k, order, c)))
                    rhs = exp_taylor_polynomial(c * dot, order)
                    if sympy.expand(lhs - rhs) != 0:
                        return False
            return True

        return check

    inst = f"symbolic q1..qd, k1..kd, c > 0; d in {KERNEL_DIMS}, N in {KERNEL_ORDERS}"
    rec.verify(
        "symmetric map: <Phi(q), Phi(k)> = kappa_N(c q.k)",
        kernel_identity(f_sym),
        inst + "; expand(lhs - rhs) == 0, rhs from sympy.series(exp)",
    )
    rec.verify(
        "tensor-power map: <Phi(q), Phi(k)> = kappa_N(c q.k)",
        kernel_identity(f_ten),
        inst + "; expand(lhs - rhs) == 0, rhs from sympy.series(exp)",
    )


def _claim_square_map_triggers(rec, f_sym, f_ten) -> None:
    """6. Inputs that expose the element-wise-square map: both right maps give kappa_2 = 5."""
    import sympy

    def triggers():
        one = sympy.Integer(1)
        for q, k in (((one, one), (one, one)), ((one,) * 4, (-one,) * 4)):
            for builder in (f_sym, f_ten):
                val = sum(a * b for a, b in zip(builder(q, 2, one), builder(k, 2, one)))
                if sympy.nsimplify(val) != 5:
                    return False
        return True

    rec.verify(
        "trigger inputs of the element-wise-square map give kappa_2 = 5",
        triggers,
        "c = 1, N = 2: q = k = (1, 1) and q = (1, 1, 1, 1), k = -q (both maps)",
    )


def _exports_and_tables(rec) -> None:
    rec.exports = [
        "taylor_coefficient",
        "taylor_coefficients",
        "multi_indices",
        "monomial_weight",
        "symmetric_block_size",
        "tensor_block_size",
        "feature_count",
    ]
    rec.tables["block_sizes_d64"] = (
        ["order n", "symmetric C(n+63, n)", "tensor 64^n"],
        [[k, symmetric_block_size(k, 64), tensor_block_size(k, 64)] for k in range(5)],
    )


def derive(**wrong) -> Derivation:
    """Build the D1 record: exp(c q.k) = <Phi(q), Phi(k)> for both feature bases.

    Keyword overrides (for the wrong-statement tests) replace the export of the same name, or
    ``feature_map`` (signature ``(x, order, c) -> list``) for the symmetric map; e.g.
    ``derive(feature_map=elementwise_square_map)`` or
    ``derive(taylor_coefficient=lambda n: Fraction(1, max(n, 1)))`` give a failed record.

    Raises:
        TypeError: an unknown override name.
    """
    f = resolve_overrides(
        wrong,
        {
            "taylor_coefficient": taylor_coefficient,
            "monomial_weight": monomial_weight,
            "multi_indices": multi_indices,
            "symmetric_block_size": symmetric_block_size,
            "tensor_block_size": tensor_block_size,
            "feature_count": feature_count,
            "feature_map": None,
        },
    )
    f_sym, f_ten = _builders(f)
    rec = Derivation("D1", "The exponential kernel as a sum of tensor-power kernels")
    _statement(rec)
    _claim_taylor_coefficients(rec, f)
    _claim_tensor_power(rec)
    _claim_multinomial(rec, f)
    _claim_block_sizes(rec, f)
    _claim_kernel_identity(rec, f, f_sym, f_ten)
    _claim_square_map_triggers(rec, f_sym, f_ten)
    _exports_and_tables(rec)
    return rec


if __name__ == "__main__":
    from derivations._record import main_for

    main_for(derive)
