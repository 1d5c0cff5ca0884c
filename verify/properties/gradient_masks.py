"""Gradient properties of masks: exact zeros where nothing is visible (the API contract; fault
classes 8, 12).

- ``masked-key-gradients``: a key that no query sees (a finite 1e10 value there) gets exactly
  zero dk and dv; gradients are finite.
- ``empty-row-gradients``: a query row with no visible key gets exactly zero dq, and every
  gradient of the batch stays finite.

Exact identities are bitwise: the masked contribution is multiplied by an exact zero or never
formed.
"""

from __future__ import annotations

from verify.properties.support.base import declare
from verify.properties.support.claims import dtype_reason
from verify.properties.support.common import Example
from verify.properties.support.grads import (
    masked_strategy,
    max_abs,
    require_defined,
    upstream_of,
    variant_gradients,
    with_grad_output,
)
from verify.properties.support.paths import modes, require_mode
from verify.spec.results import Observation


def _mask_applies(variant, ctx) -> str | None:
    if not variant.supports_mask:
        return "the variant takes no attn_mask (supports_mask=False)"
    if not variant.differentiable:
        return "the variant declares it is not differentiable"
    return dtype_reason(variant, ctx)


def _mask_examples(force: str):
    def examples(variant, ctx):
        from hypothesis import strategies as st

        return with_grad_output(
            masked_strategy(variant, ctx, force=force),
            denominator=st.sampled_from(modes(variant)),
        )

    return examples


def _exact_zero(name: str, t, where_mask, what: str) -> Observation:
    import torch

    sel = t.detach().cpu().to(torch.float64)[where_mask]
    worst = max_abs(sel)
    return Observation(
        worst,
        0.0,
        kind="exact",
        where=name,
        detail=f"{what}: max |{name}| = {worst:.3e}, must be exactly 0 (the masked "
        "contribution is multiplied by an exact zero or never formed)",
    )


def _dead_key_check(variant, ex: Example, ctx) -> list[Observation]:
    x = ex.inputs
    mode, g = ex.choices["denominator"], upstream_of(ex)
    require_mode(mode, x.v.shape[-1])
    require_defined(variant, x, mode)
    dead = ~x.visible(numpy=False).cpu().any(-2)  # (B, H, S): keys no query sees
    empty = ~x.visible(numpy=False).cpu().any(-1)  # (B, H, T): queries that see no key
    _, dq, dk, dv = variant_gradients(variant, "forward", x, mode, g)
    obs = [
        _exact_zero("dk", dk, dead, "keys hidden from every query (value 1e10)"),
        _exact_zero("dv", dv, dead, "keys hidden from every query (value 1e10)"),
    ]
    if bool(empty.any()):
        obs.append(_exact_zero("dq", dq, empty, "query rows with no visible key"))
    return obs


def _empty_row_check(variant, ex: Example, ctx) -> list[Observation]:
    x = ex.inputs
    mode, g = ex.choices["denominator"], upstream_of(ex)
    require_mode(mode, x.v.shape[-1])
    require_defined(variant, x, mode)
    empty = ~x.visible(numpy=False).cpu().any(-1)
    out, dq, dk, dv = variant_gradients(variant, "forward", x, mode, g)  # finite or VariantError
    return [
        _exact_zero("dq", dq, empty, "query rows with no visible key"),
        _exact_zero("output", out, empty, "query rows with no visible key (SDPA's convention)"),
    ]


MASKED_KEY_GRADIENTS = declare(
    "masked-key-gradients", _mask_applies, _mask_examples("dead_key"), _dead_key_check
)


def _empty_row_applies(variant, ctx) -> str | None:
    if why := _mask_applies(variant, ctx):
        return why
    if variant.empty_rows != "zeros":
        return (
            f"empty rows return a convention the variant does not declare as zeros "
            f"(empty_rows={variant.empty_rows!r}); masks reports what they return"
        )
    return None


EMPTY_ROW_GRADIENTS = declare(
    "empty-row-gradients", _empty_row_applies, _mask_examples("empty_row"), _empty_row_check
)


PROPERTIES = (
    MASKED_KEY_GRADIENTS,
    EMPTY_ROW_GRADIENTS,
)
