"""A softmax kernel that takes only sequences of at least MIN_LENGTH tokens (a whole tile), for
the ``min_length`` restriction claim (``--min-length``)."""

from __future__ import annotations

import torch

MIN_LENGTH = 16


def tiled_softmax(q, k, v, *, causal):
    """Softmax attention that refuses T or S below MIN_LENGTH (ValueError)."""
    T, S = q.shape[-2], k.shape[-2]
    if min(T, S) < MIN_LENGTH:
        raise ValueError(f"tiled_softmax: needs T, S >= {MIN_LENGTH}, got {T}, {S}")
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(S - T), float("-inf"))
    return torch.softmax(s, -1) @ v
