"""The ported tolerance rules of ``verify.anchors`` decide hand-built cases as their formulas say.

Values are chosen exactly representable so that each expected threshold follows by hand: in
float16 one ulp at 1.0 is 2**-10, at 2.0 it is 2**-9, at 0.5 it is 2**-11.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from verify import anchors as A

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
ULP1_F16 = 2.0**-10


def t(values, dtype):
    return torch.tensor(values, dtype=dtype)


# ------------------------------------------------------------------------------------------------
# the table
# ------------------------------------------------------------------------------------------------


def test_every_rule_cites_repo_path_and_a_40_hex_commit():
    assert set(A.RULES) == {
        "pytorch_get_tolerances",
        "pytorch_check_out_and_grad",
        "flash_attn",
        "flash_attn3_hopper",
        "fla_assert_close",
        "hipdnn_sdpa_fwd",
    }
    for name, rule in A.RULES.items():
        src = rule["source"]
        assert re.fullmatch(r"[0-9a-f]{40}", src["commit"]), name
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", src["repo"]), name
        assert src["path"] and src["lines"], name
        assert callable(rule["function"]) and callable(rule["passes"]), name
        assert rule["function"].__name__ == f"threshold_{name}", name
        assert rule["passes"].__name__ == f"passes_{name}", name
        assert rule["description"], name
        assert rule["function"].__doc__ and rule["passes"].__doc__, name
        assert A.THRESHOLDS[name] is rule["function"]


def test_pytorch_default_tables_as_in_the_source():
    assert A.DEFAULT_ATOL == {F16: 1e-3, BF16: 1e-3, F32: 1e-5}
    assert A.DEFAULT_RTOL == {F16: 1e-3, BF16: 1.6e-2, F32: 1.3e-6}
    assert A.PYTORCH_GET_TOLERANCES_FUDGE["flash"] == {
        "out": 1.0,
        "grad_query": 4.0,
        "grad_key": 2.0,
        "grad_value": 2.0,
    }
    assert A.PYTORCH_CHECK_OUT_AND_GRAD_FUDGE["flash"] == {
        "out": 4.0,
        "grad_query": 180.0,
        "grad_key": 16.0,
        "grad_value": 4.0,
    }


# ------------------------------------------------------------------------------------------------
# rule 1: pytorch get_tolerances
# ------------------------------------------------------------------------------------------------


def test_get_tolerances_falls_back_to_the_dtype_defaults():
    ref64 = t([1.0, 2.0], F64)
    thr = A.threshold_pytorch_get_tolerances(
        out_ref64=ref64, out_ref_lowprec=ref64.to(F16), dtype=F16
    )
    assert (thr["measured_atol"], thr["measured_rtol"]) == (0.0, 0.0)
    assert (thr["atol"], thr["rtol"]) == (1e-3, 1e-3)
    kw = {"out_ref64": ref64, "out_ref_lowprec": ref64.to(F16), "dtype": F16}
    # |1 ulp| = 9.8e-4 <= 1e-3 + 1e-3 * 1
    assert A.passes_pytorch_get_tolerances(t([1.0 + ULP1_F16, 2.0], F16), **kw)
    # 11 ulps = 1.07e-2 > 2e-3
    assert not A.passes_pytorch_get_tolerances(t([1.0 + 11 * ULP1_F16, 2.0], F16), **kw)


def test_get_tolerances_fudges_the_measured_deviation():
    ref64 = t([1.0, 2.0], F64)
    low = t([1.0, 2.0 + 5 * 2.0**-9], F16)  # 5 ulps at 2.0
    thr = A.threshold_pytorch_get_tolerances(
        out_ref64=ref64, out_ref_lowprec=low, dtype=F16, fudge_factor=2.0
    )
    assert thr["measured_atol"] == 5 * 2.0**-9
    assert thr["measured_rtol"] == 5 * 2.0**-10
    assert thr["atol"] == 2 * 5 * 2.0**-9
    assert thr["rtol"] == 2 * 5 * 2.0**-10


def test_get_tolerances_resets_an_infinite_rtol_to_the_unfudged_default():
    ref64 = t([0.0, 1.0], F64)
    low = t([ULP1_F16, 1.0], F16)  # x / 0 = inf -> nan_to_num -> 1.8e308 -> > 1e30
    atol, rtol = A.pytorch_get_tolerances(ref64, low, 4.0)
    assert rtol == 1e-3
    assert atol == 4 * 1e-3
    # 0 / 0 = NaN counts as default_rtol (then fudged)
    atol, rtol = A.pytorch_get_tolerances(t([0.0], F64), t([0.0], BF16), 3.0)
    assert rtol == pytest.approx(3 * 1.6e-2) and atol == pytest.approx(3e-3)


# ------------------------------------------------------------------------------------------------
# rule 2: pytorch check_out_and_grad
# ------------------------------------------------------------------------------------------------


def test_check_out_and_grad_floor_is_1e_5():
    ref64 = t([0.25, 0.5], F64)
    kw = {"out_ref64": ref64, "out_ref_lowprec": ref64.to(F32), "dtype": F32}
    thr = A.threshold_pytorch_check_out_and_grad(**kw, fudge_factor=180.0)
    assert thr["ref_error"] == 0.0 and thr["threshold"] == 1e-5
    assert A.passes_pytorch_check_out_and_grad(t([0.25 + 2.0**-17, 0.5], F32), **kw)  # 7.6e-6
    assert not A.passes_pytorch_check_out_and_grad(t([0.25 + 2.0**-16, 0.5], F32), **kw)


def test_check_out_and_grad_threshold_is_fudge_times_reference_error():
    ref64 = t([1.0, 1.5], F64)
    low = t([1.0 + ULP1_F16, 1.5], F16)
    kw = {"out_ref64": ref64, "out_ref_lowprec": low, "dtype": F16, "fudge_factor": 4.0}
    assert A.threshold_pytorch_check_out_and_grad(**kw)["threshold"] == 4 * ULP1_F16
    # equality passes (strict ">" in the source)
    assert A.passes_pytorch_check_out_and_grad(t([1.0 + 4 * ULP1_F16, 1.5], F16), **kw)
    assert not A.passes_pytorch_check_out_and_grad(t([1.0 + 5 * ULP1_F16, 1.5], F16), **kw)
    assert not A.passes_pytorch_check_out_and_grad(t([math.nan, 1.5], F16), **kw)


# ------------------------------------------------------------------------------------------------
# rule 3: FlashAttention 2x
# ------------------------------------------------------------------------------------------------


def test_flash_attn_2x_rejects_one_ulp_when_the_reference_error_is_zero():
    ref64 = t([1.0, 0.5], F64)
    kw = {"out_ref64": ref64, "out_ref_lowprec": ref64.to(F16), "dtype": F16}
    assert A.threshold_flash_attn(**kw)["threshold"] == 0.0
    assert A.passes_flash_attn(ref64.to(F16), **kw)  # bit-identical
    assert not A.passes_flash_attn(t([1.0 + ULP1_F16, 0.5], F16), **kw)
    # the causal/splitkv variant adds 1e-5: still below one float16 ulp at 1.0 ...
    mult, add = A.FLASH_ATTN_VARIANTS["causal"]
    assert not A.passes_flash_attn(t([1.0 + ULP1_F16, 0.5], F16), **kw, mult=mult, add=add)
    # ... but above one float32 ulp at 1.0
    kw32 = {"out_ref64": ref64, "out_ref_lowprec": ref64.to(F32), "dtype": F32}
    assert A.passes_flash_attn(t([1.0 + 2.0**-23, 0.5], F32), **kw32, mult=mult, add=add)
    assert not A.passes_flash_attn(t([1.0 + 2.0**-23, 0.5], F32), **kw32)


def test_flash_attn_allows_mult_times_the_pytorch_error():
    ref64 = t([1.0, 0.5], F64)
    kw = {"out_ref64": ref64, "out_ref_lowprec": t([1.0 - 2.0**-11, 0.5], F16), "dtype": F16}
    thr = A.threshold_flash_attn(**kw)
    assert (thr["ref_error"], thr["threshold"]) == (2.0**-11, 2.0**-10)
    assert A.passes_flash_attn(t([1.0 + ULP1_F16, 0.5], F16), **kw)  # 2 x 2**-11
    assert not A.passes_flash_attn(t([1.0 + 2 * ULP1_F16, 0.5], F16), **kw)
    mult, add = A.FLASH_ATTN_VARIANTS["output_grads"]  # 3x: 3 * 2**-11 >= 2**-10 + 2**-11
    assert A.passes_flash_attn(t([1.0, 0.5 + 2.0**-11], F16), **kw, mult=mult, add=add)


def test_flash_attn_reference_is_rounded_to_the_kernel_dtype():
    # 1 + 2**-12 rounds to 1.0 in float16: out_pt == out_ref, and out == 1.0 matches bit for bit
    ref64 = t([1.0 + 2.0**-12], F64)
    kw = {"out_ref64": ref64, "out_ref_lowprec": t([1.0], F16), "dtype": F16}
    assert A.threshold_flash_attn(**kw)["ref_error"] == 0.0
    assert A.passes_flash_attn(t([1.0], F16), **kw)


# ------------------------------------------------------------------------------------------------
# rule 4: FlashAttention 3 (hopper)
# ------------------------------------------------------------------------------------------------


def test_flash_attn3_keeps_the_rounding_noise_of_out_ref_when_the_reference_error_is_zero():
    # float16: 0.5 + 0.3 -> 0.7998046875, - 0.3 -> 0.499755859375 (ulp 2**-12 below 0.5),
    # so fwd_atol = 2 * 2**-12 = 2**-11, one ulp at 0.5
    ref64 = t([0.5, 0.0], F64)
    kw = {"out_ref64": ref64, "out_ref_lowprec": ref64.to(F16), "dtype": F16}
    thr = A.threshold_flash_attn3_hopper(**kw)
    assert (thr["ref_error"], thr["fwd_atol"], thr["threshold"]) == (0.0, 2.0**-11, 2.0**-11)
    one_ulp = t([0.5 + 2.0**-11, 0.0], F16)
    assert A.passes_flash_attn3_hopper(one_ulp, **kw)
    assert not A.passes_flash_attn(one_ulp, **kw)
    assert not A.passes_flash_attn3_hopper(t([0.5 + 2 * 2.0**-11, 0.0], F16), **kw)
    # values that survive + 0.3 - 0.3 exactly give a zero threshold here too
    kw1 = {"out_ref64": t([1.0], F64), "out_ref_lowprec": t([1.0], F16), "dtype": F16}
    assert A.threshold_flash_attn3_hopper(**kw1)["threshold"] == 0.0


# ------------------------------------------------------------------------------------------------
# rule 5: flash-linear-attention RMS ratio
# ------------------------------------------------------------------------------------------------


def _alternating(n, a, dtype):
    return torch.tensor([a if i % 2 == 0 else -a for i in range(n)], dtype=dtype)


def test_fla_ratio_on_an_error_of_known_rms():
    ref64 = torch.full((64,), 2.0, dtype=F64)  # rms(ref) = 2
    kw = {"out_ref64": ref64, "dtype": F32}
    ok = A.decide_fla_assert_close(ref64.to(F32) + _alternating(64, 0.009, F32), **kw)
    assert ok["error_rate"] == pytest.approx(0.0045, rel=1e-5)  # 0.009 / 2
    assert ok["passed"] and ok["reason"] == "ratio"
    bad = A.decide_fla_assert_close(ref64.to(F32) + _alternating(64, 0.011, F32), **kw)
    assert bad["error_rate"] == pytest.approx(0.0055, rel=1e-5)
    assert not bad["passed"]
    assert not A.passes_fla_assert_close(ref64.to(F32) + _alternating(64, 0.011, F32), **kw)
    thr = A.threshold_fla_assert_close(**kw)
    assert thr["ratio"] == 0.005 and thr["ref_rms"] == 2.0


def test_fla_warning_mode_never_fails():
    ref64 = torch.full((8,), 1.0, dtype=F64)
    actual = torch.full((8,), 1.5, dtype=F32)
    d = A.decide_fla_assert_close(actual, out_ref64=ref64, dtype=F32, warning=True)
    assert d["passed"] and d["warned"] and d["error_rate"] == pytest.approx(0.5)
    with pytest.warns(UserWarning, match="ratio: 0.5"):
        assert A.passes_fla_assert_close(actual, out_ref64=ref64, dtype=F32, warning=True)
    # FLA_CI_ENV=1 turns failures with error_rate < 0.01 or abs_err <= 0.3 into warnings
    assert (
        A.decide_fla_assert_close(actual, out_ref64=ref64, dtype=F32, ci_env=False)["passed"]
        is False
    )
    small = torch.full((8,), 1.2, dtype=F32)
    assert A.decide_fla_assert_close(small, out_ref64=ref64, dtype=F32, ci_env=True)["passed"]


def test_fla_absolute_early_pass_and_nan():
    ref64 = torch.full((4,), 1e-6, dtype=F64)
    actual = torch.full((4,), 1.9e-6, dtype=F32)  # ratio ~0.9, but max|diff| <= 1e-6
    d = A.decide_fla_assert_close(actual, out_ref64=ref64, dtype=F32)
    assert d["passed"] and d["reason"] == "abs_err<=err_atol"
    nan = torch.tensor([1.0, math.nan, 1.0, 1.0], dtype=F32)
    assert not A.passes_fla_assert_close(nan, out_ref64=torch.ones(4, dtype=F64), dtype=F32)


def test_fla_float16_squares_underflow():
    # |ref| = 2**-10 and an error of 2**-13 (a 12.5% relative error): in float16 the squared
    # error 2**-26 is below the smallest subnormal 2**-24 and rounds to 0, so the ratio is 0
    ref64 = torch.full((16,), 2.0**-10, dtype=F64)
    actual = torch.full((16,), 2.0**-10 + 2.0**-13, dtype=F16)
    d = A.decide_fla_assert_close(actual, out_ref64=ref64, dtype=F16)
    assert d["abs_err"] == 2.0**-13 and d["error_rate"] == 0.0 and d["passed"]
    d32 = A.decide_fla_assert_close(actual.float(), out_ref64=ref64, dtype=F32)
    assert d32["error_rate"] == pytest.approx(0.125, rel=1e-4) and not d32["passed"]


# ------------------------------------------------------------------------------------------------
# rule 6: hipDNN SDPA forward bound
# ------------------------------------------------------------------------------------------------


def _expected_hipdnn(max_q, max_k, max_v, d, skv, abs_scale, eps):
    """``expectedSdpaTolerance`` of hipDNN's TestDynamicTolerancesSdpa.cpp."""
    gd, gs = A.hipdnn_compute_gamma(d, eps), A.hipdnn_compute_gamma(skv, eps)
    s = d * max_q * max_k
    score = gd * s * abs_scale + s * abs_scale * eps
    softmax = gs + (skv + 1.0) * eps
    return score * max_v + softmax * max_v + gs * max_v


