"""x-transformers 2.31 ``x_transformers.attend.Attend`` (lucidrains) as checked variants.

``Attend(flash=False)`` is the attention core of every x-transformers layer: it takes q (B, H, T,
d), k and v (B, G, S, d | d_v) and returns ``(out, intermediates)``. Read from its source
(``x_transformers/attend.py``) and measured (:func:`measure_conventions`):

* scores ``einsum(q, k) * scale`` with ``scale`` default d^-1/2; softmax over keys; the
  per-call ``causal=`` keyword overrides the constructor's ``causal`` (one module serves both);
* causal with T != S is **bottom-right** aligned (``ones(T, S).triu(S - T + 1)`` masked), and a
  single query (T = 1) switches causality off, which the bottom-right rule gives anyway;
* ``mask=``: (B, S) key padding or a 4-D mask broadcastable to (B, H, T, S), True = keep (the
  project's convention, no flip): declared ``key_padding`` and ``supports_mask``; masked scores
  are filled with -finfo.max, not -inf;
* the softmax runs with ``dtype=torch.float32`` (unless ``qk_norm``) and the weights are cast
  back: a float64 call has float32 weights, declared ``compute_dtype="float32"``;
* grouped kv heads (G < H) are expanded with ``einops.repeat('b kvh n d -> b (r kvh) n d')``,
  a **tiling**: query head h reads kv head h % G, not SDPA's / the project's h // (H / G)
  (``repeat_interleave``). ``kv_heads`` is therefore not claimed (the claim means
  repeat_interleave); the card states the measured mapping;
* rows with no visible key: a row emptied by ``mask`` is zeroed (``row_is_entirely_masked``),
  a row emptied by causality (T > S) is not: float64 gives NaN (-finfo(float64).max becomes
  -inf in the float32 softmax), float32 the uniform average of v. ``empty_rows`` is not claimed;
* ``softclamp_logits=True, logit_softclamp_value=C``: C tanh(s / C) on the scaled scores
  **after** ``attn_bias`` is added and before the mask. FlashAttention caps before the bias; the
  two agree when no bias is passed, which is how the adapter calls it (the card measures the
  order with a bias).

Cards: ``x-transformers-Attend`` (plain) and ``x-transformers-Attend-softclamp`` (C =
:data:`SOFTCLAMP`, Grok-1's attention logit cap).

:data:`VARIANTS` names the cards; :func:`card_facts` measures what each card shows.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from verify.spec.variant import AttentionVariant

#: card name -> import spec of the variant's zero-argument factory
VARIANTS: dict[str, str] = {
    "x-transformers-Attend": "verify.adapters.xtransformers:attend_variant",
    "x-transformers-Attend-softclamp": "verify.adapters.xtransformers:attend_softclamp_variant",
}
#: the logit softclamp value of the softclamp card (x-transformers' default is 50)
SOFTCLAMP = 30.0
PACKAGE = "x-transformers"

_MODULES: dict[float | None, Any] = {}


def _require() -> None:
    if importlib.util.find_spec("x_transformers") is None:
        raise ImportError(f"{PACKAGE} is not installed (pip install '.[adapters]')")


def attend_module(softclamp: float | None = None):
    """The (cached) ``Attend(flash=False)``, with ``softclamp_logits=True,
    logit_softclamp_value=softclamp`` when ``softclamp`` is given.

    Raises:
        ImportError: x-transformers is not installed. ValueError: softclamp <= 0.
    """
    if softclamp is not None and not softclamp > 0:
        raise ValueError(f"softclamp: expected a positive number, got {softclamp!r}")
    mod = _MODULES.get(softclamp)
    if mod is None:
        from x_transformers.attend import Attend

        if softclamp is None:
            mod = Attend(flash=False)
        else:
            mod = Attend(flash=False, softclamp_logits=True, logit_softclamp_value=softclamp)
        _MODULES[softclamp] = mod.eval()
    return mod


def attend_forward(q, k, v, *, causal: bool, attn_mask=None, key_padding_mask=None, softclamp=None):
    """``Attend(flash=False)(q, k, v, mask=..., causal=causal)[0]``.

    Args:
        q: (B, H, T, d); k: (B, G, S, d); v: (B, G, S, d_v), G dividing H (x-transformers
            tiles kv heads: query head h reads kv head h % G); one float dtype.
        causal: Attend's per-call ``causal`` (bottom-right aligned when T != S).
        attn_mask: optional bool (B, H, T, S), True = keep.
        key_padding_mask: optional bool (B, S), True = keep (Attend's ``mask`` as given).
        softclamp: the module's logit softclamp value (None: off).

    Returns:
        (B, H, T, d_v) in q's dtype (softmax weights computed in float32).

    Raises:
        ImportError: x-transformers missing; whatever Attend raises.
    """
    mask = key_padding_mask
    if attn_mask is not None:
        mask = attn_mask if mask is None else attn_mask & mask[:, None, None, :]
    out, _ = attend_module(softclamp)(q, k, v, mask=mask, causal=bool(causal))
    return out


def _forward_softclamp(q, k, v, *, causal: bool, attn_mask=None, key_padding_mask=None):
    return attend_forward(
        q,
        k,
        v,
        causal=causal,
        attn_mask=attn_mask,
        key_padding_mask=key_padding_mask,
        softclamp=SOFTCLAMP,
    )


_CLAIMS: dict[str, Any] = dict(
    layout="BHTD",
    kernel="softmax",
    causal="both",
    causal_alignment="bottom-right",
    normalized=True,
    supports_mask=True,
    key_padding=True,
    compute_dtype="float32",
    dtypes=("float64", "float32", "bfloat16"),
)


def attend_variant() -> AttentionVariant:
    """x-transformers ``Attend(flash=False)`` (zero-argument factory).

    Raises:
        ImportError: x-transformers is not installed.
    """
    _require()
    return AttentionVariant(
        name="x-transformers-Attend",
        forward=attend_forward,
        description="x_transformers.attend.Attend(flash=False): per-call causal, key mask "
        "True = keep, float32 softmax",
        **_CLAIMS,
    )


def attend_softclamp_variant() -> AttentionVariant:
    """x-transformers ``Attend(flash=False, softclamp_logits=True,
    logit_softclamp_value=SOFTCLAMP)``: declared ``softcap=SOFTCLAMP``.

    Raises:
        ImportError: x-transformers is not installed.
    """
    _require()
    return AttentionVariant(
        name="x-transformers-Attend-softclamp",
        forward=_forward_softclamp,
        softcap=SOFTCLAMP,
        description=f"x_transformers.attend.Attend(flash=False, softclamp_logits=True, "
        f"logit_softclamp_value={SOFTCLAMP:g})",
        **_CLAIMS,
    )


# -- conventions measured for the cards ---------------------------------------------------------
def _version() -> str:
    from importlib.metadata import version

    return version(PACKAGE)


def softclamp_order(cap: float = 2.0) -> dict[str, Any]:
    """Where Attend's softclamp sits relative to an additive ``attn_bias``, measured.

    One call (B = 1, H = 2, T = S = 4, d = 4, float64, scores scaled up so the cap bites) with an
    ALiBi bias -m_h |t - s| passed as ``attn_bias``, compared with the reference softmax in
    FlashAttention's order (cap, then bias) and with the cap applied to scores + bias.

    Returns:
        ``{"max_abs_diff": {"cap then bias (FlashAttention)": x, "bias then cap": y},
        "order": "bias then cap" | "cap then bias"}``.
    """
    import torch

    from verify.attention import softmax_attention

    gen = torch.Generator().manual_seed(1)
    q, k, v = (4 * torch.randn(1, 2, 4, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    slopes = [0.5, 0.25]
    pos = torch.arange(4)
    dist = (pos[:, None] - pos[None, :]).abs().double()
    bias = -torch.tensor(slopes, dtype=torch.float64).view(2, 1, 1) * dist
    mod = attend_module(cap)
    out, _ = mod(q, k, v, attn_bias=bias)
    flash = softmax_attention(q, k, v, softcap=cap, alibi_slopes=slopes)
    scores = (q @ k.transpose(-1, -2)) * 4**-0.5 + bias
    after = torch.softmax(cap * torch.tanh(scores / cap), -1) @ v
    diffs = {
        "cap then bias (FlashAttention)": float((out - flash).abs().max()),
        "bias then cap": float((out - after).abs().max()),
    }
    order = min(diffs, key=diffs.get)
    return {"max_abs_diff": diffs, "order": order.split(" (")[0]}


def measure_conventions() -> dict[str, Any]:
    """What Attend does where conventions differ between libraries, measured (float64 unless
    said otherwise).

    Returns a dict of JSON values:
        ``alignment``: keys seen by each query of a causal T = 2, S = 4 call, and the
        FlashAttention window they form (``measure.window_of``);
        ``single_query_causal``: keys seen by a causal T = 1, S = 3 call;
        ``kv_heads``: ``measure.kv_head_mapping`` (H = 4, G = 2);
        ``softmax_weights_float32``: the float64 call's post-softmax weights are float32 numbers;
        ``float64_max_abs_diff``: a float64 call against the float64 reference;
        ``empty_row``: {"key mask, float64", "causal T > S, float64", "causal T > S, float32"}:
        what a row with no visible key returns (``measure.row_kind``);
        ``softclamp_order``: :func:`softclamp_order`.
    """
    import torch

    from verify.adapters import measure
    from verify.attention import softmax_attention

    out: dict[str, Any] = {}
    vis = measure.visible_keys(attend_forward, 2, 4, causal=True)
    out["alignment"] = {"visible_keys": vis, "window": list(measure.window_of(vis, 4) or [])}
    out["single_query_causal"] = measure.visible_keys(attend_forward, 1, 3, causal=True)
    out["kv_heads"] = measure.kv_head_mapping(attend_forward)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    o, inter = attend_module()(q, k, v)
    out["softmax_weights_float32"] = measure.weights_are_float32(inter.post_softmax_attn)
    out["float64_max_abs_diff"] = float((o - softmax_attention(q, k, v)).abs().max())
    empty: dict[str, str] = {}
    kp = torch.ones(2, 5, dtype=torch.bool)
    kp[1] = False
    o = attend_forward(q, k, v, causal=False, key_padding_mask=kp)
    empty["key mask, float64"] = measure.row_kind(o[1, 0, 0], v[1, 0])
    for dt in (torch.float64, torch.float32):
        q2, k2, v2 = (x.to(dt) for x in (q, k[:, :, :2], v[:, :, :2]))
        o = attend_forward(q2, k2, v2, causal=True)  # T = 5 > S = 2: rows 0-2 see nothing
        empty[f"causal T > S, {str(dt).removeprefix('torch.')}"] = measure.row_kind(
            o[0, 0, 0], v2[0, 0]
        )
    out["empty_row"] = empty
    out["softclamp_order"] = softclamp_order()
    return out


def card_facts(name: str, *, quick: bool = False, isolate: bool = True) -> dict[str, Any]:
    """What an x-transformers card shows besides the battery (JSON values, in card order).

    Returns:
        ``package`` ({"x-transformers": version}), ``conventions`` (:func:`measure_conventions`)
        and, for the softclamp card, ``softclamp``: the value and the constructor call.
        ``quick`` and ``isolate`` are unused (no check runs here).

    Raises:
        KeyError: ``name`` is not in :data:`VARIANTS`.
        ImportError: x-transformers is not installed.
    """
    if name not in VARIANTS:
        raise KeyError(f"name: expected one of {sorted(VARIANTS)}, got {name!r}")
    _require()
    facts: dict[str, Any] = {"package": {PACKAGE: _version()}}
    facts["conventions"] = measure_conventions()
    if name.endswith("softclamp"):
        facts["softclamp"] = {
            "value": SOFTCLAMP,
            "constructor": "Attend(flash=False, softclamp_logits=True, "
            f"logit_softclamp_value={SOFTCLAMP:g})",
        }
    return facts


__all__ = [
    "SOFTCLAMP",
    "VARIANTS",
    "attend_forward",
    "attend_module",
    "attend_softclamp_variant",
    "attend_variant",
    "card_facts",
    "measure_conventions",
    "softclamp_order",
]
