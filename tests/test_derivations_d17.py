"""D17 (derivations.kernel_arithmetic_record): the record verifies every lemma of
``derivations.kernel_arithmetic`` on the toy format with ratios that are not vacuous; each lemma
with the kernel's term taken out (its faulty twin) makes its claim fail; the exported numbers
agree with their definitions; the array-capable lemmas give on arrays what they give elementwise.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from derivations import kernel_arithmetic as ka
from derivations import kernel_arithmetic_record as d17
from derivations._record import Status
from derivations.rounding import gamma, ulps_to_relative

U = 2.0**-24


def _failed(rec):
    return {c.name for c in rec.claims if c.status is Status.FAILED}


@pytest.fixture(scope="module")
def record(derived):
    return derived("D17")


def test_record_verifies(record):
    assert record.id == "D17" and record.status is Status.VERIFIED and not _failed(record)
    header, rows = record.tables["toy_checks"]
    assert header[2] == "max observed/bound"
    for row in rows:
        assert 0.05 < row[2] <= 1.0, row  # not vacuous, never above the bound
    twins = {(r[0], r[3]): r[4] for r in rows if r[3]}
    # every twin but the weighted split-KV one is exceeded by the instances
    assert all(v is True for k, v in twins.items() if k[0] != "split-KV weighted scales"), twins
    for name in record.exports:
        assert hasattr(ka, name), name


def test_every_cited_constant_is_cited(record):
    sources = {c.source for c in record.claims if c.status is Status.CITED}
    for const in (
        ka.EX2_APPROX_F32_ULPS,
        ka.TANH_APPROX_F32_REL,
        ka.RCP_APPROX_F32_ULPS,
        ka.FAST_LOG_F32,
    ):
        assert const.source in sources
    assert ka.FASI in sources


def test_wrong_statements_fail_their_own_claims():
    """Each lemma with the kernel's term taken out; the checks are independent, so one record
    shows every claim failing for its own override and the others still verified."""
    wrong = {
        "mma_unit": lambda u, accumulation: u,  # truncation bounded with u, not 2u
        "tf32_product_rel": lambda tf32: 2.0**-11 if tf32 else 0.0,  # one rounding
        "fused_exponent": lambda sh, m, u, fused=True: u * sh + u * u * (1 + u) * m,  # u, gamma_2
        "reciprocal": lambda u, k: u,  # the IEEE division's bound
        "flushed": lambda tiny, ftz, eta: eta,  # no flush term
        "fast_log": lambda lg: ulps_to_relative(ka.FAST_LOG_F32_ULPS, U) * lg,  # ulps only
    }
    failed = _failed(d17.derive(**wrong))
    assert failed == {
        d17.UNFUSED,
        d17.MMA,
        d17.TF32,
        d17.FUSED,
        d17.WEIGHTS,
        d17.RECIPROCAL,
        d17.FLUSH,
        d17.FAST_LOG,
    }, failed


def test_fused_exponent_without_the_cross_term_fails():
    def no_cross(shift_abs, max_abs, u, fused=True):
        return gamma(2, u) * shift_abs

    assert d17.FUSED in _failed(d17.derive(fused_exponent=no_cross))


def test_unfused_exponent_with_the_fused_bound_fails():
    def fused_for_both(shift_abs, max_abs, u, fused=True):
        return ka.fused_exponent_abs_error(shift_abs, max_abs, u)

    assert _failed(d17.derive(fused_exponent=fused_for_both)) == {d17.UNFUSED}


def test_split_scale_without_the_subtraction_fails():
    def no_gap(a, b, gap, u, k):
        return ka.split_kv_scale_rel(a, b, 0.0, u, k)

    assert d17.SPLIT_SCALE in _failed(d17.derive(split_scale=no_gap))


def test_split_output_without_theta_a_fails():
    def no_theta_a(beta, a, theta, p, u):
        return ka.split_kv_output_bound(beta, a, theta, p, u) - theta * a

    assert d17.SPLIT_OUTPUT in _failed(d17.derive(split_output=no_theta_a))


def test_weighted_split_scale_without_the_lse_errors_fails():
    def no_lse(a, b, p, u, k):
        return ka.split_kv_weighted_scale_rel(0.0, 0.0, p, u, k)

    assert d17.SPLIT_WEIGHTED in _failed(d17.derive(split_weighted=no_lse))


def test_unknown_override_is_a_type_error():
    with pytest.raises(TypeError, match="mma"):
        d17.derive(mma=lambda u, a: u)


# -- the exported numbers -------------------------------------------------------------------------
def test_numbers_agree_with_their_definitions():
    assert ka.mma_unit(U, "truncate") == 2 * U and ka.mma_unit(U, "nearest") == U
    assert ka.tf32_product_rel(True) == (1 + 2.0**-11) ** 2 - 1 and ka.tf32_product_rel(False) == 0
    assert ka.reciprocal_normalization_rel(U, 0.5) == (1 + U) ** 2 - 1  # rcp correctly rounded
    assert ka.reciprocal_normalization_rel(U, 1.5) == (1 + 3 * U) * (1 + U) - 1
    assert ka.flushed_abs_error(2.0**-126, True, 2.0**-150) == 2.0**-126
    assert ka.flushed_abs_error(2.0**-126, False, 2.0**-150) == 2.0**-150
    assert ka.fused_exponent_abs_error(0.0, 3.0, U) == U * U * (1 + U) * 3.0  # at the maximum
    assert ka.fused_exponent_abs_error(2.0, 0.0, U) == gamma(2, U) * 2.0
    assert ka.split_kv_scale_rel(0.0, 0.0, 0.0, U, 2.5) == pytest.approx(5 * U, rel=1e-9)
    assert ka.split_kv_output_bound(0.0, 1.0, 0.0, 1, U) == gamma(1, U)
    assert ka.fast_log_abs_error(0.0) == 2.0**-21.41
    # the preset is the cited constants, not retyped numbers
    fa2 = ka.FLASH_ATTENTION_2
    assert fa2.exp_ulps == ka.EX2_APPROX_F32_ULPS.value == 2.5
    assert fa2.tanh_rel == ka.TANH_APPROX_F32_REL.value == 2.0**-11
    assert ka.RCP_APPROX_F32_ULPS.value == 1.5 and ka.FAST_LOG_F32_ULPS == 3.5
    assert ka.parse_arithmetic("flash-attention-2+split:4").split_kv == 4
    assert ka.parse_arithmetic(None, "cuda:0") == ka.DEVICE_DEFAULTS["cuda"]


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="accumulation"):
        ka.mma_unit(U, "stochastic")
    with pytest.raises(ValueError, match="shift_abs"):
        ka.fused_exponent_abs_error(-1.0, 0.0, U)
    with pytest.raises(ValueError, match="arithmetic"):
        ka.parse_arithmetic("flash-attention-3")
    with pytest.raises(ValueError, match="split_kv"):
        ka.KernelArithmetic(split_kv=0).validated()


# -- arrays and scalars ---------------------------------------------------------------------------
XS = [0.0, 1e-3, 0.5, 3.0, 41.0]


@pytest.mark.parametrize(
    ("name", "fn"),
    [
        ("fused_exponent_abs_error", lambda x: ka.fused_exponent_abs_error(x, 2 * x, U)),
        ("split_kv_scale_rel", lambda x: ka.split_kv_scale_rel(x * U, 3 * U, x, U, 2.5)),
        (
            "split_kv_weighted_scale_rel",
            lambda x: ka.split_kv_weighted_scale_rel(x * U, U, 4, U, 2.5),
        ),
        ("split_kv_output_bound", lambda x: ka.split_kv_output_bound(x * U, x, x * U, 4, U)),
        ("fast_log_abs_error", lambda x: ka.fast_log_abs_error(x)),
    ],
)
def test_arrays_give_what_scalars_give(name, fn):
    got = fn(np.array(XS))
    assert isinstance(got, np.ndarray) and got.shape == (len(XS),), name
    each = [fn(x) for x in XS]
    assert all(isinstance(v, float) for v in each), name
    assert got.tolist() == each, name
    assert not any(math.isnan(v) for v in each)