def test_hipdnn_gamma_switches_from_linear_to_statistical_at_nu_0_01():
    u = 2.0**-23
    assert A.hipdnn_compute_gamma(8, u) == (16 * u) / (1 - 16 * u)
    h = 2.0**-10  # float16: 2 * 8 * 2**-10 = 0.015625 >= 0.01
    assert A.hipdnn_compute_gamma(8, h) == 6 * math.sqrt(16) * h


@pytest.mark.parametrize(
    ("out", "inp", "extra"),
    [
        (F32, F32, lambda u: 0.0),
        (F16, F32, lambda u: 2.0**-10),  # output cast adds max|V| * eps(half)
        (BF16, F32, lambda u: 2.0**-7),
        (F32, F64, lambda u: 2 * 8 / math.sqrt(8) * u + u),  # input cast: 2 D A s u + u
    ],
)
def test_hipdnn_tolerance_matches_the_sources_own_expectation(out, inp, extra):
    u = 2.0**-23
    thr = A.threshold_hipdnn_sdpa_fwd(
        q_range=(-1.0, 1.0), k_range=(-1.0, 1.0), v_range=(-1.0, 1.0),
        head_dim=8, seq_kv=4, dtype=out, input_dtype=inp,
    )  # fmt: skip
    want = _expected_hipdnn(1.0, 1.0, 1.0, 8, 4, 1 / math.sqrt(8), u) + extra(u)
    assert thr["tolerance"] == pytest.approx(want, rel=1e-6)


