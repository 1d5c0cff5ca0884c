"""Published defect classes of released attention code, emulated on top of the path adapters
(``verify.adapters.hf_cache``, ``fla_paths``, ``flex``), each beside its fix (the adapter as
released). ``tests/test_adapters_paths.py`` checks that the defect fails the property that names
its path and the fix passes it.

Each twin changes one piece of the released code and leaves the rest as the library ships it:

- ``sliding_cache_rolls_early``: transformers' static sliding-window cache rolls its buffer one
  token early, when the length *reaches* the window instead of exceeding it (the class of
  transformers issue 37574, fixed by its PR 38046: a ``>=`` against ``window - 1``). At the
  W-th token the buffer drops token 0, which the query still sees, and keeps one
  zero-initialised slot in the window for ever after. Built on ``StaticSlidingWindowLayer``
  with 5.23's update everywhere else.
- ``static_cache_skips_mask``: a static (preallocated, zero-initialised) cache whose
  single-token decode takes the dynamic cache's shortcut of no mask (the guard of
  ``create_causal_mask`` against a skip for a compileable cache at q_length 1 left out):
  every unused zero slot is attended while the cache fills (the class of zero-initialised slots
  attended during warm-up that transformers PR 45940 describes; 5.23 passes).
- ``attn_decode_tq1_no_window``: a decode path that forgets the window when a segment has one
  query token (fla's ``naive_attn_decoding`` called without ``window_size`` for single-token
  steps, the window kept for longer segments).
- ``packed_ignores_cu_seqlens`` / ``packed_first_split_only``: the torch fallbacks of a varlen
  attention as HunyuanVideo's PR 310 describes them, on transformers' packed attention: the
  ``vanilla`` mode attends across the whole packed sequence (cu_seqlens ignored), the ``torch``
  mode splits at ``cu_seqlens[1]`` only (right for one document and the rest).
- ``flex_alibi_wrong_sign``: FlexAttention with the ALiBi part of the score_mod applied with
  the wrong sign (+m |i - j|), claimed with the right score_mod.
- ``document_block_mask_wrong_size``: the declared BlockMask's kv block lists built at block
  size 16 and handed over as a block size 8 mask.
- ``delta_decode_ignores_scale``: a recurrent reference that accepts ``scale`` and ignores it
  (computes with scale 1), used as the decode path while the forward honours it.
- ``delta_packed_nan_slack_grad``: fla's varlen call whose backward leaves the gradient rows of
  the slack after ``cu_seqlens[-1]`` uninitialised (NaN here: an uninitialised buffer's
  content, the class of fla PR 892).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: the sliding window of the HF twins (the adapter's)
W = 3


@dataclass(frozen=True)
class Twin:
    """A defect emulated on an adapter: ``build()`` returns the faulty variant; ``prop`` is the
    property that names its path; ``fix()`` returns the released code it is a twin of."""

    name: str
    build: Any
    prop: str
    fix: Any
    source: str
    #: examples the property draws (more where the defect needs a rarer input)
    examples: int = 3


# -- transformers caches --------------------------------------------------------------------
def _rolls_early_layer():
    from transformers.cache_utils import StaticSlidingWindowLayer

    class RollsOneEarly(StaticSlidingWindowLayer):
        """5.23's layer, but a single-token update that makes the length reach the window rolls
        the buffer as if it were already full (the buffer then holds tokens 1 .. W - 2, a zero
        slot and the new token)."""

        def update(self, key_states, value_states, *args, **kwargs):
            one = self.is_initialized and key_states.shape[-2] == 1
            if one and self.cumulative_length_int == self.max_cache_len - 1:
                self.cumulative_length_int += 1
                for buf, new in ((self.keys, key_states), (self.values, value_states)):
                    rolled = buf.roll(-1, dims=-2)
                    rolled[:, :, -1:] = new
                    buf.copy_(rolled)
                return self.keys, self.values
            return super().update(key_states, value_states, *args, **kwargs)

    return RollsOneEarly


def _rolls_early_decode():
    from verify.adapters.hf_cache import HFCacheDecode

    class Decode(HFCacheDecode):
        def new_cache(self, capacity):
            cache = super().new_cache(capacity)
            layer = cache.layers[0]
            cache.layers[0] = _rolls_early_layer()(
                max_cache_len=layer.max_cache_len, sliding_window=W
            )
            return cache

    return Decode(W, static_slots=W)


def sliding_cache_rolls_early():
    from verify.adapters.hf_cache import sliding_window_cache_variant

    return sliding_window_cache_variant().with_claims(
        name="hf-static-sliding-cache-rolls-early", decode=_rolls_early_decode()
    )


def static_sliding_cache_fixed():
    """The fix: 5.23's ``StaticSlidingWindowLayer`` (the classic W-slot rolling buffer)."""
    from verify.adapters.hf_cache import HFCacheDecode, sliding_window_cache_variant

    return sliding_window_cache_variant().with_claims(
        name="hf-static-sliding-cache", decode=HFCacheDecode(W, static_slots=W)
    )


