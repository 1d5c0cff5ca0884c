"""fla-core (flash-linear-attention) pure-torch naive references as a user adapts them. fla's
tensors are (B, T, H, d) (``--layout BTHD``) and its naive references are causal only
(``--causal yes``); importing ``fla`` on a CPU machine warns that Triton is unsupported."""

from __future__ import annotations

import warnings


def recurrent_linear_attn(q, k, v, *, causal):
    """``naive_recurrent_linear_attn(q, k, v, normalize=True)``: identity-map linear attention,
    q scaled by d^-1/2 (cancels in the normalized output), denominator q.cumsum(k) + 1e-10,
    computed in float32."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fla.ops.linear_attn.naive import naive_recurrent_linear_attn

    o, _ = naive_recurrent_linear_attn(q, k, v, normalize=True)
    return o
