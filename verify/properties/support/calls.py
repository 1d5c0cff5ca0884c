"""Calling a variant safely: layout conversion and output validation.

Every property calls the variant under test through :func:`call`, which converts the canonical
``(B, H, T, d)`` tensors to the variant's layout, calls it, and turns any misbehaviour (an
exception, a wrong shape or dtype, NaN or inf) into a :class:`VariantError` with the reason.
:func:`feature_map` and the state API's :func:`prefill` and :func:`step` are validated the same
way.
"""

from __future__ import annotations

import math
from typing import Any

from verify.properties.support.common import outside_domain
from verify.spec.results import NotApplicable, VariantError, VariantRaised


def to_layout(x, layout: str):
    """Canonical ``(B, H, T, d)`` -> the variant's layout (``BTHD`` swaps axes 1 and 2)."""
    return x.transpose(1, 2) if layout == "BTHD" else x


def from_layout(x, layout: str):
    return x.transpose(1, 2) if layout == "BTHD" else x


def call(
    variant,
    q,
    k,
    v,
    *,
    causal: bool,
    allow_nonfinite: bool = False,
    restricted: bool = True,
    **kwargs: Any,
):
    """``variant.forward`` on canonical tensors; returns the canonical ``(B, H, T, d_v)`` output.

    Raises:
        VariantError: the variant raised, or returned a non-tensor, a wrong shape or dtype, or
            (unless ``allow_nonfinite``) NaN/inf.
        NotApplicable: ``restricted`` and the shapes lie outside the variant's declared or found
            restrictions (the call is not made; the probes, which find them, pass False).
    """
    import torch

    if restricted:
        _require_domain(variant, q, k, v)
    lay = variant.layout
    try:
        out = variant.forward(
            to_layout(q, lay), to_layout(k, lay), to_layout(v, lay), causal=causal, **kwargs
        )
    except VariantError:
        raise
    except Exception as exc:
        raise VariantRaised(f"forward raised {type(exc).__name__}: {exc}") from exc
    if isinstance(out, tuple):  # e.g. (o, state) APIs
        out = out[0]
    if not isinstance(out, torch.Tensor):
        raise VariantError(f"forward returned {type(out).__name__}, expected a torch.Tensor")
    out = from_layout(out, lay)
    expected = (*q.shape[:-1], v.shape[-1])
    if tuple(out.shape) != tuple(expected):
        raise VariantError(f"output shape {tuple(out.shape)}, expected {tuple(expected)}")
    if out.dtype != q.dtype:
        raise VariantError(f"output dtype {out.dtype}, expected the input dtype {q.dtype}")
    if not allow_nonfinite and not torch.isfinite(out).all():
        unrepresentable(variant, q, k, kwargs.get("denominator"))
        bad = (~torch.isfinite(out)).nonzero()[0].tolist()
        raise VariantError(f"output has NaN/inf (first at index {bad})")
    return out


def _require_domain(variant, q, k, v) -> None:
    if why := outside_domain(variant, tuple(q.shape), tuple(k.shape), tuple(v.shape)):
        raise NotApplicable(why)


def unrepresentable(variant, q, k, mode: str | None, visible=None) -> None:
    """NotApplicable when the exact output itself overflows the dtype: exp weights without a
    normalizing denominator (``none``: sum_j e^{s_j} v_j; ``count``: its mean) at a score beyond
    ``safe_exp_radius`` (D6: only a normalized form is shift invariant, so no stable
    implementation can avoid the overflow). ``visible`` (B|1, H|1, T, S) bool, if given: only
    those scores count (masked keys carry no weight)."""
    import torch

    from verify.spec.results import NotApplicable
    from verify.strategies import safe_exp_radius

    if variant.kernel_family != "softmax" or mode not in ("none", "count"):
        return
    c = variant.score_scale(q.shape[-1])
    s = c * torch.einsum("bhtd,bhsd->bhts", q.double(), k.double())
    if visible is not None:
        s = s.masked_fill(~torch.as_tensor(visible, device=s.device), -math.inf)
    if _score_exceeds(s, q, k, c, safe_exp_radius(q.dtype)):
        raise NotApplicable(
            f"exp(score) up to e^{float(s.max()):.4g} without a normalizing denominator "
            f"({mode}): the exact output is not representable in {q.dtype}"
        )


