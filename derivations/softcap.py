"""D13. Logit softcapping s -> C tanh(s / C): bounded weights, Taylor-N of the capped score, and
polynomial approximations in the raw score.

Results, each closed by a check in ``derive()`` (status in brackets):
- the cap maps every real score into (-C, C), is odd and increasing, and moves a score by at
  most |s|^3 / (3 C^2) [proved];
- the capped weights of a row differ by a factor below e^(2C), so each normalized weight lies in
  (1 / (1 + (S - 1) e^(2C)), 1 / (1 + (S - 1) e^(-2C))) for S >= 2 visible keys [proved];
- Taylor-N of the *capped* score, kappa_N(C tanh(x / C)): D4's relative weight error delta_N(C)
  bounds it at every input (the bound is uniform), with smallest orders N in the tens to hundreds
  for C in {20, 30, 50} [verified, computed with D4's ``delta``]. It is a polynomial in
  tanh(x / C), not in x = c q.k: bounded and nonconstant in x, so no polynomial in x [verified,
  N = 1..12], hence no feature map of D1 and no recurrent form (D2) at any N -- a parallel form
  computed from the capped score matrix;
- the capped kernel exp(C tanh(x / C)) in the raw score x: its Maclaurin series converges for
  |x| < pi C / 2 and diverges beyond (nearest singularities at x = +-i pi C / 2) [poles proved,
  radius theorem cited, root test verified]; on any bounded range |x| <= R the Chebyshev
  interpolants converge geometrically (Trefethen, ATAP, Thm 8.2 [cited]; the Bernstein ellipse
  free of the poles and the bound M on it [proved]), so a polynomial in x -- hence a feature map
  and a recurrent form -- approximates it to any accuracy on that range, with a degree that grows
  with R (degrees for 1e-3 [verified, computed; observed interpolation errors below the bound]).

Numeric exports (plain Python + mpmath): ``softcap``, ``smallest_uniform_order``,
``weight_range``, ``series_radius``; the record's approximation numbers come from
``bernstein_limit``, ``chebyshev_error_bound``, ``chebyshev_degree`` and
``chebyshev_observed_error``.
"""

from __future__ import annotations

import math
from fractions import Fraction

from derivations import truncation as tr
from derivations._record import Derivation
from derivations._validate import check_exact_or_mpf, check_int

#: caps in the table (Gemma 2: 50 on attention logits, 30 on final logits; Grok-1: 30)
CAPS = (20, 30, 50)
#: relative weight error levels of the table
LEVELS = (Fraction(1), Fraction(1, 1000))
#: orders searched for the smallest uniform order
MAX_ORDER = 1000
#: score ranges R = factor * C of the polynomial-approximation table (R / C = 1 lies inside the
#: Taylor disc pi C / 2, 2 and 4 outside it)
RANGE_FACTORS = (1, 2, 4)
#: accuracy of the approximation table: max error <= level * max of the kernel on the range
APPROX_LEVEL = 1e-3
#: Bernstein parameters tried between 1 and the pole limit, and the grid of the observed error
RHO_GRID = 400
ERROR_GRID = 801
#: orders N at which kappa_N(C tanh(x / C)) is shown bounded and nonconstant in x
NOT_POLYNOMIAL_ORDERS = tuple(range(1, 13))


def softcap(score: float, cap: float) -> float:
    """The capped score C tanh(s / C) (Gemma 2's attention-logit softcapping), float.

    Raises:
        TypeError: an argument is not a real number.
        ValueError: ``cap`` is not a finite number > 0.
    """
    c = _cap(cap)
    s = float(check_exact_or_mpf("score", score)[0])
    return c * math.tanh(s / c)


def _cap(cap) -> float:
    c, _ = check_exact_or_mpf("cap", cap)
    if not (c > 0 and math.isfinite(float(c))):
        raise ValueError(f"cap: expected a finite number > 0, got {cap!r}")
    return float(c)


def smallest_uniform_order(cap, level=1) -> int:
    """Smallest N with delta_N(r) < ``level`` for r = C and every order N' >= N (D13, from D4).

    With capped scores in (-C, C), D4's delta_N(C) bounds the relative error of every Taylor-N
    weight for every input; this is the order from which that bound stays below ``level``
    (delta_N(r) rises with N until N is about r, then falls to 0).

    Raises:
        TypeError / ValueError: ``cap`` not a finite number > 0, ``level`` not > 0.
        ArithmeticError: no such order up to ``MAX_ORDER``.
    """
    c = _cap(cap)
    lv, _ = check_exact_or_mpf("level", level)
    if lv <= 0:
        raise ValueError(f"level: expected a number > 0, got {level!r}")
    # delta_N(c) decreases in N once N >= c (the terms c^n / n! decrease; checked in the
    # record), so past N = ceil(c) a bisection finds the first order below the level; at or
    # below ceil(c) every order from the answer up must be below it.
    top = math.ceil(c)
    if tr.delta(top, c) < float(lv):  # below from N = C on: walk down while it stays below
        order = top
        while order > 0 and tr.delta(order - 1, c) < float(lv):
            order -= 1
        return order
    lo, step = top, 8  # delta(lo) >= level; gallop, then bisect on the decreasing part N >= C
    hi = lo + step
    while tr.delta(hi, c) >= float(lv):
        if hi >= MAX_ORDER:
            raise ArithmeticError(f"no order <= {MAX_ORDER} with delta_N({c}) < {level}")
        lo, step = hi, 2 * step
        hi = min(lo + step, MAX_ORDER)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if tr.delta(mid, c) < float(lv):
            hi = mid
        else:
            lo = mid
    return hi
    raise ArithmeticError(f"no order <= {MAX_ORDER} with delta_N({c}) < {level}")


