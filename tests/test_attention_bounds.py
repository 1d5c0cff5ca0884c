"""Provisional D10 error model for the attention tests, plus tests of the model itself.

TODO(errors.py): replace by ``verify.errors`` once that module exists (separate issue).

Model (THEORY.md D10; Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed. 2002):
unit roundoff u (fp64 2^-53, fp32 2^-24, fp16 2^-11, bf16 2^-8), gamma_n = n u / (1 - n u).
- A product of n rounded factors has relative error <= gamma_n (Lemma 3.1); a sum of n terms,
  in any order, has absolute error <= gamma_{n-1} sum |terms| (eq. (3.4) and Sec. 4.2).
- Horner on p(x) = sum a_i x^i: |fl(p) - p| <= gamma_{2N} sum |a_i||x|^i (eq. (5.3)).
- exp of a rounded argument: relative error e^{|dx|} - 1 plus about one ulp of the library exp
  (THEORY.md D10 cites ~1 ulp on CPU, 2 ulp for CUDA fast exp; we charge 2u).

Each kernel attention output is N_t / D_t (or a D7 mode applied to N_t) with
N_t = sum_s kappa_ts v_s. For every kernel we bound the error of each computed *term* relative
(feature count m and feature-product roundings included) to a magnitude
W_ts >= sum over the term's pieces of |piece| (for Taylor features
sum_alpha |phi_alpha(q) phi_alpha(k)| = kappa_N(c |q|.|k|), D1), which covers the parallel,
recurrent and chunked orders of summation alike:
    E_N = sum_s ((1 + rel_ts)(1 + gamma_{S+3}) - 1) W_ts |v_s|,   E_D likewise without |v_s|,
and then propagate E_N, E_D through the denominator mode (``output_bound``). For signed kernels
the bound is relative to sum |kappa| |v| / |D| (D10 conditioning), not to the output.
"""

from __future__ import annotations

import math

import pytest
import torch

U = {
    torch.float64: 2.0**-53,
    torch.float32: 2.0**-24,
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
}
#: library exp error charged per evaluation, in units of u (THEORY.md D10: ~1 ulp CPU, 2 CUDA)
EXP_ULPS = 2


def gamma(n: int, u: float) -> float:
    """gamma_n = n u / (1 - n u) (Higham Lemma 3.1); requires n u < 1."""
    assert n * u < 1, f"gamma_{n} undefined for u = {u}"
    return n * u / (1 - n * u)


def visible(T: int, S: int, causal: bool, attn_mask=None) -> torch.Tensor:
    """(B|1, H|1, T, S) bool visibility (independent of verify.attention)."""
    vis = torch.ones(1, 1, T, S, dtype=torch.bool)
    if causal:
        vis = vis & torch.ones(T, S, dtype=torch.bool).tril()
    if attn_mask is not None:
        vis = vis & attn_mask.cpu()
    return vis


def _taylor(x: torch.Tensor, order: int) -> torch.Tensor:
    # independent of derivations/verify: plain series with math.factorial
    return sum(x**n / math.factorial(n) for n in range(order + 1)) + 0 * x


def _elu1(x):
    return torch.where(x > 0, x + 1, torch.exp(x))


