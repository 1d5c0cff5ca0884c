"""Structural properties (verify.properties: dependence, weights, scores, masks): pass on the
built-in variants, fail on deliberately faulty twins with a counterexample, skip with a reason
where they do not apply.

Each faulty twin is a small AttentionVariant wrapping a broken implementation of a kind that has
shipped (a fault class of ``verify/spec/faults.py``); its claims are those of the correct variant
it imitates.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from property_asserts import checks

from verify import builtins as variants
from verify.attention import softmax_attention
from verify.properties import dependence, masks, scores, weights
from verify.properties.support.base import RunContext
from verify.properties.support.inputs import poison_value
from verify.properties.support.observe import array_observation, worst
from verify.properties.support.paths import form_kind
from verify.spec.variant import AttentionVariant

BUILTINS = ("taylor-2", "taylor-3", "softmax", "linear-elu1")
DTYPES = ("float64", "float32")
EXAMPLES = 4
_checks = checks(EXAMPLES)
run, assert_fails = _checks.run, _checks.assert_fails


# ----------------------------------------------------------------------------- twins


def _scores(q, k, scale=None):
    c = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return c * (q @ k.transpose(-1, -2))


def _causal_keep(T, S, device):
    return torch.ones(T, S, dtype=torch.bool, device=device).tril()


def _elu1(x):
    return F.elu(x) + 1.0


def _linear_parts(q, k, v, causal):
    """Numerator (B, H, T, d_v) and denominator (B, H, T) of elu1 linear attention."""
    A = _elu1(q) @ _elu1(k).transpose(-1, -2)
    if causal:
        A = torch.where(_causal_keep(q.shape[2], k.shape[2], q.device), A, 0.0)
    return A @ v, A.sum(-1)


def softmax_twin(name, forward, **claims):
    base = dict(kernel="softmax", dtypes=("float64", "float32", "bfloat16"))
    base.update(claims)
    return AttentionVariant(name=name, forward=forward, **base)


def elu1_twin(name, forward, **claims):
    base = dict(kernel="linear:elu1", dtypes=("float64", "float32"))
    base.update(claims)
    return AttentionVariant(name=name, forward=forward, **base)


def _softmax_fwd(q, k, v, *, causal, **kw):
    return softmax_attention(q, k, v, causal=causal, **kw)


def _flag_dropped(q, k, v, *, causal, **kw):
    """Fault class 9: this code path ignores the causal flag."""
    return softmax_attention(q, k, v, causal=False, **kw)


def _divide_by_length(q, k, v, *, causal, denominator="count"):
    """A 'count' normalization that divides by the sequence length, not the visible keys."""
    return softmax_attention(q, k, v, causal=causal, denominator="none") / k.shape[2]


def _normalizer_over(axis):
    """Fault class 4: the normalizer sums over batch (axis 0) or heads (axis 1) as well as keys."""

    def fwd(q, k, v, *, causal):
        num, den = _linear_parts(q, k, v, causal)
        return num / den.sum(axis, keepdim=True)[..., None]

    return fwd


def _heads_not_time(q, k, v, *, causal):
    """Fault class 4: the running key sum z_t is taken over heads instead of time."""
    num, _ = _linear_parts(q, k, v, causal)
    z = _elu1(k).sum(1, keepdim=True)  # (B, 1, T, m): the heads at time t, not keys s <= t
    den = (_elu1(q) * z).sum(-1)
    return num / den[..., None]


def _position_bias(q, k, v, *, causal):
    """A distance bias (ALiBi-like) that a plain-softmax claim does not declare."""
    T, S_ = q.shape[2], k.shape[2]
    dist = (torch.arange(T)[:, None] - torch.arange(S_)[None, :]).abs().to(q.dtype)
    x = _scores(q, k) - 0.5 * dist
    if causal:
        x = x.masked_fill(~_causal_keep(T, S_, q.device), -math.inf)
    return torch.softmax(x, -1) @ v


def _value_bias(q, k, v, *, causal):
    """Values shifted by a constant before mixing: affine, not linear, in v."""
    return softmax_attention(q, k, v + 0.25, causal=causal)


class _Jitter:
    """A reduction whose result changes by one ulp every other call (atomics-like)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, q, k, v, *, causal):
        self.calls += 1
        o = softmax_attention(q, k, v, causal=causal)
        return torch.nextafter(o, torch.full_like(o, math.inf)) if self.calls % 2 else o


