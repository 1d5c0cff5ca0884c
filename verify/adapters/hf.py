"""Hugging Face ``transformers`` 5.23 attention functions as checked variants.

Every decoder model of transformers calls one attention interface,
``f(module, query, key, value, attention_mask, scaling=..., dropout=0.0, **kwargs) ->
(output, weights)``, with masks built by ``transformers.masking_utils``. The adapters drive two
of them exactly as the models do:

* ``transformers.integrations.sdpa_attention.sdpa_attention_forward`` (SDPA with a boolean
  mask; kv heads expanded by ``repeat_kv`` when a mask is given);
* ``transformers.models.llama.modeling_llama.eager_attention_forward`` (matmul, additive float
  mask, ``softmax(..., dtype=torch.float32).to(query.dtype)``, matmul).

``module`` is a namespace with the attributes these functions read (``num_key_value_groups``
= H / G from the call's shapes, ``training=False``, ``is_causal``, ``layer_idx=0``);
``scaling`` is d^-1/2 as every model sets it. The mask is the library's:
``masking_utils.sdpa_mask`` (boolean, True = keep) or ``eager_mask`` (0 / finfo(dtype).min, with
the query's dtype as ``create_causal_mask`` passes it) of ``causal_mask_function``,
``sliding_window_causal_mask_function(W)`` or ``bidirectional_mask_function``, with the
checker's key padding mask as the 2-D ``attention_mask`` (1 = keep, the project's convention)
and ``allow_is_causal_skip=False`` (always materialized).

Conventions, measured by :func:`measure_conventions`:

* output layout (B, T, H, d_v) (the adapter transposes back to BHTD);
* grouped kv heads: ``repeat_kv`` is ``repeat_interleave`` -- query head h reads kv head
  h // (H / G), the project's convention: declared ``kv_heads`` = :data:`KV_HEADS`;
* T != S: the masks place the T queries at positions ``q_offset .. q_offset + T - 1`` of the
  S keys; with a cache they are the last T (``q_offset = S - T``), which the adapter passes for
  causal calls: causal and sliding-window calls are then **bottom-right** aligned
  (FlashAttention's rule). Non-causal calls use ``q_offset = 0``: ``bidirectional_mask_function``
  is ``q_idx >= 0``, so a negative offset (T > S) would hide query rows;
  HF's own shortcut for an unmasked causal prefill (``attention_mask=None, is_causal=True``)
  crops the keys to the first T and is **top-left** -- the two paths disagree at T < S;
* ``sliding_window=W`` (``sliding_window_overlay``: kv_idx > q_idx - W) is the window
  (W - 1, 0);
* eager computes the softmax in float32: a float64 call has float32 weights, declared
  ``compute_dtype="float32"`` on the eager cards;
* a row with no visible key: SDPA (boolean mask) returns zeros; eager returns NaN for float64
  (finfo(float64).min becomes -inf in the float32 softmax) and the uniform average for
  float32. ``empty_rows`` is not claimed.

Cards: ``hf-sdpa-gqa`` and ``hf-eager-gqa`` (kv_heads = 2, causal and not),
``hf-sdpa-sliding-window`` and ``hf-eager-sliding-window`` (sliding_window = :data:`SLIDING_WINDOW`,
window (W - 1, 0), kv_heads = 2, causal only, as Mistral's layers).

:data:`VARIANTS` names the cards; :func:`card_facts` measures what each card shows.
"""

from __future__ import annotations

import importlib.util
import types
from functools import cache
from typing import Any

from verify.spec.variant import AttentionVariant

#: card name -> import spec of the variant's zero-argument factory
VARIANTS: dict[str, str] = {
    "hf-sdpa-gqa": "verify.adapters.hf:sdpa_gqa_variant",
    "hf-eager-gqa": "verify.adapters.hf:eager_gqa_variant",
    "hf-sdpa-sliding-window": "verify.adapters.hf:sdpa_sliding_window_variant",
    "hf-eager-sliding-window": "verify.adapters.hf:eager_sliding_window_variant",
}
#: the kv-head count the cards claim (the GQA checks draw G = 2)
KV_HEADS = 2
#: the sliding window W of the sliding-window cards: window (W - 1, 0)
SLIDING_WINDOW = 3
PACKAGE = "transformers"
IMPLEMENTATIONS = ("sdpa", "eager")


