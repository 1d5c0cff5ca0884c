"""The property catalogue (DESIGN.md): each property names the derivation it checks.

Groups (one module each): ``oracle_checks`` (against the mpmath oracle), ``structural``
(causality, independence, equivariance, linearity, determinism, masks, scale),
``forms`` (form agreement and the streaming state API), ``kernel`` (kernel identity,
positivity, shift invariance), ``gradients``, ``theory`` (D4, D7, D8, D9 on the built-in
implementations) and ``precision`` (dtype and device agreement).
"""

from __future__ import annotations

import importlib

GROUPS = ("oracle_checks", "structural", "forms", "kernel", "gradients", "precision", "theory")


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
