"""Calling a decode path (``verify.spec.decode``'s protocol) on canonical tensors: the
protocol's prefill and step with their outputs validated (shape, dtype), shared by the decode
properties (``verify.properties.decode_paths``), the diagnoses and the checker's tiny call."""

from __future__ import annotations

from verify.properties.support.calls import _check_output, _pair, from_layout, to_layout
from verify.spec.results import VariantError


def _invoke(variant, fn, what: str, q, k, v, *args, **kw):
    lay = variant.layout
    try:
        res = fn(*args, to_layout(q, lay), to_layout(k, lay), to_layout(v, lay), **kw)
    except Exception as exc:
        raise VariantError(f"{what} raised {type(exc).__name__}: {exc}") from exc
    o, state = _pair(res, what)
    o = from_layout(o, lay) if hasattr(o, "transpose") else o
    # NaN/inf are judged by the caller, on the rows that carry a bound
    _check_output(o, (*q.shape[:-1], v.shape[-1]), q.dtype, what, allow_nonfinite=True)
    return o, state


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