def weight_range(cap, keys: int) -> tuple[float, float]:
    """Open range of a normalized softmax weight over ``keys`` visible capped scores (D13).

    (1 / (1 + (S - 1) e^(2C)), 1 / (1 + (S - 1) e^(-2C))): every capped score lies in (-C, C).
    For ``keys`` = 1 both ends are 1: the one weight is exactly 1 (the range is not open).

    Raises:
        TypeError / ValueError: ``cap`` not a finite number > 0, ``keys`` not an int >= 1.
    """
    c = _cap(cap)
    check_int("keys", keys)
    if keys < 1:
        raise ValueError(f"keys: expected an int >= 1, got {keys!r}")
    return 1 / (1 + (keys - 1) * math.exp(2 * c)), 1 / (1 + (keys - 1) * math.exp(-2 * c))


def series_radius(cap) -> float:
    """Radius pi C / 2 of the Maclaurin series of exp(C tanh(x / C)) in x (D13).

    Raises:
        TypeError / ValueError: ``cap`` not a finite number > 0.
    """
    return math.pi * _cap(cap) / 2


def _range(score_range) -> float:
    r, _ = check_exact_or_mpf("score_range", score_range)
    if not (r > 0 and math.isfinite(float(r))):
        raise ValueError(f"score_range: expected a finite number > 0, got {score_range!r}")
    return float(r)


def bernstein_limit(cap, score_range) -> float:
    """rho* = y0 + sqrt(1 + y0^2), y0 = pi C / (2 R): the largest Bernstein ellipse of [-R, R]
    (scaled to [-1, 1]) with exp(C tanh(x / C)) analytic inside (D13).

    The ellipse {(z + 1/z) / 2 : |z| = rho} meets the imaginary axis at +-i (rho - 1/rho) / 2; the
    singularities of tanh(x / C), scaled by 1 / R, lie on that axis, the nearest at +-i y0.

    Raises:
        TypeError / ValueError: ``cap`` or ``score_range`` not a finite number > 0.
    """
    y0 = math.pi * _cap(cap) / (2 * _range(score_range))
    return y0 + math.sqrt(1 + y0 * y0)


def _log_ellipse_bound(c: float, r: float, degree: int, rho: float) -> float:
    """log of 4 M rho^-n / (rho - 1), M = exp(C max(1, tan beta)), beta = R (rho - 1/rho) / (2C)."""
    beta = r * (rho - 1 / rho) / (2 * c)
    return math.log(4) + c * max(1.0, math.tan(beta)) - degree * math.log(rho) - math.log(rho - 1)


def chebyshev_error_bound(cap, score_range, degree: int) -> float:
    """Bound on max_{|x| <= R} |p_n(x) - exp(C tanh(x / C))| for the degree-n Chebyshev
    interpolant p_n on [-R, R], relative to the kernel's largest value e^(C tanh(R / C)) there
    (D13: Trefethen, ATAP, Thm 8.2, 4 M rho^-n / (rho - 1), with the record's M(rho); the
    smallest over ``RHO_GRID`` values of rho in (1, rho*)). A float.

    Raises:
        TypeError / ValueError: ``cap``, ``score_range`` not finite > 0; ``degree`` not an
            int >= 0.
    """
    c, r = _cap(cap), _range(score_range)
    degree = check_int("degree", degree, 0)
    top = bernstein_limit(c, r)
    logs = [
        _log_ellipse_bound(c, r, degree, 1 + (top - 1) * j / RHO_GRID) for j in range(1, RHO_GRID)
    ]
    return math.exp(min(logs) - c * math.tanh(r / c))


def chebyshev_degree(cap, score_range, level=APPROX_LEVEL) -> int:
    """Smallest degree n with ``chebyshev_error_bound(cap, score_range, n) <= level`` (D13).

    Raises:
        TypeError / ValueError: bad ``cap`` / ``score_range``; ``level`` not in (0, 1).
        ArithmeticError: no such degree up to ``MAX_ORDER``.
    """
    lv, _ = check_exact_or_mpf("level", level)
    if not 0 < lv < 1:
        raise ValueError(f"level: expected a number in (0, 1), got {level!r}")
    for n in range(MAX_ORDER + 1):
        if chebyshev_error_bound(cap, score_range, n) <= float(lv):
            return n
    raise ArithmeticError(f"no degree <= {MAX_ORDER} with the Thm 8.2 bound <= {level}")


