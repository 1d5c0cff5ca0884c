"""Torch implementations of every attention form of the derivations D1-D16 (API contract: README).

Layout (B, H, T, d) for queries, (B, H, S, d) keys, (B, H, S, d_v) values; SDPA-like keywords
``causal``, ``scale``, ``attn_mask`` (bool, True = keep). Device-generic and differentiable.

- ``softmax_attention``: the reference (D2, D6).
- ``taylor_attention``: Taylor-N attention, parallel | recurrent | chunked, symmetric | tensor
  basis (D1, D2, D4).
- ``linear_attention``: kernel linear attention with identity, elu1, relu, taylor:N, favor or a
  callable feature map (D3, D9).
- ``sigmoid_attention``: unnormalized sigmoid attention (D14).
- ``verify.attention.structure``: windows, grouped kv heads (``enable_gqa``), softcapping and
  ALiBi slopes, keywords of ``softmax_attention`` and ``sigmoid_attention`` (D12, D13, D15).
- ``verify.attention.state``: streaming ``init_state``, ``step``, ``prefill``.
- ``verify.attention.feature_maps``: the public feature maps; ``verify.attention.norms``: the
  denominator modes of D7.
"""

from __future__ import annotations

from verify.attention._kernels import taylor_kernel
from verify.attention._validate import accumulation_dtype
from verify.attention.feature_maps import (
    FEATURE_BUDGET,
    elu1_features,
    favor_features,
    favor_projection,
    identity_features,
    relu_features,
    symmetric_monomial_features,
    taylor_block_sizes,
    taylor_features,
    tensor_power_features,
)
from verify.attention.linear import linear_attention
from verify.attention.norms import (
    apply_denominator,
    l2_normalize,
    layer_normalize,
    rms_normalize,
)
from verify.attention.sigmoid import sigmoid_attention
from verify.attention.softmax import softmax_attention
from verify.attention.state import AttentionState, init_state, prefill, step
from verify.attention.taylor import taylor_attention

__all__ = [
    "FEATURE_BUDGET",
    "AttentionState",
    "accumulation_dtype",
    "apply_denominator",
    "elu1_features",
    "favor_features",
    "favor_projection",
    "identity_features",
    "init_state",
    "l2_normalize",
    "layer_normalize",
    "linear_attention",
    "prefill",
    "relu_features",
    "rms_normalize",
    "sigmoid_attention",
    "softmax_attention",
    "step",
    "symmetric_monomial_features",
    "taylor_attention",
    "taylor_block_sizes",
    "taylor_features",
    "taylor_kernel",
    "tensor_power_features",
]
