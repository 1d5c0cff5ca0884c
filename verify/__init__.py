"""Torch implementations, oracle, error model and property checks for attn-theory.

Importing this package is cheap: submodules (torch, mpmath, hypothesis) load on first use.
"""

from __future__ import annotations

__all__ = ["check"]


def check(target, **claims):
    """Run the probes and the property battery on an attention variant: a
    :class:`verify.engine.check.CheckResult` (see :func:`verify.engine.check.check`)."""
    from verify.engine.check import check as _check

    return _check(target, **claims)
