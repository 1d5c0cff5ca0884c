"""Streaming state API for recurrent attention: ``init_state``, ``step``, ``prefill`` (D2, D3).

The state after t tokens holds, for a feature map phi with blocks per Taylor order n,
numerator S = sum_{s<=t} phi(k_s) v_s^T and denominator z = sum_{s<=t} phi(k_s) (block n of S
is sum_s phi_n(k_s) v_s^T with phi_n the order-n block of ``feature_maps.taylor_features``, i.e.
D2's S_t^(n) with the weights c^{n/2}/sqrt(alpha!) folded in), the number of visible keys
absorbed, the number of positions consumed, and the configuration that must stay fixed along a
stream: kernel, basis, scale, denominator mode, eps and FAVOR+'s random directions.

Scale and denominator pass-through: they are chosen when the state is created (keywords of
``init_state``, or of ``prefill`` when it creates the state) and stored in it; ``step`` uses the
stored values; ``prefill`` with a given state rejects keywords that disagree with it.

Equivalences (checked by the tests): prefill(x[:T-1]) then step(x[T-1]) equals the causal
full-sequence output at T-1; prefill(x[:s]) then prefill(x[s:], state=...) equals prefill(x)
for every split s, outputs and states (fault classes 2, 3).

dtypes: float64/float32 inputs keep a state of their dtype; bf16/fp16 inputs keep a float32
state and return outputs in the input dtype. Updates are functional (a new state is returned), so
autograd flows through a stream.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from verify.attention import _scan, structure
from verify.attention._kernels import FeatureKernel, resolve_kernel
from verify.attention._validate import (
    FLOAT_DTYPES,
    accumulation_dtype,
    check_choice,
    check_int,
    check_mask,
    check_qkv,
    check_tensor,
    key_padding_mask,
    resolve_scale,
)
from verify.attention.feature_maps import FEATURE_BUDGET
from verify.attention.norms import check_denominator, check_eps
from verify.spec.kernel import taylor_order
from verify.spec.shape import Shape
from verify.spec.vocabulary import BASES

__all__ = ["AttentionState", "init_state", "step", "prefill"]

PREFILL_FORMS = ("recurrent", "chunked")


@dataclass(frozen=True)
class AttentionState:
    """Recurrent attention state after ``tokens`` positions (immutable; see module docstring).

    Attributes:
        kernel: canonical kernel name (``taylor:N``, ``identity``, ``elu1``, ``relu``, ``favor``)
            or ``callable``.
        numerator: S, (B, H, m, d_v) in the accumulation dtype.
        denominator: z, (B, H, m) in the accumulation dtype.
        count: visible keys absorbed, (B, H), accumulation dtype (exact below 2^24 in float32).
        tokens: positions consumed (masked keys included).
        block_sizes: feature block sizes, one per Taylor order 0..N (one block otherwise).
        d, d_v: key and value dimensions.
        dtype: input/output dtype of the stream.
        scale: the resolved scale c (exp-type: kappa(c q.k); element-wise: phi(c q)).
        denominator_mode: one of ``verify.spec.vocabulary.DENOMINATORS``.
        eps: >= 0, see ``norms``.
        basis: Taylor basis (``symmetric``/``tensor``), None for other kernels.
        projection: FAVOR+ directions (m, d) in the accumulation dtype, None otherwise.
        feature_fn: the callable feature map, None otherwise.
        decay: per-head decays gamma_h (H,) in the accumulation dtype, or None: every step is
            S_t = gamma S_{t-1} + phi(k_t) v_t^T (the decayed RNN of D12).
    """

    kernel: str
    numerator: torch.Tensor
    denominator: torch.Tensor
    count: torch.Tensor
    tokens: int
    block_sizes: tuple[int, ...]
    d: int
    d_v: int
    dtype: torch.dtype
    scale: float
    denominator_mode: str
    eps: float
    basis: str | None = None
    projection: torch.Tensor | None = None
    feature_fn: Callable[[torch.Tensor], torch.Tensor] | None = None
    decay: torch.Tensor | None = None

    @property
    def accumulation_dtype(self) -> torch.dtype:
        return self.numerator.dtype

    @property
    def device(self) -> torch.device:
        return self.numerator.device

    @property
    def batch(self) -> int:
        return self.numerator.shape[0]

    @property
    def heads(self) -> int:
        return self.numerator.shape[1]

    def _block(self, n: int) -> slice:
        n = check_int("n", n, 0)
        if n >= len(self.block_sizes):
            raise ValueError(f"n: expected a block index < {len(self.block_sizes)}, got {n}")
        start = sum(self.block_sizes[:n])
        return slice(start, start + self.block_sizes[n])

    def numerator_block(self, n: int) -> torch.Tensor:
        """Block n of the numerator (order n for Taylor kernels): (B, H, m_n, d_v) view."""
        return self.numerator[:, :, self._block(n)]

    def denominator_block(self, n: int) -> torch.Tensor:
        """Block n of the denominator (order n for Taylor kernels): (B, H, m_n) view."""
        return self.denominator[:, :, self._block(n)]

    def _kernel(self) -> FeatureKernel:
        order = taylor_order(self.kernel)
        return FeatureKernel(
            name=self.kernel,
            exp_type=order is not None or self.kernel == "favor",
            order=order,
            basis=self.basis,
            projection=self.projection,
            fn=self.feature_fn,
        )


def init_state(
    batch: int,
    heads: int,
    d: int,
    d_v: int,
    *,
    kernel: str | Callable[[torch.Tensor], torch.Tensor],
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    scale: float | None = None,
    denominator: str = "sum",
    eps: float = 0.0,
    basis: str = "symmetric",
    projection: torch.Tensor | None = None,
    num_features: int | None = None,
    orthogonal: bool = True,
    generator: torch.Generator | None = None,
    feature_budget: int = FEATURE_BUDGET,
    decay=None,
) -> AttentionState:
    """An empty state (zero numerator, denominator and count) for a stream of (B, H) heads.

    Args:
        batch, heads, d, d_v: sizes, ints >= 1.
        kernel: ``taylor:N`` | ``identity`` | ``elu1`` | ``relu`` | ``favor`` | callable.
        dtype: the stream's input dtype (float64, float32, bfloat16, float16); the state is
            float32 for bf16/fp16, ``dtype`` otherwise.
        device: device of the state and of every later input.
        scale, denominator, eps: as ``linear_attention``; stored in the state.
        basis: Taylor basis ``symmetric`` | ``tensor``.
        projection, num_features, orthogonal, generator: FAVOR+ directions (given, or drawn once
            with the explicit generator) -- stored in the state and reused by every step.
        feature_budget: Taylor feature budget.
        decay: H decays in (0, 1] (sequence or 1-D tensor), or None: the decayed RNN of D12
            (not with ``denominator='count'``).

    Raises:
        TypeError, ValueError: any invalid argument (named in the message).
    """
    batch = check_int("batch", batch, 1)
    heads = check_int("heads", heads, 1)
    d = check_int("d", d, 1)
    d_v = check_int("d_v", d_v, 1)
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype: expected one of {[str(t) for t in FLOAT_DTYPES]}, got {dtype!r}")
    if not isinstance(device, (torch.device, str)):
        raise TypeError(f"device: expected a torch.device or str, got {type(device).__name__}")
    device = torch.device(device)
    mode = check_denominator(denominator, d_v)
    eps = check_eps(eps)
    check_choice("basis", basis, BASES)
    acc = accumulation_dtype(dtype)
    gam = structure.check_decay(decay, heads, causal=True, mode=mode, device=device)
    kern = resolve_kernel(
        kernel,
        name="kernel",
        d=d,
        device=device,
        dtype=dtype,
        basis=basis,
        projection=projection,
        num_features=num_features,
        orthogonal=orthogonal,
        generator=generator,
        feature_budget=feature_budget,
    )
    c = resolve_scale(scale, d, exp_type=kern.exp_type)
    sizes = kern.block_sizes(d)
    if sizes is None:  # callable: learn m from one evaluation
        sizes = (
            kern.features(torch.zeros(1, d, dtype=acc, device=device), 1.0, query=False).shape[-1],
        )
    m = sum(sizes)
    return AttentionState(
        kernel=kern.name,
        numerator=torch.zeros(batch, heads, m, d_v, dtype=acc, device=device),
        denominator=torch.zeros(batch, heads, m, dtype=acc, device=device),
        count=torch.zeros(batch, heads, dtype=acc, device=device),
        tokens=0,
        block_sizes=tuple(sizes),
        d=d,
        d_v=d_v,
        dtype=dtype,
        scale=c,
        denominator_mode=mode,
        eps=eps,
        basis=kern.basis,
        projection=kern.projection,
        feature_fn=kern.fn,
        decay=None if gam is None else gam.to(acc),
    )


def _check_state(state: object) -> AttentionState:
    if not isinstance(state, AttentionState):
        raise TypeError(f"state: expected an AttentionState, got {type(state).__name__}")
    return state


def _check_against_state(state: AttentionState, dims: Shape, dtype, device) -> None:
    for name, got, want in (
        ("q", dims.B, state.batch),
        ("q", dims.H, state.heads),
        ("q", dims.d, state.d),
        ("v", dims.d_v, state.d_v),
    ):
        if got != want:
            raise ValueError(
                f"{name}: expected (batch, heads, d, d_v) = "
                f"{(state.batch, state.heads, state.d, state.d_v)} from the state, got "
                f"{(dims.B, dims.H, dims.d, dims.d_v)}"
            )
    if dtype != state.dtype:
        raise TypeError(f"q: expected the state's dtype {state.dtype}, got {dtype}")
    if device != state.device:
        raise ValueError(f"q: expected the state's device {state.device}, got {device}")


def _advance(state, qa, ka, va, *, form, chunk_size, key_mask):
    Sa0 = torch.cat([state.numerator, state.denominator[..., None]], -1)
    o, Sa, n = _scan.feature_attention(
        state._kernel(),
        qa,
        ka,
        va,
        state.scale,
        causal=True,
        form=form,
        chunk_size=chunk_size,
        key_mask=key_mask,
        mode=state.denominator_mode,
        eps=state.eps,
        Sa0=Sa0,
        n0=state.count,
        decay=state.decay,
    )
    new = dataclasses.replace(
        state,
        numerator=Sa[..., : state.d_v],
        denominator=Sa[..., state.d_v],
        count=n,
        tokens=state.tokens + qa.shape[2],
    )
    return o.to(state.dtype), new


def step(
    state: AttentionState, q_t: torch.Tensor, k_t: torch.Tensor, v_t: torch.Tensor
) -> tuple[torch.Tensor, AttentionState]:
    """Absorb one token and read it: returns (o_t (B, H, d_v) in the state's dtype, new state).

    Args:
        state: from ``init_state`` or ``prefill``.
        q_t, k_t: (B, H, d); v_t: (B, H, d_v); the state's dtype and device.

    Raises:
        TypeError, ValueError: bad state or inputs (named in the message).
    """
    state = _check_state(state)
    for name, x in (("q_t", q_t), ("k_t", k_t), ("v_t", v_t)):
        check_tensor(name, x, 3)
    try:
        dims = check_qkv(q_t[:, :, None], k_t[:, :, None], v_t[:, :, None])
    except (TypeError, ValueError) as err:  # name the step arguments
        msg = str(err)
        for a in ("q", "k", "v"):
            if msg.startswith(f"{a}:"):
                msg = f"{a}_t:" + msg[2:]
        raise type(err)(msg) from None
    _check_against_state(state, dims, q_t.dtype, q_t.device)
    acc = state.accumulation_dtype
    o, new = _advance(
        state,
        q_t[:, :, None].to(acc),
        k_t[:, :, None].to(acc),
        v_t[:, :, None].to(acc),
        form="recurrent",
        chunk_size=1,
        key_mask=None,
    )
    return o[:, :, 0], new


def _canonical(spec: object) -> object:
    order = taylor_order(spec)
    return spec if order is None else f"taylor:{order}"


def prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    kernel: str | Callable[[torch.Tensor], torch.Tensor],
    state: AttentionState | None = None,
    form: str = "recurrent",
    chunk_size: int = 64,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    denominator: str | None = None,
    eps: float | None = None,
    basis: str | None = None,
    projection: torch.Tensor | None = None,
    num_features: int | None = None,
    orthogonal: bool = True,
    generator: torch.Generator | None = None,
    feature_budget: int = FEATURE_BUDGET,
    decay=None,
) -> tuple[torch.Tensor, AttentionState]:
    """Causal attention over a segment of T tokens, resuming from ``state``.

    Args:
        q, k: (B, H, T, d); v: (B, H, T, d_v) -- one key per query token.
        kernel: as ``init_state``; must equal the state's kernel when a state is given.
        state: None starts a stream (``init_state`` with the keywords below); a given state
            resumes it, and then scale/denominator/eps/basis/projection must be None or equal
            to the stored ones.
        form: ``recurrent`` (token loop) | ``chunked``.
        chunk_size: >= 1, chunked form.
        attn_mask: key-padding mask only, bool broadcastable to (B, H, 1, T): masked tokens
            enter neither numerator, denominator nor count (still counted in ``tokens``).
        scale, denominator, eps, basis, projection, num_features, orthogonal, generator,
            feature_budget, decay: used when ``state`` is None (defaults: 1/sqrt(d) or 1,
            ``sum``, 0.0, ``symmetric``, no decay); a given state keeps its own decay.

    Returns:
        (o (B, H, T, d_v) in the dtype of q, the state after the segment).

    Raises:
        TypeError, ValueError: any invalid argument (named in the message).
    """
    dims = check_qkv(q, k, v)
    if dims.S != dims.T:
        raise ValueError(
            f"k: prefill expects one key per query token (S == T = {dims.T}), got S = {dims.S}"
        )
    form = check_choice("form", form, PREFILL_FORMS)
    chunk_size = check_int("chunk_size", chunk_size, 1)
    mask = check_mask(attn_mask, dims, q.device)
    km = key_padding_mask(mask, dims, "prefill")
    if state is None:
        state = init_state(
            dims.B,
            dims.H,
            dims.d,
            dims.d_v,
            kernel=kernel,
            dtype=q.dtype,
            device=q.device,
            scale=scale,
            denominator="sum" if denominator is None else denominator,
            eps=0.0 if eps is None else eps,
            basis="symmetric" if basis is None else basis,
            projection=projection,
            num_features=num_features,
            orthogonal=orthogonal,
            generator=generator,
            feature_budget=feature_budget,
            decay=decay,
        )
    else:
        state = _check_state(state)
        if decay is not None:
            raise ValueError("decay: only used when prefill creates the state; it keeps its own")
        want = state.feature_fn if state.kernel == "callable" else state.kernel
        got = _canonical(kernel)
        if got is not want and got != want:
            raise ValueError(f"kernel: expected the state's kernel {want!r}, got {kernel!r}")
        _check_against_state(state, dims, q.dtype, q.device)
        stored = {
            "scale": None
            if scale is None
            else resolve_scale(scale, dims.d, exp_type=state._kernel().exp_type),
            "denominator": denominator,
            "eps": None if eps is None else check_eps(eps),
            "basis": basis,
        }
        have = {
            "scale": state.scale,
            "denominator": state.denominator_mode,
            "eps": state.eps,
            "basis": state.basis,
        }
        for name, value in stored.items():
            if value is not None and value != have[name]:
                raise ValueError(
                    f"{name}: the state was created with {name}={have[name]!r}, got {value!r}"
                )
        if projection is not None and not (
            isinstance(projection, torch.Tensor)
            and state.projection is not None
            and projection.shape == state.projection.shape
            and torch.equal(projection.to(state.projection), state.projection)
        ):
            raise ValueError("projection: differs from the FAVOR+ directions stored in the state")
        if num_features is not None or generator is not None:
            raise ValueError(
                "num_features/generator: only used when prefill creates the state; the given "
                "state already holds its FAVOR+ directions"
            )
    acc = state.accumulation_dtype
    return _advance(
        state, q.to(acc), k.to(acc), v.to(acc), form=form, chunk_size=chunk_size, key_mask=km
    )
