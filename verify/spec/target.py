"""Loading what a user asks to check, and applying claims to it.

A target is an :class:`~verify.spec.variant.AttentionVariant`, a plain function
``f(q, k, v, *, causal) -> o``, a zero-argument factory returning either, or an import spec
``"pkg.module:object"`` (resolved with :func:`pkgutil.resolve_name`).
"""

from __future__ import annotations

import inspect
from typing import Any

from verify.spec.imports import TargetError, load_spec
from verify.spec.variant import AttentionVariant

__all__ = ["TargetError", "apply_claims", "apply_suggestions", "as_variant", "load_spec"]


def _is_factory(obj: Any) -> bool:
    if isinstance(obj, AttentionVariant) or not callable(obj):
        return False
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return False
    required = [
        p
        for p in sig.parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return not required


def as_variant(target: Any, *, name: str | None = None) -> AttentionVariant:
    """Turn a target (variant, function, factory or spec string) into an AttentionVariant.

    Raises:
        TargetError: the target is none of these, or a factory raised.
    """
    spec = None
    if isinstance(target, str):
        spec = target
        target = load_spec(target)
    if _is_factory(target):
        try:
            target = target()
        except Exception as exc:
            raise TargetError(f"target: the factory raised {type(exc).__name__}: {exc}") from exc
    if isinstance(target, AttentionVariant):
        return target
    if callable(target):
        label = name or spec or getattr(target, "__qualname__", None) or repr(target)
        return AttentionVariant(name=str(label), forward=target)
    raise TargetError(
        "target: expected an AttentionVariant, a function f(q, k, v, *, causal) or a zero-argument "
        f"factory returning one, got {type(target).__name__}"
    )


def apply_claims(variant: AttentionVariant, claims: dict[str, Any]) -> AttentionVariant:
    """Replace the variant's claims with the given ones (None values are ignored); the given
    ones join the variant's declared fields (``AttentionVariant.declared``), which the checker's
    probes never overwrite.

    Raises:
        ValueError, TypeError: an invalid claim (named by AttentionVariant's validation).
    """
    given = {k: v for k, v in claims.items() if v is not None}
    return variant.with_claims(**given) if given else variant


def apply_suggestions(variant: AttentionVariant, suggested: dict[str, Any]) -> AttentionVariant:
    """The variant with the probes' ``suggested`` claims on its undeclared fields only (a
    declared field keeps its value, whatever the probes found); the suggestions do not become
    declared.

    Raises:
        ValueError, TypeError: an invalid suggestion (named by AttentionVariant's validation).
    """
    return variant.with_found(**{k: v for k, v in suggested.items() if v is not None})
