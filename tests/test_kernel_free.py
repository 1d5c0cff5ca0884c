"""The structural battery without a kernel (D11): on plain functions checked with the kernel
unknown, every structural property whose preconditions hold runs and passes on correct
attention, and fails, with a counterexample, on the defects it is about."""

from __future__ import annotations

import pytest
import unclaimed_variants as U

from verify.properties import get
from verify.properties.support.base import RunContext, run_property
from verify.spec.variant import AttentionVariant

#: run for every variant, whatever its kernel claim
ALWAYS = (
    "causality",
    "prefix-invariance",
    "batch-independence",
    "head-independence",
    "linearity-in-v",
    "determinism",
)
#: run where normalization is claimed (the default) and the measured weights are not signed
NORMALIZED = ("convex-combination", "single-key")


def unknown(name: str) -> AttentionVariant:
    return AttentionVariant(name=name, forward=getattr(U, name))  # kernel="unknown"


def run(pid: str, variant, dtype="float64", n=15):
    return run_property(get(pid), variant, RunContext(dtype=dtype, max_examples=n))


@pytest.mark.parametrize("name", ["softmax_attention", "elu_linear_attention", "windowed_softmax"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_correct_attention_passes_every_structural_property(name, dtype):
    for pid in ALWAYS + NORMALIZED:
        res = run(pid, unknown(name), dtype)
        assert res.status == "pass", (pid, res.status, res.reason)
        assert res.examples > 0 and res.max_ratio <= 1


def test_what_does_not_apply_says_why():
    res = run("permutation-equivariance", unknown("windowed_softmax"))
    assert res.status == "skip" and "position independence" in res.reason
    # the kernel-based checks need a kernel: said, not passed
    res = run("oracle-agreement", unknown("softmax_attention"))
    assert res.status == "skip" and "kernel" in res.reason


@pytest.mark.parametrize(
    ("name", "pid", "dtype"),
    [
        ("heads_mixing_softmax", "head-independence", "float64"),
        ("heads_mixing_softmax", "head-independence", "float32"),
        ("stabilizer_leak_linear", "causality", "float64"),
        ("stabilizer_leak_linear", "causality", "float32"),
        # the prefix's own keys move the stabilizer less than huge later values do: in float32
        # the eps shift on random inputs stays near rounding, so only float64 is asserted
        ("stabilizer_leak_linear", "prefix-invariance", "float64"),
    ],
)
def test_structural_defects_fail_with_a_counterexample(name, pid, dtype):
    res = run(pid, unknown(name), dtype, n=25)
    assert res.status == "fail", (pid, res.status, res.reason)
    assert res.counterexample and res.snippet
    assert res.max_ratio > 1e3  # far beyond rounding: not a borderline call


# -- extreme inputs: finite mask sentinels ----------------------------------------------------
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_finite_mask_sentinel_is_hit(dtype):
    """-1e4 written for masked scores leaks once every visible score of a row is below it
    (``extreme_scores``, up to 1e6 in float32/float64): causality fails with a counterexample of
    that case; a sentinel at finfo.min passes, and so does -inf."""
    claims = {"kernel": "softmax"}
    leak = AttentionVariant(name="-1e4", forward=U.minus_1e4_softmax, **claims)
    res = run("causality", leak, dtype, n=30)
    assert res.status == "fail", (res.status, res.reason)
    assert "extreme_scores" in res.counterexample, res.counterexample
    for fn in (U.finfo_min_softmax, U.softmax_attention):
        for pid in ("causality", "prefix-invariance", "accepts-inputs"):
            ok = run(pid, AttentionVariant(name="ok", forward=fn, **claims), dtype, n=30)
            assert ok.status == "pass", (fn, pid, ok.status, ok.reason)


def test_extreme_magnitude_is_stated_per_dtype():
    """1e6 where the range allows (float64, float32, bfloat16); float16 keeps q_0 k_0 = M/c and
    d such terms below finfo.max / 16 (1448 at d = 8), so its scores cannot overflow."""
    import math

    import torch

    from verify.strategies import extreme_score_magnitude

    for dt in (torch.float64, torch.float32, torch.bfloat16):
        assert extreme_score_magnitude(dt, 8) == 1e6
    m = extreme_score_magnitude(torch.float16, 8)
    assert m == pytest.approx(65504 / 16 / math.sqrt(8)) and 8 * m * math.sqrt(8) <= 65504


def test_single_key_leaves_out_rows_a_signed_kernel_gives_no_weight():
    """Identity-map linear attention with zero denominators guarded, kernel unknown: one key
    with q.k = 0 gets weight 0 (an empty row), so single-key judges only the other rows and
    passes; the rows with a nonzero measured weight are still judged."""
    from verify.engine.check import check

    fast = dict(isolate=False, profile="ci", max_examples=25, dtypes=("float64",), probe=False)
    res = check(U.identity_linear_guarded, kernel="unknown", select=("single-key",), **fast)
    assert {r.status for r in res.results} == {"pass"}, [(r.status, r.reason) for r in res.results]
