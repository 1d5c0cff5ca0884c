"""Torch implementations, oracle, error model and property checks for attn-theory.

Importing this package is cheap: submodules (torch, mpmath, hypothesis) load on first use.
"""

from __future__ import annotations

__all__ = ["check"]


def check(target, **claims):
    """Run the property battery on an attention variant; see :mod:`verify.checker`."""
    from verify.checker import check as _check

    return _check(target, **claims)