def test_hipdnn_edge_cases_as_the_source_throws():
    base = {"q_range": (-1.0, 1.0), "k_range": (-1.0, 1.0), "v_range": (-1.0, 1.0)}
    zero_v = {**base, "v_range": (0.0, 0.0)}
    assert A.threshold_hipdnn_sdpa_fwd(**zero_v, head_dim=8, seq_kv=4, dtype=BF16)["tolerance"] == 0
    with pytest.raises(ValueError):
        A.threshold_hipdnn_sdpa_fwd(**base, head_dim=0, seq_kv=4, dtype=F32)
    with pytest.raises(OverflowError):  # bfloat16 compute, D=100: gamma = 6*sqrt(200)*2**-7
        A.threshold_hipdnn_sdpa_fwd(**base, head_dim=100, seq_kv=4, dtype=BF16, compute_dtype=BF16)
    with pytest.raises(OverflowError):  # half output, max|V| = 1e8: 1e8 * 2**-10 > 65504
        A.threshold_hipdnn_sdpa_fwd(
            **{**base, "v_range": (-1e8, 1e8)}, head_dim=8, seq_kv=4, dtype=F16, input_dtype=F32
        )


def test_hipdnn_detects_failure_like_the_source_test():
    tol = A.threshold_hipdnn_sdpa_fwd(
        q_range=(-1.0, 1.0), k_range=(-1.0, 1.0), v_range=(-1.0, 1.0),
        head_dim=8, seq_kv=4, dtype=F32,
    )["tolerance"]  # fmt: skip
    assert 1e-7 < tol < 0.01
    ref64 = torch.full((1, 1, 4, 8), 0.5, dtype=F64)
    kw = {"out_ref64": ref64, "dtype": F32, "tolerance": tol}
    assert A.passes_hipdnn_sdpa_fwd(torch.full((1, 1, 4, 8), 0.500001, dtype=F32), **kw)
    assert not A.passes_hipdnn_sdpa_fwd(torch.full((1, 1, 4, 8), 1.5, dtype=F32), **kw)
    inf = torch.full((1, 1, 4, 8), 0.5, dtype=F32)
    inf[0, 0, 0, 0] = math.inf
    assert not A.passes_hipdnn_sdpa_fwd(inf, **kw)


def test_hipdnn_ranges_from_tensors():
    q, k, v = torch.zeros(2, 3, 5, 8), torch.zeros(2, 3, 7, 8), torch.zeros(2, 3, 7, 4)
    q[0, 0, 0, 0], k[1, 1, 1, 1], v[0, 0, 0, 0] = -2.0, 3.0, 0.5
    kw = A.hipdnn_ranges_from_tensors(q, k, v)
    assert kw == {
        "q_range": (-2.0, 0.0),
        "k_range": (0.0, 3.0),
        "v_range": (0.0, 0.5),
        "head_dim": 8,
        "seq_kv": 7,
    }
