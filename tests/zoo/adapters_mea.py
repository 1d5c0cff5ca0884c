"""memory-efficient-attention-pytorch as a user adapts it: the package's functions called with
their defaults (buckets of 512 queries and 1024 keys, so one bucket at the lengths the battery
draws; the defects the zoo records do not depend on the bucketing)."""

from __future__ import annotations


def memory_efficient_attention(q, k, v, *, causal):
    from memory_efficient_attention_pytorch import memory_efficient_attention

    return memory_efficient_attention(q, k, v, causal=causal)


def flash_attention(q, k, v, *, causal):
    """``FlashAttentionFunction.apply(q, k, v, mask, causal, q_bucket_size, k_bucket_size)`` with
    the ``FlashAttention`` module's default buckets (the module itself adds projections)."""
    from memory_efficient_attention_pytorch.flash_attention import FlashAttentionFunction

    return FlashAttentionFunction.apply(q, k, v, None, causal, 512, 1024)