def _times_denominator(q, k, v, *, causal):
    """Fault class 6: the normalizer multiplied instead of divided."""
    num, den = _linear_parts(q, k, v, causal)
    return num * den[..., None]


def _scale_twice(q, k, v, *, causal):
    """The 1/sqrt(d) scale applied on the scores and again on q: c = 1/d."""
    c = 1.0 / math.sqrt(q.shape[-1])
    return softmax_attention(q * c, k, v, causal=causal, scale=c)


def _silent_eps(q, k, v, *, causal):
    """A denominator eps (1e-6, as some libraries add) that the claims do not declare."""
    x = _scores(q, k)
    if causal:
        x = x.masked_fill(~_causal_keep(q.shape[2], k.shape[2], q.device), -math.inf)
    w = torch.exp(x - x.amax(-1, keepdim=True))
    return (w @ v) / (w.sum(-1, keepdim=True) + 1e-6)


def _finite_sentinel(q, k, v, *, causal, attn_mask=None):
    """Fault class 8: masking by adding a finite -1e4 instead of removing the key."""
    x = _scores(q, k)
    keep = torch.ones_like(x, dtype=torch.bool)
    if causal:
        keep = keep & _causal_keep(q.shape[2], k.shape[2], q.device)
    if attn_mask is not None:
        keep = keep & attn_mask
    x = x + torch.where(keep, 0.0, -1e4)
    return torch.softmax(x, -1) @ v


