"""FlexAttention's ``score_mod`` and ``mask_mod`` as claims, and a ``BlockMask`` against its
``mask_mod``.

The signatures are torch's (``torch.nn.attention.flex_attention``): ``score_mod(score, b, h,
q_idx, kv_idx) -> score`` on the scaled score c q.k, and ``mask_mod(b, h, q_idx, kv_idx) ->
bool`` (True = visible). Both are evaluated here on whole (B, H, T, S) grids, vmapped over the
four index axes in torch's order (b outermost, kv_idx innermost), on float64 scores: the claim's
reference applies the user's own functions to the exact scores, never eager ``flex_attention``
(which is a computation under test, not an oracle).

Error of a declared score_mod (D16's approach: the transformed score's error is the score's
error propagated through the map, plus the map's own rounding): for a computed score within
e_x of x, ``score_mod`` evaluated at the interval's endpoints gives

    |f(x_hat) - f(x)| <= max(|f(x + e_x) - f(x)|, |f(x - e_x) - f(x)|)

which is rigorous where f is monotone on [x - e_x, x + e_x] (the assumption, stated; checked
at the three points on every drawn score: an example where f(x - e_x), f(x), f(x + e_x) are not
ordered is not applicable), plus K roundings of the map's own arithmetic, each at most u times
the larger of |x| + e_x and |f| (``roundings`` K, the claim ``score_mod_roundings``, default
:data:`DEFAULT_ROUNDINGS`; a library function of n ulps counts 2 n: torch's tanh is 2.5 ulps,
``derivations.transform_rounding.TANH_ULPS``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from derivations.rounding import gamma, unit_roundoff
from verify.spec.results import NotApplicable

#: roundings of a declared score_mod's own arithmetic when none is declared (an addition and a
#: product: a bias, a scaled index)
DEFAULT_ROUNDINGS = 2
#: torch's vmap order of a score_mod's (score, b, h, q_idx, kv_idx) and a mask_mod's indices
_SCORE_DIMS = ((0, None, None, None, 0), (0, None, None, 0, None), (0, None, 0, None, None),
               (0, 0, None, None, None))  # fmt: skip
_MASK_DIMS = ((None, None, None, 0), (None, None, 0, None), (None, 0, None, None),
              (0, None, None, None))  # fmt: skip


def load_mod(spec: str, field: str) -> Callable[..., Any]:
    """Import the ``pkg.module:fn`` of a ``score_mod_spec``/``mask_mod_spec`` claim.

    Raises:
        ValueError: the spec cannot be imported (the message names ``field``).
        TypeError: it is not callable.
    """
    from verify.spec.imports import TargetError, load_spec

    try:
        fn = load_spec(spec)
    except TargetError as exc:
        raise ValueError(str(exc).replace("target:", f"{field}:", 1)) from None
    if not callable(fn):
        raise TypeError(f"{field}: {spec!r} is not callable")
    return fn


def check_claims(v) -> None:
    """Validate a variant's flex claims (``score_mod``, ``mask_mod``, ``block_mask`` and
    ``score_mod_roundings``).

    Raises:
        TypeError, ValueError: a non-callable mod, a bad roundings count, a kernel other than
            softmax, or a score_mod with another score transform (softcap, ALiBi, a score bias,
            QK-norm: write them in the score_mod, whose reference applies them in order).
    """
    for name in ("score_mod", "mask_mod", "block_mask"):
        fn = getattr(v, name)
        if fn is not None and not callable(fn):
            raise TypeError(f"{name}: expected a callable, got {type(fn).__name__}")
    k = v.score_mod_roundings
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"score_mod_roundings: expected an int >= 0, got {k!r}")
    if v.block_mask is not None and v.mask_mod is None:
        raise ValueError("block_mask: checked against its mask_mod; claim mask_mod too")
    if not has_flex(v):
        return
    if v.kernel_family not in ("softmax", "unknown"):
        raise ValueError(f"score_mod, mask_mod: claimed for the softmax kernel, got {v.kernel!r}")
    others = [n for n in ("softcap", "alibi_slopes", "decay") if getattr(v, n) is not None]
    others += [n for n in ("score_bias", "qk_norm") if getattr(v, n)]
    if v.score_mod is not None and others:
        raise ValueError(
            f"score_mod: claimed with {', '.join(others)}; write them into the score_mod (its "
            "reference applies the score_mod alone)"
        )


def has_flex(v) -> bool:
    """The variant claims a score_mod or a mask_mod."""
    return getattr(v, "score_mod", None) is not None or getattr(v, "mask_mod", None) is not None


def describe(v) -> list[str]:
    """One phrase per flex claim (summaries, cards)."""
    out = []
    if getattr(v, "score_mod", None) is not None:
        name = v.score_mod_spec or getattr(v.score_mod, "__name__", "score_mod")
        out.append(f"score_mod {name} ({v.score_mod_roundings} roundings declared)")
    if getattr(v, "mask_mod", None) is not None:
        out.append(f"mask_mod {v.mask_mod_spec or getattr(v.mask_mod, '__name__', 'mask_mod')}")
    return out


def _indices(B: int, H: int, T: int, S: int):
    import torch

    return tuple(torch.arange(n, dtype=torch.int64) for n in (B, H, T, S))


def mask_grid(mask_mod, B: int, H: int, T: int, S: int) -> np.ndarray:
    """mask_mod on every (b, h, q_idx, kv_idx): (B, H, T, S) bool.

    Raises:
        NotApplicable: mask_mod raised or returned something not broadcastable to the grid
            (the reason).
    """
    import torch

    fn = mask_mod
    for dims in _MASK_DIMS:
        fn = torch.vmap(fn, in_dims=dims, out_dims=0)
    try:
        out = fn(*_indices(B, H, T, S))
        return np.broadcast_to(np.asarray(out.to(torch.bool).cpu()), (B, H, T, S)).copy()
    except Exception as exc:
        raise NotApplicable(f"mask_mod raised {type(exc).__name__}: {exc}") from exc


def score_grid(score_mod, scores: np.ndarray) -> np.ndarray:
    """score_mod on float64 scores (B, H, T, S) with their indices: float64 (B, H, T, S).

    Raises:
        NotApplicable: score_mod raised, or returned NaN or +inf (no finite reference).
    """
    import torch

    fn = score_mod
    for dims in _SCORE_DIMS:
        fn = torch.vmap(fn, in_dims=dims, out_dims=0)
    B, H, T, S = scores.shape
    try:
        out = fn(torch.from_numpy(np.ascontiguousarray(scores)), *_indices(B, H, T, S))
        y = np.broadcast_to(np.asarray(out.to(torch.float64).cpu()), scores.shape).copy()
    except Exception as exc:
        raise NotApplicable(f"score_mod raised {type(exc).__name__}: {exc}") from exc
    if np.isnan(y).any() or np.isposinf(y).any():
        raise NotApplicable("score_mod returned NaN or +inf on float64 scores")
    return y


def propagate(score_mod, x: np.ndarray, e_x: np.ndarray, u: float, roundings: int):
    """(f(x), e_f): the transformed scores and the bound on the error of the computed ones,
    for computed scores within ``e_x`` of ``x`` (module docstring; -inf outputs, a score_mod
    masking a key, carry no error where all three points give -inf).

    Raises:
        NotApplicable: f is not ordered at x - e_x, x, x + e_x on some key (the monotonicity the
            bound assumes), or is -inf at only some of the three points.
    """
    lo, mid, hi = (score_grid(score_mod, a) for a in (x - e_x, x, x + e_x))
    masked = np.isneginf(mid)
    if (np.isneginf(lo) != masked).any() or (np.isneginf(hi) != masked).any():
        raise NotApplicable("score_mod is -inf on part of a score's error interval only")
    up = (lo <= mid) & (mid <= hi)
    down = (lo >= mid) & (mid >= hi)
    if not (up | down | masked).all():
        raise NotApplicable(
            "score_mod is not monotone on a score's error interval [x - e_x, x + e_x]: the "
            "endpoint bound assumes it"
        )
    with np.errstate(invalid="ignore"):
        spread = np.where(masked, 0.0, np.maximum(np.abs(hi - mid), np.abs(lo - mid)))
        ends = np.maximum(np.abs(lo), np.abs(hi))
        size = np.where(masked, 0.0, np.maximum(np.abs(x) + e_x, ends))
    # the three float64 evaluations' own rounding: a few u64 of the values compared
    u64 = unit_roundoff("float64")
    e = spread * (1 + 4 * u64) + (gamma(roundings, u) if roundings else 0.0) * size
    e = e + gamma(max(roundings, 1) + 2, u64) * size
    return np.where(masked, -np.inf, mid), e


def score_map(score_mod, roundings: int) -> Callable[..., Any]:
    """The error model's hook ``(x, e_x, u) -> (f(x), e_f)`` of a declared score_mod
    (``verify.exact.error_terms.transformed_scores``' ``score_map``): :func:`propagate` at the
    kernel's unit roundoff u, plus the error of the reference's own float64 scores (the same
    propagation at u64 from e_x u64 / u + u64 |x|: the float64 score's bound has the form of
    e_x at a smaller u), so the bound holds against the reference's float64 transformed scores.
    Keys the score_mod masks (-inf) get score 0 and error 0 here: the caller passes them as
    invisible."""

    def hook(x, e_x, u):
        y, e = propagate(score_mod, x, e_x, u, roundings)
        u64 = unit_roundoff("float64")
        if u > u64:
            _, e_ref = propagate(score_mod, x, e_x * (u64 / u) + u64 * np.abs(x), u64, roundings)
            e = e + np.where(np.isfinite(e_ref), e_ref, 0.0)
        masked = np.isneginf(y)
        return np.where(masked, 0.0, y), np.where(masked, 0.0, e)

    return hook


# --------------------------------------------------------------------------- BlockMask


def block_mask_grid(block_mask, mask_mod, B: int, H: int, T: int, S: int) -> np.ndarray:
    """The token visibility a block-sparse kernel computes from ``block_mask``: keys of a
    listed partial block where ``mask_mod`` holds, every key of a listed full block, nothing
    elsewhere. (B, H, T, S) bool; the block mask's batch and head axes broadcast.

    Raises:
        ValueError: ``block_mask`` has no kv block lists (``kv_num_blocks``, ``kv_indices``,
            ``BLOCK_SIZE``: torch's ``BlockMask``).
    """
    for name in ("kv_num_blocks", "kv_indices", "BLOCK_SIZE"):
        if not hasattr(block_mask, name):
            raise ValueError(f"block_mask: expected a torch BlockMask (no {name!r} attribute)")
    bq, bk = (int(x) for x in block_mask.BLOCK_SIZE)
    want = mask_grid(mask_mod, B, H, T, S)

    def listed(num, idx):
        n = np.asarray(num.cpu())
        ind = np.asarray(idx.cpu())
        out = np.zeros((*ind.shape[:2], ind.shape[2], max(ind.shape[3], -(-S // bk))), bool)
        for b, h, r in np.ndindex(*n.shape):
            out[b, h, r, ind[b, h, r, : n[b, h, r]]] = True
        return out

    part = listed(block_mask.kv_num_blocks, block_mask.kv_indices)
    full = np.zeros_like(part)
    if getattr(block_mask, "full_kv_num_blocks", None) is not None:
        full = listed(block_mask.full_kv_num_blocks, block_mask.full_kv_indices)
    rows, cols = np.arange(T) // bq, np.arange(S) // bk

    def tokens(blocks):
        pad = max(rows.max() + 1, blocks.shape[2])
        blocks = np.pad(blocks, ((0, 0), (0, 0), (0, pad - blocks.shape[2]), (0, 0)))
        return np.broadcast_to(blocks[:, :, rows][:, :, :, cols], (B, H, T, S))

    return (tokens(part) & want) | tokens(full)


def block_mask_problems(block_mask, mask_mod, B: int, H: int, T: int, S: int) -> list[str]:
    """What is wrong with ``block_mask`` as a block-sparse form of ``mask_mod`` on (B, H, T, S):
    one sentence per kind (keys mask_mod shows that no listed block covers, full blocks holding
    keys mask_mod hides, a ``mask_mod`` stored in the BlockMask other than the claim's), each
    with its first (b, h, q_idx, kv_idx). Empty when the token visibility a block-sparse kernel
    computes from it (:func:`block_mask_grid`) equals mask_mod everywhere."""
    want = mask_grid(mask_mod, B, H, T, S)
    got = block_mask_grid(block_mask, mask_mod, B, H, T, S)
    out = []
    bs = tuple(int(x) for x in block_mask.BLOCK_SIZE)
    kinds = (
        (want & ~got, "visible under mask_mod but in no listed block (dropped)"),
        (got & ~want, "hidden by mask_mod but inside a block listed full"),
    )
    for sel, what in kinds:
        if sel.any():
            first = tuple(int(i) for i in np.argwhere(sel)[0])
            out.append(f"{int(sel.sum())} keys {what}, first (b, h, q, kv) = {first}, "
                       f"BLOCK_SIZE {bs}")  # fmt: skip
    stored = getattr(block_mask, "mask_mod", None)
    if stored is not None and stored is not mask_mod:
        seen = mask_grid(stored, B, H, T, S)
        if (seen != want).any():
            first = tuple(int(i) for i in np.argwhere(seen != want)[0])
            out.append(f"the BlockMask's own mask_mod differs from the claimed one at {first}")
    return out
