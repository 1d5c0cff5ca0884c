"""Hugging Face ``transformers`` 5.23 KV caches driven through the decode protocol
(``verify.spec.decode``; D20), and its packed-sequence mask.

A decoder layer of transformers runs attention over a cache in three library calls, which the
decode path makes exactly as ``MistralModel`` and ``MistralAttention`` do:

1. the mask, built *before* the cache is updated, from the cache's own sizes:
   ``masking_utils.create_causal_mask`` (or ``create_sliding_window_causal_mask``) with the
   model config, ``inputs_embeds`` of the segment's shape (read for B, n, dtype and device only)
   and ``past_key_values`` = the cache (``get_query_offset`` and ``get_mask_sizes`` place the
   queries and keys);
2. ``cache.update(k, v, layer_idx=0)``, which returns the keys and values to attend;
3. ``sdpa_attention_forward(module, q, k, v, mask, scaling=d^-1/2)`` (the module namespace of
   :func:`verify.adapters.hf.attention_module`).

The config is a one-layer ``MistralConfig`` with ``_attn_implementation = "sdpa"``: without a
sliding window ``DynamicCache(config)`` holds a ``DynamicLayer`` and ``StaticCache(config,
max_cache_len)`` a ``StaticLayer``; with ``sliding_window = W`` they hold a
``DynamicSlidingWindowLayer`` (it keeps the last W - 1 tokens and returns them with the new
ones) and a ``StaticSlidingWindowLayer`` (a rolling buffer of min(W, max_cache_len) slots). The
protocol's ``capacity`` keyword selects the static cache (``max_cache_len = capacity``, zero
initialised); without it the cache is the dynamic one. The state is the library's cache object
(updated in place, as models do; the checker passes each state back once). A segment of zero
tokens (the protocol's empty prefill) creates the cache without calling the library (a model
never runs on zero tokens). ``cache_seqlens`` is not taken: transformers places a batch's rows
at common positions (left padding), not each at its own.

``forward(q, k, v, *, causal)`` is the library's attention on the whole sequence
(:func:`verify.adapters.hf.hf_forward`, sdpa, with the sliding window when claimed), so every
decode property compares the cache path with the same library's full-sequence attention.

``packed(q, k, v, cu_seqlens, *, causal)`` (the ``hf-dynamic-cache`` card) is transformers'
packed-sequence format: position ids restarting at 0 at each document (``cu_seqlens``) given to
``create_causal_mask`` without a cache, which finds the documents
(``find_packed_sequence_indices``) and builds the block-diagonal causal mask; the slack rows
after ``cu_seqlens[-1]`` are left out of the call and returned as zeros. Causal only (the
library detects packing for causal masks only).

Cards: ``hf-dynamic-cache`` (kv_heads = 2 on the forward, causal only, decode with and without
capacity, packed) and ``hf-sliding-window-cache`` (``sliding_window`` = :data:`SLIDING_WINDOW`,
window (W - 1, 0), checked across the rolling buffer's wraparound by ``decode-window`` and,
with ``capacity``, ``decode-capacity``).
"""

from __future__ import annotations

import types
from functools import cache
from typing import Any

from verify.adapters.hf import KV_HEADS, SLIDING_WINDOW, _require, attention_module, hf_forward
from verify.spec.variant import AttentionVariant

#: card name -> import spec of the variant's zero-argument factory
VARIANTS: dict[str, str] = {
    "hf-dynamic-cache": "verify.adapters.hf_cache:dynamic_cache_variant",
    "hf-sliding-window-cache": "verify.adapters.hf_cache:sliding_window_cache_variant",
}
PACKAGE = "transformers"
#: the attention implementation the caches are driven with (the models' default)
IMPL = "sdpa"


@cache
def _lib() -> types.SimpleNamespace:
    """The transformers classes and functions the decode path calls (imported on first use).

    Raises:
        ImportError: transformers is not installed.
    """
    _require()
    from transformers import DynamicCache, MistralConfig, StaticCache
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

    return types.SimpleNamespace(
        DynamicCache=DynamicCache,
        StaticCache=StaticCache,
        MistralConfig=MistralConfig,
        sdpa=sdpa_attention_forward,
        causal_mask=create_causal_mask,
        sliding_mask=create_sliding_window_causal_mask,
    )


@cache
def model_config(sliding_window: int | None):
    """A one-layer ``MistralConfig`` with ``sliding_window`` and sdpa attention (the mask and
    cache functions read ``sliding_window``, ``layer_types`` and ``_attn_implementation``; the
    sizes are placeholders)."""
    cfg = _lib().MistralConfig(
        num_hidden_layers=1,
        sliding_window=sliding_window,
        hidden_size=8,
        intermediate_size=8,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=8,
    )
    cfg._attn_implementation = IMPL
    return cfg


