"""FlashAttention-2's forward arithmetic, emulated in torch (any device), with named defects.

The emulation follows the kernel's sources step by step (Dao-AILab/flash-attention,
csrc/flash_attn/src: flash_api.cpp, flash_fwd_kernel.h, softmax.h, utils.h, alibi.h, mask.h),
so the precision models (D10, D16, D17: ``derivations.kernel_arithmetic.FLASH_ATTENTION_2``)
can be tested against the arithmetic they describe and the checker against realistic correct
and faulty kernels:

* raw scores s = q k^T in float32 (the products of bf16/fp16 numbers are exact in float32);
* softcap C: t = tanh_approx(s * fl(c / C)) and the softmax scale becomes C (flash_api.cpp:
  params.softcap = softmax_scale / softcap, scale_softmax = softcap); ``tanh.approx.f32`` is
  emulated as tanh(y)(1 + 2^-11), its cited worst relative error, in one direction;
* ALiBi slope m: the bias (m / sigma) j added to the raw score on causal rows (key-indexed),
  -(m / sigma)|t' - j| otherwise, sigma the softmax scale (flash_fwd_kernel.h, alibi.h);
* the window and causal mask (bottom-right, FlashAttention's window_size) as -inf;
* per key block of ``block_n`` keys: running maximum m (raw units), P = exp2(s sigma' - m
  sigma') with sigma' = fl(sigma log2 e) as two float32 operations (PyTorch's UNFUSE_FMA build),
  the rescale alpha = exp2((m_prev - m_new) sigma'), l = alpha l + rowsum(P) (float32),
  acc = alpha acc + fl_in(P) V (P rounded to the input type; float32 accumulation);
* o = acc * (1 / l) (a reciprocal and a product); lse = m sigma + log l;
* split-KV (``split_kv`` contiguous key ranges, flash-decoding): each range's (o_i in float32,
  lse_i), combined as FlashAttention-2's combine_attn_seqk_parallel: M = max lse_i,
  L = log sum exp(lse_i - M) + M, o = sum_i exp(lse_i - L) o_i;
* the output rounded to the input type; rows with no visible key give zeros.

k, v may have G heads dividing H (GQA: query head h reads kv head h // (H / G)).

``faults`` adds one defect of a hand-written kernel (:data:`FAULTS`):

* ``no-rescale``: acc is not multiplied by alpha when the running maximum grows;
* ``last-block-unmasked``: the keys of the last partial block are padded with zeros and the
  padding is not masked (each padded key adds weight exp(-m) with value 0);
* ``softcap-scale``: after the cap the exponent keeps the softmax scale c instead of C;
* ``alibi-unscaled``: the slope is added to the raw score without dividing by the scale;
* ``split-lse-base``: the split log-sum-exps are combined in base 2 while computed in base e;
* ``window-wide``: the window's left side one key wider;
* ``gqa-modulo``: query head h reads kv head h mod G instead of h // (H / G).
"""

from __future__ import annotations

import math

import torch

from derivations.kernel_arithmetic import TANH_APPROX_F32_REL

FAULTS = (
    "no-rescale",
    "last-block-unmasked",
    "softcap-scale",
    "alibi-unscaled",
    "split-lse-base",
    "window-wide",
    "gqa-modulo",
)
LOG2E = math.log2(math.e)


def _check(faults) -> tuple[str, ...]:
    bad = [f for f in faults if f not in FAULTS]
    if bad:
        raise ValueError(f"faults: expected names from {FAULTS}, got {bad}")
    return tuple(faults)


