"""Denominator replacements of D7 (``verify.attention.norms``)."""

from __future__ import annotations

import math

import pytest
import torch
from test_attention_bounds import U, assert_within, gamma, output_bound

from verify.attention import (
    apply_denominator,
    l2_normalize,
    layer_normalize,
    linear_attention,
    rms_normalize,
    softmax_attention,
    taylor_attention,
)
from verify.spec.vocabulary import DENOMINATORS

u = U[torch.float64]


def rand(*s, seed=0):
    return torch.randn(*s, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def test_norm_definitions():
    """Each side of a comparison has relative error <= gamma_{d+4} per component (a sum of d
    squares, sqrt, division; Higham Lemma 3.1) on components of size <= sqrt(d)."""
    x = rand(4, 5)
    n = x.norm(dim=-1, keepdim=True)
    tol = 2 * gamma(5 + 4, u)
    assert ((l2_normalize(x) - x / n).abs() <= tol).all()
    assert ((rms_normalize(x) - x / (n / math.sqrt(5))).abs() <= tol * math.sqrt(5)).all()
    assert ((l2_normalize(x, eps=2.0) - x / torch.sqrt(n**2 + 2.0)).abs() <= tol).all()
    # LayerNorm: zero mean and unit mean square (biased variance), up to rounding of the
    # centring (gamma_{d+1} relative to |x| + |mean|, divided by the standard deviation)
    ln = layer_normalize(x)
    c = x - x.mean(-1, keepdim=True)
    sd = c.square().mean(-1).sqrt()
    scale = (x.abs().max(-1).values + x.mean(-1).abs()) / sd
    assert (ln.mean(-1).abs() <= gamma(2 * 5 + 8, u) * scale * math.sqrt(5)).all()
    assert ((ln.square().mean(-1) - 1).abs() <= gamma(4 * 5 + 16, u) * scale * 5).all()


@pytest.mark.parametrize("mode", ["l2", "rms", "layernorm"])
def test_d7_scale_invariant_norms_of_n_equal_norms_of_o(mode):
    """Norm(N_t) = Norm(o_t) exactly for positive D_t (even kappa_N, exp) without eps (D7)."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 6, 3, generator=g, dtype=torch.float64) for _ in range(3))
    fn = {"l2": l2_normalize, "rms": rms_normalize, "layernorm": layer_normalize}[mode]
    for f, kernel in ((lambda **kw: softmax_attention(q, k, v, causal=True, **kw), "exp"),
                      (lambda **kw: taylor_attention(q, k, v, order=2, causal=True, **kw),
                       "taylor:2")):  # fmt: skip
        ref, bound = output_bound(kernel, q, k, v, dtype=torch.float64, causal=True,
                                  denominator=mode)  # fmt: skip
        assert_within(f(denominator=mode), ref, bound, f"{kernel} {mode}(N)")
        o = f(denominator="sum")
        # Norm(o) evaluated on the computed o: Lipschitz bound of the norm times o's error
        _, ob = output_bound(kernel, q, k, v, dtype=torch.float64, causal=True)
        sc = 1.0 if mode == "l2" else math.sqrt(3)
        extra = sc * 2 * ob.norm(dim=-1, keepdim=True) / (o if mode != "layernorm" else
                                                         o - o.mean(-1, keepdim=True)).norm(
            dim=-1, keepdim=True)  # fmt: skip
        assert_within(fn(o), ref, bound + extra + gamma(8, u) * ref.abs(), f"{mode}(o)")


def test_d7_eps_makes_the_difference_depend_on_d():
    """LN_eps(N) = (o - mu)/sqrt(sigma^2 + eps/D^2): with eps, Norm(N) != Norm(o) (D7)."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 1, 4, 3, generator=g, dtype=torch.float64) for _ in range(3))
    N = taylor_attention(q, k, v, order=2, causal=True, denominator="none")
    D = taylor_attention(q, k, torch.ones_like(v[..., :1]), order=2, causal=True,
                         denominator="none")  # fmt: skip
    o = N / D
    ln_eps = taylor_attention(q, k, v, order=2, causal=True, denominator="layernorm", eps=0.5)
    c = o - o.mean(-1, keepdim=True)
    want = c / torch.sqrt(c.square().mean(-1, keepdim=True) + 0.5 / D**2)
    assert ((ln_eps - want).abs() <= gamma(64, u) * 8).all()
    assert (ln_eps - layer_normalize(o)).abs().max() > 1e-3


@pytest.mark.parametrize("mode", DENOMINATORS)
def test_apply_denominator_log_shift_is_exact(mode):
    """Evaluating on (N', D') with log_shift m equals evaluating on (e^m N', e^m D')."""
    N = rand(3, 4, seed=3)
    D = rand(3, seed=4).abs() + 0.5
    n = torch.tensor([2.0, 3.0, 1.0], dtype=torch.float64)
    m = torch.tensor([-1.5, 0.0, 2.0], dtype=torch.float64)
    for eps in (0.0, 0.3):
        a = apply_denominator(N, D, n, mode=mode, eps=eps, log_shift=m)
        b = apply_denominator(N * m.exp()[:, None], D * m.exp(), n, mode=mode, eps=eps)
        # both sides: the rounding of exp(m) (2u, D10) and of the products and the final
        # evaluation (<= d_v + 6 roundings each), relative to |a| + |b| (+1 for the centring
        # of layernorm, whose inputs are O(1) here)
        assert ((a - b).abs() <= gamma(40, u) * (a.abs() + b.abs() + 1)).all(), eps


@pytest.mark.parametrize("mode", DENOMINATORS)
def test_apply_denominator_empty_rows(mode):
    N = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    D = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    out = apply_denominator(N, D, torch.zeros(2, dtype=torch.float64), mode=mode)
    assert (out == 0).all()
    out.sum().backward()
    for x in (N, D):  # D is unused by modes none/l2/rms/layernorm/count: no gradient
        assert x.grad is None or torch.isfinite(x.grad).all()
    assert torch.isfinite(N.grad).all()


def test_count_mode_divides_by_visible_keys():
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 1, 5, 2, generator=g, dtype=torch.float64) for _ in range(3))
    N = linear_attention(q, k, v, feature_map="elu1", causal=True, denominator="none")
    out = linear_attention(q, k, v, feature_map="elu1", causal=True, denominator="count")
    t = torch.arange(1, 6, dtype=torch.float64)[:, None]
    assert ((out - N / t).abs() <= u * (N / t).abs()).all()  # one division, same N


