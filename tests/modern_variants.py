"""Variants with structural claims (D12-D15) and their deliberately faulty twins.

Each ``ok_*`` is a correct implementation declaring a window, grouped kv heads, a softcap, ALiBi
slopes, sigmoid attention, a key-padding mask or a decayed Taylor RNN; each ``bad_*`` carries one
defect the way it shows up in real code (a window one key too wide, ``repeat`` where
``repeat_interleave`` is meant, the softcap applied after the mask, the ALiBi bias sign or slope
order reversed, a padding mask read with the opposite convention, a chunked form that decays the
state once too often). ``TWINS`` maps each twin to its correct variant and to the property that
must decide it. Module-level objects, so ``attn-theory check tests.modern_variants:<name>`` loads
them. Tensors are (B, H, T, d), layout ``BHTD``.
"""

from __future__ import annotations

import math

import torch

from derivations.decay import alibi_slopes
from verify.attention import sigmoid_attention, softmax_attention, taylor_attention
from verify.attention.structure import window_mask
from verify.spec.variant import AttentionVariant

WINDOW = (2, 1)
SOFTCAP = 5.0
SIGMOID_BIAS = -1.0
DECAY = (0.9, 0.6)
CHUNK = 3


def _scores(q, k):
    return (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])


def _causal(s, causal: bool):
    """Scores with the causal mask applied (-inf above the diagonal, T == S) when ``causal``."""
    if not causal:
        return s
    T, S = s.shape[-2], s.shape[-1]
    return s.masked_fill(~torch.ones(T, S).tril().bool(), -math.inf)


