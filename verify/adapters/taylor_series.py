"""taylor-series-linear-attention 0.2 ``TaylorSeriesLinearAttn`` (lucidrains) as a checked variant.

The package's attention is a module with projections, ``TaylorSeriesLinearAttn(dim,
dim_head=d, heads=H, causal, combine_heads, ...)(x, mask=None, context=None)``; its core is not
exposed as a function of (q, k, v). The adapter drives the module itself through its
cross-attention path with identity projections: ``dim = 2 H d``, ``combine_heads=False`` (no
output projection), ``to_q`` weight [I | 0] and ``to_kv`` weight I, x = [q | 0] and
``context`` = [k | v] (per token, heads flattened). Then ``to_q(x)`` is q and ``to_kv(context)``
is (k, v) exactly for finite inputs (an infinite entry spreads NaN into its token through
0 * inf). Read from ``taylor_series_linear_attention/attention.py`` and measured
(:func:`measure_conventions`):

* features ``second_taylor_expansion(x) = [1, x, vec(x x^T) / sqrt(2)]`` (1 + d + d^2 of them;
  ``remove_even_power_dups=True`` keeps the diagonal and sqrt(2) x the upper triangle,
  1 + d + d(d + 1)/2), so phi(x).phi(y) = 1 + x.y + (x.y)^2 / 2 = kappa_2(x.y): the map absorbs
  no scale (``feature_scale="none"``); q is multiplied by d^-1/2 before it, so the kernel is
  kappa_2(q.k / sqrt(d)): claimed ``linear:taylor:2`` at the default scale;
* non-causal kernel linear attention, out = phi(q) (sum_s phi(k_s) v_s^T) /
  clamp(phi(q).sum_s phi(k_s), min=1e-5). kappa_2 >= 1/2, so the clamp never acts on a row with
  a visible key (``eps`` 0); a row whose keys are all masked returns 0 / 1e-5 = zeros
  (``empty_rows="zeros"``);
* ``mask=`` (B, S), True = keep, zeroes the *features* of masked keys (and their values), so a
  masked key adds nothing to the denominator: declared ``key_padding``;
* d_v = d (one ``dim_head``): ``dv_equals_d``; T != S works (cross-attention);
* causal: ``causal=True`` needs ``pytorch-fast-transformers`` (its CUDA/C++ ``CausalDotProduct``);
  without it the constructor prints a notice and calls ``exit()`` (measured:
  :func:`causal_construction`). The causal path is not adapted (``causal="no"``), and the
  optional ``pytorch-fast-transformers`` is not installed (it compiles extensions against torch).

Card: ``taylor-series-TaylorSeriesLinearAttn``.

:data:`VARIANTS` names the card; :func:`card_facts` measures what it shows.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
from typing import Any

from verify.spec.variant import AttentionVariant

#: card name -> import spec of the variant's zero-argument factory
VARIANTS: dict[str, str] = {
    "taylor-series-TaylorSeriesLinearAttn": "verify.adapters.taylor_series:taylor_series_variant",
}
PACKAGE = "taylor-series-linear-attention"
#: the denominator clamp of the module's forward (its ``eps`` default)
DENOMINATOR_CLAMP = 1e-5

_MODULES: dict[tuple, Any] = {}


def _require() -> None:
    if importlib.util.find_spec("taylor_series_linear_attention") is None:
        raise ImportError(f"{PACKAGE} is not installed (pip install '.[adapters]')")


def _attention_module():
    """``taylor_series_linear_attention.attention`` (imported on first use).

    Raises:
        ImportError: the package (or its rotary-embedding-torch / jaxtyping) is missing.
    """
    import taylor_series_linear_attention.attention as tsla

    return tsla


def second_taylor_expansion(x, remove_even_power_dups: bool = False):
    """The package's feature map ``second_taylor_expansion`` (..., d) -> (..., 1 + d + d^2)
    (or 1 + d + d(d+1)/2 with ``remove_even_power_dups``): phi(x).phi(y) = kappa_2(x.y)."""
    return _attention_module().second_taylor_expansion(
        x, remove_even_power_dups=remove_even_power_dups
    )


def identity_module(heads: int, d: int, dtype, device=None, remove_even_power_dups=False):
    """The (cached) ``TaylorSeriesLinearAttn(2 H d, dim_head=d, heads=H, combine_heads=False)``
    with identity projections (``to_q`` = [I | 0], ``to_kv`` = I), eval mode, no gradients.

    Raises:
        ValueError: heads or d < 1. ImportError: the package is missing.
    """
    import torch

    if heads < 1 or d < 1:
        raise ValueError(f"heads, d: expected >= 1, got {heads}, {d}")
    key = (heads, d, dtype, str(device), bool(remove_even_power_dups))
    mod = _MODULES.get(key)
    if mod is None:
        e = heads * d
        mod = _attention_module().TaylorSeriesLinearAttn(
            2 * e,
            dim_head=d,
            heads=heads,
            causal=False,
            combine_heads=False,
            remove_even_power_dups=remove_even_power_dups,
        )
        mod = mod.to(dtype=dtype, device=device)
        eye = torch.eye(2 * e, dtype=dtype, device=device)
        with torch.no_grad():
            mod.to_q[0].weight.copy_(eye[:e])
            mod.to_kv[0].weight.copy_(eye)
        mod.requires_grad_(False)
        _MODULES[key] = mod.eval()
    return mod


def taylor_series_forward(
    q, k, v, *, causal: bool, key_padding_mask=None, remove_even_power_dups: bool = False
):
    """``TaylorSeriesLinearAttn(...)(x=[q | 0], context=[k | v], mask=key_padding_mask)``.

    Args:
        q: (B, T, H, d); k, v: (B, S, H, d) (d_v = d); float32 or float64.
        causal: must be False (see the module docstring).
        key_padding_mask: optional bool (B, S), True = keep (the module's ``mask``).
        remove_even_power_dups: the module's symmetric-basis option.

    Returns:
        (B, T, H, d) in q's dtype.

    Raises:
        ValueError: ``causal=True``; d_v != d. ImportError: the package is missing.
    """
    import torch

    if causal:
        raise ValueError(
            "causal: the causal TaylorSeriesLinearAttn needs pytorch-fast-transformers"
        )
    B, T, H, d = q.shape
    S = k.shape[1]
    if v.shape[-1] != d:
        raise ValueError(f"v: TaylorSeriesLinearAttn needs d_v == d, got {v.shape[-1]} != {d}")
    mod = identity_module(H, d, q.dtype, q.device, remove_even_power_dups)
    flat_q = q.reshape(B, T, H * d)
    x = torch.cat([flat_q, torch.zeros_like(flat_q)], dim=-1)
    context = torch.cat([k.reshape(B, S, H * d), v.reshape(B, S, H * d)], dim=-1)
    out = mod(x, mask=key_padding_mask, context=context)
    return out.view(B, T, H, d)


def taylor_series_variant() -> AttentionVariant:
    """``TaylorSeriesLinearAttn`` with identity projections: non-causal kernel linear attention
    with the Taylor-2 features, kappa_2(q.k / sqrt(d)) (zero-argument factory).

    Raises:
        ImportError: taylor-series-linear-attention is not installed.
    """
    _require()
    return AttentionVariant(
        name="taylor-series-TaylorSeriesLinearAttn",
        forward=taylor_series_forward,
        layout="BTHD",
        kernel="linear:taylor:2",
        causal="no",
        normalized=True,
        scale="default",
        feature_map=second_taylor_expansion,
        feature_scale="none",
        key_padding=True,
        dv_equals_d=True,
        empty_rows="zeros",
        dtypes=("float64", "float32"),
        description="taylor_series_linear_attention.TaylorSeriesLinearAttn, identity "
        "projections, cross-attention path, non-causal",
    )


# -- conventions measured for the card ----------------------------------------------------------
def _version() -> str:
    from importlib.metadata import version

    return version(PACKAGE)


def causal_construction() -> str:
    """What ``TaylorSeriesLinearAttn(8, causal=True)`` does here (the printed notice and the
    exception, or "constructed" when pytorch-fast-transformers is present)."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            _attention_module().TaylorSeriesLinearAttn(8, causal=True)
    except (SystemExit, NameError) as exc:  # ``exit()`` raises SystemExit
        return f"raises {type(exc).__name__} after printing: {buf.getvalue().strip()!r}"
    return "constructed"


def feature_kernel(pairs: int = 200, d: int = 3) -> dict[str, Any]:
    """phi(x).phi(y) of ``second_taylor_expansion`` against kappa_2(x.y) = 1 + x.y + (x.y)^2/2
    on random float64 pairs, both bases.

    Returns:
        {basis: {"features": m at d, "max_relative_deviation": r}}.
    """
    import torch

    gen = torch.Generator().manual_seed(0)
    x, y = (torch.randn(pairs, d, generator=gen, dtype=torch.float64) for _ in range(2))
    s = (x * y).sum(-1)
    kappa = 1 + s + s * s / 2
    out = {}
    for basis, dups in (("tensor", False), ("symmetric (remove_even_power_dups)", True)):
        fx, fy = second_taylor_expansion(x, dups), second_taylor_expansion(y, dups)
        dev = ((fx * fy).sum(-1) - kappa).abs() / kappa.abs()
        out[basis] = {"features": int(fx.shape[-1]), "max_relative_deviation": float(dev.max())}
    return out


def measure_conventions() -> dict[str, Any]:
    """What the module computes, measured (float64).

    Returns a dict of JSON values:
        ``feature_kernel``: :func:`feature_kernel`;
        ``reference_max_abs_diff``: the adapter against ``taylor_attention(order=2)`` at
        T = 3, S = 5, both bases, and with a key padding mask;
        ``empty_row``: what a row whose keys are all masked returns;
        ``causal_construction``: :func:`causal_construction`.
    """
    import torch

    from verify.adapters import measure
    from verify.attention import taylor_attention

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 2, 2, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(2, 5, 2, 2, generator=gen, dtype=torch.float64) for _ in range(2))
    kp = torch.ones(2, 5, dtype=torch.bool)
    kp[0, 1] = kp[1, 4] = False
    t = [x.transpose(1, 2) for x in (q, k, v)]
    diffs = {}
    for label, dups in (("tensor", False), ("symmetric", True)):
        o = taylor_series_forward(q, k, v, causal=False, remove_even_power_dups=dups)
        diffs[label] = float((o - taylor_attention(*t, order=2).transpose(1, 2)).abs().max())
    o = taylor_series_forward(q, k, v, causal=False, key_padding_mask=kp)
    ref = taylor_attention(*t, order=2, attn_mask=kp[:, None, None, :]).transpose(1, 2)
    diffs["key padding"] = float((o - ref).abs().max())
    o = taylor_series_forward(
        q, k, v, causal=False, key_padding_mask=torch.zeros(2, 5, dtype=torch.bool)
    )
    return {
        "feature_kernel": feature_kernel(),
        "reference_max_abs_diff": diffs,
        "empty_row": measure.row_kind(o[0, 0, 0], v[0, :, 0]),
        "causal_construction": causal_construction(),
    }


def card_facts(name: str, *, quick: bool = False, isolate: bool = True) -> dict[str, Any]:
    """What the taylor-series card shows besides the battery (JSON values).

    Returns:
        ``package`` ({"taylor-series-linear-attention": version}) and ``conventions``
        (:func:`measure_conventions`). ``quick`` and ``isolate`` are unused.

    Raises:
        KeyError: ``name`` is not in :data:`VARIANTS`. ImportError: the package is missing.
    """
    if name not in VARIANTS:
        raise KeyError(f"name: expected one of {sorted(VARIANTS)}, got {name!r}")
    _require()
    return {"package": {PACKAGE: _version()}, "conventions": measure_conventions()}


__all__ = [
    "DENOMINATOR_CLAMP",
    "VARIANTS",
    "card_facts",
    "causal_construction",
    "feature_kernel",
    "identity_module",
    "measure_conventions",
    "second_taylor_expansion",
    "taylor_series_forward",
    "taylor_series_variant",
]