def test_zero_numerator_is_ieee_unless_eps():
    q = torch.ones(1, 1, 2, 2, dtype=torch.float64)
    v = torch.zeros(1, 1, 2, 3, dtype=torch.float64)
    assert torch.isnan(taylor_attention(q, q, v, order=2, denominator="l2")).all()
    assert (taylor_attention(q, q, v, order=2, denominator="l2", eps=1e-3) == 0).all()


# a shifted softmax numerator of ~1e-37 (found by the dev profile, bf16, radius 86): query
# -15.9375 sees keys -5.21875 (score 83.2, value 0) and 0 (score 0, value 0.1455), so
# N = e^-83.2 * 0.1455 and its square underflows float32
TINY_Q = [[[[0.0], [-15.9375]]]]
TINY_K = [[[[-5.21875], [0.0]]]]
TINY_V = [[[[0.0], [0.1455078125]]]]


@pytest.mark.parametrize("mode", ["l2", "rms"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scale_invariant_modes_do_not_square_a_tiny_numerator_to_zero(mode, dtype):
    """N / ||N|| of N = 1.1e-37 (d_v = 1) is exactly 1; squaring N unscaled gave inf."""
    q, k, v = (torch.tensor(x, dtype=torch.float64).to(dtype) for x in (TINY_Q, TINY_K, TINY_V))
    out = softmax_attention(q, k, v, causal=True, denominator=mode)
    assert out[0, 0, 1, 0].item() == 1.0, out
    # the unscaled normalization is what failed: its sum of squares is 0
    n = torch.tensor([[1.1e-37]], dtype=torch.float32)
    assert not torch.isfinite(l2_normalize(n)).all()


def test_no_bound_where_the_computed_numerator_may_vanish():
    """D7 sensitivity: with eps = 0 and ||y_hat - y|| >= ||y||, y_hat may be 0 and its
    normalization 0/0, so no finite bound holds; the oracle's model then states nothing on
    that element instead of failing a correct implementation that squares N unscaled."""
    import numpy as np

    from derivations.norms import normalization_sensitivity
    from verify.exact.errors import attention_error_bound

    assert normalization_sensitivity("l2", 1e-3, 1.0, 1) == pytest.approx(2e-3)
    assert normalization_sensitivity("l2", 1.0, 1.0, 1) == math.inf
    assert normalization_sensitivity("l2", 1.0, 1.0, 1, eps=1e-6) < math.inf
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (TINY_Q, TINY_K, TINY_V))
    eb = attention_error_bound("softmax", q, k, v, dtype="float32", causal=True, denominator="l2")
    assert eb.bound[0, 0, 1, 0] == math.inf
    v_big = np.asarray([[[[1.0], [0.1455078125]]]])  # N ~ 1: a finite, small bound
    eb = attention_error_bound("softmax", q, k, v_big, dtype="float32", causal=True,
                               denominator="l2")  # fmt: skip
    assert np.all(eb.bound < 1e-3), eb.bound  # output 1: a bound far below it


def test_count_mode_bound_carries_a_subnormal_weight_times_a_huge_value():
    """Count mode scales the shifted weights back by e^m. A shifted weight e^(-745 + 14.5) is
    subnormal (absolute error up to 2^-1075); times e^m = e^-14.5 alone that underflows float64
    to 0, but times |v| = 5e38 it is 1e-293, the size of the error the dev profile observed
    (5.2e-293 against a bound of 6.8e-298). The term is evaluated in the log domain."""
    import numpy as np

    from verify.exact import oracle
    from verify.exact.errors import attention_error_bound

    q = torch.tensor([[[[0.0], [1.0]]]], dtype=torch.float64)
    k = torch.tensor([[[[-745.0], [-14.5]]]], dtype=torch.float64)
    v = torch.tensor([[[[-5e38], [0.0]]]], dtype=torch.float64)
    kw = dict(causal=True, scale=1.0, denominator="count")
    o = softmax_attention(q, k, v, **kw).numpy()
    ref = oracle.reference(q, k, v, kernel="softmax", **kw)
    eb = attention_error_bound("softmax", q, k, v, dtype="float64", exact=ref, **kw)
    err = np.abs(o - np.asarray(ref.float64))
    assert err[0, 0, 1, 0] > 1e-300  # the subnormal weight's rounding shows
    assert np.all(err <= eb.bound), (err, eb.bound)
