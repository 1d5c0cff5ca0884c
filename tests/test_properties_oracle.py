"""The oracle-check properties (verify/properties/oracle_checks.py): they pass on the built-in
implementations in every dtype they claim, and fail on deliberately faulty twins."""

from __future__ import annotations

import math

import pytest
import torch

from verify import builtins as variants
from verify.properties.oracle_checks import EDGE_CASES, ORACLE_AGREEMENT
from verify.properties.support.base import RunContext, run_property
from verify.spec.variant import AttentionVariant


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16", "float16"])
@pytest.mark.parametrize("name", ["softmax", "taylor-2", "taylor-3", "linear-elu1", "linear-favor"])
@pytest.mark.parametrize("prop", [ORACLE_AGREEMENT, EDGE_CASES], ids=lambda p: p.id)
def test_builtins_pass(prop, name, dtype):
    res = run_property(prop, variants.get(name), RunContext(dtype=dtype, max_examples=8))
    assert res.status == "pass", (res.reason, res.counterexample)
    assert res.examples > 0 and 0 <= res.max_ratio <= 1


def _taylor_with_coefficients(coef):
    """A 'Taylor-3' whose series uses coef(n) instead of 1/n! (a classic slip: 1/n, which
    agrees with 1/n! up to n = 2, so order 3 is the first to show it)."""

    def forward(q, k, v, *, causal, denominator="sum"):
        x = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        w = sum(coef(n) * x**n for n in range(4))
        if causal:
            T = q.shape[-2]
            w = w.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), 0.0)
        return (w @ v) / w.sum(-1, keepdim=True)

    return forward


def test_oracle_agreement_catches_wrong_coefficients():
    bad = AttentionVariant(
        "taylor-3-coef-1/n", _taylor_with_coefficients(lambda n: 1 / max(n, 1)), kernel="taylor:3"
    )
    res = run_property(ORACLE_AGREEMENT, bad, RunContext(dtype="float64", max_examples=25))
    assert res.status == "fail" and res.counterexample
    twin = AttentionVariant(
        "taylor-3-coef-1/n!",
        _taylor_with_coefficients(lambda n: 1 / math.factorial(n)),
        kernel="taylor:3",
    )
    ok = run_property(ORACLE_AGREEMENT, twin, RunContext(dtype="float64", max_examples=25))
    assert ok.status == "pass", ok.reason


def _softmax(stable: bool):
    """Softmax with or without the max-subtraction of D6 (float32 accumulation, output in the
    input dtype, as the two-level model expects)."""

    def forward(q, k, v, *, causal):
        q32, k32, v32 = q.float(), k.float(), v.float()
        s = (q32 @ k32.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        if causal:
            T = q.shape[-2]
            s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -math.inf)
        if stable:
            s = s - s.amax(-1, keepdim=True)
        w = torch.exp(s)
        return ((w @ v32) / w.sum(-1, keepdim=True)).to(q.dtype)

    return forward


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_oracle_agreement_catches_an_unstable_softmax(dtype):
    """Scores beyond exp's overflow (the softmax radius strategy reaches 4 x safe_exp_radius)
    make exp overflow without the max-subtraction (D6); the stable twin passes."""
    bad = AttentionVariant("softmax-unshifted", _softmax(False), kernel="softmax", dtypes=(dtype,))
    res = run_property(ORACLE_AGREEMENT, bad, RunContext(dtype=dtype, max_examples=25))
    assert res.status == "fail", res.reason
    assert res.counterexample
    good = AttentionVariant("softmax-shifted", _softmax(True), kernel="softmax", dtypes=(dtype,))
    ok = run_property(ORACLE_AGREEMENT, good, RunContext(dtype=dtype, max_examples=25))
    assert ok.status == "pass", ok.reason


def test_edge_cases_catch_a_zero_division_on_zero_scores():
    """q = k = 0 (the 'zeros' case) makes a variant that normalizes by |sum of scores| divide
    0 by 0; random inputs rarely do."""

    def forward(q, k, v, *, causal):
        s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        w = torch.exp(s - s.amax(-1, keepdim=True))
        scale = s.abs().sum(-1, keepdim=True) / s.abs().sum(-1, keepdim=True)  # 1, or 0/0
        return scale * (w @ v) / w.sum(-1, keepdim=True)

    bad = AttentionVariant("softmax-zero-division", forward, kernel="softmax", causal="no")
    res = run_property(EDGE_CASES, bad, RunContext(dtype="float64", max_examples=25))
    assert res.status == "fail" and "NaN" in res.reason


def test_skip_reasons():
    unknown = AttentionVariant("mystery", _softmax(True))
    res = run_property(ORACLE_AGREEMENT, unknown, RunContext(dtype="float64"))
    assert res.status == "skip" and "unknown" in res.reason
    f32_only = AttentionVariant("f32", _softmax(True), kernel="softmax", dtypes=("float32",))
    res = run_property(EDGE_CASES, f32_only, RunContext(dtype="float64"))
    assert res.status == "skip" and "float64" in res.reason