def chebyshev_observed_error(cap, score_range, degree: int, grid: int = ERROR_GRID) -> float:
    """max over ``grid`` equally spaced points of [-R, R] of |p_n - exp(C tanh(x / C))|, relative
    to e^(C tanh(R / C)); p_n interpolates at the n + 1 Chebyshev points R cos(j pi / n)
    (barycentric formula, float64). An observation on a grid, not a bound (D13).

    Raises:
        TypeError / ValueError: bad ``cap`` / ``score_range``; ``degree`` not an int >= 1;
            ``grid`` not an int >= 2.
    """
    c, r = _cap(cap), _range(score_range)
    degree = check_int("degree", degree, 1)
    grid = check_int("grid", grid, 2)

    def kernel(x: float) -> float:
        return math.exp(c * math.tanh(x / c))

    nodes = [r * math.cos(j * math.pi / degree) for j in range(degree + 1)]
    values = [kernel(x) for x in nodes]
    weights = [(-1) ** j * (0.5 if j in (0, degree) else 1.0) for j in range(degree + 1)]
    worst = 0.0
    for i in range(grid):
        x = -r + 2 * r * i / (grid - 1)
        num = den = 0.0
        p = None
        for xj, fj, wj in zip(nodes, values, weights):
            if x == xj:
                p = fj
                break
            num += wj / (x - xj) * fj
            den += wj / (x - xj)
        worst = max(worst, abs((num / den if p is None else p) - kernel(x)))
    return worst / math.exp(c * math.tanh(r / c))


# -- the record -----------------------------------------------------------------------------------
def _syms():
    import sympy

    return sympy.Symbol("s", real=True), sympy.Symbol("C", positive=True)


BOUNDED = "C tanh(s/C) lies in (-C, C), odd and increasing (all real s, C > 0)"
CLOSE = "|C tanh(s/C) - s| <= |s|^3 / (3 C^2) (all real s, C > 0)"
ORDERS = "smallest uniform orders: delta_N(C) < 1 and < 1e-3 from N on, below at N-1 not"
WEIGHTS = (
    "each normalized capped weight of a row of S >= 2 keys lies in (1/(1+(S-1)e^(2C)), "
    "1/(1+(S-1)e^(-2C))) (S = 1: the one weight is 1)"
)
RADIUS = (
    "a power series converges on the largest disc free of singularities (radius = distance "
    "to the nearest one) and diverges outside its closed disc of convergence"
)
POLES = (
    "the zeros of cosh are i pi (k + 1/2), k integer: cosh vanishes at +-i pi/2 and nowhere "
    "nearer the origin"
)
NOT_POLYNOMIAL = (
    "kappa_N(C tanh(x/C)) is bounded and nonconstant in x, so no polynomial in x: no D1 feature "
    "map and no recurrent form at any N >= 1"
)
ELLIPSE = (
    "exp(C tanh(Rt/C)) is analytic in the open Bernstein ellipse E_rho of [-1, 1] for "
    "1 < rho <= rho* = y0 + sqrt(1 + y0^2), y0 = pi C/(2R), and for rho < rho* bounded there by "
    "M = exp(C max(1, tan beta)), beta = R (rho - 1/rho)/(2C) < pi/2"
)
CHEBYSHEV = (
    "Chebyshev interpolants of a function analytic in E_rho with |f| <= M there: "
    "||f - p_n|| <= 4 M rho^(-n) / (rho - 1) on [-1, 1]"
)
POLY_EXISTS = (
    "a polynomial in x of the tabulated degree is within 1e-3 (of the largest value) of "
    "exp(C tanh(x/C)) on |x| <= R, also for R > pi C/2 (R/C = 2, 4): feature maps and recurrent "
    "forms approximate the capped kernel on every bounded score range"
)
OBSERVED = (
    "observed Chebyshev interpolation errors (801-point grid) at the bound's degree are below "
    "the bound, and the observed smallest degree for 1e-3 is at most the bound's"
)
SOURCE = (
    "logit softcapping s -> C tanh(s/C) on attention scores, with C = 50 (and C = 30 on the "
    "final logits)"
)


def _statement(rec) -> None:
    from derivations._latex import tex

    rec.statement["cap"] = tex(
        r"\operatorname{cap}_C(s) = C\tanh(s/C) \in (-C, C)\ \text{ for every real } s"
        r"\qquad (C > 0)",
        claim=BOUNDED,
    )
    rec.statement["near_zero"] = tex(
        r"|\operatorname{cap}_C(s) - s| \le \frac{|s|^3}{3C^2} \qquad (s \in \mathbb{R},\ C > 0)",
        claim=CLOSE,
    )
    rec.statement["weights"] = tex(
        r"\frac{1}{1 + (S-1)e^{2C}} < \operatorname{softmax}(\operatorname{cap}_C(s))_j "
        r"< \frac{1}{1 + (S-1)e^{-2C}} \qquad (S \ge 2 \text{ keys in the row},\ "
        r"1 \le j \le S,\ C > 0)",
        claim=WEIGHTS,
    )
    rec.statement["radius"] = tex(
        r"e^{C\tanh(x/C)} = \sum_{n \ge 0} a_n x^n\ \text{ for } |x| < \frac{\pi C}{2}"
        r"\text{; the series diverges for } |x| > \frac{\pi C}{2} \qquad (C > 0)",
        claim=RADIUS,
    )