def _gqa(k, v, heads: int, *, interleave: bool = True):
    g = k.shape[1]
    if g == heads:
        return k, v
    if interleave:
        return k.repeat_interleave(heads // g, 1), v.repeat_interleave(heads // g, 1)
    return k.repeat(1, heads // g, 1, 1), v.repeat(1, heads // g, 1, 1)  # tiled: the fault


# ---------------------------------------------------------------------------- window


def window_forward(q, k, v, *, causal, widen: int = 0):
    """Softmax attention under ``WINDOW`` (FlashAttention convention; causal: right = 0), by an
    explicit mask; ``widen`` keys more on the left (the fault: an off-by-one window edge)."""
    left, right = WINDOW[0] + widen, 0 if causal else WINDOW[1]
    mask = window_mask(q.shape[-2], k.shape[-2], (left, right), device=q.device)
    s = _scores(q, k).masked_fill(~mask, -math.inf)
    w = torch.softmax(s, -1).nan_to_num(0.0)
    return w @ v


ok_window = AttentionVariant(
    "ok-window", window_forward, kernel="softmax", window=WINDOW, causal_alignment="bottom-right"
)
bad_window = AttentionVariant(
    "bad-window-one-too-wide",
    lambda q, k, v, *, causal: window_forward(q, k, v, causal=causal, widen=1),
    kernel="softmax",
    window=WINDOW,
    causal_alignment="bottom-right",
)

# ---------------------------------------------------------------------------- grouped kv heads


def gqa_forward(q, k, v, *, causal, interleave: bool = True):
    """Softmax attention with G kv heads expanded to H (``repeat_interleave``, or ``repeat``)."""
    k, v = _gqa(k, v, q.shape[1], interleave=interleave)
    return softmax_attention(q, k, v, causal=causal)


ok_gqa = AttentionVariant("ok-gqa", gqa_forward, kernel="softmax", kv_heads=2)
bad_gqa = AttentionVariant(  # tiling differs from interleaving once G >= 2 and H / G >= 2
    "bad-gqa-repeat",
    lambda q, k, v, *, causal: gqa_forward(q, k, v, causal=causal, interleave=False),
    kernel="softmax",
    kv_heads=2,
)

# ---------------------------------------------------------------------------- softcap


def softcap_forward(q, k, v, *, causal, after_mask: bool = False):
    """Softmax of C tanh(s / C), masked after capping; ``after_mask`` caps the masked scores
    (-inf -> -C: the masked keys get weight e^{-C - max}, the fault)."""
    s = _scores(q, k)
    T, S = s.shape[-2], s.shape[-1]
    vis = torch.ones(T, S, dtype=torch.bool) if not causal else torch.ones(T, S).tril().bool()
    if after_mask:
        s = SOFTCAP * torch.tanh(s.masked_fill(~vis, -math.inf) / SOFTCAP)
    else:
        s = (SOFTCAP * torch.tanh(s / SOFTCAP)).masked_fill(~vis, -math.inf)
    return torch.softmax(s, -1) @ v


ok_softcap = AttentionVariant("ok-softcap", softcap_forward, kernel="softmax", softcap=SOFTCAP)
bad_softcap = AttentionVariant(
    "bad-softcap-after-mask",
    lambda q, k, v, *, causal: softcap_forward(q, k, v, causal=causal, after_mask=True),
    kernel="softmax",
    softcap=SOFTCAP,
)

# ---------------------------------------------------------------------------- ALiBi


def alibi_forward(q, k, v, *, causal, sign: float = 1.0, reverse: bool = False):
    """Softmax of s - m_h |t' - s| with the reference slopes (``sign=-1``: the bias added, not
    subtracted; ``reverse``: the slopes in reverse head order)."""
    slopes = alibi_slopes(q.shape[1])
    if reverse:
        slopes = slopes[::-1]
    T, S = q.shape[-2], k.shape[-2]
    dist = (torch.arange(T)[:, None] + (S - T) - torch.arange(S)[None, :]).abs()
    bias = torch.tensor(slopes, dtype=q.dtype)[:, None, None] * dist.to(q.dtype)
    return torch.softmax(_causal(_scores(q, k) - sign * bias, causal), -1) @ v


ok_alibi = AttentionVariant("ok-alibi", alibi_forward, kernel="softmax", alibi_slopes="reference")
bad_alibi_sign = AttentionVariant(
    "bad-alibi-sign",
    lambda q, k, v, *, causal: alibi_forward(q, k, v, causal=causal, sign=-1.0),
    kernel="softmax",
    alibi_slopes="reference",
)
bad_alibi_order = AttentionVariant(
    "bad-alibi-slope-order",
    lambda q, k, v, *, causal: alibi_forward(q, k, v, causal=causal, reverse=True),
    kernel="softmax",
    alibi_slopes="reference",
)

# ---------------------------------------------------------------------------- sigmoid


def sigmoid_forward(q, k, v, *, causal, bias: float = SIGMOID_BIAS):
    """sigma(c q.k + b) v, unnormalized (D14)."""
    return sigmoid_attention(q, k, v, causal=causal, bias=bias)


ok_sigmoid = AttentionVariant(
    "ok-sigmoid", sigmoid_forward, kernel="sigmoid", normalized=False, sigmoid_bias=SIGMOID_BIAS
)
bad_sigmoid = AttentionVariant(
    "bad-sigmoid-bias-sign",
    lambda q, k, v, *, causal: sigmoid_forward(q, k, v, causal=causal, bias=-SIGMOID_BIAS),
    kernel="sigmoid",
    normalized=False,
    sigmoid_bias=SIGMOID_BIAS,
)

# ---------------------------------------------------------------------------- key padding


def padding_forward(q, k, v, *, causal, key_padding_mask=None, flipped: bool = False):
    """Softmax attention with a (B, S) key-padding mask, True = keep (``flipped``: read as True
    = ignore, ``nn.MultiheadAttention``'s convention, the fault)."""
    mask = None
    if key_padding_mask is not None:
        keep = ~key_padding_mask if flipped else key_padding_mask
        mask = keep[:, None, None, :]
    return softmax_attention(q, k, v, causal=causal, attn_mask=mask)


ok_padding = AttentionVariant("ok-key-padding", padding_forward, kernel="softmax", key_padding=True)
bad_padding = AttentionVariant(
    "bad-key-padding-flipped",
    lambda q, k, v, *, causal, key_padding_mask=None: padding_forward(
        q, k, v, causal=causal, key_padding_mask=key_padding_mask, flipped=True
    ),
    kernel="softmax",
    key_padding=True,
)

# ---------------------------------------------------------------------------- decayed Taylor RNN


def _decayed_chunked(q, k, v, *, extra: bool):
    """Chunked decayed Taylor-2 (D12): exact within-chunk weights gamma^(t-s) kappa_2, plus the
    state before the chunk read with gamma^(t-a+1); ``extra`` multiplies the carried state by
    gamma once more per chunk (the fault: a decay applied once too often)."""
    from verify.attention import taylor_features

    pq, pk = taylor_features(q, 2), taylor_features(k, 2)  # kappa_2(q.k / sqrt(d)), D1
    B, H, T, _ = q.shape
    g = torch.tensor(DECAY, dtype=q.dtype)[:, None]  # (H, 1)
    S_num = torch.zeros(B, H, pk.shape[-1], v.shape[-1], dtype=q.dtype)
    S_den = torch.zeros(B, H, pk.shape[-1], dtype=q.dtype)
    out = []
    for a in range(0, T, CHUNK):
        b = min(a + CHUNK, T)
        n = b - a
        lag = torch.arange(n)[:, None] - torch.arange(n)[None, :]
        D = torch.where(lag >= 0, g[..., None] ** lag.clamp(min=0).to(q.dtype), 0.0)  # (H, n, n)
        A = (pq[:, :, a:b] @ pk[:, :, a:b].transpose(-1, -2)) * D
        into = g ** (torch.arange(n, dtype=q.dtype) + 1)  # gamma^(t - a + 1), (H, n)
        num = A @ v[:, :, a:b] + into[..., None] * (pq[:, :, a:b] @ S_num)
        den = A.sum(-1) + into * torch.einsum("bhtm,bhm->bht", pq[:, :, a:b], S_den)
        out.append(num / den[..., None])
        carry = g ** (n + (1 if extra else 0))  # (H, 1)
        back = g ** (n - 1 - torch.arange(n, dtype=q.dtype))  # gamma^(b-1-s)
        S_num = carry[..., None] * S_num + torch.einsum(
            "hs,bhsm,bhsj->bhmj", back, pk[:, :, a:b], v[:, :, a:b]
        )
        S_den = carry * S_den + torch.einsum("hs,bhsm->bhm", back, pk[:, :, a:b])
    return torch.cat(out, 2)


def decay_forward(q, k, v, *, causal):
    """The project's decayed Taylor-2 attention, parallel form (D12)."""
    return taylor_attention(q, k, v, order=2, causal=causal, decay=list(DECAY))


ok_decay = AttentionVariant(
    "ok-decay",
    decay_forward,
    kernel="taylor:2",
    causal="yes",
    decay=DECAY,
    forms={"chunked": lambda q, k, v, *, causal: _decayed_chunked(q, k, v, extra=False)},
)
bad_decay = AttentionVariant(
    "bad-decay-chunked-twice",
    decay_forward,
    kernel="taylor:2",
    causal="yes",
    decay=DECAY,
    forms={"chunked": lambda q, k, v, *, causal: _decayed_chunked(q, k, v, extra=True)},
)

# ---------------------------------------------------------------------------- cosine attention

TEMPERATURE = 10.0


def cosine_forward(q, k, v, *, causal, normalize_k: bool = True):
    """Softmax of tau (q/|q|).(k/|k|) (cosine attention, QK-norm; ``F.normalize``);
    ``normalize_k=False`` normalizes q only (the fault)."""
    import torch.nn.functional as F

    qn = F.normalize(q, dim=-1)
    kn = F.normalize(k, dim=-1) if normalize_k else k
    s = TEMPERATURE * (qn @ kn.transpose(-1, -2))
    return torch.softmax(_causal(s, causal), -1) @ v


ok_cosine = AttentionVariant(
    "ok-cosine", cosine_forward, kernel="softmax", qk_norm=True, scale=TEMPERATURE
)
bad_cosine = AttentionVariant(
    "bad-cosine-q-only",
    lambda q, k, v, *, causal: cosine_forward(q, k, v, causal=causal, normalize_k=False),
    kernel="softmax",
    qk_norm=True,
    scale=TEMPERATURE,
)

# ---------------------------------------------------------------------------- score bias


def bias_forward(q, k, v, *, causal, attn_bias=None, scaled_bias: bool = False):
    """Softmax of c q.k + bias (SDPA's float attn_mask); ``scaled_bias`` adds the bias before
    the scale, c (q.k + bias) (the fault)."""
    s = q @ k.transpose(-1, -2)
    c = 1.0 / math.sqrt(q.shape[-1])
    if attn_bias is not None:
        s = c * (s + attn_bias) if scaled_bias else c * s + attn_bias
    else:
        s = c * s
    return torch.softmax(_causal(s, causal), -1) @ v


ok_bias = AttentionVariant("ok-score-bias", bias_forward, kernel="softmax", score_bias=True)
bad_bias = AttentionVariant(
    "bad-score-bias-scaled",
    lambda q, k, v, *, causal, attn_bias=None: bias_forward(
        q, k, v, causal=causal, attn_bias=attn_bias, scaled_bias=True
    ),
    kernel="softmax",
    score_bias=True,
)

# ---------------------------------------------------------------------------- a declared map


def hedgehog(x: torch.Tensor) -> torch.Tensor:
    """Hedgehog's feature map with an identity projection: [softmax(x), softmax(-x)] over the
    head dimension (Zhang et al. 2024), positive features."""
    return torch.cat([torch.softmax(x, -1), torch.softmax(-x, -1)], -1)


def _hedgehog_forward(q, k, v, *, causal, flip: bool = True):
    """Normalized linear attention phi(q) phi(k)^T v / sum; ``flip=False`` uses softmax(x)
    twice (the fault: the negated half dropped)."""
    phi = hedgehog if flip else (lambda x: torch.cat([torch.softmax(x, -1)] * 2, -1))
    A = phi(q) @ phi(k).transpose(-1, -2)
    if causal:
        A = A.tril()
    return (A @ v) / A.sum(-1, keepdim=True)


ok_hedgehog = AttentionVariant(
    "ok-hedgehog", _hedgehog_forward, kernel="linear:phi", feature_map=hedgehog
)
bad_hedgehog = AttentionVariant(
    "bad-hedgehog-half-map",
    lambda q, k, v, *, causal: _hedgehog_forward(q, k, v, causal=causal, flip=False),
    kernel="linear:phi",
    feature_map=hedgehog,
)

#: faulty twin -> (correct variant, the property that must fail on the twin and pass on it)
TWINS = {
    "bad_window": ("ok_window", "window-extent"),
    "bad_gqa": ("ok_gqa", "head-groups"),
    "bad_softcap": ("ok_softcap", "causality"),
    "bad_alibi_sign": ("ok_alibi", "oracle-agreement"),
    "bad_alibi_order": ("ok_alibi", "oracle-agreement"),
    "bad_sigmoid": ("ok_sigmoid", "oracle-agreement"),
    "bad_padding": ("ok_padding", "key-padding"),
    "bad_decay": ("ok_decay", "forms-agree"),
    "bad_hedgehog": ("ok_hedgehog", "oracle-agreement"),
    "bad_cosine": ("ok_cosine", "oracle-agreement"),
    "bad_bias": ("ok_bias", "score-bias"),
}
