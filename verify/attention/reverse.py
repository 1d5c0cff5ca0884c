"""The backward pass of the recurrent and chunked forms as a reverse-time RNN (D19).

``reverse_scan`` returns what ``_scan.scan`` returns as output (numerator and denominator
columns, (B, H, T, d_v + 1)), bit for bit, through a ``torch.autograd.Function`` whose forward
runs the same loops without autograd and keeps only the state before each segment (a chunk of
C tokens in the recurrent form, a cache-sized group of chunks in the chunked form: at most
``derivations.reverse_rnn.checkpoint_count(T, C)`` states of shape (B, H, m, d_v + 1)). Its
backward walks the segments from last to first, recomputes each segment's features and forward
states from the stored one, and carries one reverse state Ra = dL/d(state) (D19):

    Ra_t = gamma Ra_{t+1} + phi(q_t) ga_t^T,   dL/dphi(k_s) = Ra_s va_s,   dva_s = Ra_s^T phi(k_s),
    dL/dphi(q_t) = Sa_t ga_t,

with ga_t = dL/d[N_t; D_t] (the gradient of the output this function returns: the denominator
mode's own backward, ``norms.apply_denominator``, supplies g_t and h_t) and va_s = [v_s; 1].
The chunked form runs the chunk-level recurrence dL/dP = gamma^C R' + sum_j gamma^(j+1) a_j ga_j^T
across chunks and differentiates the intra-chunk weights on the scores (Taylor: kappa_N' =
kappa_{N-1}) or through the features. Feature Jacobians are applied by autograd of the feature
map on one segment at a time. Memory: O(T/C) states instead of autograd's O(T) through the token
loop (``tests/test_reverse_rnn.py`` counts the saved tensors).

Used for named feature maps (Taylor, identity, elu1, relu, FAVOR+ with a fixed projection) when
no state is resumed; a callable feature map keeps autograd (its parameters would get no
gradient here). The backward is not itself differentiable: a double backward raises.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from verify.attention import _scan
from verify.attention._kernels import taylor_kernel
from verify.attention._validate import check_choice
from verify.spec.visibility import visible

#: the ``backward=`` choices of ``taylor_attention`` / ``linear_attention``
BACKWARDS = _scan.BACKWARDS
#: faulty twins of the reverse pass (tests only): the reverse state not accumulated (each
#: token or chunk reads only its own addend), or the key at s reading the reverse state of s + 1
FAULTS = (None, "not-accumulated", "off-by-one")


def check_backward(backward: object) -> str:
    """Validate ``backward`` (one of ``BACKWARDS``); raises TypeError/ValueError naming it."""
    return check_choice("backward", backward, BACKWARDS)


def scan_for(call):
    """The ``scan_fn`` of ``_scan.kernel_attention`` for a validated ``_scan.FormCall``:
    :func:`scan_with_reverse` for ``backward='reverse'``, None (plain ``_scan.scan``) else."""
    return scan_with_reverse if call.backward == "reverse" else None


def scan_with_reverse(
    kernel, c, qa, ka, va, Sa, *, causal, form, chunk_size, key_mask=None, decay=None
):
    """``_scan.scan`` with the reverse-RNN backward where it applies (then the final state is
    None: nothing downstream reads it); otherwise ``_scan.scan`` itself."""
    if reverse_applies(kernel, form, Sa, (qa, ka, va)):
        out = reverse_scan(
            kernel, c, qa, ka, va, causal=causal, form=form, chunk_size=chunk_size,
            key_mask=key_mask, decay=decay,
        )  # fmt: skip
        return out, None
    return _scan.scan(
        kernel, c, qa, ka, va, Sa, causal=causal, form=form, chunk_size=chunk_size,
        key_mask=key_mask, decay=decay,
    )  # fmt: skip


def reverse_applies(kernel, form: str, state, tensors) -> bool:
    """Whether ``reverse_scan`` serves this call (else the autograd path runs)."""
    if form == "parallel" or state is not None or kernel.fn is not None:
        return False
    if kernel.projection is not None and kernel.projection.requires_grad:
        return False
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


@dataclass(frozen=True)
class _Config:
    kernel: object
    c: float
    causal: bool
    form: str
    chunk_size: int
    km: torch.Tensor | None
    decay: torch.Tensor | None
    fault: str | None


def reverse_scan(
    kernel,
    c: float,
    qa: torch.Tensor,
    ka: torch.Tensor,
    va: torch.Tensor,
    *,
    causal: bool,
    form: str,
    chunk_size: int,
    key_mask: torch.Tensor | None = None,
    decay: torch.Tensor | None = None,
    fault: str | None = None,
) -> torch.Tensor:
    """Feature-form kernel attention with the reverse-RNN backward (D19).

    Args:
        kernel: a ``_kernels.FeatureKernel`` without a callable map.
        c: the resolved scale.
        qa: (B, H, T, d); ka: (B, H, S, d), masked keys already zeroed; va: (B, H, S, d_v + 1)
            augmented values; one accumulation dtype (float32/float64), one device.
        causal, form (``recurrent`` | ``chunked``), chunk_size (C >= 1): as ``_scan.scan``.
        key_mask: (B|1, H|1, S) bool, True = keep, or None.
        decay: (H,) in the accumulation dtype (D12, causal), or None.
        fault: None, or a twin of ``FAULTS`` (tests only).

    Returns:
        (B, H, T, d_v + 1): ``out[..., :d_v]`` the numerator, ``out[..., d_v]`` the denominator.

    Raises:
        ValueError: ``form`` not recurrent/chunked, or an unknown ``fault``.
    """
    check_choice("form", form, ("recurrent", "chunked"))
    if fault is not None:
        check_choice("fault", fault, FAULTS[1:])
    B, H, S = ka.shape[0], ka.shape[1], ka.shape[2]
    km = None if key_mask is None else key_mask.expand(B, H, S)
    if km is not None:
        va = torch.where(km[..., None], va, 0.0)
    cfg = _Config(kernel, c, causal, form, chunk_size, km, decay, fault)
    return _ReverseScan.apply(qa, ka, va, cfg)


def _recurrent_segments(S: int, C: int):
    return [(lo, min(lo + C, S), min(lo + C, S) - lo) for lo in range(0, S, C)]


def _chunk_segments(kernel, qa, va, C):
    B, H, d = qa.shape[0], qa.shape[1], qa.shape[-1]
    sizes = kernel.block_sizes(d)
    m = sum(sizes) if sizes else d
    group = max(1, _scan.GROUP_ELEMENTS // (B * H * m * C))
    return _scan._segments(va.shape[2], C, group)


def _masked_features(cfg, x, query, km=None):
    f = cfg.kernel.features(x, cfg.c, query=query)
    return f if km is None else torch.where(km[..., None], f, 0.0)


class _ReverseScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qa, ka, va, cfg):
        B, H, S = ka.shape[0], ka.shape[1], ka.shape[2]
        ctx.cfg = cfg
        if not cfg.causal:
            out, Sa = _scan.scan(
                cfg.kernel, cfg.c, qa, ka, va, None, causal=False, form=cfg.form,
                chunk_size=cfg.chunk_size, key_mask=cfg.km,
            )  # fmt: skip
            ctx.save_for_backward(qa, ka, va, Sa[None])
            return out
        outs, befores, Sa = [], [], None
        if cfg.form == "recurrent":
            fq = _masked_features(cfg, qa, True)
            fk = _masked_features(cfg, ka, False, cfg.km)
            Sa = _scan._zero_state(None, fq.shape[-1], va).expand(B, H, -1, -1)
            for lo, hi, _ in _recurrent_segments(S, cfg.chunk_size):
                befores.append(Sa)
                out, Sa = _scan._recurrent(
                    fq[:, :, lo:hi], fk[:, :, lo:hi], va[:, :, lo:hi], Sa, True, cfg.decay
                )
                outs.append(out)
        else:
            for lo, hi, size in _chunk_segments(cfg.kernel, qa, va, cfg.chunk_size):
                sub_km = None if cfg.km is None else cfg.km[..., lo:hi]
                out, new = _scan._causal_chunks(
                    cfg.kernel, cfg.c, qa[:, :, lo:hi], ka[:, :, lo:hi], va[:, :, lo:hi], Sa,
                    sub_km, size, cfg.decay,
                )  # fmt: skip
                befores.append(torch.zeros_like(new) if Sa is None else Sa.expand_as(new))
                outs.append(out)
                Sa = new
        ctx.save_for_backward(qa, ka, va, torch.stack(befores))
        return torch.cat(outs, 2) if len(outs) > 1 else outs[0]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gout):
        cfg = ctx.cfg
        qa, ka, va, states = ctx.saved_tensors
        ga = gout.contiguous()
        if not cfg.causal:
            return (*_noncausal_backward(cfg, qa, ka, va, ga, states[0]), None)
        if cfg.form == "recurrent":
            return (*_recurrent_backward(cfg, qa, ka, va, ga, states), None)
        return (*_chunked_backward(cfg, qa, ka, va, ga, states), None)


def _feature_vjp(cfg, x, query, cotangent, km=None):
    """J_phi(x)^T cotangent by autograd of the feature map on one segment (x: (..., L, d))."""
    with torch.enable_grad():
        xl = x.detach().requires_grad_(True)
        f = _masked_features(cfg, xl, query, km)
    return _vjp((f,), (xl,), (cotangent,))[0]


def _vjp(outputs, inputs, cotangents):
    """Vector-Jacobian products; an output not depending on the inputs (Taylor order 0)
    contributes zeros."""
    pairs = [(o, g) for o, g in zip(outputs, cotangents) if o.requires_grad]
    if not pairs:
        return [torch.zeros_like(x) for x in inputs]
    with torch.enable_grad():
        grads = torch.autograd.grad(
            [o for o, _ in pairs], inputs, [g for _, g in pairs], allow_unused=True
        )
    return [torch.zeros_like(x) if g is None else g for g, x in zip(grads, inputs)]


def _decay(cfg):
    return None if cfg.decay is None else cfg.decay[None, :, None, None]


def _recurrent_backward(cfg, qa, ka, va, ga, states):
    """Token-level reverse RNN over segments of C tokens, last to first (D19)."""
    dq, dk, dva = torch.empty_like(qa), torch.empty_like(ka), torch.empty_like(va)
    g = _decay(cfg)
    Ra = torch.zeros_like(states[0])
    segments = _recurrent_segments(ka.shape[2], cfg.chunk_size)
    for (lo, hi, _), Sa in reversed(list(zip(segments, states))):
        km = None if cfg.km is None else cfg.km[..., lo:hi]
        fq = _masked_features(cfg, qa[:, :, lo:hi], True)
        fk = _masked_features(cfg, ka[:, :, lo:hi], False, km)
        v_s, g_s = va[:, :, lo:hi], ga[:, :, lo:hi]
        dfq = []
        for t in range(hi - lo):  # forward states of the segment: dL/dphi(q_t) = Sa_t ga_t
            Sa = (Sa if g is None else g * Sa) + fk[:, :, t, :, None] * v_s[:, :, t, None, :]
            dfq.append((Sa @ g_s[:, :, t, :, None])[..., 0])
        dfk, dv_seg = [None] * (hi - lo), [None] * (hi - lo)
        for t in reversed(range(hi - lo)):  # Ra_t = gamma Ra_{t+1} + phi(q_t) ga_t^T
            if cfg.fault == "not-accumulated":  # twin: Ra_t = phi(q_t) ga_t^T
                Ra = torch.zeros_like(Ra)
            before = Ra
            Ra = (Ra if g is None else g * Ra) + fq[:, :, t, :, None] * g_s[:, :, t, None, :]
            read = before if cfg.fault == "off-by-one" else Ra
            dfk[t] = (read @ v_s[:, :, t, :, None])[..., 0]
            dv_seg[t] = (read.transpose(-1, -2) @ fk[:, :, t, :, None])[..., 0]
        dq[:, :, lo:hi] = _feature_vjp(cfg, qa[:, :, lo:hi], True, torch.stack(dfq, 2))
        dk[:, :, lo:hi] = _feature_vjp(cfg, ka[:, :, lo:hi], False, torch.stack(dfk, 2), km)
        dva[:, :, lo:hi] = torch.stack(dv_seg, 2)
    return dq, dk, dva


def _chunk_factors(cfg, C, dtype, device):
    """(lag (H, C, C) | None, to_end (1, H, 1, C, 1), read (1, H, 1, C, 1), gamma^C) of D12."""
    if cfg.decay is None:
        return None, None, None, None
    from verify.attention.structure import decay_powers

    j = torch.arange(C, device=device)
    lag = decay_powers(cfg.decay, j[:, None] - j[None, :], dtype)
    to_end = decay_powers(cfg.decay, C - 1 - j, dtype)[None, :, None, :, None]
    read = decay_powers(cfg.decay, j + 1, dtype)[None, :, None, :, None]
    g_c = decay_powers(cfg.decay, torch.tensor(C, device=device), dtype)[None, :, None, None]
    return lag, to_end, read, g_c


#: feature elements (B H m C per chunk) of one batch of chunks in the chunked backward: the
#: transient memory of a backward step (the forward's cache groups are larger)
BACKWARD_ELEMENTS = 2**19


def _columns(cfg, qc, kc, grad):
    """Column-layout features of a batch of chunks: (Fq, Fk, factors (m, 1) | None)."""
    with torch.set_grad_enabled(grad):
        Fq, w = _scan._blocks(cfg.kernel, qc, cfg.c, True)  # (B, H, n, m, C), (m,) | None
        Fk, _ = _scan._blocks(cfg.kernel, kc, cfg.c, False)
    return Fq, Fk, None if w is None else w[:, None]


def _weighted(F, wc):
    return F.detach() if wc is None else F.detach() * wc


def _chunk_group_backward(cfg, q, k, v, gc_, P0, Rend, km, C):
    """One segment of n chunks of C tokens: (dq, dk, dva, dL/dP0) from the state P0 before it
    and Rend = dL/d(state after it). Two passes over batches of chunks (``BACKWARD_ELEMENTS``):
    each chunk's forward and reverse addends, then, with the states before and after every
    chunk, the gradients."""
    split = _scan._split
    qc, kc, vc, gc = split(q, C), split(k, C), split(v, C), split(gc_, C)  # (B, H, n, C, .)
    kmc = None if km is None else split(km, C)
    lag, to_end, read, g_c = _chunk_factors(cfg, C, q.dtype, q.device)
    vr = vc if to_end is None else vc * to_end  # keys decayed to the chunk's end
    gr = gc if read is None else gc * read  # reads of the state before the chunk
    n, (B, H) = qc.shape[2], qc.shape[:2]
    m = P0.shape[-2]
    step = max(1, BACKWARD_ELEMENTS // (B * H * m * C))
    batches = [slice(i, min(i + step, n)) for i in range(0, n, step)]
    kv, qg = [], []
    for b in batches:  # pass 1: sum_i phi(k_i) va_i^T and sum_j phi(q_j) ga_j^T per chunk
        Fq, Fk, wc = _columns(cfg, qc[:, :, b], kc[:, :, b], False)
        kv.append(_weighted(Fk, wc) @ vr[:, :, b])
        qg.append(_weighted(Fq, wc) @ gr[:, :, b])
    kv, qg = torch.cat(kv, 2), torch.cat(qg, 2)  # (B, H, n, m, d_v + 1)
    prev, after = [None] * n, [None] * n
    S_, R_ = P0, Rend
    for i in range(n):  # the state before each chunk
        prev[i] = S_
        S_ = kv[:, :, i] + (S_ if g_c is None else g_c * S_)
    for i in reversed(range(n)):  # the reverse state after each chunk
        after[i] = R_
        if cfg.fault == "not-accumulated":  # twin: nothing carried from later chunks
            after[i] = R_ = torch.zeros_like(R_)
        R_ = qg[:, :, i] + (R_ if g_c is None else g_c * R_)
    prev, after = torch.stack(prev, 2), torch.stack(after, 2)
    dP0 = qg[:, :, 0] + (after[:, :, 0] if g_c is None else g_c * after[:, :, 0])
    keep = visible(C, C, causal=True, device=q.device)
    if cfg.fault == "off-by-one":  # twin: the key at s misses the query at s
        keep = keep & ~torch.eye(C, dtype=torch.bool, device=q.device)
    out = [], [], []
    for b in batches:  # pass 2: the gradients of each batch of chunks
        parts = _chunk_batch_grads(
            cfg, qc[:, :, b], kc[:, :, b], vc[:, :, b], gc[:, :, b], vr[:, :, b], gr[:, :, b],
            prev[:, :, b], after[:, :, b], keep if kmc is None else keep & kmc[..., b, None, :],
            lag, to_end,
        )  # fmt: skip
        for acc, x in zip(out, parts):
            acc.append(x)
    dqc, dkc, dvc = (torch.cat(x, 2) for x in out)
    return dqc.flatten(2, 3), dkc.flatten(2, 3), dvc.flatten(2, 3), dP0


def _chunk_batch_grads(cfg, qc, kc, vc, gc, vr, gr, prev, after, keep, lag, to_end):
    """dq, dk, dva of a batch of chunks (B, H, n, C, .) given the states before and after."""
    ql, kl = qc.detach().requires_grad_(True), kc.detach().requires_grad_(True)
    Fq, Fk, wc = _columns(cfg, ql, kl, True)
    Aq, Bk = _weighted(Fq, wc), _weighted(Fk, wc)  # phi(q_j), phi(k_i) as columns
    dAq = prev @ gr.transpose(-1, -2)  # (B, H, n, m, C)
    dBk = after @ vr.transpose(-1, -2)
    dvc = Bk.transpose(-1, -2) @ after
    if to_end is not None:
        dvc = dvc * to_end
    # the intra-chunk part: out_j += sum_{i <= j} A_ji va_i
    dA = torch.where(keep, gc @ vc.transpose(-1, -2), 0.0)
    if lag is not None:
        dA = dA * lag[None, :, None]
    order = cfg.kernel.order
    if order is not None:  # kappa_N on the scores: d/dx kappa_N = kappa_{N-1}
        x = (cfg.c * qc) @ kc.transpose(-1, -2)
        A = torch.where(keep, taylor_kernel(x, order), 0.0)
        if lag is not None:
            A = A * lag[None, :, None]
        dvc = dvc + A.transpose(-1, -2) @ gc
        dx = taylor_kernel(x, order - 1) * dA if order > 0 else torch.zeros_like(dA)
        dq_in, dk_in = cfg.c * (dx @ kc), cfg.c * (dx.transpose(-1, -2) @ qc)
    else:
        A = torch.where(keep, Aq.transpose(-1, -2) @ Bk, 0.0)
        if lag is not None:
            A = A * lag[None, :, None]
        dvc = dvc + A.transpose(-1, -2) @ gc
        dAq = dAq + Bk @ dA.transpose(-1, -2)
        dBk = dBk + Aq @ dA
        dq_in = dk_in = None
    if wc is not None:
        dAq, dBk = dAq * wc, dBk * wc
    dqc, dkc = _vjp((Fq, Fk), (ql, kl), (dAq, dBk))
    if dq_in is not None:
        dqc, dkc = dqc + dq_in, dkc + dk_in
    return dqc, dkc, dvc


def _chunked_backward(cfg, qa, ka, va, ga, states):
    """Segments (groups of chunks, then the partial chunk) from last to first (D19)."""
    dq, dk, dva = torch.empty_like(qa), torch.empty_like(ka), torch.empty_like(va)
    Rend = torch.zeros_like(states[0])
    segments = _chunk_segments(cfg.kernel, qa, va, cfg.chunk_size)
    for (lo, hi, size), P0 in reversed(list(zip(segments, states))):
        km = None if cfg.km is None else cfg.km[..., lo:hi]
        sl = slice(lo, hi)
        dq[:, :, sl], dk[:, :, sl], dva[:, :, sl], Rend = _chunk_group_backward(
            cfg, qa[:, :, sl], ka[:, :, sl], va[:, :, sl], ga[:, :, sl], P0, Rend, km, size
        )
    return dq, dk, dva


def _noncausal_backward(cfg, qa, ka, va, ga, Sa):
    """Every query reads the final state: dphi(q_t) = Sa ga_t, R = sum_t phi(q_t) ga_t^T."""
    C, T, S = cfg.chunk_size, qa.shape[2], ka.shape[2]
    dq, dk, dva = torch.empty_like(qa), torch.empty_like(ka), torch.empty_like(va)
    R = torch.zeros_like(Sa)
    for lo in range(0, T, C):
        sl = slice(lo, min(lo + C, T))
        fq = _masked_features(cfg, qa[:, :, sl], True)
        if cfg.fault != "not-accumulated" or lo == 0:
            R = R + fq.transpose(-1, -2) @ ga[:, :, sl]
        dq[:, :, sl] = _feature_vjp(cfg, qa[:, :, sl], True, ga[:, :, sl] @ Sa.transpose(-1, -2))
    for lo in range(0, S, C):
        sl = slice(lo, min(lo + C, S))
        km = None if cfg.km is None else cfg.km[..., sl]
        fk = _masked_features(cfg, ka[:, :, sl], False, km)
        dk[:, :, sl] = _feature_vjp(
            cfg, ka[:, :, sl], False, va[:, :, sl] @ R.transpose(-1, -2), km
        )
        dva[:, :, sl] = fk @ R
    return dq, dk, dva
