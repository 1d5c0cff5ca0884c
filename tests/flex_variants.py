"""FlexAttention variants for ``tests/test_flex_claims.py``: torch's eager ``flex_attention`` with
correct score_mods and mask_mods (softcap, ALiBi, a document mask, a sliding window), and the
faulty twins (a score_mod applied with the wrong sign, also in plain torch, a BlockMask reused
at another block size, a BlockMask whose blocks are all listed full).

Every function here has torch's signature; the forwards take ``(q, k, v, *, causal)`` in BHTD.
"""

from __future__ import annotations

import warnings

import torch

#: the softcap C and the ALiBi slope of the variants
CAP = 2.0
SLOPE = 0.5
#: sliding window: key kv visible from query q iff q - WINDOW <= kv <= q
WINDOW = 3
#: document boundaries of a document mask, cycled along the sequence (lengths 3, 5, 2)
DOC_LENGTHS = (3, 5, 2)


def _doc_ids(n: int) -> torch.Tensor:
    ids, doc = [], 0
    while len(ids) < n:
        ids += [doc] * DOC_LENGTHS[doc % len(DOC_LENGTHS)]
        doc += 1
    return torch.tensor(ids[:n], dtype=torch.int64)


#: the document ids of positions 0..1023 (a mask_mod indexes a tensor, as torch's examples do)
DOCS = _doc_ids(1024)


def softcap(score, b, h, q_idx, kv_idx):
    return CAP * torch.tanh(score / CAP)


def softcap_wrong_sign(score, b, h, q_idx, kv_idx):
    return -CAP * torch.tanh(score / CAP)


def alibi(score, b, h, q_idx, kv_idx):
    return score - SLOPE * (q_idx - kv_idx).abs()


def alibi_wrong_sign(score, b, h, q_idx, kv_idx):
    return score + SLOPE * (q_idx - kv_idx).abs()


def document(b, h, q_idx, kv_idx):
    return DOCS[q_idx] == DOCS[kv_idx]


def sliding_window(b, h, q_idx, kv_idx):
    return (kv_idx <= q_idx) & (q_idx - kv_idx <= WINDOW)


def _flex(q, k, v, score_mod=None, mask_mod=None, causal=False):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def combined(b, h, q_idx, kv_idx):
        keep = q_idx >= kv_idx if causal else q_idx >= 0
        return keep if mask_mod is None else keep & mask_mod(b, h, q_idx, kv_idx)

    block_mask = None
    if causal or mask_mod is not None:
        T, S = q.shape[-2], k.shape[-2]
        block_mask = create_block_mask(combined, None, None, T, S, device=q.device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)


def flex_softcap(q, k, v, *, causal):
    return _flex(q, k, v, softcap, causal=causal)


def flex_softcap_wrong_sign(q, k, v, *, causal):
    return _flex(q, k, v, softcap_wrong_sign, causal=causal)


def eager_softcap_wrong_sign(q, k, v, *, causal):
    """What ``flex_softcap_wrong_sign`` computes, in plain torch: the softcap score_mod with the
    wrong sign on the scores c q.k, the causal mask top-left (flex's q_idx >= kv_idx); the twin
    of ``tests/test_reproducers.py``, without flex_attention's cost of a second per call."""
    s = softcap_wrong_sign(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, None, None, None, None)
    if causal:
        T, S = s.shape[-2:]
        keep = torch.ones(T, S, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v


def flex_alibi(q, k, v, *, causal):
    return _flex(q, k, v, alibi, causal=causal)


def flex_alibi_wrong_sign(q, k, v, *, causal):
    return _flex(q, k, v, alibi_wrong_sign, causal=causal)


def flex_document(q, k, v, *, causal):
    return _flex(q, k, v, mask_mod=document, causal=causal)


def flex_window(q, k, v, *, causal):
    return _flex(q, k, v, mask_mod=sliding_window, causal=causal)


def flex_softcap_document(q, k, v, *, causal):
    return _flex(q, k, v, softcap, document, causal=causal)


# --------------------------------------------------------------------------- block masks


def document_block_mask(B, H, T, S):
    """The document mask's BlockMask at block size 64 (torch's create_block_mask)."""
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(document, B, H, T, S, device="cpu", BLOCK_SIZE=64)


def document_block_mask_wrong_size(B, H, T, S):
    """Faulty: the kv block lists built at block size 64, reused as a block size 32 mask."""
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask

    bm = create_block_mask(document, B, H, T, S, device="cpu", BLOCK_SIZE=64)
    return BlockMask.from_kv_blocks(
        bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks, bm.full_kv_indices,
        BLOCK_SIZE=32, mask_mod=document, seq_lengths=(T, S),
    )  # fmt: skip


def window_block_mask_all_full(B, H, T, S):
    """Faulty: every listed block marked full (the window's boundary inside a block lost)."""
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask

    bm = create_block_mask(sliding_window, B, H, T, S, device="cpu", BLOCK_SIZE=16)
    return BlockMask.from_kv_blocks(
        torch.zeros_like(bm.kv_num_blocks), bm.kv_indices,
        bm.kv_num_blocks + bm.full_kv_num_blocks, _merged(bm), BLOCK_SIZE=16,
        mask_mod=sliding_window, seq_lengths=(T, S),
    )  # fmt: skip


def _merged(bm):
    """The kv block indices of the partial and the full blocks of each row, in one list."""
    n_part, n_full = bm.kv_num_blocks, bm.full_kv_num_blocks
    out = torch.zeros_like(bm.kv_indices)
    for idx in torch.cartesian_prod(*(torch.arange(s) for s in n_part.shape)).reshape(-1, 3):
        b, h, r = (int(i) for i in idx)
        a, f = int(n_part[b, h, r]), int(n_full[b, h, r])
        row = torch.cat([bm.kv_indices[b, h, r, :a], bm.full_kv_indices[b, h, r, :f]])
        out[b, h, r, : a + f] = row
    return out


def window_block_mask(B, H, T, S):
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(sliding_window, B, H, T, S, device="cpu", BLOCK_SIZE=16)
