"""The D10 model of a FlexAttention call's declared functions (``verify.spec.flex``): the
visibility of its causal flag, claimed window and ``mask_mod``, and the bound of softmax over it
with D16's score error propagated through the ``score_mod``. ``flex-score-mod`` compares the
output with it; the structural properties take it as the claim's model
(``support.structure``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verify.properties.support.common import claimed_visible, precision_of
from verify.spec import flex
from verify.spec.results import NotApplicable


def flex_visible(variant, x) -> np.ndarray:
    """(B, H, T, S) bool: the causal flag's and a claimed window's visibility
    (``claimed_visible``) and the declared mask_mod's."""
    vis = claimed_visible(variant, x)
    if variant.mask_mod is not None:
        B, H, T, _ = x.q.shape
        vis = vis & flex.mask_grid(variant.mask_mod, B, H, T, x.k.shape[2])
    return np.broadcast_to(vis, (*x.q.shape[:3], x.k.shape[2]))


def flex_bound(variant, x, ctx, exact, vis):
    """D10's bound of softmax attention over ``vis`` with the declared score_mod's map
    (``verify.spec.flex.score_map``) against ``exact``; inf (no statement) on rows with no
    visible key."""
    from verify.exact import errors
    from verify.properties.support.common import model_applies

    scale = variant.score_scale(x.q.shape[-1])
    why = errors.outside_model("softmax", x.q, x.k, x.v, dtype=ctx.model_dtype, scale=scale)
    if why:
        raise NotApplicable(why)
    extra: dict[str, Any] = {}
    if variant.score_mod is not None:
        extra["score_map"] = flex.score_map(variant.score_mod, variant.score_mod_roundings)
    with model_applies():
        eb = errors.attention_error_bound(
            "softmax", x.q, x.k, x.v, dtype=ctx.model_dtype, exact=exact, attn_mask=vis,
            scale=scale, denominator="sum", eps=0.0, form="any", device=ctx.device,
            exp_library=variant.exp_library, precision=precision_of(variant, ctx,
            denominator="sum", eps=0.0), arithmetic=variant.arithmetic, **extra,
        )  # fmt: skip
    empty = ~vis.any(-1)
    eb.bound[...] = np.where(empty[..., None], np.inf, eb.bound)
    return eb
