"""FlashAttention-2's forward emulation (``verify.attention.flash``) as checkable variants: the
correct kernel beside one variant per named defect of ``verify.attention.flash.FAULTS``, and an
online softmax over key blocks of 64 that forgets to rescale its accumulator, written out in
torch (``online_no_rescale``, with its correct twin ``online_rescaled``).

Every variant claims what the kernel computes: the softmax kernel, FlashAttention's
bottom-right causal alignment, the ``online:64`` precision model and the ``flash-attention-2``
arithmetic (D17), plus the structural claim of the defect's feature (a window, a softcap, the
reference ALiBi slopes, two kv heads, two key splits). ``TWINS`` maps each faulty variant to its
correct twin and the property that must decide it. Module-level objects, so
``attn-theory check tests.flash_variants:<name>`` loads them. Tensors are (B, H, T, d).
"""

from __future__ import annotations

import math

import torch

from derivations.decay import alibi_slopes
from verify.attention.flash import flash_attention
from verify.spec.variant import AttentionVariant

#: the window, softcap and key splits the structural twins claim
WINDOW = (2, 1)
SOFTCAP = 5.0
SPLITS = 2
#: keys per block of the online softmax (FlashAttention-2's block_n for d <= 64)
BLOCK = 64
DTYPES = ("float64", "float32", "bfloat16", "float16")


def _flash(name: str, faults: tuple[str, ...] = (), *, split: int = 1, **claims):
    """A variant calling ``flash_attention`` with the claimed structure and ``faults``."""
    window, softcap = claims.get("window"), claims.get("softcap")
    alibi = claims.get("alibi_slopes") is not None

    def forward(q, k, v, *, causal):
        slopes = list(alibi_slopes(q.shape[1])) if alibi else None
        return flash_attention(q, k, v, causal=causal, window=window, softcap=softcap,
                               alibi_slopes=slopes, split_kv=split, faults=faults)  # fmt: skip

    arithmetic = "flash-attention-2" + (f"+split:{split}" if split > 1 else "")
    return AttentionVariant(
        name=name,
        forward=forward,
        kernel="softmax",
        causal_alignment="bottom-right",
        precision=f"online:{BLOCK}",
        arithmetic=arithmetic,
        dtypes=DTYPES,
        **claims,
    )


ok_flash = _flash("ok-flash")
bad_flash_no_rescale = _flash("bad-flash-no-rescale", ("no-rescale",))
bad_flash_last_block = _flash("bad-flash-last-block-unmasked", ("last-block-unmasked",))
ok_flash_softcap = _flash("ok-flash-softcap", softcap=SOFTCAP)
bad_flash_softcap = _flash("bad-flash-softcap-scale", ("softcap-scale",), softcap=SOFTCAP)
ok_flash_alibi = _flash("ok-flash-alibi", alibi_slopes="reference")
bad_flash_alibi = _flash("bad-flash-alibi-unscaled", ("alibi-unscaled",), alibi_slopes="reference")
ok_flash_split = _flash("ok-flash-split", split=SPLITS)
bad_flash_split = _flash("bad-flash-split-lse-base", ("split-lse-base",), split=SPLITS)
ok_flash_window = _flash("ok-flash-window", window=WINDOW)
bad_flash_window = _flash("bad-flash-window-wide", ("window-wide",), window=WINDOW)
ok_flash_gqa = _flash("ok-flash-gqa", kv_heads=2)
bad_flash_gqa = _flash("bad-flash-gqa-modulo", ("gqa-modulo",), kv_heads=2)


def online_softmax(q, k, v, *, causal, rescale: bool = True, block: int = BLOCK):
    """Softmax attention by the online softmax over key blocks of ``block`` keys, float32
    arithmetic, P rounded to the input type before P V (FlashAttention-2, Algorithm 1); causal
    masks bottom-right aligned. ``rescale=False`` (the defect): when the running maximum grows,
    the row sum is rescaled by alpha = exp(m_old - m_new) but the accumulator is not."""
    dt, f32 = q.dtype, torch.float32
    T, S = q.shape[-2], k.shape[-2]
    s = (q.to(f32) @ k.to(f32).transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        vis = torch.arange(S)[None, :] <= torch.arange(T)[:, None] + (S - T)
        s = s.masked_fill(~vis, -math.inf)
    m = torch.full(s.shape[:-1], -math.inf, dtype=f32)
    l = torch.zeros(s.shape[:-1], dtype=f32)
    acc = torch.zeros((*s.shape[:-1], v.shape[-1]), dtype=f32)
    for j in range(0, S, block):
        sj = s[..., j : j + block]
        m_new = torch.maximum(m, sj.amax(-1))
        safe = torch.where(torch.isfinite(m_new), m_new, 0.0)
        alpha = torch.exp(m - safe)
        p = torch.exp(sj - safe[..., None])
        l = alpha * l + p.sum(-1)
        pv = p.to(dt).to(f32) @ v[..., j : j + block, :].to(f32)
        acc = (alpha[..., None] * acc if rescale else acc) + pv
        m = m_new
    out = torch.where(l[..., None] > 0, acc / torch.where(l > 0, l, 1.0)[..., None], 0.0)
    return out.to(dt)


def online_rescaled(q, k, v, *, causal):
    """The correct online softmax (a plain function, as users bring one)."""
    return online_softmax(q, k, v, causal=causal)


def online_no_rescale(q, k, v, *, causal):
    """The online softmax that forgets to rescale its accumulator (the defect)."""
    return online_softmax(q, k, v, causal=causal, rescale=False)


#: faulty variant -> (its correct twin, the property that must decide it)
TWINS = {
    "bad_flash_no_rescale": ("ok_flash", "oracle-agreement"),
    "bad_flash_last_block": ("ok_flash", "oracle-agreement"),
    "bad_flash_softcap": ("ok_flash_softcap", "oracle-agreement"),
    "bad_flash_alibi": ("ok_flash_alibi", "oracle-agreement"),
    "bad_flash_split": ("ok_flash_split", "oracle-agreement"),
    "bad_flash_window": ("ok_flash_window", "window-extent"),
    "bad_flash_gqa": ("ok_flash_gqa", "head-groups"),
}
