"""Attention functions as users bring them (plain ``f(q, k, v, *, causal) -> o``), with the
defects users reported against the checker's failure grouping, each beside its correct twin.
Importable as ``tests.user_variants:<name>`` for ``attn-theory check``. Tensors (B, H, T, d).

* ``softcap_30`` computes C tanh(s / C) with C = 30 where 20 is claimed (``--softcap 20``): a
  wrong constant, in float32 arithmetic with P rounded to the input type before P V and the
  causal mask bottom-right aligned; ``softcap_20`` is its correct twin.
* ``weights_float32`` computes the softmax weights in float32 in a float64 call (its outputs
  are not float32 numbers; the compute-dtype probe finds it from the weights, read with
  V = I): declared to compute in float64 (``compute_dtype="float64"``) the forward carries
  float32 roundings beyond that claim and gradcheck's finite differences of it are noise; its
  twin is the built-in softmax.
"""

from __future__ import annotations

import math

import torch

#: the cap the twins claim (``--softcap 20``)
CLAIMED_CAP = 20.0


def _capped(q, k, v, *, causal, cap: float):
    s = (q.float() @ k.float().transpose(-1, -2)) / q.shape[-1] ** 0.5
    s = cap * torch.tanh(s / cap)
    if causal:
        T, S = s.shape[-2:]
        s = s.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(S - T), -math.inf)
    p = torch.softmax(s, -1)
    return (p.to(q.dtype).float() @ v.float()).to(q.dtype)


def softcap_30(q, k, v, *, causal):
    """The cap C = 30 in place of the claimed 20 (the defect)."""
    return _capped(q, k, v, causal=causal, cap=30.0)


def softcap_20(q, k, v, *, causal):
    """The claimed cap (the correct twin)."""
    return _capped(q, k, v, causal=causal, cap=CLAIMED_CAP)


def weights_float32(q, k, v, *, causal):
    """Softmax weights computed in float32 whatever the input, then P V in the input dtype: a
    float64 call carries float32 roundings although its outputs are not float32 numbers (the
    compute-dtype probe finds it from the weights)."""
    s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    if causal:
        T, S = s.shape[-2:]
        s = s.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(S - T), -math.inf)
    return torch.softmax(s.float(), -1).to(q.dtype) @ v
