"""D12 (derivations.decay): ALiBi softmax as decayed RNNs. The record holds, each wrong statement
(bias sign flipped, decay once too often in the chunked form, a decay claimed for kappa_N of the
biased score, no recurrence claimed for it, a wrong feature map) makes its claim fail, and the
exports follow their formulas."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import sympy

from derivations import decay
from derivations import feature_maps as fm
from derivations._record import Status


@pytest.fixture(scope="module")
def record(derived):
    return derived("D12")


def _failed(rec):
    return [c.name for c in rec.claims if c.status is Status.FAILED]


def test_record_holds(record):
    assert record.id == "D12" and record.status is Status.VERIFIED
    assert not _failed(record)
    assert {c.status for c in record.claims} == {Status.PROVED, Status.VERIFIED, Status.CITED}
    # the one cited claim is ALiBi itself (Press et al.); what D12 derives from it is its own
    (cited,) = [c for c in record.claims if c.status is Status.CITED]
    assert "Press, Smith & Lewis" in cited.source and "this project's" in cited.detail
    for name in record.exports:
        assert hasattr(decay, name), name


def test_agreement_table_within_bound_and_not_vacuous(record):
    rows = record.tables["alibi_agreement"][1]
    bounded = [r for r in rows if r[2] is not None]
    assert len(bounded) >= 5
    assert all(err <= bound for _, err, bound, _ in bounded)
    assert max(r[3] for r in bounded) > 1e-3  # the bound is not vacuous on this instance
    errs = [r[1] for r in rows]
    assert errs[-1] < errs[0] * 1e-4  # the truncation converges to ALiBi softmax


def test_bias_sign_flipped_fails():
    rec = decay.derive(bias_sign=-1)
    assert any(name.startswith("exp(x - m n)") for name in _failed(rec))


def test_chunk_decay_once_too_often_fails():
    failed = _failed(decay.derive(chunk_decay_extra=1))
    assert any("S_{a-1}" in n for n in failed)
    assert any(n.startswith("decayed parallel == recurrent == chunked") for n in failed)


def test_decay_claimed_for_biased_score_fails():
    failed = _failed(decay.derive(biased_fits=True))
    assert len([n for n in failed if n.startswith("no gamma with kappa_")]) == len(
        decay.BIASED_ORDERS
    )


def test_wrong_feature_weight_fails():
    def bad_weight(alpha):
        return fm.monomial_weight(alpha) * (2 if sum(alpha) == 2 else 1)

    failed = _failed(decay.derive(monomial_weight=bad_weight))
    assert "decayed parallel == recurrent == chunked (symmetric basis)" in failed
    assert "non-causal decayed parallel == forward RNN + backward RNN - diagonal" in failed


def test_unknown_override_rejected():
    with pytest.raises(TypeError, match="override"):
        decay.derive(decay_inside=True)


def test_alibi_slopes_reference_values():
    # ALiBi (Press et al. 2022): H = 8 gives 1/2, 1/4, ..., 1/256 exactly
    assert decay.alibi_slopes(8) == [2.0**-i for i in range(1, 9)]
    # H = 4: 2^-2, 2^-4, 2^-6, 2^-8; H = 6: the 4 of H = 4, then 2^-1, 2^-3 (even-indexed of H = 8)
    assert decay.alibi_slopes(6) == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    assert decay.alibi_slopes(16)[0] == pytest.approx(2**-0.5, rel=1e-15)


@pytest.mark.parametrize("bad", [0, -1])
def test_alibi_slopes_rejects_bad_heads(bad):
    with pytest.raises(ValueError, match="heads"):
        decay.alibi_slopes(bad)
    with pytest.raises(TypeError, match="heads"):
        decay.alibi_slopes(2.0)


def test_decay_slope_round_trip():
    for m in (0.0, 2**-8, 0.5, 3.0):
        assert decay.slope_from_decay(decay.decay_from_slope(m)) == pytest.approx(m, abs=1e-15)
    assert decay.decay_from_slope(Fraction(1, 2)) == math.exp(-0.5)
    with pytest.raises(ValueError, match="slope"):
        decay.decay_from_slope(-0.1)
    with pytest.raises(ValueError, match="decay"):
        decay.slope_from_decay(0.0)
    with pytest.raises(TypeError, match="decay"):
        decay.slope_from_decay("0.5")


def test_no_recurrence_statement_fails():
    """The old statement (no recurrence computes kappa_N of the biased score) fails the Jordan-block
    check in both bases; nothing else fails."""
    failed = _failed(decay.derive(biased_recurrence_exists=False))
    assert failed == [f"{decay.JORDAN} (tensor basis)", f"{decay.JORDAN} (symmetric basis)"]


def test_biased_statement_and_step_wording(record):
    """Step 5 says *scalar* decay, the record states the exact recurrence and its caveat."""
    texts = [s.text for s in record.steps]
    assert not any("no decayed RNN computes it" in t or "is not a decayed RNN" in t for t in texts)
    assert any("has no *scalar* decay" in t and "matrix transition" in t for t in texts)
    assert any("numerically poor" in t and "Jordan block" not in t for t in texts)
    assert "numerically poor" in record.statement["biased_recurrence"].latex()
    statuses = {c.name: c.status for c in record.claims}
    assert statuses[decay.SHIFT] is Status.PROVED
    assert statuses[f"{decay.JORDAN} (symmetric basis)"] is Status.VERIFIED


def test_shift_identity_and_transition_independently():
    """kappa_N(x + y) = sum_j y^j/j! kappa_{N-j}(x) at random rationals (exact), and exp(-m J) of
    the nilpotent shift has the entries (-m)^(i-l)/(i-l)! the recurrence uses (sympy's exp)."""
    import random

    def kappa(n, z):
        return sum(Fraction(z) ** i / math.factorial(i) for i in range(n + 1))

    rng = random.Random(5)
    for _ in range(50):
        n = rng.randint(0, 10)
        x, y = Fraction(rng.randint(-40, 40), 7), Fraction(rng.randint(-40, 40), 3)
        rhs = sum(y**j / math.factorial(j) * kappa(n - j, x) for j in range(n + 1))
        assert kappa(n, x + y) == rhs
    m = sympy.Symbol("m")
    size = 5
    shift = sympy.Matrix(size, size, lambda i, j: 1 if i == j + 1 else 0)
    expm = (-m * shift).exp()
    for i in range(size):
        for j in range(size):
            want = (-m) ** (i - j) / sympy.factorial(i - j) if j <= i else 0
            assert sympy.simplify(expm[i, j] - want) == 0


def test_biased_conditioning_reproduced_in_numpy(record):
    """The float32 column of the conditioning table, reproduced with numpy float32 arithmetic:
    the terms a_j rounded to float32 and summed in float32 lose digits as the condition grows,
    within Higham's gamma_{N+1}(u) sum|a_j| (D10), and the N = 16 row is off by more than 1 %."""
    rows = record.tables["biased_conditioning"][1]
    u = 2.0**-24
    for n, x, y, exact, total, cond, err32, bound32, _, _ in rows:
        terms = [
            Fraction(-y) ** j
            / math.factorial(j)
            * sum(Fraction(x) ** i / math.factorial(i) for i in range(n - j + 1))
            for j in range(n + 1)
        ]
        assert exact == 1.0 and float(sum(terms)) == 1.0
        acc = np.float32(0)
        for a in terms:
            acc = np.float32(acc + np.float32(float(a)))
        rel = abs(float(acc) - 1.0)
        gamma = (n + 1) * u / (1 - (n + 1) * u)
        assert total == float(sum(abs(a) for a in terms)) and cond == total
        assert rel <= gamma * total and rel <= bound32
        assert rel == err32  # numpy's float32 sum is the record's exact emulation
    assert rows[-1][6] > 1e-2 and rows[-1][5] > 1e6
