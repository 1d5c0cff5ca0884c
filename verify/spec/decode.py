"""The decode protocol: how a model runs attention token by token over a cache, and packed
(variable-length) sequences.

A decode path is two functions in the variant's layout (``BHTD``: q ``(B, H, n, d)``; ``BTHD``:
``(B, n, H, d)``; every tensor keeps its sequence axis):

- ``prefill(q, k, v, state=None) -> (o, state)``: a segment of n >= 0 tokens (n = 0: the empty
  cache), appended to ``state`` when given; ``o`` holds the segment's outputs, each token
  attending to the cache and to the segment's tokens up to itself (causal).
- ``step(state, q_new, k_new, v_new) -> (o_new, state)``: n >= 1 new tokens (n > 1:
  speculative decoding, a verified draft), the same attention.

Optional keywords of ``prefill`` (found in its signature, or declared):

- ``cache_seqlens``: an int32 tensor ``(B,)`` given to a prefill without state: row b holds
  the first ``cache_seqlens[b]`` tokens of the segment (zero included); the segment's other
  positions are the cache's unused slots (their outputs are ignored; the checker fills them
  with NaN, +inf or -inf), and the segment's length is the cache's capacity. Each step then
  appends to every row at its own position (FlashAttention's ``flash_attn_with_kvcache``
  convention).
- ``capacity``: an int, the number of slots of a preallocated cache (a static cache's
  ``max_cache_len``), given to a prefill without state; never less than the tokens the check
  appends.

The state is opaque: the checker only passes it back. An object with ``prefill`` and ``step``
methods must not keep per-sequence data on itself (a check runs many sequences through one
object).

Packed sequences follow FlashAttention's varlen layout:
``packed(q, k, v, cu_seqlens, *, causal) -> o`` with q ``(total, H, d)``, k ``(total, H, d)``,
v ``(total, H, d_v)``, ``cu_seqlens`` an int32 tensor ``(B + 1,)`` of document offsets
(``cu_seqlens[0] = 0``, non-decreasing; rows from ``cu_seqlens[-1]`` to ``total`` belong to no
document: slack), o ``(total, H, d_v)``; document b is self-attention over rows
``cu_seqlens[b]:cu_seqlens[b + 1]`` alone (D20: a block-diagonal visibility).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verify.spec.imports import TargetError, load_spec

#: the optional keywords of ``prefill`` the checker passes when they are supported
OPTIONAL_KEYWORDS = ("cache_seqlens", "capacity")


def _takes(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn``'s signature names the parameter ``name`` (``**kwargs`` does not count:
    an implementation that swallows every keyword cannot be told to use one)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params


@dataclass(frozen=True)
class DecodeAPI:
    """A decode path (module docstring: the protocol).

    Args:
        prefill: ``prefill(q, k, v, state=None[, cache_seqlens=, capacity=]) -> (o, state)``.
        step: ``step(state, q_new, k_new, v_new) -> (o_new, state)``, one or several tokens.
        cache_seqlens: ``prefill`` takes per-row lengths; None: read from its signature.
        capacity: ``prefill`` takes a cache capacity; None: read from its signature.

    Raises:
        TypeError: ``prefill`` or ``step`` not callable, or a flag not a bool or None.
    """

    prefill: Callable[..., tuple[Any, Any]]
    step: Callable[..., tuple[Any, Any]]
    cache_seqlens: bool | None = None
    capacity: bool | None = None

    def __post_init__(self) -> None:
        for name in ("prefill", "step"):
            if not callable(getattr(self, name)):
                got = type(getattr(self, name)).__name__
                raise TypeError(f"{name}: expected a callable, got {got}")
        for name in OPTIONAL_KEYWORDS:
            value = getattr(self, name)
            if value is None:
                object.__setattr__(self, name, _takes(self.prefill, name))
            elif not isinstance(value, bool):
                raise TypeError(f"{name}: expected a bool or None, got {value!r}")

    @property
    def keywords(self) -> tuple[str, ...]:
        """The optional keywords this path takes (:data:`OPTIONAL_KEYWORDS`)."""
        return tuple(n for n in OPTIONAL_KEYWORDS if getattr(self, n))


def as_decode(obj: Any, what: str = "decode") -> DecodeAPI:
    """A :class:`DecodeAPI` from a DecodeAPI, an object (or module) with ``prefill`` and
    ``step``, or a class with such methods built with no arguments.

    Raises:
        TypeError: ``obj`` has no callable ``prefill`` and ``step`` (``what`` names it).
    """
    if isinstance(obj, DecodeAPI):
        return obj
    if inspect.isclass(obj):
        try:
            obj = obj()
        except Exception as exc:
            raise TypeError(f"{what}: the class {obj.__name__} raised {exc!r} when built") from exc
    pre, stp = getattr(obj, "prefill", None), getattr(obj, "step", None)
    if not (callable(pre) and callable(stp)):
        raise TypeError(
            f"{what}: expected an object or module with prefill(q, k, v, state=None) and "
            f"step(state, q_new, k_new, v_new), got {type(obj).__name__}"
        )
    return DecodeAPI(pre, stp)


def load_decode(spec: str) -> DecodeAPI:
    """The decode path named ``spec``: ``pkg.mod:obj`` (an object, class or DecodeAPI) or
    ``pkg.mod`` (a module with ``prefill`` and ``step`` functions).

    Raises:
        ValueError: the spec cannot be imported or names no decode path (the message names
            ``decode_spec``).
    """
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"decode_spec: expected 'pkg.mod:obj' or 'pkg.mod', got {spec!r}")
    try:
        if ":" in spec:
            obj = load_spec(spec)
        else:
            load_spec(f"{spec}:__name__")  # puts the current directory on the path
            obj = importlib.import_module(spec)
        return as_decode(obj, "decode_spec")
    except TargetError as exc:
        raise ValueError(str(exc).replace("target:", "decode_spec:", 1)) from None
    except TypeError as exc:
        raise ValueError(f"{exc} ({spec!r})") from None


def load_packed(spec: str) -> Callable[..., Any]:
    """The packed (varlen) function named ``pkg.mod:fn``.

    Raises:
        ValueError: not importable or not callable (the message names ``packed_spec``).
    """
    try:
        fn = load_spec(spec)
    except TargetError as exc:
        raise ValueError(str(exc).replace("target:", "packed_spec:", 1)) from None
    if not callable(fn):
        raise ValueError(f"packed_spec: {spec!r} is not callable")
    return fn
