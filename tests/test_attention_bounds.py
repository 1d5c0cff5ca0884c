"""The attention tests' tolerances, from the project's error model ``verify.errors`` (D10).

A thin adapter: :func:`output_bound` turns a test's kernel name and torch dtype into a call of
``verify.errors.float64_reference`` (the float64 direct evaluation) and
``verify.errors.attention_error_bound(..., exact=None)``, whose bound covers the
implementation's error in ``dtype`` *plus* the reference's own float64 error (D10,
recipe 6 of ``derivations/rounding.py``). :func:`oracle_bound` states the bound against the
mpmath oracle's exact output instead (``exact=`` given: no reference error), and
:func:`callable_map_bound` does that for a test's own feature map. ``U`` and ``gamma`` are
``derivations.rounding``'s.

The tests at the bottom check ``verify.errors`` itself against mpmath: the bounds hold and are
not vacuous, the float64 reference is within its stated bound, and the recipe-6 composition.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from derivations import rounding as d10
from derivations.rounding import gamma, unit_roundoff
from verify.exact import error_terms, errors
from verify.exact.oracle import linear_reference, softmax_reference, taylor_reference
from verify.spec.kernel import UNKNOWN, parse_name

__all__ = ["U", "assert_within", "callable_map_bound", "gamma", "oracle_bound", "output_bound"]

DTYPE_NAMES = {
    torch.float64: "float64",
    torch.float32: "float32",
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
}
#: unit roundoff per torch dtype (``derivations.rounding.unit_roundoff``)
U = {dt: unit_roundoff(name) for dt, name in DTYPE_NAMES.items()}
_U64 = U[torch.float64]


def model_kernel(kernel: str) -> str:
    """A test kernel name as ``verify.exact.errors`` spells it: ``exp`` -> ``softmax``,
    ``taylor:N`` unchanged (kappa_N on scores or through features: every form), feature maps
    -> ``linear:MAP``."""
    try:
        kern = parse_name(kernel)
    except ValueError:
        kern = UNKNOWN
    if not kern.known:
        raise ValueError(
            f"kernel: expected exp, taylor:N, identity, elu1, relu or favor, got {kernel!r} "
            "(a test's own feature map: use callable_map_bound)"
        )
    return str(kern)


def _bound(kernel, q, k, v, *, dtype, exact, form, basis, device, **kw):
    name = model_kernel(kernel)
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"dtype: expected one of {tuple(DTYPE_NAMES)}, got {dtype!r}")
    eb = errors.attention_error_bound(
        name, q, k, v, dtype=DTYPE_NAMES[dtype], exact=exact, form=form, basis=basis,
        device=device, **kw,
    )  # fmt: skip
    return name, torch.from_numpy(np.ascontiguousarray(eb.bound))


def output_bound(
    kernel, q, k, v, *, dtype, exact=None, form="any", basis=None, device="cpu", **options
):
    """(reference, elementwise bound), both float64 (B, H, T, d_v) CPU tensors.

    The check is ``|out - ref| <= bound`` for an output computed in ``dtype`` (a torch dtype;
    bf16/fp16: the two-level model, fp32 accumulation, output rounded to the dtype) by any
    ``form`` (default ``any``: the worst per key of the score and feature evaluations; ``basis``
    None: the larger Taylor feature count), on ``device`` (``cuda``: CUDA's cited exp ulps).
    ``options``: causal, attn_mask, scale, denominator, eps, projection. Without ``exact`` the
    reference is the float64 evaluation and the bound includes its own float64 bound; with
    ``exact`` (the ``verify.exact.oracle`` result on the same inputs and options) the reference
    is the exact output rounded once and the bound uses the exact |o|. Rows with no visible
    key: reference 0, bound 0. Not checked here: ``errors.outside_model``'s no-underflow
    criterion, a sufficient condition that ordinary inputs of high Taylor orders in float32
    fail (entries below about 1e-3 for N = 4); callers choose inputs whose products stay normal.
    """
    name, bound = _bound(
        kernel, q, k, v, dtype=dtype, exact=exact, form=form, basis=basis, device=device, **options
    )
    if exact is not None:
        return torch.from_numpy(exact.float64), bound
    return torch.from_numpy(errors.float64_reference(name, q, k, v, **options)), bound


def oracle_bound(kernel, exact, q, k, v, **kw):
    """:func:`output_bound` against the exact output ``exact`` (same inputs and options)."""
    return output_bound(kernel, q, k, v, exact=exact, **kw)


def callable_map_bound(
    fmap, fmap_mp, feature_rel_error, q, k, v, *, dtype, causal=False, attn_mask=None
):
    """(exact output, bound) for kernel linear attention with a test's own feature map.

    Derived from ``derivations.rounding`` (recipe 3-4 of its module docstring): each computed
    feature has relative error <= ``feature_rel_error`` (the caller derives it for its map), so
    for every form num_rel, den_rel = ``feature_form_relative_bound(e_phi, m, n_t, u, .)``
    relative to A = sum_s W_s |v_s|, B = sum_s W_s; then ``kernel_attention_output_bound``
    with one IEEE division. The features must be non-negative (checked on the inputs in
    float64), so W_s = sum_m |phi_m(q)| |phi_m(k_s)| = kappa_ts and the oracle's exact
    sum_s |kappa| |v|, sum_s |kappa| and D are A, B, D; rounded once to float64 they are
    widened by one float64 rounding. Scale 1 (the map sees q and k unscaled).

    Args:
        fmap: the torch map (..., d) -> (..., m); fmap_mp: the same map on lists of mpf.
        feature_rel_error: e_phi for the computation in ``dtype``.
        q, k, v: (B, H, T, d), (B, H, S, d), (B, H, S, d_v); dtype: torch.float64 or float32.

    Returns:
        (exact rounded once to float64, bound), float64 CPU tensors; 0 bound on empty rows.
    """
    if dtype not in (torch.float64, torch.float32):
        raise ValueError(f"dtype: expected torch.float64 or torch.float32, got {dtype!r}")
    for name, x in (("q", q), ("k", k)):
        assert (fmap(x.double()) >= 0).all(), f"{name}: the feature map must be non-negative"
    u = U[dtype]
    ex = linear_reference(q, k, v, feature_map=fmap_mp, causal=causal, attn_mask=attn_mask)
    m = int(fmap(q[..., :1, :].double()).shape[-1])
    up, down = 1 + 2 * _U64, 1 - 2 * _U64  # a value rounded once to float64, widened
    A = np.asarray(ex.abs_numerator, dtype=np.float64) * up
    B = np.asarray(ex.abs_denominator, dtype=np.float64) * up
    D = np.abs(np.asarray(ex.denominator, dtype=np.float64)) * down
    o = np.abs(ex.float64) * up
    div = d10.division_relative_bound(u)
    bound = np.zeros(o.shape)
    for idx in np.ndindex(o.shape):
        n = int(ex.count[idx[:-1]])
        if n == 0:
            continue  # an empty row must be exactly 0
        bound[idx] = d10.kernel_attention_output_bound(
            num_rel=d10.feature_form_relative_bound(feature_rel_error, m, n, u, True),
            den_rel=d10.feature_form_relative_bound(feature_rel_error, m, n, u, False),
            abs_numerator=float(A[idx]),
            abs_denominator=float(B[idx[:-1]]),
            denominator=float(D[idx[:-1]]),
            output_abs=float(o[idx]),
            div_rel=div,
        )
    return torch.from_numpy(ex.float64), torch.from_numpy(bound)


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


# ---------------------------------------------------------------- tests of verify.errors
#: D10: a bound never approached within this factor is flagged loose
LOOSE = 1e-6


def test_unit_roundoff_per_dtype_is_half_the_machine_epsilon():
    """The adapter's dtype names: u = 2^-p (derivations.rounding) = torch's eps / 2."""
    for dt in DTYPE_NAMES:
        assert U[dt] == torch.finfo(dt).eps / 2, dt


def test_bound_holds_and_is_not_vacuous_against_mpmath():
    """A float32 evaluation written here (independent of verify.attention): within the stated
    bound of the exact output, and the bound is approached within ``LOOSE``."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 4, 3, generator=g) for _ in range(3))
    exact = taylor_reference(q, k, v, order=2, causal=True)
    x = (q @ k.transpose(-1, -2)) / math.sqrt(3)
    w = (1 + x + x * x / 2).tril()
    out32 = (w @ v) / w.sum(-1, keepdim=True)
    eb = errors.attention_error_bound(
        "taylor:2", q, k, v, dtype="float32", exact=exact, causal=True, form="parallel"
    )
    obs = errors.compare(out32, eb, exact)
    assert obs.observed <= obs.bound, obs.detail
    assert obs.observed >= LOOSE * obs.bound, obs.detail
    assert (eb.bound < 1e-3).all()  # non-vacuous at fp32 on O(1) data
    # the float64 reference is the exact output up to its own (tiny) bound
    ref, bound = output_bound("taylor:2", q, k, v, dtype=torch.float32, causal=True)
    assert_within(out32, ref, bound, "float32 vs float64 reference")


REFERENCE_CASES = [
    ("exp", dict(denominator=d)) for d in ("sum", "none", "count", "l2", "rms", "layernorm")
] + [
    ("exp", dict(denominator="sum", eps=0.3)),
    ("exp", dict(denominator="layernorm", eps=0.3)),
    ("taylor:3", dict(denominator="sum")),
    ("taylor:2", dict(denominator="rms", eps=0.2)),
    ("elu1", dict(denominator="sum")),
    ("identity", dict(denominator="count", eps=0.5)),
    ("relu", dict(denominator="none")),
]


REFERENCE_IDS = [f"{k}-{'-'.join(map(str, c.values()))}" for k, c in REFERENCE_CASES]


@pytest.mark.parametrize("kernel,kw", REFERENCE_CASES, ids=REFERENCE_IDS)
def test_float64_reference_within_its_own_bound(kernel, kw):
    """float64_reference vs mpmath: within the float64 parallel-form bound, which is what
    ``exact=None`` adds for it; a row with no visible key is exactly 0."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (1.5 * torch.randn(1, 2, 4, 3, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.tensor([[False] * 4, [True, False, True, True], [True] * 4, [True] * 4])
    name = model_kernel(kernel)
    if kernel == "exp":
        exact = softmax_reference(q, k, v, attn_mask=mask, **kw)
    elif kernel.startswith("taylor:"):
        exact = taylor_reference(q, k, v, order=int(kernel[7:]), attn_mask=mask, **kw)
    else:
        exact = linear_reference(q, k, v, feature_map=kernel, attn_mask=mask, **kw)
    ref = errors.float64_reference(name, q, k, v, attn_mask=mask, **kw)
    assert (ref[:, :, 0] == 0).all()
    eb = errors.attention_error_bound(
        name, q, k, v, dtype="float64", exact=exact, attn_mask=mask, form="parallel", **kw
    )
    obs = errors.compare(ref, eb, exact)
    assert obs.observed <= obs.bound, obs.detail
    assert obs.observed >= LOOSE * obs.bound, obs.detail


@pytest.mark.parametrize("form", ["parallel", "recurrent", "chunked", "any"])
@pytest.mark.parametrize("kernel", ["taylor:3", "linear:taylor:3"])
def test_reference_bound_is_the_parallel_forms(kernel, form):
    """Recipe 6: against ``float64_reference`` (kappa_N on the scores), the ``exact=None``
    bound is at least the implementation's bound in its form plus the float64 parallel bound
    of the reference -- also when the implementation uses features. Positive q, k, v with
    scores near 12 make the parallel bound (its score error grows with |x|) the larger one per
    key, and |o| equal to its majorant A/D up to float64 rounding, so the inequality is tight."""
    g = torch.Generator().manual_seed(2)
    q = 3 + torch.rand(1, 1, 6, 2, generator=g, dtype=torch.float64)
    k = 2 + torch.rand(1, 1, 6, 2, generator=g, dtype=torch.float64)
    v = 1 + torch.rand(1, 1, 6, 2, generator=g, dtype=torch.float64)
    exact = taylor_reference(q, k, v, order=3, causal=True)
    kw = dict(dtype="float64", causal=True, form=form)
    none = errors.attention_error_bound(kernel, q, k, v, **kw).bound
    impl = errors.attention_error_bound(kernel, q, k, v, exact=exact, **kw).bound
    ref = errors.attention_error_bound(
        "taylor:3", q, k, v, dtype="float64", exact=exact, causal=True, form="parallel"
    ).bound
    assert (none >= impl + ref).all()


def test_softmax_eps_is_added_to_the_unshifted_denominator():
    """sum mode with eps: o = N / (D + eps) with D = sum_s e^{x_s}. Scores near 30 make eps
    negligible (e^-30), so an output computed from scores perturbed within the model's score
    error e_x (a computation the model admits) must stay within the bound with eps too; the
    shifted denominator sum_s e^{x_s - m} + eps would understate the bound."""
    q = torch.full((1, 1, 1, 1), 6.0, dtype=torch.float64)
    k = torch.full((1, 1, 2, 1), 5.0, dtype=torch.float64)
    v = torch.tensor([1.0, -1.0], dtype=torch.float64).reshape(1, 1, 2, 1)
    for eps in (0.0, 1.0):
        exact = softmax_reference(q, k, v, scale=1.0, eps=eps)
        eb = errors.attention_error_bound(
            "softmax", q, k, v, dtype="float32", exact=exact, scale=1.0, eps=eps
        )
        # the model's score error: gamma_{d + 5} c |q||k| per key (SCALE_ROUNDINGS = 5)
        e_x = gamma(1 + error_terms.SCALE_ROUNDINGS, U[torch.float32]) * 30.0
        x = np.array([30.0 + e_x, 30.0 - e_x])  # the first key up, the second down
        w = np.exp(x - x.max())
        adversarial = (w @ np.array([1.0, -1.0])) / (w.sum() + eps * math.exp(-x.max()))
        obs = errors.compare(np.array(adversarial).reshape(1, 1, 1, 1), eb, exact)
        assert obs.observed <= obs.bound, (eps, obs.detail)


@pytest.mark.parametrize("r", [80.0, 100.0, 103.0])
def test_bound_covers_subnormal_weights(r):
    """A float32 softmax row whose second weight e^{-r} is subnormal for r >~ 87: the output is
    off by a sizeable *relative* error (2 % at r = 100), which only the underflow term of the D10
    model (n eta (|v|max + 1), eta from ``derivations.rounding.underflow_abs_error``) covers; the
    bound holds and, where the weight is subnormal, is not met by the relative terms alone."""
    q = torch.tensor([[[[r]]]])
    k = torch.tensor([[[[0.0], [-1.0]]]])
    v = torch.tensor([[[[0.0], [1.0]]]])
    from verify.attention import softmax_attention

    out = softmax_attention(q, k, v)
    exact = softmax_reference(q.double(), k.double(), v.double())
    ref, bound = oracle_bound("exp", exact, q, k, v, dtype=torch.float32)
    err = (out.double() - ref).abs()
    assert bool((err <= bound).all()), (float(err.max()), float(bound.max()))
    if r >= 100:  # e^{-r} subnormal in float32: the error is far beyond any relative bound
        assert float(err.max()) > 1e3 * U[torch.float32] * float(ref.abs().max())


@pytest.mark.parametrize("denominator", ["none", "count"])
def test_bound_covers_shifted_weights_underflowing_before_the_scale_back(denominator, monkeypatch):
    """Unnormalized float64 softmax (``none``, ``count``) computes e^{x - m} and scales back by
    e^m (D6). With scores 500 and -400 the second shifted weight e^{-900} underflows to 0, so the
    output e^{-400} v_1 (about 5e-174) comes back as 0: a 100 % relative error that only the
    underflow term scaled to the output's units (eta e^m, ``error_terms.terms``) covers.
    Without the e^m factor the bound is violated."""
    from verify.attention import softmax_attention

    q = torch.tensor([[[[1.0]]]], dtype=torch.float64)
    k = torch.tensor([[[[500.0], [-400.0]]]], dtype=torch.float64)
    v = torch.tensor([[[[0.0], [1.0]]]], dtype=torch.float64)
    out = softmax_attention(q, k, v, scale=1.0, denominator=denominator)
    exact = softmax_reference(q, k, v, scale=1.0, denominator=denominator)
    ref, bound = oracle_bound(
        "exp", exact, q, k, v, dtype=torch.float64, scale=1.0, denominator=denominator
    )
    err = (out.double() - ref).abs()
    assert float(err.max()) > 0.5 * float(ref.abs().max()) > 0  # the weight was lost
    assert bool((err <= bound).all()), (float(err.max()), float(bound.max()))

    terms = error_terms.terms

    def unscaled(*args, **kwargs):
        *rest, uf_scale = terms(*args, **kwargs)
        return (*rest, np.ones_like(uf_scale))

    monkeypatch.setattr(error_terms, "terms", unscaled)
    _, naive = oracle_bound(
        "exp", exact, q, k, v, dtype=torch.float64, scale=1.0, denominator=denominator
    )
    assert not bool((err <= naive).all())


@pytest.mark.parametrize("kernel", ["linear:elu1", "softmax", "taylor:2", "linear:identity"])
def test_bounds_never_overflow_for_finite_inputs(kernel):
    """A finite input far beyond any useful range (|q| = 1.16e77, where an elu+1 feature's
    error bound e^{|q| u} - 1 overflows math.expm1) gives an infinite, i.e. vacuous, bound or a
    finite one, never an OverflowError; a vacuous bound makes the comparison not applicable
    (``errors.compare`` raises NotApplicable), never a pass."""
    from verify.spec.results import NotApplicable

    q = torch.tensor([[[[1.16e77, 1.0]]]], dtype=torch.float64)
    k = torch.ones(1, 1, 2, 2, dtype=torch.float64)
    v = torch.ones(1, 1, 2, 1, dtype=torch.float64)
    with np.errstate(all="ignore"):
        eb = errors.attention_error_bound(kernel, q, k, v, dtype="float64")
    assert not np.isnan(eb.bound).any()
    if not np.isfinite(eb.bound).any():
        with pytest.raises(NotApplicable, match="finite bound"):
            errors.compare(torch.ones(1, 1, 1, 1, dtype=torch.float64), eb, np.ones((1, 1, 1, 1)))
