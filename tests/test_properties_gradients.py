"""The gradient groups of the property catalogue (verify/properties/gradients.py and
gradient_masks.py).

Each property passes on the built-in variants it applies to (float64, float32, and bf16/fp16
where the two-level model applies), fails on a deliberately faulty twin with the expected
reason, and skips with a reason where it does not apply. The plain-torch reference itself is
checked against the mpmath oracle (within the derived D10 bound) and against finite
differences, and the calibrated rule's term scale against the gradients it must majorize.
"""

from __future__ import annotations

import dataclasses
import math

import faulty_variants as fv
import numpy as np
import pytest
import torch
from property_asserts import checks

from verify import builtins as variants
from verify.exact import errors, oracle
from verify.exact.reference import reference_attention
from verify.properties import gradient_masks, gradients
from verify.properties.support.base import RunContext, run_property
from verify.properties.support.grads import GradExample, reference_gradients, upstream_gradient
from verify.spec.variant import AttentionVariant

assert_pass = checks(8).assert_pass


def run(prop, variant, dtype="float64", n=8, **kw):
    if isinstance(variant, str):
        variant = variants.get(variant)
    return run_property(prop, variant, RunContext(dtype=dtype, max_examples=n, **kw))


# ----------------------------------------------------------------------------- passes


@pytest.mark.parametrize(
    "name", ["softmax", "taylor-2", "taylor-3", "linear-elu1", "linear-relu", "linear-favor"]
)
def test_gradcheck_passes(name):
    assert assert_pass(gradients.GRADCHECK, variants.get(name), n=6).bound_kind == "calibrated"


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("softmax", "float64"),
        ("softmax", "bfloat16"),
        ("taylor-1", "float32"),
        ("taylor-2", "float64"),
        ("taylor-2", "float16"),
        ("taylor-4", "float32"),
        ("linear-elu1", "float32"),
        ("linear-identity", "float64"),
        ("linear-favor", "float64"),
    ],
)
def test_gradients_vs_reference_passes(name, dtype):
    res = assert_pass(gradients.GRADIENTS_VS_REFERENCE, variants.get(name), dtype)
    assert res.bound_kind == "calibrated" and res.max_ratio > 0


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("softmax", "float64"),
        ("taylor-2", "float32"),
        ("linear-relu", "float16"),
        ("linear-favor", "float64"),
    ],
)
def test_single_key_gradients_pass(name, dtype):
    assert_pass(gradients.SINGLE_KEY_GRADIENTS, variants.get(name), dtype)


@pytest.mark.parametrize(
    "prop",
    [gradient_masks.MASKED_KEY_GRADIENTS, gradient_masks.EMPTY_ROW_GRADIENTS],
    ids=lambda p: p.id,
)
@pytest.mark.parametrize(
    ("name", "dtype"),
    [("softmax", "float32"), ("taylor-2", "float64"), ("linear-elu1", "bfloat16")],
)
def test_mask_gradients_pass(prop, name, dtype):
    assert assert_pass(prop, variants.get(name), dtype, n=6).bound_kind == "exact"


def test_gradcheck_needs_no_kernel_claim():
    """gradcheck compares the variant with its own finite differences: no reference needed."""
    unknown = variants.get("softmax").with_claims(kernel="unknown")
    res = run(gradients.GRADCHECK, unknown, n=4)
    assert res.status == "pass" and res.examples == 4
    assert run(gradients.GRADIENTS_VS_REFERENCE, unknown).status == "skip"


def _kink_example(d: int):
    """relu's kink at q_0 = 0: relu'(0) = 0 in torch, central differences give 1/2. d = 1: every
    other gradient entry is 0; d = 2: the entries of q_1, k and v are non-zero."""
    from verify.properties.support.common import Example
    from verify.strategies import AttentionInputs, Shape

    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    q, k = (
        ([[[[0.0]]]], [[[[1.0], [0.0]]]])
        if d == 1
        else ([[[[0.0, 1.0]]]], [[[[1.0, 1.0], [0.5, 1.0]]]])
    )
    x = AttentionInputs(
        q=t(q),
        k=t(k),
        v=t([[[[1.0], [0.5]]]]),
        causal=False,
        scale=None,
        radius=None,
        shape=Shape(B=1, H=1, T=1, S=2, d=d, d_v=1),
    )
    return Example(x, {"form": "forward", "denominator": "none"})


