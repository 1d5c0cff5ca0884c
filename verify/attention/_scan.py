"""Recurrent and chunked evaluation of kernel attention in feature form (D2, D3).

Internal engine shared by ``taylor_attention``, ``linear_attention`` and the state API. Inputs are
already validated and in the accumulation dtype. Values are augmented with a column of ones, so
one state ``Sa = [S | z]`` (B, H, m, d_v + 1) carries numerator S = sum_s phi(k_s) v_s^T and
denominator z = sum_s phi(k_s), and one product ``phi(q) . Sa`` reads both. Masked keys (a
key-padding mask) have their raw key replaced by 0 (no inf can arise), then features and values
zeroed: exactly zero weight, and they never enter the state.

The chunked form computes features in column layout (B, H, n_chunks, m, C), so that gathers and
the state matmuls run on contiguous rows; for Taylor kernels the within-chunk weights are
kappa_N(c q.k) on the scores (Horner), equal to phi(q~).phi(k~) by D1 at d-wide cost.

Causal recurrent (the reference for step semantics): Sa_t = Sa_{t-1} + phi(k_t) va_t^T,
out_t = phi(q_t) . Sa_t. Causal chunked, chunk size C: for chunk c with state Sa_(c) (everything
before the chunk), out = tril(A_c) va_c + phi(q_c) Sa_(c) with A_c the within-chunk weights;
Sa_(c) = Sa_0 + sum_{c' < c} phi(k_c')^T va_c' by a cumulative sum over chunks. Whole chunks are
processed in batched passes over cache-sized groups of chunks (``GROUP_ELEMENTS``), the state
carried from group to group, and a final partial chunk in a pass of its own, so no padding ever
enters the state (fault classes 1, 2). Non-causal: every query reads the state after all keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from verify.attention._kernels import taylor_kernel
from verify.attention._validate import (
    accumulation_dtype,
    check_causal,
    check_choice,
    check_int,
    check_mask,
    check_qkv,
    key_padding_mask,
)
from verify.attention.norms import apply_denominator, check_denominator, check_eps
from verify.spec.shape import Shape
from verify.spec.visibility import visible
from verify.spec.vocabulary import FORMS

#: how the recurrent and chunked forms are differentiated: ``reverse`` (D19's reverse-time RNN,
#: ``verify.attention.reverse``) or ``autograd`` (through the loops)
BACKWARDS = ("reverse", "autograd")


def _recurrent(fq, fk, va, Sa, causal, decay=None):
    g = None if decay is None else decay[None, :, None, None]
    if not causal:
        for s in range(fk.shape[2]):
            Sa = Sa + fk[:, :, s, :, None] * va[:, :, s, None, :]
        return fq @ Sa, Sa
    outs = []
    for t in range(fk.shape[2]):
        Sa = (Sa if g is None else g * Sa) + fk[:, :, t, :, None] * va[:, :, t, None, :]
        outs.append((fq[:, :, t, None, :] @ Sa)[:, :, 0])
    return torch.stack(outs, 2), Sa


def _split(x: torch.Tensor, size: int) -> torch.Tensor:
    """(B, H, n*size, ...) -> (B, H, n, size, ...)."""
    return x.reshape(x.shape[:2] + (x.shape[2] // size, size) + x.shape[3:])


def _blocks(kernel, x, c, query):
    """Column-layout features of x (..., L, d): ((..., m, L) unweighted, factors (m,) | None)."""
    return kernel.blocks_t(x.transpose(-1, -2).contiguous(), c, query=query)


def _zero_state(Sa, m, like):
    if Sa is None:
        shape = like.shape[:2] + (m, like.shape[-1])
        return torch.zeros(shape, dtype=like.dtype, device=like.device)
    if Sa.shape[-2] != m:
        raise ValueError(f"state: holds {Sa.shape[-2]} features, the feature map gives {m}")
    return Sa


def _check_sizes(fq_m: int, fk_m: int) -> None:
    if fq_m != fk_m:
        raise ValueError(f"feature_map: query and key features differ in size: {fq_m} vs {fk_m}")


def _state_of(block, vc):
    """sum over each chunk of phi(k) va^T, (..., m, d_v + 1): factors applied to the sums."""
    F, w = block
    kv = F @ vc
    return kv if w is None else kv * w[:, None]


def _flat3(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, *x.shape[-2:])


def _read(block, state, out=None):
    """phi(q) . state for column-layout query features: (..., L, d_v + 1), added to ``out``."""
    F, w = block
    if w is not None:
        state = state * w[:, None]
    Ft = F.transpose(-1, -2)
    if out is None:
        return Ft @ state
    return torch.baddbmm(_flat3(out), _flat3(Ft), _flat3(state)).reshape(out.shape)


def _causal_chunks(kernel, c, qa, ka, va, Sa, km, C, decay=None):
    """Causal pass over n*C tokens in chunks of C; returns (out, state after the last chunk).

    Masked keys need no feature masking here: their values (and the ones column) are zero, so
    they add exactly nothing to ``kv``, and the within-chunk weights are masked below. With a
    ``decay`` (D12): within-chunk weights times gamma^(t-s), each chunk's keys decayed to its
    last position, states carried as gamma^C prev + kv, and the state read at position j of a
    chunk times gamma^(j+1).
    """
    if decay is not None:
        return _decayed_chunks(kernel, c, qa, ka, va, Sa, km, C, decay)
    qc, kc, vc = _split(qa, C), _split(ka, C), _split(va, C)
    Bq = _blocks(kernel, qc, c, True)  # features (B, H, n, m, C)
    Bk = _blocks(kernel, kc, c, False)
    m = Bq[0].shape[-2]
    _check_sizes(m, Bk[0].shape[-2])
    if kernel.order is not None:  # kappa_N on the scores == phi(q~).phi(k~) (D1)
        A = taylor_kernel((c * qc) @ kc.transpose(-1, -2), kernel.order)
    else:
        A = Bq[0].transpose(-1, -2) @ Bk[0]
    keep = visible(C, C, causal=True, device=qa.device)  # within the chunk
    if km is not None:
        keep = keep & _split(km, C)[..., None, :]
    if km is None and not (torch.is_grad_enabled() and A.requires_grad):
        A = A.tril_()  # no autograd: in place, the same values
    else:
        A = torch.where(keep, A, 0.0)
    kv = _state_of(Bk, vc)  # (B, H, n, m, d_v + 1): each chunk's contribution to the state
    Sa = _zero_state(Sa, m, va)
    prev = torch.cumsum(torch.cat([Sa[:, :, None], kv[:, :, :-1]], 2), 2)
    out = _read(Bq, prev, A @ vc)
    return out.flatten(2, 3), prev[:, :, -1] + kv[:, :, -1]


def _decayed_chunks(kernel, c, qa, ka, va, Sa, km, C, decay):
    """:func:`_causal_chunks` with a per-head decay (D12: the chunked form of the record)."""
    from verify.attention.structure import decay_powers

    qc, kc, vc = _split(qa, C), _split(ka, C), _split(va, C)
    Bq = _blocks(kernel, qc, c, True)
    Bk = _blocks(kernel, kc, c, False)
    m = Bq[0].shape[-2]
    _check_sizes(m, Bk[0].shape[-2])
    if kernel.order is not None:
        A = taylor_kernel((c * qc) @ kc.transpose(-1, -2), kernel.order)
    else:
        A = Bq[0].transpose(-1, -2) @ Bk[0]
    j = torch.arange(C, device=qa.device)
    lag = decay_powers(decay, j[:, None] - j[None, :], qa.dtype)  # (H, C, C), 0 above diagonal
    keep = visible(C, C, causal=True, device=qa.device)
    if km is not None:
        keep = keep & _split(km, C)[..., None, :]
    A = torch.where(keep, A * lag[None, :, None], 0.0)
    to_end = decay_powers(decay, C - 1 - j, qa.dtype)[None, :, None, :, None]  # (1,H,1,C,1)
    kv = _state_of(Bk, vc * to_end)  # each chunk's keys decayed to its last position
    Sa = _zero_state(Sa, m, va).expand(qa.shape[0], qa.shape[1], -1, -1)
    g_c = decay_powers(decay, torch.tensor(C, device=qa.device), qa.dtype)[None, :, None, None]
    prevs = []
    for i in range(kv.shape[2]):  # the state before chunk i, at its position -1
        prevs.append(Sa)
        Sa = g_c * Sa + kv[:, :, i]
    prev = torch.stack(prevs, 2)
    read_decay = decay_powers(decay, j + 1, qa.dtype)[None, :, None, :, None]
    out = A @ vc + _read(Bq, prev) * read_decay
    return out.flatten(2, 3), Sa


#: feature elements per group of chunks processed in one batched pass (cache-sized, ~2 MB fp32)
GROUP_ELEMENTS = 2**19


def _segments(S: int, C: int, group: int | None = None):
    """Whole chunks in groups of ``group`` chunks of C, then the partial chunk as one chunk.

    Returns (lo, hi, chunk size) triples covering [0, S); no padding anywhere.
    """
    main = (S // C) * C
    step = main if group is None else group * C
    out = [(lo, min(lo + step, main), C) for lo in range(0, main, max(step, 1))]
    return out + ([(main, S, S - main)] if S > main else [])


def scan(
    kernel,
    c: float,
    qa: torch.Tensor,
    ka: torch.Tensor,
    va: torch.Tensor,
    Sa: torch.Tensor | None,
    *,
    causal: bool,
    form: str,
    chunk_size: int,
    key_mask: torch.Tensor | None = None,
    decay: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Feature-form kernel attention; returns (out (B,H,T,d_v+1), final state (B,H,m,d_v+1)).

    ``qa`` (B,H,T,d), ``ka`` (B,H,S,d) accumulation dtype, masked keys already zeroed; ``va``
    (B,H,S,d_v+1) augmented values; ``Sa`` the state to resume from (None: zeros); ``key_mask``
    (B|1,H|1,S); ``decay`` (H,) in the accumulation dtype: S_t = gamma S_{t-1} + phi(k_t) va_t^T
    (D12, causal only). ``out[..., :d_v]`` is the numerator and ``out[..., d_v]`` the denominator.
    """
    B, H = qa.shape[:2]
    S = ka.shape[2]
    km = None if key_mask is None else key_mask.expand(B, H, S)
    if km is not None:
        va = torch.where(km[..., None], va, 0.0)
    if form == "recurrent":
        fq = kernel.features(qa, c, query=True)
        fk = kernel.features(ka, c, query=False)
        _check_sizes(fq.shape[-1], fk.shape[-1])
        if km is not None:
            fk = torch.where(km[..., None], fk, 0.0)
        Sa = _zero_state(Sa, fq.shape[-1], va).expand(B, H, -1, -1)
        return _recurrent(fq, fk, va, Sa, causal, decay)
    if not causal:
        for lo, hi, size in _segments(S, chunk_size):
            Bk = _blocks(kernel, _split(ka[:, :, lo:hi], size), c, False)  # (B, H, n, m_n, C)
            kv = _state_of(Bk, _split(va[:, :, lo:hi], size)).sum(2)
            Sa = _zero_state(Sa, kv.shape[-2], va) + kv
        Bq = _blocks(kernel, qa, c, True)  # (B, H, m_n, T)
        _check_sizes(Bq[0].shape[-2], Sa.shape[-2])
        return _read(Bq, Sa), Sa
    outs = []
    if Sa is not None:
        Sa = Sa.expand(B, H, -1, -1)
    sizes = kernel.block_sizes(qa.shape[-1])
    m = sum(sizes) if sizes else qa.shape[-1]
    group = max(1, GROUP_ELEMENTS // (B * H * m * chunk_size))
    for lo, hi, size in _segments(S, chunk_size, group):
        sub_km = None if km is None else km[..., lo:hi]
        out, Sa = _causal_chunks(
            kernel, c, qa[:, :, lo:hi], ka[:, :, lo:hi], va[:, :, lo:hi], Sa, sub_km, size, decay
        )
        outs.append(out)
    return torch.cat(outs, 2) if len(outs) > 1 else outs[0], Sa


def visible_counts(
    n0: torch.Tensor, key_mask: torch.Tensor | None, B: int, H: int, T: int, S: int, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Number of visible keys per query (B, H, T) and after all keys (B, H), from n0 (B, H)."""
    if key_mask is None:
        steps = torch.ones(B, H, S, dtype=n0.dtype, device=n0.device)
    else:
        steps = key_mask.expand(B, H, S).to(n0.dtype)
    if causal:
        per_query = n0[..., None] + torch.cumsum(steps, -1)
        return per_query, per_query[..., -1]
    total = n0 + steps.sum(-1)
    return total[..., None].expand(B, H, T), total


def _balance(qa: torch.Tensor, ka: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(lam q, k / lam) per (batch, head), lam a power of two balancing max|q| and max|k|.

    Each Taylor order block is homogeneous, phi_n(lam q) . phi_n(k / lam) = phi_n(q) . phi_n(k),
    and scaling by a power of two is exact (outside the subnormal range), so the output is
    unchanged while the features of q and of k stay representable whenever the scores are
    (e.g. |q| ~ 1e77, |k| ~ 1e-77 would overflow x^4 in float64 without it).
    """
    with torch.no_grad():  # lam is a constant: the output does not depend on it
        mq = qa.abs().amax((-2, -1), keepdim=True)
        mk = ka.abs().amax((-2, -1), keepdim=True)
        ok = (mq > 0) & (mk > 0) & torch.isfinite(mq) & torch.isfinite(mk)
        half_log = 0.5 * (
            torch.log2(torch.where(ok, mk, 1.0)) - torch.log2(torch.where(ok, mq, 1.0))
        )
        lam = torch.exp2(torch.round(half_log))
        lam = torch.where(torch.isfinite(lam) & (lam > 0) & torch.isfinite(1.0 / lam), lam, 1.0)
        if bool((lam == 1.0).all()):  # the common case: nothing to do
            return qa, ka
    return qa * lam, ka / lam


def feature_attention(
    kernel,
    qa: torch.Tensor,
    ka: torch.Tensor,
    va: torch.Tensor,
    c: float,
    *,
    causal: bool,
    form: str,
    chunk_size: int,
    key_mask: torch.Tensor | None,
    mode: str,
    eps: float,
    Sa0: torch.Tensor | None = None,
    n0: torch.Tensor | None = None,
    rebalance: bool = False,
    decay: torch.Tensor | None = None,
    scan_fn=None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Recurrent/chunked kernel attention from accumulation-dtype q, k, v and a ``Kernel``.

    ``Sa0`` (B, H, m, d_v + 1) and ``n0`` (B, H) are the state to resume from (zeros if None).
    ``rebalance`` (Taylor kernels, no state kept): see ``_balance``. ``decay`` (H,) float64:
    the decayed RNN of D12 (causal). ``scan_fn``: a replacement for :func:`scan` with its
    signature (``reverse.scan_with_reverse``: the reverse-RNN backward of D19, final state None
    where it applies); None is :func:`scan`.
    Returns (output (B, H, T, d_v), final augmented state, final visible-key count).
    """
    from verify.attention.norms import apply_denominator

    B, H, T, _ = qa.shape
    S, d_v = ka.shape[2], va.shape[-1]
    if n0 is None:
        n0 = torch.zeros(B, H, dtype=qa.dtype, device=qa.device)
    counts, n_final = visible_counts(n0, key_mask, B, H, T, S, causal)
    if key_mask is not None:
        ka = torch.where(key_mask[..., None], ka, 0.0)
    if key_mask is not None:  # without a mask every query sees >= 1 key
        qa = torch.where((counts > 0)[..., None], qa, 0.0)
    if rebalance:
        qa, ka = _balance(qa, ka)
    va = torch.cat([va, torch.ones_like(va[..., :1])], -1)
    out, Sa = (scan if scan_fn is None else scan_fn)(
        kernel,
        c,
        qa,
        ka,
        va,
        Sa0,
        causal=causal,
        form=form,
        chunk_size=chunk_size,
        key_mask=key_mask,
        decay=None if decay is None else decay.to(qa.dtype),
    )
    o = apply_denominator(out[..., :d_v], out[..., d_v], counts, mode=mode, eps=eps)
    return o, Sa, n_final


@dataclass(frozen=True)
class FormCall:
    """The validated arguments every form shares (:func:`check_form_call`)."""

    dims: Shape
    causal: bool
    mask: torch.Tensor | None
    mode: str
    form: str
    chunk_size: int
    eps: float
    decay: torch.Tensor | None = None
    backward: str = "reverse"


def check_form_call(
    q,
    k,
    v,
    causal,
    attn_mask,
    denominator,
    form,
    chunk_size,
    eps,
    feature_budget,
    decay=None,
    backward="reverse",
) -> FormCall:
    """Validate the arguments ``taylor_attention`` and ``linear_attention`` share.

    Raises:
        TypeError, ValueError: any invalid argument (named in the message).
    """
    dims = check_qkv(q, k, v)
    call = FormCall(
        dims=dims,
        causal=check_causal(causal, dims),
        mask=check_mask(attn_mask, dims, q.device),
        mode=check_denominator(denominator, dims.d_v),
        form=check_choice("form", form, FORMS),
        chunk_size=check_int("chunk_size", chunk_size, 1),
        eps=check_eps(eps),
        backward=check_choice("backward", backward, BACKWARDS),
    )
    check_int("feature_budget", feature_budget, 1)
    if decay is not None:
        from dataclasses import replace

        from verify.attention.structure import check_decay

        gam = check_decay(decay, dims.H, causal=call.causal, mode=call.mode, device=q.device)
        call = replace(call, decay=gam)
    if call.form != "parallel":
        key_padding_mask(call.mask, dims, call.form)
    return call


def kernel_attention(kernel, q, k, v, call: FormCall, *, c: float, scan_fn=None) -> torch.Tensor:
    """Validated kernel attention in any form; returns (B, H, T, d_v) in the dtype of q.

    ``scan_fn``: see :func:`feature_attention` (``reverse.scan_for(call)`` gives D19's).
    """
    from verify.attention import _masks

    dims, causal, mask, form = call.dims, call.causal, call.mask, call.form
    chunk_size, mode, eps = call.chunk_size, call.mode, call.eps
    acc = accumulation_dtype(q.dtype)
    qa, ka, va = q.to(acc), k.to(acc), v.to(acc)
    if form == "parallel":
        vis = _masks.visible_mask(mask, causal, dims, q.device)
        qa, ka, va = _masks.sanitize(qa, ka, va, vis)
        w = kernel.parallel_weights(qa, ka, c, vis)
        if call.decay is not None:  # gamma^(t-s) on s <= t (D12; causal, T == S)
            from verify.attention.structure import decay_powers

            lags = torch.arange(dims.T, device=q.device)[:, None] - torch.arange(
                dims.S, device=q.device
            )
            w = w * decay_powers(call.decay, lags, acc)
        if vis is not None:
            w = torch.where(vis, w, 0.0)
        count = _masks.visible_count(vis, dims, acc, q.device)
        o = apply_denominator(w @ va, w.sum(-1), count, mode=mode, eps=eps)
    else:
        km = key_padding_mask(mask, dims, form)
        o, _, _ = feature_attention(
            kernel,
            qa,
            ka,
            va,
            c,
            causal=causal,
            form=form,
            chunk_size=chunk_size,
            key_mask=km,
            mode=mode,
            eps=eps,
            rebalance=kernel.order is not None,
            decay=call.decay,
            scan_fn=scan_fn,
        )
    return o.to(q.dtype)
