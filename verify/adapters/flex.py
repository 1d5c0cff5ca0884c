"""torch 2.13 FlexAttention (``torch.nn.attention.flex_attention.flex_attention``), eager on
the CPU, with its ``score_mod`` / ``mask_mod`` / ``BlockMask`` declared as claims
(``verify.spec.flex``; checked by ``flex-score-mod`` and ``flex-block-mask``).

* ``torch-flex-softcap-alibi``: ``score_mod`` = :func:`softcap_alibi`, the logit softcap
  C tanh(s / C) then the ALiBi bias -m |q_idx - kv_idx| (FlashAttention's order: cap, bias,
  mask), C = :data:`CAP`, m = :data:`SLOPE`; causal calls add the mask_mod q_idx >= kv_idx
  through a BlockMask (top-left, as ``create_block_mask`` indexes T and S from 0). Its packed
  path (:func:`flex_packed`) is the same flex call on the documents of ``cu_seqlens`` with the
  document mask_mod doc(q_idx) == doc(kv_idx) (and causality), the usual way FlexAttention
  packs sequences; ALiBi's |q_idx - kv_idx| is the same inside a packed document as in the
  document alone. The slack rows after ``cu_seqlens[-1]`` are not passed (eager flex computes
  P V densely, so a NaN or inf in a masked-out value row reaches every row:
  :func:`masked_nonfinite_leak`) and come back as zeros.
* ``torch-flex-document-window``: ``mask_mod`` = :func:`document_window` (documents of lengths
  3, 5, 2 cycled along the sequence, each query seeing the last :data:`WINDOW` + 1 keys of its
  own document up to itself), the forward's BlockMask declared as ``block_mask`` =
  :func:`document_window_block_mask` (``create_block_mask`` at ``BLOCK_SIZE`` =
  :data:`BLOCK_SIZE`).

Eager, not compiled: ``torch.compile(flex_attention)`` on this CPU build rejects float64
inputs (Inductor's CPU lowering takes float32, float16 and bfloat16 only) and compiles each new
head dimension for seconds, which the battery's drawn shapes would pay on every example. Eager
flex applies the mask_mod to every score and ignores the BlockMask's block lists, so the
declared BlockMask is checked only by ``flex-block-mask``, token by token.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

from verify.spec.variant import AttentionVariant

#: card name -> import spec of the variant's zero-argument factory
VARIANTS: dict[str, str] = {
    "torch-flex-softcap-alibi": "verify.adapters.flex:softcap_alibi_variant",
    "torch-flex-document-window": "verify.adapters.flex:document_window_variant",
}
#: the softcap C and the ALiBi slope m of the softcap-alibi card
CAP = 2.0
SLOPE = 0.5
#: roundings of softcap_alibi's own arithmetic (verify.spec.flex's count): torch's tanh is 2.5
#: ulps (derivations.transform_rounding.TANH_ULPS: 5 roundings), s / C and C tanh one each, the
#: product m |i - j| and the subtraction one each
SOFTCAP_ALIBI_ROUNDINGS = 9
#: the window of the document-window card: key kv visible from q iff q - WINDOW <= kv <= q
WINDOW = 3
#: document lengths cycled along the sequence (the document-window card)
DOC_LENGTHS = (3, 5, 2)
#: the block size of the declared BlockMask
BLOCK_SIZE = 16
#: the longest sequence the document ids cover
MAX_POSITIONS = 2048


def _flex_api():
    """(flex_attention, create_block_mask, BlockMask).

    Raises:
        ImportError: this torch has no FlexAttention.
    """
    try:
        from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
    except ImportError as exc:  # torch < 2.5
        raise ImportError(f"torch.nn.attention.flex_attention is not available: {exc}") from None
    return flex_attention, create_block_mask, BlockMask


_REFUSAL: list = []


def grad_refusal() -> str | None:
    """The message of the NotImplementedError eager ``flex_attention`` raises on this build for
    CPU inputs that require grad (torch 2.13: no backward on the CPU), or None when it runs;
    measured once with a two-token call."""
    import torch

    if not _REFUSAL:
        x = torch.zeros(1, 1, 2, 2, requires_grad=True)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _flex_api()[0](x, x, x)
            _REFUSAL.append(None)
        except NotImplementedError as exc:
            _REFUSAL.append(str(exc))
    return _REFUSAL[0]


def flex(q, k, v, *, score_mod=None, block_mask=None):
    """Eager ``flex_attention`` (its warnings silenced): q (B, H, T, d), k (B, H, S, d),
    v (B, H, S, d_v) -> (B, H, T, d_v), default scale d^-1/2.

    Raises:
        NotImplementedError: inputs that require grad where flex has no backward
            (:func:`grad_refusal`: the library's own refusal, raised before the masks are built).
    """
    import torch

    needs_grad = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
    if needs_grad and q.device.type == "cpu" and (why := grad_refusal()):
        raise NotImplementedError(why)
    fn = _flex_api()[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(q, k, v, score_mod=score_mod, block_mask=block_mask)


def block_mask_of(mask_mod, B: int | None, H: int | None, T: int, S: int, **kw):
    """``create_block_mask(mask_mod, B, H, T, S, device="cpu", **kw)``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _flex_api()[1](mask_mod, B, H, T, S, device="cpu", **kw)


def causal_mask_mod(b, h, q_idx, kv_idx):
    """Top-left causality: kv_idx <= q_idx."""
    return q_idx >= kv_idx


# -- softcap + ALiBi ----------------------------------------------------------------------------
def softcap_alibi(score, b, h, q_idx, kv_idx):
    """C tanh(score / C) - m |q_idx - kv_idx| (C = CAP, m = SLOPE)."""
    import torch

    return CAP * torch.tanh(score / CAP) - SLOPE * (q_idx - kv_idx).abs()


@functools.lru_cache(maxsize=64)
def _causal_block_mask(T: int, S: int):
    return block_mask_of(causal_mask_mod, None, None, T, S)


def softcap_alibi_forward(q, k, v, *, causal: bool, score_mod=softcap_alibi):
    """Eager flex with ``score_mod`` (default :func:`softcap_alibi`), causal by a BlockMask of
    :func:`causal_mask_mod` (top-left; built once per (T, S)). BHTD."""
    bm = _causal_block_mask(q.shape[-2], k.shape[-2]) if causal else None
    return flex(q, k, v, score_mod=score_mod, block_mask=bm)


def document_ids(cu_seqlens, total: int):
    """(total,) int64: the document of each row of ``cu_seqlens``, -1 past ``cu_seqlens[-1]``."""
    import torch

    ids = torch.full((total,), -1, dtype=torch.int64)
    cu = [int(c) for c in cu_seqlens.tolist()]
    for i, (a, b) in enumerate(zip(cu[:-1], cu[1:])):
        ids[a:b] = i
    return ids


def flex_packed(q, k, v, cu_seqlens, *, causal: bool, score_mod=softcap_alibi):
    """FlexAttention on packed documents: q, k (total, H, d), v (total, H, d_v),
    ``cu_seqlens`` int32 (B + 1,) -> (total, H, d_v); the document mask_mod (and causality)
    on rows 0 .. cu_seqlens[-1] - 1, the slack rows zeros."""
    import torch

    end = int(cu_seqlens[-1])
    out = q.new_zeros(*q.shape[:-1], v.shape[-1])
    if end == 0:
        return out
    docs = document_ids(cu_seqlens, end)

    def same_document(b, h, q_idx, kv_idx):
        keep = docs[q_idx] == docs[kv_idx]
        return keep & (q_idx >= kv_idx) if causal else keep

    bm = block_mask_of(same_document, None, None, end, end)
    o = flex(*(x[:end].transpose(0, 1)[None] for x in (q, k, v)), score_mod=score_mod,
             block_mask=bm)  # fmt: skip
    return torch.cat([o[0].transpose(0, 1), out[end:]], 0)


def softcap_alibi_variant() -> AttentionVariant:
    """Eager flex with the softcap-then-ALiBi score_mod, causal and not, and its packed path.

    Raises:
        ImportError: this torch has no FlexAttention.
    """
    _flex_api()
    return AttentionVariant(
        name="torch-flex-softcap-alibi",
        dtypes=("float64", "float32", "bfloat16"),
        forward=softcap_alibi_forward,
        causal="both",
        causal_alignment="top-left",
        score_mod=softcap_alibi,
        score_mod_roundings=SOFTCAP_ALIBI_ROUNDINGS,
        packed=flex_packed,
        differentiable=grad_refusal() is None,
        description=f"torch.nn.attention.flex_attention (eager, CPU): score_mod softcap C={CAP} "
        f"then ALiBi m={SLOPE}; packed documents by a document mask_mod",
    )


# -- documents + sliding window -----------------------------------------------------------------
def _doc_ids(n: int):
    import torch

    ids, doc = [], 0
    while len(ids) < n:
        ids += [doc] * DOC_LENGTHS[doc % len(DOC_LENGTHS)]
        doc += 1
    return torch.tensor(ids[:n], dtype=torch.int64)


_DOCS: list = []


def _docs():
    if not _DOCS:
        _DOCS.append(_doc_ids(MAX_POSITIONS))
    return _DOCS[0]


def document_window(b, h, q_idx, kv_idx):
    """Same document (lengths DOC_LENGTHS cycled) and q_idx - WINDOW <= kv_idx <= q_idx."""
    docs = _docs()
    return (docs[q_idx] == docs[kv_idx]) & (kv_idx <= q_idx) & (q_idx - kv_idx <= WINDOW)


def document_window_block_mask(B: int, H: int, T: int, S: int):
    """The forward's BlockMask: ``create_block_mask(document_window, B, H, T, S,
    BLOCK_SIZE=BLOCK_SIZE)``."""
    return block_mask_of(document_window, B, H, T, S, BLOCK_SIZE=BLOCK_SIZE)


_cached_document_window_block_mask = functools.lru_cache(maxsize=64)(document_window_block_mask)


def document_window_forward(q, k, v, *, causal: bool, block_mask=None):
    """Eager flex under the BlockMask ``block_mask(B, H, T, S)`` (default: the declared
    :func:`document_window_block_mask`, built once per shape); the mask_mod already includes
    top-left causality, so ``causal`` changes nothing. BHTD."""
    B, H, T, _ = q.shape
    make = block_mask or _cached_document_window_block_mask
    return flex(q, k, v, block_mask=make(B, H, T, k.shape[-2]))


def document_window_variant() -> AttentionVariant:
    """Eager flex with the document-and-window mask_mod and its declared BlockMask.

    Raises:
        ImportError: this torch has no FlexAttention.
    """
    _flex_api()
    return AttentionVariant(
        name="torch-flex-document-window",
        dtypes=("float64", "float32", "bfloat16"),
        forward=document_window_forward,
        causal="both",
        causal_alignment="top-left",
        mask_mod=document_window,
        block_mask=document_window_block_mask,
        differentiable=grad_refusal() is None,
        description="torch.nn.attention.flex_attention (eager, CPU): mask_mod documents "
        f"{DOC_LENGTHS} and window {WINDOW}, create_block_mask(BLOCK_SIZE={BLOCK_SIZE})",
    )


# -- what the cards show ------------------------------------------------------------------------
def masked_nonfinite_leak(T: int = 8) -> dict[str, int]:
    """Rows of an eager flex call (causal, float64, T = S) that a non-finite value in the last
    value row reaches, although every query but the last has that key masked out: {fill: rows
    with NaN} (T - 1 would be every masked row; 0 the FlashAttention varlen behaviour)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, T, 2, generator=gen, dtype=torch.float64) for _ in range(3))
    out = {}
    for fill in ("nan", "inf"):
        v2 = v.clone()
        v2[0, 0, -1] = float(fill)
        o = softcap_alibi_forward(q, k, v2, causal=True, score_mod=None)
        out[fill] = int(torch.isnan(o[0, 0, :-1]).any(-1).sum())
    return out


def card_facts(name: str, *, quick: bool = False, isolate: bool = True) -> dict[str, Any]:
    """What a FlexAttention card shows besides the battery (JSON values).

    Returns:
        ``package`` ({"torch": version}), ``mode`` ("eager"); the softcap-alibi card also
        ``masked_nonfinite_leak`` (:func:`masked_nonfinite_leak`), the document-window card
        ``block_size``. ``quick`` and ``isolate`` are unused (no check runs here).

    Raises:
        KeyError: ``name`` is not in :data:`VARIANTS`. ImportError: no FlexAttention.
    """
    if name not in VARIANTS:
        raise KeyError(f"name: expected one of {sorted(VARIANTS)}, got {name!r}")
    import torch

    _flex_api()
    facts: dict[str, Any] = {"package": {"torch": torch.__version__}, "mode": "eager"}
    if name == "torch-flex-softcap-alibi":
        facts["masked_nonfinite_leak"] = masked_nonfinite_leak()
    else:
        facts["block_size"] = BLOCK_SIZE
    return facts


__all__ = [
    "BLOCK_SIZE",
    "CAP",
    "SLOPE",
    "VARIANTS",
    "WINDOW",
    "block_mask_of",
    "card_facts",
    "causal_mask_mod",
    "document_ids",
    "document_window",
    "document_window_block_mask",
    "document_window_forward",
    "document_window_variant",
    "flex",
    "flex_packed",
    "masked_nonfinite_leak",
    "softcap_alibi",
    "softcap_alibi_forward",
    "softcap_alibi_variant",
]
