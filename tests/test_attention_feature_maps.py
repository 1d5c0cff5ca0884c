"""Public feature maps (D1, D3, D9; fault class 10).

Kernel identities are checked against exact rational arithmetic (``fractions``) with the D10
bound gamma_K * kappa_N(c |q|.|k|) (``gamma`` and ``U`` of ``derivations.rounding``, re-exported by
``test_attention_bounds``).
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
from test_attention_bounds import U, gamma

from derivations.feature_maps import feature_count, monomial_weight, multi_indices
from verify import attention as A
from verify.spec.vocabulary import BASES


def exact_kappa(q, k, order, c):
    """kappa_N(c q.k) in exact rationals (inputs are floats, converted exactly)."""
    x = Fraction(c) * sum(Fraction(a) * Fraction(b) for a, b in zip(q.tolist(), k.tolist()))
    return sum(x**n / math.factorial(n) for n in range(order + 1))


def kappa_abs(q, k, order, c):
    y = c * float((q.abs() * k.abs()).sum())
    return sum(y**n / math.factorial(n) for n in range(order + 1))


@pytest.mark.parametrize("basis", BASES)
@pytest.mark.parametrize("order", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("d", [1, 2, 3])
def test_kernel_identity_exact(basis, order, d):
    """phi(q).phi(k) = kappa_N(c q.k): error <= gamma_{2N+6+m} kappa_N(c|q|.|k|) (D1, D10)."""
    g = torch.Generator().manual_seed(order * 10 + d)
    for dtype in (torch.float64, torch.float32):
        q = torch.randn(5, d, generator=g, dtype=torch.float64).to(dtype)
        k = torch.randn(5, d, generator=g, dtype=torch.float64).to(dtype)
        for c in (None, 0.5, 1.0):
            cc = 1 / math.sqrt(d) if c is None else c
            fq = A.taylor_features(q, order, basis=basis, scale=c)
            fk = A.taylor_features(k, order, basis=basis, scale=c)
            assert fq.shape == (5, feature_count(order, d, basis)) and fq.dtype == dtype
            got = (fq.double() * fk.double()).sum(-1)  # exact products of the rounded features
            m = fq.shape[-1]
            for i in range(5):
                want = exact_kappa(q[i].double(), k[i].double(), order, cc)
                bound = gamma(2 * order + 6 + m, U[dtype]) * kappa_abs(
                    q[i].double(), k[i].double(), order, cc
                )
                assert abs(Fraction(got[i].item()) - want) <= Fraction(bound), (dtype, c, i)


@pytest.mark.parametrize("basis", BASES)
def test_faults10_elementwise_square_counterexamples(basis):
    """d = 2, q = k = (1, 1): 5 (scale 1); d = 4, q = 1, k = -q: kappa_2(-4) = 5, not -1."""
    one2 = torch.ones(2, dtype=torch.float64)
    v = (A.taylor_features(one2, 2, basis=basis, scale=1.0) ** 2).sum()
    assert abs(v.item() - 5.0) <= gamma(12, U[torch.float64]) * 5
    one4 = torch.ones(4, dtype=torch.float64)
    fq = A.taylor_features(one4, 2, basis=basis, scale=1.0)
    fk = A.taylor_features(-one4, 2, basis=basis, scale=1.0)
    assert abs((fq * fk).sum().item() - 5.0) <= gamma(2 * 2 + 6 + 15, U[torch.float64]) * 13


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("d", [1, 3, 4])
def test_symmetric_monomial_order_is_multi_indices(n, d):
    """Feature j is x^alpha_j / sqrt(alpha_j!) with alpha_j = multi_indices(n, d)[j]."""
    primes = torch.tensor([2.0, 3.0, 5.0, 7.0][:d], dtype=torch.float64)
    got = A.symmetric_monomial_features(primes, n, scale=1.0)
    alphas = multi_indices(n, d)
    assert got.shape == (len(alphas),)
    for j, alpha in enumerate(alphas):
        want = math.prod(p**a for p, a in zip(primes.tolist(), alpha)) * math.sqrt(
            float(monomial_weight(alpha))
        )
        assert abs(got[j].item() - want) <= gamma(n + 4, U[torch.float64]) * abs(want), alpha


def test_order_two_symmetric_weights():
    """1/sqrt(2) on squares, 1 on cross terms (D1)."""
    x = torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)
    f = A.symmetric_monomial_features(x, 2, scale=1.0)
    u = U[torch.float64]
    sq = [0, 3, 5]  # (0,0), (1,1), (2,2) in multi_indices order
    assert all(abs(f[i].item() - 1 / math.sqrt(2)) <= 2 * u for i in sq)
    assert all(abs(f[i].item() - 1.0) <= 2 * u for i in (1, 2, 4))


def test_tensor_power_layout_row_major():
    x = torch.tensor([2.0, 3.0], dtype=torch.float64)
    f = A.tensor_power_features(x, 2, scale=1.0)
    want = torch.tensor([4.0, 6.0, 6.0, 9.0], dtype=torch.float64) / math.sqrt(2)
    assert ((f - want).abs() <= gamma(3, U[torch.float64]) * want).all()
    assert A.tensor_power_features(x, 0).tolist() == [1.0]


def test_block_sizes_and_concatenation():
    x = torch.randn(2, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for basis, block in (
        ("symmetric", A.symmetric_monomial_features),
        ("tensor", A.tensor_power_features),
    ):
        sizes = A.taylor_block_sizes(3, 4, basis)
        assert sum(sizes) == feature_count(3, 4, basis)
        full = A.taylor_features(x, 3, basis=basis)
        lo = 0
        for n, size in enumerate(sizes):
            assert torch.equal(full[..., lo : lo + size], block(x, n)), (basis, n)
            lo += size


def test_taylor_kernel_horner_matches_exact():
    x = torch.linspace(-4, 4, 33, dtype=torch.float64)
    for N in range(7):
        got = A.taylor_kernel(x, N)
        for xi, gi in zip(x.tolist(), got.tolist()):
            exact = sum(Fraction(xi) ** n / math.factorial(n) for n in range(N + 1))
            absk = sum(abs(xi) ** n / math.factorial(n) for n in range(N + 1))
            # Horner: gamma_{2N} kappa_N(|x|) (Higham eq. 5.3) + coefficient rounding u
            assert abs(Fraction(gi) - exact) <= Fraction(gamma(2 * N + 1, U[torch.float64]) * absk)


def test_elementwise_maps():
    x = torch.tensor([-30.0, -1.0, 0.0, 2.5], dtype=torch.float64)
    assert A.identity_features(x) is x
    assert A.relu_features(x).tolist() == [0.0, 0.0, 0.0, 2.5]
    e = A.elu1_features(x)
    want = [math.exp(-30.0), math.exp(-1.0), 1.0, 3.5]
    for a, b in zip(e.tolist(), want):
        # elu(x) + 1 = expm1(x) + 1: absolute error <= gamma_3 (|elu(x)| + 1) (cancellation)
        assert abs(a - b) <= gamma(3, U[torch.float64]) * (abs(b - 1) + 1)
    xb = x.to(torch.bfloat16)
    assert (
        A.elu1_features(xb).dtype == torch.bfloat16 and A.relu_features(xb).dtype == torch.bfloat16
    )


def test_low_precision_features_keep_the_dtype():
    x = torch.randn(3, 4).to(torch.float16)
    for f in (lambda t: A.taylor_features(t, 2), lambda t: A.taylor_features(t, 2, basis="tensor")):
        out = f(x)
        assert out.dtype == torch.float16
        ref = f(x.double())
        assert (
            (out.double() - ref).abs()
            <= (U[torch.float16] + gamma(12, U[torch.float32])) * ref.abs() + 1e-7
        ).all()


# ------------------------------------------------------------------ FAVOR+ (D9)
def test_favor_projection_shapes_orthogonality_and_reproducibility():
    g = torch.Generator().manual_seed(1)
    w = A.favor_projection(4, 10, generator=g, dtype=torch.float64)
    assert w.shape == (10, 4) and w.dtype == torch.float64
    for block in (w[:4], w[4:8]):  # rows within a block are orthogonal
        gram = block @ block.T
        off = gram - torch.diag(torch.diagonal(gram))
        assert off.abs().max() <= gamma(16, U[torch.float64]) * gram.diagonal().max()
    w2 = A.favor_projection(4, 10, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert torch.equal(w, w2)
    iid = A.favor_projection(
        4, 10, orthogonal=False, generator=torch.Generator().manual_seed(1), dtype=torch.float64
    )
    assert not torch.equal(w, iid)
    assert A.favor_projection(4, 3, generator=g, dtype=torch.float32).dtype == torch.float32


def test_favor_features_positive_and_unbiased_kernel_estimate():
    """E[phi(x).phi(y)] = exp(x.y) (scale 1). iid closed-form variance (D9, re-derived here):
    Y = exp(w.(x+y) - (|x|^2+|y|^2)/2), E[Y^2] = exp(2|x+y|^2 - |x|^2 - |y|^2), so the mean of m
    features has variance (E[Y^2] - e^{2x.y})/m. Chebyshev at level alpha = 1e-6 per pair,
    Bonferroni over the 3 pairs and 2 samplers (orthogonal rows do not exceed the iid variance).
    """
    x = torch.tensor([[0.3, -0.2, 0.1], [0.5, 0.5, -0.4], [-0.6, 0.1, 0.2]], dtype=torch.float64)
    y = torch.tensor([[0.1, 0.4, -0.3], [0.2, -0.1, 0.3], [-0.5, 0.2, 0.1]], dtype=torch.float64)
    m = 4096
    alpha = 1e-6 / 6
    for orthogonal in (False, True):
        w = A.favor_projection(
            3,
            m,
            orthogonal=orthogonal,
            generator=torch.Generator().manual_seed(2),
            dtype=torch.float64,
        )
        fx, fy = A.favor_features(x, w, scale=1.0), A.favor_features(y, w, scale=1.0)
        assert (fx > 0).all() and fx.shape == (3, m)
        est = (fx * fy).sum(-1)
        for i in range(3):
            xy = float(x[i] @ y[i])
            ey2 = math.exp(
                2 * float((x[i] + y[i]).square().sum())
                - float(x[i].square().sum())
                - float(y[i].square().sum())
            )
            var = (ey2 - math.exp(2 * xy)) / m
            assert abs(est[i].item() - math.exp(xy)) <= math.sqrt(var / alpha), (orthogonal, i)


def test_favor_features_scale_is_absorbed_as_sqrt_c():
    w = A.favor_projection(4, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    x = torch.randn(2, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    a = A.favor_features(x, w)  # default c = 1/sqrt(4) = 1/2
    b = A.favor_features(x * math.sqrt(0.5), w, scale=1.0)
    assert ((a - b).abs() <= gamma(12, U[torch.float64]) * a).all()
