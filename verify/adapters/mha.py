"""``torch.nn.MultiheadAttention`` (torch 2.13) with identity projections as checked variants.

``MultiheadAttention(E, H, batch_first=True)`` with ``in_proj_weight`` = three stacked E x E
identities, ``out_proj.weight`` = identity and every bias 0 computes plain multi-head attention
of its inputs: q, k, v in (B, T, H, d) are the module's (B, T, E) inputs with E = H d, viewed,
and its (B, T, E) output viewed back -- the variants' layout is ``BTHD``, no copy. The identity
products are exact for finite inputs (x * 1 plus zeros); an infinite input spreads NaN into the
other coordinates of its token (0 * inf), which the module's own projections would do too.

Restrictions and conventions (torch sources, ``F.multi_head_attention_forward``; measured by
:func:`measure_conventions`):

* d_v = d (``vdim`` other than E needs a non-square value projection): ``dv_equals_d``; H is
  the module's, so the adapter builds one module per (E, H, dtype) from the call's shapes; kv
  heads are the query heads (no GQA); T != S works (cross-attention);
* scale 1/sqrt(d) (head dimension);
* ``key_padding_mask`` and boolean ``attn_mask`` use **True = ignore**; the adapter flips the
  checker's True = keep masks;
* causality is only a hint: ``is_causal=True`` requires an ``attn_mask`` and, with
  ``need_weights=False`` and no key padding, drops it and calls SDPA with ``is_causal=True``
  (top-left when T != S). The adapter passes the top-left causal mask (with the hint when it is
  the whole mask), so causal calls are **top-left** aligned on both paths;
* ``need_weights=False`` runs SDPA (a float -inf mask); ``need_weights=True`` runs
  ``baddbmm`` + softmax + ``bmm`` in the input dtype and returns the weights. A row with no
  visible key returns zeros without weights and NaN with them (``empty_rows`` is claimed
  accordingly: ``zeros`` and ``nan``).

Cards: ``torch-MultiheadAttention`` (need_weights=False) and ``torch-MultiheadAttention-weights``
(need_weights=True).

:data:`VARIANTS` names the cards; :func:`card_facts` measures what each card shows.
"""

from __future__ import annotations

from typing import Any

from verify.spec.variant import AttentionVariant

#: card name -> import spec of the variant's zero-argument factory
VARIANTS: dict[str, str] = {
    "torch-MultiheadAttention": "verify.adapters.mha:mha_variant",
    "torch-MultiheadAttention-weights": "verify.adapters.mha:mha_weights_variant",
}

_MODULES: dict[tuple, Any] = {}


def identity_mha(embed_dim: int, heads: int, dtype, device=None):
    """The (cached) ``MultiheadAttention(embed_dim, heads, batch_first=True)`` with identity
    projections and zero biases, in eval mode, parameters without gradients.

    Raises:
        ValueError: ``heads`` does not divide ``embed_dim``.
    """
    import torch

    if embed_dim < 1 or heads < 1 or embed_dim % heads:
        raise ValueError(f"heads: {heads} does not divide embed_dim {embed_dim}")
    key = (embed_dim, heads, dtype, str(device))
    mod = _MODULES.get(key)
    if mod is None:
        mod = torch.nn.MultiheadAttention(
            embed_dim, heads, batch_first=True, dtype=dtype, device=device
        )
        eye = torch.eye(embed_dim, dtype=dtype, device=device)
        with torch.no_grad():
            mod.in_proj_weight.copy_(torch.cat([eye, eye, eye]))
            mod.in_proj_bias.zero_()
            mod.out_proj.weight.copy_(eye)
            mod.out_proj.bias.zero_()
        mod.requires_grad_(False)
        _MODULES[key] = mod.eval()
    return mod


