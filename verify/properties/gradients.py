"""Gradient properties (D2, D10; fault classes 5, 8, 12).

- ``gradcheck``: the backward pass of ``forward`` and of every form agrees with central finite
  differences of the same function, float64, tiny shapes (T, S <= 4, d, d_v <= 2), with the
  criterion of ``torch.autograd.gradcheck`` (which is also run).
- ``gradients-vs-reference``: dq, dk, dv of the variant (in the run's dtype) against the exact
  gradients on the same inputs. Softmax (sum denominator, no eps): elementwise within the
  *derived* D10 backward bounds (``verify.exact.gradient_bounds``, in the variant's precision
  model); other kernels: against autograd through a float64 plain-torch reference
  (``verify.exact.reference.reference_attention``) within a *calibrated* bound (rule below).
- ``single-key-gradients``: with one key the normalized output is v whatever q and k are, so
  dq = 0 and dk = 0 within the gradient error model (derived for softmax, else calibrated).

The exact zeros of masked keys and empty rows are checked by ``gradient_masks``; both groups
take the variant's and the reference's gradients and their examples from ``support.grads``.

Calibrated bound (for the kernels without a derived backward bound; it follows PyTorch's
SDPA tests, ``test/test_transformers.py``: ``get_tolerances()`` and ``check_out_and_grad()``
take the tolerance as a per-tensor fudge factor times the error of the math reference evaluated
in the low precision against the float64 reference). For a gradient tensor X in {dq, dk, dv}::

    bound_X = K * (E_X + gamma_n(u_a) * M_X) + u_c * max|X|

E_X = max |X_ref(a) - X_ref(float64)|, the reference's own error: the same plain-torch
reference evaluated in the accumulation dtype a (float32 for bf16/fp16/float32) on the same
rounded inputs; for float64 runs, the float32 evaluation (on the inputs rounded to float32, so
the measurement includes the gradient's sensitivity to its inputs) scaled by u_64/u_32
(first-order rounding errors are proportional to u, D10: gamma_n ~ n u). M_X is the size of
the terms that make up X (:func:`term_scale`, majorants of the kernel's weight derivatives
times the upstream gradient over the denominator) and gamma_n(u_a) = n u_a / (1 - n u_a) with
n = S + d + d_v + m (:func:`sum_length`: the sums over keys, the score and value dot products
and, for feature forms, the m features): the rounding of sums of n such terms (Higham eq. 3.5,
4.4), a floor so that a measurement that is exactly zero by luck, or an exact zero reached by
cancellation (one key, layernorm at d_v = 2), does not give a zero bound, and one that grows
with the feature count of a feature-form backward that the score-form reference does not
have. u_c max|X| is the one rounding of the returned gradient to the input dtype c (the
two-level model of D10: bf16/fp16 inputs, float32 accumulation, one rounding at the end).
K = ``CALIBRATION_FACTOR``.

For one key the exact dq and dk are 0 (normalized modes): the bound is
K (E_X + gamma_n(u_a) M_X) (1 + u_c) with E_X the reference's own |X| in the accumulation dtype.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from derivations.rounding import gamma, unit_roundoff
from verify.exact.errors import ACCUMULATION
from verify.exact.reference import (
    kernel_weights,
    normalize,
    resolved_scale,
    visible_count,
    weight_majorants,
)
from verify.properties.support.base import declare
from verify.properties.support.calls import call
from verify.properties.support.claims import dtype_reason, reference_reason
from verify.properties.support.common import (
    MIN_MAGNITUDE,
    Example,
    lengths,
    model_applies,
    precision_of,
    radius_strategy,
    within_domain,
)
from verify.properties.support.defined import any_undefined
from verify.properties.support.grads import (
    backward_grads,
    grad_call,
    grad_inputs,
    long_grad_examples,
    masked_strategy,
    max_abs,
    reference_gradients,
    reference_kwargs,
    require_defined,
    upstream_of,
    variant_gradients,
    with_grad_output,
)
from verify.properties.support.inputs import by_causal
from verify.properties.support.paths import (
    call_kwargs,
    modes,
    path_callable,
    path_names,
    require_mode,
)
from verify.spec.results import NoStatement, NotApplicable, Observation, VariantError
from verify.spec.vocabulary import BASES

#: K of the calibrated rule (module docstring); PyTorch's SDPA gradient tests use per-tensor
#: fudge factors of the same kind (single digits to a few hundred, test/test_transformers.py)
CALIBRATION_FACTOR = 16.0
#: torch.autograd.gradcheck's defaults (PyTorch documentation, torch.autograd.gradcheck):
#: central differences with step eps; |analytic - numeric| <= atol + rtol |numeric|
GRADCHECK_EPS = 1e-6
GRADCHECK_ATOL = 1e-5
GRADCHECK_RTOL = 1e-3
#: a finite-difference estimate is trusted when its estimated truncation error (Richardson,
#: steps eps and 2 eps) and the gap between one-sided differences (a kink) stay below this
#: fraction of gradcheck's tolerance; otherwise the example is outside gradcheck's reach
FD_TRUST = 0.1
#: scale-invariant modes: with one key the output does not depend on q or k
SINGLE_KEY_MODES = ("sum", "l2", "rms", "layernorm")


def sum_length(variant, x) -> int:
    """n of the calibrated floor: S + d + d_v + m, m the feature count of the claimed kernel's
    feature form (Taylor-N: the larger of the symmetric and tensor-power counts; element-wise
    maps: d; FAVOR+: the projection's rows; softmax: 0)."""
    from derivations.feature_maps import feature_count

    S, d, d_v = x.k.shape[-2], x.q.shape[-1], x.v.shape[-1]
    kern = variant.parsed_kernel
    if kern.order is not None:
        m = max(feature_count(kern.order, d, b) for b in BASES)
    elif kern.map == "favor":
        m = int(reference_kwargs(variant, x, "sum")["projection"].shape[0])
    elif kern.family == "linear":
        m = d
    else:
        m = 0
    return S + d + d_v + m


def term_scale(variant, x, mode: str, g) -> tuple[float, float, float]:
    """Size of the terms that make up dq, dk, dv (the floor of the calibrated rule).

    With N = sum_s w_s v_s, D = sum_s w_s and the mode's divisor s_t (|D_t + eps| for sum,
    ||N_t|| for l2, ||N_t|| / sqrt(d_v) for rms, the standard deviation of N_t for layernorm,
    the count for count, 1 for none; e^-m for the exp shift), every gradient is a signed sum
    of terms bounded by a_tj = |g_tj| / s_t on the numerator path and b_t = sum_j |g_tj||o_tj|
    max(1, |o_t|) / s_t on the divisor path: M_v = max_s,j sum_t W_ts a_tj,
    M_q = max_t,i sum_s Wq_tsi P_ts, M_k = max_s,i sum_t Wk_tsi P_ts with
    P_ts = sum_j a_tj |v_sj| + b_t (majorants W, Wq, Wk of ``weight_majorants``). A rounding
    in forming the gradient is a few units of roundoff of these, however much they cancel
    (e.g. dq = 0 with one key). Returns (M_q, M_k, M_v); inf where s_t = 0.
    """
    import torch

    kw = reference_kwargs(variant, x, mode)
    q, k, v = (t.detach().cpu().to(torch.float64) for t in (x.q, x.k, x.v))
    mask = None if kw["attn_mask"] is None else kw["attn_mask"].cpu()
    w, shift, vis, q, k, v = kernel_weights(
        q, k, v, kernel=kw["kernel"], causal=x.causal, attn_mask=mask, scale=kw["scale"],
        projection=kw.get("projection"),
    )  # fmt: skip
    c = resolved_scale(kw["kernel"], q.shape[-1], kw["scale"])
    W, Wq, Wk = weight_majorants(kw["kernel"], q, k, c, shift, vis, kw.get("projection"))
    N, D = w @ v, w.sum(-1)
    n = visible_count(w, vis)
    o = normalize(N, D, n, shift, mode, variant.eps, kw.get("eps_mode", "add")).abs()
    up = torch.ones_like(D) if shift is None else torch.exp(shift)
    if mode == "sum" and kw.get("eps_mode") == "floor":  # max(D, eps): verify.exact.eps_floor
        s = torch.maximum(D, variant.eps / up).abs()
    elif mode == "sum":
        s = (D + variant.eps / up).abs()
    elif mode == "none":
        s = 1.0 / up
    elif mode == "count":
        s = torch.where(n > 0, n, 1.0) / up
    else:
        Y = N - N.mean(-1, keepdim=True) if mode == "layernorm" else N
        s = Y.norm(dim=-1) / (1.0 if mode == "l2" else math.sqrt(N.shape[-1]))
    ga = g.detach().cpu().to(torch.float64).abs()
    live = n > 0  # rows with no visible key are constant zeros: no terms
    with torch.no_grad():
        a = torch.where(live[..., None], ga / torch.where(live, s, 1.0)[..., None], 0.0)
        b = (a * o).sum(-1) * torch.clamp(o.amax(-1), min=1.0)
        if mode in ("none", "count"):
            b = torch.zeros_like(b)
        P = a @ v.abs().transpose(-1, -2) + b[..., None]  # (B, H, T, S)
        P = torch.where(W > 0, P, 0.0)  # masked pairs contribute nothing (no 0 * inf)
        M_v = W.transpose(-1, -2) @ a
        M_q = (Wq * P[..., None]).sum(-2)
        M_k = (Wk * P[..., None]).sum(-3)
    return tuple(max_abs(t) for t in (M_q, M_k, M_v))


def _argmax(t) -> tuple[int, ...]:
    if not t.numel():
        return ()
    return tuple(int(i) for i in np.unravel_index(int(t.abs().argmax()), tuple(t.shape)))


def _reference_error(variant, x, mode: str, g, ctx, exact):
    """E per tensor (module docstring): the reference in the accumulation dtype against
    ``exact`` (float64 reference gradients, or zeros), scaled to float64 for float64 runs."""
    import torch

    acc = ACCUMULATION[ctx.model_dtype]
    low = "float32" if acc == "float64" else acc
    lo = reference_gradients(variant, x, mode, g, getattr(torch, low))
    scale = unit_roundoff(acc) / unit_roundoff(low)
    errs = []
    for a, b in zip(lo[1:], exact):
        e = max_abs(a - b)
        if not math.isfinite(e):  # an overflow in float arithmetic: decided by floats
            raise NoStatement(
                f"the {low} reference gradient is not finite: no calibration for this example"
            )
        errs.append(scale * e)
    return errs


# ----------------------------------------------------------------------------- gradcheck


def _gradcheck_applies(variant, ctx) -> str | None:
    if not variant.differentiable:
        return "the variant declares it is not differentiable"
    if ctx.dtype != "float64":
        return "gradcheck runs in float64 only (finite differences need it)"
    if "float64" not in variant.dtypes:
        return "the variant does not claim float64 (gradcheck needs it)"
    if ctx.model_dtype != "float64":
        return (
            f"the variant computes in {ctx.model_dtype} (compute_dtype): finite differences need "
            "float64 arithmetic (gradients-vs-reference checks the gradients instead)"
        )
    return None


def _tiny_inputs(variant, ctx, *, causal: bool):
    from hypothesis import strategies as st

    from verify.strategies import Shape, attention_inputs, sizes

    @st.composite
    def shape(d):
        T = d(lengths(variant, 1, 4))
        S = T if causal else d(lengths(variant, 1, 4))
        shape = Shape(B=1, H=1, T=T, S=S, d=d(sizes(1, 2)), d_v=d(sizes(1, 2)))
        return within_domain(variant, shape)

    return attention_inputs(
        shape(),
        dtype=ctx.torch_dtype,
        device=ctx.device,
        causal=causal,
        radius=radius_strategy(variant, ctx),
        min_magnitude=MIN_MAGNITUDE,
    )


def _gradcheck_examples(variant, ctx):
    from hypothesis import strategies as st

    forms = path_names(variant)
    tiny = by_causal(variant, lambda c: _tiny_inputs(variant, ctx, causal=c))
    return st.builds(
        lambda x, form, mode: Example(x, {"form": form, "denominator": mode}),
        tiny,
        st.sampled_from(forms),
        st.sampled_from(modes(variant)),
    )


def _finite_differences(fn, inputs, h: float) -> list[dict[float, Any]]:
    """f(x + step e_j) flattened, for steps +-h and +-2h, for every input element j."""
    import torch

    values = []
    for i, t in enumerate(inputs):
        for idx in np.ndindex(*t.shape):
            vals = {}
            for step in (h, -h, 2 * h, -2 * h):
                shifted = [s.detach().clone() for s in inputs]
                shifted[i][idx] += step
                with torch.no_grad():
                    vals[step] = fn(*shifted).detach().reshape(-1)
            values.append(vals)
    return values


def _analytic_jacobian(out, inputs, form: str):
    """(n_out, n_in) Jacobian, one backward per output element (gradcheck's slow mode)."""
    import torch

    rows = []
    n_out = out.numel()
    for i in range(n_out):
        e = torch.zeros(n_out, dtype=out.dtype, device=out.device)
        e[i] = 1.0
        try:
            gr = backward_grads(out, inputs, e.reshape(out.shape), retain_graph=True)
        except Exception as exc:
            raise VariantError(
                f"backward ({form}) raised {type(exc).__name__}: {exc} "
                "(is the forward differentiable?)"
            ) from exc
        parts = [(torch.zeros_like(t) if g is None else g).reshape(-1) for t, g in zip(inputs, gr)]
        rows.append(torch.cat(parts))
    jac = torch.stack(rows).detach()
    if not torch.isfinite(jac).all():
        raise VariantError(f"backward ({form}) returned NaN/inf")
    return jac


#: q/k rows shorter than this are too close to normalization's kink at 0 for central
#: differences (gradcheck's step is 1e-6 per coordinate; 1e-3 leaves three orders of margin)
GRADCHECK_NORM_FLOOR = 1e-3


def _below_norm_floor(q, k) -> bool:
    """Some row of q or k has |x| < :data:`GRADCHECK_NORM_FLOOR`, decided exactly (the squared
    norm in rational arithmetic: a float norm near the floor may round either way)."""
    from fractions import Fraction

    floor2 = Fraction(GRADCHECK_NORM_FLOOR) ** 2
    for t in (q, k):
        rows = t.detach().cpu().double().reshape(-1, t.shape[-1]).tolist()
        if any(sum(Fraction(a) ** 2 for a in row) < floor2 for row in rows):
            return True
    return False


def _gradcheck_check(variant, ex: Example, ctx) -> Observation:
    import torch

    x = ex.inputs
    form, mode = ex.choices["form"], ex.choices["denominator"]
    require_mode(mode, x.v.shape[-1])
    fv = path_callable(variant, form)
    kw = call_kwargs(variant, mode, x.attn_mask)
    if _reference_applies(variant, ctx) is None:
        require_defined(variant, x, mode)
    if getattr(variant, "qk_norm", False) and _below_norm_floor(x.q, x.k):
        raise NotApplicable(
            f"QK-norm: x / max(|x|, eps) has a kink at a zero vector (a row of norm < "
            f"{GRADCHECK_NORM_FLOOR}): not differentiable there"
        )
    # near a vanishing denominator or norm a finite-difference step may leave the domain (an
    # unknown kernel may be signed: its non-finite outputs make the example inapplicable)
    singular = variant.positive_kernel is not True or mode in ("l2", "rms", "layernorm")
    if singular and any_undefined(variant, x, mode):  # exactly, from the inputs
        raise NotApplicable(f"a kernel sum or norm vanishes exactly ({mode}): not differentiable")

    def fn(q, k, v):
        out = call(fv, q, k, v, causal=x.causal, allow_nonfinite=singular, **kw)
        if singular and not bool(torch.isfinite(out).all()):  # the variant's floats decide
            raise NoStatement("a denominator or norm vanishes near these inputs")
        return out

    inputs = [t.detach().clone().requires_grad_(True) for t in (x.q, x.k, x.v)]
    out = grad_call(fn, inputs, (x.q, x.k, x.v), form)
    analytic = _analytic_jacobian(out, inputs, form)
    h = GRADCHECK_EPS
    base = out.detach().reshape(-1)
    # rounding of f(x +- h) itself, D10's gamma_n with n = S + d + 4 (a length-d dot product, the
    # exp, a length-S sum, a division): gamma_n |f| / h bounds its effect on a central difference
    eps_f = gamma(x.k.shape[-2] + x.q.shape[-1] + 4, unit_roundoff("float64"))
    cols, trust = [], []
    for vals in _finite_differences(fn, inputs, h):
        c1 = (vals[h] - vals[-h]) / (2 * h)
        c2 = (vals[2 * h] - vals[-2 * h]) / (4 * h)
        gap = ((vals[h] - base) - (base - vals[-h])).abs() / h  # one-sided differences
        mag = torch.stack([vals[s].abs() for s in vals]).amax(0)
        cols.append(c1)
        # Richardson estimate; a kink; rounding noise of the evaluations
        trust.append(torch.maximum(torch.maximum((c2 - c1).abs() / 3, gap), eps_f * mag / h))
    numeric = torch.stack(cols, 1)
    tol = GRADCHECK_ATOL + GRADCHECK_RTOL * numeric.abs()
    reliable = torch.stack(trust, 1) <= FD_TRUST * tol
    if not bool(reliable.any()):  # read off the variant's floats: no draw rejected on it
        raise NoStatement("finite differences unreliable at every entry (kinks or poles)")
    diff = (analytic - numeric).abs()
    ratio = torch.where(reliable, diff / tol, -1.0)  # the worst *reliable* entry is reported
    i, j = np.unravel_index(int(ratio.argmax()), tuple(ratio.shape))
    skipped = int((~reliable).sum())
    rule = (
        f"torch.autograd.gradcheck criterion: central differences, eps={GRADCHECK_EPS}, "
        f"|analytic - numeric| <= {GRADCHECK_ATOL} + {GRADCHECK_RTOL} |numeric| "
        "(PyTorch defaults, cited)"
    )
    if skipped:
        rule += (
            f"; {skipped} of {ratio.numel()} entries skipped where finite differences are "
            f"unreliable (Richardson, one-sided gap or rounding noise gamma_n |f| / eps > "
            f"{FD_TRUST} x tolerance: a kink, a pole or a large output)"
        )
    obs = Observation(
        float(diff[i, j]),
        float(tol[i, j]),
        kind="calibrated",
        where=f"d(out[{i}])/d(input[{j}])",
        detail=f"{form}/{mode}: analytic {float(analytic[i, j]):.6g} vs numeric "
        f"{float(numeric[i, j]):.6g}; {rule}",
    )
    if obs.ratio <= 1.0 and not skipped:
        from torch.autograd.gradcheck import GradcheckError

        try:
            torch.autograd.gradcheck(
                fn,
                tuple(inputs),
                eps=GRADCHECK_EPS,
                atol=GRADCHECK_ATOL,
                rtol=GRADCHECK_RTOL,
                check_undefined_grad=False,
                fast_mode=True,
            )
        except NotApplicable:
            raise
        except GradcheckError as exc:
            raise VariantError(f"torch.autograd.gradcheck ({form}/{mode}) failed: {exc}") from exc
        except Exception as exc:  # its torch.autograd.grad entry point, not the gradients
            obs.detail += (
                f"; torch.autograd.gradcheck itself could not run ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:120]}): the criterion above, on gradients from "
                "backward(), decides"
            )
    return obs


GRADCHECK = declare("gradcheck", _gradcheck_applies, _gradcheck_examples, _gradcheck_check)


# ----------------------------------------------------------------------------- vs reference


def uncovered_claims(variant) -> list[str]:
    """The claims the derived backward bounds do not cover and the plain reference does not
    know (a decay, QK-norm, a score bias or key padding taken by the forward): with one of
    them no gradient statement is made, decided once rather than on every draw."""
    on = {
        "decay": variant.decay is not None,
        "qk_norm": variant.qk_norm,
        "score_bias": variant.score_bias,
        "key_padding": variant.key_padding,
    }
    return [name for name, claimed in on.items() if claimed]


def _reference_applies(variant, ctx) -> str | None:
    if not variant.differentiable:
        return "the variant declares it is not differentiable"
    from verify.spec.structure import has_structure

    if has_structure(variant) and (variant.kernel_family != "softmax" or variant.eps):
        return (  # what derived_bounds says on every draw
            "structural claims: the derived backward bounds cover softmax with the sum "
            "denominator and no eps; gradients not checked here"
        )
    if variant.kernel_family == "softmax" and (extra := uncovered_claims(variant)):
        return f"no derived backward bound for the claims {extra}: gradients not checked here"
    return reference_reason(
        variant,
        unknown="the variant claims no kernel (kernel=unknown): no gradient reference",
        favor="no exact gradient reference",
    ) or dtype_reason(variant, ctx)


def _grouped_inputs(variant, ctx):
    """Inputs with 2 G query heads for a kv_heads = G claim: the call then takes k, v with G
    heads (:func:`_kv_heads_of`), so each kv head's gradient sums two query heads'."""
    from verify.properties.support.inputs import shaped_inputs

    G = variant.kv_heads
    return by_causal(variant, lambda c: shaped_inputs(variant, ctx, causal=c, H=(2 * G, 2 * G)))


def _kv_heads_of(variant, x):
    """``x`` with k, v on G kv heads when the variant claims ``kv_heads`` = G and x has a
    multiple of G query heads (query head h reads kv head h // (H / G))."""
    import dataclasses

    G = variant.kv_heads
    H = x.q.shape[1]
    if G is None or H == G or H % G:
        return x
    r = H // G
    return dataclasses.replace(x, k=x.k[:, ::r].contiguous(), v=x.v[:, ::r].contiguous())


def _reference_examples(variant, ctx):
    from hypothesis import strategies as st

    forms = path_names(variant)
    base = grad_inputs(variant, ctx)
    if variant.kv_heads is not None and variant.kernel_family == "softmax":
        base = _grouped_inputs(variant, ctx)
    plain = with_grad_output(
        base,
        form=st.sampled_from(forms),
        denominator=st.sampled_from(modes(variant)),
    )
    if not variant.supports_mask:
        return plain
    masked = with_grad_output(
        masked_strategy(variant, ctx),
        form=st.just("forward"),
        denominator=st.sampled_from(modes(variant)),
    )
    return st.one_of(plain, masked)


def _rule(ctx) -> str:
    acc = ACCUMULATION[ctx.model_dtype]
    how = "scaled from float32 by u64/u32" if acc == "float64" else f"measured in {acc}"
    return (
        f"calibrated: K (E + gamma_n(u_{acc}) M) + u_{ctx.model_dtype} |X|max, "
        f"K = {CALIBRATION_FACTOR:g}, n = S + d + d_v + features, "
        f"E = the plain-torch reference's own error ({how}); SDPA-test approach "
        "(PyTorch test/test_transformers.py, get_tolerances/check_out_and_grad)"
    )


def _structure(variant, x) -> dict:
    """The structural keywords of the derived backward bounds for the variant's claims on
    ``x`` (window, softcap, ALiBi, grouped kv heads), or NotApplicable for the claims they do
    not cover (QK-norm, decays, sigmoid scores, a score bias or key padding taken by the
    forward): those gradients are not checked, and the reason says so."""
    from verify.exact.gradient_bounds import STRUCTURE
    from verify.properties.support.common import structure_kwargs

    if extra := uncovered_claims(variant):  # also decided before drawing (_reference_applies)
        raise NotApplicable(
            f"no derived backward bound for the claims {extra}: gradients not checked here"
        )
    return {k: v for k, v in structure_kwargs(variant, x).items() if k in STRUCTURE}


def derived_bounds(variant, x, mode: str, g, ctx):
    """(reference (dq, dk, dv), bounds) from the D10 backward bounds
    (``verify.exact.gradient_bounds``, with D16's transforms and D17's arithmetic) where they
    apply -- softmax, sum denominator, no eps, causal only with T == S -- else None (the
    calibrated rule decides).

    Raises:
        NotApplicable: structural claims the derived bounds do not cover (no calibrated rule
            either: the plain reference does not know them).
    """
    from verify.exact import gradient_bounds as gb
    from verify.spec.structure import has_structure

    structured = has_structure(variant) or x.k.shape[1] != x.q.shape[1]
    if variant.kernel_family != "softmax" or mode != "sum" or variant.eps:
        if structured:
            raise NotApplicable(
                "structural claims: the derived backward bounds cover softmax with the sum "
                "denominator and no eps; gradients not checked here"
            )
        return None
    if x.causal and x.q.shape[-2] != x.k.shape[-2]:
        return None
    skw = _structure(variant, x) if structured else {}
    mask = None if x.attn_mask is None else x.attn_mask.cpu()
    kw = dict(causal=x.causal, attn_mask=mask, scale=variant.score_scale(x.q.shape[-1]))
    with model_applies():
        bounds = gb.gradient_bounds(
            x.q, x.k, x.v, g, dtype=ctx.model_dtype, exp_library=variant.exp_library,
            device=ctx.device, precision=precision_of(variant, ctx, denominator=mode),
            arithmetic=variant.arithmetic, **kw, **skw,
        )  # fmt: skip
    ref = gb.reference_gradients(x.q, x.k, x.v, g, **kw, **skw)[1:]
    return ref, [bounds[n] for n in gb.NAMES]


def _derived_observations(variant, form, mode, grads, ref, bounds, what="") -> list[Observation]:
    import torch

    obs = []
    for name, got, want, bound in zip(("dq", "dk", "dv"), grads, ref, bounds):
        diff = np.abs(got.detach().cpu().to(torch.float64).numpy() - want)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(bound > 0, diff / bound, np.where(diff == 0, 0.0, np.inf))
        ratio = np.where(np.isnan(diff), np.inf, ratio)
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), ratio.shape))
        obs.append(
            Observation(
                float(diff[idx]),
                float(bound[idx]),
                kind="derived",
                where=f"{name}{idx}",
                detail=f"{form}/{mode}: {what}{name} error {float(diff[idx]):.3e} vs its bound "
                f"{float(bound[idx]):.3e} (elementwise, worst ratio); derived: D10 backward "
                "bounds (verify.exact.gradient_bounds, FlashAttention-2 Algorithm 2 order)",
            )
        )
    if where := _which_step(obs):
        for o in obs:
            if o.ratio > 1:
                o.detail += f"; {where}"
    return obs


