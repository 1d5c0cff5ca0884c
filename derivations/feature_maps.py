"""D1. The exponential kernel as a sum of tensor-power kernels (THEORY.md D1).

Numeric exports (plain Python, no sympy at import) used by ``verify/``:
``taylor_coefficient``, ``taylor_coefficients``, ``multi_indices``, ``monomial_weight``,
``symmetric_block_size``, ``tensor_block_size``, ``feature_count``.

Convention: exp(c q.k) = sum_alpha Phi(q)_alpha Phi(k)_alpha with
Phi(x)_alpha = (sqrt(c) x)^alpha / sqrt(alpha!), so ``monomial_weight(alpha) = 1/alpha!`` is the
*squared* feature coefficient (it already contains the 1/n! of the Taylor series).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

BASES = ("symmetric", "tensor")


def _check_order(name: str, n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{name}: expected a non-negative int, got {type(n).__name__} {n!r}")
    if n < 0:
        raise ValueError(f"{name}: expected a non-negative int, got {n}")
    return n


def _check_dim(name: str, d: object) -> int:
    if isinstance(d, bool) or not isinstance(d, int):
        raise TypeError(f"{name}: expected a positive int, got {type(d).__name__} {d!r}")
    if d < 1:
        raise ValueError(f"{name}: expected a positive int, got {d}")
    return d


def taylor_coefficient(n: int) -> Fraction:
    """Coefficient 1/n! of x^n in exp(x) (THEORY.md D1). Exact ``Fraction``.

    Raises:
        TypeError, ValueError: ``n`` is not a non-negative int.
    """
    return Fraction(1, math.factorial(_check_order("n", n)))


def taylor_coefficients(order: int) -> list[Fraction]:
    """[1/0!, 1/1!, ..., 1/N!] for N = ``order``: the coefficients of kappa_N."""
    return [taylor_coefficient(n) for n in range(_check_order("order", order) + 1)]


def multi_indices(n: int, d: int) -> list[tuple[int, ...]]:
    """All multi-indices alpha of length ``d`` with |alpha| = ``n``, in canonical order.

    The order is that of ``itertools.combinations_with_replacement(range(d), n)``: the sorted
    index tuple (i_1 <= ... <= i_n) is mapped to its exponent vector alpha. Its length is
    ``symmetric_block_size(n, d)`` = C(n+d-1, n).
    """
    _check_order("n", n)
    _check_dim("d", d)
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
    """Number of order-n symmetric monomial features: C(n+d-1, n) (THEORY.md D1, D5)."""
    return math.comb(_check_order("n", n) + _check_dim("d", d) - 1, n)


def tensor_block_size(n: int, d: int) -> int:
    """Number of order-n tensor-power features: d^n (THEORY.md D1, D5)."""
    return _check_dim("d", d) ** _check_order("n", n)


def feature_count(order: int, d: int, basis: str = "symmetric") -> int:
    """Total features of orders 0..``order``: C(N+d, N) (symmetric) or sum_n d^n (tensor).

    Raises:
        ValueError: ``basis`` is not ``"symmetric"`` or ``"tensor"``.
    """
    _check_order("order", order)
    if basis == "symmetric":
        return sum(symmetric_block_size(n, d) for n in range(order + 1))
    if basis == "tensor":
        return sum(tensor_block_size(n, d) for n in range(order + 1))
    raise ValueError(f"basis: expected one of {BASES}, got {basis!r}")