def _statement_uniform(rec) -> None:
    """The uniform-bound statement, with the smallest orders of the record's table as slots."""
    import sympy

    from derivations._latex import tex

    rows = rec.tables["smallest_order"][1]
    slots = {f"n{i}": sympy.Integer(r[1]) for i, r in enumerate(rows)}
    slots.update({f"c{i}": sympy.Integer(r[0]) for i, r in enumerate(rows)})
    orders = ", ".join(f"@n{i}" for i in range(len(rows)))
    caps = ", ".join(f"@c{i}" for i in range(len(rows)))
    statement = dict(rec.statement)
    statement["uniform"] = tex(
        r"\left|\kappa_N(\operatorname{cap}_C(s)) - e^{\operatorname{cap}_C(s)}\right| "
        r"\le \delta_N(C)\, e^{\operatorname{cap}_C(s)}\ \text{for every input; }"
        rf"\delta_N(C) < 1 \text{{ from }} N = {orders} \text{{ at }} C = {caps} "
        r"\qquad (C > 0;\ \kappa_N \text{ applied to the capped scores: a parallel form})",
        claim=ORDERS,
        **slots,
    )
    order = ["cap", "near_zero", "weights", "uniform", "not_polynomial", "radius", "polynomial"]
    rec.statement = {k: statement[k] for k in order if k in statement}


def _claim_bounded(rec, f) -> None:
    import sympy

    s, big_c = _syms()
    u = s / big_c
    cap = big_c * sympy.tanh(u)
    rec.step(
        r"The cap is bounded: $1 - \tanh^2 u = 1/\cosh^2 u > 0$ for real $u$, so "
        r"$|\tanh u| < 1$ and $|C \tanh(s/C)| < C$. Its derivative $1/\cosh^2(s/C) > 0$: it "
        r"is increasing, and odd.",
        sympy.Eq(1 - sympy.tanh(u) ** 2, 1 / sympy.cosh(u) ** 2, evaluate=False),
    )
    bound = f["cap_bound"]
    rec.prove(
        BOUNDED,
        lambda: (
            sympy.simplify((1 - sympy.tanh(u) ** 2 - 1 / sympy.cosh(u) ** 2).rewrite(sympy.exp))
            == 0
            and (1 / sympy.cosh(u) ** 2).is_positive
            and sympy.simplify(cap.subs(s, -s) + cap) == 0
            and (sympy.diff(cap, s) - 1 / sympy.cosh(u) ** 2).simplify() == 0
            and sympy.limit(cap, s, sympy.oo) == bound * big_c
        ),
        "symbolic s, C > 0; 1 - tanh^2 = sech^2, sympy limit C tanh(s/C) -> C",
    )


def _claim_close(rec) -> None:
    """|C tanh(s/C) - s| <= |s|^3 / (3 C^2): h(u) = u - tanh u has h' = tanh^2 u <= u^2."""
    import sympy

    s, big_c = _syms()
    u = sympy.Symbol("u", nonnegative=True)
    rec.step(
        r"Near zero the cap is the identity: $h(u) = u - \tanh u$ has $h(0) = 0$ and "
        r"$h'(u) = \tanh^2 u \le u^2$ (as $|\tanh u| \le |u|$), so "
        r"$0 \le h(u) \le u^3 / 3$ for $u \ge 0$; with $u = |s| / C$ and oddness, "
        r"$|C \tanh(s/C) - s| \le |s|^3 / (3 C^2)$.",
        sympy.Eq(sympy.Derivative(u - sympy.tanh(u), u), sympy.tanh(u) ** 2, evaluate=False),
    )
    t = sympy.Symbol("t", nonnegative=True)
    rec.prove(
        CLOSE,
        lambda: (
            sympy.simplify(sympy.diff(u - sympy.tanh(u), u) - sympy.tanh(u) ** 2) == 0
            # |tanh t| <= t on t >= 0: t - tanh t vanishes at 0 with derivative tanh^2 t >= 0
            and sympy.simplify(sympy.diff(t - sympy.tanh(t), t) - sympy.tanh(t) ** 2) == 0
            and sympy.integrate(u**2, (u, 0, t)) == t**3 / 3
        ),
        "symbolic u >= 0: h(0) = 0, h' = tanh^2 u <= u^2, integrate u^2 from 0",
    )


def _claim_uniform(rec, f) -> None:
    rows = []
    for cap in CAPS:
        row = [cap]
        for level in LEVELS:
            order = f["smallest_uniform_order"](cap, level)
            row += [order, float(tr.delta(order, cap)), float(tr.delta(order - 1, cap))]
        rows.append(row)
    rec.tables["smallest_order"] = (
        [
            "C",
            "smallest N: delta_N(C) < 1",
            "delta_N(C)",
            "delta_{N-1}(C)",
            "smallest N: delta_N(C) < 1e-3",
            "delta_N(C)",
            "delta_{N-1}(C)",
        ],
        rows,
    )
    rec.step(
        r"Taylor-N of the capped score, uniformly: every capped score lies in $(-C, C)$, so D4 "
        r"applies with $r = C$ for every input, to the weights $\kappa_N(C \tanh(x/C))$ "
        r"computed from the capped score matrix (a parallel form; see the next step for why it "
        r"has no other). The table gives the smallest order $N$ from which $\delta_N(C)$ stays "
        r"below 1 (D4's output bound exists) and below $10^{-3}$ (computed with D4's "
        r"$\delta_N$, exact rationals and mpmath); $\delta_N(C)$ rises with $N$ until $N$ is "
        r"about $C$ and falls after, so the answer is the first $N \ge C$ below the level.",
    )

    def check():
        for cap, n1, d1, p1, n3, d3, p3 in rows:
            if not (d1 < 1 <= p1 and d3 < 1e-3 <= p3 and cap < n1 < n3):
                return False
            # and it stays below: delta_N(C) decreases from N = C on
            ds = [tr.delta(n, cap) for n in range(math.ceil(cap), n3 + 20)]
            if any(b >= a for a, b in zip(ds, ds[1:])):
                return False
        return True

    rec.verify(
        ORDERS,
        check,
        f"C in {CAPS}; delta decreasing checked from N = C to 20 past the 1e-3 order",
    )