class HFCacheDecode:
    """The decode path of a transformers cache (module docstring): ``prefill(q, k, v,
    state=None, capacity=None)`` and ``step(state, q, k, v)`` on (B, H, n, d) tensors.

    Args:
        sliding_window: W of the config, or None (full attention).
        static_slots: the ``max_cache_len`` of a static cache built when no ``capacity`` is
            given (None: a dynamic cache then; with a sliding window, W makes the classic
            rolling buffer of W slots).

    Subclasses change one library piece by overriding :meth:`new_cache` (the cache object) or
    :meth:`mask` (the mask of a segment).
    """

    def __init__(self, sliding_window: int | None = None, static_slots: int | None = None):
        self.sliding_window = sliding_window
        self.static_slots = static_slots

    @property
    def config(self):
        return model_config(self.sliding_window)

    def new_cache(self, capacity: int | None):
        """``StaticCache(config, max_cache_len=capacity)`` when ``capacity`` (or
        ``static_slots``) is given, else ``DynamicCache(config)``."""
        lib = _lib()
        slots = capacity if capacity is not None else self.static_slots
        if slots is not None:
            return lib.StaticCache(config=self.config, max_cache_len=int(slots))
        return lib.DynamicCache(config=self.config)

    def mask(self, cache_obj, q):
        """The library's mask for the segment q (B, H, n, d), from the cache before its update."""
        lib = _lib()
        embeds = q.new_empty(q.shape[0], q.shape[2], 1)
        fn = lib.sliding_mask if self.sliding_window is not None else lib.causal_mask
        return fn(
            config=self.config, inputs_embeds=embeds, attention_mask=None, past_key_values=cache_obj
        )

    def attend(self, cache_obj, q, k, v):
        """Mask, ``cache.update``, ``sdpa_attention_forward``: (B, H, n, d_v) in q's dtype."""
        if q.shape[2] == 0:
            return q.new_zeros(*q.shape[:3], v.shape[-1])
        mask = self.mask(cache_obj, q)
        keys, values = cache_obj.update(k, v, 0)
        module = attention_module(q.shape[1], keys.shape[1], causal=True)
        out, _ = _lib().sdpa(module, q, keys, values, mask, scaling=q.shape[-1] ** -0.5)
        return out.transpose(1, 2)

    def prefill(self, q, k, v, state=None, capacity=None):
        """A segment of n >= 0 tokens appended to ``state`` (a new cache when None: static with
        ``capacity`` slots, else dynamic). Returns (o (B, H, n, d_v), the cache)."""
        if state is None:
            state = self.new_cache(capacity)
        return self.attend(state, q, k, v), state

    def step(self, state, q_new, k_new, v_new):
        """n >= 1 new tokens appended to the cache ``state``: (o (B, H, n, d_v), the cache)."""
        return self.attend(state, q_new, k_new, v_new), state


# -- packed sequences ---------------------------------------------------------------------------
def packed_position_ids(cu_seqlens):
    """(1, cu_seqlens[-1]) int64 position ids restarting at 0 at each document of
    ``cu_seqlens`` (transformers' packed-sequence format)."""
    import torch

    cu = [int(c) for c in cu_seqlens.tolist()]
    pos = torch.zeros(cu[-1], dtype=torch.int64)
    for a, b in zip(cu[:-1], cu[1:]):
        pos[a:b] = torch.arange(b - a)
    return pos[None]


def hf_packed(q, k, v, cu_seqlens, *, causal: bool):
    """transformers' packed-sequence attention in FlashAttention's varlen layout.

    Args:
        q, k: (total, H, d); v: (total, H, d_v); cu_seqlens: int32 (B + 1,) document offsets.
        causal: must be True (the library finds packed documents for causal masks only).

    Returns:
        (total, H, d_v) in q's dtype; rows from ``cu_seqlens[-1]`` on (slack) are zeros.

    Raises:
        ValueError: ``causal=False``. ImportError: transformers is missing.
    """
    if not causal:
        raise ValueError("causal: transformers detects packed documents for causal masks only")
    lib = _lib()
    end = int(cu_seqlens[-1])
    out = q.new_zeros(*q.shape[:-1], v.shape[-1])
    if end == 0:
        return out
    qb, kb, vb = (x[:end].transpose(0, 1)[None] for x in (q, k, v))
    pos = packed_position_ids(cu_seqlens)
    mask = lib.causal_mask(
        config=model_config(None),
        inputs_embeds=q.new_empty(1, end, 1),
        attention_mask=None,
        past_key_values=None,
        position_ids=pos,
    )
    module = attention_module(qb.shape[1], kb.shape[1], causal=True)
    o, _ = lib.sdpa(module, qb, kb, vb, mask, scaling=q.shape[-1] ** -0.5)
    out[:end] = o[0]
    return out


