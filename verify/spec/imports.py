"""Importing ``"pkg.module:object"`` specs: what a user asks to check, or a feature map they
declare. The one place such strings are resolved (``verify.spec.target`` and the
``feature_map_spec`` claim of ``verify.spec.variant`` both use it)."""

from __future__ import annotations

import os
import pkgutil
import sys
from typing import Any


class TargetError(Exception):
    """The target cannot be imported or is not an attention variant (CLI exit code 2)."""


def load_spec(spec: str) -> Any:
    """Import ``pkg.module:object`` (``object`` may be dotted); the current directory is
    importable, as with ``python -m``.

    Raises:
        TargetError: malformed spec, module not importable, attribute missing.
    """
    if not isinstance(spec, str) or spec.count(":") != 1 or "" in spec.split(":"):
        raise TargetError(f"target: expected 'pkg.module:object', got {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return pkgutil.resolve_name(spec)
    except AttributeError as exc:
        raise TargetError(f"target: {spec!r}: {exc}") from exc
    except Exception as exc:
        raise TargetError(
            f"target: cannot import {spec.split(':')[0]!r}: {type(exc).__name__}: {exc}"
        ) from exc