def _require() -> None:
    if importlib.util.find_spec("transformers") is None:
        raise ImportError(f"{PACKAGE} is not installed (pip install '.[adapters]')")


@cache
def _hf() -> types.SimpleNamespace:
    """The transformers functions the adapters call (imported on first use: ~4 s).

    Raises:
        ImportError: transformers is not installed.
    """
    from transformers import masking_utils
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.models.llama.modeling_llama import eager_attention_forward

    return types.SimpleNamespace(
        masks=masking_utils,
        sdpa=sdpa_attention_forward,
        eager=eager_attention_forward,
    )


def attention_module(heads: int, kv_heads: int, *, causal: bool) -> types.SimpleNamespace:
    """The ``module`` argument: the attributes HF's attention functions read.

    Raises:
        ValueError: ``kv_heads`` does not divide ``heads``.
    """
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"k, v: {kv_heads} kv heads do not divide {heads} query heads")
    return types.SimpleNamespace(
        num_key_value_groups=heads // kv_heads, training=False, is_causal=causal, layer_idx=0
    )


def hf_mask(
    impl: str,
    *,
    batch: int,
    T: int,
    S: int,
    causal: bool,
    sliding_window: int | None = None,
    key_padding_mask=None,
    dtype=None,
    device=None,
):
    """The library's mask for a call: ``masking_utils.sdpa_mask`` (``impl="sdpa"``, bool,
    True = keep) or ``eager_mask`` (``impl="eager"``, 0 / finfo(dtype).min), shape (B, 1, T, S),
    causal queries at positions S - T .. S - 1 (``q_offset``; 0 for a non-causal mask).

    Args:
        causal: ``causal_mask_function`` (or ``sliding_window_causal_mask_function(W)``) when
            True, ``bidirectional_mask_function`` otherwise.
        sliding_window: W (causal only). key_padding_mask: optional (B, S) bool, True = keep.

    Raises:
        ValueError: an unknown ``impl``; a sliding window without ``causal``.
    """
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f"impl: expected one of {IMPLEMENTATIONS}, got {impl!r}")
    mu = _hf().masks
    if sliding_window is not None:
        if not causal:
            raise ValueError("causal: the sliding-window mask of transformers is causal")
        fn = mu.sliding_window_causal_mask_function(sliding_window)
    else:
        fn = mu.causal_mask_function if causal else mu.bidirectional_mask_function
    kw = dict(
        batch_size=batch,
        q_length=T,
        kv_length=S,
        # queries are the last T positions (a cache's cache_position) when causal; a
        # non-causal mask starts them at 0: bidirectional_mask_function is q_idx >= 0, so a
        # negative offset (T > S) would hide rows
        q_offset=S - T if causal else 0,
        mask_function=fn,
        attention_mask=key_padding_mask,
        device=device if device is not None else "cpu",
    )
    if impl == "sdpa":
        return mu.sdpa_mask(allow_is_causal_skip=False, **kw)
    return mu.eager_mask(dtype=dtype, **kw)


def hf_forward(
    q,
    k,
    v,
    *,
    causal: bool,
    attn_mask=None,
    key_padding_mask=None,
    impl: str = "sdpa",
    sliding_window: int | None = None,
):
    """HF's ``sdpa_attention_forward`` or ``eager_attention_forward`` with the library's mask.

    Args:
        q: (B, H, T, d); k: (B, G, S, d); v: (B, G, S, d_v), G dividing H; one float dtype.
        causal: causal mask function (bottom-right aligned: queries are the last T positions).
        attn_mask: optional bool (B, H, T, S), True = keep, and-ed into the library's mask.
        key_padding_mask: optional bool (B, S), True = keep (HF's 2-D ``attention_mask``).
        impl: ``"sdpa"`` or ``"eager"``. sliding_window: W (causal only) or None.

    Returns:
        (B, H, T, d_v) in q's dtype (HF returns (B, T, H, d_v): transposed back).

    Raises:
        ValueError: G does not divide H, an unknown impl, a sliding window without causal.
        ImportError: transformers is not installed.
    """
    import torch

    B, H, T, _ = q.shape
    S = k.shape[-2]
    module = attention_module(H, k.shape[1], causal=bool(causal))
    mask = hf_mask(
        impl,
        batch=B,
        T=T,
        S=S,
        causal=bool(causal),
        sliding_window=sliding_window,
        key_padding_mask=key_padding_mask,
        dtype=q.dtype,
        device=q.device,
    )
    if attn_mask is not None:
        if impl == "sdpa":
            mask = mask & attn_mask
        else:
            mask = torch.where(attn_mask, mask, torch.finfo(q.dtype).min)
    fn = _hf().sdpa if impl == "sdpa" else _hf().eager
    kw = {"is_causal": bool(causal)} if impl == "sdpa" else {}
    out, _ = fn(module, q, k, v, mask, scaling=q.shape[-1] ** -0.5, dropout=0.0, **kw)
    return out.transpose(1, 2)


