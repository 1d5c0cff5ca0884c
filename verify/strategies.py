"""Hypothesis strategies for attention inputs (exported for users; D4, D10).

Every tensor is built *through hypothesis*: elements are drawn as bounded finite floats into a
float64 numpy array (``hypothesis.extra.numpy.arrays``), then ``torch.from_numpy(...).to(dtype,
device)``, so failing examples shrink to minimal counterexamples (small shapes, zeros, ones).

Low precision (D10): elements are drawn at the dtype's width (float16 values are exact
float16 numbers; float32 and bfloat16 draws are float32 numbers) and then rounded to the dtype by
the cast (round to nearest even). The tensor holds the *rounded* inputs; ``x.to(torch.float64)``
casts them up exactly, so a float64 reference evaluated on the same rounded inputs does not charge
input rounding to the kernel. Subnormal elements are not drawn (flush-to-zero hardware would
otherwise differ from the reference for reasons outside the kernel).

Score radius: with ``radius=r`` q and k are multiplied by one common factor (rounded once to the
dtype) so that max_{b,h,t,s} |c q_t . k_s| <= r holds *exactly* (checked in rational arithmetic on
the rounded values; c = ``scale``, or 1/sqrt(d) when ``scale`` is None -- the exp-type default)
and the maximum is close to r (within a few units of the dtype's rounding). All-zero scores are
left as they are.

Public names: see ``__all__``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np
import torch
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from derivations.rounding import gamma, unit_roundoff
from verify.spec.shape import Shape
from verify.spec.visibility import visible

__all__ = [
    "ALL_CASES",
    "DTYPES",
    "EDGE_CASES",
    "AttentionInputs",
    "Shape",
    "attention_inputs",
    "dtypes",
    "edge_case_inputs",
    "extreme_score_magnitude",
    "masked_inputs",
    "masks",
    "safe_exp_radius",
    "score_radius",
    "shapes",
    "sizes",
]

#: float dtypes the API contract covers (the API contract, README)
DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
#: edge cases of ``attention_inputs(cases=...)`` (see its docstring)
EDGE_CASES = (
    "zeros",
    "single_key",
    "equal_keys",
    "large_norm",
    "identity_values",
    "positive",
    "unit_values",
)
#: rows whose visible scores are all far from 0 (see :func:`extreme_score_magnitude`)
EXTREME_CASES = ("extreme_scores",)
ALL_CASES = ("random", *EDGE_CASES, *EXTREME_CASES)
#: the largest score offset drawn by ``extreme_scores`` where the dtype's range allows it: far
#: below a finite mask sentinel such as -1e4, far above finfo.min (masks at the dtype's
#: extreme, as model code writes them, stay below every drawn score)
EXTREME_SCORE_CAP = 1e6

_WIDTH = {torch.float64: 64, torch.float32: 32, torch.bfloat16: 32, torch.float16: 16}


# ----------------------------------------------------------------------------- shapes


def _bounds(name: str, value: object) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in value)
        or not 1 <= value[0] <= value[1]
    ):
        raise ValueError(
            f"{name}: expected an int >= 1 or a pair (lo, hi), 1 <= lo <= hi, got {value!r}"
        )
    return value


def sizes(lo: int, hi: int, *, step: int = 1) -> st.SearchStrategy[int]:
    """Strategy of the integers ``lo, lo + step, ..., <= hi`` (a size: a length, a dimension),
    drawn as an offset ``j`` in ``[0, (hi - lo) // step]`` and mapped to ``lo + j * step``.

    Why an offset: hypothesis' shrinker starts (``reduce_each_alternative``) by lowering, from
    left to right, every integer choice whose lower bound is 0, before any pass over the values
    of the tensors. Sizes drawn this way, ahead of the tensors they size, therefore shrink first:
    a failure found at B = 2, H = 2, T = 8 is tried at B = H = 1 and at every shorter T before
    its elements are touched, so a small shrink budget reaches a small shape. The values drawn
    are those of ``st.integers(lo, hi)`` shifted (the same generation).

    Raises:
        ValueError: not 0 <= lo <= hi or step < 1.
    """
    if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi) or step < 1:
        raise ValueError(f"sizes: expected 0 <= lo <= hi and step >= 1, got {lo}, {hi}, {step}")
    top = (hi - lo) // step
    if step == 1:
        return st.integers(0, top).map(lambda j: lo + j)
    return st.integers(0, top).map(lambda j: lo + j * step)


def shapes(
    *,
    batch: int | tuple[int, int] = (1, 2),
    heads: int | tuple[int, int] = (1, 2),
    queries: int | tuple[int, int] = (1, 8),
    keys: int | tuple[int, int] | None = None,
    dim: int | tuple[int, int] = (1, 4),
    value_dim: int | tuple[int, int] = (1, 4),
    causal: bool | None = None,
) -> st.SearchStrategy[Shape]:
    """Strategy of :class:`Shape` with each size in its inclusive bounds ``(lo, hi)``.

    Sizes include 1 and odd values and shrink towards the lower bound. ``keys`` (S) defaults to
    the bounds of ``queries`` (T). With ``causal=True`` S = T always (``keys`` is ignored), since
    causal attention with T != S is an error in this project's API; with False or None, S is
    drawn independently (S == T is possible).

    Raises:
        ValueError: bounds that are not ints >= 1 or pairs with 1 <= lo <= hi.
    """
    b, h, t, d, dv = (
        _bounds("batch", batch),
        _bounds("heads", heads),
        _bounds("queries", queries),
        _bounds("dim", dim),
        _bounds("value_dim", value_dim),
    )
    s = t if keys is None else _bounds("keys", keys)
    if causal is not None and not isinstance(causal, bool):
        raise TypeError(f"causal: expected True, False or None, got {causal!r}")

    @st.composite
    def draw_shape(draw):
        T = draw(sizes(*t))
        S = draw(sizes(*s))  # drawn even when causal: keeps shrinking across causal stable
        if causal:
            S = T
        return sized_shape(draw, T, S, B=b, H=h, d=d, d_v=dv)

    return draw_shape()


def sized_shape(draw, T: int, S: int, *, B, H, d, d_v) -> Shape:
    """A :class:`Shape` with the lengths ``T``, ``S`` and the other sizes drawn with ``draw``
    (a composite strategy's) from their inclusive ``(lo, hi)`` bounds, in the order B, H, d,
    d_v: the order every shape strategy draws them in (each through :func:`sizes`, so shrinking
    lowers them first)."""
    return Shape(
        B=draw(sizes(*B)),
        H=draw(sizes(*H)),
        T=T,
        S=S,
        d=draw(sizes(*d)),
        d_v=draw(sizes(*d_v)),
    )


def dtypes(*choices: torch.dtype) -> st.SearchStrategy[torch.dtype]:
    """Strategy over float dtypes (default: all of ``DTYPES``; shrinks towards the first).

    Raises:
        ValueError: a choice outside ``DTYPES``.
    """
    choices = choices or DTYPES
    for c in choices:
        if c not in DTYPES:
            raise ValueError(f"dtype: expected one of {DTYPES}, got {c!r}")
    return st.sampled_from(choices)


# ----------------------------------------------------------------------------- radius


def safe_exp_radius(dtype: torch.dtype = torch.float64) -> float:
    """Largest score radius R with e^R <= sqrt(finfo(dtype).max): floor(log(max)/2).

    exp of any score in [-R, R] is finite in ``dtype`` and leaves a factor sqrt(max) of head-room
    for sums over keys and value magnitudes in an unnormalized numerator (float16: 5,
    bfloat16/float32: 44, float64: 354).
    """
    _check_dtype(dtype)
    return float(math.floor(math.log(torch.finfo(dtype).max) / 2))


@functools.cache
def _informative_radius(order: int, target: float) -> float:
    from derivations.truncation import informative_radius

    return informative_radius(order, target)


def score_radius(
    order: int | None = None,
    *,
    target: float = 0.5,
    dtype: torch.dtype = torch.float64,
) -> st.SearchStrategy[float]:
    """Strategy of score radii r > 0 for which a check applies.

    - ``order=N`` (Taylor-N): floats in (0, informative_radius(N, target)], the range where the
      truncation bound delta_N(r) < target, i.e. where D4's weight bound is informative
      (``derivations.truncation.informative_radius``; target 1/2 by default).
    - ``order=None`` (exp / softmax): floats in (0, ``safe_exp_radius(dtype)``].

    Raises:
        TypeError, ValueError: bad ``order``, ``target`` or ``dtype``.
    """
    _check_dtype(dtype)
    if order is None:
        hi = safe_exp_radius(dtype)
    else:
        if isinstance(order, bool) or not isinstance(order, int):
            raise TypeError(f"order: expected an int >= 0 or None, got {order!r}")
        if order < 0:
            raise ValueError(f"order: expected an int >= 0 or None, got {order}")
        if isinstance(target, bool) or not isinstance(target, (int, float)) or not target > 0:
            raise ValueError(f"target: expected a positive number, got {target!r}")
        hi = _informative_radius(order, float(target))
    return st.floats(
        min_value=0.0, max_value=hi, exclude_min=True, allow_nan=False, allow_subnormal=False
    )


def _dot_exact(q: Sequence[float], k: Sequence[float]) -> Fraction:
    return sum((Fraction(a) * Fraction(b) for a, b in zip(q, k)), Fraction(0))


def _within(qd: np.ndarray, kd: np.ndarray, c: float | None, r: float) -> bool:
    """Exactly: max |c q_t . k_s| <= r over all (b, h, t, s); c None means 1/sqrt(d).

    A float64 pass bounds every score within gamma_{d+2} c sum|q||k|; only pairs that could
    reach r are re-checked in rational arithmetic (irrational 1/sqrt(d) via squares).
    """
    d = qd.shape[-1]
    cf = 1 / math.sqrt(d) if c is None else abs(c)
    approx = np.abs(np.einsum("bhtd,bhsd->bhts", qd, kd)) * cf
    mag = np.einsum("bhtd,bhsd->bhts", np.abs(qd), np.abs(kd)) * cf
    err = gamma(d + 4, unit_roundoff("float64")) * mag * 1.01 + 1e-300
    rf = Fraction(r)
    for idx in zip(*np.nonzero(approx + err >= r)):
        b, h, t, s = (int(i) for i in idx)
        dot = _dot_exact(qd[b, h, t].tolist(), kd[b, h, s].tolist())
        if c is None:
            if dot * dot > d * rf * rf:
                return False
        elif abs(Fraction(c) * dot) > rf:
            return False
    return True


def _round_to(arr: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """float64 array -> values of ``dtype`` (round to nearest even), as float64 again (exact)."""
    return torch.from_numpy(np.ascontiguousarray(arr)).to(dtype).to(torch.float64).numpy()


def _abs_dots_in_order(qd: np.ndarray, kd: np.ndarray) -> np.ndarray:
    """|q_t . k_s| (b, h, t, s), the d products added in index order by elementwise IEEE
    operations: the same bits on every machine. A reduction (einsum, matmul) may associate the
    sum by the vector width of the CPU, and the drawn q, k are scaled by a factor computed from
    this maximum, so its last bit must not depend on the machine."""
    acc = qd[..., :, None, 0] * kd[..., None, :, 0]
    for i in range(1, qd.shape[-1]):
        acc = acc + qd[..., :, None, i] * kd[..., None, :, i]
    return np.abs(acc)


def _max_score(qd: np.ndarray, kd: np.ndarray, c: float | None) -> tuple[float, int]:
    """(m, e) with max |c q.k| ~= m 2^e, robust to under- and overflow; m = 0 if all are 0.

    q and k are first scaled by exact powers of two to a maximum magnitude near 1; if the
    float64 product still vanishes, the maximum is taken in exact rational arithmetic.
    """
    d = qd.shape[-1]
    cf = 1 / math.sqrt(d) if c is None else abs(c)
    aq = float(np.abs(qd).max())
    ak = float(np.abs(kd).max())
    if aq == 0.0 or ak == 0.0 or cf == 0.0:
        return 0.0, 0
    ea, eb = math.frexp(aq)[1], math.frexp(ak)[1]
    qn, kn = np.ldexp(qd, -ea), np.ldexp(kd, -eb)
    m = float(_abs_dots_in_order(qn, kn).max()) * cf
    if m > 2.0**-900:
        return m, ea + eb
    exact = max(
        abs(_dot_exact(qd[b, h, t].tolist(), kd[b, h, s].tolist()))
        for b, h, t, s in np.ndindex(*qd.shape[:3], kd.shape[2])
    )
    if exact == 0:
        return 0.0, 0
    e = exact.numerator.bit_length() - exact.denominator.bit_length()
    return float(exact / Fraction(2) ** e) * cf, e


def _rescale(qd: np.ndarray, kd: np.ndarray, c: float | None, r: float, dtype: torch.dtype):
    """Multiply q and k by one factor so that max |c q.k| is close to r and exactly <= r.

    Returns None when the factor would overflow the dtype (the caller rejects the example).
    """
    m, e = _max_score(qd, kd, c)
    if m == 0.0:
        return qd, kd  # all scores are 0: nothing to rescale
    # lam = sqrt(r / (m 2^e)), split so that no intermediate under- or overflows
    if e % 2:
        lam = math.ldexp(math.sqrt(2 * r / m), -(e + 1) // 2)
    else:
        lam = math.ldexp(math.sqrt(r / m), -e // 2)
    # a few roundings of q and k (unit roundoff u of D10); doubled after each miss
    shrink = 4 * unit_roundoff(str(dtype).removeprefix("torch."))
    with np.errstate(over="ignore"):
        while lam > 0:
            if not math.isfinite(lam):
                return None
            q2, k2 = _round_to(qd * lam, dtype), _round_to(kd * lam, dtype)
            if not (np.isfinite(q2).all() and np.isfinite(k2).all()):
                return None
            if _within(q2, k2, c, r):
                return q2, k2
            lam *= 1 - shrink
            shrink = min(2 * shrink, 0.5)
    return np.zeros_like(qd), np.zeros_like(kd)  # unreachable in practice: lam -> 0 fits


def extreme_score_magnitude(dtype: torch.dtype, d: int, scale: float | None = None) -> float:
    """The largest |offset| M of the ``extreme_scores`` case: min(1e6, c finfo.max / 16), c the
    scale (1/sqrt(d) when None).

    Every visible scaled score of a row is then sigma M + (a score of radius <= r), sigma = +-1.
    The unscaled product q_0 k_0 = M / c and a sum of d such terms stay below finfo.max / 16, so
    the score computation itself does not overflow (float64, float32, bfloat16: 1e6; float16 at
    d = 8: 1448). The stated magnitude is what a finite mask sentinel must stay below: -1e4 is
    hit in float64, float32 and bfloat16, not in float16 (1448 < 1e4); finfo.min never.

    Raises:
        ValueError: bad ``dtype``, ``d`` < 1 or ``scale`` <= 0.
    """
    _check_dtype(dtype)
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ValueError(f"d: expected an int >= 1, got {d!r}")
    c = 1.0 / math.sqrt(d) if scale is None else scale
    if not c > 0:
        raise ValueError(f"scale: expected a positive float or None, got {scale!r}")
    return min(EXTREME_SCORE_CAP, c * float(torch.finfo(dtype).max) / 16)


def _extreme_offsets(qd, kd, c, magnitude: float, sign: float, dt):
    """q_0 = a, k_0 = sign b with c a b = magnitude (a = b, rounded to the dtype): every scaled
    score gets sign * magnitude plus the scores of the other coordinates."""
    d = qd.shape[-1]
    cc = 1.0 / math.sqrt(d) if c is None else c
    a = float(_round_to(np.array([math.sqrt(magnitude / cc)]), dt)[0])
    q2, k2 = qd.copy(), kd.copy()
    q2[..., 0] = a
    k2[..., 0] = sign * a
    return q2, k2


# ----------------------------------------------------------------------------- inputs


@dataclass(frozen=True, eq=False, repr=False)
class AttentionInputs:
    """One drawn attention example.

    Attributes:
        q: (B, H, T, d) tensor; k: (B, H, S, d); v: (B, H, S, d_v); all of one dtype and device.
        causal: the causal flag (True only when T == S).
        scale: the scale to pass (None: the implementation's default).
        radius: the score bound r with max |c q.k| <= r exactly, or None (no rescaling).
        shape: the :class:`Shape`.
        attn_mask: bool mask (True = keep) broadcastable to (B, H, T, S), or None.
        case: which case of ``ALL_CASES`` produced it (``"masked"`` for ``masked_inputs``).
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    causal: bool
    scale: float | None
    radius: float | None
    shape: Shape
    attn_mask: torch.Tensor | None = None
    case: str = "random"

    @property
    def dtype(self) -> torch.dtype:
        return self.q.dtype

    @property
    def device(self) -> torch.device:
        return self.q.device

    def visible(self, *, numpy: bool = True):
        """Bool (B, H, T, S) of visible (query, key) pairs (``verify.spec.visibility``): numpy,
        or a CPU torch tensor with ``numpy=False``."""
        s = self.shape
        return visible(
            s.T, s.S, causal=self.causal, attn_mask=self.attn_mask, lead=(s.B, s.H), numpy=numpy
        )

    def kwargs(self) -> dict[str, Any]:
        """``causal``, ``scale`` and ``attn_mask`` as keywords for the API contract's functions."""
        return {"causal": self.causal, "scale": self.scale, "attn_mask": self.attn_mask}

    def __repr__(self) -> str:
        def vals(x: torch.Tensor | None) -> str:
            if x is None:
                return "None"
            x = x.detach().cpu()
            return repr((x.to(torch.float64) if x.is_floating_point() else x).tolist())

        return (
            f"AttentionInputs(case={self.case!r}, shape={self.shape}, dtype={self.dtype}, "
            f"device={str(self.device)!r}, causal={self.causal}, scale={self.scale!r}, "
            f"radius={self.radius!r},\n  q={vals(self.q)},\n  k={vals(self.k)},\n"
            f"  v={vals(self.v)},\n  attn_mask={vals(self.attn_mask)})"
        )

    def snippet(self) -> str:
        """Python code that rebuilds ``q, k, v, attn_mask, causal, scale`` exactly.

        Values are written as float64 literals (``repr`` round-trips every float64, -0.0
        included) and cast to the dtype, which is exact because they are values of the dtype.
        """
        dev = str(self.device)

        def tensor(name: str, x: torch.Tensor | None) -> str:
            if x is None:
                return f"{name} = None"
            if x.dtype == torch.bool:
                return (
                    f"{name} = torch.tensor({x.detach().cpu().tolist()!r}, dtype=torch.bool, "
                    f"device={dev!r})"
                )
            values = x.detach().cpu().to(torch.float64).tolist()
            return (
                f"{name} = torch.tensor({values!r}, dtype=torch.float64)"
                f".to(dtype={self.dtype}, device={dev!r})"
            )

        lines = [
            "import torch",
            "",
            f"# {self.case} example, {self.shape}, radius={self.radius!r}",
            tensor("q", self.q),
            tensor("k", self.k),
            tensor("v", self.v),
            tensor("attn_mask", self.attn_mask),
            f"causal = {self.causal!r}",
            f"scale = {self.scale!r}",
        ]
        return "\n".join(lines) + "\n"


def _check_dtype(dtype: object) -> torch.dtype:
    if dtype not in DTYPES:
        raise ValueError(f"dtype: expected one of {DTYPES}, got {dtype!r}")
    return dtype


def _as_strategy(name: str, value: object, check) -> st.SearchStrategy:
    if isinstance(value, st.SearchStrategy):
        return value
    if name == "dtype" and isinstance(value, (list, tuple)):
        return dtypes(*value)
    check(value)
    return st.just(value)


def _check_radius(r: object) -> None:
    if r is None:
        return
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not (0 < r < math.inf):
        raise ValueError(f"radius: expected a positive finite float, a strategy or None, got {r!r}")


def _check_scale(c: object) -> None:
    if c is None:
        return
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c):
        raise ValueError(f"scale: expected a finite float, a strategy or None, got {c!r}")


def _elements(
    bound: float, dtype: torch.dtype, positive: bool = False, min_magnitude: float = 0.0
) -> st.SearchStrategy:
    if min_magnitude <= 0.0:
        lo = 0.0 if positive else -bound
        return st.floats(
            min_value=lo,
            max_value=bound,
            allow_nan=False,
            allow_infinity=False,
            allow_subnormal=False,
            width=_WIDTH[dtype],
        )
    # zero, or a magnitude in [min_magnitude, bound] (shrinks towards 0, then min_magnitude)
    mag = st.floats(min_magnitude, bound, allow_subnormal=False, width=_WIDTH[dtype])
    signed = mag if positive else st.one_of(mag, mag.map(lambda x: -x))
    return st.one_of(st.just(0.0), signed)


def attention_inputs(
    shape: Shape | st.SearchStrategy[Shape] | None = None,
    *,
    dtype: torch.dtype | Sequence[torch.dtype] | st.SearchStrategy = torch.float64,
    device: str | torch.device = "cpu",
    causal: bool | None = None,
    radius: float | st.SearchStrategy[float] | None = None,
    scale: float | st.SearchStrategy[float] | None = None,
    bound: float = 2.0,
    cases: Sequence[str] = ("random",),
    min_magnitude: float = 0.0,
) -> st.SearchStrategy[AttentionInputs]:
    """Strategy of :class:`AttentionInputs` (q, k, v, causal, scale, radius, shape).

    Args:
        shape: a :class:`Shape`, a strategy of them (e.g. :func:`shapes`), or None for
            ``shapes(causal=...)``. A drawn shape with T != S gets causal=False when ``causal``
            is None.
        dtype: a dtype of ``DTYPES``, a sequence of them, or a strategy.
        device: where the tensors are put (no device is probed or changed otherwise).
        causal: True, False, or None (both).
        radius: score bound r (float > 0 or a strategy, e.g. :func:`score_radius`); None: no
            rescaling, element bounds only. See the module docstring.
        scale: the scale recorded and used for the radius (None: 1/sqrt(d) for the radius and
            the implementation's default when called).
        bound: elements of q, k, v are drawn in [-bound, bound] (before any rescaling).
        min_magnitude: nonzero elements have magnitude >= this (before any rescaling); 0 lets
            them approach the normal range's edge (underflow tests), a positive value keeps
            products of a few elements away from it (the D10 model assumes no underflow).
        cases: which cases to draw from (``ALL_CASES``; shrinks towards the first):
            ``random``; ``zeros`` (q = k = 0: all scores 0); ``single_key`` (S = 1, and T = 1
            when causal); ``equal_keys`` (all keys equal: equal scores in each row);
            ``large_norm`` (q times 2^j, k times 2^-j, v times 2^jv, powers of two with
            j = floor(log2(finfo.max)) // 4 and jv = floor(log2(finfo.max)) // 8 of the dtype:
            large norms, scores unchanged (up to subnormal rounding of k), so exp/kappa_N stay
            within the radius and do not overflow);
            ``identity_values`` (v_s = e_{s mod d_v}: the output shows the weights);
            ``positive`` (q, k >= 0, for positive feature maps); ``unit_values`` (v = 1);
            ``extreme_scores`` (for shift-invariant kernels and masks: q_0 = a, k_0 = +-a with
            c a^2 = M, M a power of ten from 10 up to :func:`extreme_score_magnitude`, or that
            magnitude itself: every visible score of every row is +-M plus the radius-bounded
            scores of the other coordinates, so a finite mask sentinel above -M is hit;
            ``radius`` is then None).

    Raises:
        ValueError: bad ``dtype``, ``radius``, ``scale``, ``bound`` or ``cases`` (at call);
            causal=True with a drawn shape having T != S (at draw).
    """
    dtype_st = _as_strategy("dtype", dtype, _check_dtype)
    radius_st = _as_strategy("radius", radius, _check_radius)
    scale_st = _as_strategy("scale", scale, _check_scale)
    if causal is not None and not isinstance(causal, bool):
        raise TypeError(f"causal: expected True, False or None, got {causal!r}")
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not 0 < bound < math.inf:
        raise ValueError(f"bound: expected a positive finite float, got {bound!r}")
    if isinstance(cases, str) or not cases or any(c not in ALL_CASES for c in cases):
        raise ValueError(f"cases: expected a non-empty sequence of {ALL_CASES}, got {cases!r}")
    if isinstance(shape, Shape):
        shape = st.just(shape)
    elif shape is not None and not isinstance(shape, st.SearchStrategy):
        raise TypeError(f"shape: expected a Shape, a strategy of Shape or None, got {shape!r}")
    device = torch.device(device)

    @st.composite
    def draw_inputs(draw):
        case = draw(st.sampled_from(tuple(cases)))
        is_causal = draw(st.booleans()) if causal is None else causal
        shp = draw(shapes(causal=is_causal) if shape is None else shape)
        if shp.T != shp.S:
            if causal:
                raise ValueError(f"shape: causal=True needs T == S, the shape strategy drew {shp}")
            is_causal = False
        if case == "single_key":
            shp = replace(shp, S=1, T=1 if is_causal else shp.T)
        dt = draw(dtype_st)
        _check_dtype(dt)
        r = draw(radius_st)
        c = draw(scale_st)
        elems = _elements(
            float(bound), dt, positive=case == "positive", min_magnitude=float(min_magnitude)
        )

        def arr(shape_):
            return _round_to(draw(hnp.arrays(np.float64, shape_, elements=elems)), dt)

        if case == "zeros":
            qd, kd = np.zeros(shp.q), np.zeros(shp.k)
        else:
            qd = arr(shp.q)
            if case == "equal_keys":
                kd = arr((shp.B, shp.H, 1, shp.d)).repeat(shp.S, 2)
            else:
                kd = arr(shp.k)
        if case == "identity_values":
            vd = np.zeros(shp.v)
            for s in range(shp.S):
                vd[:, :, s, s % shp.d_v] = 1.0
        elif case == "unit_values":
            vd = np.ones(shp.v)
        else:
            vd = arr(shp.v)
        if case == "large_norm":
            top = math.floor(math.log2(torch.finfo(dt).max))
            qd, kd = qd * 2.0 ** (top // 4), kd * 2.0 ** -(top // 4)
            vd = vd * 2.0 ** (top // 8)
            qd, kd, vd = _round_to(qd, dt), _round_to(kd, dt), _round_to(vd, dt)
        if case == "extreme_scores":  # coordinate 0 carries the offset; the rest the radius
            qd[..., 0], kd[..., 0] = 0.0, 0.0
        if r is not None:
            rescaled = _rescale(qd, kd, c, float(r), dt)
            assume(rescaled is not None)
            qd, kd = rescaled
        if case == "extreme_scores":
            top = extreme_score_magnitude(dt, shp.d, c)
            mags = [10.0**j for j in range(1, 7) if 10.0**j < top] + [top]
            magnitude = draw(st.sampled_from(mags[::-1]))  # shrinks to the stated magnitude
            sign = draw(st.sampled_from((-1.0, 1.0)))
            qd, kd = _extreme_offsets(qd, kd, c, magnitude, sign, dt)
            r = None

        def tensor(a):
            return torch.from_numpy(np.ascontiguousarray(a)).to(dtype=dt, device=device)

        return AttentionInputs(
            q=tensor(qd),
            k=tensor(kd),
            v=tensor(vd),
            causal=is_causal,
            scale=c,
            radius=None if r is None else float(r),
            shape=shp,
            case=case,
        )

    return draw_inputs()


def edge_case_inputs(**kwargs: Any) -> st.SearchStrategy[AttentionInputs]:
    """``attention_inputs(cases=EDGE_CASES, **kwargs)``: one of the edge cases per example."""
    return attention_inputs(cases=EDGE_CASES, **kwargs)


# ----------------------------------------------------------------------------- masks


def masks(
    shape: Shape,
    *,
    broadcast: bool = True,
    empty_rows: bool = True,
    dead_keys: bool = True,
    device: str | torch.device = "cpu",
) -> st.SearchStrategy[torch.Tensor]:
    """Strategy of bool masks (True = keep) of shape (B or 1, H or 1, T, S).

    Each position is hidden with a drawn flag (shrinks to "all visible"); in addition, with
    ``empty_rows`` some query rows are hidden entirely (a row with no visible key must give
    zeros, fault class 8) and with ``dead_keys`` some keys are hidden from every query (the keys
    :func:`masked_inputs` poisons). ``broadcast`` lets the batch and head axes have size 1.
    """
    if not isinstance(shape, Shape):
        raise TypeError(f"shape: expected a Shape, got {type(shape).__name__}")
    device = torch.device(device)

    @st.composite
    def draw_mask(draw):
        b = draw(st.sampled_from((shape.B, 1))) if broadcast else shape.B
        h = draw(st.sampled_from((shape.H, 1))) if broadcast else shape.H
        hidden = draw(hnp.arrays(np.bool_, (b, h, shape.T, shape.S), elements=st.booleans()))
        if empty_rows:
            rows = draw(
                st.lists(st.tuples(st.integers(0, b - 1), st.integers(0, h - 1),
                                   st.integers(0, shape.T - 1)), max_size=3)
            )  # fmt: skip
            for i, j, t in rows:
                hidden[i, j, t, :] = True
        if dead_keys:
            for s in draw(st.lists(st.integers(0, shape.S - 1), max_size=2)):
                hidden[..., s] = True
        return torch.from_numpy(~hidden).to(device)

    return draw_mask()


def masked_inputs(
    *,
    poison: float = 1e10,
    broadcast: bool = True,
    empty_rows: bool = True,
    **kwargs: Any,
) -> st.SearchStrategy[AttentionInputs]:
    """Inputs with a drawn mask; keys hidden from every query get large finite values.

    Draws ``attention_inputs(**kwargs)`` and ``masks(...)``; for each (b, h), a key s that no
    query sees (mask AND causal) gets k_s = +p and v_s = -p with p = min(poison, finfo.max/4) in
    the dtype (1e10 by default; 16376 in float16), so a masked position that leaks into the output
    shows (fault class 8). The radius bound holds on every visible pair (rescaling happens before
    the poisoning). ``case`` is ``"masked"``.
    """
    if isinstance(poison, bool) or not isinstance(poison, (int, float)) or not poison > 0:
        raise ValueError(f"poison: expected a positive finite float, got {poison!r}")
    base = attention_inputs(**kwargs)

    @st.composite
    def draw_masked(draw):
        x = draw(base)
        mask = draw(masks(x.shape, broadcast=broadcast, empty_rows=empty_rows, device=x.device))
        vis = replace(x, attn_mask=mask).visible()
        dead = ~vis.any(axis=2)  # (B, H, S)
        p = min(float(poison), torch.finfo(x.dtype).max / 4)
        p = float(torch.tensor(p, dtype=torch.float64).to(x.dtype))
        k, v = x.k.clone(), x.v.clone()
        idx = torch.from_numpy(np.ascontiguousarray(dead)).to(x.device)
        k[idx] = p
        v[idx] = -p
        return replace(x, k=k, v=v, attn_mask=mask, case="masked")

    return draw_masked()