def _claim_not_polynomial(rec) -> None:
    """kappa_N(C tanh(x/C)) is bounded and nonconstant in x: no polynomial in x (N >= 1)."""
    import sympy

    from derivations._latex import tex

    x = sympy.Symbol("x", real=True)
    big_c = sympy.Symbol("C", positive=True)
    y = sympy.Symbol("y", real=True)
    rec.statement["not_polynomial"] = tex(
        r"\kappa_N(C\tanh(x/C)) \notin \mathbb{R}[x],\quad "
        r"\bigl\lvert \kappa_N(C\tanh(x/C)) \bigr\rvert < \kappa_N(C),\quad "
        r"\frac{d}{dx} \kappa_N(C\tanh(x/C)) \Big|_{x=0} = 1 \qquad (N \ge 1,\ C > 0)",
        claim=NOT_POLYNOMIAL,
    )
    rec.step(
        r"No feature map for Taylor-N of the capped score, at any $N$: "
        r"$\kappa_N(C \tanh(x/C))$ is a polynomial in $\tanh(x/C)$, not in $x = c\, q \cdot k$. "
        r"It is bounded on the real line ($\lvert C \tanh(x/C) \rvert < C$, so each term is "
        r"below $C^n / n!$ in modulus) and nonconstant (its derivative at $x = 0$ is "
        r"$\kappa_{N-1}(0) = 1$), and a nonconstant polynomial is unbounded. The feature maps of "
        r"D1 factor kernels $\sum_n a_n (q \cdot k)^n$, polynomials in $x$ when finite, and the "
        r"recurrent forms of D2 read such a factorization; neither exists for this kernel. The "
        r"weights are computed in parallel from the capped scores. The derivative at $x = 0$:",
        sympy.Eq(
            sympy.Derivative(sympy.Function("kappa_N")(big_c * sympy.tanh(x / big_c)), x),
            sympy.Function("kappa_{N-1}")(big_c * sympy.tanh(x / big_c))
            / sympy.cosh(x / big_c) ** 2,
            evaluate=False,
        ),
    )

    def check():
        for order in NOT_POLYNOMIAL_ORDERS:
            kappa = sum(y**n / sympy.factorial(n) for n in range(order + 1))
            f = kappa.subs(y, big_c * sympy.tanh(x / big_c))
            slope = sympy.simplify(sympy.diff(f, x).subs(x, 0))
            # bounded: |kappa_N(C y)| <= kappa_N(C |y|) < kappa_N(C) for |y| < 1, term by term;
            # kappa_N(C) - kappa_N(C y) = sum_n C^n (1 - y^n) / n!: each coefficient of C^n
            # vanishes at y = 1 and is (1 - y^n) / n!
            gap = sympy.Poly(sympy.expand(kappa.subs(y, big_c) - kappa.subs(y, big_c * y)), big_c)
            coeffs_ok = all(
                sympy.simplify(gap.coeff_monomial(big_c**n) - (1 - y**n) / sympy.factorial(n)) == 0
                for n in range(1, order + 1)
            )
            if not (slope == 1 and coeffs_ok):
                return False
        return True

    rec.verify(
        NOT_POLYNOMIAL,
        check,
        f"N = {NOT_POLYNOMIAL_ORDERS[0]}..{NOT_POLYNOMIAL_ORDERS[-1]}, symbolic x, C > 0: the "
        "derivative at 0 is 1 and kappa_N(C) - kappa_N(C y) = sum_n C^n (1 - y^n)/n! > 0 for "
        "|y| < 1 (the argument in the step holds for every N >= 1)",
    )


def _claim_weights(rec) -> None:
    import sympy

    big_c = sympy.Symbol("C", positive=True)
    n = sympy.Symbol("S", integer=True, positive=True)
    w = sympy.Symbol("w", positive=True)  # one exp-weight, in (e^-C, e^C)
    y = sympy.Symbol("y", positive=True)  # the sum of the row's other S - 1 exp-weights
    top = 1 / (1 + (n - 1) * sympy.exp(-2 * big_c))
    rec.step(
        r"Weights: every capped score is in $(-C, C)$, so each exp-weight is in "
        r"$(e^{-C}, e^{C})$ and one weight over the sum of $S$ is below "
        r"$e^C / (e^C + (S-1) e^{-C}) = 1 / (1 + (S-1) e^{-2C})$, above "
        r"$1 / (1 + (S-1) e^{2C})$.",
        sympy.Eq(
            sympy.exp(big_c) / (sympy.exp(big_c) + (n - 1) * sympy.exp(-big_c)), top, evaluate=False
        ),
    )
    rec.prove(
        WEIGHTS,
        lambda: (
            sympy.simplify(
                sympy.exp(big_c) / (sympy.exp(big_c) + (n - 1) * sympy.exp(-big_c)) - top
            )
            == 0
            # x / (x + y) increases in x and decreases in y (y > 0 the others' sum)
            and sympy.simplify(sympy.diff(w / (w + y), w)).is_positive
            and sympy.simplify(sympy.diff(w / (w + y), y)).is_negative
        ),
        "symbolic C > 0, S >= 2 (the others' sum y > 0); monotonicity of x / (x + y)",
    )


