"""Shift properties: adding one vector to every key (D6).

- ``softmax-shift-invariance``: adding one vector u to every key shifts each row's scores by
  c q_t.u and leaves the softmax output unchanged within the sum of the two rounding bounds.
- ``taylor-not-shift-invariant``: for kappa_N, N >= 1, a key shift chosen with
  ``derivations.shift.taylor_shift_gap`` changes the output by more than the rounding bounds.

Keys and shifts lie on a dyadic grid, so k + u is exact in the run's dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.claims import dtype_reason
from verify.properties.support.common import MAX_DIM, MIN_MAGNITUDE, exact_and_bound
from verify.properties.support.inputs import ctx_tensor, identity_values, inputs_with_radius
from verify.properties.support.observe import (
    certified_change,
    mp_diff,
    np64,
    ratios,
    worst_index,
)
from verify.properties.support.paths import call_mode, sum_mode
from verify.spec.results import NoStatement, NotApplicable, Observation


def _grid_bits(dtype_name: str) -> int:
    """Grid 2^-g for keys and shifts: values < 16 on it need p - 1 bits, so k + u is exact."""
    from derivations.rounding import precision_bits

    return precision_bits(dtype_name) - 5


@dataclass
class ShiftExample:
    """Attention inputs with keys on a dyadic grid and candidate key shifts on the same grid."""

    inputs: Any
    shifts: list[np.ndarray] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"ShiftExample(shifts={[s.tolist() for s in self.shifts]!r})\n{self.inputs!r}"

    def snippet(self) -> str:
        extra = "".join(f"# shift u = {s.tolist()!r} (added to every key)\n" for s in self.shifts)
        return self.inputs.snippet() + extra


def _on_grid(arr: np.ndarray, g: int, top: float) -> np.ndarray:
    out = np.clip(np.round(arr * 2.0**g) / 2.0**g, -top, top)
    return np.where(np.abs(out) < MIN_MAGNITUDE, 0.0, out)


def _shift_examples(variant, ctx, *, n_shifts: int, max_len: int, max_dim: int):
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    g = _grid_bits(ctx.dtype)

    inputs = inputs_with_radius(variant, ctx, None, max_len=max_len, max_dim=max_dim)
    el = st.floats(-8.0, 8.0, allow_subnormal=False)

    @st.composite
    def draw(draw_):
        x = draw_(inputs)
        B, H, d = x.q.shape[0], x.q.shape[1], x.q.shape[-1]
        kd = _on_grid(x.k.double().cpu().numpy(), g, 4.0)
        shifts = [
            _on_grid(draw_(hnp.arrays(np.float64, (B, H, 1, d), elements=el)), g, 8.0)
            for _ in range(n_shifts)
        ]
        return ShiftExample(replace(x, k=ctx_tensor(kd, ctx)), shifts)

    return draw()


def _shifted(x, u: np.ndarray, ctx):
    """Inputs with k + u (exact on the grid; checked)."""
    import torch

    kd = x.k.double().cpu().numpy()
    k1 = ctx_tensor(kd + u, ctx)
    if not np.array_equal(k1.double().cpu().numpy(), kd + u):
        raise AssertionError("k + u is not exact on the grid (catalogue bug)")
    assert isinstance(k1, torch.Tensor)
    return replace(x, k=k1)


def _softmax_applies(variant, ctx) -> str | None:
    if variant.kernel_family != "softmax":
        return "shift invariance is a property of exp (softmax) only (D6)"
    if sum_mode(variant) is None:
        return "unnormalized softmax is not shift-invariant (N_t scales by e^a)"
    return dtype_reason(variant, ctx)


def _softmax_shift_check(variant, ex: ShiftExample, ctx) -> list[Observation]:
    x0 = ex.inputs
    x1 = _shifted(x0, ex.shifts[0], ctx)
    ref0, eb0 = exact_and_bound(variant, x0, ctx, denominator="sum")
    ref1, eb1 = exact_and_bound(variant, x1, ctx, denominator="sum")
    o0 = np64(call_mode(variant, x0, "sum"))
    o1 = np64(call_mode(variant, x1, "sum"))
    diff = np.abs(o1 - o0)
    bound = eb0.bound + eb1.bound  # both approximate the same exact output (D6)
    idx = worst_index(ratios(diff, bound))
    # the exact outputs agree to the oracle's precision (the theorem, checked on this input)
    exact_gap = max(mp_diff(ref0.exact, ref1.exact).ravel(), default=0.0)
    qd = x0.q.double().cpu().numpy()
    shift_scores = float(
        np.max(np.abs(variant.score_scale(qd.shape[-1]) * (qd @ np.swapaxes(ex.shifts[0], -1, -2))))
    )
    return [
        Observation(
            float(diff[idx]),
            float(bound[idx]),
            "derived",
            where=str(idx),
            detail=f"|o(k + u) - o(k)| vs the sum of both rounding bounds; row score shifts "
            f"c q_t.u up to {shift_scores:.3g}; exact outputs differ by {exact_gap:.1e}",
        )
    ]


def _softmax_examples(variant, ctx):
    return _shift_examples(variant, ctx, n_shifts=1, max_len=8, max_dim=MAX_DIM)


SOFTMAX_SHIFT_INVARIANCE = declare(
    "softmax-shift-invariance", _softmax_applies, _softmax_examples, _softmax_shift_check
)


def _taylor_shift_applies(variant, ctx) -> str | None:
    n = variant.order
    if n is None or not variant.exp_type:
        return "needs a claimed Taylor kernel (taylor:N or linear:taylor:N)"
    if n == 0:
        return "kappa_0 = 1: uniform weights, trivially shift-invariant"
    if sum_mode(variant) is None:
        return "unnormalized variant: the D6 statement is about normalized weights"
    return dtype_reason(variant, ctx)


def _dots_in_order(qd: np.ndarray, kd: np.ndarray) -> np.ndarray:
    """q_t . k_s (B, H, T, S), the d products added in index order by elementwise IEEE
    operations: the same bits on every machine (a matmul may associate the sum by the vector
    width of the CPU, and the shift chosen from these scores decides the example)."""
    acc = qd[..., :, None, 0] * kd[..., None, :, 0]
    for i in range(1, qd.shape[-1]):
        acc = acc + qd[..., :, None, i] * kd[..., None, :, i]
    return acc


def _best_shift(variant, x, shifts) -> tuple[np.ndarray, float]:
    """The candidate shift with the largest exact kappa_N weight gap (``taylor_shift_gap`` on
    the float64 scores of each row, summed in index order; a row whose denominator vanishes is
    skipped; the first of equal gaps)."""
    from derivations.shift import taylor_shift_gap

    qd = x.q.double().cpu().numpy()
    kd = x.k.double().cpu().numpy()
    c = variant.score_scale(qd.shape[-1])
    scores = c * _dots_in_order(qd, kd)  # (B, H, T, S)
    T = scores.shape[2]
    best, best_gap = shifts[0], -1.0
    for u in shifts:
        a = c * _dots_in_order(qd, u)[..., 0]  # (B, H, T) row shifts
        gap = 0.0
        for b, h, t in np.ndindex(scores.shape[:3]):
            n_vis = t + 1 if x.causal else scores.shape[3]
            try:
                g = taylor_shift_gap(variant.order, scores[b, h, t, :n_vis].tolist(), a[b, h, t])
            except ValueError:
                continue
            gap = max(gap, float(g))
        if gap > best_gap:
            best, best_gap = u, gap
    del T
    return best, best_gap


def _taylor_shift_check(variant, ex: ShiftExample, ctx) -> Observation:

    x0 = identity_values(ex.inputs)
    u, predicted = _best_shift(variant, x0, ex.shifts)
    x1 = _shifted(x0, u, ctx)
    ref0, eb0 = exact_and_bound(variant, x0, ctx, denominator="sum")
    ref1, eb1 = exact_and_bound(variant, x1, ctx, denominator="sum")
    bound = eb0.bound + eb1.bound
    exact = mp_diff(ref1.exact, ref0.exact)  # mpmath: the same on every machine
    if not (exact > 0).any():
        raise NotApplicable("the shift changes no weight exactly (u = 0, q.u = 0 or S = 1)")
    # the largest exact change among the weights with a statement; certified_change is sound
    # for any exact change (a correct computation has measured >= exact - bound), and certifies
    # a change when exact > 2 bound. Neither choice rests on the bound's last bits, so the
    # example is not rejected by them (a rejected draw changes every later draw)
    finite = np.isfinite(bound)
    if not finite.any():
        raise NoStatement("no weight has a finite rounding bound (a denominator may vanish)")
    idx = worst_index(np.where(finite, exact, -1.0))
    o0 = np64(call_mode(variant, x0, "sum", allow_nonfinite=not finite.all()))
    o1 = np64(call_mode(variant, x1, "sum", allow_nonfinite=not finite.all()))
    measured = abs(float(o1[idx]) - float(o0[idx]))
    obs = certified_change(measured, float(exact[idx]), float(bound[idx]), f"weight {idx}")
    obs.where = str(idx)
    certifies = "certifies a change" if exact[idx] > 2 * bound[idx] else "exact <= 2 bound"
    obs.detail += (
        f"; shift u = {u.ravel().tolist()}, taylor_shift_gap (float scores) {predicted:.3g}; "
        f"{certifies}"
    )
    return obs


def _taylor_shift_examples(variant, ctx):
    return _shift_examples(variant, ctx, n_shifts=3, max_len=6, max_dim=3)


TAYLOR_NOT_SHIFT_INVARIANT = declare(
    "taylor-not-shift-invariant", _taylor_shift_applies, _taylor_shift_examples, _taylor_shift_check
)


PROPERTIES = (
    SOFTMAX_SHIFT_INVARIANCE,
    TAYLOR_NOT_SHIFT_INVARIANT,
)
