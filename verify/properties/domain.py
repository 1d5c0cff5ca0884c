"""The variant's input domain (the API contract): every input inside the found or declared
domain is accepted.

The domain is every shape the catalogue draws (batch and heads 1-2, lengths up to 10 that
respect ``length_multiple``, head and value dimensions from 1), narrowed only by the closed list
of restrictions a variant may have (d_v == d, T == S, a length multiple; ``verify.spec.variant``),
each causal flag it supports, the run's dtype, and every code path. A variant that raises there,
or returns a wrong shape or dtype, or NaN/inf in a row that has keys to read, fails this property
with the input; every other property leaves an input the variant raises on out, so one
restriction or one crash fails one property, not the battery.

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
from verify.properties.support.common import Example
from verify.properties.support.inputs import plain_inputs
from verify.properties.support.observe import np64
from verify.properties.support.paths import call_kwargs, convention_mode, path_callable, with_path
from verify.properties.support.structure import effective_weights, variant_empty_rows
from verify.spec.results import NotApplicable, Observation, VariantError


def _applies(variant, ctx):
    return dtype_reason(variant, ctx)


def _examples(variant, ctx):
    from verify.strategies import ALL_CASES

    return with_path(variant, plain_inputs(variant, ctx, cases=ALL_CASES))


def _check(variant, ex: Example, ctx) -> Observation:
    x, path = ex.inputs, ex.choices["path"]
    fn, kw = path_callable(variant, path), call_kwargs(variant, convention_mode(variant))
    o = np64(call(fn, x.q, x.k, x.v, causal=x.causal, allow_nonfinite=True, **kw))  # raising fails
    bad = ~np.isfinite(o).all(-1)  # (B, H, T) rows with NaN/inf
    if bad.any():
        allowed = np.zeros_like(bad)
        if not x.causal and not variant.parsed_kernel.known:
            try:
                allowed = variant_empty_rows(effective_weights(fn, x, kw, causal=False))
            except NotApplicable:
                pass
        rows = bad & ~allowed
        if rows.any():
            where = tuple(int(i) for i in np.argwhere(rows)[0])
            raise VariantError(
                f"{path}: NaN/inf in row {where} (B, H, T), which has keys to read "
                f"(causal={x.causal}, T={x.shape.T}, S={x.shape.S})"
            )
    return Observation(0.0, 0.0, "exact", detail=f"{path}: accepted (causal={x.causal})")


ACCEPTS_INPUTS = declare("accepts-inputs", _applies, _examples, _check)

PROPERTIES = (ACCEPTS_INPUTS,)