def mha_forward(
    q, k, v, *, causal: bool, attn_mask=None, key_padding_mask=None, need_weights: bool = False
):
    """``MultiheadAttention(q, k, v, ...)`` with identity projections.

    Args:
        q: (B, T, H, d); k, v: (B, S, H, d) (d_v = d); float32 or float64.
        causal: pass the top-left causal mask (as ``attn_mask``, True = ignore, with the
            ``is_causal`` hint when it is the whole mask).
        attn_mask: optional bool (B, H, T, S), True = keep (flipped, reshaped to (B H, T, S)).
        key_padding_mask: optional bool (B, S), True = keep (flipped: MHA's True = ignore).
        need_weights: the module's ``need_weights`` (the weights are discarded).

    Returns:
        (B, T, H, d) in q's dtype.

    Raises:
        ValueError: v's last dimension differs from d. Whatever the module raises.
    """
    from verify.spec.visibility import visible

    B, T, H, d = q.shape
    S = k.shape[1]
    if v.shape[-1] != d:
        raise ValueError(f"v: MultiheadAttention needs d_v == d, got d_v={v.shape[-1]}, d={d}")
    mod = identity_mha(H * d, H, q.dtype, q.device)
    keep = None
    if attn_mask is not None:
        keep = attn_mask.expand(B, H, T, S).reshape(B * H, T, S)
    if causal:
        tril = visible(T, S, causal=True, alignment="top-left", device=q.device)
        keep = tril if keep is None else keep & tril
    out, _ = mod(
        q.reshape(B, T, H * d),
        k.reshape(B, S, H * d),
        v.reshape(B, S, H * d),
        key_padding_mask=None if key_padding_mask is None else ~key_padding_mask,
        need_weights=need_weights,
        attn_mask=None if keep is None else ~keep,
        is_causal=bool(causal) and attn_mask is None,
    )
    return out.view(B, T, H, d)


def _forward_weights(q, k, v, *, causal: bool, attn_mask=None, key_padding_mask=None):
    return mha_forward(
        q,
        k,
        v,
        causal=causal,
        attn_mask=attn_mask,
        key_padding_mask=key_padding_mask,
        need_weights=True,
    )


_CLAIMS: dict[str, Any] = dict(
    layout="BTHD",
    kernel="softmax",
    causal="both",
    causal_alignment="top-left",
    normalized=True,
    supports_mask=True,
    key_padding=True,
    dv_equals_d=True,
    dtypes=("float64", "float32", "bfloat16"),
)


def mha_variant() -> AttentionVariant:
    """``MultiheadAttention`` with identity projections, ``need_weights=False`` (SDPA path)."""
    return AttentionVariant(
        name="torch-MultiheadAttention",
        forward=mha_forward,
        empty_rows="zeros",
        description="torch.nn.MultiheadAttention, identity projections, need_weights=False",
        **_CLAIMS,
    )


def mha_weights_variant() -> AttentionVariant:
    """``MultiheadAttention`` with identity projections, ``need_weights=True`` (explicit
    softmax path)."""
    return AttentionVariant(
        name="torch-MultiheadAttention-weights",
        forward=_forward_weights,
        empty_rows="nan",
        description="torch.nn.MultiheadAttention, identity projections, need_weights=True",
        **_CLAIMS,
    )


