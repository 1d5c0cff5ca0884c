"""What the attention computed in a run: the score radius, the denominator D_t and its signs,
what the form divides by (``attention_diagnostics``), and the cause of a divergence
(``divergence_cause``): a vanishing divisor without eps is labelled *missing eps*.
"""

from __future__ import annotations

import math

import torch

#: a divergence is labelled "missing eps" when, at the diverging step, some row's divisor is
#: exactly 0 (0/0 or x/0) or at most 1/EPS_RATIO of its numerator's largest entry (|o_t| >= 1e7:
#: an eps of 1e-6 or more would have bounded it)
EPS_RATIO = 1e7
_LOG_FLOAT32_MAX = math.log(torch.finfo(torch.float32).max)


def attention_diagnostics(form, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """What the attention computed on (q, k, v) of shape (B, H, T, d), causal; None for a custom
    form (``form``: a ``recall.Form``). Recomputed in float64 from the inputs of the form's call:

    - ``radius``: max |c q_t.k_s| over visible pairs (c = ``form.scale``, by default
      1/sqrt(d) for exp and Taylor and 1 for the element-wise feature maps, whose scale
      multiplies q before the map);
    - ``min_abs_D``: min_t |D_t|, D_t = sum_{s<=t} kappa(x_ts) (for feature maps
      phi(c q_t).phi(k_s)), whatever the form divides by;
    - ``neg_D_fraction``: fraction of rows (sequence, head, t) with D_t < 0;
    - ``sign_change_rows``: fraction of (sequence, head) rows whose D_t takes both signs over t;
      ``sign_changes``: mean number of sign changes of D_t along t per (sequence, head) row;
    - ``min_abs_divisor``: min |what the output is divided by| (D_t + eps for ``sum``, the
      L2 / RMS norm of the numerator for ``l2`` / ``rms``; None for ``none``);
    - ``zero_div_00`` / ``zero_div_x0``: rows whose divisor is exactly 0 with a zero / non-zero
      numerator; ``max_ratio``: max over rows with a non-zero divisor of max_i |N_ti| / |divisor|;
    - ``kernel_overflow``: kernel values that are not finite (float64); ``exp_overflow_f32``:
      scores above ln(float32 max) = 88.72 for the exp kernel (e^x overflows in float32);
      ``nonfinite_inputs``.
    """
    if form.kernel is None:
        return None
    from verify.attention._kernels import ELEMENTWISE, taylor_kernel

    q, k, v = (x.detach().to(torch.float64) for x in (q, k, v))
    T, d = q.shape[-2], q.shape[-1]
    vis = torch.ones(T, T, dtype=torch.bool).tril()
    nonfinite_inputs = not all(bool(torch.isfinite(x).all()) for x in (q, k, v))
    if form.kernel in ("exp", "taylor"):
        c = 1.0 / math.sqrt(d) if form.scale is None else form.scale
        s = c * (q @ k.transpose(-1, -2))
        w = s.exp() if form.kernel == "exp" else taylor_kernel(s, form.order)
    else:
        c = 1.0 if form.scale is None else form.scale  # a factor on q before the map
        phi = ELEMENTWISE[form.kernel]
        s = (c * q) @ k.transpose(-1, -2)
        w = phi(c * q) @ phi(k).transpose(-1, -2)
    s = torch.where(vis, s, 0.0)
    w = torch.where(vis, w, 0.0)
    D = w.sum(-1)
    N = w @ v
    if form.denominator == "sum":
        div = D + form.eps
    elif form.denominator == "l2":
        div = torch.sqrt(N.square().sum(-1) + form.eps)
    elif form.denominator == "rms":
        div = torch.sqrt(N.square().mean(-1) + form.eps)
    else:
        div = None
    sign = torch.sign(D)
    flips = ((sign[..., 1:] * sign[..., :-1]) < 0).sum(-1).double()
    out = {
        "radius": float(s.abs().max()),
        "min_abs_D": float(D.abs().min()),
        "neg_D_fraction": float((D < 0).double().mean()),
        "sign_change_rows": float(((D > 0).any(-1) & (D < 0).any(-1)).double().mean()),
        "sign_changes": float(flips.mean()),
        "min_abs_divisor": None,
        "zero_div_00": 0,
        "zero_div_x0": 0,
        "max_ratio": None,
        "kernel_overflow": int((~torch.isfinite(w)).sum()),
        "exp_overflow_f32": int((s > _LOG_FLOAT32_MAX).sum()) if form.kernel == "exp" else 0,
        "nonfinite_inputs": nonfinite_inputs,
    }
    if div is not None:
        zero = div == 0
        num_zero = (N == 0).all(-1)
        nz = ~zero
        ratio = N.abs().amax(-1)[nz] / div.abs()[nz]
        out.update(
            min_abs_divisor=float(div.abs().min()),
            zero_div_00=int((zero & num_zero).sum()),
            zero_div_x0=int((zero & ~num_zero).sum()),
            max_ratio=float(ratio.max()) if ratio.numel() else None,
        )
    return out


#: the diagnostics kept at every evaluation of the learning curve (all of them at the end)
CURVE_DIAG = ("radius", "min_abs_D", "neg_D_fraction", "sign_change_rows", "min_abs_divisor")


def divergence_cause(diag: dict | None) -> tuple[str, bool]:
    """(label, missing_eps) for a diverged run from the diagnostics at its diverging step.

    ``missing_eps`` is True when a vanishing divisor explains the non-finite values (exactly 0,
    or at most 1/``EPS_RATIO`` of the numerator): a numerical artefact of calling the form
    without eps, reported as such and never counted as evidence about the form.
    """
    if diag is None:
        return "cause unknown (custom form: no diagnostics)", False
    if diag["nonfinite_inputs"]:
        return "non-finite q/k/v entering the attention (upstream)", False
    if diag["zero_div_00"]:
        return (
            f"missing eps: 0/0 (divisor and numerator exactly 0 in {diag['zero_div_00']} row(s))",
            True,
        )
    if diag["zero_div_x0"]:
        return f"missing eps: x/0 (divisor exactly 0 in {diag['zero_div_x0']} row(s))", True
    if diag["max_ratio"] is not None and diag["max_ratio"] >= EPS_RATIO:
        return (
            f"missing eps: divisor {diag['min_abs_divisor']:.3g} vanishing against its "
            f"numerator (|o| up to {diag['max_ratio']:.3g})",
            True,
        )
    if diag["kernel_overflow"] or diag.get("exp_overflow_f32"):
        return (
            f"kernel overflow: score radius {diag['radius']:.3g} ("
            f"{diag.get('exp_overflow_f32', 0)} score(s) above ln(float32 max) = 88.7)",
            False,
        )
    return f"no vanishing divisor at the diverging step (score radius {diag['radius']:.3g})", False
