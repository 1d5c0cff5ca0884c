"""Kernel properties: the kernel identity, positivity and shift invariance (THEORY.md D1, D4, D6).

- ``kernel-identity`` (D1, FAULTS 10): the variant's feature map reproduces the claimed Taylor
  kernel, phi(q).phi(k) = kappa_N(c q.k), within the feature-form rounding bound (D10).
- ``positive-weights`` (D4): a positive kernel (exp, even kappa_N, elu+1, FAVOR+) gives
  normalized weights >= 0 whose rows sum to 1; the weights are read from the variant itself
  with v = identity (S keys, d_v = S: output row t = weights of query t).
- ``odd-order-counterexample`` (D4): an odd kappa_N gives a certified negative normalized weight
  on some input of the example's search set (THEORY's scores (-3, 0.5, 1) among them).
- ``softmax-shift-invariance`` (D6): adding one vector u to every key shifts each row's scores by
  c q_t.u and leaves the softmax output unchanged within the sum of the two rounding bounds.
- ``taylor-not-shift-invariant`` (D6): for kappa_N, N >= 1, a key shift chosen with
  ``derivations.shift.taylor_shift_gap`` changes the output by more than the rounding bounds.

Helpers shared with ``verify.properties.theory``: :func:`make_inputs`, :func:`identity_values`,
:func:`call_mode`, :func:`sum_mode`, :func:`exact_scale`, :func:`certified_change`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np

from verify.properties.support.base import Property
from verify.properties.support.calls import call
from verify.properties.support.common import (
    MAX_DIM,
    MAX_VALUE_DIM,
    MIN_MAGNITUDE,
    MIN_RADIUS,
    Example,
    causal_choices,
    exact_and_bound,
    kernel_name,
)
from verify.spec.results import NotApplicable, Observation, VariantError

#: FAULTS.md 10 triggers (d = 2, q = k = (1, 1); d = 4, q = (1, 1, 1, 1), k = -q): an element-wise
#: square map gives 4 instead of 5 and -1 instead of 5 (at scale 1)
KERNEL_IDENTITY_TRIGGERS = (
    ((1.0, 1.0), (1.0, 1.0)),
    ((1.0, 1.0, 1.0, 1.0), (-1.0, -1.0, -1.0, -1.0)),
)
#: THEORY.md D4's example row: kappa_1 on scores (-3, 0.5, 1) gives weights (-4/3, 1, 4/3)
THEORY_ODD_ROW = (-3.0, 0.5, 1.0)
#: largest score radius drawn by ``positive-weights`` (positivity holds at every radius; the
#: rounding bound stays informative well beyond D4's truncation range)
POSITIVITY_RADIUS = 6.0
#: precision digits of the mpmath evaluations in this module (THEORY.md D10: >= 50)
DPS = 50


# ----------------------------------------------------------------------------- shared helpers
def make_inputs(q, k, v, *, causal: bool = False, attn_mask=None, case: str = "constructed"):
    """An ``AttentionInputs`` around given canonical tensors (shape read from them)."""
    from verify.strategies import AttentionInputs, Shape

    B, H, T, d = q.shape
    return AttentionInputs(
        q=q,
        k=k,
        v=v,
        causal=causal,
        scale=None,
        radius=None,
        shape=Shape(B=B, H=H, T=T, S=k.shape[-2], d=d, d_v=v.shape[-1]),
        attn_mask=attn_mask,
        case=case,
    )


def identity_values(x):
    """The same inputs with v = identity (S keys, d_v = S): the output row t is the weights."""
    import torch

    B, H, S = x.q.shape[0], x.q.shape[1], x.k.shape[-2]
    eye = torch.eye(S, dtype=x.q.dtype, device=x.q.device).expand(B, H, S, S).contiguous()
    return make_inputs(
        x.q, x.k, eye, causal=x.causal, attn_mask=x.attn_mask, case=getattr(x, "case", "x")
    )


def sum_mode(variant) -> str | None:
    """``"sum"`` when the variant can divide by the kernel sum (its normalized output)."""
    if variant.denominators:
        return "sum" if "sum" in variant.denominators else None
    return "sum" if variant.normalized else None


def call_mode(variant, x, mode: str | None, *, allow_nonfinite: bool = False):
    """The variant's output on ``x`` in denominator ``mode`` (passed only when it declares
    ``denominators``), through ``_calls.call``."""
    kwargs: dict[str, Any] = {}
    if variant.denominators and mode is not None:
        kwargs["denominator"] = mode
    if x.attn_mask is not None:
        kwargs["attn_mask"] = x.attn_mask
    return call(variant, x.q, x.k, x.v, causal=x.causal, allow_nonfinite=allow_nonfinite, **kwargs)


def exact_scale(variant, d: int):
    """The claimed score scale as an mpf: 1/sqrt(d) exactly for the default of exp-type
    kernels (the rounding of fl(1/sqrt(d)) is part of the D10 count), else the given float."""
    import mpmath

    if variant.scale == "default":
        return 1 / mpmath.sqrt(d) if variant.exp_type else mpmath.mpf(1)
    return mpmath.mpf(float(variant.scale))


def certified_change(measured: float, exact: float, rounding: float, what: str) -> Observation:
    """Evidence that two computations differ: passes iff ``measured >= exact - rounding``.

    ``exact`` is the exact difference (> 2 ``rounding`` by the caller's precondition) and
    ``rounding`` the sum of the two computations' bounds, so a pass certifies
    ``measured > rounding``: the difference is not a rounding artefact. A computation that does
    not change (an invariant impostor) has measured ~ 0 and fails with observed ~ exact.
    """
    return Observation(
        observed=max(exact - measured, 0.0),
        bound=rounding,
        kind="derived",
        detail=f"{what}: measured change {measured:.3e}, exact {exact:.3e}, rounding bound "
        f"{rounding:.3e} (pass iff measured >= exact - bound)",
    )


def _applies_common(variant, ctx) -> str | None:
    if ctx.dtype not in variant.dtypes:
        return f"the variant does not claim {ctx.dtype}"
    return None


def _elements(dtype, bound: float = 2.0):
    """Floats in [-bound, bound] at the dtype's width: 0 or magnitude >= MIN_MAGNITUDE."""
    from hypothesis import strategies as st

    width = {"float64": 64, "float16": 16}.get(str(dtype).removeprefix("torch."), 32)
    mag = st.floats(MIN_MAGNITUDE, bound, allow_subnormal=False, width=width)
    return st.one_of(st.just(0.0), mag, mag.map(lambda t: -t))


def _tensor(values, ctx, shape=None):
    """float64 values -> a ctx-dtype tensor (rounded once to the dtype)."""
    import torch

    arr = np.asarray(values, dtype=np.float64)
    if shape is not None:
        arr = arr.reshape(shape)
    return torch.from_numpy(np.ascontiguousarray(arr)).to(dtype=ctx.torch_dtype, device=ctx.device)


def _mp_abs_diff(a, b) -> float:
    import mpmath

    with mpmath.workdps(DPS):
        return float(abs(mpmath.mpf(a) - mpmath.mpf(b)))


# ----------------------------------------------------------------------------- kernel identity
@dataclass
class PairsExample:
    """P (query, key) pairs of dimension d, float64 values of the run's dtype."""

    q: list[list[float]]
    k: list[list[float]]
    trigger: str = ""

    def __repr__(self) -> str:
        tag = f" ({self.trigger})" if self.trigger else ""
        return f"PairsExample{tag}(q={self.q!r}, k={self.k!r})"

    def snippet(self) -> str:
        return (
            "import torch\n"
            f"q = torch.tensor({self.q!r}, dtype=torch.float64)\n"
            f"k = torch.tensor({self.k!r}, dtype=torch.float64)\n"
            "# compare (phi(q) * phi(k)).sum(-1) with kappa_N(c q.k) row by row\n"
        )


def _pairs_strategy(ctx):
    from hypothesis import strategies as st

    triggers = st.sampled_from(
        [PairsExample([list(q)], [list(k)], "FAULTS 10") for q, k in KERNEL_IDENTITY_TRIGGERS]
    )

    @st.composite
    def random(draw):
        d = draw(st.integers(1, MAX_DIM))
        p = draw(st.integers(1, 4))
        el = _elements(ctx.torch_dtype)
        rows = st.lists(el, min_size=d, max_size=d)
        q = draw(st.lists(rows, min_size=p, max_size=p))
        k = draw(st.lists(rows, min_size=p, max_size=p))
        qd = _tensor(q, ctx).double().tolist()
        kd = _tensor(k, ctx).double().tolist()
        return PairsExample(qd, kd)

    return st.one_of(triggers, random())


def _feature_map(variant, x):
    """``variant.feature_map(x)`` validated: a (..., m) tensor of x's dtype, finite."""
    import torch

    try:
        out = variant.feature_map(x)
    except Exception as exc:
        raise VariantError(f"feature_map raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(out, torch.Tensor):
        raise VariantError(f"feature_map returned {type(out).__name__}, expected a tensor")
    if out.dim() != x.dim() or tuple(out.shape[:-1]) != tuple(x.shape[:-1]):
        raise VariantError(
            f"feature_map: output shape {tuple(out.shape)}, expected {tuple(x.shape[:-1])} + (m,)"
        )
    if out.dtype != x.dtype:
        raise VariantError(f"feature_map: output dtype {out.dtype}, expected {x.dtype}")
    if not torch.isfinite(out).all():
        raise VariantError("feature_map: output has NaN/inf")
    return out


def _kernel_identity_applies(variant, ctx) -> str | None:
    if variant.order is None:
        return "needs a claimed Taylor kernel (taylor:N or linear:taylor:N)"
    if variant.feature_map is None:
        return "the variant exposes no feature map"
    return _applies_common(variant, ctx)


def _kernel_identity_check(variant, ex: PairsExample, ctx) -> Observation:
    import mpmath
    import torch

    from derivations import rounding as d10
    from derivations.truncation import kappa
    from verify.exact import errors

    N = variant.order
    q = _tensor(ex.q, ctx)
    k = _tensor(ex.k, ctx)
    d = q.shape[-1]
    why = errors.outside_model(
        f"taylor:{N}",
        q[None, None],
        k[None, None],
        torch.ones(1, 1, k.shape[0], 1, dtype=torch.float64),
        dtype=ctx.dtype,
        scale=1.0 if variant.feature_scale == "none" else variant.score_scale(d),
    )
    if why:
        raise NotApplicable(why)
    # bound stated before the feature map runs: features carry gamma_{4N+3} (D10), the dot
    # product of m of them gamma_{m+2}, relative to the majorant kappa_N(c sum_i |q_i||k_i|)
    acc = errors.ACCUMULATION[ctx.dtype]
    u = d10.unit_roundoff(acc)
    e_phi = d10.taylor_feature_relative_error(N, u)
    if acc != ctx.dtype:  # features rounded once more to the input dtype (two-level model)
        e_phi = (1 + e_phi) * (1 + d10.unit_roundoff(ctx.dtype)) - 1
    phi_q = _feature_map(variant, q)
    phi_k = _feature_map(variant, k)
    if phi_q.shape[-1] != phi_k.shape[-1]:
        raise VariantError(
            f"feature_map: {phi_q.shape[-1]} query features vs {phi_k.shape[-1]} key features"
        )
    m = phi_q.shape[-1]
    rel = d10.feature_form_relative_bound(e_phi, m, 1, u, False)
    acc_t = getattr(torch, acc)
    dots = (phi_q.to(acc_t) * phi_k.to(acc_t)).sum(-1).double().tolist()
    worst = None
    with mpmath.workdps(DPS):
        c = mpmath.mpf(1) if variant.feature_scale == "none" else exact_scale(variant, d)
        for i, (qi, ki) in enumerate(zip(ex.q, ex.k)):
            qm = [mpmath.mpf(a) for a in _tensor(qi, ctx).double().tolist()]
            km = [mpmath.mpf(a) for a in _tensor(ki, ctx).double().tolist()]
            x = c * mpmath.fsum(a * b for a, b in zip(qm, km))
            xa = c * mpmath.fsum(abs(a) * abs(b) for a, b in zip(qm, km))
            exact = kappa(N, x)
            majorant = kappa(N, xa)
            err = float(abs(mpmath.mpf(dots[i]) - exact))
            bnd = float(rel * majorant)
            obs = Observation(
                err,
                bnd,
                "derived",
                where=f"pair {i}",
                detail=f"phi(q).phi(k) = {dots[i]!r}, kappa_{N}(c q.k) = {float(exact)!r} "
                f"(c = {float(c):.6g}, m = {m} features, {ctx.dtype}); bound "
                f"feature_form_relative_bound * kappa_{N}(c sum|q||k|) = {bnd:.3e}",
            )
            if worst is None or obs.ratio > worst.ratio:
                worst = obs
    return worst


KERNEL_IDENTITY = Property(
    id="kernel-identity",
    statement="the feature map reproduces the claimed kernel: phi(q).phi(k) = kappa_N(c q.k) "
    "within the feature-form rounding bound (FAULTS 10 triggers included)",
    derivation="D1",
    applies=_kernel_identity_applies,
    examples=lambda variant, ctx: _pairs_strategy(ctx),
    check=_kernel_identity_check,
    low_precision=True,
    faults=(10,),
)


# ----------------------------------------------------------------------------- positivity
def _positive_applies(variant, ctx) -> str | None:
    if variant.positive_kernel is None:
        return "kernel unknown: positivity is a claim about the kernel"
    if not variant.positive_kernel:
        return f"signed kernel ({variant.kernel}): positivity does not apply"
    if sum_mode(variant) is None:
        return "unnormalized variant: its weights are not a distribution"
    if variant.linear_map == "favor" and variant.projection is None:
        return "FAVOR+ without a declared projection: no exact weights to compare with"
    return _applies_common(variant, ctx)


def _radius_up_to(top: float):
    from hypothesis import strategies as st

    return st.floats(MIN_RADIUS, top, allow_subnormal=False)


def small_shapes(
    variant,
    *,
    causal: bool,
    max_len: int = 8,
    max_dim: int = MAX_DIM,
    max_value_dim: int = MAX_VALUE_DIM,
    min_len: int = 1,
    min_dim: int = 1,
):
    """Shapes with B = H = 1 (kernel statements are per row; batch and head independence are
    the structural group's), T == S when causal. Fewer choices make shrinking fast."""
    from hypothesis import strategies as st

    from verify.properties.support.common import lengths
    from verify.strategies import Shape

    def build(T, S, d, d_v):
        return Shape(B=1, H=1, T=T, S=T if causal else S, d=d, d_v=d_v)

    return st.builds(
        build,
        lengths(variant, min_len, max_len),
        lengths(variant, 1, max_len),
        st.integers(min_dim, max_dim),
        st.integers(1, max_value_dim),
    )


def inputs_with_radius(variant, ctx, radius, *, cases=("random",), **shape_kw):
    """Attention inputs like ``_common.inputs_strategy`` but with a given radius strategy.

    The per-causal-flag strategies are built once (building a composite strategy inside a
    draw makes every draw and shrink step pay hypothesis' reflection cost)."""
    from hypothesis import strategies as st

    from verify.strategies import attention_inputs

    return st.one_of(
        *[
            attention_inputs(
                small_shapes(variant, causal=is_causal, **shape_kw),
                dtype=ctx.torch_dtype,
                device=ctx.device,
                causal=is_causal,
                radius=radius,
                cases=cases,
                min_magnitude=MIN_MAGNITUDE,
            )
            for is_causal in causal_choices(variant)
        ]
    )


def _positive_examples(variant, ctx):
    radius = _radius_up_to(POSITIVITY_RADIUS) if variant.exp_type else None
    if variant.linear_map == "favor":
        radius = _radius_up_to(2.0)
    return inputs_with_radius(
        variant, ctx, radius, cases=("random", "equal_keys", "positive"), max_len=8
    ).map(lambda x: Example(x))


def _positive_check(variant, ex: Example, ctx) -> list[Observation]:
    from verify.exact.errors import compare

    x = identity_values(ex.inputs)
    ref, eb = exact_and_bound(variant, x, ctx, denominator="sum")
    out = call_mode(variant, x, "sum")
    agree = compare(out, eb, ref, what="weights (v = identity)")
    w = out.detach().cpu().double().numpy()
    bound = eb.bound
    # the exact weights are >= 0, so -w_hat <= |w_hat - w| <= bound
    neg = np.maximum(-w, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, neg / bound, np.where(neg == 0, 0.0, np.inf))
    idx = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    negativity = Observation(
        float(neg[idx]),
        float(bound[idx]),
        "derived",
        where=str(tuple(int(i) for i in idx)),
        detail=f"smallest weight {float(w.min()):.3e}; weights must be >= -bound",
    )
    # row sums: sum_s w_hat_ts = D_t/(D_t + eps) (1 without a declared eps) within
    # sum_s bound_ts + the float64 summations of both sides (fsum: u|sum| each)
    visible = ref.count > 0
    worst_row = None
    u64 = 2.0**-53
    for idx_row in zip(*np.nonzero(visible)):
        row = w[idx_row]
        total = math.fsum(row.tolist())
        expected = math.fsum(float(x) for x in ref.exact[idx_row])
        obs = Observation(
            abs(total - expected),
            float(bound[idx_row].sum()) + u64 * (abs(total) + abs(expected)),
            "derived",
            where=f"row {tuple(int(i) for i in idx_row)}",
            detail=f"row sum {total!r}, exact {expected!r} (D/(D + eps) with the declared eps "
            f"{variant.eps}), within the summed weight bounds",
        )
        if worst_row is None or obs.ratio > worst_row.ratio:
            worst_row = obs
    return [o for o in (agree, negativity, worst_row) if o is not None]


POSITIVE_WEIGHTS = Property(
    id="positive-weights",
    statement="a positive kernel (exp, even kappa_N, elu+1, FAVOR+) gives normalized weights "
    ">= 0 whose rows sum to 1, read from the variant with v = identity",
    derivation="D4",
    applies=_positive_applies,
    examples=_positive_examples,
    check=_positive_check,
    low_precision=True,
    faults=(6,),
)


# ----------------------------------------------------------------------------- odd orders
@functools.cache
def kappa_root(order: int) -> float:
    """The real root of kappa_N for odd N (negative, simple; D4), as a float (bisection on the
    exact rational kappa_N of ``derivations.truncation``; kappa_N is increasing for odd N)."""
    from derivations.truncation import kappa, real_root_count

    if real_root_count(order) != 1:
        raise ValueError(f"order: expected an odd order (one real root), got {order}")
    lo, hi = Fraction(-1), Fraction(0)
    while kappa(order, lo) >= 0:
        lo *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if kappa(order, mid) < 0:
            lo = mid
        else:
            hi = mid
    return float(hi)


def _odd_applies(variant, ctx) -> str | None:
    n = variant.order
    if n is None:
        return "needs a claimed Taylor kernel (taylor:N or linear:taylor:N)"
    if n % 2 == 0:
        return f"even order {n}: kappa_{n} > 0 everywhere (positive-weights applies instead)"
    if sum_mode(variant) is None:
        return "unnormalized variant: normalized weights are not available"
    return _applies_common(variant, ctx)


def _score_row_inputs(variant, rows, ctx):
    """d = 1 inputs realizing score rows: q_t = 1, k_s = x_s / c (c the claimed scale at d = 1);
    one (batch) entry per row, rows of equal length."""
    c = variant.score_scale(1)
    S = len(rows[0])
    q = _tensor(np.ones((len(rows), 1, 1, 1)), ctx)
    k = _tensor(np.asarray(rows, dtype=np.float64) / c, ctx, (len(rows), 1, S, 1))
    v = _tensor(np.ones((len(rows), 1, S, 1)), ctx)
    return identity_values(make_inputs(q, k, v, case="score rows"))


def _odd_rows(order: int) -> list[tuple[str, tuple[float, ...]]]:
    """THEORY's row (when its kappa_N denominator is positive and the first weight negative)
    and the derived row (-P, P, P) with P = ceil(|root|) + 1: kappa_N(-P) < 0 and
    kappa_N(P) > |kappa_N(-P)| (odd N: kappa_N(P) + kappa_N(-P) = 2 * even part > 0)."""
    from derivations.shift import kernel_weights

    rows = []
    try:
        w = kernel_weights(order, THEORY_ODD_ROW)
        if w[0] < 0:
            rows.append(("THEORY.md D4 row", THEORY_ODD_ROW))
    except ValueError:
        pass
    p = float(math.ceil(abs(kappa_root(order))) + 1)
    rows.append(("derived row (-P, P, P)", (-p, p, p)))
    return rows


def _odd_examples(variant, ctx):
    from hypothesis import strategies as st

    root = abs(kappa_root(variant.order))
    radius = st.floats(root, root + 4.0, allow_subnormal=False)
    return inputs_with_radius(variant, ctx, radius, cases=("random",), max_len=6).map(
        lambda x: Example(x, {"search": "fixed rows + drawn inputs"})
    )


def _negative_evidence(variant, x, ctx, label: str):
    """(compare observation, evidence string or None) for one candidate input."""
    import mpmath

    from verify.exact.errors import compare

    ref, eb = exact_and_bound(variant, x, ctx, denominator="sum")
    finite = np.isfinite(eb.bound)
    out = call_mode(variant, x, "sum", allow_nonfinite=not finite.all())
    try:
        agree = compare(out, eb, ref, what=f"{label}: weights")
    except NotApplicable:
        return None, None
    w = out.detach().cpu().double().numpy()
    # certified negative: the exact weight is < 0 and the computed one below -bound
    for idx in zip(*np.nonzero(finite & (w < -eb.bound))):
        if ref.exact[idx] < 0:
            with mpmath.workdps(DPS):
                scores = [float(s) for s in ref.scores[idx[:3]]]
            return agree, (
                f"{label}: weight {w[idx]:.6g} (exact {float(ref.exact[idx]):.6g}, bound "
                f"{eb.bound[idx]:.2e}) at {tuple(int(i) for i in idx)}, row scores "
                f"{[round(s, 6) for s in scores]}"
            )
    return agree, None


def _odd_check(variant, ex: Example, ctx) -> list[Observation]:
    candidates = [
        (label, _score_row_inputs(variant, [row], ctx)) for label, row in _odd_rows(variant.order)
    ]
    candidates.append(("drawn inputs", identity_values(ex.inputs)))
    found, agreements = [], []
    for label, x in candidates:
        try:
            agree, evidence = _negative_evidence(variant, x, ctx, label)
        except NotApplicable:
            continue
        if agree is not None:
            agreements.append(agree)
        if evidence:
            found.append(evidence)
    evidence_obs = Observation(
        0.0 if found else 1.0,
        0.0,
        "exact",
        where="search set",
        detail=(
            "certified negative weight(s): " + "; ".join(found)
            if found
            else f"no certified negative weight among {[c[0] for c in candidates]}"
        ),
    )
    bad = [a for a in agreements if a.ratio > 1.0]
    return [evidence_obs, *bad]


ODD_ORDER_COUNTEREXAMPLE = Property(
    id="odd-order-counterexample",
    statement="an odd truncation kappa_N gives a certified negative normalized weight "
    "(THEORY's scores (-3, 0.5, 1) and drawn inputs beyond kappa_N's root)",
    derivation="D4",
    applies=_odd_applies,
    examples=_odd_examples,
    check=_odd_check,
    low_precision=True,
)


# ----------------------------------------------------------------------------- shift (D6)
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
        return ShiftExample(replace(x, k=_tensor(kd, ctx)), shifts)

    return draw()


def _shifted(x, u: np.ndarray, ctx):
    """Inputs with k + u (exact on the grid; checked)."""
    import torch

    kd = x.k.double().cpu().numpy()
    k1 = _tensor(kd + u, ctx)
    if not np.array_equal(k1.double().cpu().numpy(), kd + u):
        raise AssertionError("k + u is not exact on the grid (catalogue bug)")
    assert isinstance(k1, torch.Tensor)
    return replace(x, k=k1)


def _softmax_shift_applies(variant, ctx) -> str | None:
    if variant.kernel_family != "softmax":
        return "shift invariance is a property of exp (softmax) only (D6)"
    if sum_mode(variant) is None:
        return "unnormalized softmax is not shift-invariant (N_t scales by e^a)"
    return _applies_common(variant, ctx)


def _softmax_shift_check(variant, ex: ShiftExample, ctx) -> list[Observation]:
    x0 = ex.inputs
    x1 = _shifted(x0, ex.shifts[0], ctx)
    ref0, eb0 = exact_and_bound(variant, x0, ctx, denominator="sum")
    ref1, eb1 = exact_and_bound(variant, x1, ctx, denominator="sum")
    o0 = call_mode(variant, x0, "sum").detach().cpu().double().numpy()
    o1 = call_mode(variant, x1, "sum").detach().cpu().double().numpy()
    diff = np.abs(o1 - o0)
    bound = eb0.bound + eb1.bound  # both approximate the same exact output (D6)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, diff / bound, np.where(diff == 0, 0.0, np.inf))
    idx = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    # the exact outputs agree to the oracle's precision (the theorem, checked on this input)
    exact_gap = max(
        (_mp_abs_diff(a, b) for a, b in zip(ref0.exact.ravel(), ref1.exact.ravel())), default=0.0
    )
    qd = x0.q.double().cpu().numpy()
    shift_scores = float(
        np.max(np.abs(variant.score_scale(qd.shape[-1]) * (qd @ np.swapaxes(ex.shifts[0], -1, -2))))
    )
    return [
        Observation(
            float(diff[idx]),
            float(bound[idx]),
            "derived",
            where=str(tuple(int(i) for i in idx)),
            detail=f"|o(k + u) - o(k)| vs the sum of both rounding bounds; row score shifts "
            f"c q_t.u up to {shift_scores:.3g}; exact outputs differ by {exact_gap:.1e}",
        )
    ]


SOFTMAX_SHIFT_INVARIANCE = Property(
    id="softmax-shift-invariance",
    statement="adding one vector u to every key (row scores shift by c q_t.u) leaves the "
    "softmax output unchanged within the two rounding bounds",
    derivation="D6",
    applies=_softmax_shift_applies,
    examples=lambda variant, ctx: _shift_examples(
        variant, ctx, n_shifts=1, max_len=8, max_dim=MAX_DIM
    ),
    check=_softmax_shift_check,
    low_precision=True,
)


def _taylor_shift_applies(variant, ctx) -> str | None:
    n = variant.order
    if n is None or not variant.exp_type:
        return "needs a claimed Taylor kernel (taylor:N or linear:taylor:N)"
    if n == 0:
        return "kappa_0 = 1: uniform weights, trivially shift-invariant"
    if sum_mode(variant) is None:
        return "unnormalized variant: the D6 statement is about normalized weights"
    return _applies_common(variant, ctx)


def _best_shift(variant, x, shifts) -> tuple[np.ndarray, float]:
    """The candidate shift with the largest exact kappa_N weight gap (``taylor_shift_gap`` on
    the float64 scores of each row; a row whose denominator vanishes is skipped)."""
    from derivations.shift import taylor_shift_gap

    qd = x.q.double().cpu().numpy()
    kd = x.k.double().cpu().numpy()
    c = variant.score_scale(qd.shape[-1])
    scores = c * (qd @ np.swapaxes(kd, -1, -2))  # (B, H, T, S)
    T = scores.shape[2]
    best, best_gap = shifts[0], -1.0
    for u in shifts:
        a = c * (qd @ np.swapaxes(u, -1, -2))[..., 0]  # (B, H, T) row shifts
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
    import mpmath

    x0 = identity_values(ex.inputs)
    u, predicted = _best_shift(variant, x0, ex.shifts)
    x1 = _shifted(x0, u, ctx)
    ref0, eb0 = exact_and_bound(variant, x0, ctx, denominator="sum")
    ref1, eb1 = exact_and_bound(variant, x1, ctx, denominator="sum")
    bound = eb0.bound + eb1.bound
    with mpmath.workdps(DPS):
        exact = np.vectorize(lambda a, b: float(abs(a - b)), otypes=[float])(ref1.exact, ref0.exact)
    usable = np.isfinite(bound) & (exact > 2.0 * bound)
    if not usable.any():
        raise NotApplicable("no weight changes by more than twice the rounding bound")
    score = np.where(usable, exact - 2.0 * bound, -np.inf)
    idx = np.unravel_index(int(np.argmax(score)), score.shape)
    finite = np.isfinite(bound).all()
    o0 = call_mode(variant, x0, "sum", allow_nonfinite=not finite).detach().cpu().double().numpy()
    o1 = call_mode(variant, x1, "sum", allow_nonfinite=not finite).detach().cpu().double().numpy()
    measured = abs(float(o1[idx]) - float(o0[idx]))
    obs = certified_change(
        measured, float(exact[idx]), float(bound[idx]), f"weight {tuple(int(i) for i in idx)}"
    )
    obs.where = str(tuple(int(i) for i in idx))
    obs.detail += (
        f"; shift u = {u.ravel().tolist()}, taylor_shift_gap (float scores) {predicted:.3g}"
    )
    return obs


TAYLOR_NOT_SHIFT_INVARIANT = Property(
    id="taylor-not-shift-invariant",
    statement="for kappa_N (N >= 1) a key shift chosen with taylor_shift_gap changes a "
    "normalized weight by more than the rounding bounds (D6 fails for truncations)",
    derivation="D6",
    applies=_taylor_shift_applies,
    examples=lambda variant, ctx: _shift_examples(variant, ctx, n_shifts=3, max_len=6, max_dim=3),
    check=_taylor_shift_check,
    low_precision=True,
    max_examples=15,
)

PROPERTIES = (
    KERNEL_IDENTITY,
    POSITIVE_WEIGHTS,
    ODD_ORDER_COUNTEREXAMPLE,
    SOFTMAX_SHIFT_INVARIANCE,
    TAYLOR_NOT_SHIFT_INVARIANT,
)

# re-exported for theory.py
__all__ = [
    "DPS",
    "MAX_VALUE_DIM",
    "PROPERTIES",
    "PairsExample",
    "ShiftExample",
    "call_mode",
    "certified_change",
    "exact_scale",
    "identity_values",
    "inputs_with_radius",
    "kappa_root",
    "kernel_name",
    "make_inputs",
    "sum_mode",
]
