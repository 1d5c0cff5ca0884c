"""Targets for the checker's usage tests (tests/test_check_usage.py): callables the checker
cannot call, variants that hang or crash on a 2-token call, and an empty-row convention that
differs by dtype, each beside a correct twin.

Checked by the CLI as ``tests.usage_variants:<name>`` from the repository root.
"""

from __future__ import annotations

import math
import os
import signal
import time

import torch

from verify.spec.variant import AttentionVariant, StateAPI


def attention(q, k, v, *, causal):
    """Plain softmax attention (the README's example): the correct twin of the targets below."""
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        T = q.shape[-2]
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=q.device).tril(), -math.inf)
    return torch.softmax(s, -1) @ v


def sdpa_style(q, k, v, *, is_causal=False):
    """SDPA's spelling of the causal flag: the checker passes ``causal``."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)


def extra_argument(q, k, v, scale, *, causal):
    """A required fourth positional argument the checker never passes."""
    return attention(q * scale, k, v, causal=causal)


def squeezed(q, k, v, *, causal):
    """Returns (H, T, d_v) for B = 1: the batch axis dropped."""
    return attention(q, k, v, causal=causal)[0]


def not_a_tensor(q, k, v, *, causal):
    """Returns a list of per-head outputs."""
    return list(attention(q, k, v, causal=causal).unbind(1))


def hangs(q, k, v, *, causal):
    """Never returns (on any input)."""
    while True:
        time.sleep(1.0)


def crashes(q, k, v, *, causal):
    """Kills its own process."""
    os._exit(7)


def sigkilled(q, k, v, *, causal):
    """Killed by SIGKILL on every property call past the 2-token one, as the out-of-memory
    killer would kill it: inconclusive."""
    if q.shape[-2] > 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return attention(q, k, v, causal=causal)


def exits_past_two_tokens(q, k, v, *, causal):
    """Exits on every property call past the 2-token one (a crash of its own): failed."""
    if q.shape[-2] > 2:
        os._exit(7)
    return attention(q, k, v, causal=causal)


def _sentinel_softmax(q, k, v, *, causal, attn_mask=None, fill=None):
    """Softmax attention, causal calls aligned bottom-right, hidden keys set to ``fill(dtype)``."""
    T, S = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    keep = torch.ones(T, S, dtype=torch.bool, device=q.device)
    if causal:
        keep = keep.tril(S - T)
    if attn_mask is not None:
        keep = keep & attn_mask
    return torch.softmax(s.masked_fill(~keep, fill(q.dtype)), -1) @ v


def _per_dtype_fill(dtype):
    """-inf in float64 (a row without keys is 0/0, NaN); the dtype's lowest finite number
    elsewhere (every score of such a row is equal: the mean of the values)."""
    return -math.inf if dtype == torch.float64 else torch.finfo(dtype).min


def per_dtype_empty_rows() -> AttentionVariant:
    """A row with no visible key returns NaN in float64 and the mean of the values in float32,
    whatever empties it (the causal alignment or attn_mask): one convention per dtype."""

    def forward(q, k, v, *, causal, attn_mask=None):
        return _sentinel_softmax(q, k, v, causal=causal, attn_mask=attn_mask, fill=_per_dtype_fill)

    return AttentionVariant(
        name="per-dtype-empty-rows",
        forward=forward,
        kernel="softmax",
        causal_alignment="bottom-right",
        supports_mask=True,
    )


def per_dtype_empty_rows_declared_nan() -> AttentionVariant:
    """The same variant declaring NaN for every dtype: its float32 empty rows contradict it."""
    return per_dtype_empty_rows().with_claims(name="per-dtype-declared-nan", empty_rows="nan")


def kv_cache_step_without_own_key() -> AttentionVariant:
    """The README's KV cache (tests/state_api_example.py) whose ``step`` attends over the cache
    before appending the token's own key and value: the decoded token does not see itself."""
    from tests.state_api_example import kv_cache, prefill

    def step(state, q_t, k_t, v_t):
        k, v = state
        s = (q_t[:, :, None] @ k.transpose(-1, -2)) / q_t.shape[-1] ** 0.5
        o = torch.softmax(s, -1) @ v
        _, state = prefill(q_t[:, :, None], k_t[:, :, None], v_t[:, :, None], state)
        return o[:, :, 0], state

    v = kv_cache()
    return v.with_claims(
        name="kv-cache-step-without-own-key", state_api=StateAPI(v.state_api.prefill, step)
    )


class TokenwiseDecode:
    """A correct KV cache whose ``step`` takes ONE token without its sequence axis,
    ``(B, H, d)`` (the StateAPI's spelling), where the decode protocol passes ``(B, H, n, d)``:
    a usage error of the 2-token call, not a defect."""

    def prefill(self, q, k, v, state=None):
        if state is not None:
            k, v = torch.cat([state[0], k], 2), torch.cat([state[1], v], 2)
        T, S = q.shape[2], k.shape[2]
        s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        seen = torch.ones(T, S, dtype=torch.bool).tril(S - T)
        return torch.softmax(s.masked_fill(~seen, -math.inf), -1) @ v, (k, v)

    def step(self, state, q_t, k_t, v_t):
        o, state = self.prefill(q_t.unsqueeze(2), k_t.unsqueeze(2), v_t.unsqueeze(2), state)
        return o[:, :, 0], state


class SqueezedStepOutput(TokenwiseDecode):
    """Takes the protocol's ``(B, H, n, d)`` tokens but returns ``o_new`` without the axis."""

    def step(self, state, q_new, k_new, v_new):
        o, state = self.prefill(q_new, k_new, v_new, state)
        return o[:, :, 0], state


class ProtocolDecode(TokenwiseDecode):
    """The correct twin: ``step`` is a prefill resumed from the state."""

    def step(self, state, q_new, k_new, v_new):
        return self.prefill(q_new, k_new, v_new, state)


#: the capacity of the KV cache that drops its oldest entries (``kv_cache_dropping_oldest``)
DROP_CAPACITY = 3


def kv_cache_dropping_oldest() -> AttentionVariant:
    """The README's KV cache whose ``step`` keeps only the newest ``DROP_CAPACITY`` entries
    after appending (a fixed buffer rolled over, as a user wrote it): past that length the
    decoded token no longer sees the oldest keys, while the forward sees them all."""
    from tests.state_api_example import kv_cache, prefill

    def step(state, q_t, k_t, v_t):
        k, v = (torch.cat([c, n[:, :, None]], 2)[:, :, -DROP_CAPACITY:]
                for c, n in zip(state, (k_t, v_t)))  # fmt: skip
        o, _ = prefill(
            q_t[:, :, None], k_t[:, :, None], v_t[:, :, None], (k[:, :, :-1], v[:, :, :-1])
        )
        return o[:, :, 0], (k, v)

    v = kv_cache()
    return v.with_claims(
        name="kv-cache-dropping-oldest", state_api=StateAPI(v.state_api.prefill, step)
    )
