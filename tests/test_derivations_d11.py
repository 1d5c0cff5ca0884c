"""D11 (derivations.leaks): the leak rule of the kernel-free structural checks. The record holds
(statuses), wrong statements make it fail, and the exported thresholds follow their formulas;
the conditions of "no false alarm" (first order, identical weights or the retiled threshold) are
stated, and the thresholds table prints the u the code applies (the accumulation dtype's)."""

from __future__ import annotations

import math

import pytest

from derivations import leaks
from derivations._record import Status
from derivations.rounding import gamma, unit_roundoff


@pytest.fixture(scope="module")
def record(derived):
    return derived("D11")


def test_record_holds(record):
    assert record.id == "D11" and record.status is Status.VERIFIED
    assert not [c.name for c in record.claims if c.status is Status.FAILED]
    statuses = {c.status for c in record.claims}
    assert Status.PROVED in statuses and Status.CITED in statuses
    for name in record.exports:
        assert hasattr(leaks, name), name
    emulated = record.tables["emulated"][1]
    assert all(row[3] for row in emulated)  # the bound holds on every emulated instance
    assert all(row[2] > 0.01 for row in emulated)  # and is not vacuous


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"reorder_factor": 0.5}, "two evaluations (left, right, pairwise)"),
        ({"detection_factor": 1}, "detection"),
        ({"weight_term_factor": 0}, "whose terms differ by relative perturbations"),
    ],
)
def test_wrong_statement_fails(kwargs, needle):
    rec = leaks.derive(**kwargs)
    assert rec.status is Status.FAILED
    assert any(needle in c.name for c in rec.claims if c.status is Status.FAILED)


def test_exports():
    u = unit_roundoff("float32")
    assert leaks.reorder_threshold(8, u) == 2 * gamma(7, u)
    T = leaks.ratio_difference_bound(8, u, 2.0, 3.0, 0.5)
    assert T == pytest.approx(2 * gamma(7, u) * (2.0 + 0.5 * 3.0) + 2 * u * 0.5, rel=1e-15)
    assert leaks.detectable_leak(8, u, 2.0, 3.0, 0.5) == 2 * T
    with pytest.raises(ValueError, match="n"):
        leaks.reorder_threshold(0, u)
    with pytest.raises(ValueError, match="A"):
        leaks.ratio_difference_bound(8, u, -1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="gamma_n needs"):
        leaks.reorder_threshold(2**10, unit_roundoff("bfloat16"))
    assert math.isfinite(leaks.reorder_threshold(1, unit_roundoff("float64")))


def test_no_false_alarm_states_its_conditions(record):
    """The old unconditional "no false alarm -- proved" is gone: the claim and the threshold
    statement say first order and identical weights, and the retiled threshold is stated."""
    names = [c.name for c in record.claims]
    assert "no false alarm: l = 0 gives m <= T" not in names
    alarm = next(c for c in record.claims if c.name == leaks.NO_FALSE_ALARM)
    assert alarm.status is Status.PROVED and "first order" in alarm.name
    assert "identical weights" in alarm.name and "retiled" in alarm.name
    threshold = record.statement["threshold"].latex()
    assert r"\text{first order in } u" in threshold and "identical weights" in threshold
    retiled = record.statement["retiled"].latex()
    assert r"\eta_s = u (m - x_s)" in retiled
    split = record.tables["split_kv"][1]
    assert all(row[4] for row in split) and all(row[2] > 0.01 for row in split)


def test_thresholds_table_uses_the_accumulation_dtype(record):
    """The table's u is what verify.properties.support.structure applies: the accumulation
    dtype's (float32 for bfloat16 and float16 inputs), from the same mapping as the code."""
    from verify.exact.errors import ACCUMULATION

    assert leaks.ACCUMULATION == ACCUMULATION
    header, rows = record.tables["thresholds"]
    assert header[:3] == ["input dtype", "accumulation dtype", "u (accumulation)"]
    by_dtype = {r[0]: r for r in rows}
    assert by_dtype["bfloat16"][1] == "float32" and by_dtype["bfloat16"][2] == 2.0**-24
    assert by_dtype["float16"][2] == 2.0**-24 and by_dtype["float64"][2] == 2.0**-53
    # tau at n = 1024 exists for bf16 inputs (fp32 sums), where bf16's own u gives none
    assert by_dtype["bfloat16"][5] == f"{2 * gamma(1023, 2.0**-24):.3g}"
    assert 1023 * unit_roundoff("bfloat16") >= 1
    assert "2 u_in |o|" in by_dtype["bfloat16"][-1] and "none" in by_dtype["float32"][-1]


def test_retiled_exports():
    u = unit_roundoff("float32")
    eta = leaks.online_weight_relative_error(3.0, u, 2 * u, True)
    assert eta == 3.0 * u + 2 * (2 * u) + 2 * u
    assert leaks.online_weight_relative_error(0.0, u, 2 * u, False) == 3 * u
    T = leaks.ratio_difference_bound(8, u, 2.0, 1.0, 0.5)
    assert leaks.retiled_threshold(8, u, 2.0, 1.0, 0.5, eta) == T + 2 * eta * (2.0 + 0.5)
    with pytest.raises(ValueError, match="eta"):
        leaks.retiled_threshold(8, u, 2.0, 1.0, 0.5, -1.0)
    with pytest.raises(ValueError, match="score_gap"):
        leaks.online_weight_relative_error(-1.0, u, u, True)


def test_split_kv_weight_difference_in_numpy():
    """Independently of the record: a float16 row evaluated in one pass and split in two with
    numpy float16 arithmetic (exp computed in float64 and rounded), the two weights of a key
    whose block max is not the row max differ in float16 -- the identical-weight premise fails
    for split-KV -- while the outputs stay within the retiled threshold."""
    import numpy as np

    x = np.array([0.0, -0.3, -2.7], dtype=np.float16)  # block 2 = keys 1, 2; its max -0.3
    v = np.array([0.25, -1.0, 1.0], dtype=np.float16)
    one = [np.float16(np.exp(np.float64(np.float16(xi - x.max())))) for xi in x]
    mb = x[1:].max()
    inner = [np.float16(np.exp(np.float64(np.float16(xi - mb)))) for xi in x[1:]]
    scale = np.float16(np.exp(np.float64(np.float16(mb - x.max()))))
    split_w2 = np.float16(scale * inner[1])
    assert split_w2 != one[2]  # the weights of key 2 differ
    o1 = np.float16(
        np.float16(sum(np.float16(a * b) for a, b in zip(one, v))) / np.float16(sum(one))
    )
    n1 = np.float16(one[0] * v[0])
    d1 = one[0]
    n2 = np.float16(scale * np.float16(sum(np.float16(a * b) for a, b in zip(inner, v[1:]))))
    d2 = np.float16(scale * np.float16(sum(inner)))
    o2 = np.float16(np.float16(n1 + n2) / np.float16(d1 + d2))
    w = np.exp(x.astype(np.float64) - 0.0)
    W = w / w.sum()
    o = float(W @ v.astype(np.float64))
    A = float(np.abs(W) @ np.abs(v.astype(np.float64)))
    u = 2.0**-11
    eta = max(leaks.online_weight_relative_error(float(-xi), u, u, True) for xi in x.astype(float))
    assert abs(float(o1) - float(o2)) <= leaks.retiled_threshold(3, u, A, 1.0, abs(o), eta)