# -- conventions measured for the cards ---------------------------------------------------------
def measure_conventions(need_weights: bool) -> dict[str, Any]:
    """What ``MultiheadAttention`` does where conventions differ, measured (float64).

    Returns a dict of JSON values:
        ``key_padding_true_means``: "ignore" when the module's ``key_padding_mask`` True at a key
        removes it (reference with that key masked), else "keep";
        ``is_causal_without_mask``: what ``is_causal=True`` without ``attn_mask`` does;
        ``alignment``: keys seen by a causal T = 2, S = 4 call through the adapter;
        ``sdpa_hint_path``: the module with the top-left causal mask and ``is_causal=True``
        (no padding, need_weights=False: SDPA's ``is_causal``) equals the explicit mask;
        ``empty_row``: what a row whose keys are all padded returns;
        ``cross_attention_T_ne_S``: max |adapter - reference| at T = 3, S = 5;
        ``weights_shape``: the weights returned with ``need_weights=True,
        average_attn_weights=False`` (need_weights only).
    """
    import torch

    from verify.adapters import measure
    from verify.attention import softmax_attention
    from verify.spec.visibility import visible

    gen = torch.Generator().manual_seed(0)
    B, H, T, S, d = 2, 2, 3, 5, 2
    q = torch.randn(B, T, H, d, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(B, S, H, d, generator=gen, dtype=torch.float64) for _ in range(2))

    def ref(**kw):
        args = (x.transpose(1, 2) for x in (q, k, v))
        return softmax_attention(*args, **kw).transpose(1, 2)

    mod = identity_mha(H * d, H, torch.float64)
    flat = [x.reshape(B, x.shape[1], H * d) for x in (q, k, v)]
    out: dict[str, Any] = {}
    kpm = torch.zeros(B, S, dtype=torch.bool)
    kpm[:, 0] = True
    o, _ = mod(*flat, key_padding_mask=kpm, need_weights=need_weights)
    masked = ref(attn_mask=~kpm[:, None, None, :])
    out["key_padding_true_means"] = (
        "ignore" if torch.allclose(o.view(B, T, H, d), masked, atol=1e-12) else "keep"
    )
    try:
        mod(*flat, need_weights=need_weights, is_causal=True)
        out["is_causal_without_mask"] = "accepted"
    except Exception as exc:  # noqa: BLE001 - the finding is the message
        out["is_causal_without_mask"] = f"raises {type(exc).__name__}: {exc}"
    fwd = _forward_weights if need_weights else mha_forward
    out["alignment"] = measure.visible_keys(fwd, 2, 4, causal=True, layout="BTHD")
    tl = visible(T, S, causal=True, alignment="top-left", device="cpu")
    hinted, _ = mod(*flat, need_weights=False, attn_mask=~tl, is_causal=True)
    explicit, _ = mod(*flat, need_weights=False, attn_mask=~tl)
    out["sdpa_hint_path"] = {
        "max_abs_diff_hint_vs_explicit": float((hinted - explicit).abs().max()),
        "max_abs_diff_vs_top_left_reference": float(
            (hinted.view(B, T, H, d) - ref(attn_mask=tl)).abs().max()
        ),
    }
    kp = torch.ones(B, S, dtype=torch.bool)
    kp[1] = False
    o = fwd(q, k, v, causal=False, key_padding_mask=kp)
    out["empty_row"] = measure.row_kind(o[1, 0, 0], v[1, :, 0])
    out["cross_attention_T_ne_S"] = float((fwd(q, k, v, causal=False) - ref()).abs().max())
    if need_weights:
        _, w = mod(*flat, need_weights=True, average_attn_weights=False)
        out["weights_shape"] = list(w.shape)
    return out


def card_facts(name: str, *, quick: bool = False, isolate: bool = True) -> dict[str, Any]:
    """What a ``MultiheadAttention`` card shows besides the battery (JSON values).

    Returns:
        ``package`` ({"torch": version}), ``need_weights`` and ``conventions``
        (:func:`measure_conventions`). ``quick`` and ``isolate`` are unused.

    Raises:
        KeyError: ``name`` is not in :data:`VARIANTS`.
    """
    import torch

    if name not in VARIANTS:
        raise KeyError(f"name: expected one of {sorted(VARIANTS)}, got {name!r}")
    nw = name.endswith("-weights")
    return {
        "package": {"torch": torch.__version__},
        "need_weights": nw,
        "conventions": measure_conventions(nw),
    }


__all__ = [
    "VARIANTS",
    "card_facts",
    "identity_mha",
    "measure_conventions",
    "mha_forward",
    "mha_variant",
    "mha_weights_variant",
]
