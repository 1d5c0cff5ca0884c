"""Variants whose conventions the probes must find under a kernel claim, and their twins.

* ``hf_eager_float32``: Hugging Face's eager attention pattern, scores, softmax and P.V in
  float32 whatever the input dtype (``softmax(..., dtype=torch.float32)``), the output cast back:
  correct softmax computed in float32; ``hf_llama_eager`` computes only the softmax in float32
  (its outputs are float64 numbers, its weights float32 ones).
  ``hf_eager_float32_claimed_float64`` declares ``compute_dtype="float64"``: its own claim,
  which the probes' finding must not excuse.
* ``even_head_dim_softmax``: softmax written for an even head dimension (it raises for odd d).
* ``clamped_linear``: elu+1 linear attention whose denominator is clamped at ``EPS``
  (``D.clamp(min=eps)``, as linear-attention-transformer writes it): N/max(D, eps).
  ``added_linear`` adds it instead, N/(D + eps). The ``*_claims_*`` twins declare the other
  convention (``AttentionVariant(eps=EPS, eps_mode=...)``).

Module-level objects, so ``attn-theory check tests.convention_variants:<name>`` loads them.
Tensors (B, H, T, d), layout ``BHTD``.
"""

from __future__ import annotations

import torch

from verify.spec.variant import AttentionVariant

#: the denominator's eps of the linear variants: large enough that rows with D < eps are drawn
#: (q and k with negative entries give elu+1 features e^x), as the floor needs to show
EPS = 0.5


def _causal(s, causal: bool):
    if not causal:
        return s
    T, S = s.shape[-2], s.shape[-1]
    return s.masked_fill(~torch.ones(T, S, dtype=torch.bool, device=s.device).tril(), float("-inf"))


def hf_eager_float32(q, k, v, *, causal):
    """Softmax attention computed in float32 (matmuls and softmax), returned in q's dtype."""
    qf, kf, vf = q.float(), k.float(), v.float()
    s = _causal(qf @ kf.transpose(-1, -2) * q.shape[-1] ** -0.5, causal)
    p = torch.softmax(s, -1, dtype=torch.float32)
    return (p @ vf).to(q.dtype)


def hf_llama_eager(q, k, v, *, causal):
    """Hugging Face's eager attention as its Llama code writes it: scores and P.V in the input
    dtype, only the softmax in float32 (``softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)``):
    for float64 inputs the outputs are float64 numbers, the weights float32 ones."""
    s = _causal(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, causal)
    return torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype) @ v


def hf_llama_eager_min_mask(q, k, v, *, causal):
    """``hf_llama_eager`` with Llama's additive causal mask of ``finfo(dtype).min`` (bottom-right):
    an emptied row is NaN in float64 (min + score overflows to -inf in the float32 softmax) and
    uniform in float32, so the empty-row convention differs by dtype."""
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        T, S = s.shape[-2:]
        keep = torch.ones(T, S, dtype=torch.bool, device=s.device).tril(S - T)
        s = s + torch.zeros(T, S, dtype=s.dtype).masked_fill(~keep, torch.finfo(s.dtype).min)
    return torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype) @ v


def hf_eager_float32_claimed_float64() -> AttentionVariant:
    """``hf_eager_float32`` declaring that it computes in float64 (it does not)."""
    return AttentionVariant(
        name="hf_eager_float32_claimed_float64",
        forward=hf_eager_float32,
        kernel="softmax",
        compute_dtype="float64",
    )


def even_head_dim_softmax(q, k, v, *, causal):
    """Softmax attention from code that splits the head dimension in halves (as rotary
    embeddings do): it raises for an odd d."""
    d = q.shape[-1]
    if d % 2:
        raise ValueError(f"q: the head dimension must be even, got {d}")
    q1, q2 = q.chunk(2, -1)
    k1, k2 = k.chunk(2, -1)
    s = (q1 @ k1.transpose(-1, -2) + q2 @ k2.transpose(-1, -2)) * d**-0.5
    return torch.softmax(_causal(s, causal), -1) @ v


def _elu1(x):
    """elu(x) + 1 without the cancellation of expm1(x) + 1: x + 1 for x > 0, e^x otherwise."""
    return torch.where(x > 0, x + 1, torch.exp(torch.clamp(x, max=0.0)))


def _linear(q, k, v, causal: bool, floor: bool):
    fq, fk = _elu1(q), _elu1(k)
    A = fq @ fk.transpose(-1, -2)
    if causal:
        T, S = A.shape[-2], A.shape[-1]
        A = A * torch.ones(T, S, dtype=A.dtype, device=A.device).tril()
    N, D = A @ v, A.sum(-1, keepdim=True)
    return N / (D.clamp(min=EPS) if floor else D + EPS)


def clamped_linear(q, k, v, *, causal):
    """elu+1 linear attention, N/max(D, EPS)."""
    return _linear(q, k, v, causal, floor=True)


def added_linear(q, k, v, *, causal):
    """elu+1 linear attention, N/(D + EPS)."""
    return _linear(q, k, v, causal, floor=False)


def added_claims_floor() -> AttentionVariant:
    """Adds eps, claims the floor: the twin ``oracle-agreement`` must fail."""
    return AttentionVariant(
        name="added_claims_floor",
        forward=added_linear,
        kernel="linear:elu1",
        eps=EPS,
        eps_mode="floor",
    )


def clamped_claims_add() -> AttentionVariant:
    """Clamps at eps, claims eps added: the twin ``oracle-agreement`` must fail."""
    return AttentionVariant(
        name="clamped_claims_add",
        forward=clamped_linear,
        kernel="linear:elu1",
        eps=EPS,
        eps_mode="add",
    )
