"""Argument validators shared by the numeric exports of ``derivations/`` (plain Python, no sympy).

Every validator raises ``TypeError`` for a value of the wrong type and ``ValueError`` for one out
of range; the message names the argument, what was expected and what was received. Each returns
the validated value (converted where its docstring says so), so a call can sit in an expression.
"""

from __future__ import annotations

import math
from fractions import Fraction


# -- integers -----------------------------------------------------------------------------------
def check_int(
    name: str,
    n: object,
    minimum: int | None = None,
    *,
    what: str | None = None,
    array_ok: bool = False,
) -> int:
    """``n`` as an int (``bool`` is rejected); with ``minimum``, also ``n >= minimum``.

    ``what`` words the expectation in both messages (default ``"an int >= {minimum}"``, or
    ``"an int"`` without a minimum). With ``array_ok``, a numpy array of integers is accepted
    too (every element checked; returned as an int64 array): the elementwise form of a bound.
    """
    if what is None:
        what = "an int" if minimum is None else f"an int >= {minimum}"
    if array_ok and _is_array(n):
        arr = n
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{name}: expected an array of ints, got dtype {arr.dtype}")
        if minimum is not None and arr.size and int(arr.min()) < minimum:
            raise ValueError(f"{name}: expected {what} elementwise, got {int(arr.min())}")
        return arr.astype("int64")
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{name}: expected {what}, got {type(n).__name__} {n!r}")
    if minimum is not None and n < minimum:
        raise ValueError(f"{name}: expected {what}, got {n}")
    return n


def check_order(name: str, n: object, *, allow_none: bool = False) -> int | None:
    """A non-negative int (an order N, a length); ``None`` passes when ``allow_none`` (exp)."""
    if n is None and allow_none:
        return None
    if allow_none:
        check_int(name, n, what="a non-negative int or None (exp)")
    return check_int(name, n, 0, what="a non-negative int")


def check_dim(name: str, d: object) -> int:
    """A positive int (a dimension, a count of features)."""
    return check_int(name, d, 1, what="a positive int")


# -- real numbers -------------------------------------------------------------------------------
def _is_array(x: object) -> bool:
    """A numpy array (not a numpy scalar, which is an int or float already)."""
    return type(x).__name__ == "ndarray" and type(x).__module__ == "numpy"


def check_real(
    name: str, x: object, *, positive: bool = False, nonneg: bool = False, array_ok: bool = False
) -> float:
    """A finite real (int or float, not bool) as a float; optionally > 0 or >= 0.

    With ``array_ok``, a numpy array of reals is accepted too (every element checked; returned
    as a float64 array): the elementwise form of a bound, evaluated once on whole arrays.
    """
    if array_ok and _is_array(x):
        import numpy as np

        if x.dtype.kind not in "iuf":
            raise TypeError(f"{name}: expected an array of reals, got dtype {x.dtype}")
        arr = x.astype(np.float64)
        if not np.isfinite(arr).all():
            raise ValueError(f"{name}: expected finite real numbers, got a non-finite element")
        if positive and arr.size and not (arr > 0).all():
            raise ValueError(f"{name}: expected positive numbers, got {float(arr.min())!r}")
        if nonneg and arr.size and not (arr >= 0).all():
            raise ValueError(f"{name}: expected non-negative numbers, got {float(arr.min())!r}")
        return arr
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"{name}: expected a real number, got {type(x).__name__} {x!r}")
    xf = float(x)
    if not math.isfinite(xf):
        raise ValueError(f"{name}: expected a finite real number, got {x!r}")
    if positive and not xf > 0:
        raise ValueError(f"{name}: expected a positive number, got {x!r}")
    if nonneg and not xf >= 0:
        raise ValueError(f"{name}: expected a non-negative number, got {x!r}")
    return xf


def check_open_unit(name: str, x: object) -> float:
    """A finite real strictly between 0 and 1 (a probability level, a threshold), as a float."""
    xf = check_real(name, x)
    if not 0.0 < xf < 1.0:
        raise ValueError(f"{name}: expected a number in (0, 1), got {x!r}")
    return xf


def check_exact(name: str, x: object) -> Fraction:
    """A finite real (int, float or Fraction) as an exact Fraction (floats converted exactly)."""
    if isinstance(x, bool) or not isinstance(x, (int, float, Fraction)):
        raise TypeError(f"{name}: expected a finite real number, got {type(x).__name__} {x!r}")
    if isinstance(x, float) and not math.isfinite(x):
        raise ValueError(f"{name}: expected a finite real number, got {x!r}")
    return Fraction(x)


def check_exact_or_mpf(name: str, x: object) -> tuple[Fraction, str]:
    """Exact rational value of a finite real ``x`` and its kind ('float', 'fraction', 'mpf').

    Accepts int, float, Fraction and ``mpmath.mpf`` (whose binary value is converted exactly).
    """
    import mpmath

    if isinstance(x, bool) or not isinstance(x, (int, float, Fraction, mpmath.mpf)):
        raise TypeError(
            f"{name}: expected a finite real number (int, float, Fraction or mpmath.mpf), "
            f"got {type(x).__name__} {x!r}"
        )
    if isinstance(x, mpmath.mpf):
        if not mpmath.isfinite(x):
            raise ValueError(f"{name}: expected a finite real number, got {x}")
        sign, man, exp, _ = x._mpf_
        val = Fraction(man * (2**exp if exp >= 0 else 1), 1 if exp >= 0 else 2**-exp)
        return (-val if sign else val), "mpf"
    if isinstance(x, float) and not math.isfinite(x):
        raise ValueError(f"{name}: expected a finite real number, got {x}")
    return Fraction(x), ("fraction" if isinstance(x, Fraction) else "float")


# -- choices ------------------------------------------------------------------------------------
def check_choice(name: str, value: object, choices: tuple) -> object:
    """``value`` if it is one of ``choices`` (a tuple, shown as such in the message)."""
    if value not in choices:
        raise ValueError(f"{name}: expected one of {choices}, got {value!r}")
    return value