def _which_step(obs: list[Observation]) -> str:
    """Where a wrong softmax backward goes wrong, read from which of dq, dk, dv exceed their
    bounds: dV = P^T dO does not depend on Delta = rowsum(dO o O) or on how the log-sum-exp
    enters dS, dQ and dK do (FlashAttention-2, Algorithm 2)."""
    if len(obs) != 3:  # the single-key check states dq and dk only
        return ""
    dq, dk, dv = (o.ratio > 1 for o in obs)
    if (dq or dk) and not dv:
        return (
            "dV is within its bound and dQ/dK are not: the error is in dS = P (dP - Delta) -- "
            "Delta (rowsum(dO o O) of the normalized output), the scale, or the cap's derivative"
        )
    if dv and not (dq or dk):
        return "dV alone exceeds its bound: the dV product (P^T dO, its key blocks) or P as stored"
    if dv and dq and dk:
        return "dQ, dK and dV all exceed their bounds: the recomputed P (mask, log-sum-exp)"
    return ""


def _reference_check(variant, ex: Example, ctx) -> list[Observation]:
    import torch

    x = _kv_heads_of(variant, ex.inputs)
    form, mode, g = ex.choices["form"], ex.choices["denominator"], upstream_of(ex)
    require_mode(mode, x.v.shape[-1])
    derived = derived_bounds(variant, x, mode, g, ctx)
    if derived is not None:
        _, *grads = variant_gradients(variant, form, x, mode, g)
        return _derived_observations(variant, form, mode, grads, *derived)
    # the bound is stated from the reference alone, before the variant runs
    if any_undefined(variant, x, mode):  # exactly, from the inputs
        raise NotApplicable(f"a kernel sum or norm vanishes exactly ({mode}): no gradient")
    ref = reference_gradients(variant, x, mode, g, torch.float64)
    if not all(bool(torch.isfinite(t).all()) for t in ref):  # decided by floats
        raise NoStatement("the float64 reference is not finite here (a vanishing denominator)")
    top = torch.finfo(getattr(torch, ctx.dtype)).max
    if over := [n for n, t in zip(("dq", "dk", "dv"), ref[1:]) if float(t.abs().max()) > top]:
        raise NoStatement(  # the D10 model assumes no overflow; the exact value cannot fit
            f"the exact {', '.join(over)} exceed {ctx.dtype}'s largest finite number "
            f"({top:.5g}): an inf there is the dtype's range, not the variant's"
        )
    errs = _reference_error(variant, x, mode, g, ctx, ref[1:])
    scales = term_scale(variant, x, mode, g)
    u_a, u_c = unit_roundoff(ACCUMULATION[ctx.model_dtype]), unit_roundoff(ctx.model_dtype)
    n_sum = sum_length(variant, x)
    if n_sum * u_a >= 1:  # gamma_n has no value: a sum this long is outside the D10 model
        raise NotApplicable(
            f"sums of {n_sum} terms (feature count included) in {ACCUMULATION[ctx.model_dtype]}: "
            "n u >= 1, no gamma_n (outside the D10 standard model)"
        )
    floor = gamma(n_sum, u_a)
    bounds = [
        CALIBRATION_FACTOR * (e + floor * M) + u_c * max_abs(t)
        for e, M, t in zip(errs, scales, ref[1:])
    ]
    _, *grads = variant_gradients(variant, form, x, mode, g)
    obs = []
    for name, got, want, bound, e, M in zip(
        ("dq", "dk", "dv"), grads, ref[1:], bounds, errs, scales
    ):
        diff = (got.detach().cpu().to(torch.float64) - want).abs()
        idx = _argmax(diff)
        obs.append(
            Observation(
                max_abs(diff),
                bound,
                kind="calibrated",
                where=f"{name}{idx}",
                detail=f"{form}/{mode}: {name} max error {max_abs(diff):.3e} vs bound "
                f"{bound:.3e} (E = {e:.3e}, terms M = {M:.3e}); {_rule(ctx)}",
            )
        )
    return obs


