"""The property catalogue: each property names the derivation it checks (D1..D11, the
project's own records in ``derivations/``, rendered in ``reports/derivations.md``) or
``contract`` for API behaviour.

Groups (one module each, listed in catalogue order): ``domain`` (every input of the variant's
domain accepted), ``oracle_checks`` (against the mpmath oracle), ``dependence`` (causality,
prefix invariance, batch and head independence, permutation), ``weights`` (linearity in v,
determinism, convexity, uniform weights), ``scores`` (the score scale, a single key), ``masks``
(masks, causal alignment, the causal mismatch), ``claimed_structure`` (the window extent, kv
head groups and key padding of structural claims), ``forms`` (form agreement and the streaming
state API), ``decode_paths`` (a decode path against the causal forward, D20), ``packed``
(packed sequences, D20), ``flex_checks`` (FlexAttention's score_mod, mask_mod and BlockMask
as claims, D16), ``kernel`` (kernel identity, positivity, odd orders), ``shift``
(shift invariance), ``gradients``, ``gradient_masks`` and ``gradient_identities`` (D21),
``precision`` (dtype and device agreement), and on the built-in implementations' theory
``truncation`` (D4), ``norms`` (D7), ``peaks`` (D8), ``injectivity`` (D9 injectivity and
rank) and ``favor`` (D9 FAVOR+ statistics). Every group stands on the floor ``support`` and
never imports another group.
"""

from __future__ import annotations

import importlib

GROUPS = (
    "domain",
    "oracle_checks",
    "dependence",
    "weights",
    "scores",
    "masks",
    "claimed_structure",
    "forms",
    "decode_paths",
    "packed",
    "flex_checks",
    "kernel",
    "shift",
    "gradients",
    "gradient_masks",
    "gradient_identities",
    "precision",
    "truncation",
    "norms",
    "peaks",
    "injectivity",
    "favor",
)


def catalogue() -> list:
    """Every :class:`~verify.properties.support.base.Property`, in group order (ids are unique)."""
    props = []
    for group in GROUPS:
        try:
            mod = importlib.import_module(f"verify.properties.{group}")
        except ModuleNotFoundError as exc:
            if exc.name == f"verify.properties.{group}":
                continue
            raise
        props.extend(mod.PROPERTIES)
    ids = [p.id for p in props]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise RuntimeError(f"duplicate property ids: {sorted(dup)}")
    return props


def get(property_id: str):
    """The property with this id.

    Raises:
        KeyError: unknown id (the message lists the known ones).
    """
    for p in catalogue():
        if p.id == property_id:
            return p
    raise KeyError(f"property: expected one of {[p.id for p in catalogue()]}, got {property_id!r}")
