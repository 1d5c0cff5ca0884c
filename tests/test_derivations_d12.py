"""D12 (derivations.decay): ALiBi softmax as decayed RNNs. The record holds, each wrong statement
(bias sign flipped, decay once too often in the chunked form, a decay claimed for kappa_N of the
biased score, a wrong feature map) makes its claim fail, and the exports follow their formulas."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from derivations import decay
from derivations import feature_maps as fm
from derivations._record import Status


@pytest.fixture(scope="module")
def record():
    return decay.derive()


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