def _claim_radius(rec) -> None:
    import sympy

    z = sympy.Symbol("z")
    rec.step(
        r"The Taylor series of the capped kernel in the raw score: $\tanh(z/C)$ has poles where "
        r"$\cosh(z/C) = 0$, nearest at $z = \pm i \pi C / 2$, and exp of a function with a "
        r"pole has an essential singularity there, so the Maclaurin series of "
        r"$e^{C \tanh(x/C)}$ in $x$ has radius $\pi C / 2$, the distance to the nearest "
        r"singularity: it converges on $|x| < \pi C / 2$ and diverges beyond. Its partial sums "
        r"(polynomials in $x$, so D1 feature maps) approximate the capped kernel only inside "
        r"that disc. This is a statement about Taylor partial sums, not about polynomials: the "
        r"next step approximates the kernel on any bounded range. The zeros of $\cosh$ lie on "
        r"the imaginary axis, as $\lvert \cosh(x + i y) \rvert^2 = \sinh^2 x + \cos^2 y$, and "
        r"the nearest are $\pm i \pi / 2$:",
        # UnevaluatedExpr: cosh(i pi/2) would evaluate to 0 when the record is rebuilt
        sympy.Eq(
            sympy.cosh(sympy.UnevaluatedExpr(sympy.I * sympy.pi / 2)),
            sympy.Integer(0),
            evaluate=False,
        ),
    )
    xr, yr = sympy.symbols("x y", real=True)
    rec.prove(
        POLES,
        lambda: (
            # |cosh(x + i y)|^2 = sinh^2 x + cos^2 y: zero iff x = 0 and cos y = 0
            sympy.simplify(
                sympy.expand_complex(sympy.Abs(sympy.cosh(xr + sympy.I * yr)) ** 2)
                - (sympy.sinh(xr) ** 2 + sympy.cos(yr) ** 2)
            )
            == 0
            and sympy.simplify(sympy.cosh(sympy.I * z) - sympy.cos(z)) == 0
            and sympy.cosh(sympy.I * sympy.pi / 2) == 0
            # the zeros of cos on [-4, 4] are +-pi/2 only, and every other one has |y| > 4
            and set(sympy.solveset(sympy.cos(z), z, sympy.Interval(-4, 4)))
            == {-sympy.pi / 2, sympy.pi / 2}
        ),
        "symbolic real x, y: |cosh(x + i y)|^2 = sinh^2 x + cos^2 y (zero only at x = 0); "
        "cosh(i y) = cos y, whose zeros in [-4, 4] are +-pi/2 only",
    )
    rec.cite(
        RADIUS,
        "Ahlfors, Complex Analysis (3rd ed., 1979), Ch. 5, Thm. 3 (Taylor's theorem); "
        "divergence beyond the radius of convergence: Ch. 2, Sec. 2.4, Thm. 2 (Abel)",
        "applied at the poles +-i pi C/2 of tanh(z/C)",
    )

    def ratio_estimate():
        # root test on the series of exp(tanh x) (C = 1): |a_n|^(-1/n) -> pi/2. tanh's
        # coefficients from the Bernoulli numbers, then exp of the series by n e_n =
        # sum_k k t_k e_{n-k} (exact rationals)
        top = 40
        tanh = [Fraction(0)] * (top + 1)
        for n in range(1, top + 1, 2):
            b = sympy.bernoulli(n + 1)
            tanh[n] = Fraction(2 ** (n + 1) * (2 ** (n + 1) - 1) * int(b.p), int(b.q)) / (
                math.factorial(n + 1)
            )
        e = [Fraction(1)] + [Fraction(0)] * top
        for n in range(1, top + 1):
            e[n] = sum(k * tanh[k] * e[n - k] for k in range(1, n + 1)) / n
        ok = (
            e[1] == 1 and e[2] == Fraction(1, 2) and e[3] == Fraction(-1, 6)
        )  # 1 + x + x^2/2 - x^3/6
        est = [float(abs(e[n])) ** (-1.0 / n) for n in range(30, top + 1) if e[n] != 0]
        return ok and len(est) > 5 and all(abs(x - math.pi / 2) < 0.25 for x in est)

    rec.verify(
        "root test on the series of exp(tanh x): |a_n|^(-1/n) near pi/2 (n = 30..40)",
        ratio_estimate,
        "C = 1 (the radius scales with C); within 0.25 of pi/2",
    )


