"""D5. State size of Taylor-N attention against the softmax KV cache.

The recurrent state holds, per order n, a numerator block (features x d_v) and a denominator
block (features); order 0's denominator is the token count. With the symmetric basis
(C(n+d-1, n) features per order) all orders up to N take
C(N+d, N) (d_v + 1) numbers (hockey-stick identity), with the tensor-power basis
sum_{n<=N} d^n (d_v + 1); the softmax KV cache of T tokens takes T (d + d_v). The state is
smaller once T(d + d_v) >= state, i.e. from T* = ceil(state / (d + d_v)) on.

Numeric exports (plain Python ints): ``symmetric_state_numbers``, ``tensor_state_numbers``,
``state_numbers``, ``kv_cache_numbers``, ``crossover_ratio``, ``crossover_length``.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

from derivations import feature_maps as fm
from derivations._latex import tex
from derivations._record import Derivation, pick
from derivations._validate import check_choice, check_dim, check_order

#: the stated table of D5 at d = d_v = 64: (symmetric, tensor) block sizes per order N, and the
#: crossover T* rounded to the nearest integer (the D5 record checks both)
STATED_BLOCKS_D64 = {2: (2_080, 4_096), 3: (45_760, 262_144), 4: (766_480, 16_777_216)}
STATED_CROSSOVER_D64 = {2: 1_089, 3: 24_327, 4: 413_555}


def symmetric_state_numbers(order: int, d: int, d_v: int) -> int:
    """Numbers in the symmetric-basis state of orders 0..N: C(N+d, N) (d_v + 1) (D5).

    Args:
        order: N >= 0; d: query/key size >= 1; d_v: value size >= 1.
    Raises:
        TypeError, ValueError: an argument is not an int in range.
    """
    check_order("order", order)
    check_dim("d", d)
    check_dim("d_v", d_v)
    return math.comb(order + d, order) * (d_v + 1)


def tensor_state_numbers(order: int, d: int, d_v: int) -> int:
    """Numbers in the tensor-power state of orders 0..N: sum_{n<=N} d^n (d_v + 1) (D5).

    Raises:
        TypeError, ValueError: an argument is not an int in range.
    """
    check_order("order", order)
    check_dim("d", d)
    check_dim("d_v", d_v)
    return sum(d**n for n in range(order + 1)) * (d_v + 1)


def state_numbers(order: int, d: int, d_v: int, basis: str = "symmetric") -> int:
    """State size for ``basis`` ``"symmetric"`` or ``"tensor"`` (see the two functions above).

    Raises:
        TypeError, ValueError: bad ints, or ``basis`` not one of ``("symmetric", "tensor")``.
    """
    if basis == "symmetric":
        return symmetric_state_numbers(order, d, d_v)
    check_choice("basis", basis, fm.BASES)
    return tensor_state_numbers(order, d, d_v)


def kv_cache_numbers(T: int, d: int, d_v: int) -> int:
    """Numbers in a softmax KV cache of ``T`` tokens: T (d + d_v) (keys T x d, values T x d_v).

    Raises:
        TypeError, ValueError: ``T`` not an int >= 0, or ``d``/``d_v`` not an int >= 1.
    """
    check_order("T", T)
    check_dim("d", d)
    check_dim("d_v", d_v)
    return T * (d + d_v)


def crossover_ratio(order: int, d: int, d_v: int, basis: str = "symmetric") -> Fraction:
    """Exact T* = state / (d + d_v) (a ``Fraction``): the KV cache equals the state at T = T*."""
    return Fraction(state_numbers(order, d, d_v, basis), d + d_v)


def crossover_length(order: int, d: int, d_v: int, basis: str = "symmetric") -> int:
    """Smallest sequence length T with T (d + d_v) >= state: ceil(T*) (D5).

    From this length on the Taylor-N state is no larger than the KV cache. The stated table of
    D5 quotes T* rounded to the nearest integer (1,089 at N = 2, d = d_v = 64, where
    T* = 1089.26); this function rounds up (1,090), because at T = 1,089 the KV cache is still
    the smaller one.

    Raises:
        TypeError, ValueError: as ``state_numbers``.
    """
    ratio = crossover_ratio(order, d, d_v, basis)
    return -((-ratio.numerator) // ratio.denominator)


# ---------------------------------------------------------------------------------------------
EXPORTS = (
    "symmetric_state_numbers",
    "tensor_state_numbers",
    "state_numbers",
    "kv_cache_numbers",
    "crossover_ratio",
    "crossover_length",
)


def _syms():
    """Symbols of the D5 statement and proofs (equal symbols compare equal)."""
    import sympy

    n, big_n = sympy.symbols("n N", integer=True, nonnegative=True)
    d, d_v, t_len = sympy.symbols("d d_v T", integer=True, positive=True)
    return {"n": n, "N": big_n, "d": d, "d_v": d_v, "T": t_len}


def _statement(rec) -> None:
    import sympy

    n, big_n, d, d_v, t_len = pick(_syms(), "n", "N", "d", "d_v", "T")
    rec.statement["symmetric_state"] = tex(
        r"@s \qquad (N \ge 0,\ d \ge 1)",
        claim="sum_{n<=N} C(n+d-1, n) = C(N+d, N) (all N >= 0, d >= 1)",
        s=sympy.Eq(
            sympy.Sum(sympy.binomial(n + d - 1, n), (n, 0, big_n)) * (d_v + 1),
            sympy.binomial(big_n + d, big_n) * (d_v + 1),
        ),
    )
    rec.statement["tensor_state"] = tex(
        r"@s \qquad (N \ge 0,\ d \ge 1)",
        claim="sum_{n<=N} d^n = (d^(N+1) - 1)/(d - 1) (d >= 2), N + 1 (d = 1)",
        s=sympy.Eq(sympy.Symbol("S_tensor"), sympy.Sum(d**n, (n, 0, big_n)) * (d_v + 1)),
    )
    rec.statement["kv_cache"] = sympy.Eq(sympy.Symbol("KV"), t_len * (d + d_v))
    # T* is where the two sizes are equal; as a length it is rounded up (hand-written condition).
    rec.statement["crossover"] = tex(
        r"@t \qquad \bigl(T\,(d + d_v) \ge @state \iff T \ge T^{*}\bigr)",
        claim="kv_cache_numbers, crossover_ratio, crossover_length (= first T with KV >= state)",
        t=sympy.Eq(sympy.Symbol("T^*"), sympy.binomial(big_n + d, big_n) * (d_v + 1) / (d + d_v)),
        state=sympy.binomial(big_n + d, big_n) * (d_v + 1),
    )


def _claim_composition(rec, f) -> None:
    """The state of every order is a numerator and a denominator block (enumerated)."""
    rec.step(
        r"The state of order $n$ holds $S^{(n)}$ (features $\times\, d_v$) and $z^{(n)}$ "
        r"(features): $m_n (d_v + 1)$ numbers, $m_n = \binom{n + d - 1}{n}$ (symmetric) or "
        r"$d^n$ (tensor), D1. Order 0: $S^{(0)}$ is the running value sum ($d_v$ numbers), "
        r"$z^{(0)}$ the token count."
    )

    def composition():
        for dd in (1, 2, 3, 4):
            for dv in (1, 2, 5):
                for order in range(5):
                    sym = sum(
                        len(fm.multi_indices(k, dd)) * dv + len(fm.multi_indices(k, dd))
                        for k in range(order + 1)
                    )
                    ten = sum(
                        sum(1 for _ in itertools.product(range(dd), repeat=k)) * (dv + 1)
                        for k in range(order + 1)
                    )
                    if f["symmetric_state_numbers"](order, dd, dv) != sym:
                        return False
                    if f["tensor_state_numbers"](order, dd, dv) != ten:
                        return False
                    if f["state_numbers"](order, dd, dv, "symmetric") != sym:
                        return False
                    if f["state_numbers"](order, dd, dv, "tensor") != ten:
                        return False
        return True

    rec.verify(
        "state sizes == enumeration of the numerator and denominator blocks",
        composition,
        "d = 1..4, d_v in {1, 2, 5}, N = 0..4; blocks enumerated with D1's "
        "multi_indices and itertools.product",
    )


def _claim_hockey_stick(rec, f) -> None:
    """sum_{n<=N} C(n+d-1, n) = C(N+d, N): induction, and sympy's own summation."""
    import sympy

    n, big_n, d = pick(_syms(), "n", "N", "d")
    rec.step(
        r"Hockey stick: $\sum_{n \le N} \binom{n + d - 1}{n} = \binom{N + d}{N}$, by induction "
        r"on $N$: true at $N = 0$, and $\binom{N + d}{N} + \binom{N + d}{N + 1} = "
        r"\binom{N + d + 1}{N + 1}$ (Pascal's rule).",
        rec.statement["symmetric_state"],
    )
    rec.prove(
        "sum_{n<=N} C(n+d-1, n) = C(N+d, N) (all N >= 0, d >= 1)",
        lambda: fm.hockey_stick_step(f["closed_form"]),
        "induction with symbolic N, d; sympy simplify/gammasimp of the step",
    )
    rec.prove(
        "sympy summation agrees: sum_{n<=N} C(n+d-1, n) -> C(N+d, N)",
        lambda: (
            sympy.simplify(
                sympy.gammasimp(
                    sympy.summation(sympy.binomial(n + d - 1, n), (n, 0, big_n))
                    - f["closed_form"](big_n, d)
                )
            )
            == 0
        ),
        "sympy.summation with symbolic N, d",
    )