class _CompileGuardOff:
    """A cache seen by the mask function as not compileable (the guard's input); every other
    attribute is the cache's."""

    is_compileable = False

    def __init__(self, cache) -> None:
        self._cache = cache

    def __getattr__(self, name):
        return getattr(self._cache, name)


def static_cache_skips_mask():
    from verify.adapters.hf_cache import HFCacheDecode, dynamic_cache_variant

    class Decode(HFCacheDecode):
        def mask(self, cache_obj, q):
            if q.shape[2] == 1:
                cache_obj = _CompileGuardOff(cache_obj)
            return super().mask(cache_obj, q)

    return dynamic_cache_variant().with_claims(
        name="hf-static-cache-skips-mask", decode=Decode(None)
    )


def hf_dynamic_cache():
    from verify.adapters.hf_cache import dynamic_cache_variant

    return dynamic_cache_variant()


def hf_sliding_window_cache():
    from verify.adapters.hf_cache import sliding_window_cache_variant

    return sliding_window_cache_variant()


# -- packed fallbacks -----------------------------------------------------------------------
def _packed_ignores_cu(q, k, v, cu_seqlens, *, causal):
    """HunyuanVideo's ``vanilla`` fallback: one attention over every packed row."""
    import torch

    from verify.adapters.hf_cache import hf_packed

    whole = torch.tensor([0, int(cu_seqlens[-1])], dtype=torch.int32)
    return hf_packed(q, k, v, whole, causal=causal)


def _packed_first_split(q, k, v, cu_seqlens, *, causal):
    """HunyuanVideo's ``torch`` fallback: a split at cu_seqlens[1] only."""
    import torch

    from verify.adapters.hf_cache import hf_packed

    cut = sorted({0, int(cu_seqlens[1]), int(cu_seqlens[-1])})
    return hf_packed(q, k, v, torch.tensor(cut, dtype=torch.int32), causal=causal)


def packed_ignores_cu_seqlens():
    return hf_dynamic_cache().with_claims(name="hf-packed-vanilla", packed=_packed_ignores_cu)


def packed_first_split_only():
    return hf_dynamic_cache().with_claims(name="hf-packed-torch", packed=_packed_first_split)


# -- fla ------------------------------------------------------------------------------------
def attn_decode_tq1_no_window():
    from verify.adapters.fla_paths import WINDOW, AttnDecode, attn_decoding_variant

    class Decode(AttnDecode):
        def window_for(self, n):
            return None if n == 1 else self.window

    return attn_decoding_variant().with_claims(
        name="fla-attn-decoding-tq1-no-window", decode=Decode(WINDOW)
    )


def fla_attn_decoding():
    from verify.adapters.fla_paths import attn_decoding_variant

    return attn_decoding_variant()


def _ignores_scale(q, k, v, g, beta, scale, **kw):
    """fla's recurrent reference with its ``scale`` accepted and not used."""
    from verify.adapters.fla_paths import _delta

    return _delta().naive_recurrent_gated_delta_product(q, k, v, g, beta, 1.0, **kw)


def delta_decode_ignores_scale():
    from verify.adapters.fla_paths import DeltaProductDecode, delta_product_variant

    return delta_product_variant().with_claims(
        name="fla-delta-decode-ignores-scale", decode=DeltaProductDecode(fn=_ignores_scale)
    )


def _nan_slack_grad_function():
    import torch

    from verify.adapters.fla_paths import delta_packed

    class NaNSlackGrad(torch.autograd.Function):
        """Forward: fla's varlen call; backward: its gradients at the documents' rows, the
        slack rows of the gradient buffers never written (NaN)."""

        @staticmethod
        def forward(ctx, q, k, v, cu_seqlens):
            ctx.save_for_backward(q, k, v, cu_seqlens)
            return delta_packed(q, k, v, cu_seqlens, causal=True)

        @staticmethod
        def backward(ctx, grad):
            q, k, v, cu = ctx.saved_tensors
            end = int(cu[-1])
            with torch.enable_grad():
                leaves = [x.detach().requires_grad_(True) for x in (q, k, v)]
                o = delta_packed(*leaves, cu, causal=True)
                grads = torch.autograd.grad(o, leaves, grad, allow_unused=True)
            out = []
            for x, g in zip((q, k, v), grads):
                buf = torch.full_like(x, float("nan"))  # an uninitialised buffer
                buf[:end] = (torch.zeros_like(x) if g is None else g)[:end]
                out.append(buf)
            return (*out, None)

    return NaNSlackGrad


def _delta_packed_nan_slack(q, k, v, cu_seqlens, *, causal):
    if not causal:
        raise ValueError("causal: the delta rule is a causal recurrence, got causal=False")
    return _nan_slack_grad_function().apply(q, k, v, cu_seqlens)