def kernel_terms(kernel, q, k, *, scale=None, vis, projection=None, u, shift=True):
    """(kappa, W, rel): signed kernel values, magnitudes and per-term relative bounds, float64.

    ``kernel``: "exp", "taylor:N" (basis-independent: m = tensor feature count, the larger),
    "identity", "elu1", "relu", "favor" or ("callable", fn64, K_w, m) for a test's own map whose
    per-term relative error is <= gamma_{K_w} w.r.t. W = phi(q).phi(k) of |features|.
    """
    q, k = q.double().cpu(), k.double().cpu()
    d = q.shape[-1]
    T, S = q.shape[-2], k.shape[-2]
    shape = torch.broadcast_shapes(q.shape[:-2] + (T, S), vis.shape)
    zero = torch.zeros(shape, dtype=torch.float64)
    exp_type = kernel == "exp" or kernel == "favor" or str(kernel).startswith("taylor:")
    c = (
        (1 / math.sqrt(d) if scale is None else scale)
        if exp_type
        else (1.0 if scale is None else scale)
    )
    y = c * (q.abs() @ k.abs().transpose(-1, -2))
    x = c * (q @ k.transpose(-1, -2))
    if kernel == "exp":
        # shift=False: the unshifted sum_s e^x (modes none/count); the implementation computes
        # e^m * sum e^(x-m): two more roundings (exp(m), product) per term
        xm = torch.where(vis, x, -math.inf)
        m = xm.amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, 0.0)
        extra = 0.0 if shift else (EXP_ULPS + 1) * u
        if not shift:
            x, m0 = x - m, m
            m = torch.zeros_like(m)
        kap = torch.where(vis, torch.exp(torch.where(vis, x, m) - m), zero)
        ym = torch.where(vis, y, 0.0).amax(-1, keepdim=True)
        arg = gamma(d + 2, u) * (y + ym) + u * (x - m).abs()
        rel = torch.expm1(arg) * (1 + EXP_ULPS * u) + EXP_ULPS * u + extra
        if not shift:
            kap = kap * torch.exp(m0)
        return kap, kap.abs(), torch.where(vis, rel, zero)
    if isinstance(kernel, str) and kernel.startswith("taylor:"):
        N = int(kernel.split(":")[1])
        m = sum(d**n for n in range(N + 1))
        kap = _taylor(x, N)
        W = _taylor(y, N)
        rel = gamma(2 * N * (d + 2) + 2 * N + 13 + m, u)
    elif kernel in ("identity", "relu", "elu1"):
        f = {"identity": torch.abs, "relu": torch.relu, "elu1": lambda t: _elu1(t).abs()}[kernel]
        g = {"identity": lambda t: t, "relu": torch.relu, "elu1": _elu1}[kernel]
        kap = g(c * q) @ g(k).transpose(-1, -2)
        if kernel == "elu1":  # |elu(x)| + 1 bounds the absolute error scale of elu(x) + 1
            f = lambda t: (torch.where(t > 0, t, torch.expm1(t))).abs() + 1  # noqa: E731
        W = f(c * q) @ f(k).transpose(-1, -2)
        rel = gamma({"identity": 3, "relu": 3, "elu1": 9}[kernel] + d, u)
    elif kernel == "favor":
        P = projection.double().cpu()
        m = P.shape[0]

        def phi_theta(z):
            zs = z * math.sqrt(c)
            arg = zs @ P.T - 0.5 * zs.square().sum(-1, keepdim=True)
            phi = torch.exp(arg) / math.sqrt(m)
            darg = (
                gamma(d + 3, u) * (zs.abs() @ P.abs().T + 0.5 * zs.square().sum(-1, keepdim=True))
                + u * arg.abs()
            )
            theta = torch.expm1(darg) * (1 + EXP_ULPS * u) + (EXP_ULPS + 3) * u
            return phi, theta.amax(-1)

        pq, tq = phi_theta(q)
        pk, tk = phi_theta(k)
        kap = pq @ pk.transpose(-1, -2)
        W = kap
        rel = (1 + tq[..., :, None]) * (1 + tk[..., None, :]) * (1 + gamma(m + 2, u)) - 1
    elif isinstance(kernel, tuple) and kernel[0] == "callable":
        _, fn64, K_w, m = kernel
        kap = fn64(c * q) @ fn64(k).transpose(-1, -2)
        W = fn64(c * q).abs() @ fn64(k).abs().transpose(-1, -2)
        rel = gamma(K_w + m, u)
    else:
        raise AssertionError(f"unknown kernel {kernel!r}")
    kap = torch.where(vis, kap, zero)
    W = torch.where(vis, W, zero)
    rel = torch.where(vis, torch.as_tensor(rel, dtype=torch.float64), zero)
    return kap, W, rel