def _claim_geometric(rec) -> None:
    """The tensor-power state: sum_{n<=N} d^n as a geometric sum."""
    import sympy

    n, big_n, d = pick(_syms(), "n", "N", "d")
    rec.step(
        r"Tensor power: the geometric sum $\sum_{n \le N} d^n = (d^{N+1} - 1) / (d - 1)$ for "
        r"$d \ge 2$ and $N + 1$ for $d = 1$.",
        rec.statement["tensor_state"],
    )

    def geometric():
        e = sympy.Symbol("e", integer=True, nonnegative=True)  # d = e + 2 >= 2
        total = sympy.summation(d**n, (n, 0, big_n))
        general = sympy.simplify(total.subs(d, e + 2) - ((e + 2) ** (big_n + 1) - 1) / (e + 1))
        return bool(general == 0 and total.subs(d, 1) == big_n + 1)

    rec.prove(
        "sum_{n<=N} d^n = (d^(N+1) - 1)/(d - 1) (d >= 2), N + 1 (d = 1)",
        geometric,
        "sympy.summation with symbolic N, d",
    )


def _claim_crossover(rec, f) -> None:
    """KV cache size and the crossover length, against brute-force search."""
    rec.step(
        r"Softmax caches keys ($T \times d$) and values ($T \times d_v$): $T (d + d_v)$ "
        r"numbers. The state is no larger than the cache from $T^* = \text{state} / (d + d_v)$ "
        r"on; as a length, $\lceil T^* \rceil$ is the first $T$ with $T (d + d_v) \ge$ state.",
        rec.statement["crossover"],
    )

    def kv_and_crossover():
        for dd in (1, 2, 3, 8):
            for dv in (1, 2, 8):
                for tt in (0, 1, 7, 100):
                    keys = sum(1 for _ in itertools.product(range(tt), range(dd)))
                    vals = sum(1 for _ in itertools.product(range(tt), range(dv)))
                    if f["kv_cache_numbers"](tt, dd, dv) != keys + vals:
                        return False
                for order in range(4):
                    for basis in fm.BASES:
                        state = f["state_numbers"](order, dd, dv, basis)
                        brute = next(tt for tt in range(state + 2) if tt * (dd + dv) >= state)
                        if f["crossover_length"](order, dd, dv, basis) != brute:
                            return False
                        if f["crossover_ratio"](order, dd, dv, basis) != Fraction(state, dd + dv):
                            return False
        return True

    rec.verify(
        "kv_cache_numbers, crossover_ratio, crossover_length (= first T with KV >= state)",
        kv_and_crossover,
        "d in {1, 2, 3, 8}, d_v in {1, 2, 8}, N = 0..3, both bases; brute-force search",
    )


