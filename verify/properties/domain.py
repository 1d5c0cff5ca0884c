"""The variant's input domain (the API contract): every input inside the found or declared
domain is accepted.

The domain is every shape the catalogue draws (batch and heads 1-2, lengths up to 10 that
respect ``length_multiple``, head and value dimensions from 1), narrowed only by the closed list
of restrictions a variant may have (d_v == d, T == S, a length multiple;
``verify.spec.variant``), each causal flag it supports, the run's dtype, and every code path. A
variant that raises there, or returns a wrong shape or dtype, or NaN/inf in a row whose output
must be finite (see ``_finite_by_theory``), fails this property with the input; every other
property leaves an input the variant raises on out, so one restriction or one crash fails one
property, not the battery.

What a row without keys returns is a convention, not a failure: rows the variant's own
visibility leaves empty (a window, with the kernel unknown) may hold anything; a causal row t
(with T == S it reads keys s <= t, itself included) never is one.

Id: ``accepts-inputs``.
"""

from __future__ import annotations

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.calls import call
from verify.properties.support.claims import dtype_reason
from verify.properties.support.common import Example, exact_and_bound
from verify.properties.support.inputs import plain_inputs, score_cases
from verify.properties.support.observe import np64
from verify.properties.support.paths import (
    call_kwargs,
    convention_mode,
    form_kind,
    path_callable,
    with_path,
)
from verify.spec.results import NotApplicable, Observation, VariantError


def _applies(variant, ctx):
    return dtype_reason(variant, ctx)


def _examples(variant, ctx):
    from verify.strategies import EDGE_CASES

    cases = score_cases(variant, ("random", *EDGE_CASES))
    return with_path(variant, plain_inputs(variant, ctx, cases=cases))


def _check(variant, ex: Example, ctx) -> Observation:
    x, path = ex.inputs, ex.choices["path"]
    _within_compute_range(x, ctx)
    fn, kw = path_callable(variant, path), call_kwargs(variant, convention_mode(variant))
    o = np64(call(fn, x.q, x.k, x.v, causal=x.causal, allow_nonfinite=True, **kw))  # raising fails
    bad = ~np.isfinite(o).all(-1)  # (B, H, T) rows with NaN/inf
    if bad.any():
        rows = bad & _finite_by_theory(variant, x, ctx, fn, kw, path)
        if rows.any():
            where = tuple(int(i) for i in np.argwhere(rows)[0])
            raise VariantError(
                f"{path}: NaN/inf in row {where} (B, H, T), which reads keys and whose output "
                f"is finite ({_WHY[variant.parsed_kernel.known]}) (causal={x.causal}, "
                f"T={x.shape.T}, S={x.shape.S})"
            )
    return Observation(0.0, 0.0, "exact", detail=f"{path}: accepted (causal={x.causal})")


def _within_compute_range(x, ctx) -> None:
    """NotApplicable for inputs beyond the range of a narrower compute dtype (a variant found or
    declared computing in float32 on float64 inputs): the cast to it overflows, a restriction
    of such a variant, not a rejected input. Elements and the scores they make are kept a
    factor 16 below the compute dtype's largest number."""
    import torch

    if ctx.model_dtype == ctx.dtype:
        return
    top = float(torch.finfo(getattr(torch, ctx.model_dtype)).max) / 16
    big = max(float(t.detach().abs().max()) if t.numel() else 0.0 for t in (x.q, x.k, x.v))
    score = float((x.q.detach().abs() @ x.k.detach().abs().transpose(-1, -2)).max()) if (
        x.q.numel() and x.k.numel()
    ) else 0.0  # fmt: skip
    if max(big, score) > top:
        raise NotApplicable(
            f"inputs beyond the {ctx.model_dtype} range the variant computes in (|x| or a "
            f"score up to {max(big, score):.3g} > {top:.3g})"
        )


_WHY = {
    True: "the claimed kernel's exact output and D10 bound are finite there",
    False: "the same call without the causal mask gives a finite row",
}


def _finite_by_theory(variant, x, ctx, fn, kw, path) -> np.ndarray:
    """(B, H, T) rows whose output must be finite: with a claimed kernel, where the exact output
    and the D10 bound in the model dtype (the compute dtype where found or declared) are finite
    (the model promises a finite result; a 0/0 of a sign-indefinite map, or an overflow the
    model charges, is no failure); with the kernel
    unknown, causal rows the non-causal call on the same inputs computes finitely (the causal
    mask, not the kernel, made them NaN) and, for a normalized variant, with values 1 too (a
    vanishing kernel sum gives NaN whatever the values). Empty rows (a window's) are a
    convention either way."""
    if variant.parsed_kernel.known:
        try:
            ref, eb = exact_and_bound(
                variant, x, ctx, denominator=convention_mode(variant), form=form_kind(path)
            )
        except NotApplicable:
            return np.zeros(x.shape.out[:3], dtype=bool)
        return np.isfinite(ref.float64).all(-1) & np.isfinite(np.asarray(eb.bound)).all(-1)
    if not x.causal or not variant.supports_causal(False):
        return np.zeros(x.shape.out[:3], dtype=bool)
    free = np64(call(fn, x.q, x.k, x.v, causal=False, allow_nonfinite=True, **kw))
    rows = np.isfinite(free).all(-1)
    if variant.normalized:
        # a normalized row returns sum_s w_s v_s / sum_s w_s: with v = 1 it is 1 unless its
        # kernel sum vanishes (0/0: a row whose visible keys all have kernel 0, e.g. a key at
        # 0 under a squared kernel), a convention of the kernel, not a rejected input
        ones = x.v.new_ones(x.v.shape)
        unit = np64(call(fn, x.q, x.k, ones, causal=True, allow_nonfinite=True, **kw))
        rows &= np.isfinite(unit).all(-1)
    return rows


ACCEPTS_INPUTS = declare("accepts-inputs", _applies, _examples, _check)

PROPERTIES = (ACCEPTS_INPUTS,)
