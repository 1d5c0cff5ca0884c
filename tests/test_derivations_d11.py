"""D11 (derivations.leaks): the leak rule of the kernel-free structural checks. The record holds
(statuses), wrong statements make it fail, and the exported thresholds follow their formulas."""

from __future__ import annotations

import math

import pytest

from derivations import leaks
from derivations._record import Status
from derivations.rounding import gamma, unit_roundoff


@pytest.fixture(scope="module")
def record():
    return leaks.derive()


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