def _claim_stated_table(rec, f) -> None:
    """The stated table at d = d_v = 64 (block sizes; T* to the nearest integer)."""
    ratios = ", ".join(
        f"{float(f['crossover_ratio'](order, 64, 64)):.2f}" for order in STATED_CROSSOVER_D64
    )
    first = min(STATED_CROSSOVER_D64)
    rec.step(
        rf"The stated table at $d = d_v = 64$. $T^*$ is not an integer ({ratios} at "
        rf"$N = {', '.join(str(n) for n in STATED_CROSSOVER_D64)}$): the table quotes it rounded "
        "to the nearest integer; crossover_length rounds up, the first length where the state "
        f"is not larger ({f['crossover_length'](first, 64, 64):,} at N = {first})."
    )

    def stated_table():
        for order, (sym_b, ten_b) in STATED_BLOCKS_D64.items():
            if (fm.symmetric_block_size(order, 64), fm.tensor_block_size(order, 64)) != (
                sym_b,
                ten_b,
            ):
                return False
            if math.comb(order + 63, order) != sym_b or 64**order != ten_b:
                return False
        for order, stated in STATED_CROSSOVER_D64.items():
            ratio = f["crossover_ratio"](order, 64, 64)
            if round(ratio) != stated:
                return False
            if f["crossover_length"](order, 64, 64) != math.ceil(ratio):
                return False
            if ratio != Fraction(math.comb(order + 64, order) * 65, 128):
                return False
        return True

    rec.verify(
        "stated D5 table: blocks 2,080/4,096, 45,760/262,144, 766,480/16,777,216; "
        "T* = 1,089, 24,327, 413,555 (nearest integer)",
        stated_table,
        "d = d_v = 64, N = 2, 3, 4",
    )