def output_bound(
    kernel,
    q,
    k,
    v,
    *,
    dtype,
    causal=False,
    attn_mask=None,
    scale=None,
    denominator="sum",
    eps=0.0,
    projection=None,
):
    """(reference float64 output, elementwise error bound) for an output computed in ``dtype``.

    The reference is a plain float64 evaluation (not the code under test); the returned bound
    covers the implementation's error in ``dtype`` *plus* the reference's own float64 error, so
    ``|out - ref| <= bound`` is the check. Rows with no visible key: reference 0, bound 0.
    """
    u = U[dtype]
    u64 = U[torch.float64]
    T, S = q.shape[-2], k.shape[-2]
    vis = visible(T, S, causal, attn_mask)
    v64 = v.double().cpu()
    kw = dict(
        scale=scale, vis=vis, projection=projection, shift=denominator not in ("none", "count")
    )
    kap, W, rel = kernel_terms(kernel, q, k, u=u, **kw)
    _, _, rel64 = kernel_terms(kernel, q, k, u=u64, **kw)
    N = kap @ v64
    D = kap.sum(-1)
    n = vis.expand(kap.shape).sum(-1).double()
    # implementation in dtype + float64 reference, both summing S terms (features inside rel)
    tot = (1 + rel) * (1 + gamma(S + 3, u)) - 1 + (1 + rel64) * (1 + gamma(S + 3, u64)) - 1
    EN = (tot * W) @ v64.abs()
    ED = (tot * W).sum(-1)
    uo = u + u64
    empty = (n == 0)[..., None]
    absN = N.abs()
    if denominator == "sum":
        Dd = D + eps
        ED = ED + uo * Dd.abs()
        o = N / Dd[..., None]
        gap = (Dd.abs() - ED)[..., None]
        lin = (EN + o.abs() * ED[..., None]) / gap
        bound = torch.where(gap > 0, lin + uo * (o.abs() + lin), math.inf)
    elif denominator == "none":
        o = N
        bound = EN + uo * absN
    elif denominator == "count":
        nn = (n + eps)[..., None]
        o = N / nn
        bound = (EN + uo * absN) / nn + uo * o.abs()
    else:
        dv = N.shape[-1]
        if denominator == "l2":
            scale_f, Nv, E, epsf = 1.0, N, EN, eps
        elif denominator == "rms":
            scale_f, Nv, E, epsf = math.sqrt(dv), N, EN, dv * eps
        else:  # layernorm: centring is a projection (norm 1); its rounding adds to E
            scale_f, Nv = math.sqrt(dv), N - N.mean(-1, keepdim=True)
            E = EN + gamma(dv + 2, uo) * (absN + absN.amax(-1, keepdim=True))
            epsf = dv * eps
        s = torch.sqrt(Nv.square().sum(-1, keepdim=True) + epsf)
        o = scale_f * Nv / s
        lip = scale_f * 2 * torch.linalg.vector_norm(E, dim=-1, keepdim=True) / s
        bound = lip + gamma(dv + 4, uo) * o.abs()
    o = torch.where(empty, 0.0, o)
    bound = torch.where(empty, 0.0, bound)
    return o, bound


def assert_within(out, ref, bound, what=""):
    """|out - ref| <= bound elementwise (float64 space); reports the worst observed/bound."""
    err = (out.double().cpu() - ref).abs()
    bad = ~(err <= bound)
    if bad.any():
        ratio = (err / bound)[bad]
        idx = bad.nonzero()[0].tolist()
        raise AssertionError(
            f"{what}: {int(bad.sum())} elements exceed the D10 bound; worst observed/bound = "
            f"{ratio.max().item():.3g}; first at {idx}: "
            f"out={out.double().cpu()[tuple(idx)].item()!r}, "
            f"ref={ref[tuple(idx)].item()!r}, bound={bound[tuple(idx)].item():.3g}"
        )


# ---------------------------------------------------------------------------- model self-tests
def test_gamma_definition():
    assert gamma(1, 2.0**-53) == pytest.approx(2.0**-53, rel=1e-15)
    with pytest.raises(AssertionError):
        gamma(2**24, 2.0**-24)


def test_bound_holds_and_is_not_vacuous_against_mpmath():
    """The model's bound covers a float32 evaluation and is not orders of magnitude loose."""
    from verify.oracle import taylor_reference

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 4, 3, generator=g) for _ in range(3))
    exact = taylor_reference(q, k, v, order=2, causal=True)
    # plain float32 evaluation written here (independent of verify.attention)
    x = (q @ k.transpose(-1, -2)) / math.sqrt(3)
    w = (1 + x + x * x / 2).tril()
    out32 = (w @ v) / w.sum(-1, keepdim=True)
    ref, bound = output_bound("taylor:2", q, k, v, dtype=torch.float32, causal=True)
    err = (out32.double() - torch.from_numpy(exact.float64)).abs()
    assert (err <= bound).all()
    assert (bound < 1e-3).all()  # non-vacuous at fp32 on O(1) data
    assert (ref - torch.from_numpy(exact.float64)).abs().max() < 1e-12
