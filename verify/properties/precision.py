"""Precision properties: dtype and device agreement within the error model (D10).

- ``dtype-agreement``: the variant in float32, bfloat16 or float16 on sequences of thousands of
  tokens (T = 2048..4096, d = 8..16), where a normalizer accumulated in the input precision
  overflows or stalls (fault class 11: in float16 a sum of positive features over a few thousand
  tokens exceeds 65504), against a float64 direct evaluation on the *same rounded inputs*
  (cast up exactly), within ``verify.exact.errors.attention_error_bound(dtype=...,
  exact=None)``: the two-level model for bf16/fp16 (fp32 accumulation, output rounded once)
  plus the float64 reference's own bound. The last value column is 1, so for the sum mode that
  column of the output is D_t / D_t = 1 and a broken normalizer (inf, 0, a stalled sum) shows
  directly. The comparison covers the last query row (the longest sums) and a few drawn rows
  (the per-element bound costs O(S) Python work per row); no output element of any row may be
  inf or NaN (normalized modes; unnormalized sums may legitimately exceed the dtype's range).
- ``device-agreement``: the same inputs on CUDA and on the CPU; |o_cuda - o_cpu| within the sum
  of the two derived bounds against the exact result (the cited exp constants differ per
  device: 1 ulp for the CPU's SLEEF exp, 2.5 ulp for CUDA's expf). Skips without CUDA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from verify.exact.reference import reference_attention
from verify.properties.support.base import declare
from verify.properties.support.calls import call
from verify.properties.support.claims import dtype_reason, reference_reason
from verify.properties.support.common import (
    causal_choices,
    eps_floor,
    error_bound,
    exact_and_bound,
    inputs_strategy,
    kernel_name,
    model_applies,
    precision_of,
    radius_strategy,
)
from verify.properties.support.paths import (
    bounded_call,
    call_kwargs,
    modes,
    path_callable,
    path_names,
    require_mode,
    with_mode_and_form,
)
from verify.spec.results import NotApplicable, Observation, VariantError
from verify.spec.vocabulary import LOW_PRECISION_DTYPES

#: the skip reason for an unknown kernel: no plain-torch reference of the claimed kernel
NO_REFERENCE = "the variant claims no kernel (kernel=unknown): no reference"

#: sequence lengths of the dtype-agreement property (fault class 11: a few thousand tokens)
LONG_LENGTHS = (2048, 4096)
LONG_DIMS = (8, 16)
#: rows compared against the reference besides the last one (the bound is per element)
EXTRA_ROWS = 3
#: magnitudes of the drawn elements: [MIN_ELEMENT, MAX_ELEMENT] with a random sign; bounded
#: away from zero so that no product of a term leaves the D10 model's normal range
MIN_ELEMENT = 0.25
MAX_ELEMENT = 2.0
LOW_DTYPES = ("float32", "bfloat16", "float16")
#: Taylor feature forms cost O(T m) with m features per token: d is capped so that the larger
#: basis (tensor power, sum_n d^n features) stays within this budget (d = 8..16 for N <= 2)
LONG_FEATURE_BUDGET = 2048
#: FAVOR+ bounds cost O(H S m) Python-level evaluations (one per key and random feature)
FAVOR_SIZES = {"H": 1, "T": 2048}


# ----------------------------------------------------------------------------- long inputs


def long_inputs(
    seed: int,
    *,
    B: int,
    H: int,
    T: int,
    d: int,
    d_v: int,
    dtype: str,
    positive: bool = False,
    radius: float | None = None,
    scale: float = 1.0,
):
    """Reproducible long-sequence inputs (q, k, v), each (B, H, T, d | d_v), in ``dtype``.

    Elements have magnitudes uniform in [MIN_ELEMENT, MAX_ELEMENT] and a random sign (none
    when ``positive``), drawn in float64 from ``torch.Generator().manual_seed(seed)`` and
    rounded once to ``dtype``. With ``radius`` r, q and k are first multiplied by one factor so
    that max |scale q.k| is about r (measured in float64 before rounding). The last value
    column is 1 (the unit column that exposes the normalizer).

    Raises:
        ValueError: sizes below 1, d_v < 2, unknown dtype.
    """
    import torch

    for name, n in (("B", B), ("H", H), ("T", T), ("d", d)):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {n!r}")
    if not isinstance(d_v, int) or d_v < 2:
        raise ValueError(f"d_v: expected an int >= 2 (one unit column), got {d_v!r}")
    if dtype not in ("float64", "float32", "bfloat16", "float16"):
        raise ValueError(f"dtype: expected a float dtype name, got {dtype!r}")
    gen = torch.Generator().manual_seed(int(seed))

    def draw(shape):
        mag = MIN_ELEMENT + (MAX_ELEMENT - MIN_ELEMENT) * torch.rand(
            shape, generator=gen, dtype=torch.float64
        )
        if positive:
            return mag
        sign = torch.randint(0, 2, shape, generator=gen).to(torch.float64) * 2 - 1
        return mag * sign

    q, k, v = draw((B, H, T, d)), draw((B, H, T, d)), draw((B, H, T, d_v))
    v[..., -1] = 1.0
    if radius is not None:
        top = max(_max_score(q, k, scale), 1e-300)
        lam = math.sqrt(radius / top)
        q, k = q * lam, k * lam
    target = getattr(torch, dtype)
    return q.to(target), k.to(target), v.to(target)


def _max_score(q, k, scale: float, block: int = 512) -> float:
    """max |scale q_t . k_s| over all pairs, float64, in row blocks (bounded memory)."""
    best = 0.0
    for lo in range(0, q.shape[-2], block):
        s = (q[..., lo : lo + block, :] @ k.transpose(-1, -2)).abs().max()
        best = max(best, float(s) * abs(scale))
    return best


@dataclass
class LongExample:
    """A long-sequence example: how to rebuild the inputs, plus the property's choices."""

    seed: int
    sizes: dict[str, int]
    dtype: str
    positive: bool
    radius: float | None
    scale: float
    causal: bool
    rows: tuple[int, ...]
    choices: dict[str, Any] = field(default_factory=dict)

    def tensors(self):
        return long_inputs(
            self.seed,
            dtype=self.dtype,
            positive=self.positive,
            radius=self.radius,
            scale=self.scale,
            **self.sizes,
        )

    def __repr__(self) -> str:
        extra = ", ".join(f"{k}={v!r}" for k, v in self.choices.items())
        return (
            f"LongExample(seed={self.seed}, sizes={self.sizes}, dtype={self.dtype}, "
            f"positive={self.positive}, radius={self.radius!r}, scale={self.scale!r}, "
            f"causal={self.causal}, rows={self.rows}, {extra})"
        )

    def snippet(self) -> str:
        """Python code that rebuilds the inputs (``long_inputs``) and the example, and states
        ``attn_mask`` (None) and ``causal``, so the reproducer adds the reference of every row,
        the difference against the bound (``verify.properties.support.reproduce``; the float64
        reference with its own bound at these lengths) and the re-check; one comment line per
        choice."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.sizes.items())
        return (
            "from verify.properties.precision import LongExample, long_inputs\n\n"
            f"q, k, v = long_inputs({self.seed}, {args}, dtype={self.dtype!r}, "
            f"positive={self.positive!r}, radius={self.radius!r}, scale={self.scale!r})\n"
            "attn_mask = None\n"
            f"causal = {self.causal!r}\n"
            f"example = LongExample({self.seed}, {self.sizes!r}, {self.dtype!r}, "
            f"{self.positive!r}, {self.radius!r}, {self.scale!r}, {self.causal!r}, "
            f"{self.rows!r}, {self.choices!r})\n"
            f"# rows compared: {self.rows}\n"
            + "".join(f"# {k} = {v!r}\n" for k, v in self.choices.items())
        )


# ----------------------------------------------------------------------------- dtype


def _dtype_applies(variant, ctx) -> str | None:
    if why := reference_reason(variant, unknown=NO_REFERENCE, favor="no exact reference"):
        return why
    if ctx.dtype not in LOW_DTYPES:
        return "float64 is the reference precision (oracle-agreement covers it)"
    return dtype_reason(variant, ctx)


def _dtype_examples(variant, ctx):
    from hypothesis import strategies as st

    from verify.strategies import sizes as size_range

    m = variant.length_multiple
    forms = path_names(variant)

    d_hi = _max_dim(variant)
    d_lo = min(LONG_DIMS[0], d_hi)
    favor = variant.linear_map == "favor"

    @st.composite
    def draw(d):
        T = FAVOR_SIZES["T"] if favor else d(st.integers(*LONG_LENGTHS))
        T = max(T // m * m, m)
        dim = d(size_range(d_lo, d_hi))
        H = FAVOR_SIZES["H"] if favor else d(size_range(1, 2))
        d_v = dim if variant.dv_equals_d else d(size_range(2, 4))  # d_v == d: a restriction
        sizes = dict(B=1, H=H, T=T, d=dim, d_v=d_v)
        causal = d(st.sampled_from(causal_choices(variant)))
        rows = {T - 1, *(d(st.integers(0, T - 1)) for _ in range(EXTRA_ROWS))}
        return LongExample(
            seed=d(st.integers(0, 2**31 - 1)),
            sizes=sizes,
            dtype=ctx.dtype,
            positive=d(st.booleans()),
            radius=d(radius_strategy(variant, ctx)),
            scale=variant.score_scale(dim),
            causal=causal,
            rows=tuple(sorted(rows)),
            choices={
                "form": d(st.sampled_from(forms)),
                "denominator": d(st.sampled_from(modes(variant))),
            },
        )

    return draw()


def _max_dim(variant) -> int:
    """Largest head dimension drawn: 16, or less for Taylor kernels whose tensor-power feature
    count sum_{n <= N} d^n would exceed ``LONG_FEATURE_BUDGET`` (at least 2)."""
    from derivations.feature_maps import feature_count

    N = variant.order
    top = LONG_DIMS[1]
    if N is None:
        return top
    while top > 2 and feature_count(N, top, "tensor") > LONG_FEATURE_BUDGET:
        top -= 1
    return top


def _bound_form(form: str) -> str:
    """The form kind the precision bounds are stated for: ``parallel`` for a parallel form, the
    worst kind (``any``) for every other path (coarser than ``paths.form_kind``)."""
    return "parallel" if form.startswith("parallel") else "any"


def _dtype_check(variant, ex: LongExample, ctx) -> Observation:
    import numpy as np
    import torch

    from verify.exact import errors

    form, mode = ex.choices["form"], ex.choices["denominator"]
    kernel = kernel_name(variant)
    q, k, v = ex.tensors()
    c = ex.scale
    why = errors.outside_model(kernel, q, k, v, dtype=ctx.dtype, scale=c, denominator=mode)
    if why:
        raise NotApplicable(why)
    rows = list(ex.rows)
    S = k.shape[-2]
    mask = None
    if ex.causal:
        mask = torch.arange(S)[None, :] <= torch.tensor(rows)[:, None]  # (R, S)
    proj = None
    if variant.linear_map == "favor":
        proj = variant.projection(q.shape[-1], torch.float64, "cpu")
    # the bound and the float64 reference, stated before the variant runs
    q_rows = q[..., rows, :]
    claims = dict(attn_mask=mask, scale=c, denominator=mode, eps=variant.eps, projection=proj)
    claims.update(eps_floor(variant, mode, variant.eps))
    with model_applies():
        eb = errors.attention_error_bound(
            kernel,
            q_rows,
            k,
            v,
            dtype=ctx.dtype,
            exact=None,
            form=_bound_form(form),
            device=ctx.device,
            exp_library=variant.exp_library,
            precision=precision_of(variant, ctx, denominator=mode),
            arithmetic=variant.arithmetic,
            **claims,
        )
    with torch.no_grad():
        ref = reference_attention(
            q_rows.to(torch.float64),
            k.to(torch.float64),
            v.to(torch.float64),
            kernel=kernel,
            **claims,
        ).numpy()
    top = float(torch.finfo(getattr(torch, ctx.dtype)).max)
    if not np.isfinite(ref).all() or float(np.abs(ref).max()) > top / 2:
        raise NotApplicable(f"the exact output is not representable in {ctx.dtype} here")
    kw = call_kwargs(variant, mode)
    fn = path_callable(variant, form)
    dev = torch.device(ctx.device)
    # unnormalized sums may legitimately exceed the range; kernels that are not positive may
    # have a vanishing denominator on rows not compared: IEEE inf/NaN is allowed there
    unbounded = mode in ("none", "count") or variant.positive_kernel is not True
    with torch.no_grad():
        out = call(
            fn, q.to(dev), k.to(dev), v.to(dev), causal=ex.causal, allow_nonfinite=unbounded, **kw
        )
    obs = errors.compare(out[..., rows, :], eb, ref, what=f"{form}/{mode}, rows {rows}")
    low = ctx.dtype in LOW_PRECISION_DTYPES
    if obs.ratio > 1.0 and low and precision_of(variant, ctx, denominator=mode) is not None:
        verdict = _precision_verdict(variant, ex, ctx, (q, k, v), out, ref, eb_kwargs={
            "form": _bound_form(form), "device": ctx.device, "exp_library": variant.exp_library,
            "arithmetic": variant.arithmetic, **claims})  # fmt: skip
        obs = replace(obs, detail=f"{obs.detail}; {verdict}" if obs.detail else verdict)
    return obs


def _precision_verdict(variant, ex: LongExample, ctx, qkv, out, ref, *, eb_kwargs) -> str:
    """What the failure of a bf16/fp16 softmax on ``ex`` can be blamed on
    (``verify.properties.support.diagnose.precision_verdict``): the error against every
    precision model's bound on the compared rows, and the same inputs in float32 (exactly
    representable) against the float32 bound, when the variant claims float32."""
    import torch

    from verify.exact import errors
    from verify.properties.support.diagnose import error_ratio, precision_sweep, precision_verdict

    q, k, v = qkv
    rows = list(ex.rows)
    kernel = kernel_name(variant)
    out_rows = out[..., rows, :].detach().cpu().to(torch.float64).numpy()
    sweep = precision_sweep(kernel, q[..., rows, :], k, v, out_rows, ref, dtype=ctx.dtype,
                            bound_kwargs=eb_kwargs)  # fmt: skip
    f32 = None
    if "float32" in variant.dtypes:
        q32, k32, v32 = (t.to(torch.float32) for t in (q, k, v))
        with model_applies():
            eb32 = errors.attention_error_bound(
                kernel, q32[..., rows, :], k32, v32, dtype="float32", exact=None, **eb_kwargs
            )
        kw = call_kwargs(variant, ex.choices["denominator"])
        fn = path_callable(variant, ex.choices["form"])
        dev = torch.device(ctx.device)
        with torch.no_grad():
            o32 = call(fn, q32.to(dev), k32.to(dev), v32.to(dev), causal=ex.causal,
                       allow_nonfinite=True, **kw)  # fmt: skip
        o32 = o32[..., rows, :].detach().cpu().to(torch.float64).numpy()
        f32 = error_ratio(o32, np.asarray(ref), np.asarray(eb32.bound))
    claimed = precision_of(variant, ctx, denominator=ex.choices["denominator"])
    return precision_verdict(sweep, f32, claimed)


DTYPE_AGREEMENT = declare("dtype-agreement", _dtype_applies, _dtype_examples, _dtype_check)


# ----------------------------------------------------------------------------- device


def _device_applies(variant, ctx) -> str | None:
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    if "cuda" not in variant.devices:
        return "the variant does not claim cuda"
    return reference_reason(
        variant, unknown=f"{NO_REFERENCE} bound", favor="no exact reference"
    ) or dtype_reason(variant, ctx)


def _device_examples(variant, ctx):
    from dataclasses import replace

    return with_mode_and_form(variant, inputs_strategy(variant, replace(ctx, device="cpu")))


def _device_check(variant, ex, ctx) -> Observation:
    from dataclasses import replace

    import torch

    from verify.exact import errors

    x = ex.inputs
    form, mode = ex.choices["form"], ex.choices["denominator"]
    require_mode(mode, x.v.shape[-1])
    cpu = replace(ctx, device="cpu")
    ref, eb_cpu = exact_and_bound(variant, x, cpu, denominator=mode, form=_bound_form(form))
    cuda = replace(ctx, device="cuda")
    eb_cuda = error_bound(variant, x, cuda, ref, denominator=mode, form=_bound_form(form))
    total = replace(eb_cpu, bound=eb_cpu.bound + eb_cuda.bound)
    out_cpu = bounded_call(variant, form, mode, x, total.bound)
    out_cuda = bounded_call(variant, form, mode, x, total.bound, device="cuda")
    if out_cuda.device.type != "cuda":
        raise VariantError(f"CUDA inputs gave an output on {out_cuda.device} (a device change)")
    cpu64 = out_cpu.detach().to(torch.float64).numpy()
    return errors.compare(out_cuda.detach().cpu(), total, cpu64, what=f"{form}/{mode} cuda-cpu")


DEVICE_AGREEMENT = declare("device-agreement", _device_applies, _device_examples, _device_check)

# ----------------------------------------------------------------------------- bias

#: the bias check's confidence: all its checks hold together with probability >= 1 - BIAS_ALPHA
BIAS_ALPHA = 1e-6
#: independent units per example (heads, each with its own q, k, v), query rows per head, keys,
#: head dimension, value dimension (d_v = d when the variant needs it)
BIAS_HEADS, BIAS_ROWS, BIAS_KEYS, BIAS_DIM, BIAS_VALUE_DIM = 512, 2, 128, 16, 4
#: value distributions with a non-zero mean: v = 1, and v uniform in [1/4, 1]
BIAS_CASES = ("ones", "positive")
#: seeds of the bias examples: each example is already 512 independent heads, and a small
#: finite space keeps hypothesis' shrinking (which cannot simplify a seed) to a few candidates
BIAS_SEEDS = tuple(range(8))


def bias_inputs(seed: int, case: str, *, H: int, T: int, S: int, d: int, d_v: int, dtype: str):
    """(q, k, v) of the bias check: H heads with independent q, k ~ N(0, 1) (scores c q.k of
    size ~ 1) and v = 1 (``ones``) or uniform in [1/4, 1] (``positive``), drawn in float64
    from ``seed`` and rounded once to ``dtype``; shapes (1, H, T | S, d | d_v)."""
    import torch

    gen = torch.Generator().manual_seed(int(seed))
    q = torch.randn(1, H, T, d, generator=gen, dtype=torch.float64)
    k = torch.randn(1, H, S, d, generator=gen, dtype=torch.float64)
    if case == "ones":
        v = torch.ones(1, H, S, d_v, dtype=torch.float64)
    else:
        v = 0.25 + 0.75 * torch.rand(1, H, S, d_v, generator=gen, dtype=torch.float64)
    dt = getattr(torch, dtype)
    return q.to(dt), k.to(dt), v.to(dt)


def _bias_applies(variant, ctx) -> str | None:
    if why := reference_reason(variant, unknown=NO_REFERENCE, favor="no exact reference"):
        return why
    if ctx.model_dtype not in LOW_PRECISION_DTYPES:
        return (
            "the bias check runs in bfloat16/float16 (a one-sided rounding of float32 is below "
            "any rounding the output keeps)"
        )
    return dtype_reason(variant, ctx)


@dataclass
class BiasExample:
    """One example of the bias check (every case of :data:`BIAS_CASES` from one seed): how to
    rebuild its inputs (:func:`bias_inputs`)."""

    seed: int
    sizes: dict[str, int]
    dtype: str
    causal: bool
    scale: float
    choices: dict[str, Any] = field(default_factory=dict)

    def tensors(self, case: str):
        return bias_inputs(self.seed, case, dtype=self.dtype, **self.sizes)

    def snippet(self) -> str:
        """Python code that rebuilds the inputs of the first case (``bias_inputs``) and the
        example, and states ``attn_mask`` (None) and ``causal``, so the reproducer adds the
        reference, the difference against the bound and the re-check of both cases."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.sizes.items())
        return (
            "from verify.properties.precision import BiasExample, bias_inputs\n\n"
            f"q, k, v = bias_inputs({self.seed}, 'ones', {args}, dtype={self.dtype!r})\n"
            f"# and bias_inputs({self.seed}, 'positive', ...) for the second case\n"
            "attn_mask = None\n"
            f"causal = {self.causal!r}\n"
            f"example = BiasExample({self.seed}, {self.sizes!r}, {self.dtype!r}, "
            f"{self.causal!r}, {self.scale!r})\n"
        )