GRADIENTS_VS_REFERENCE = declare(
    "gradients-vs-reference", _reference_applies, _reference_examples, _reference_check,
    long_examples=long_grad_examples,
)  # fmt: skip


# ----------------------------------------------------------------------------- single key


def _single_key_applies(variant, ctx) -> str | None:
    if reason := _reference_applies(variant, ctx):
        return reason
    if not set(modes(variant)) & set(SINGLE_KEY_MODES):
        return "unnormalized outputs depend on q and k even with one key (needs sum or a norm)"
    if variant.eps:
        return f"declares eps = {variant.eps}: with one key w v / (w + eps) depends on q"
    return None


def _one_key(inputs):
    """Keep only the first key (and, when causal, the first query: T == S == 1)."""
    from dataclasses import replace

    def cut(x):
        q = x.q[..., :1, :] if x.causal else x.q
        shape = replace(x.shape, S=1, T=q.shape[-2])
        k, v = x.k[..., :1, :], x.v[..., :1, :]
        if x.case == "positive" and x.radius is None:  # element-wise maps: strictly positive
            q, k = (t.abs() + (t == 0).to(t.dtype) for t in (q, k))
        return replace(x, q=q, k=k, v=v, shape=shape, case=f"single_key/{x.case}")

    return inputs.map(cut)