def _forward(impl: str, sliding_window: int | None):
    def forward(q, k, v, *, causal: bool, attn_mask=None, key_padding_mask=None):
        return hf_forward(
            q,
            k,
            v,
            causal=causal,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            impl=impl,
            sliding_window=sliding_window,
        )

    forward.__name__ = f"hf_{impl}_forward" + ("_sliding_window" if sliding_window else "")
    forward.__doc__ = f":func:`hf_forward` with impl={impl!r}, sliding_window={sliding_window}."
    return forward


def _variant(impl: str, *, sliding: bool) -> AttentionVariant:
    _require()
    w = SLIDING_WINDOW if sliding else None
    name = f"hf-{impl}-" + ("sliding-window" if sliding else "gqa")
    fn = "sdpa_attention_forward" if impl == "sdpa" else "llama eager_attention_forward"
    extra = f", sliding_window={w}" if sliding else ""
    return AttentionVariant(
        name=name,
        forward=_forward(impl, w),
        layout="BHTD",
        kernel="softmax",
        causal="yes" if sliding else "both",
        causal_alignment="bottom-right",
        normalized=True,
        supports_mask=True,
        key_padding=True,
        kv_heads=KV_HEADS,
        window=(w - 1, 0) if sliding else None,
        compute_dtype="float32" if impl == "eager" else None,
        dtypes=("float64", "float32", "bfloat16"),
        description=f"transformers {fn} with masking_utils masks (kv_heads={KV_HEADS}{extra})",
    )


def sdpa_gqa_variant() -> AttentionVariant:
    """HF ``sdpa_attention_forward``, kv_heads = 2, causal and not (zero-argument factory).

    Raises:
        ImportError: transformers is not installed.
    """
    return _variant("sdpa", sliding=False)


def eager_gqa_variant() -> AttentionVariant:
    """HF (llama) ``eager_attention_forward``, kv_heads = 2, causal and not; float32 softmax.

    Raises:
        ImportError: transformers is not installed.
    """
    return _variant("eager", sliding=False)


def sdpa_sliding_window_variant() -> AttentionVariant:
    """HF ``sdpa_attention_forward`` with ``sliding_window_causal_mask_function(W)``: window
    (W - 1, 0), causal only.

    Raises:
        ImportError: transformers is not installed.
    """
    return _variant("sdpa", sliding=True)


def eager_sliding_window_variant() -> AttentionVariant:
    """HF ``eager_attention_forward`` with ``sliding_window_causal_mask_function(W)``: window
    (W - 1, 0), causal only; float32 softmax.

    Raises:
        ImportError: transformers is not installed.
    """
    return _variant("eager", sliding=True)


# -- conventions measured for the cards ---------------------------------------------------------
def _version() -> str:
    from importlib.metadata import version

    return version(PACKAGE)


def unmasked_causal_path_keys(T: int = 2, S: int = 4) -> list[list[int]]:
    """The keys each query sees when ``sdpa_attention_forward`` gets ``attention_mask=None,
    is_causal=True`` (HF's skip of a plain causal mask), measured with ``measure.visible_keys``
    at T < S: it crops the keys to the first T (top-left)."""
    from verify.adapters import measure

    def raw(q, k, v, *, causal):
        module = attention_module(q.shape[1], k.shape[1], causal=causal)
        out, _ = _hf().sdpa(module, q, k, v, None, scaling=1.0, is_causal=causal)
        return out.transpose(1, 2)

    return measure.visible_keys(raw, T, S, causal=True)


