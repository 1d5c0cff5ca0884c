"""Faithful emulations of the precision models (D10, ``derivations.precision_models``).

Each function computes softmax attention the way one class of real kernels does, in torch, on
bf16/fp16 (or wider) inputs, so the bounds of ``verify.exact.models`` can be tested against
the arithmetic they describe, the probes can tell the models apart by bit-matching a black-box
kernel, and the anchors' comparison has correct kernels beside faulty ones. ``faults`` adds one
rounding at a named place (the faulty twins of the tests):

* ``rowsum-rounded``: the row sum l rounded to the input type before the division;
* ``p-truncated``: P rounded toward zero (bit truncation) instead of to nearest;
* ``scores-rounded``: the scores rounded to the input type before the exp (an eager step in a
  fused kernel: an error u |s| in the exponent);
* ``scale-missing``: no 1/sqrt(d) (a missing scale);
* ``mask-shifted``: causal mask shifted by one (each query also sees the next key).

Shapes: q (B, H, T, d), k (B, H, S, d), v (B, H, S, d_v); returns (B, H, T, d_v) in q's dtype.
Causal masks are top-left aligned (T == S in the models' tests); ``attn_mask`` is boolean,
True = keep. Rows with no visible key return zeros.
"""

from __future__ import annotations

import math

FAULTS = ("rowsum-rounded", "p-truncated", "scores-rounded", "scale-missing", "mask-shifted")


def _check(faults) -> tuple[str, ...]:
    bad = [f for f in faults if f not in FAULTS]
    if bad:
        raise ValueError(f"faults: expected names from {FAULTS}, got {bad}")
    return tuple(faults)


def _visible(T, S, *, causal, attn_mask, window, device):
    """Bool (B?, H?, T, S): the causal pattern and mask, or FlashAttention's window (D15)."""
    from verify.spec.visibility import visible

    if window is None:
        return visible(T, S, causal=causal, attn_mask=attn_mask, device=device)
    from verify.attention.structure import effective_window, window_mask

    vis = window_mask(T, S, effective_window(tuple(window), causal), device=device)
    return vis if attn_mask is None else vis & attn_mask


def _transform(s, *, S: int, softcap=None, alibi_slopes=None):
    """The claimed score transforms in s's dtype: C tanh(s / C), then -m_h |t' - s| (D13, D12;
    ``verify.attention.structure``'s order)."""
    import torch

    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    if alibi_slopes is not None:
        T = s.shape[-2]
        dist = (torch.arange(T)[:, None] + (S - T) - torch.arange(S)[None, :]).abs()
        slopes = torch.as_tensor(alibi_slopes, dtype=torch.float32)[:, None, None]
        s = s - (slopes * dist).to(s.dtype)
    return s


def _scores(q, k, *, causal, attn_mask, scale, faults, softcap=None, alibi_slopes=None,
            window=None):  # fmt: skip
    """fp32 scores c q.k (then the claimed softcap and ALiBi) with masked entries -inf, and the
    visibility (B?, H?, T, S)."""
    import torch

    from verify.spec.visibility import visible

    T, S, d = q.shape[-2], k.shape[-2], q.shape[-1]
    c = 1.0 if "scale-missing" in faults else (1.0 / math.sqrt(d) if scale is None else scale)
    s = (q.float() @ k.float().transpose(-1, -2)) * c
    if "scores-rounded" in faults:
        s = s.to(q.dtype).float()
    s = _transform(s, softcap=softcap, alibi_slopes=alibi_slopes, S=S)
    vis = _visible(T, S, causal=causal, attn_mask=attn_mask, window=window, device=q.device)
    if "mask-shifted" in faults and causal:
        vis = vis | visible(T, S, causal=True, device=q.device).roll(1, -1)
    return s.masked_fill(~vis, -torch.inf), vis


def round_p(p, dtype, truncate: bool = False):
    """fp32 weights stored in ``dtype``: to nearest (``tensor.to``) or toward zero (the low
    16 bits of a float32 cleared: bfloat16 truncation; float16 by nextafter toward 0; the
    gradient passes straight through)."""
    import torch

    if not truncate or dtype == torch.float32:
        return p.to(dtype)
    x = p.detach()
    if dtype == torch.bfloat16:
        r = (x.contiguous().view(torch.int32) & -65536).view(torch.float32)
    else:
        r = x.to(dtype)
        r = torch.where(r.float().abs() > x.abs(), torch.nextafter(r, torch.zeros_like(r)), r)
        r = r.float()
    # the gradient flows as through a rounding to nearest (straight through)
    return (p + (r - x)).to(dtype)


