"""Deliberately faulty attention variants, one per fault class of ``verify/spec/faults.py``,
and their correct twins.

Each ``faultNN_*`` object is an :class:`~verify.spec.variant.AttentionVariant` whose implementation
carries the defect of fault class NN the way it shows up in real code (an index off by one
chunk, zero padding entering a state, an axis written for another layout, a helper under
``torch.no_grad``, ...). Its ``twinNN_*`` runs the same code with the defect switched off (or
is a built-in variant), so a property that fails on the first and passes on the second
discriminates exactly that defect. The objects are module-level, so the checker can load them
as ``tests.faulty_variants:<name>`` (``attn-theory check``); ``FAULTY`` and ``TWINS`` map the
fault class number to the names.

All tensors are (B, H, T, d) (layout ``BHTD``); the Taylor-2 variants use the scale
c = 1/sqrt(d) absorbed as sqrt(c) on q and k, the elu+1 variants phi(q) . phi(k) (c = 1).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from verify import builtins as variants
from verify.attention import taylor_features
from verify.spec.variant import AttentionVariant, StateAPI

# ----------------------------------------------------------------------------- feature maps


def taylor2_symmetric(x: torch.Tensor) -> torch.Tensor:
    """The correct order-2 symmetric monomial map (D1): phi(q).phi(k) = kappa_2(q.k/sqrt(d))."""
    return taylor_features(x, 2, basis="symmetric")


def taylor2_elementwise(x: torch.Tensor) -> torch.Tensor:
    """Fault class 10: [1, x~, x~^2/sqrt(2)] element-wise (x~ = sqrt(c) x); right only for d = 1."""
    xs = x * (1.0 / math.sqrt(x.shape[-1])) ** 0.5
    return torch.cat([torch.ones_like(xs[..., :1]), xs, xs * xs / math.sqrt(2.0)], -1)


def elu1(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1.0


def _feature_parallel(phi, q, k, v, causal: bool) -> torch.Tensor:
    """Normalized feature-form attention through the T x S matrix phi(q) phi(k)^T."""
    A = phi(q) @ phi(k).transpose(-1, -2)
    if causal:
        A = A.tril()
    return (A @ v) / A.sum(-1, keepdim=True)


# ------------------------------------------------------------------------------- fault class 1


def _chunked_taylor2(q, k, v, *, causal, chunk_size, read_current_state):
    """Chunked Taylor-2 attention: exact within-chunk weights plus the state before the chunk.

    ``read_current_state`` (fault class 1): the cross-chunk term of chunk i reads the state
    *after* chunk i (``states[i]``) instead of the one before it (``states[i - 1]``): chunk 0
    is right, every later chunk counts its own keys twice and sees its future keys.
    """
    fq, fk = taylor2_symmetric(q), taylor2_symmetric(k)
    va = torch.cat([v, torch.ones_like(v[..., :1])], -1)  # the ones column carries z
    S, C = k.shape[-2], chunk_size
    starts = list(range(0, S, C))  # T == S when causal
    state = torch.zeros(*fk.shape[:2], fk.shape[-1], va.shape[-1], dtype=q.dtype)
    states = []
    for lo in starts:
        state = state + fk[..., lo : lo + C, :].transpose(-1, -2) @ va[..., lo : lo + C, :]
        states.append(state)
    if not causal:
        out = fq @ states[-1]
        return out[..., :-1] / out[..., -1:]
    outs = []
    for i, lo in enumerate(starts):
        fq_c, fk_c, va_c = fq[..., lo : lo + C, :], fk[..., lo : lo + C, :], va[..., lo : lo + C, :]
        if i == 0:
            prev = torch.zeros_like(state)
        else:
            prev = states[i] if read_current_state else states[i - 1]
        intra = (fq_c @ fk_c.transpose(-1, -2)).tril()
        outs.append(intra @ va_c + fq_c @ prev)
    out = torch.cat(outs, -2)
    return out[..., :-1] / out[..., -1:]


def _recurrent_taylor2(q, k, v, *, causal):
    fq, fk = taylor2_symmetric(q), taylor2_symmetric(k)
    S = torch.zeros(*fk.shape[:2], fk.shape[-1], v.shape[-1], dtype=q.dtype)
    z = torch.zeros(*fk.shape[:2], fk.shape[-1], dtype=q.dtype)
    if not causal:
        S, z = fk.transpose(-1, -2) @ v, fk.sum(-2)
        return (fq @ S) / (fq @ z[..., None])
    outs = []
    for t in range(q.shape[-2]):
        S = S + fk[..., t, :, None] * v[..., t, None, :]
        z = z + fk[..., t, :]
        outs.append((fq[..., t, None, :] @ S)[..., 0, :] / (fq[..., t, :] * z).sum(-1)[..., None])
    return torch.stack(outs, -2)


def _taylor2_parallel(q, k, v, *, causal):
    return _feature_parallel(taylor2_symmetric, q, k, v, causal)


def _chunked_variant(name: str, *, defect: bool) -> AttentionVariant:
    forms = {"recurrent": _recurrent_taylor2}
    for C in (1, 3, 64):
        forms[f"chunked/C={C}"] = lambda q, k, v, *, causal, _C=C: _chunked_taylor2(
            q, k, v, causal=causal, chunk_size=_C, read_current_state=defect
        )
    return AttentionVariant(
        name=name,
        forward=_taylor2_parallel,
        kernel="taylor:2",
        forms=forms,
        feature_map=taylor2_symmetric,
        description="fault class 1: chunked Taylor-2 reading the current chunk's state"
        if defect
        else "chunked Taylor-2, state before each chunk (twin of fault class 1)",
    )


fault01_chunk_wrong_state = _chunked_variant("fault01-chunk-wrong-state", defect=True)
twin01_chunk_state = _chunked_variant("twin01-chunk-state", defect=False)


# --------------------------------------------------------------------------- fault classes 2, 3


def _taylor2_prefill(q, k, v, state=None, *, chunk_size=64, pad=False, resume_denominator=True):
    """Chunked causal prefill of Taylor-2 attention with state (S, z) = (sum phi(k) v^T,
    sum phi(k)); returns (o, state).

    ``pad`` (fault class 2): the sequence is zero-padded to a multiple of the chunk size and the
    padded keys are summed into z (phi(0) = e_0 != 0), so the final state is wrong whenever T
    is not a multiple of the chunk size, although the outputs of the prefill are right.
    ``resume_denominator=False`` (fault class 3): a given state's z is dropped (only the numerator
    is carried across segments).
    """
    B, H, T, d = q.shape
    fq, fk = taylor2_symmetric(q), taylor2_symmetric(k)
    m = fq.shape[-1]
    if state is None:
        S = torch.zeros(B, H, m, v.shape[-1], dtype=q.dtype)
        z = torch.zeros(B, H, m, dtype=q.dtype)
    else:
        S = state[0]
        z = state[1] if resume_denominator else torch.zeros_like(state[1])
    if pad and T % chunk_size:
        extra = chunk_size - T % chunk_size
        zeros = torch.zeros(B, H, extra, d, dtype=q.dtype)
        fq = torch.cat([fq, taylor2_symmetric(zeros)], -2)
        fk = torch.cat([fk, taylor2_symmetric(zeros)], -2)
        v = torch.cat([v, torch.zeros(B, H, extra, v.shape[-1], dtype=v.dtype)], -2)
    outs = []
    for lo in range(0, fq.shape[-2], chunk_size):
        fq_c, fk_c, v_c = (t[..., lo : lo + chunk_size, :] for t in (fq, fk, v))
        intra = (fq_c @ fk_c.transpose(-1, -2)).tril()
        num = intra @ v_c + fq_c @ S
        den = intra.sum(-1) + (fq_c @ z[..., None])[..., 0]
        outs.append(num / den[..., None])
        S = S + fk_c.transpose(-1, -2) @ v_c
        z = z + fk_c.sum(-2)
    return torch.cat(outs, -2)[..., :T, :], (S, z)


def _taylor2_step(state, q_t, k_t, v_t):
    S, z = state
    fq, fk = taylor2_symmetric(q_t), taylor2_symmetric(k_t)
    S = S + fk[..., :, None] * v_t[..., None, :]
    z = z + fk
    o = (fq[..., None, :] @ S)[..., 0, :] / (fq * z).sum(-1, keepdim=True)
    return o, (S, z)


def _state_variant(name: str, description: str, **prefill_kw) -> AttentionVariant:
    def prefill(q, k, v, state=None):
        return _taylor2_prefill(q, k, v, state, **prefill_kw)

    return AttentionVariant(
        name=name,
        forward=_taylor2_parallel,
        kernel="taylor:2",
        feature_map=taylor2_symmetric,
        state_api=StateAPI(prefill=prefill, step=_taylor2_step),
        description=description,
    )


fault02_padding_enters_state = _state_variant(
    "fault02-padding-enters-state",
    "fault class 2: zero padding of the last chunk is summed into the Taylor-2 state",
    pad=True,
)
twin02_no_padding = _state_variant(
    "twin02-no-padding", "Taylor-2 prefill, partial last chunk (twin of fault class 2)"
)
fault03_resume_forgets_denominator = _state_variant(
    "fault03-resume-forgets-denominator",
    "fault class 3: resuming a split sequence carries the numerator state only",
    resume_denominator=False,
)
twin03_resume = _state_variant(
    "twin03-resume", "Taylor-2 prefill resuming numerator and denominator (twin of fault class 3)"
)


# ------------------------------------------------------------------------- fault classes 4-6, 11


def _key_sum(fk, defect):
    """Running key sum z_t = sum_{s<=t} phi(k_s) over the time axis of (B, H, T, m)."""
    if defect == "heads_axis":  # fault class 4: written for (B, T, H, m), where dim 1 is time
        return fk.cumsum(dim=1)
    if defect == "detached":  # fault class 5: computed outside autograd
        with torch.no_grad():
            return fk.cumsum(dim=2)
    return fk.cumsum(dim=2)


def _linear_elu1(q, k, v, *, causal, defect=None):
    """Normalized elu+1 linear attention, numerator and normalizer in float32 for bf16/fp16.

    Defects: ``heads_axis`` (fault class 4), ``detached`` (5), ``multiplied`` (6: N * D),
    ``query_left_out`` (6: D = 1^T z instead of phi(q)^T z), ``fp16_normalizer`` (11: the
    normalizer phi(q)^T z accumulated and stored in the input precision).
    """
    low = q.dtype in (torch.float16, torch.bfloat16)
    acc = torch.float32 if low else q.dtype
    fq, fk, va = elu1(q.to(acc)), elu1(k.to(acc)), v.to(acc)
    if causal:
        kv = (fk[..., :, None] * va[..., None, :]).cumsum(2)  # (B, H, T, m, d_v)
        num = (fq[..., :, None] * kv).sum(-2)
        z = _key_sum(fk, defect)
    else:
        num = fq @ (fk.transpose(-1, -2) @ va)
        z = fk.sum(2, keepdim=True)
    if defect == "fp16_normalizer" and low:
        zl = fk.to(q.dtype).cumsum(2) if causal else fk.to(q.dtype).sum(2, keepdim=True)
        den = (fq.to(q.dtype) * zl).sum(-1, keepdim=True).to(acc)
    elif defect == "query_left_out":
        den = z.sum(-1, keepdim=True)
    else:
        den = (fq * z).sum(-1, keepdim=True)
    out = num * den if defect == "multiplied" else num / den
    return out.to(q.dtype)


def _elu1_variant(name: str, defect, description: str, **claims) -> AttentionVariant:
    def forward(q, k, v, *, causal):
        return _linear_elu1(q, k, v, causal=causal, defect=defect)

    opts = dict(
        name=name,
        forward=forward,
        kernel="linear:elu1",
        feature_map=elu1,
        feature_scale="none",
        description=description,
    )
    opts.update(claims)
    return AttentionVariant(**opts)


fault04_normalizer_over_heads = _elu1_variant(
    "fault04-normalizer-over-heads",
    "heads_axis",
    "fault class 4: causal key sum taken over the head axis (cumsum(dim=1) in BHTD)",
    causal="yes",
)
twin04_normalizer_over_time = _elu1_variant(
    "twin04-normalizer-over-time", None, "causal elu+1, key sum over time (twin of fault class 4)",
    causal="yes",
)  # fmt: skip
fault05_key_sum_detached = _elu1_variant(
    "fault05-key-sum-detached",
    "detached",
    "fault class 5: running key sum computed under torch.no_grad (dk misses the normalizer)",
    causal="yes",
)
twin05_key_sum_tracked = _elu1_variant(
    "twin05-key-sum-tracked", None, "causal elu+1, key sum in autograd (twin of fault class 5)",
    causal="yes",
)  # fmt: skip
fault06_normalizer_multiplied = _elu1_variant(
    "fault06-normalizer-multiplied", "multiplied", "fault class 6: N * D instead of N / D"
)
fault06_query_left_out = _elu1_variant(
    "fault06-query-left-out",
    "query_left_out",
    "fault class 6: the normalizer sums the key features without the query (1^T z)",
)
twin06_normalizer = _elu1_variant("twin06-normalizer", None, "elu+1, N / (phi(q)^T z)")
fault11_fp16_normalizer = _elu1_variant(
    "fault11-fp16-normalizer",
    "fp16_normalizer",
    "fault class 11: the normalizer phi(q)^T z accumulated in the input precision",
    dtypes=("float64", "float32", "bfloat16", "float16"),
)
twin11_fp32_normalizer = _elu1_variant(
    "twin11-fp32-normalizer",
    None,
    "elu+1 with numerator and normalizer in float32 for bf16/fp16 (twin of fault class 11)",
    dtypes=("float64", "float32", "bfloat16", "float16"),
)


# ---------------------------------------------------------------------------- fault classes 7-9


def _softmax_masked(x, vis, v):
    """softmax over the visible scores with exactly zero masked weights (rows with no key: 0)."""
    m = torch.where(vis, x, float("-inf")).amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, 0.0).detach()
    w = torch.where(vis, torch.exp(torch.where(vis, x, m) - m), 0.0)
    D = w.sum(-1, keepdim=True)
    return torch.where(D > 0, (w @ v) / torch.where(D > 0, D, 1.0), 0.0)


def _softmax_bottom_right(q, k, v, *, causal):
    """Softmax attention; causal with T != S aligned bottom-right (key s visible to query t
    iff s <= t + S - T, FlashAttention >= 2.1)."""
    T, S = q.shape[-2], k.shape[-2]
    x = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    vis = torch.ones(T, S, dtype=torch.bool)
    if causal:
        vis = torch.arange(S)[None, :] <= torch.arange(T)[:, None] + (S - T)
    return _softmax_masked(x, vis, v)


fault07_alignment_mislabelled = AttentionVariant(
    name="fault07-alignment-mislabelled",
    forward=_softmax_bottom_right,
    kernel="softmax",
    causal_alignment="top-left",
    description="fault class 7: bottom-right causal alignment declared as top-left (SDPA's)",
)
twin07_alignment_declared = AttentionVariant(
    name="twin07-alignment-declared",
    forward=_softmax_bottom_right,
    kernel="softmax",
    causal_alignment="bottom-right",
    description="bottom-right causal alignment, declared as such (twin of fault class 7)",
)


def _softmax_additive_mask(q, k, v, *, causal, attn_mask=None, sentinel=float("-inf")):
    """Softmax with the mask added to the scores as ``sentinel`` (-inf or a finite -1e4).

    -inf (fault class 8, first half): a row that sees no key is softmax(all -inf) = NaN.
    -1e4 (fault class 8, second half): a masked key whose score is huge (k = 1e10) still dominates,
    and a row with no visible key averages the masked values: 1e10 leaks into the output.
    """
    T, S = q.shape[-2], k.shape[-2]
    x = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    keep = torch.ones(T, S, dtype=torch.bool)
    if causal:
        keep = keep.tril()
    if attn_mask is not None:
        keep = keep & attn_mask
    if math.isinf(sentinel):
        x = x.masked_fill(~keep, sentinel)
    else:
        x = x + (~keep).to(x.dtype) * sentinel
    return torch.softmax(x, -1) @ v


fault08_masked_rows_nan = AttentionVariant(
    name="fault08-masked-rows-nan",
    forward=_softmax_additive_mask,
    kernel="softmax",
    supports_mask=True,
    empty_rows="zeros",  # the claim the NaN rows contradict
    description="fault class 8: -inf additive mask; a fully masked row returns NaN",
)
fault08_sentinel_leak = AttentionVariant(
    name="fault08-sentinel-leak",
    forward=lambda q, k, v, *, causal, attn_mask=None: _softmax_additive_mask(
        q, k, v, causal=causal, attn_mask=attn_mask, sentinel=-1e4
    ),
    kernel="softmax",
    supports_mask=True,
    empty_rows="zeros",  # the claim the leaking rows contradict
    description="fault class 8: finite -1e4 sentinel added to masked scores; 1e10 values leak",
)


def twin08_masked_softmax() -> AttentionVariant:
    """The built-in softmax (boolean masks, exactly zero masked weights, empty rows zero)."""
    return variants.get("softmax")


#: sequences up to this length take the fused path of ``_softmax_two_paths``
SHORT_PATH = 8


def _softmax_two_paths(q, k, v, *, causal):
    """Softmax with a "fused" path for short sequences that forgets the causal mask (fault class 9);
    longer sequences take the masked path."""
    x = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if q.shape[-2] <= SHORT_PATH:
        return torch.softmax(x, -1) @ v
    vis = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool)
    if causal:
        vis = vis.tril()
    return _softmax_masked(x, vis, v)


fault09_causal_ignored_short_path = AttentionVariant(
    name="fault09-causal-ignored-short-path",
    forward=_softmax_two_paths,
    kernel="softmax",
    description="fault class 9: the short-sequence path ignores causal=True",
)


def twin09_causal_softmax() -> AttentionVariant:
    """The built-in softmax: one masked code path for every length."""
    return variants.get("softmax")


# ------------------------------------------------------------------------------ fault class 10


def _taylor2_map_variant(name: str, phi, description: str) -> AttentionVariant:
    def forward(q, k, v, *, causal):
        return _feature_parallel(phi, q, k, v, causal)

    return AttentionVariant(
        name=name,
        forward=forward,
        kernel="taylor:2",
        feature_map=phi,
        feature_scale="sqrt",
        description=description,
    )


fault10_elementwise_square_map = _taylor2_map_variant(
    "fault10-elementwise-square-map",
    taylor2_elementwise,
    "fault class 10: Taylor-2 features [1, x, x^2/sqrt(2)] element-wise",
)
twin10_symmetric_map = _taylor2_map_variant(
    "twin10-symmetric-map",
    taylor2_symmetric,
    "Taylor-2 through the symmetric monomial map (twin of fault class 10)",
)


# ------------------------------------------------------------------------------ fault class 12


class _FusedSoftmaxAttention(torch.autograd.Function):
    """Softmax attention with a hand-written FlashAttention-style backward.

    dV = P^T dO; dP = dO V^T; dS = P * (dP - delta) with delta_t = sum_j dO_tj O_tj;
    dQ = c dS K; dK = c dS^T Q. With ``keep_delta=False`` (fault class 12) delta is dropped: with a
    single key the output is v whatever q is, yet dQ = c (dO . v) k != 0.
    """

    @staticmethod
    def forward(ctx, q, k, v, causal, keep_delta):
        c = 1.0 / math.sqrt(q.shape[-1])
        x = c * (q @ k.transpose(-1, -2))
        if causal:
            x = x.masked_fill(~torch.ones_like(x, dtype=torch.bool).tril(), float("-inf"))
        p = torch.softmax(x, -1)
        o = p @ v
        ctx.save_for_backward(q, k, v, p, o)
        ctx.c, ctx.keep_delta = c, keep_delta
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, p, o = ctx.saved_tensors
        dv = p.transpose(-1, -2) @ do
        dp = do @ v.transpose(-1, -2)
        delta = (do * o).sum(-1, keepdim=True) if ctx.keep_delta else 0.0
        ds = p * (dp - delta)
        return ctx.c * (ds @ k), ctx.c * (ds.transpose(-1, -2) @ q), dv, None, None


def _fused_variant(name: str, keep_delta: bool, description: str) -> AttentionVariant:
    def forward(q, k, v, *, causal):
        return _FusedSoftmaxAttention.apply(q, k, v, causal, keep_delta)

    return AttentionVariant(name=name, forward=forward, kernel="softmax", description=description)


fault12_single_key_dq = _fused_variant(
    "fault12-single-key-dq",
    False,
    "fault class 12: fused backward without the rowsum(dO * O) term (dq != 0 for one key)",
)
twin12_fused_backward = _fused_variant(
    "twin12-fused-backward", True, "fused softmax backward with the delta term (twin of 12)"
)


# ----------------------------------------------------------------------------- 13: biased rounding
def _fused_bf16(name: str, faults: tuple[str, ...], description: str) -> AttentionVariant:
    from verify.attention import lowprec

    def forward(q, k, v, *, causal):
        return lowprec.fused_attention(q, k, v, causal=causal, faults=faults)

    return AttentionVariant(
        name=name,
        forward=forward,
        kernel="softmax",
        precision="fused",
        dtypes=("float64", "float32", "bfloat16", "float16"),
        description=description,
    )


fault13_p_truncated = _fused_bf16(
    "fault13-p-truncated",
    ("p-truncated",),
    "fused softmax (FlashAttention order) storing P in the input type by truncation",
)
twin13_p_rounded = _fused_bf16(
    "twin13-p-rounded", (), "fused softmax storing P rounded to nearest (twin of fault class 13)"
)


# ----------------------------------------------------------------------------- index

#: fault class number -> names of its faulty variants in this module
FAULTY = {
    1: ("fault01_chunk_wrong_state",),
    2: ("fault02_padding_enters_state",),
    3: ("fault03_resume_forgets_denominator",),
    4: ("fault04_normalizer_over_heads",),
    5: ("fault05_key_sum_detached",),
    6: ("fault06_normalizer_multiplied", "fault06_query_left_out"),
    7: ("fault07_alignment_mislabelled",),
    8: ("fault08_masked_rows_nan", "fault08_sentinel_leak"),
    9: ("fault09_causal_ignored_short_path",),
    10: ("fault10_elementwise_square_map",),
    11: ("fault11_fp16_normalizer",),
    12: ("fault12_single_key_dq",),
    13: ("fault13_p_truncated",),
}
#: fault class number -> the correct twin's name
TWINS = {
    1: "twin01_chunk_state",
    2: "twin02_no_padding",
    3: "twin03_resume",
    4: "twin04_normalizer_over_time",
    5: "twin05_key_sum_tracked",
    6: "twin06_normalizer",
    7: "twin07_alignment_declared",
    8: "twin08_masked_softmax",
    9: "twin09_causal_softmax",
    10: "twin10_symmetric_map",
    11: "twin11_fp32_normalizer",
    12: "twin12_fused_backward",
    13: "twin13_p_rounded",
}


def load(name: str) -> AttentionVariant:
    """The variant called ``name`` in this module (objects as they are, factories called)."""
    obj = globals()[name]
    return obj if isinstance(obj, AttentionVariant) else obj()