def test_gradcheck_reports_only_reliable_entries():
    """At relu's kink the finite difference (1/2) is no statement about the gradient: the entry
    is skipped and the worst reported entry is a reliable one (regression: the argmax of an
    all-zero ratio used to land on the skipped entry and fail linear-relu)."""
    obs = gradients._gradcheck_check(variants.get("linear-relu"), _kink_example(1), RunContext())
    assert obs.ratio <= 1.0 and "1 of 5 entries skipped" in obs.detail
    assert obs.where != "d(out[0])/d(input[0])"  # input 0 is q_0, the kink


def test_gradcheck_still_fails_a_wrong_gradient_beside_a_kink():
    """The same kink example with a gradient scaled by 2 at the reliable entries still fails."""

    doubled = _identity_with_backward(lambda g: 2 * g)
    base = variants.get("linear-relu")
    wrong = dataclasses.replace(
        base, forward=lambda q, k, v, **kw: doubled(base.forward(q, k, v, **kw))
    )
    obs = gradients._gradcheck_check(wrong, _kink_example(2), RunContext())
    assert obs.ratio > 1.0


# ----------------------------------------------------------------------------- failures


def test_detached_key_sum_fails_gradients_vs_reference(no_shrink):
    res = run(gradients.GRADIENTS_VS_REFERENCE, fv.fault05_key_sum_detached, n=25)
    assert res.status == "fail" and res.counterexample
    assert "dk" in res.reason and "calibrated" in res.reason
    assert res.max_ratio > 1e6
    # the snippet rebuilds the example: dk is off there, forward, dq and dv are right
    scope: dict = {}
    exec(res.snippet, scope)
    q, k, v, g, causal = (scope[n] for n in ("q", "k", "v", "g", "causal"))
    grads = {}
    for name, variant in (("bad", fv.fault05_key_sum_detached), ("ok", fv.twin05_key_sum_tracked)):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out = variant.forward(*leaves, causal=causal)
        grads[name] = (out, *torch.autograd.grad(out, leaves, g))
    same = [torch.allclose(a, b, rtol=1e-12, atol=0) for a, b in zip(grads["bad"], grads["ok"])]
    assert same == [True, True, False, True]  # output, dq, dk, dv


