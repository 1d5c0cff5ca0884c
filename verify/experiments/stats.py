"""Paired tests across seeds: the exact sign-flip permutation test, its margin-shifted one-sided
forms ("beyond the margin") and equivalence (TOST) form, and Holm's correction. Pure Python; no
scipy.

Every comparison of two forms A and B in one set-up pairs their runs by seed (the same initial
weights and the same data batches at a seed), so the statistic is the per-seed difference
d_i = acc_A(seed i) - acc_B(seed i). Under the null hypothesis that the form labels are
exchangeable within a seed, each d_i is as likely to have either sign, so the 2^n sign patterns
of (|d_1|, ..., |d_n|) are equally likely and the p-value is the fraction of them whose mean is at
least as extreme as the observed mean -- exact, with no assumption on the distribution of d.

The margin forms test a shifted null (mean(d) <= +margin, mean(d) >= -margin, |mean(d)| >=
margin) by flipping the signs of d_i -+ margin. That is exact when, at the boundary of the null,
d_i - mean(d) is symmetric about 0 (a location-shift model of the seed-to-seed noise). The
shifted one-sided nulls and their intersection-union as equivalence are Schuirmann's two one-sided
tests (J. Pharmacokinet. Biopharm. 15, 657-680, 1987); the exact sign-flip test as each one-sided
test is this project's choice.

What n seeds can decide: the smallest two-sided p-value is 2 / 2^n (every d_i of one sign), the
smallest one-sided p-value 1 / 2^n. With Holm's correction over m tests at level alpha, a
difference can be declared only if 2 / 2^n <= alpha / m; at n = 5 (p >= 0.0625) nothing can be
declared at all, at n = 10 (p >= 0.00195) up to m = 25 tests of a family can be (one-sided and
TOST tests, p >= 1 / 2^n: up to m = 51).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: family-wise error rate of every family of tests
ALPHA = 0.05
#: largest n handled by full enumeration (2^n patterns)
MAX_EXACT = 20


def _check(d: Sequence[float]) -> list[float]:
    d = [float(x) for x in d]
    if not d:
        raise ValueError("d: expected at least one paired difference, got none")
    if len(d) > MAX_EXACT:
        raise ValueError(f"d: exact enumeration handles up to {MAX_EXACT} pairs, got {len(d)}")
    if not all(math.isfinite(x) for x in d):
        raise ValueError(f"d: expected finite differences, got {d}")
    return d


def _sums(d: list[float]) -> list[float]:
    """The 2^n signed sums sum_i s_i d_i, s in {-1, +1}^n."""
    sums = [0.0]
    for x in d:
        sums = [s + x for s in sums] + [s - x for s in sums]
    return sums


def sign_flip_p(d: Sequence[float], alternative: str = "two-sided") -> float:
    """Exact p-value of the paired sign-flip permutation test of mean(d) = 0.

    ``alternative``: ``two-sided`` (|sum| as extreme as observed), ``greater`` (mean(d) > 0),
    ``less`` (mean(d) < 0). Ties are counted as extreme (a relative tolerance of 1e-9 absorbs
    rounding in the sums), so the test is exact and conservative for discrete data.
    """
    d = _check(d)
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative: expected two-sided, greater or less, got {alternative!r}")
    obs = sum(d)
    tol = 1e-9 * (1.0 + sum(abs(x) for x in d))
    sums = _sums(d)
    if alternative == "two-sided":
        hits = sum(abs(s) >= abs(obs) - tol for s in sums)
    elif alternative == "greater":
        hits = sum(s >= obs - tol for s in sums)
    else:
        hits = sum(s <= obs + tol for s in sums)
    return hits / len(sums)


def _check_margin(margin: float) -> float:
    if not (
        isinstance(margin, (int, float))
        and not isinstance(margin, bool)
        and margin > 0
        and math.isfinite(margin)
    ):
        raise ValueError(f"margin: expected a finite number > 0, got {margin!r}")
    return float(margin)


def beyond_margin_p(d: Sequence[float], margin: float, direction: str) -> float:
    """Exact p-value of the one-sided sign-flip test that mean(d) lies beyond the margin.

    ``direction``: ``above`` -- H0: mean(d) <= +margin against mean(d) > +margin, the sign-flip
    test of the shifted differences d_i - margin (alternative ``greater``); ``below`` -- H0:
    mean(d) >= -margin against mean(d) < -margin, the test of d_i + margin (alternative
    ``less``). The shift makes the boundary of H0 the centre of the sign flips, so a small
    p-value shows the difference *exceeds the margin*, not merely that it is non-zero (a
    point estimate beyond the margin with a large p-value shows nothing). ``margin``: a finite
    number > 0 (units of d); ValueError otherwise, or for bad ``d`` (see ``sign_flip_p``).
    """
    margin = _check_margin(margin)
    if direction == "above":
        return sign_flip_p([x - margin for x in _check(d)], "greater")
    if direction == "below":
        return sign_flip_p([x + margin for x in _check(d)], "less")
    raise ValueError(f"direction: expected above or below, got {direction!r}")


def equivalence_p(d: Sequence[float], margin: float) -> float:
    """Two one-sided sign-flip tests (TOST) of |mean(d)| < ``margin``: the larger of the p-values
    of mean(d) > -margin (test on d + margin) and mean(d) < margin (test on d - margin).

    A small p-value shows the two forms are equivalent within the margin; a large one shows
    nothing (too few seeds, or a real difference).
    """
    margin = _check_margin(margin)
    d = _check(d)
    p_lower = sign_flip_p([x + margin for x in d], "greater")
    p_upper = sign_flip_p([x - margin for x in d], "less")
    return max(p_lower, p_upper)


def min_p(n: int, alternative: str = "two-sided") -> float:
    """The smallest p-value the sign-flip test can give with n pairs."""
    return (2.0 if alternative == "two-sided" else 1.0) / 2**n


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: sort ascending,
    adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)). Reject where adj <= alpha; this controls
    the family-wise error rate at alpha under any dependence between the tests."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def sample_std(xs: Sequence[float]) -> float | None:
    """Sample standard deviation (ddof = 1); None with fewer than two values."""
    if len(xs) < 2:
        return None
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
