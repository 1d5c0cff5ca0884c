"""D13. Logit softcapping s -> C tanh(s / C): a uniform Taylor bound, and why it is not practical.

Results, each closed by a check in ``derive()``:
- the cap maps every real score into (-C, C), is odd and increasing, and moves a score by at
  most |s|^3 / (3 C^2) (so scores well inside the cap are nearly unchanged);
- hence D4's relative weight error delta_N(C) bounds the Taylor-N truncation of exp at *every*
  capped score, whatever the input: the Taylor-RNN bound becomes uniform. The smallest orders
  N with delta_N(C) < 1 and < 1e-3 (computed with D4's ``delta``, exact rationals + mpmath) are
  in the tens to hundreds for C in {20, 30, 50} (Gemma 2 uses 50 on attention logits): far beyond
  any implementable state (D5), so the cap makes the bound uniform but not practical;
- the capped weights of a row differ by a factor below e^(2C), so each normalized weight lies in
  (1 / (1 + (S - 1) e^(2C)), 1 / (1 + (S - 1) e^(-2C))) for S visible keys;
- the capped kernel exp(C tanh(x / C)) is a function of x = c q.k whose Maclaurin series has
  radius pi C / 2 (tanh has poles at +-i pi / 2): no power series in q.k, hence no feature map of
  the D1 kind, represents it beyond |x| < pi C / 2, so the capped forms are parallel only.

Numeric exports (plain Python + mpmath): ``softcap``, ``smallest_uniform_order``,
``weight_range``, ``series_radius``.
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
        r"\qquad (C > 0)",
        claim=ORDERS,
        **slots,
    )
    order = ["cap", "near_zero", "uniform", "weights", "radius"]
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
        r"Uniform bound: every capped score lies in $(-C, C)$, so D4 applies with $r = C$ for "
        r"every input. The table gives the smallest order $N$ from which $\delta_N(C)$ stays "
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
    rec.verify(
        "a cap makes the Taylor-RNN bound uniform but not practical (orders >= 60)",
        lambda: min(r[1] for r in rows) >= 60,
        "the smallest order for delta < 1 at C = 20 is already >= 60",
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
        r"No feature map beyond $\pi C / 2$: $\tanh(z/C)$ has poles where $\cosh(z/C) = 0$, "
        r"nearest at $z = \pm i \pi C / 2$, and exp of a function with a pole has an essential "
        r"singularity there, so the Maclaurin series of $e^{C \tanh(x/C)}$ in $x$ has radius "
        r"$\pi C / 2$, the distance to the nearest singularity: it converges on "
        r"$|x| < \pi C / 2$ and diverges beyond. A kernel $\sum_n a_n (q \cdot k)^n$ is what the "
        r"feature maps of D1 factor; the capped kernel has that form only on a disc, so the "
        r"capped forms are parallel only. The zeros of $\cosh$ lie on the imaginary axis, as "
        r"$\lvert \cosh(x + i y) \rvert^2 = \sinh^2 x + \cos^2 y$, and the nearest are "
        r"$\pm i \pi / 2$:",
        sympy.Eq(
            sympy.cosh(sympy.I * sympy.pi / 2, evaluate=False), sympy.Integer(0), evaluate=False
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


def derive(**wrong) -> Derivation:
    """Build the D13 record: softcapping bounds the radius; what that buys.

    Keyword overrides (wrong-statement tests): ``cap_bound`` (1 right; 2 claims the cap
    tends to 2C), ``smallest_uniform_order`` (a callable replacing the export).

    Raises:
        TypeError: an unknown override name.
    """
    from derivations import feature_maps as fm

    f = fm.resolve_overrides(
        wrong, {"cap_bound": 1, "smallest_uniform_order": smallest_uniform_order}
    )
    rec = Derivation("D13", "Softcapping: a uniform Taylor bound that is not practical")
    rec.cite(
        SOURCE,
        "Gemma Team, 'Gemma 2: Improving Open Language Models at a Practical Size', "
        "arXiv:2408.00118, 2024 (logit soft-capping)",
        "the form and the caps; the bounds and the radius below are this project's",
    )
    _statement(rec)
    _claim_bounded(rec, f)
    _claim_close(rec)
    _claim_uniform(rec, f)
    _statement_uniform(rec)
    _claim_weights(rec)
    _claim_radius(rec)
    rec.exports = ["softcap", "smallest_uniform_order", "weight_range", "series_radius"]
    return rec


if __name__ == "__main__":
    from derivations._record import main_for

    main_for(derive)