def measure_conventions(impl: str) -> dict[str, Any]:
    """What HF's ``impl`` attention does where conventions differ, measured (float64 unless
    said otherwise).

    Returns a dict of JSON values:
        ``output_shape``: the raw function's output shape for (B, H, T, d_v) = (1, 2, 3, 5);
        ``kv_heads``: ``measure.kv_head_mapping`` (H = 4, G = 2);
        ``alignment``: keys seen by a causal T = 2, S = 4 call through the adapter and the
        window they form; ``unmasked_causal_path``: :func:`unmasked_causal_path_keys` (sdpa);
        ``sliding_window``: {"W": W, "visible_keys" at T = S = 5, "window"};
        ``softmax_weights_float32``: the float64 call's returned weights are float32 numbers
        (eager; sdpa returns no weights);
        ``empty_row``: {dtype: what a row whose keys are all padded returns}.
    """
    import torch

    from verify.adapters import measure

    fwd = _forward(impl, None)
    out: dict[str, Any] = {}
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 3, 4, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 2, 4, 4, generator=gen, dtype=torch.float64)
    v = torch.randn(1, 2, 4, 5, generator=gen, dtype=torch.float64)
    module = attention_module(2, 2, causal=False)
    mask = hf_mask(impl, batch=1, T=3, S=4, causal=False, dtype=q.dtype)
    raw, weights = getattr(_hf(), impl)(module, q, k, v, mask, scaling=0.5)
    out["output_shape"] = {"(B, H, T, d_v)": [1, 2, 3, 5], "returned": list(raw.shape)}
    out["kv_heads"] = measure.kv_head_mapping(fwd)
    vis = measure.visible_keys(fwd, 2, 4, causal=True)
    out["alignment"] = {"visible_keys": vis, "window": list(measure.window_of(vis, 4) or [])}
    if impl == "sdpa":
        out["unmasked_causal_path"] = unmasked_causal_path_keys()
    vis = measure.visible_keys(_forward(impl, SLIDING_WINDOW), 5, 5, causal=True)
    out["sliding_window"] = {
        "W": SLIDING_WINDOW,
        "visible_keys": vis,
        "window": list(measure.window_of(vis, 5) or []),
    }
    if weights is not None:
        out["softmax_weights_float32"] = measure.weights_are_float32(weights)
    empty: dict[str, str] = {}
    for dt in (torch.float64, torch.float32):
        kp = torch.zeros(1, 4, dtype=torch.bool)
        o = fwd(q.to(dt), k.to(dt), v.to(dt), causal=False, key_padding_mask=kp)
        empty[str(dt).removeprefix("torch.")] = measure.row_kind(o[0, 0, 0], v[0, 0])
    out["empty_row"] = empty
    return out


def card_facts(name: str, *, quick: bool = False, isolate: bool = True) -> dict[str, Any]:
    """What a Hugging Face card shows besides the battery (JSON values, in card order).

    Returns:
        ``package`` ({"transformers": version}), ``function`` (the attention function's
        import path), ``conventions`` (:func:`measure_conventions` of the card's
        implementation). ``quick`` and ``isolate`` are unused (no check runs here).

    Raises:
        KeyError: ``name`` is not in :data:`VARIANTS`. ImportError: transformers is missing.
    """
    if name not in VARIANTS:
        raise KeyError(f"name: expected one of {sorted(VARIANTS)}, got {name!r}")
    _require()
    impl = name.split("-")[1]
    fn = getattr(_hf(), impl)
    return {
        "package": {PACKAGE: _version()},
        "function": f"{fn.__module__}.{fn.__name__}",
        "conventions": measure_conventions(impl),
    }


__all__ = [
    "KV_HEADS",
    "SLIDING_WINDOW",
    "VARIANTS",
    "attention_module",
    "card_facts",
    "eager_gqa_variant",
    "eager_sliding_window_variant",
    "hf_forward",
    "hf_mask",
    "measure_conventions",
    "sdpa_gqa_variant",
    "sdpa_sliding_window_variant",
    "unmasked_causal_path_keys",
]
