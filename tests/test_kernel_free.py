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