def _claim_ellipse(rec) -> None:
    """The Bernstein ellipse of [-R, R] free of the poles, and the bound M on it (proved)."""
    import sympy

    rho, y0, b = sympy.symbols("rho y_0 b", positive=True)
    a_, s_ = sympy.symbols("a s", real=True)
    big_a, big_b, t = sympy.symbols("A B t", positive=True)
    semi_minor = (rho - 1 / rho) / 2
    rho_star = y0 + sympy.sqrt(1 + y0**2)
    rec.step(
        r"Polynomials in $x$ on a bounded range $\lvert x \rvert \le R$: scale "
        r"$x = R t$, $t \in [-1, 1]$. The Bernstein ellipse $E_\rho$ "
        r"$= \{(z + z^{-1})/2 : \lvert z \rvert < \rho\}$ meets the imaginary axis at "
        r"$\pm i (\rho - \rho^{-1})/2$, increasing in $\rho$; the singularities of "
        r"$e^{C \tanh(R t / C)}$ lie on that axis, the nearest at $\pm i y_0$, "
        r"$y_0 = \pi C / (2R)$ (step above). So the kernel is analytic in $E_\rho$ for "
        r"$1 < \rho \le \rho^*$, where $(\rho^* - 1/\rho^*)/2 = y_0$:",
        sympy.Eq(sympy.Symbol("rho^*"), rho_star, evaluate=False),
    )
    rec.step(
        r"The bound $M$ on $E_\rho$: with $w = R t / C = a + i b$, "
        r"$\lvert e^{C \tanh w} \rvert = e^{C \operatorname{Re} \tanh w} \le "
        r"e^{C \lvert \tanh w \rvert}$ and $\lvert \tanh w \rvert^2 = (\sinh^2 a + "
        r"\sin^2 b) / (\sinh^2 a + \cos^2 b)$. In $E_\rho$, $\lvert b \rvert < \beta = "
        r"R (\rho - \rho^{-1}) / (2C) \le \pi / 2$, so the ratio is at most "
        r"$(s + \sin^2 \beta) / (s + \cos^2 \beta)$ ($s = \sinh^2 a \ge 0$), a mediant of "
        r"$1$ and $\tan^2 \beta$: $M = \exp(C \max(1, \tan \beta))$. The mediant, for "
        r"$A = \sin^2 \beta$, $B = \cos^2 \beta$:",
        sympy.Eq(
            big_a / big_b - (t + big_a) / (t + big_b),
            t * (big_a - big_b) / (big_b * (t + big_b)),
            evaluate=False,
        ),
    )

    def check():
        sinh_sq = sympy.expand_complex(sympy.Abs(sympy.sinh(a_ + sympy.I * s_)) ** 2)
        cosh_sq = sympy.expand_complex(sympy.Abs(sympy.cosh(a_ + sympy.I * s_)) ** 2)
        return (
            sympy.simplify(semi_minor.subs(rho, rho_star) - y0) == 0
            and sympy.simplify(sympy.diff(semi_minor, rho) - (1 + rho**-2) / 2) == 0
            and sympy.simplify(sinh_sq - (sympy.sinh(a_) ** 2 + sympy.sin(s_) ** 2)) == 0
            and sympy.simplify(cosh_sq - (sympy.sinh(a_) ** 2 + sympy.cos(s_) ** 2)) == 0
            # mediant: (t + A)/(t + B) - 1 = (A - B)/(t + B) (<= 0 when A <= B), and
            # A/B - (t + A)/(t + B) = t (A - B)/(B (t + B)) (>= 0 when A >= B)
            and sympy.simplify((t + big_a) / (t + big_b) - 1 - (big_a - big_b) / (t + big_b)) == 0
            and sympy.simplify(
                big_a / big_b
                - (t + big_a) / (t + big_b)
                - t * (big_a - big_b) / (big_b * (t + big_b))
            )
            == 0
        )

    rec.prove(
        ELLIPSE,
        check,
        "symbolic rho, y0 > 0: (rho* - 1/rho*)/2 = y0 and d/drho of the semi-minor axis "
        "(1 + rho^-2)/2 > 0; |sinh(a + ib)|^2 = sinh^2 a + sin^2 b, |cosh(a + ib)|^2 = "
        "sinh^2 a + cos^2 b (real a, b); the mediant identities for s >= 0, A, B > 0",
    )
    rec.cite(
        CHEBYSHEV,
        "L. N. Trefethen, Approximation Theory and Approximation Practice, SIAM, 2013 "
        "(extended ed. 2019), Thm 8.2",
        "the theorem is Trefethen's; the ellipse, M and the degrees for the capped kernel are "
        "this project's",
    )


