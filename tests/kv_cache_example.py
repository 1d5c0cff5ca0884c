import torch


def attention(q, k, v, *, causal):
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        T = q.shape[-2]
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


class KVCache:
    """The state is the cache: (k, v) of every token so far, (B, H, S, d) and (B, H, S, d_v)."""

    def prefill(self, q, k, v, state=None):
        if state is not None:  # append the new tokens to the cache
            k, v = torch.cat([state[0], k], 2), torch.cat([state[1], v], 2)
        n, S = q.shape[2], k.shape[2]
        s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        keep = torch.ones(n, S, dtype=torch.bool).tril(S - n)  # new token i sits at S - n + i
        return torch.softmax(s.masked_fill(~keep, float("-inf")), -1) @ v, (k, v)

    def step(self, state, q_new, k_new, v_new):  # one token, or several (speculative)
        return self.prefill(q_new, k_new, v_new, state)


cache = KVCache()