def _bias_examples(variant, ctx):
    from hypothesis import strategies as st

    m = variant.length_multiple
    causal = not variant.supports_causal(False)
    self_only = variant.self_attention_only or causal
    S = max(BIAS_KEYS // m, 1) * m
    T = S if self_only else max(BIAS_ROWS // m, 1) * m
    H = max(BIAS_HEADS * BIAS_ROWS // T, 8)  # about BIAS_HEADS x BIAS_ROWS rows in all
    d = min(BIAS_DIM, _max_dim(variant))  # Taylor feature forms: a bounded feature count
    d_v = d if variant.dv_equals_d else BIAS_VALUE_DIM
    sizes = dict(H=H, T=T, S=S, d=d, d_v=d_v)
    return st.builds(
        lambda seed: BiasExample(seed, sizes, ctx.dtype, causal, variant.score_scale(d)),
        st.sampled_from(BIAS_SEEDS),
    )


def _bias_check(variant, ex: BiasExample, ctx) -> list[Observation]:
    return [_bias_case(variant, ex, ctx, case) for case in BIAS_CASES]


def _bias_case(variant, ex: BiasExample, ctx, case: str) -> Observation:
    import torch

    from derivations.precision_models import hoeffding_half_width
    from verify.exact import errors

    q, k, v = ex.tensors(case)
    kernel = kernel_name(variant)
    mode = "sum" if variant.normalized else "none"
    claims = dict(causal=ex.causal, scale=ex.scale, denominator=mode, eps=variant.eps)
    claims.update(eps_floor(variant, mode, variant.eps))
    if variant.linear_map == "favor":  # the declared random directions (reference_reason)
        claims["projection"] = variant.projection(q.shape[-1], torch.float64, "cpu")
    with model_applies():
        eb = errors.attention_error_bound(
            kernel, q, k, v, dtype=ctx.model_dtype, exact=None, device=ctx.device,
            exp_library=variant.exp_library, precision=precision_of(variant, ctx,
            denominator=mode), **claims,
        )  # fmt: skip
    ref = errors.float64_reference(kernel, q, k, v, **claims)
    with torch.no_grad():
        out = call(variant, q.to(ctx.device), k.to(ctx.device), v.to(ctx.device),
                   causal=ex.causal, **call_kwargs(variant, mode))  # fmt: skip
    err = out.detach().cpu().double().numpy() - ref  # signed, (1, H, T, d_v)
    # one value per head: heads have independent inputs, rows of one head share k and v (a
    # kernel whose output ignores q, e.g. kappa_0, repeats one rounding error on every row)
    z = err.sum((-1, -2)) / eb.bound.sum((-1, -2))  # in [-1, 1] where the bound holds
    z = z.reshape(-1)
    worst = float(np.max(np.abs(z)))
    if worst > 1.0:  # the max-error bound itself fails: the mean says nothing more
        i = int(np.argmax(np.abs(z)))
        return Observation(
            worst, 1.0, "derived", f"{case}: head {i}",
            f"{case}: the signed error of head {i} exceeds its max-error bound "
            f"({worst:.3g} of it): {eb.description}",
        )  # fmt: skip
    width = hoeffding_half_width(z.size, BIAS_ALPHA, bias_tests())
    mean = float(z.mean())
    return Observation(
        abs(mean), width, "statistical", f"{case}: mean over {z.size} heads",
        f"{case}: mean signed error {mean:+.4f} of the max-error bound over "
        f"{z.size} independent heads (mean error {float(err.mean()):+.3e}); Hoeffding width "
        f"{width:.4f} at confidence 1 - {BIAS_ALPHA:g}, Bonferroni over {bias_tests()} "
        f"checks (examples x cases x low-precision dtypes); bound: {eb.description}",
    )  # fmt: skip


def bias_tests() -> int:
    """Simultaneous bias checks of one property run (the Bonferroni count): the catalogue's
    max_examples x the cases x the two low-precision dtypes."""
    return ROUNDING_BIAS.max_examples * len(BIAS_CASES) * len(LOW_PRECISION_DTYPES)


ROUNDING_BIAS = declare("rounding-bias", _bias_applies, _bias_examples, _bias_check, shrink=False)

PROPERTIES = (DTYPE_AGREEMENT, DEVICE_AGREEMENT, ROUNDING_BIAS)