def _claim_polynomial(rec, f) -> None:
    """Degrees of Chebyshev interpolants of the capped kernel on |x| <= R (bound and observed)."""
    import sympy

    from derivations import feature_maps as fm
    from derivations._latex import tex

    rows = []
    for cap in CAPS:
        for factor in RANGE_FACTORS:
            r = cap * factor
            deg = f["chebyshev_degree"](cap, r, APPROX_LEVEL)
            bound = chebyshev_error_bound(cap, r, deg)
            observed = chebyshev_observed_error(cap, r, deg)
            least = 1
            while chebyshev_observed_error(cap, r, least) > APPROX_LEVEL:
                least += 1
            taylor = "yes" if r < series_radius(cap) else "no"
            features = fm.feature_count(deg, 64)
            rows.append([cap, r, taylor, round(bernstein_limit(cap, r), 4), deg, bound, observed,
                         least, f"{features:.3g}"])  # fmt: skip
    rec.tables["polynomial_degree"] = (
        [
            "C",
            "R",
            "Taylor series in x converges on |x| <= R",
            "rho*",
            "degree n: Thm 8.2 bound <= 1e-3",
            "bound at n",
            "observed error at n",
            "observed smallest degree for 1e-3",
            "features at n, d = 64 (D1)",
        ],
        rows,
    )
    big_c, big_r, rho, n = sympy.symbols("C R rho n", positive=True)
    y0 = sympy.pi * big_c / (2 * big_r)
    beta = big_r * (rho - 1 / rho) / (2 * big_c)
    rec.statement["polynomial"] = tex(
        r"\max_{\lvert x \rvert \le R} \bigl\lvert p_n(x) - e^{C \tanh(x/C)} \bigr\rvert "
        r"\le @b \quad \text{for } 1 < \rho < @r,\ M = @m \qquad (p_n \text{ the degree-}n"
        r"\text{ Chebyshev interpolant on } [-R, R],\ R > 0,\ C > 0)",
        claim=CHEBYSHEV,
        b=4 * sympy.Symbol("M") * rho ** (-n) / (rho - 1),
        r=y0 + sympy.sqrt(1 + y0**2),
        m=sympy.exp(big_c * sympy.Max(1, sympy.tan(beta))),
    )
    rec.step(
        r"Degrees (table): for $C \in \{20, 30, 50\}$ and $R = C, 2C, 4C$ the smallest $n$ "
        r"whose Thm 8.2 bound, minimized over $\rho \in (1, \rho^*)$, is at most $10^{-3}$ of "
        r"the kernel's largest value $e^{C \tanh(R/C)}$ on the range; the observed error of "
        r"that interpolant on an 801-point grid; the smallest degree reaching $10^{-3}$ on the "
        r"grid. For $R = 2C, 4C > \pi C / 2$ the Taylor series in $x$ diverges, yet polynomials "
        r"in $x$ converge geometrically: a feature map (D1, of the polynomial $p_n$) and a "
        r"recurrent form (D2) approximate the capped kernel on any bounded score range, with a "
        r"degree that grows with $R$. What it costs is D5's state: the last column is D1's "
        r"feature count of a degree-$n$ polynomial kernel at $d = 64$.",
    )

    def exists():
        wide = [row for row in rows if row[1] > series_radius(row[0])]
        found = bool(wide) and all(row[5] <= APPROX_LEVEL for row in wide)
        return found != f["parallel_only"]

    rec.verify(
        POLY_EXISTS,
        exists,
        f"C in {CAPS}, R / C in {RANGE_FACTORS}; the degree from Thm 8.2's bound (cited) with "
        "the ellipse and M proved above, minimized over a grid of rho",
    )
    rec.verify(
        OBSERVED,
        lambda: all(row[6] <= row[5] and row[7] <= row[4] for row in rows),
        "every row of the table (float64 barycentric interpolation, equally spaced grid: an "
        "observation, the bound is what is claimed)",
    )
    rec.verify(
        "the degree grows with the range: n(4C) > n(C) at every C in the table",
        lambda: all(
            rows[i + len(RANGE_FACTORS) - 1][4] > rows[i][4]
            for i in range(0, len(rows), len(RANGE_FACTORS))
        ),
        f"C in {CAPS}",
    )


def derive(**wrong) -> Derivation:
    """Build the D13 record: softcapping, Taylor-N of the capped score, and polynomials in x.

    Keyword overrides (wrong-statement tests): ``cap_bound`` (1 right; 2 claims the cap
    tends to 2C), ``smallest_uniform_order`` (a callable replacing the export),
    ``chebyshev_degree`` (a callable replacing the function), ``parallel_only`` (False right;
    True states the old claim that no polynomial in x approximates the capped kernel beyond the
    Taylor disc, so the capped forms are parallel only).

    Raises:
        TypeError: an unknown override name.
    """
    from derivations import feature_maps as fm

    f = fm.resolve_overrides(
        wrong,
        {
            "cap_bound": 1,
            "smallest_uniform_order": smallest_uniform_order,
            "chebyshev_degree": chebyshev_degree,
            "parallel_only": False,
        },
    )
    rec = Derivation(
        "D13",
        "Softcapping: bounded weights, Taylor-N of the capped score (no feature map), "
        "polynomials in the raw score on bounded ranges",
    )
    rec.cite(
        SOURCE,
        "Gemma Team, 'Gemma 2: Improving Open Language Models at a Practical Size', "
        "arXiv:2408.00118, 2024 (logit soft-capping)",
        "the form and the caps; the bounds, the radius and the approximations below are this "
        "project's",
    )
    _statement(rec)
    _claim_bounded(rec, f)
    _claim_close(rec)
    _claim_weights(rec)
    _claim_uniform(rec, f)
    _claim_not_polynomial(rec)
    _claim_radius(rec)
    _claim_ellipse(rec)
    _claim_polynomial(rec, f)
    _statement_uniform(rec)
    rec.exports = ["softcap", "smallest_uniform_order", "weight_range", "series_radius"]
    return rec


if __name__ == "__main__":
    from derivations._record import main_for

    main_for(derive)
