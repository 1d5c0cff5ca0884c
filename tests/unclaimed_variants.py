"""Attention written the way users bring it, checked with ``--kernel unknown``: plain functions
``f(q, k, v, *, causal)`` in layout (B, H, T, d), correct ones and ones with a structural defect
no kernel claim is needed to see.

Correct: ``softmax_attention`` (masked_fill with -inf), ``elu_linear_attention`` (cumulative
sums), ``windowed_softmax`` (a sliding window of 3 keys, bottom-right).
Defective: ``heads_mixing_softmax`` (q, k L2-normalized over the *heads* axis before SDPA: heads
depend on each other), ``stabilizer_leak_linear`` (a key stabilizer exp(k - max over the whole
sequence) with eps = 1e-6: later keys move earlier outputs through the eps).
Outside every known family (for the probes, which must say unknown): ``cosine_softmax`` (softmax
of 10 cos(q, k): the weights depend on the norms, not on q.k only) and ``retention_decay``
(softmax weights times 0.9^(t - s) renormalized: position-dependent).
Domains and conventions: ``crash_at_one_token`` (raises for T = 1: a bug, not a restriction),
``off_by_one_causal`` (causal mask hides the diagonal: row 0 has no key, NaN for causal=True),
``needs_dv_equal_d`` (asserts d_v == d), ``float32_inside`` (computes float64 calls in float32),
``self_attention_only`` (asserts T == S).
Mask sentinels: ``sentinel_softmax(fill)`` masks with a finite score: -1e4 leaks when every visible
score of a row lies below it; torch.finfo(dtype).min, as model code writes it, does not.
Twins checked with ``--kernel softmax`` (``tests/test_reproducers.py``): ``batch_keys_softmax``
(attends the keys of every batch element), ``value_clipped_softmax`` (values saturated to
[-1, 1]), ``autotuned_softmax`` (every other call in float32), ``scale_over_d_softmax`` (scores
divided by d) and ``cuda_half_softmax`` (float16 on CUDA only).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _causal_mask(T: int, S: int, device) -> torch.Tensor:
    return torch.ones(T, S, dtype=torch.bool, device=device).tril()


def softmax_attention(q, k, v, *, causal):
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(~_causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    return torch.softmax(s, -1) @ v


def elu_linear_attention(q, k, v, *, causal):
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    if not causal:
        kv = fk.transpose(-1, -2) @ v
        return (fq @ kv) / (fq @ fk.sum(-2, keepdim=True).transpose(-1, -2))
    kv = torch.cumsum(fk[..., :, :, None] * v[..., :, None, :], dim=-3)  # (B, H, T, d, d_v)
    z = torch.cumsum(fk, dim=-2)  # (B, H, T, d)
    num = (fq[..., :, :, None] * kv).sum(-2)
    return num / (fq * z).sum(-1, keepdim=True)


def windowed_softmax(q, k, v, *, causal, window: int = 3):
    T, S = q.shape[-2], k.shape[-2]
    t = torch.arange(T, device=q.device)[:, None] + (S - T)
    s = torch.arange(S, device=q.device)[None, :]
    keep = (s > t - window) & ((s <= t) if causal else (s < t + window))
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    return torch.softmax(scores.masked_fill(~keep, float("-inf")), -1) @ v


def heads_mixing_softmax(q, k, v, *, causal):
    q = F.normalize(q, dim=1)  # normalized over the heads axis (meant: the last axis)
    k = F.normalize(k, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def stabilizer_leak_linear(q, k, v, *, causal, eps: float = 1e-6):
    """Positive features exp(x - m) with the stabilizer m a max over *every* key, later ones
    included; the eps then does not scale with the features."""
    m = k.amax(dim=(-2, -1), keepdim=True)
    fq, fk = torch.exp(q - q.amax(-1, keepdim=True)), torch.exp(k - m)
    w = fq @ fk.transpose(-1, -2)
    if causal:
        w = w * _causal_mask(q.shape[-2], k.shape[-2], q.device)
    return (w @ v) / (w.sum(-1, keepdim=True) + eps)


def cosine_softmax(q, k, v, *, causal, tau: float = 10.0):
    s = tau * F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-1, -2)
    if causal:
        s = s.masked_fill(~_causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    return torch.softmax(s, -1) @ v


def retention_decay(q, k, v, *, causal, gamma: float = 0.9):
    T, S = q.shape[-2], k.shape[-2]
    t = torch.arange(T, device=q.device)[:, None] + (S - T)
    s = torch.arange(S, device=q.device)[None, :]
    bias = (t - s).abs().to(q.dtype) * torch.log(torch.tensor(gamma, dtype=q.dtype))
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5 + bias
    if causal:
        scores = scores.masked_fill(s > t, float("-inf"))
    return torch.softmax(scores, -1) @ v


def sentinel_softmax(fill):
    """Softmax whose causal mask writes ``fill(dtype)`` instead of -inf."""

    def attention(q, k, v, *, causal):
        s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        if causal:
            hidden = ~_causal_mask(q.shape[-2], k.shape[-2], q.device)
            s = s.masked_fill(hidden, fill(q.dtype))
        return torch.softmax(s, -1) @ v

    return attention


minus_1e4_softmax = sentinel_softmax(lambda dtype: -1e4)
finfo_min_softmax = sentinel_softmax(lambda dtype: torch.finfo(dtype).min)


def crash_at_one_token(q, k, v, *, causal):
    if q.shape[-2] == 1:
        raise RuntimeError("index out of range: the code squeezes the length axis")
    return softmax_attention(q, k, v, causal=causal)


def off_by_one_causal(q, k, v, *, causal):
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:  # meant tril(0): hides the diagonal too, so row 0 sees nothing
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(-1)
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v


def needs_dv_equal_d(q, k, v, *, causal):
    if v.shape[-1] != q.shape[-1]:
        raise ValueError(f"v must have the head dimension {q.shape[-1]}, got {v.shape[-1]}")
    return softmax_attention(q, k, v, causal=causal)


def identity_linear_guarded(q, k, v, *, causal):
    """Linear attention with the identity feature map (signed weights q.k) whose zero
    denominators are replaced by 1: where q.k = 0 the query gives its keys no weight and the
    output is 0 (an empty row, not a defect)."""
    w = q @ k.transpose(-1, -2)
    if causal:
        w = w.masked_fill(~_causal_mask(q.shape[-2], k.shape[-2], q.device), 0.0)
    den = w.sum(-1, keepdim=True)
    return (w @ v) / torch.where(den == 0, torch.ones_like(den), den)


def output_shaped_like_q(q, k, v, *, causal):
    """The output buffer is ``zeros_like(q)`` and the attended values are added in place (as in
    released FlashAttention ports): for d_v != d the values broadcast silently, a wrong shape
    outside the restriction d_v == d, never an error."""
    o = torch.zeros_like(q)
    o.add_(softmax_attention(q, k, v, causal=causal))
    return o


def float32_inside(q, k, v, *, causal):
    o = softmax_attention(q.float(), k.float(), v.float(), causal=causal)
    return o.to(q.dtype)


def self_attention_only(q, k, v, *, causal):
    if q.shape[-2] != k.shape[-2]:
        raise ValueError("cross-attention is not supported: T must equal S")
    return softmax_attention(q, k, v, causal=causal)


# -- twins of the dependence, weight and scale properties (checked with --kernel softmax) --------


def batch_keys_softmax(q, k, v, *, causal):
    """Softmax whose keys are those of *every* batch element (the B sequences folded into one key
    axis without a block-diagonal mask, as a packing helper would): each batch element's output
    depends on the others (batch-independence); with B = 1 it is softmax attention."""
    B, H, S, d = k.shape
    T = q.shape[-2]
    kf = k.transpose(0, 1).reshape(H, B * S, d)  # (H, B S, d): element-major
    vf = v.transpose(0, 1).reshape(H, B * S, v.shape[-1])
    s = q @ kf.transpose(-1, -2)[None] / d**0.5  # (B, H, T, B S)
    if causal:
        keep = _causal_mask(T, S, q.device).repeat(1, B)  # position s of every element
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ vf[None]


def value_clipped_softmax(q, k, v, *, causal):
    """Softmax attention on values saturated to [-1, 1] (an int8/fp8 range guard left in): the
    output is not linear in v once a combination of values leaves the range (linearity-in-v)."""
    return softmax_attention(q, k, v.clamp(-1.0, 1.0), causal=causal)


_AUTOTUNED_CALLS = [0]


def autotuned_softmax(q, k, v, *, causal):
    """Softmax whose "autotuner" switches kernels between calls: every other call computes in
    float32 (the faster configuration picked after timing the first), so two calls on the same
    float64 inputs differ in their last bits (determinism)."""
    _AUTOTUNED_CALLS[0] += 1
    if _AUTOTUNED_CALLS[0] % 2:
        return softmax_attention(q.float(), k.float(), v.float(), causal=causal).to(q.dtype)
    return softmax_attention(q, k, v, causal=causal)


def scale_over_d_softmax(q, k, v, *, causal):
    """Softmax with the scores divided by d instead of sqrt(d) (the 1/sqrt(d) scale applied
    twice: once to q, once to the scores): claimed-scale tells 1/d from the claimed scale."""
    s = q @ k.transpose(-1, -2) / q.shape[-1]
    if causal:
        s = s.masked_fill(~_causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    return torch.softmax(s, -1) @ v


def cuda_half_softmax(q, k, v, *, causal):
    """Softmax attention that computes in float16 when its inputs are on CUDA (a fused kernel
    taken for every dtype): CUDA and CPU outputs of a float32 or float64 call disagree
    (device-agreement); on the CPU it is softmax attention."""
    if q.is_cuda:
        o = softmax_attention(q.half(), k.half(), v.half(), causal=causal)
        return o.to(q.dtype)
    return softmax_attention(q, k, v, causal=causal)