def _single_key_examples(variant, ctx):
    from hypothesis import strategies as st

    forms = path_names(variant)
    usable = tuple(m for m in modes(variant) if m in SINGLE_KEY_MODES)
    # positive q, k as well: a relu weight with one key vanishes for half the sign patterns
    return with_grad_output(
        _one_key(grad_inputs(variant, ctx, cases=("random", "positive"))),
        form=st.sampled_from(forms),
        denominator=st.sampled_from(usable),
    )


def _single_key_check(variant, ex: Example, ctx) -> list[Observation]:
    import torch

    x = ex.inputs
    form, mode, g = ex.choices["form"], ex.choices["denominator"], upstream_of(ex)
    require_mode(mode, x.v.shape[-1])
    if x.k.shape[-2] != 1:
        raise NotApplicable("needs exactly one key")
    derived = derived_bounds(variant, x, mode, g, ctx)
    if derived is not None:  # the exact dq and dk are 0: the bound is on |dq_hat|, |dk_hat|
        _, dq, dk, _ = variant_gradients(variant, form, x, mode, g)
        zero = [np.zeros_like(r) for r in derived[0][:2]]
        return _derived_observations(
            variant, form, mode, (dq, dk), zero, derived[1][:2], "one key, exact 0; "
        )
    if any_undefined(variant, x, mode):  # exactly, from the inputs
        raise NotApplicable("the kernel weight vanishes exactly: the one-key output is undefined")
    ref = reference_gradients(variant, x, mode, g, torch.float64)
    zeros = [torch.zeros_like(ref[1]), torch.zeros_like(ref[2])]
    if not bool(torch.isfinite(ref[0]).all()):  # decided by floats: no draw rejected on it
        raise NoStatement("the float64 reference is not finite here")
    errs = _reference_error(variant, x, mode, g, ctx, (*zeros, ref[3]))[:2]
    M_q, M_k, _ = term_scale(variant, x, mode, g)
    if not (math.isfinite(M_q) and math.isfinite(M_k)):
        raise NoStatement("the kernel weight vanishes: the single-key output is not defined")
    u_a, u_c = unit_roundoff(ACCUMULATION[ctx.model_dtype]), unit_roundoff(ctx.model_dtype)
    n_sum = sum_length(variant, x)
    if n_sum * u_a >= 1:  # gamma_n has no value: a sum this long is outside the D10 model
        raise NotApplicable(
            f"sums of {n_sum} terms (feature count included) in {ACCUMULATION[ctx.model_dtype]}: "
            "n u >= 1, no gamma_n (outside the D10 standard model)"
        )
    floor = gamma(n_sum, u_a)
    bounds = [CALIBRATION_FACTOR * (e + floor * M) * (1 + u_c) for e, M in zip(errs, (M_q, M_k))]
    _, dq, dk, _ = variant_gradients(variant, form, x, mode, g)
    obs = []
    for name, got, bound, e, M in zip(("dq", "dk"), (dq, dk), bounds, errs, (M_q, M_k)):
        got = got.detach().cpu().to(torch.float64)
        obs.append(
            Observation(
                max_abs(got),
                bound,
                kind="calibrated",
                where=f"{name}{_argmax(got)}",
                detail=f"{form}/{mode}: one key, exact {name} = 0; max |{name}| "
                f"{max_abs(got):.3e} vs bound {bound:.3e} (E = {e:.3e}, cancelling terms "
                f"{M:.3e}); calibrated: K (E + gamma_n(u_a) M) (1 + u_c), K = "
                f"{CALIBRATION_FACTOR:g}, n = S + d + d_v + features",
            )
        )
    return obs


SINGLE_KEY_GRADIENTS = declare(
    "single-key-gradients", _single_key_applies, _single_key_examples, _single_key_check
)


PROPERTIES = (
    GRADCHECK,
    GRADIENTS_VS_REFERENCE,
    SINGLE_KEY_GRADIENTS,
)