def test_detached_key_sum_at_the_faults_trigger_scale():
    """Fault class 5's trigger (B = 2, T = 64, H = 2, d = 8, positive q, k): the check fails on
    dk only, far outside the calibrated bound; the twin is within it."""
    from verify.properties.support.common import Example
    from verify.strategies import AttentionInputs, Shape

    g = torch.Generator().manual_seed(0)
    q, k = (torch.rand(2, 2, 64, 8, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, 2, 64, 4, generator=g, dtype=torch.float64)
    x = AttentionInputs(q, k, v, True, None, None, Shape(B=2, H=2, T=64, S=64, d=8, d_v=4))
    ex = GradExample(x, {"form": "forward", "denominator": "sum", "g_seed": 1})
    ctx = RunContext(dtype="float64")
    bad = gradients.GRADIENTS_VS_REFERENCE.check(fv.fault05_key_sum_detached, ex, ctx)
    good = gradients.GRADIENTS_VS_REFERENCE.check(fv.twin05_key_sum_tracked, ex, ctx)
    assert [o.ratio > 1 for o in bad] == [False, True, False]  # dq, dk, dv
    assert bad[1].ratio > 1e6
    assert all(o.ratio <= 1 for o in good)
    assert isinstance(ex, Example)


def test_detached_key_sum_fails_gradcheck():
    res = run(gradients.GRADCHECK, fv.fault05_key_sum_detached, n=25)
    assert res.status == "fail" and res.counterexample
    assert "analytic" in res.reason and "numeric" in res.reason


def test_fused_backward_without_delta_fails_single_key_and_shrinks():
    res = run(gradients.SINGLE_KEY_GRADIENTS, fv.fault12_single_key_dq, n=25)
    assert res.status == "fail"
    assert "one key, exact" in res.reason
    assert "S=1" in res.counterexample
    assert "g = upstream_gradient(q, v, " in res.snippet  # g is rebuilt from its seed


def test_nan_rows_fail_empty_row_gradients(no_shrink):
    res = run(gradient_masks.EMPTY_ROW_GRADIENTS, fv.fault08_masked_rows_nan, n=25)
    assert res.status == "fail" and "NaN" in res.reason


def test_sentinel_leak_fails_masked_key_gradients(no_shrink):
    res = run(gradient_masks.MASKED_KEY_GRADIENTS, fv.fault08_sentinel_leak, n=25)
    assert res.status == "fail" and "exactly 0" in res.reason


def _no_grad_forward(q, k, v, *, causal):
    from verify.attention import softmax_attention

    with torch.no_grad():
        return softmax_attention(q, k, v, causal=causal)


def test_non_differentiable_forward_fails_with_the_reason(no_shrink):
    v = AttentionVariant(name="no-grad", forward=_no_grad_forward, kernel="softmax")
    for prop in (gradients.GRADCHECK, gradients.GRADIENTS_VS_REFERENCE):
        res = run(prop, v, n=3)
        assert res.status == "fail"
        assert "is the forward differentiable?" in res.reason


# ----------------------------------------------------------------------------- skips


def _flex_score_mod(score, b, h, q_idx, kv_idx):
    return score


@pytest.mark.parametrize(
    "prop_id, claims, words",
    [
        ("gradients-vs-reference", {"key_padding": True}, "no derived backward bound"),
        ("gradients-vs-reference", {"window": (2, 0), "eps": 1e-6}, "cover softmax with the sum"),
        ("exp-kernel-full-rank", {"dv_equals_d": True}, "one-hot values"),
        ("oracle-agreement", {"score_mod": _flex_score_mod}, "flex-score-mod's"),
        ("causal-alignment", {"score_mod": _flex_score_mod, "causal_alignment": "top-left"},
         "flex-score-mod's"),
    ],
)  # fmt: skip
def test_claims_no_draw_can_meet_skip_before_drawing(prop_id, claims, words):
    """Claims under which every draw of a property would be rejected are decided before any
    draw: the cards once spent 459 rejected draws per property and dtype on each of these
    (a softmax with key padding, a d_v == d restriction, FlexAttention claims)."""
    from verify.properties import get

    variant = variants.get("softmax").with_claims(**claims)
    res = run(get(prop_id), variant, n=4)
    assert res.status == "skip" and words in res.reason, res.reason
    assert not res.reason.startswith("no applicable example"), res.reason


@dataclasses.dataclass(frozen=True)
class _DeclaredNonDifferentiable(AttentionVariant):
    differentiable: bool = False


def test_skip_reasons():
    unknown = AttentionVariant(name="u", forward=variants.get("softmax").forward)
    assert run(gradients.GRADCHECK, "softmax", "float32").reason.startswith(
        "gradcheck runs in float64"
    )
    assert "claims no kernel" in run(gradients.GRADIENTS_VS_REFERENCE, unknown).reason
    no_mask = variants.get("softmax").with_claims(supports_mask=False)
    for prop in (gradient_masks.MASKED_KEY_GRADIENTS, gradient_masks.EMPTY_ROW_GRADIENTS):
        assert run(prop, no_mask).status == "skip"
        assert "supports_mask=False" in run(prop, no_mask).reason
    unnormalized = variants.get("softmax").with_claims(denominators=(), normalized=False)
    res = run(gradients.SINGLE_KEY_GRADIENTS, unnormalized)
    assert res.status == "skip" and "unnormalized" in res.reason
    eps = variants.get("softmax").with_claims(eps=1e-6)
    assert "eps" in run(gradients.SINGLE_KEY_GRADIENTS, eps).reason
    declared = _DeclaredNonDifferentiable(
        name="nd", forward=_no_grad_forward, kernel="softmax", supports_mask=True
    )
    for prop in (*gradients.PROPERTIES, *gradient_masks.PROPERTIES):
        res = run(prop, declared)
        assert res.status == "skip" and "not differentiable" in res.reason, (prop.id, res)
    f64_only = variants.get("softmax").with_claims(dtypes=("float64",))
    assert (
        "does not claim float32"
        in run(gradients.GRADIENTS_VS_REFERENCE, f64_only, "float32").reason
    )


# ----------------------------------------------------------------------------- the reference

KERNELS = [
    ("softmax", None),
    ("taylor:2", None),
    ("taylor:3", None),
    ("linear:elu1", None),
    ("linear:relu", None),
    ("linear:identity", None),
    ("linear:taylor:2", None),
    ("linear:favor", "favor"),
]


def _qkv(seed=0, B=1, H=2, T=5, S=4, d=3, d_v=2, scale=0.6):
    g = torch.Generator().manual_seed(seed)
    q = scale * torch.randn(B, H, T, d, generator=g, dtype=torch.float64)
    k = scale * torch.randn(B, H, S, d, generator=g, dtype=torch.float64)
    v = torch.randn(B, H, S, d_v, generator=g, dtype=torch.float64)
    return q, k, v


def _projection(d):
    from verify.builtins import favor_projection_for

    return favor_projection_for(d, torch.float64, "cpu")


@pytest.mark.parametrize(("kernel", "extra"), KERNELS)
@pytest.mark.parametrize("mode", ["sum", "none", "count", "l2", "layernorm"])
def test_reference_matches_the_oracle(kernel, extra, mode):
    q, k, v = _qkv()
    mask = torch.tensor([[True, True, False, True]] * 4 + [[False] * 4])  # row 4 sees no key
    kw = dict(attn_mask=mask, denominator=mode)
    proj = _projection(q.shape[-1]) if extra == "favor" else None
    if proj is not None:
        kw["projection"] = proj
    out = reference_attention(q, k, v, kernel=kernel, **kw)
    ref = oracle.reference(q, k, v, kernel="exp" if kernel == "softmax" else kernel, **kw)
    eb = errors.attention_error_bound(
        kernel, q, k, v, dtype="float64", exact=ref, form="parallel", **kw
    )
    obs = errors.compare(out, eb, ref, what=f"reference {kernel}/{mode}")
    assert obs.ratio <= 1, obs.detail
    assert torch.all(out[..., 4, :] == 0)  # the empty row


@pytest.mark.parametrize(("kernel", "extra"), KERNELS)
def test_reference_is_differentiable(kernel, extra):
    q, k, v = (t[:, :1, :3, :2].clone() for t in _qkv(d=2))
    if kernel in ("linear:relu", "linear:identity"):  # keep every denominator away from 0
        q, k = q.abs() + 0.1, k.abs() + 0.1
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    proj = _projection(2) if extra == "favor" else None

    def f(q, k, v):
        return reference_attention(q, k, v, kernel=kernel, causal=True, projection=proj)

    assert torch.autograd.gradcheck(f, (q, k, v))


@pytest.mark.parametrize(("kernel", "extra"), KERNELS[:5])
@pytest.mark.parametrize("mode", ["sum", "none", "l2"])
def test_term_scale_majorizes_the_gradients(kernel, extra, mode):
    """|dq|, |dk|, |dv| <= M_q, M_k, M_v: the floor is at least the size of the gradients."""
    name = {"softmax": "softmax", "taylor:2": "taylor-2", "taylor:3": "taylor-3"}.get(
        kernel, "linear-" + kernel.split(":")[-1]
    )
    variant = variants.get(name)
    q, k, v = _qkv(seed=3, d=2)
    if kernel == "linear:relu":  # every denominator away from 0
        q, k = q.abs() + 0.1, k.abs() + 0.1
    x = _Inputs(q, k, v, causal=False, attn_mask=None)
    g = upstream_gradient(x.q, x.v, 7)
    ref = reference_gradients(variant, x, mode, g, torch.float64)
    scales = gradients.term_scale(variant, x, mode, g)
    for grad, M in zip(ref[1:], scales):
        assert math.isfinite(M) and M > 0
        assert float(grad.abs().max()) <= M * (1 + 1e-12)


@dataclasses.dataclass
class _Inputs:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    causal: bool
    attn_mask: torch.Tensor | None


def test_single_key_term_scale_is_the_cancelling_size():
    """Softmax, one key: M_q = c |k| sum_j |g_j| (|v_j| + |o_j|) max(1, ...) with o = v."""
    variant = variants.get("softmax")
    q, k, v = _qkv(seed=1, T=3, S=1, d=2, d_v=2)
    x = _Inputs(q, k, v, causal=False, attn_mask=None)
    g = upstream_gradient(x.q, x.v, 3)
    M_q, M_k, M_v = gradients.term_scale(variant, x, "sum", g)
    c = 1 / math.sqrt(2)
    a = g.abs()
    vv = v.abs()[..., 0, :]  # (B, H, d_v)
    b = (a * vv[..., None, :]).sum(-1) * torch.clamp(vv.amax(-1), min=1.0)[..., None]
    per_t = (a * vv[..., None, :]).sum(-1) + b  # (B, H, T)
    expect_q = c * k.abs()[..., 0, None, :] * per_t[..., None]
    assert M_q == pytest.approx(float(expect_q.max()), rel=1e-12)
    assert M_v == pytest.approx(float(a.sum(-2).max()), rel=1e-12)


def test_upstream_gradient_is_reproducible():
    q, k, v = _qkv()
    x = _Inputs(q.to(torch.bfloat16), k, v, causal=False, attn_mask=None)
    g1, g2 = upstream_gradient(x.q, x.v, 5), upstream_gradient(x.q, x.v, 5)
    assert torch.equal(g1, g2) and g1.dtype == torch.bfloat16
    assert g1.shape == (1, 2, 5, 2) and float(g1.abs().max()) <= 1
    assert not torch.equal(g1, upstream_gradient(x.q, x.v, 6))


def test_constants_are_the_cited_gradcheck_defaults():
    import inspect

    sig = inspect.signature(torch.autograd.gradcheck).parameters
    assert gradients.GRADCHECK_EPS == sig["eps"].default
    assert gradients.GRADCHECK_ATOL == sig["atol"].default
    assert gradients.GRADCHECK_RTOL == sig["rtol"].default
    assert np.isfinite(gradients.CALIBRATION_FACTOR) and gradients.CALIBRATION_FACTOR >= 1


def test_long_gradient_examples_keep_feature_states_within_memory():
    """A recurrent/chunked Taylor-N path keeps a state of D5's size per token for autograd:
    the dev profile drew Taylor-3 at a large d and its worker was killed at 22 GB. Each such
    path's long examples stay within LONG_GRAD_STATE_NUMBERS; the parallel form keeps d to 256."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from derivations.state_size import state_numbers
    from verify.properties.support import grads
    from verify.properties.support.base import RunContext
    from verify.properties.support.common import LONG_BLOCK, LONG_VALUE_DIM

    t_max = LONG_BLOCK * (grads.LONG_GRAD_BLOCKS + 1)
    for order in (2, 3, 4, 6):
        v = variants.get(f"taylor-{order}")
        assert grads.long_grad_dim(v, "forward") == grads.LONG_GRAD_DIM
        d = grads.long_grad_dim(v, "recurrent/tensor")
        assert 4 <= d < grads.LONG_GRAD_DIM
        used = t_max * state_numbers(order, d, LONG_VALUE_DIM, "tensor")
        assert used <= grads.LONG_GRAD_STATE_NUMBERS or d == 4
    v = variants.get("taylor-3")
    cap = grads.long_grad_dim(v, "recurrent/tensor")
    seen = []

    @settings(max_examples=12, database=None, deadline=None)
    @given(grads.long_grad_examples(v, RunContext(dtype="float64")), st.just(None))
    def draw(ex, _):
        seen.append((ex.choices["form"], ex.inputs.shape.d))
        if ex.choices["form"] != "forward":
            assert ex.inputs.shape.d <= cap

    draw()
    assert any(f != "forward" for f, _ in seen), seen


def test_a_sum_too_long_for_gamma_makes_no_statement():
    """Taylor-4 at d = 64 sums 64^4 = 1.7e7 features: n u >= 1 in float32 accumulation, where
    gamma_n has no value. The dev profile's long example raised an internal error there; it is
    outside the D10 model, so the example makes no statement."""
    import torch

    from verify.properties import gradients
    from verify.properties.support.base import RunContext
    from verify.properties.support.grads import GradExample
    from verify.spec.results import NotApplicable
    from verify.strategies import AttentionInputs, Shape

    gen = torch.Generator().manual_seed(0)
    q, k = (0.1 * torch.randn(1, 1, 2, 64, generator=gen) for _ in range(2))
    v = torch.randn(1, 1, 2, 2, generator=gen)
    x = AttentionInputs(q=q.half(), k=k.half(), v=v.half(), causal=True, scale=None,
                        radius=None, shape=Shape(B=1, H=1, T=2, S=2, d=64, d_v=2))  # fmt: skip
    ex = GradExample(x, {"form": "forward", "denominator": "sum", "g_seed": 1})
    with pytest.raises(NotApplicable, match="no gamma_n"):
        gradients._reference_check(variants.get("taylor-4"), ex, RunContext(dtype="float16"))


def test_a_form_path_reads_the_variants_claims():
    """calls.call on a form (FormView) asks for the kernel and the scale (the unnormalized
    modes' overflow rule): the dev profile's edge-cases on a Taylor-6 form raised
    AttributeError 'FormView' object has no attribute 'kernel_family'."""
    import torch

    from verify.properties.support.calls import call
    from verify.properties.support.paths import FormView

    v = variants.get("taylor-6")
    view = FormView(v, "chunked/symmetric/C=1")
    assert view.kernel_family == v.kernel_family and view.score_scale(4) == v.score_scale(4)
    x = torch.randn(1, 1, 3, 4, dtype=torch.float64)
    o = call(view, x, x, x, causal=True, denominator="count")
    assert o.shape == (1, 1, 3, 4)


def test_an_exact_gradient_beyond_the_dtype_range_makes_no_statement():
    """The dev-profile failure: linear-identity in float16 on a long low-rank example (T = 233,
    d = 239) returned dq with inf where the exact dq reaches 3.6e5, beyond float16's 65504: the
    dtype's range, not a defect (the D10 model assumes no overflow). The twin: a dq made inf
    where the exact dq fits still fails."""
    from verify.properties.support.common import Example
    from verify.seeded import seeded_inputs
    from verify.spec.results import NoStatement, VariantError
    from verify.spec.shape import Shape

    x = seeded_inputs(661, Shape(B=1, H=2, T=233, S=233, d=239, d_v=2), dtype=torch.float16,
                      causal=True, radius=None, scale=None, keys="low-rank")  # fmt: skip
    ex = Example(x, {"form": "forward", "denominator": "sum", "g_seed": 0})
    ctx = RunContext(dtype="float16")
    variant = variants.get("linear-identity")
    with pytest.raises(NoStatement, match="exceed float16's largest finite number"):
        gradients._reference_check(variant, ex, ctx)

    small = seeded_inputs(3, Shape(B=1, H=1, T=4, S=4, d=2, d_v=2), dtype=torch.float16,
                          causal=True, radius=None, scale=None)  # fmt: skip
    inf_dq = dataclasses.replace(variant, forward=_inf_dq(variant.forward), name="inf-dq")
    with pytest.raises(VariantError, match="dq .* has NaN/inf"):
        gradients._reference_check(inf_dq, Example(small, dict(ex.choices)), ctx)


def _inf_dq(forward):
    inf = _identity_with_backward(lambda g: torch.full_like(g, math.inf))
    return lambda q, k, v, *, causal, **kw: forward(inf(q), k, v, causal=causal, **kw)


def _identity_with_backward(grad):
    """x -> x whose backward returns grad(g) in place of g (a planted wrong gradient)."""

    class Planted(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return grad(g)

    return Planted.apply