def _kv_heads(k, v, heads: int, modulo: bool):
    """k, v expanded to ``heads`` query heads (h // (H / G), or h mod G: the fault)."""
    G = k.shape[1]
    if G == heads:
        return k, v
    if heads % G:
        raise ValueError(f"k: {G} kv heads do not divide {heads} query heads")
    idx = [h % G if modulo else h // (heads // G) for h in range(heads)]
    return k[:, idx], v[:, idx]


def _visible(T: int, S: int, causal: bool, window, wide: bool, device):
    """Bool (T, S) of FlashAttention's bottom-right causal pattern and window."""
    t = torch.arange(T, device=device)[:, None] + (S - T)
    s = torch.arange(S, device=device)[None, :]
    vis = torch.ones(T, S, dtype=torch.bool, device=device)
    left, right = (-1, -1) if window is None else window
    if causal:
        right = 0
    if left >= 0:
        vis &= s >= t - left - (1 if wide else 0)
    if right >= 0:
        vis &= s <= t + right
    return vis


def _partial(q, k, v, cols, *, causal, scale, window, softcap, alibi_slopes, block_n, faults):
    """(acc (float32, normalized), lse (float32), any visible) over the keys ``cols``."""
    dt = q.dtype
    T, S, d = q.shape[-2], k.shape[-2], q.shape[-1]
    c = 1.0 / math.sqrt(d) if scale is None else float(scale)
    f32 = torch.float32
    sigma = c
    if softcap is not None:
        sigma = c if "softcap-scale" in faults else float(softcap)
        arg = torch.tensor(c / softcap, dtype=f32)
    scale_log2 = torch.tensor(sigma * LOG2E, dtype=f32)
    vis_all = _visible(T, S, causal, window, "window-wide" in faults, q.device)
    B, H = q.shape[0], q.shape[1]
    m = torch.full((B, H, T), -torch.inf, dtype=f32, device=q.device)
    l = torch.zeros((B, H, T), dtype=f32, device=q.device)
    acc = torch.zeros((B, H, T, v.shape[-1]), dtype=f32, device=q.device)
    qf = q.to(f32)
    lo, hi = cols
    pad = "last-block-unmasked" in faults
    for j in range(lo, hi, block_n):
        end = min(j + block_n, hi)
        kj, vj = k[..., j:end, :].to(f32), v[..., j:end, :].to(f32)
        vis = vis_all[:, j:end]
        idx = torch.arange(j, end, device=q.device, dtype=f32)
        if pad and end - j < block_n:  # the padding keys of the last block, read as zeros
            extra = block_n - (end - j)
            kj = torch.cat([kj, kj.new_zeros(*kj.shape[:-2], extra, d)], -2)
            vj = torch.cat([vj, vj.new_zeros(*vj.shape[:-2], extra, vj.shape[-1])], -2)
            vis = torch.cat([vis, vis.new_ones(T, extra)], -1)
            idx = torch.cat([idx, torch.arange(end, end + extra, device=q.device, dtype=f32)])
        s = qf @ kj.transpose(-1, -2)
        if softcap is not None:
            y = torch.tanh(s * arg)
            s = y * (1.0 + TANH_APPROX_F32_REL.value)
        if alibi_slopes is not None:
            mh = torch.as_tensor(alibi_slopes, dtype=f32, device=q.device)
            slope = (mh if "alibi-unscaled" in faults else (mh / sigma).to(f32))[:, None, None]
            if causal:
                s = s + slope * idx
            else:
                rows = torch.arange(T, device=q.device, dtype=f32)[:, None] + (S - T)
                s = s - slope * (rows - idx).abs()
        s = s.masked_fill(~vis, -torch.inf)
        m_new = torch.maximum(m, s.amax(-1))
        safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        alpha = torch.exp2((torch.where(torch.isfinite(m), m, safe) - safe) * scale_log2)
        p = torch.exp2(s * scale_log2 - (safe * scale_log2)[..., None])
        l = alpha * l + p.sum(-1)
        pv = p.to(dt).to(f32) @ vj
        acc = (acc if "no-rescale" in faults else alpha[..., None] * acc) + pv
        m = m_new
    has = l > 0
    inv = torch.where(has, 1.0 / torch.where(has, l, torch.ones_like(l)), torch.ones_like(l))
    out = acc * inv[..., None]
    lse = torch.where(has, m * torch.tensor(sigma, dtype=f32) + torch.log(l), -torch.inf)
    return out, lse


def flash_attention(
    q,
    k,
    v,
    *,
    causal: bool = False,
    scale: float | None = None,
    window: tuple[int, int] | None = None,
    softcap: float | None = None,
    alibi_slopes=None,
    block_n: int = 64,
    split_kv: int = 1,
    faults=(),
):
    """FlashAttention-2's forward pass, emulated (module docstring).

    Args:
        q: (B, H, T, d); k, v: (B, G, S, d), (B, G, S, d_v) with G dividing H; bf16, fp16,
            float32 or float64 (the arithmetic is float32 whatever the input).
        causal, scale, window, softcap, alibi_slopes: as ``verify.attention.softmax_attention``
            (window (left, right) bottom-right aligned; causal sets right = 0).
        block_n: keys per block (> 0). split_kv: contiguous key ranges combined by log-sum-exp.
        faults: names from :data:`FAULTS` (the defects above).

    Returns:
        (B, H, T, d_v) in q's dtype.

    Raises:
        ValueError: unknown faults, a bad block or split count, kv heads not dividing H.
    """
    faults = _check(faults)
    if not isinstance(block_n, int) or block_n < 1:
        raise ValueError(f"block_n: expected an int >= 1, got {block_n!r}")
    if not isinstance(split_kv, int) or split_kv < 1:
        raise ValueError(f"split_kv: expected an int >= 1, got {split_kv!r}")
    k, v = _kv_heads(k, v, q.shape[1], "gqa-modulo" in faults)
    S = k.shape[-2]
    kw = dict(causal=causal, scale=scale, window=window, softcap=softcap,
              alibi_slopes=alibi_slopes, block_n=block_n, faults=faults)  # fmt: skip
    if split_kv == 1:
        out, _ = _partial(q, k, v, (0, S), **kw)
        return out.to(q.dtype)
    size = math.ceil(S / split_kv)
    parts = [_partial(q, k, v, (i, min(i + size, S)), **kw) for i in range(0, S, size)]
    lse = torch.stack([p[1] for p in parts], -1)  # (B, H, T, P)
    top = lse.amax(-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    if "split-lse-base" in faults:  # log-sum-exps combined in base 2
        total = torch.log2(torch.exp2(lse - top).sum(-1, keepdim=True)) + top
        w = torch.exp2(lse - total)
    else:
        total = torch.log(torch.exp(lse - top).sum(-1, keepdim=True)) + top
        w = torch.exp(lse - total)
    w = torch.nan_to_num(w, nan=0.0)
    out = sum(w[..., i, None] * parts[i][0] for i in range(len(parts)))
    return out.to(q.dtype)