def fused_attention(
    q, k, v, *, causal=False, attn_mask=None, scale=None, block=None, faults=(), **structure
):
    """The ``fused`` / ``online:B`` model: per key block of ``block`` keys (None: one block),
    running maximum m, P = exp(s - m) in fp32, l = alpha l + rowsum(P) in fp32, P rounded to
    the input type, acc = alpha acc + P~ V in fp32, out = acc / l rounded once
    (FlashAttention-2, arXiv 2307.08691, Algorithm 1). ``structure``: ``softcap``,
    ``alibi_slopes``, ``window`` applied to the fp32 scores (D12, D13, D15)."""
    import torch

    faults = _check(faults)
    dt = q.dtype
    s, _ = _scores(q, k, causal=causal, attn_mask=attn_mask, scale=scale, faults=faults,
                   **structure)  # fmt: skip
    S = s.shape[-1]
    b = S if block is None else int(block)
    vf = v.float()
    m = torch.full(s.shape[:-1], -torch.inf, device=s.device)
    l = torch.zeros(s.shape[:-1], device=s.device)
    acc = torch.zeros((*s.shape[:-1], v.shape[-1]), device=s.device)
    for j in range(0, S, b):
        sj = s[..., j : j + b]
        m_new = torch.maximum(m, sj.amax(-1))
        safe = torch.where(torch.isfinite(m_new), m_new, 0.0)
        alpha = torch.exp(m - safe)  # exp(-inf) = 0 on the first block
        p = torch.exp(sj - safe[..., None])
        l = alpha * l + p.sum(-1)
        pt = round_p(p, dt, truncate="p-truncated" in faults).float()
        acc = alpha[..., None] * acc + pt @ vf[..., j : j + b, :]
        m = m_new
    if "rowsum-rounded" in faults:
        l = l.to(dt).float()
    out = torch.where(l[..., None] > 0, acc / torch.where(l > 0, l, 1.0)[..., None], 0.0)
    return out.to(dt)


def eager_attention(q, k, v, *, causal=False, attn_mask=None, scale=None, faults=(), **structure):
    """The ``eager`` model: separate tensor operations in the input type -- s = (q @ k^T) * c
    (two roundings), the claimed ``softcap`` / ``alibi_slopes`` as input-type operations,
    softmax (fp32 inside, output rounded), P @ V (fp32 accumulation inside the matmul, output
    rounded). Empty rows: zeros (the NaN of softmax over -inf replaced)."""
    import torch

    faults = _check(faults)
    T, S, d = q.shape[-2], k.shape[-2], q.shape[-1]
    c = 1.0 if "scale-missing" in faults else (1.0 / math.sqrt(d) if scale is None else scale)
    s = (q @ k.transpose(-1, -2)) * c
    window = structure.pop("window", None)
    s = _transform(s, S=S, **structure)
    vis = _visible(T, S, causal=causal, attn_mask=attn_mask, window=window, device=q.device)
    p = torch.softmax(s.masked_fill(~vis, -torch.inf), -1)
    p = torch.nan_to_num(p, nan=0.0)
    return p @ v


def rounded_weights_attention(q, k, v, *, causal=False, attn_mask=None, scale=None, **structure):
    """The ``rounded-weights`` model: fp32 scores (and the claimed transforms), softmax in fp32,
    the weights rounded to the input type, P @ V with fp32 accumulation, output rounded (code
    that upcasts q and k). Empty rows: zeros."""
    import torch

    s, _ = _scores(q, k, causal=causal, attn_mask=attn_mask, scale=scale, faults=(),
                   **structure)  # fmt: skip
    p = torch.nan_to_num(torch.softmax(s, -1), nan=0.0).to(q.dtype)
    return (p.float() @ v.float()).to(q.dtype)


def _sum_in(terms, dtype, scheme: str, block: int | None):
    """Sum over axis -2 of ``terms`` (already in ``dtype``), every addition rounded to dtype."""
    import torch

    n = terms.shape[-2]
    if scheme == "recursive":
        acc = terms[..., 0, :]
        for i in range(1, n):
            acc = (acc + terms[..., i, :]).to(dtype)
        return acc
    if scheme == "pairwise":
        x = terms
        while x.shape[-2] > 1:
            if x.shape[-2] % 2:
                x = torch.cat([x, torch.zeros_like(x[..., :1, :])], -2)
            x = (x[..., 0::2, :] + x[..., 1::2, :]).to(dtype)
        return x[..., 0, :]
    parts = [_sum_in(terms[..., j : j + block, :], dtype, "recursive", None)
             for j in range(0, n, block)]  # fmt: skip
    return _sum_in(torch.stack(parts, -2), dtype, "recursive", None)


def input_accumulation_attention(
    q, k, v, *, causal=False, attn_mask=None, scale=None, scheme="recursive", block=None
):
    """The ``input-accumulation:SCHEME`` model: P as in ``fused`` (one block), then the
    products P~ v and the sums over keys (numerator and row sum) rounded to the input type at
    every step (``scheme`` recursive, pairwise or blocked with ``block`` terms per block)."""
    import torch

    dt = q.dtype
    s, _ = _scores(q, k, causal=causal, attn_mask=attn_mask, scale=scale, faults=())
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, 0.0)
    pt = torch.exp(s - m).to(dt)  # (B, H, T, S)
    prods = (pt[..., :, :, None] * v[..., None, :, :]).to(dt)  # (B, H, T, S, d_v)
    N = _sum_in(prods, dt, scheme, block).float()
    D = _sum_in(pt[..., None], dt, scheme, block).float()
    return torch.where(D > 0, N / torch.where(D > 0, D, 1.0), 0.0).to(dt)
