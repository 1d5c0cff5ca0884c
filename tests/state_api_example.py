import torch

from verify.spec.variant import AttentionVariant, StateAPI


def attention(q, k, v, *, causal):
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        T = q.shape[-2]
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


def prefill(q, k, v, state=None):
    """A segment of n tokens: q, k (B, H, n, d), v (B, H, n, d_v). The state is the KV cache,
    (k, v) of every token so far; the segment's token i sits at position S - n + i."""
    if state is not None:
        k, v = torch.cat([state[0], k], 2), torch.cat([state[1], v], 2)
    n, S = q.shape[2], k.shape[2]
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    keep = torch.ones(n, S, dtype=torch.bool).tril(S - n)
    return torch.softmax(s.masked_fill(~keep, float("-inf")), -1) @ v, (k, v)


def step(state, q_t, k_t, v_t):
    """One decoded token: q_t, k_t (B, H, d), v_t (B, H, d_v), no sequence axis."""
    o, state = prefill(q_t[:, :, None], k_t[:, :, None], v_t[:, :, None], state)
    return o[:, :, 0], state


def kv_cache():
    return AttentionVariant(
        name="kv-cache",
        forward=attention,
        kernel="softmax",
        state_api=StateAPI(prefill=prefill, step=step),
    )
