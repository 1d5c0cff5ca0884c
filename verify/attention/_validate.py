"""Input checks shared by the attention forms (the API contract, README).

Every check raises ``TypeError`` (wrong kind of object or dtype) or ``ValueError`` (wrong value,
shape or device) whose message starts with the argument's name and states what was expected and
what was received. Nothing is coerced.
"""

from __future__ import annotations

import math
import numbers

import torch

from verify.spec.shape import Shape

#: dtypes the attention forms accept; the last two accumulate in float32 (D10)
FLOAT_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
LOW_PRECISION = (torch.bfloat16, torch.float16)


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for bf16/fp16 inputs, the input dtype otherwise (two-level model, D10)."""
    return torch.float32 if dtype in LOW_PRECISION else dtype


def check_tensor(name: str, x: object, ndim: int) -> torch.Tensor:
    """``x`` is a floating tensor of ``ndim`` dimensions with no zero-size trailing axes."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name}: expected a floating dtype in {[str(t) for t in FLOAT_DTYPES]}, got {x.dtype}"
        )
    if x.dim() != ndim:
        raise ValueError(
            f"{name}: expected {ndim} dimensions, got {x.dim()} (shape {tuple(x.shape)})"
        )
    return x


def check_qkv(q: object, k: object, v: object) -> Shape:
    """Check q (B,H,T,d), k (B,H,S,d), v (B,H,S,d_v): tensors, one float dtype, one device."""
    check_tensor("q", q, 4)
    check_tensor("k", k, 4)
    check_tensor("v", v, 4)
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise TypeError(
                f"{name}: expected the dtype of q ({q.dtype}), got {x.dtype} "
                "(mixed dtypes are not converted)"
            )
        if x.device != q.device:
            raise ValueError(f"{name}: expected the device of q ({q.device}), got {x.device}")
    B, H, T, d = q.shape
    for name, x in (("k", k), ("v", v)):
        if x.shape[0] != B:
            raise ValueError(f"{name}: expected batch size {B} (from q), got {x.shape[0]}")
        if x.shape[1] != H:
            raise ValueError(f"{name}: expected {H} heads (from q), got {x.shape[1]}")
    S = k.shape[2]
    if v.shape[2] != S:
        raise ValueError(f"v: expected sequence length {S} (from k), got {v.shape[2]}")
    if k.shape[3] != d:
        raise ValueError(f"k: expected head dimension d = {d} (from q), got {k.shape[3]}")
    d_v = v.shape[3]
    for name, size, what in (
        ("q", T, "query length T"),
        ("k", S, "key length S"),
        ("q", d, "head dimension d"),
        ("v", d_v, "value dimension d_v"),
    ):
        if size == 0:
            raise ValueError(f"{name}: expected {what} >= 1, got 0")
    return Shape(B, H, T, S, d, d_v)


def check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__} {value!r}")
    return value


def check_int(name: str, value: object, minimum: int) -> int:
    """A Python int (bool rejected) that is >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name}: expected an int >= {minimum}, got {type(value).__name__} {value!r}"
        )
    if value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value}")
    return int(value)


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected one of {choices}, got {type(value).__name__} {value!r}")
    if value not in choices:
        raise ValueError(f"{name}: expected one of {choices}, got {value!r}")
    return value


def check_real(name: str, value: object, *, minimum: float | None = None) -> float:
    """A finite real number (bool and tensors rejected), optionally >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}: expected a number >= {minimum}, got {value}")
    return value


def resolve_scale(scale: object, d: int, *, exp_type: bool) -> float:
    """The scale c (the notation of reports/derivations.md).

    exp-type kernels (softmax, Taylor-N, FAVOR+): c in kappa(c q.k), default 1/sqrt(d); c >= 0
    because feature forms absorb sqrt(c) on q and k. Element-wise maps: a factor on q before the
    map, default 1, any finite real.
    """
    if scale is None:
        return 1.0 / math.sqrt(d) if exp_type else 1.0
    return check_real("scale", scale, minimum=0.0 if exp_type else None)


def check_mask(attn_mask: object, dims: Shape, device: torch.device) -> torch.Tensor | None:
    """A boolean mask (True = keep) broadcastable to (B, H, T, S), on the device of q."""
    if attn_mask is None:
        return None
    if not isinstance(attn_mask, torch.Tensor):
        raise TypeError(f"attn_mask: expected a bool torch.Tensor, got {type(attn_mask).__name__}")
    if attn_mask.dtype != torch.bool:
        raise TypeError(
            f"attn_mask: expected dtype torch.bool (True = keep), got {attn_mask.dtype} "
            "(additive float masks are not accepted)"
        )
    if attn_mask.device != device:
        raise ValueError(f"attn_mask: expected the device of q ({device}), got {attn_mask.device}")
    target = (dims.B, dims.H, dims.T, dims.S)
    ok = attn_mask.dim() <= 4 and all(
        m in (1, t) for m, t in zip(reversed(attn_mask.shape), reversed(target))
    )
    if not ok:
        raise ValueError(
            f"attn_mask: expected a shape broadcastable to (B, H, T, S) = {target}, "
            f"got {tuple(attn_mask.shape)}"
        )
    return attn_mask


def key_padding_mask(attn_mask: torch.Tensor | None, dims: Shape, form: str) -> torch.Tensor | None:
    """The (B|1, H|1, S) key mask of a key-padding ``attn_mask`` for the state forms.

    Recurrent and chunked forms consume keys into a state, so a mask can only remove keys for
    every query: its query axis must have size 1 (shape broadcastable to (B, H, 1, S)).
    """
    if attn_mask is None:
        return None
    m4 = attn_mask.reshape((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape))
    if m4.shape[2] != 1 and dims.T != 1:
        raise ValueError(
            f"attn_mask: form={form!r} supports only key-padding masks broadcastable to "
            f"(B, H, 1, S) (a key removed for every query); got shape {tuple(attn_mask.shape)} "
            "whose query axis varies; use form='parallel' for general masks"
        )
    return m4[:, :, 0, :]


def check_causal(causal: object, dims: Shape) -> bool:
    check_bool("causal", causal)
    if causal and dims.T != dims.S:
        raise ValueError(
            f"causal: requires query length T == key length S, got T = {dims.T}, S = {dims.S} "
            "(causal alignment for T != S is ambiguous; decode through verify.attention.state)"
        )
    return causal
