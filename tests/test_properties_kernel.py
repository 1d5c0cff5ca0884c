"""Kernel properties (verify.properties.kernel and shift): pass on the built-ins, fail on faulty
twins.

Each faulty twin is a small AttentionVariant wrapping a deliberately broken implementation; the
test asserts the property reports a failure with a non-empty counterexample, and the correct
twin (the registered built-in, or the same wrapper without the fault) passes.
"""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from property_asserts import checks

from verify import builtins as variants
from verify.attention import linear_attention, softmax_attention, taylor_attention, taylor_features
from verify.properties import kernel, shift
from verify.properties.support.paths import call_mode
from verify.spec.variant import AttentionVariant

EXAMPLES = 6


_checks = checks(EXAMPLES)
ctx, assert_pass = _checks.ctx, _checks.assert_pass
assert_fail, assert_skip = _checks.assert_fail, _checks.assert_skip


# ----------------------------------------------------------------------------- faulty maps
def elementwise_square_map(x):
    """Fault class 10: [1, x, x^2/sqrt(2)] element-wise (correct only for d = 1), scale 1."""
    return torch.cat([torch.ones_like(x[..., :1]), x, x * x / math.sqrt(2.0)], -1)


def wrong_coefficient_map(x, *, order):
    """Tensor-power blocks with 1/sqrt(n) instead of 1/sqrt(n!) (the 1/n-for-1/n! fault)."""
    c = 1.0 / math.sqrt(x.shape[-1])
    xs = x * math.sqrt(c)
    blocks, cur = [torch.ones_like(x[..., :1])], torch.ones_like(x[..., :1])
    for n in range(1, order + 1):
        cur = (cur[..., :, None] * xs[..., None, :]).flatten(-2)
        blocks.append(cur / math.sqrt(n))
    return torch.cat(blocks, -1)


def map_variant(fmap, kernel, feature_scale):
    return AttentionVariant(
        name=f"map-{kernel}",
        forward=partial(linear_attention, feature_map=fmap),
        kernel=kernel,
        feature_map=fmap,
        feature_scale=feature_scale,
    )


@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_kernel_identity_builtin_symmetric_and_tensor(order, dtype):
    assert_pass(kernel.KERNEL_IDENTITY, variants.get(f"taylor-{order}"), dtype)
    tensor = variants.get(f"taylor-{order}").with_claims(
        name=f"taylor-{order}-tensor",
        feature_map=partial(taylor_features, order=order, basis="tensor"),
    )
    assert_pass(kernel.KERNEL_IDENTITY, tensor, dtype)


def test_kernel_identity_catches_elementwise_square_with_the_faults_trigger():
    bad = map_variant(elementwise_square_map, "linear:taylor:2", "none")
    res = assert_fail(kernel.KERNEL_IDENTITY, bad)
    # shrinks to the first fault class 10 trigger: 4 where kappa_2(2) = 5
    assert "fault class 10" in res.counterexample
    assert "[[1.0, 1.0]]" in res.counterexample
    assert "phi(q).phi(k) = 4.0" in res.reason


def test_kernel_identity_elementwise_square_is_right_at_d1_only():
    # the same map passes the correct (d = 1) pairs: the failure is the d > 1 cross terms
    import numpy as np

    bad = map_variant(elementwise_square_map, "linear:taylor:2", "none")
    ex = kernel.PairsExample([[0.5], [-1.5]], [[1.25], [2.0]])
    assert kernel.KERNEL_IDENTITY.check(bad, ex, ctx()).ratio <= 1.0
    ex2 = kernel.PairsExample([[1.0, 1.0, 1.0, 1.0]], [[-1.0, -1.0, -1.0, -1.0]])
    obs = kernel.KERNEL_IDENTITY.check(bad, ex2, ctx())
    assert obs.ratio > 1.0 and np.isclose(obs.observed, 6.0)  # -1 where 5


def test_kernel_identity_catches_wrong_coefficients():
    bad = map_variant(partial(wrong_coefficient_map, order=3), "linear:taylor:3", "sqrt")
    assert_fail(kernel.KERNEL_IDENTITY, bad)
    good = map_variant(partial(taylor_features, order=3, basis="tensor"), "linear:taylor:3", "sqrt")
    assert_pass(kernel.KERNEL_IDENTITY, good)


def test_kernel_identity_skips():
    assert_skip(kernel.KERNEL_IDENTITY, variants.get("softmax"), "Taylor kernel")
    assert_skip(kernel.KERNEL_IDENTITY, variants.get("linear-favor"), "Taylor kernel")
    no_map = variants.get("taylor-2").with_claims(feature_map=None)
    assert_skip(kernel.KERNEL_IDENTITY, no_map, "no feature map")