def _tables(rec) -> None:
    rec.tables["block_sizes_d64"] = (
        ["N", "symmetric C(N+63, N)", "tensor 64^N"],
        [[k, fm.symmetric_block_size(k, 64), fm.tensor_block_size(k, 64)] for k in (1, 2, 3, 4)],
    )
    rec.tables["state_vs_kv_d64"] = (
        [
            "N",
            "symmetric state",
            "tensor state",
            "T* = state/(d+d_v)",
            "T* (stated, nearest)",
            "crossover_length (ceil)",
        ],
        [
            [
                k,
                symmetric_state_numbers(k, 64, 64),
                tensor_state_numbers(k, 64, 64),
                f"{float(crossover_ratio(k, 64, 64)):.2f}",
                round(crossover_ratio(k, 64, 64)),
                crossover_length(k, 64, 64),
            ]
            for k in (1, 2, 3, 4)
        ],
    )


def derive(**wrong) -> Derivation:
    """Build the D5 record.

    Keyword overrides (wrong-statement tests): any name in ``EXPORTS`` (e.g. a symmetric size
    without the denominator block), or ``closed_form`` -- a sympy function ``(N, d) -> expr``
    claimed to equal sum_{n<=N} C(n+d-1, n) (right: ``binomial(N+d, N)``).

    Raises:
        TypeError: an unknown override name.
    """
    import sympy

    f = fm.resolve_overrides(
        wrong,
        {
            "closed_form": lambda big_n, d: sympy.binomial(big_n + d, big_n),
            **{name: globals()[name] for name in EXPORTS},
        },
    )
    rec = Derivation("D5", "State size against the KV cache")
    _statement(rec)
    _claim_composition(rec, f)
    _claim_hockey_stick(rec, f)
    _claim_geometric(rec)
    _claim_crossover(rec, f)
    _claim_stated_table(rec, f)
    rec.exports = list(EXPORTS)
    _tables(rec)
    return rec


if __name__ == "__main__":
    from derivations._record import main_for

    main_for(derive)