def _top_left(q, k, v, *, causal):
    """SDPA: causal with T != S is aligned top-left (s <= t)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _bottom_right(q, k, v, *, causal):
    """FlashAttention >= 2.1: causal with T != S is aligned bottom-right (s <= t + S - T)."""
    T, S_ = q.shape[2], k.shape[2]
    mask = torch.ones(T, S_, dtype=torch.bool).tril(S_ - T) if causal else None
    return softmax_attention(q, k, v, attn_mask=mask)


def _accepts_mismatch(q, k, v, *, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


# posing as project code: causal-mismatch-rejected applies to the project's own variants only
_accepts_mismatch.__module__ = "verify.builtins"


# ----------------------------------------------------------------------------- built-ins

PASSING = (
    dependence.CAUSALITY,
    dependence.PREFIX_INVARIANCE,
    dependence.BATCH_INDEPENDENCE,
    dependence.HEAD_INDEPENDENCE,
    dependence.PERMUTATION_EQUIVARIANCE,
    weights.LINEARITY_IN_V,
    weights.DETERMINISM,
    weights.UNIFORM_WEIGHTS,
    scores.SINGLE_KEY,
    masks.MASKS,
    masks.CAUSAL_MISMATCH_REJECTED,
)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BUILTINS)
@pytest.mark.parametrize("prop", PASSING, ids=lambda p: p.id)
def test_passes_on_builtins(prop, name, dtype):
    res = run(prop, variants.get(name), dtype)
    assert res.status == "pass", res.reason
    assert res.examples >= 1
    assert res.max_ratio is not None and res.max_ratio <= 1.0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ("taylor-2", "softmax", "linear-elu1"))
def test_convex_combination_on_positive_kernels(name, dtype):
    res = run(weights.CONVEX_COMBINATION, variants.get(name), dtype)
    assert res.status == "pass", res.reason


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ("taylor-2", "taylor-3", "softmax"))
def test_scale_once_on_exp_kernels(name, dtype):
    res = run(scores.CLAIMED_SCALE, variants.get(name), dtype)
    assert res.status == "pass", res.reason


@pytest.mark.parametrize(
    "prop",
    (dependence.CAUSALITY, masks.MASKS, dependence.BATCH_INDEPENDENCE, weights.DETERMINISM),
    ids=lambda p: p.id,
)
@pytest.mark.parametrize("name", ("softmax", "taylor-2"))
def test_bfloat16(prop, name):
    """The two-level model (bf16 inputs, fp32 accumulation, bf16 output) carries these."""
    res = run(prop, variants.get(name), "bfloat16", n=4)
    assert res.status == "pass", res.reason


def test_skips_with_reasons():
    t3, elu1, sm = variants.get("taylor-3"), variants.get("linear-elu1"), variants.get("softmax")
    expect = [
        (weights.CONVEX_COMBINATION, t3, "signed kernel"),
        (scores.CLAIMED_SCALE, elu1, "element-wise feature map"),
        (scores.CLAIMED_SCALE, variants.get("taylor-0"), "constant"),
        (masks.CAUSAL_ALIGNMENT, sm, "declares no causal alignment"),
        (masks.MASKS, softmax_twin("nomask", _softmax_fwd), "mask support"),
        (
            dependence.PERMUTATION_EQUIVARIANCE,
            softmax_twin("c", _softmax_fwd, causal="yes"),
            "causal",
        ),
        (dependence.CAUSALITY, softmax_twin("nc", _softmax_fwd, causal="no"), "causal=True"),
        (scores.SINGLE_KEY, sm.with_claims(denominators=("none",), normalized=False), "not normal"),
        (
            weights.UNIFORM_WEIGHTS,
            variants.get("linear-identity").with_claims(denominators=()),
            "0/0",
        ),
        (masks.CAUSAL_MISMATCH_REJECTED, softmax_twin("3p", _softmax_fwd), "third-party"),
        (scores.SINGLE_KEY, softmax_twin("eps", _silent_eps, eps=1e-6), "declared eps"),
    ]
    for prop, variant, fragment in expect:
        res = run(prop, variant)
        assert res.status == "skip", (prop.id, variant.name, res.status, res.reason)
        assert fragment in res.reason, (prop.id, res.reason)


def test_uniform_weights_unnormalized_identity_map():
    """kappa(0) = 0 for the identity map: the unnormalized modes must give exactly 0-ish."""
    res = run(weights.UNIFORM_WEIGHTS, variants.get("linear-identity"))
    assert res.status == "pass", res.reason


# ----------------------------------------------------------------------------- twins fail


def test_causality_catches_a_path_that_drops_the_flag(no_shrink):
    twin = softmax_twin("flag-dropped", _softmax_fwd, forms={"parallel/fast": _flag_dropped})
    res = run(dependence.CAUSALITY, twin)
    assert_fails(res, "parallel/fast")
    assert run(dependence.CAUSALITY, softmax_twin("ok", _softmax_fwd)).status == "pass"


def test_prefix_invariance_catches_length_dependent_normalization(no_shrink):
    twin = softmax_twin("by-length", _divide_by_length, denominators=("count",))
    assert_fails(run(dependence.PREFIX_INVARIANCE, twin), "f(x)[:")
    # the same twin is causal: changing the future does not change the past
    assert run(dependence.CAUSALITY, twin).status == "pass"


@pytest.mark.parametrize("axis", (0, 1))
def test_independence_catches_a_normalizer_over_the_wrong_axis(axis, no_shrink):
    twin = elu1_twin(f"norm-axis-{axis}", _normalizer_over(axis))
    prop = dependence.BATCH_INDEPENDENCE if axis == 0 else dependence.HEAD_INDEPENDENCE
    assert_fails(run(prop, twin), "other")
    other = dependence.HEAD_INDEPENDENCE if axis == 0 else dependence.BATCH_INDEPENDENCE
    assert run(other, twin).status == "pass"


def test_uniform_weights_catches_a_key_sum_over_heads(no_shrink):
    """Fault class 4 with H = 1 possible: summing over a size-1 axis is silent elsewhere."""
    twin = elu1_twin("heads-not-time", _heads_not_time, causal="yes")
    res = run(weights.UNIFORM_WEIGHTS, twin)
    assert_fails(res, "kappa(0) = ")
    assert_fails(run(dependence.HEAD_INDEPENDENCE, twin))


def test_permutation_catches_a_position_bias(no_shrink):
    twin = softmax_twin("alibi", _position_bias, causal="no")
    assert_fails(run(dependence.PERMUTATION_EQUIVARIANCE, twin), "f(q[P]")


def test_linearity_catches_a_value_bias(no_shrink):
    assert_fails(run(weights.LINEARITY_IN_V, softmax_twin("v-bias", _value_bias)), "a f(v1)")


def test_determinism_catches_a_jittering_reduction(no_shrink):
    res = run(weights.DETERMINISM, softmax_twin("jitter", _Jitter()))
    assert_fails(res, "differ bitwise")
    assert res.bound_kind == "exact"


@pytest.mark.parametrize("dtype", DTYPES)
def test_convex_combination_catches_a_multiplied_normalizer(dtype, no_shrink):
    assert_fails(run(weights.CONVEX_COMBINATION, elu1_twin("times-d", _times_denominator), dtype))


def test_scale_once_catches_a_scale_applied_twice_and_names_the_fit(no_shrink):
    res = run(scores.CLAIMED_SCALE, softmax_twin("scale-twice", _scale_twice))
    assert_fails(res, "fits: claimed applied twice = 1/d;")
    ok = run(scores.CLAIMED_SCALE, softmax_twin("ok", _softmax_fwd))
    assert ok.status == "pass"


def test_single_key_catches_an_undeclared_eps(no_shrink):
    assert_fails(run(scores.SINGLE_KEY, softmax_twin("eps", _silent_eps)), "S = 1")


@pytest.mark.parametrize("dtype", DTYPES)
def test_masks_catch_a_finite_sentinel(dtype, no_shrink):
    twin = softmax_twin("sentinel", _finite_sentinel, supports_mask=True, empty_rows="zeros")
    assert_fails(run(masks.MASKS, twin, dtype))


def test_causal_alignment_checks_the_declared_convention(no_shrink):
    top = softmax_twin("sdpa", _top_left, causal_alignment="top-left")
    bottom = softmax_twin("flash", _bottom_right, causal_alignment="bottom-right")
    assert run(masks.CAUSAL_ALIGNMENT, top).status == "pass"
    assert run(masks.CAUSAL_ALIGNMENT, bottom).status == "pass"
    # fault class 7: declared bottom-right, implemented top-left (and the converse)
    assert_fails(run(masks.CAUSAL_ALIGNMENT, top.with_claims(causal_alignment="bottom-right")))
    assert_fails(run(masks.CAUSAL_ALIGNMENT, bottom.with_claims(causal_alignment="top-left")))


def test_causal_mismatch_must_be_rejected_by_project_code(no_shrink):
    twin = softmax_twin("accepts", _accepts_mismatch)
    assert masks.project_owned(twin)
    assert_fails(run(masks.CAUSAL_MISMATCH_REJECTED, twin), "instead of raising")


def test_scale_candidates_merge_coinciding_names():
    names = scores.scale_candidates(variants.get("softmax"))
    assert "1/sqrt(d) = claimed" in names or "claimed = 1/sqrt(d)" in names
    assert any("applied twice" in n and "1/d" in n for n in names)
    fixed = scores.scale_candidates(variants.get("softmax").with_claims(scale=0.3))
    assert "claimed" in fixed and "claimed applied twice" in fixed


def test_array_observation_ignores_unbounded_elements():
    import numpy as np

    obs = array_observation(np.array([np.nan, 1.0]), np.array([np.inf, 2.0]), what="t")
    assert obs.ratio == 0.5
    assert form_kind("chunked/symmetric/C=3") == "chunked"
    assert form_kind("forward") == "any"
    assert form_kind("recurrent") == "recurrent"


# ----------------------------------------------------------------------------- fault-class triggers


def _inputs(B, H, T, S_, d, d_v, *, causal, seed=0, positive=False, zeros=False):
    from verify.strategies import AttentionInputs, Shape

    g = torch.Generator().manual_seed(seed)
    shape = Shape(B=B, H=H, T=T, S=S_, d=d, d_v=d_v)
    q, k, v = (
        torch.rand(*s, generator=g, dtype=torch.float64) for s in (shape.q, shape.k, shape.v)
    )
    if not positive:
        q, k = 2 * q - 1, 2 * k - 1
    if zeros:
        q, k = torch.zeros_like(q), torch.zeros_like(k)
    return AttentionInputs(q=q, k=k, v=v, causal=causal, scale=None, radius=None, shape=shape)


def test_faults_4_trigger_heads_one_length_two():
    """H = 1, T = 2: the key sum over heads is silent to head independence; with features
    identically one the denominator at t (1-based) must be m t (here m = d = 3)."""
    from verify.properties.support.common import Example

    twin = elu1_twin("heads-not-time", _heads_not_time, causal="yes")
    x = _inputs(1, 1, 2, 2, 3, 2, causal=True, zeros=True)
    ex = Example(x, {"path": "forward", "denominator": "sum"})
    assert worst(weights.UNIFORM_WEIGHTS.check(twin, ex, RunContext())).ratio > 1
    good = elu1_twin(
        "ok",
        lambda q, k, v, *, causal: (
            _linear_parts(q, k, v, causal)[0] / _linear_parts(q, k, v, causal)[1][..., None]
        ),
        causal="yes",
    )
    assert worst(weights.UNIFORM_WEIGHTS.check(good, ex, RunContext())).ratio <= 1


def test_faults_9_trigger_length_two():
    """T = 2, causal: output 0 must not change when token 1 changes (huge finite values)."""
    import numpy as np

    from verify.properties.support.common import Example

    twin = softmax_twin("flag-dropped", _softmax_fwd, forms={"parallel/fast": _flag_dropped})
    x = _inputs(1, 1, 2, 2, 2, 1, causal=True)
    p = poison_value(x.dtype)
    future = (np.full((1, 1, 1, 2), p), np.full((1, 1, 1, 2), p), np.full((1, 1, 1, 1), -p))
    for path, fails in (("parallel/fast", True), ("forward", False)):
        choices = {"last_kept": 0, "future": "huge", "path": path, "denominator": "sum"}
        ex = Example(x, dict(choices, _future=future))
        assert (worst(dependence.CAUSALITY.check(twin, ex, RunContext())).ratio > 1) == fails, path


def test_faults_6_trigger_two_keys_one_dim():
    """T = 2, d = 1, positive features: v = 1 must give 1, not the denominator."""
    from verify.properties.support.common import Example

    twin = elu1_twin("times-d", _times_denominator)
    x = _inputs(1, 1, 2, 2, 1, 1, causal=False, positive=True)
    x = dataclasses.replace(x, v=torch.ones_like(x.v), case="unit_values")
    ex = Example(x, {"path": "forward"})
    assert worst(weights.CONVEX_COMBINATION.check(twin, ex, RunContext())).ratio > 1


def test_faults_7_trigger_one_query_two_keys():
    """T = 1, S = 2: top-left sees key 0 only, bottom-right sees both."""
    from verify.properties.support.common import Example

    x = _inputs(1, 1, 1, 2, 2, 2, causal=False)
    ex = Example(x, {"path": "forward"})
    top = softmax_twin("sdpa", _top_left, causal_alignment="top-left")
    assert worst(masks.CAUSAL_ALIGNMENT.check(top, ex, RunContext())).ratio <= 1
    wrong = top.with_claims(causal_alignment="bottom-right")
    assert worst(masks.CAUSAL_ALIGNMENT.check(wrong, ex, RunContext())).ratio > 1
    assert (
        worst(masks.CAUSAL_MISMATCH_REJECTED.check(variants.get("softmax"), ex, RunContext())).ratio
        == 0
    )


def test_convex_combination_with_a_declared_eps_is_sub_convex():
    """N/(D + eps): weights sum to D/(D + eps) < 1, so the box widens to include 0 (an
    undeclared eps in the same place is caught by single-key instead)."""
    res = run(weights.CONVEX_COMBINATION, softmax_twin("eps", _silent_eps, eps=1e-6))
    assert res.status == "pass", res.reason


def test_adapters_of_third_party_code_are_not_project_owned():
    from verify.adapters.sdpa import sdpa_variant

    assert not masks.project_owned(sdpa_variant())
    assert masks.project_owned(variants.get("taylor-2")) and masks.project_owned(
        variants.get("softmax")
    )


def _bottom_right_nan_rows(q, k, v, *, causal):
    """FlashAttention-style bottom-right causal masking with -inf: rows with no key are 0/0."""
    T, S_ = q.shape[2], k.shape[2]
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        keep = torch.ones(T, S_, dtype=torch.bool).tril(S_ - T)
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v


def test_empty_rows_are_a_convention_unless_declared():
    """Causal T > S bottom-right leaves the first rows without a key: returning NaN there is a
    convention (reported), not an alignment failure; it fails only against a declared one."""
    v = softmax_twin("nan-rows", _bottom_right_nan_rows, causal_alignment="bottom-right")
    res = run(masks.CAUSAL_ALIGNMENT, v, "float64")
    assert res.status == "pass", res.reason
    declared = v.with_claims(empty_rows="zeros")
    res = run(masks.CAUSAL_ALIGNMENT, declared, "float64")
    assert res.status == "fail" and "empty_rows convention is zeros" in res.reason
    assert run(masks.CAUSAL_ALIGNMENT, v.with_claims(empty_rows="nan"), "float64").status == "pass"
