"""Calling a decode path (``verify.spec.decode``'s protocol) on canonical tensors: the
protocol's prefill and step with their outputs validated (shape, dtype), shared by the decode
properties (``verify.properties.decode_paths``), the diagnoses and the checker's tiny call."""

from __future__ import annotations

from verify.properties.support.calls import from_layout, to_layout
from verify.spec.results import VariantError


def _validate(o, expected, dtype, what: str):
    import torch

    if not isinstance(o, torch.Tensor):
        raise VariantError(f"{what} returned {type(o).__name__} as output, expected a tensor")
    if tuple(o.shape) != tuple(expected):
        raise VariantError(f"{what} output shape {tuple(o.shape)}, expected {tuple(expected)}")
    if o.dtype != dtype:
        raise VariantError(f"{what} output dtype {o.dtype}, expected the input dtype {dtype}")
    return o


def _invoke(variant, fn, what: str, q, k, v, *args, **kw):
    lay = variant.layout
    try:
        res = fn(*args, to_layout(q, lay), to_layout(k, lay), to_layout(v, lay), **kw)
    except Exception as exc:
        raise VariantError(f"{what} raised {type(exc).__name__}: {exc}") from exc
    if not (isinstance(res, tuple) and len(res) == 2):
        raise VariantError(f"{what} returned {type(res).__name__}, expected (output, state)")
    o, state = res
    o = from_layout(o, lay) if hasattr(o, "transpose") else o
    return _validate(o, (*q.shape[:-1], v.shape[-1]), q.dtype, what), state


def prefill(variant, q, k, v, state=None, **kw):
    """``variant.decode.prefill`` on canonical (B, H, n, .) tensors (n >= 0): (o, state), o
    canonical (B, H, n, d_v); ``kw`` its optional keywords (``cache_seqlens``, ``capacity``).

    Raises:
        VariantError: it raised or returned something other than (a tensor of the right shape
            and dtype, state). NaN/inf are judged by the caller, on the rows that carry a bound.
    """
    what = "decode.prefill" + (" (resuming)" if state is not None else "")
    if state is not None:
        kw["state"] = state
    return _invoke(variant, variant.decode.prefill, what, q, k, v, **kw)


def step(variant, state, q, k, v):
    """``variant.decode.step`` with canonical (B, H, n, .) new tokens (n >= 1): (o, state)."""
    n = q.shape[2]
    return _invoke(variant, variant.decode.step, f"decode.step ({n} tokens)", q, k, v, state)
