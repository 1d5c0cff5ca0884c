"""Oracle checks: the variant against the mpmath reference within the derived bound (D10).

One property per comparison kind:

- ``oracle-agreement``: every form the variant exposes (``forward`` and ``forms``), every
  denominator mode it accepts, against ``verify.exact.oracle`` for the claimed kernel, within
  ``verify.exact.errors.attention_error_bound`` (float64/float32 directly; bf16/fp16 inputs by
  the declared, probed or envelope precision model against the exact result on the same rounded
  inputs); then a few long examples past the block sizes of real kernels (S = 64 j + r, a last
  partial block; ``support.common.long_inputs_strategy``) against the float64 reference, whose
  own bound the stated one includes.
- ``edge-cases``: the same comparison on the edge-case inputs of ``verify.strategies`` (zeros,
  one key, equal scores, large norms within the dtype's range, identity values, v = 1).
"""

from __future__ import annotations

from verify.properties.support.base import declare
from verify.properties.support.claims import dtype_reason, reference_reason
from verify.properties.support.common import (
    Example,
    exact_and_bound,
    flex_reason,
    inputs_strategy,
    long_inputs_strategy,
)
from verify.properties.support.paths import (
    bounded_call,
    form_kind,
    require_mode,
    with_mode_and_form,
)
from verify.spec.results import Observation


def _applies(variant, ctx) -> str | None:
    return (
        reference_reason(
            variant,
            unknown="the variant claims no kernel (kernel=unknown): nothing to compare with",
            favor="only the statistical checks apply",
        )
        or dtype_reason(variant, ctx)
        or flex_reason(variant)
    )


def _examples(cases):
    def examples(variant, ctx):
        if variant.length_multiple > 1:  # S = 1 (and T = 1 when causal) is outside the claim
            cases_ = tuple(c for c in cases if c != "single_key")
        else:
            cases_ = cases

        inputs = inputs_strategy(variant, ctx, cases=cases_, beyond_overflow=True)
        return with_mode_and_form(variant, inputs)

    return examples


def _check(variant, ex: Example, ctx) -> Observation:
    from verify.exact.errors import compare

    x = ex.inputs
    mode, form = ex.choices["denominator"], ex.choices["form"]
    require_mode(mode, x.v.shape[-1])
    # bound stated from the inputs before the variant runs
    ref, eb = exact_and_bound(variant, x, ctx, denominator=mode, form=form_kind(form))
    # NaN/inf are allowed only where the bound makes no statement (compare checks the rest)
    out = bounded_call(variant, form, mode, x, eb.bound)
    return compare(out, eb, ref, what=f"{form}/{mode}")


def _long(variant, ctx):
    return with_mode_and_form(variant, long_inputs_strategy(variant, ctx))


ORACLE_AGREEMENT = declare(
    "oracle-agreement", _applies, _examples(("random",)), _check, long_examples=_long
)

_EDGES = ("zeros", "single_key", "equal_keys", "large_norm", "identity_values", "unit_values")
EDGE_CASES = declare("edge-cases", _applies, _examples(_EDGES), _check)

PROPERTIES = (ORACLE_AGREEMENT, EDGE_CASES)
