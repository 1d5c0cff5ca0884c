"""Black-box measurements the modern adapters' cards share: which keys each query sees, which kv
head each query head uses, what an empty row returns, and which FlashAttention window (if any) a
visibility pattern is.

Every function calls a forward in the checker's signature ``forward(q, k, v, *, causal, ...)``
on small float64 inputs built so the answer is read off the output exactly:

* visibility: q = k = 0 (every score equal), v = the S x S identity, so row t of the output is
  the uniform distribution over the keys query t sees (any kernel with kappa(0) > 0);
* kv head mapping: v of kv head g is the constant g + 1, so a normalized output of query head h
  is the index (+ 1) of the kv head it reads.

They are measurements for the cards (``card_facts``), not checks: the battery decides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verify.probes.positional import window_of  # noqa: F401 (the adapters' import path)


def _to_layout(x, layout: str):
    return x.transpose(1, 2) if layout == "BTHD" else x


def visible_keys(
    forward: Callable[..., Any],
    T: int,
    S: int,
    *,
    causal: bool,
    layout: str = "BHTD",
    **kwargs: Any,
) -> list[list[int]]:
    """The keys each query sees, measured: ``[[s, ...] for t in range(T)]``.

    Calls ``forward`` once with B = H = 1, q = k = 0 of head dimension S and v the S x S
    identity (d_v = d = S, so variants restricted to d_v = d run too); key s counts as visible
    from query t when output[t, s] > 0 (uniform weights over the visible keys).

    Args:
        forward: the adapter's forward. T, S: lengths (>= 1). causal: passed through.
        layout: the forward's layout (``BHTD`` or ``BTHD``). kwargs: passed to ``forward``.

    Returns:
        one sorted list of key indices per query (empty for a row that returns zeros; a NaN
        row counts as seeing nothing).

    Raises:
        Whatever ``forward`` raises.
    """
    import torch

    q = torch.zeros(1, 1, T, S, dtype=torch.float64)
    k = torch.zeros(1, 1, S, S, dtype=torch.float64)
    v = torch.eye(S, dtype=torch.float64).view(1, 1, S, S)
    args = (_to_layout(x, layout) for x in (q, k, v))
    out = _to_layout(forward(*args, causal=causal, **kwargs), layout)[0, 0]
    return [[s for s in range(S) if bool(out[t, s] > 0)] for t in range(T)]


def kv_head_mapping(
    forward: Callable[..., Any],
    *,
    heads: int = 4,
    kv_heads: int = 2,
    layout: str = "BHTD",
    d: int = 2,
    **kwargs: Any,
) -> dict[str, Any]:
    """Which kv head each query head reads, measured on a grouped call (G = ``kv_heads``).

    v of kv head g is the constant g + 1 (d_v = d), q and k random: the output of query head h
    is the constant of its kv head whatever the weights are (they sum to 1).

    Returns:
        ``{"kv_head_of_query_head": [g_0, ..., g_{H-1}], "convention": c}`` with c
        ``"repeat_interleave"`` (h // (H/G), SDPA's enable_gqa, the project's claim),
        ``"repeat"`` (h % G, a tiling), or ``"other"``; or ``{"error": message}`` when the
        forward rejects G < H.
    """
    import torch

    gen = torch.Generator().manual_seed(0)
    T = S = 3
    q = torch.randn(1, heads, T, d, generator=gen, dtype=torch.float64)
    k = torch.randn(1, kv_heads, S, d, generator=gen, dtype=torch.float64)
    v = torch.arange(1, kv_heads + 1, dtype=torch.float64).view(1, kv_heads, 1, 1)
    v = v.expand(1, kv_heads, S, d).contiguous()
    try:
        out = forward(*(_to_layout(x, layout) for x in (q, k, v)), causal=False, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the finding is the message
        return {"error": f"{type(exc).__name__}: {exc}"}
    out = _to_layout(out, layout)[0, :, 0, 0]
    got = [round(float(x)) - 1 for x in out]
    group = heads // kv_heads
    if got == [h // group for h in range(heads)]:
        conv = "repeat_interleave"
    elif got == [h % kv_heads for h in range(heads)]:
        conv = "repeat"
    else:
        conv = "other"
    return {"kv_head_of_query_head": got, "convention": conv}


def row_kind(row, values=None) -> str:
    """What an output row is: ``NaN``, ``partly NaN``, ``zeros``, ``uniform`` (the mean of
    ``values`` (S, d_v), when given) or ``finite, nonzero``."""
    import torch

    if torch.isnan(row).all():
        return "NaN"
    if torch.isnan(row).any():
        return "partly NaN"
    if (row == 0).all():
        return "zeros"
    if values is not None and torch.allclose(row.double(), values.double().mean(0), rtol=1e-3):
        return "uniform"
    return "finite, nonzero"


def weights_are_float32(w) -> bool:
    """Every entry of the float64 tensor ``w`` is a float32 number (it went through float32)."""
    return bool((w.float().double() == w).all())


__all__ = ["kv_head_mapping", "row_kind", "visible_keys", "weights_are_float32", "window_of"]