def _score_exceeds(s, q, k, c: float, limit: float) -> bool:
    """Exactly whether some score c q_t.k_s (c, q, k the floats they are) of a position left
    unmasked in ``s`` (the float64 scores, masked positions -inf) exceeds ``limit``: positions
    more than the float64 bound gamma_{d+2} c sum_i |q_i k_si| (any summation order) from the
    limit are decided by ``s``; the rest in rational arithmetic. The decision (which rejects
    the example) is then the same on every machine, whatever order its einsum sums in."""
    from fractions import Fraction

    import numpy as np
    import torch

    from derivations.rounding import gamma, unit_roundoff

    qd, kd = q.detach().cpu().double(), k.detach().cpu().double()
    mag = abs(c) * torch.einsum("bhtd,bhsd->bhts", qd.abs(), kd.abs())
    margin = (gamma(q.shape[-1] + 2, unit_roundoff("float64")) * mag * 1.01 + 1e-300).numpy()
    sn = s.detach().cpu().numpy()
    if (sn - margin > limit).any():
        return True
    for b, h, t, j in zip(*np.nonzero(sn + margin >= limit)):
        dot = sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(qd[b, h, t], kd[b, h, j]))
        if Fraction(c) * dot > Fraction(limit):
            return True
    return False


# --------------------------------------------------------------------------- state API


def _check_output(o, expected: tuple[int, ...], dtype, what: str, allow_nonfinite: bool):
    import torch

    if not isinstance(o, torch.Tensor):
        raise VariantError(f"{what} returned {type(o).__name__} as output, expected a tensor")
    if tuple(o.shape) != tuple(expected):
        raise VariantError(f"{what} output shape {tuple(o.shape)}, expected {tuple(expected)}")
    if o.dtype != dtype:
        raise VariantError(f"{what} output dtype {o.dtype}, expected the input dtype {dtype}")
    if not allow_nonfinite and not bool(torch.isfinite(o).all()):
        bad = (~torch.isfinite(o)).nonzero()[0].tolist()
        raise VariantError(f"{what} output has NaN/inf (first at index {bad})")


def _pair(result, what: str):
    if not (isinstance(result, tuple) and len(result) == 2):
        raise VariantError(f"{what} returned {type(result).__name__}, expected (output, state)")
    return result


def prefill(variant, q, k, v, state=None, *, allow_nonfinite: bool = False):
    """``variant.state_api.prefill`` on canonical (B, H, T, .) tensors: (o canonical, state).

    Raises:
        VariantError: it raised, or returned something other than (tensor of the right shape,
            dtype and finiteness, state).
    """
    _require_domain(variant, q, k, v)
    lay = variant.layout
    what = "state_api.prefill" + (" (resuming)" if state is not None else "")
    try:
        args = (to_layout(q, lay), to_layout(k, lay), to_layout(v, lay))
        res = (
            variant.state_api.prefill(*args)
            if state is None
            else (variant.state_api.prefill(*args, state=state))
        )
    except Exception as exc:
        raise VariantError(f"{what} raised {type(exc).__name__}: {exc}") from exc
    o, st = _pair(res, what)
    o = from_layout(o, lay) if hasattr(o, "transpose") else o
    _check_output(o, (*q.shape[:-1], v.shape[-1]), q.dtype, what, allow_nonfinite)
    return o, st


def step(variant, state, q_t, k_t, v_t, *, allow_nonfinite: bool = False):
    """``variant.state_api.step`` with q_t, k_t (B, H, d), v_t (B, H, d_v): (o_t, state)."""
    try:
        res = variant.state_api.step(state, q_t, k_t, v_t)
    except Exception as exc:
        raise VariantError(f"state_api.step raised {type(exc).__name__}: {exc}") from exc
    o, st = _pair(res, "state_api.step")
    _check_output(o, (*q_t.shape[:-1], v_t.shape[-1]), q_t.dtype, "state_api.step", allow_nonfinite)
    return o, st