# ----------------------------------------------------------------------------- positivity
@pytest.mark.parametrize("name", ["softmax", "taylor-0", "taylor-2", "taylor-4", "linear-elu1"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_weights_vs_reference_builtins(name, dtype):
    assert_pass(kernel.WEIGHTS_VS_REFERENCE, variants.get(name), dtype)


def test_weights_vs_reference_favor():
    assert_pass(kernel.WEIGHTS_VS_REFERENCE, variants.get("linear-favor"), "float32", n=4)


def test_weights_vs_reference_catches_a_signed_kernel_claimed_positive():
    # a "Taylor-2" that is really kappa_3 (wrong order, signed: root near -1.6)
    bad = variants.get("taylor-2").with_claims(
        name="taylor-2-is-3", forward=partial(taylor_attention, order=3), forms={}
    )
    assert_fail(kernel.WEIGHTS_VS_REFERENCE, bad)
    # elu+1 claimed, identity features used (signed weights)
    bad_map = variants.get("linear-elu1").with_claims(
        name="elu1-is-identity",
        forward=partial(linear_attention, feature_map="identity"),
        forms={},
    )
    assert_fail(kernel.WEIGHTS_VS_REFERENCE, bad_map)


def test_weights_vs_reference_skips():
    assert_skip(kernel.WEIGHTS_VS_REFERENCE, variants.get("taylor-3"), "signed kernel")
    assert_skip(kernel.WEIGHTS_VS_REFERENCE, variants.get("linear-relu"), "signed kernel")
    unnorm = AttentionVariant(
        name="unnormalized-softmax",
        forward=partial(softmax_attention, denominator="none"),
        kernel="softmax",
        normalized=False,
    )
    assert_skip(kernel.WEIGHTS_VS_REFERENCE, unnorm, "unnormalized")
    unknown = AttentionVariant(name="unknown", forward=softmax_attention)
    assert_skip(kernel.WEIGHTS_VS_REFERENCE, unknown, "kernel unknown")


# ----------------------------------------------------------------------------- odd orders
@pytest.mark.parametrize("order", [1, 3, 5])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_odd_order_counterexample_found(order, dtype):
    res = assert_pass(kernel.ODD_ORDER_COUNTEREXAMPLE, variants.get(f"taylor-{order}"), dtype, n=4)
    assert res.bound_kind == "exact"


def test_odd_order_theory_row_weights():
    # D4: kappa_1 on (-3, 0.5, 1) gives weights (-4/3, 1, 4/3); read from the variant
    v = variants.get("taylor-1")
    x = kernel._score_row_inputs(v, [kernel.D4_ODD_ROW], ctx())
    w = call_mode(v, x, "sum")[0, 0, 0].tolist()
    assert w == pytest.approx([-4 / 3, 1.0, 4 / 3], rel=1e-14)
    assert kernel.kappa_root(1) == -1.0
    assert -1.6 < kernel.kappa_root(3) < -1.59


def test_odd_order_counterexample_fails_on_a_positive_impostor():
    # claims kappa_1 but computes kappa_2 (never negative): no counterexample can be found
    bad = variants.get("taylor-1").with_claims(
        name="taylor-1-is-2", forward=partial(taylor_attention, order=2), forms={}
    )
    res = assert_fail(kernel.ODD_ORDER_COUNTEREXAMPLE, bad, n=3)
    assert "no certified negative weight" in res.reason


def test_odd_order_skips():
    assert_skip(kernel.ODD_ORDER_COUNTEREXAMPLE, variants.get("taylor-2"), "even order")
    assert_skip(kernel.ODD_ORDER_COUNTEREXAMPLE, variants.get("softmax"), "Taylor kernel")


# ----------------------------------------------------------------------------- shift (D6)
def exp_plus_constant_attention(q, k, v, *, causal, attn_mask=None, denominator="sum"):
    """Kernel exp(x) + 0.1 (not shift-invariant) presented as softmax."""
    c = 1.0 / math.sqrt(q.shape[-1])
    x = c * q @ k.transpose(-1, -2)
    w = torch.exp(x) + 0.1
    if causal:
        w = w * torch.tril(torch.ones_like(w))
    return (w @ v) / w.sum(-1, keepdim=True)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_softmax_shift_invariance_builtin(dtype):
    assert_pass(shift.SOFTMAX_SHIFT_INVARIANCE, variants.get("softmax"), dtype)


def test_softmax_shift_invariance_catches_exp_plus_constant():
    bad = AttentionVariant(name="exp+0.1", forward=exp_plus_constant_attention, kernel="softmax")
    res = assert_fail(shift.SOFTMAX_SHIFT_INVARIANCE, bad)
    assert "shift u" in res.snippet


def test_softmax_shift_skips():
    assert_skip(shift.SOFTMAX_SHIFT_INVARIANCE, variants.get("taylor-2"), "exp (softmax) only")


@pytest.mark.parametrize("order", [1, 2, 4])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_taylor_not_shift_invariant_builtin(order, dtype):
    assert_pass(shift.TAYLOR_NOT_SHIFT_INVARIANT, variants.get(f"taylor-{order}"), dtype, n=4)


def test_taylor_not_shift_invariant_catches_a_softmax_impostor():
    bad = variants.get("taylor-2").with_claims(
        name="taylor-2-is-softmax", forward=softmax_attention, forms={}
    )
    res = assert_fail(shift.TAYLOR_NOT_SHIFT_INVARIANT, bad, n=4)
    assert "measured change" in res.reason


def test_taylor_not_shift_skips():
    assert_skip(shift.TAYLOR_NOT_SHIFT_INVARIANT, variants.get("taylor-0"), "kappa_0 = 1")
    assert_skip(shift.TAYLOR_NOT_SHIFT_INVARIANT, variants.get("softmax"), "Taylor kernel")


def test_catalogue_collects_the_kernel_group():
    from verify.properties import catalogue

    ids = {p.id for p in catalogue()}
    assert {p.id for p in (*kernel.PROPERTIES, *shift.PROPERTIES)} <= ids


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_kernel_group_low_precision(dtype):
    # two-level model: fp32 accumulation, inputs/outputs in the low-precision dtype
    assert_pass(kernel.KERNEL_IDENTITY, variants.get("taylor-2"), dtype, n=4)
    assert_pass(kernel.WEIGHTS_VS_REFERENCE, variants.get("softmax"), dtype, n=4)
    assert_pass(kernel.ODD_ORDER_COUNTEREXAMPLE, variants.get("taylor-3"), dtype, n=2)
    assert all(p.low_precision for p in (*kernel.PROPERTIES, *shift.PROPERTIES))