def delta_packed_nan_slack_grad():
    from verify.adapters.fla_paths import delta_product_variant

    return delta_product_variant().with_claims(
        name="fla-delta-packed-nan-slack-grad", packed=_delta_packed_nan_slack
    )


def fla_delta_product():
    from verify.adapters.fla_paths import delta_product_variant

    return delta_product_variant()


# -- FlexAttention --------------------------------------------------------------------------
def _softcap_wrong_alibi(score, b, h, q_idx, kv_idx):
    import torch

    from verify.adapters.flex import CAP, SLOPE

    return CAP * torch.tanh(score / CAP) + SLOPE * (q_idx - kv_idx).abs()


def _wrong_sign_forward(q, k, v, *, causal):
    from verify.adapters.flex import softcap_alibi_forward

    return softcap_alibi_forward(q, k, v, causal=causal, score_mod=_softcap_wrong_alibi)


def flex_alibi_wrong_sign():
    from verify.adapters.flex import softcap_alibi_variant

    return softcap_alibi_variant().with_claims(
        name="torch-flex-alibi-wrong-sign", forward=_wrong_sign_forward
    )


def _softcap_block_local_alibi(score, b, h, q_idx, kv_idx):
    """The ALiBi distance from the indices inside flex's 128-key block (q_idx % 128,
    kv_idx % 128): a blocked kernel's local offset used for a global position."""
    import torch

    from verify.adapters.flex import CAP, SLOPE

    return CAP * torch.tanh(score / CAP) - SLOPE * (q_idx % 128 - kv_idx % 128).abs()


def _block_local_forward(q, k, v, *, causal):
    from verify.adapters.flex import softcap_alibi_forward

    return softcap_alibi_forward(q, k, v, causal=causal, score_mod=_softcap_block_local_alibi)


def flex_alibi_block_local():
    """Right on every sequence of at most 128 tokens; past flex's block the bias is wrong."""
    from verify.adapters.flex import softcap_alibi_variant

    return softcap_alibi_variant().with_claims(
        name="torch-flex-alibi-block-local", forward=_block_local_forward
    )


def flex_softcap_alibi():
    from verify.adapters.flex import softcap_alibi_variant

    return softcap_alibi_variant()


def _block_mask_wrong_size(B, H, T, S):
    """The kv block lists of ``create_block_mask`` at block size 16, declared as size 8."""
    from verify.adapters.flex import _flex_api, document_window, document_window_block_mask

    bm = document_window_block_mask(B, H, T, S)
    return _flex_api()[2].from_kv_blocks(
        bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks, bm.full_kv_indices,
        BLOCK_SIZE=8, mask_mod=document_window, seq_lengths=(T, S),
    )  # fmt: skip


def document_block_mask_wrong_size():
    from verify.adapters.flex import document_window_variant

    return document_window_variant().with_claims(
        name="torch-flex-block-mask-wrong-size", block_mask=_block_mask_wrong_size
    )


def flex_document_window():
    from verify.adapters.flex import document_window_variant

    return document_window_variant()


#: the twins, each with the property that names its path and its fix
TWINS: tuple[Twin, ...] = (
    Twin("sliding_cache_rolls_early", sliding_cache_rolls_early, "decode-window",
         static_sliding_cache_fixed, "transformers #37574 / PR #38046", examples=5),
    Twin("static_cache_skips_mask", static_cache_skips_mask, "decode-capacity",
         hf_dynamic_cache, "transformers PR #45940 (class)"),
    Twin("attn_decode_tq1_no_window", attn_decode_tq1_no_window, "decode-window",
         fla_attn_decoding, "decode fallback without the window at Tq = 1"),
    Twin("packed_ignores_cu_seqlens", packed_ignores_cu_seqlens, "packed-documents",
         hf_dynamic_cache, "HunyuanVideo PR #310 (vanilla mode)"),
    Twin("packed_first_split_only", packed_first_split_only, "packed-documents",
         hf_dynamic_cache, "HunyuanVideo PR #310 (torch mode)", examples=15),
    Twin("flex_alibi_wrong_sign", flex_alibi_wrong_sign, "flex-score-mod",
         flex_softcap_alibi, "score_mod with the wrong sign"),
    Twin("document_block_mask_wrong_size", document_block_mask_wrong_size, "flex-block-mask",
         flex_document_window, "BlockMask at the wrong block size"),
    Twin("delta_decode_ignores_scale", delta_decode_ignores_scale, "decode-steps",
         fla_delta_product, "a recurrent reference ignoring its scale"),
    Twin("delta_packed_nan_slack_grad", delta_packed_nan_slack_grad, "packed-isolation",
         fla_delta_product, "fla PR #892 (uninitialised slack gradients)"),
)  # fmt: skip
