"""Decode paths beside their faulty twins (verify.spec.decode's protocol; D20).

Forwards ``f(q, k, v, *, causal)`` in (B, H, T, d) and decode objects with ``prefill(q, k, v,
state=None, ...)`` and ``step(state, q_new, k_new, v_new)``:

- ``kv_cache``: a softmax KV cache taking ``cache_seqlens`` (rows at their own positions; a
  flash_attn_with_kvcache-style buffer whose unused slots are masked by a select, never by a
  product); ``static_cache``: a preallocated cache taking ``capacity`` (zero-initialised slots);
  ``window_cache``: the full cache under a window claim; ``rolling_cache``: a rolling buffer of
  W = left + 1 slots (slot p mod W).
- twins: ``kv_cache_off_by_one`` (a step's query position read before the append: the new
  token misses itself), ``static_cache_zero_slots`` (attends its unused, zero-initialised
  slots), ``window_cache_tq1`` (a single-token step drops the window mask: the mask was built
  only for several query tokens), ``kv_cache_batch_position`` (every row written and read at
  the first row's position: visible only when rows sit at different positions),
  ``linear_decode_ignores_scale`` (a recurrent linear attention whose decode accepts a scale
  and ignores it), ``kv_cache_resume_restarts`` (a prefill given a state starts a new cache).
- ``delta_forward`` / ``delta_decode``: a delta rule S_t = S_{t-1} + beta (v_t - S_{t-1} k_t)
  k_t^T, o_t = S_t q_t (L2-normalized keys), a kernel no claim names.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

#: the window of the windowed variants: FlashAttention's (left, right) = (2, 0), 3 slots
LEFT = 2
#: the linear variants' scale on q and the delta rule's beta
SCALE = 0.5
BETA = 0.5
#: the cache block of ``kv_cache_one_block`` (the common kernel block)
ONE_BLOCK = 64


# --------------------------------------------------------------------------- softmax forwards


def softmax_forward(q, k, v, *, causal, left=None):
    """Causal (or not) softmax attention with an optional window of ``left`` keys back."""
    T, S = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    t = torch.arange(T, device=q.device)[:, None] + (S - T)
    j = torch.arange(S, device=q.device)[None, :]
    keep = torch.ones(T, S, dtype=torch.bool, device=q.device)
    if causal:
        keep &= j <= t
    if left is not None:
        keep &= j >= t - left
    s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v


window_forward = functools.partial(softmax_forward, left=LEFT)


# --------------------------------------------------------------------------- a KV cache


def _softmax(q, kc, vc, vis, used):
    """Softmax over the visible slots ``vis`` (B, n, C); values outside ``used`` (B, 1, C)
    selected away (a product 0 * NaN would leak an unused slot's NaN)."""
    s = (q @ kc.transpose(-1, -2)) / q.shape[-1] ** 0.5
    s = torch.where(vis[:, None], s, float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return p @ torch.where(used[:, :, :, None], vc, torch.zeros((), dtype=vc.dtype))


class _Cache:
    """A softmax KV cache: state {"k", "v": (B, H, C, .), "lens": (B,) long}."""

    def __init__(self, *, left=None, fault=None):
        self.left, self.fault = left, fault

    def _empty(self, q, k, v, slots):
        B, H = q.shape[:2]
        z = functools.partial(torch.zeros, dtype=q.dtype, device=q.device)
        lens = torch.zeros(B, dtype=torch.long, device=q.device)
        return {"k": z(B, H, slots, k.shape[-1]), "v": z(B, H, slots, v.shape[-1]), "lens": lens}

    def _attend(self, state, q, k, v, *, stepping, resumed=False):
        kc, vc, lens = state["k"], state["v"], state["lens"].clone()
        B, H, n = q.shape[:3]
        if self.fault == "batch_position" and stepping:
            lens[:] = lens[0]  # every row at the first row's position
        need = int(lens.max()) + n
        if need > kc.shape[2]:  # grow the buffer with zero slots
            grow = need - kc.shape[2]
            kc = torch.cat([kc, kc.new_zeros(B, H, grow, kc.shape[-1])], 2)
            vc = torch.cat([vc, vc.new_zeros(B, H, grow, vc.shape[-1])], 2)
        kc, vc = kc.clone(), vc.clone()
        for b in range(B):
            m = int(lens[b])
            kc[b, :, m : m + n], vc[b, :, m : m + n] = k[b], v[b]
        C = kc.shape[2]
        pos = lens[:, None] + torch.arange(n, device=q.device)[None, :]  # (B, n)
        if self.fault == "off_by_one" and stepping:
            pos = pos - 1  # the query position read before the append
        j = torch.arange(C, device=q.device)[None, None, :]
        used = j < (lens + n)[:, None, None]  # (B, 1, C)
        vis = (j <= pos[..., None]) & used
        if self.left is not None and not (self.fault == "tq1" and stepping and n == 1):
            vis &= j >= pos[..., None] - self.left
        if self.fault == "one_block" and (stepping or resumed):  # one block of the cache read
            vis &= j < ONE_BLOCK
        if self.fault == "zero_slots":
            vis |= ~used  # the unused slots are attended too
            used = torch.ones_like(used)
        o = _softmax(q, kc, vc, vis, used)
        return o, {"k": kc, "v": vc, "lens": lens + n}

    def step(self, state, q_new, k_new, v_new):
        return self._attend(state, q_new, k_new, v_new, stepping=True)


class KVCache(_Cache):
    """Takes ``cache_seqlens``: the first prefill's segment is the buffer."""

    def prefill(self, q, k, v, state=None, cache_seqlens=None):
        if state is not None:
            return self._attend(state, q, k, v, stepping=False, resumed=True)
        if cache_seqlens is None:
            return self._attend(self._empty(q, k, v, 0), q, k, v, stepping=False)
        lens = cache_seqlens.to(torch.long)
        t = torch.arange(q.shape[2], device=q.device)
        used = t[None, None, :] < lens[:, None, None]  # (B, 1, T)
        vis = (t[None, None, :] <= t[None, :, None]) & used
        if self.left is not None:
            vis &= t[None, None, :] >= t[None, :, None] - self.left
        o = _softmax(q, k, v, vis, used)
        return o, {"k": k.clone(), "v": v.clone(), "lens": lens}


class StaticCache(_Cache):
    """Takes ``capacity``: a preallocated, zero-initialised buffer."""

    def prefill(self, q, k, v, state=None, capacity=None):
        if state is None:
            state = self._empty(q, k, v, capacity or 0)
        return self._attend(state, q, k, v, stepping=False)


kv_cache = KVCache()
kv_cache_off_by_one = KVCache(fault="off_by_one")
kv_cache_batch_position = KVCache(fault="batch_position")
#: a decode step or resumed prefill reading only the first 64-key block of its cache (a block
#: table or split count that stops at one block): invisible until the cache is longer than a block
kv_cache_one_block = KVCache(fault="one_block")
static_cache = StaticCache()
static_cache_zero_slots = StaticCache(fault="zero_slots")
window_cache = KVCache(left=LEFT)
window_cache_tq1 = KVCache(left=LEFT, fault="tq1")


# --------------------------------------------------------------------------- a rolling buffer


class RollingCache:
    """W = left + 1 slots per row; the token at position p lives in slot p mod W."""

    def __init__(self, left=LEFT, fault=None):
        self.left, self.W, self.fault = left, left + 1, fault

    def prefill(self, q, k, v, state=None):
        if state is None:
            B, H = q.shape[:2]
            state = {
                "k": q.new_zeros(B, H, self.W, k.shape[-1]),
                "v": q.new_zeros(B, H, self.W, v.shape[-1]),
                "pos": torch.full((self.W,), -1, dtype=torch.long, device=q.device),
                "len": 0,
            }
        return self.step(state, q, k, v)

    def step(self, state, q_new, k_new, v_new):
        n, at = q_new.shape[2], state["len"]
        new_pos = at + torch.arange(n, device=q_new.device)
        if self.fault == "int8_positions":  # position ids kept in int8: they wrap past 127
            new_pos = new_pos.to(torch.int8).to(torch.long)
        keys = torch.cat([state["k"], k_new], 2)
        vals = torch.cat([state["v"], v_new], 2)
        kpos = torch.cat([state["pos"], new_pos])
        vis = (kpos[None] >= 0) & (kpos[None] <= new_pos[:, None])
        vis &= kpos[None] >= new_pos[:, None] - self.left
        s = (q_new @ keys.transpose(-1, -2)) / q_new.shape[-1] ** 0.5
        o = torch.softmax(s.masked_fill(~vis, float("-inf")), -1) @ vals
        kc, vc, pos = state["k"].clone(), state["v"].clone(), state["pos"].clone()
        for i in range(n):
            slot = (at + i) % self.W
            kc[:, :, slot], vc[:, :, slot], pos[slot] = k_new[:, :, i], v_new[:, :, i], at + i
        return o, {"k": kc, "v": vc, "pos": pos, "len": at + n}


rolling_cache = RollingCache()
#: a rolling buffer whose position ids wrap at 128 (int8): right until the sequence passes 127
rolling_cache_int8_positions = RollingCache(fault="int8_positions")


# --------------------------------------------------------------------------- linear attention


def _phi(x):
    return F.elu(x) + 1


def linear_forward(q, k, v, *, causal):
    """Normalized linear attention with elu + 1 features of (SCALE q) and k (parallel form)."""
    w = _phi(SCALE * q) @ _phi(k).transpose(-1, -2)
    if causal:
        T = q.shape[-2]
        w = w * torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    return (w @ v) / w.sum(-1, keepdim=True)


class RecurrentLinear:
    """The recurrent form of :func:`linear_forward`: state (S (B, H, m, d_v), z (B, H, m))."""

    def __init__(self, scale=SCALE, ignore_scale=False):
        self.scale, self.ignore_scale = scale, ignore_scale

    def prefill(self, q, k, v, state=None):
        if state is None:
            B, H, _, d = q.shape
            state = (q.new_zeros(B, H, d, v.shape[-1]), q.new_zeros(B, H, d))
        return self.step(state, q, k, v)

    def step(self, state, q_new, k_new, v_new):
        S, z = state
        c = 1.0 if self.ignore_scale else self.scale
        outs = []
        for t in range(q_new.shape[2]):
            fk = _phi(k_new[:, :, t])
            S = S + fk[..., :, None] * v_new[:, :, t, None, :]
            z = z + fk
            fq = _phi(c * q_new[:, :, t])
            outs.append((fq[..., None, :] @ S)[..., 0, :] / (fq * z).sum(-1, keepdim=True))
        return torch.stack(outs, 2) if outs else q_new.new_zeros(*q_new.shape[:3], S.shape[-1]), (
            S,
            z,
        )


linear_decode = RecurrentLinear()
linear_decode_ignores_scale = RecurrentLinear(ignore_scale=True)


# --------------------------------------------------------------------------- a delta rule


def _delta_scan(S, q, k, v):
    k = F.normalize(k, dim=-1)
    outs = []
    for t in range(q.shape[2]):
        kt, vt = k[:, :, t], v[:, :, t]
        pred = (S @ kt[..., None])[..., 0]  # S_{t-1} k_t: (B, H, d_v)
        S = S + BETA * (vt - pred)[..., :, None] * kt[..., None, :]
        outs.append((S @ q[:, :, t, :, None])[..., 0])
    o = torch.stack(outs, 2) if outs else q.new_zeros(*q.shape[:3], v.shape[-1])
    return o, S


def delta_forward(q, k, v, *, causal):
    """The delta rule over the whole sequence (causal by construction)."""
    if not causal:
        raise ValueError("causal: the delta rule is a causal recurrence")
    B, H, _, d = q.shape
    return _delta_scan(q.new_zeros(B, H, v.shape[-1], d), q, k, v)[0]


class DeltaDecode:
    """prefill/step of :func:`delta_forward`: the state is S (B, H, d_v, d)."""

    def prefill(self, q, k, v, state=None):
        if state is None:
            B, H, _, d = q.shape
            state = q.new_zeros(B, H, v.shape[-1], d)
        return _delta_scan(state, q, k, v)

    def step(self, state, q_new, k_new, v_new):
        return _delta_scan(state, q_new, k_new, v_new)


delta_decode = DeltaDecode()


# --------------------------------------------------------------------------- packed sequences


def _bhtd(t):
    """(total, H, .) rows -> (1, H, total, .)."""
    return t.transpose(0, 1)[None]


def _packed_rows(o):
    return o[0].transpose(0, 1)


def packed_loop(q, k, v, cu_seqlens, *, causal):
    """Varlen attention, one document at a time (slack rows: zeros)."""
    out = q.new_zeros(*q.shape[:-1], v.shape[-1])
    cu = cu_seqlens.tolist()
    for a, b in zip(cu[:-1], cu[1:]):
        if b > a:
            o = softmax_forward(_bhtd(q[a:b]), _bhtd(k[a:b]), _bhtd(v[a:b]), causal=causal)
            out[a:b] = _packed_rows(o)
    return out


def _doc_ids(cu_seqlens, total):
    """Document index of each row; slack rows get -1."""
    rows = torch.arange(total, device=cu_seqlens.device)
    ids = torch.searchsorted(cu_seqlens[1:].to(torch.long), rows, right=True)
    return torch.where(rows < cu_seqlens[-1], ids, torch.full_like(ids, -1))


def _masked(q, k, v, keep):
    """Attention of (1, H, T, .) tensors under a (T, T) visibility: masked by a select (NaN or
    inf in an invisible row never enters); rows without a key give zeros."""
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    s = torch.where(keep, s, float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    used = keep.any(0)[:, None]
    return p @ torch.where(used, v, torch.zeros((), dtype=v.dtype))


def _visibility(cu_seqlens, total, causal, *, documents=True):
    ids = _doc_ids(cu_seqlens, total)
    keep = (ids[:, None] == ids[None, :]) & (ids[:, None] >= 0)
    if not documents:  # every real row sees every real row
        keep = (ids[:, None] >= 0) & (ids[None, :] >= 0)
    if causal:
        keep &= torch.ones(total, total, dtype=torch.bool, device=keep.device).tril()
    return keep


def packed_mask(q, k, v, cu_seqlens, *, causal):
    """Varlen attention as one call under the block-diagonal visibility (D20)."""
    keep = _visibility(cu_seqlens, q.shape[0], causal)
    return _packed_rows(_masked(_bhtd(q), _bhtd(k), _bhtd(v), keep))


def packed_ignores_cu(q, k, v, cu_seqlens, *, causal):
    """Twin: a torch fallback that ignores cu_seqlens (the documents bleed into each other)."""
    keep = _visibility(cu_seqlens, q.shape[0], causal, documents=False)
    return _packed_rows(_masked(_bhtd(q), _bhtd(k), _bhtd(v), keep))


class _CorruptVarlenGrad(torch.autograd.Function):
    """Forward: the block-diagonal attention; backward: the gradients of the attention without
    document boundaries (right for one document only)."""

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens, causal):
        ctx.save_for_backward(q, k, v, cu_seqlens)
        ctx.causal = causal
        return packed_mask(q, k, v, cu_seqlens, causal=causal)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, cu = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [x.detach().requires_grad_(True) for x in (q, k, v)]
            documents = int((cu[1:] > cu[:-1]).sum()) <= 1
            keep = _visibility(cu, q.shape[0], ctx.causal, documents=documents)
            o = _packed_rows(_masked(*(_bhtd(x) for x in leaves), keep))
            grads = torch.autograd.grad(o, leaves, grad)
        return (*grads, None, None)


def packed_grad_corrupt(q, k, v, cu_seqlens, *, causal):
    """Twin: right outputs, gradients that cross document boundaries when B > 1."""
    return _CorruptVarlenGrad.apply(q, k, v, cu_seqlens, causal)


# --------------------------------------------------------------------------- the eps probe


def row_eps_softmax(q, k, v, *, causal):
    """Softmax over D + eps_t with eps_t = 0.05 on the two rows the normalization probe
    duplicates (h - 1 and 2h - 1, h = min(T, STRUCT_LEN) // 2) and 0.5 elsewhere: the
    duplicated pair looks like D/(D + eps), the other rows give another eps (no single eps)."""
    from verify.probes.runner import STRUCT_LEN

    T, S = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(S - T), float("-inf"))
    w = torch.exp(s)
    h = min(T, STRUCT_LEN) // 2
    eps = torch.full((T, 1), 0.5, dtype=q.dtype)
    if h:
        eps[[h - 1, 2 * h - 1]] = 0.05
    return (w @ v) / (w.sum(-1, keepdim=True) + eps)


# --------------------------------------------------------------------------- a resume twin


class _ResumeRestarts(KVCache):
    """Twin of ``kv_cache``: a prefill given a state starts a new cache (the state dropped), so
    a resumed prefill forgets the earlier tokens (``decode-resume``); single-token steps keep
    the state (``decode-steps`` passes)."""

    def prefill(self, q, k, v, state=None, cache_seqlens=None):
        return super().prefill(q, k, v, None, cache_seqlens)


kv_cache_resume_restarts = _ResumeRestarts()