# -- variants -----------------------------------------------------------------------------------
def _forward(sliding_window: int | None):
    def forward(q, k, v, *, causal: bool):
        return hf_forward(q, k, v, causal=causal, impl=IMPL, sliding_window=sliding_window)

    forward.__name__ = "hf_sdpa_forward" + ("_sliding_window" if sliding_window else "")
    forward.__doc__ = f"verify.adapters.hf.hf_forward(impl='sdpa', sliding_window={sliding_window})"
    return forward


def dynamic_cache_variant() -> AttentionVariant:
    """``DynamicCache`` / ``StaticCache`` (with ``capacity``) of a full-attention config, sdpa;
    the packed-sequence mask; kv_heads = 2 on the forward; causal only.

    Raises:
        ImportError: transformers is not installed.
    """
    _lib()
    return AttentionVariant(
        name="hf-dynamic-cache",
        dtypes=("float64", "float32", "bfloat16"),
        forward=_forward(None),
        kernel="softmax",
        causal="yes",
        causal_alignment="bottom-right",
        kv_heads=KV_HEADS,
        decode=HFCacheDecode(None),
        packed=hf_packed,
        description="transformers DynamicCache/StaticCache + create_causal_mask + "
        f"sdpa_attention_forward (decode), packed position ids (kv_heads={KV_HEADS})",
    )


def sliding_window_cache_variant() -> AttentionVariant:
    """``DynamicSlidingWindowLayer`` / ``StaticSlidingWindowLayer`` (with ``capacity``) of a
    config with ``sliding_window`` = W, sdpa; window (W - 1, 0); causal only.

    Raises:
        ImportError: transformers is not installed.
    """
    _lib()
    W = SLIDING_WINDOW
    return AttentionVariant(
        name="hf-sliding-window-cache",
        dtypes=("float64", "float32", "bfloat16"),
        forward=_forward(W),
        kernel="softmax",
        causal="yes",
        causal_alignment="bottom-right",
        kv_heads=KV_HEADS,
        window=(W - 1, 0),
        decode=HFCacheDecode(W),
        description="transformers DynamicCache/StaticCache (sliding-window layers, "
        f"sliding_window={W}) + create_sliding_window_causal_mask + sdpa_attention_forward",
    )


# -- what the cards show ------------------------------------------------------------------------
def cache_layers() -> dict[str, Any]:
    """The layer classes each card's caches hold, and the slots each keeps after T tokens
    (measured: the shape of the layer's keys after T single-token updates, T = 1..2W + 1)."""
    import torch

    out: dict[str, Any] = {}
    for name, w in (("hf-dynamic-cache", None), ("hf-sliding-window-cache", SLIDING_WINDOW)):
        dec = HFCacheDecode(w)
        row: dict[str, Any] = {}
        for how, cap in (("dynamic", None), ("static (capacity 8)", 8)):
            c = dec.new_cache(cap)
            kept = []
            for _ in range(2 * SLIDING_WINDOW + 1):
                t = torch.zeros(1, 1, 1, 2, dtype=torch.float64)
                dec.attend(c, t, t, t)
                kept.append(int(c.layers[0].keys.shape[-2]))
            row[how] = {"layer": type(c.layers[0]).__name__, "slots_after_T_tokens": kept}
        out[name] = row
    return out


def card_facts(name: str, *, quick: bool = False, isolate: bool = True) -> dict[str, Any]:
    """What a transformers cache card shows besides the battery (JSON values).

    Returns:
        ``package`` ({"transformers": version}) and ``cache_layers`` (:func:`cache_layers`, the
        card's row). ``quick`` and ``isolate`` are unused (no check runs here).

    Raises:
        KeyError: ``name`` is not in :data:`VARIANTS`. ImportError: transformers is missing.
    """
    if name not in VARIANTS:
        raise KeyError(f"name: expected one of {sorted(VARIANTS)}, got {name!r}")
    from importlib.metadata import version

    _lib()
    return {"package": {PACKAGE: version(PACKAGE)}, "cache_layers": cache_layers()[name]}


__all__ = [
    "VARIANTS",
    "HFCacheDecode",
    "cache_layers",
    "card_facts",
    "dynamic_cache_variant",
    "hf_packed",
    "model_config",
    "packed_position_ids",
    "sliding_window_cache_variant",
]
