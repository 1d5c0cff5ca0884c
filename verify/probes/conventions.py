"""The denominator's eps convention of a normalized variant whose kernel is known (claimed, or
identified by the probes): no eps, N/(D + eps) (``add``) or a denominator clamped at eps,
N/max(D, eps) (``floor``, e.g. ``D.clamp(min=eps)``).

Key duplication (``verify.probes.structure.probe_normalization``) sees an eps only where it is
large against D, and a floor not at all where D >= eps. With the kernel known, D_t is computed
exactly enough (float64, D10 bound) for rows built to span many orders of magnitude: keys on the
positive grid, queries 2^e g (g on the grid in [1/8, 1], e = 3, 0, ..., -42) and -2^e g (g in
[1/2, 1], e = 7, 6, ..., -8), exact in float64 and float32, so the kernel sums of homogeneous
maps (small queries), of exp-type kernels and of elu+1 (negative queries) reach far below any
eps a variant uses. With values 1 every output element is D_t / den_t, the variant's divisor;
rows whose output is not finite (0/0 of a vanishing kernel, an overflow) are left out. The
smallest positive D_t whose row sum r_t is below 1 gives two candidates, eps = D/r (floor: r =
D/eps where D < eps) and eps = D (1 - r)/r (add: r = D/(D + eps)), each taken as the shortest
decimal of the interval r_t +- its D10 bound maps to when that fits, else as computed. A
convention is reported only when the variant's outputs on every row lie within the D10 bound of
that convention's float64 reference (``verify.exact.errors.attention_error_bound`` with
``eps_mode``): the same statement the battery then checks on its own inputs.

:func:`probe_empty_rows` reads the empty-row convention in every probe dtype: what a row with no
visible key returns is a convention (``EMPTY_ROW_CONVENTIONS``) that may differ by dtype (a mask
value of -finfo(dtype).max is -inf once a float64 call's scores are cast to float32, so NaN, and
finite in bfloat16 arithmetic carried in float32, so the mean of the values), and between the rows
a bottom-right causal call (T > S) empties and the rows an ``attn_mask`` empties.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from verify.probes.report import ProbeReport
from verify.probes.restrictions import length_at_least
from verify.probes.runner import BLACK_BOX_EXP, DIM, Runner, shortest_in
from verify.spec.empty_rows import empty_row_kind
from verify.spec.results import NotApplicable, VariantError

#: rows of the probe: at least this many (half with positive, half with negative queries)
ROWS = 32
#: exponents of the query scales: 2^e g for the positive rows, -2^e g for the negative ones
POSITIVE_EXPONENTS = tuple(range(3, -43, -3))
NEGATIVE_EXPONENTS = tuple(range(7, -9, -1))


def known_kernel(variant, report: ProbeReport) -> tuple[str | None, Any, str]:
    """(kernel, scale, why-not) for the denominator probe: the variant's claimed kernel and
    scale when it claims one, else the kernel the probes identified (``report.kernel``); None
    with the reason when neither is usable (structural claims, a declared feature map, FAVOR+,
    an unnormalized claim, no identification)."""
    from verify.probes.fits import constant_scale
    from verify.spec.structure import has_structure

    if variant.kernel != "unknown":
        kern = variant.parsed_kernel
        if has_structure(variant) or variant.qk_norm or variant.score_bias:
            return None, None, "structural claims: the plain kernel's sums do not apply"
        if not kern.known or kern.map in ("favor", "phi") or kern.family == "sigmoid":
            return None, None, f"kernel {variant.kernel}: no exact kernel sum here"
        if not variant.normalized:
            return None, None, "claimed unnormalized: no denominator"
        return variant.kernel, variant.score_scale(DIM), ""
    kern = report.kernel
    if kern.get("verdict") != "consistent" or kern.get("kernel") in (None, "linear:favor"):
        return None, None, "kernel not identified"
    scale = kern.get("scale")
    if scale == "fitted":
        c = constant_scale(kern)
        return (kern["kernel"], c, "") if c is not None else (None, None, "scale not constant")
    if scale == "any":  # scale-free weights: the claims say "default", and so does the probe
        return kern["kernel"], None, ""
    by_d = kern.get("scale_by_d") or {}
    c = by_d.get(str(DIM), by_d.get(DIM))
    return (kern["kernel"], float(c), "") if c is not None else (None, None, "no scale at d")


def probe_denominator(run: Runner, report: ProbeReport, kernel, scale, causal: bool) -> None:
    """Find the eps convention (module docstring); fills ``report.normalization`` (``kind``
    sum | sum+eps | sum+floor, ``eps``, ``eps_mode``, ``convention`` with the worst
    observed/bound of each hypothesis tried)."""
    norm = report.normalization
    if norm.get("kind") not in ("sum", "sum+eps") or kernel is None:
        return
    T = length_at_least(report, ROWS)
    if T is None:
        return
    state = run.gen.get_state()  # the later probes draw the inputs they drew without this one
    q, k, v = _rows(run, T)
    run.gen.set_state(state)
    try:
        o = run.out(q, k, v, causal, allow_nonfinite=True)
    except VariantError as exc:
        norm["convention"] = {"detail": str(exc)}
        return
    from verify.exact import errors

    D = errors.float64_reference(kernel, q, k, v, causal=causal, scale=scale, denominator="none")
    D, r = D[0, 0, :, 0], o[0, 0, :, 0]
    tried: dict[str, float] = {}

    def fits(eps: float, mode: str) -> bool:
        key = f"{mode} {eps:.17g}"
        if key not in tried:
            tried[key] = _worst(run, kernel, scale, causal, q, k, v, o, eps, mode)
        return tried[key] <= 1.0

    found = None
    if fits(0.0, "add"):
        found = (0.0, "add")
    else:
        ok = (D > 0) & np.isfinite(r) & (r > 0) & (r < 1)
        if ok.any():
            t = int(np.argmin(np.where(ok, D, np.inf)))
            d, rt = float(D[t]), float(r[t])
            for mode, est in (("add", d * (1 - rt) / rt), ("floor", d / rt)):
                if found is None and est > 0 and math.isfinite(est):
                    b = _model(run, kernel, scale, causal, q, k, v, est, mode)[1].bound[0, 0, t, 0]
                    cands = _candidates(est, d, rt, float(b), mode)
                    found = next(((e, mode) for e in cands if fits(e, mode)), None)
    norm["convention"] = {"tried": tried, "rows": int(T), "detail": _detail(found)}
    if found is None:
        return
    eps, mode = found
    if eps:
        norm.update(kind="sum+eps" if mode == "add" else "sum+floor", eps=eps, eps_mode=mode)
    else:
        norm.update(kind="sum", eps_mode="add")
        norm.pop("eps", None)


def _rows(run: Runner, T: int):
    """q (1, 1, T, d) with rows 2^e g (even t) and -2^e g (odd t) (module docstring), k
    (1, 1, T, d) on the positive grid, v = 1 (1, 1, T, d), float64."""
    import torch

    pos = run.rand(1, 1, T, DIM, lo=0.125, hi=1.0)
    neg = run.rand(1, 1, T, DIM, lo=0.5, hi=1.0)
    k = run.rand(1, 1, T, DIM, lo=0.125, hi=1.0)
    q = torch.empty(1, 1, T, DIM, dtype=torch.float64)
    for t in range(T):
        i, (sign, exps, g) = (
            t // 2,
            ((1.0, POSITIVE_EXPONENTS, pos), (-1.0, NEGATIVE_EXPONENTS, neg))[t % 2],
        )
        q[..., t, :] = sign * 2.0 ** exps[i % len(exps)] * g[..., t, :]
    return run.exact(q), k, torch.ones(1, 1, T, DIM, dtype=torch.float64)


def _candidates(est: float, D: float, r: float, b: float, mode: str) -> list[float]:
    """The shortest decimal among the eps that the row sum r +- b gives (add: D (1 - r)/r,
    floor: D/r, both decreasing in r), then ``est`` itself."""
    if not (0 < b < r and math.isfinite(b)):
        return [est]
    lo, hi = r + b, r - b
    if mode == "add":
        lo, hi = D * (1 - lo) / lo, D * (1 - hi) / hi
    else:
        lo, hi = D / lo, D / hi
    short = shortest_in(max(lo, 0.0), hi) if 0 < hi and lo <= hi else est
    return [short, est] if short != est else [est]


def _model(run: Runner, kernel, scale, causal, q, k, v, eps: float, mode: str):
    """(float64 reference, D10 ErrorBound in the computing precision) of the convention."""
    from verify.exact import errors

    kw = dict(causal=causal, scale=scale, eps=eps, eps_mode=mode if eps else "add")
    exp_lib = run.variant.exp_library or BLACK_BOX_EXP[run.device]
    ref = errors.float64_reference(kernel, q, k, v, **kw)
    eb = errors.attention_error_bound(
        kernel, q, k, v, dtype=run.bound_dtype, exact=None, device=run.device,
        exp_library=exp_lib, **kw,
    )  # fmt: skip
    return ref, eb


def _worst(run: Runner, kernel, scale, causal, q, k, v, o, eps: float, mode: str) -> float:
    """max observed/bound of the outputs ``o`` against the convention's float64 reference and
    its D10 bound in the computing precision (inf when nothing is comparable); rows whose
    output is not finite carry no statement."""
    from verify.exact import errors

    try:
        ref, eb = _model(run, kernel, scale, causal, q, k, v, eps, mode)
        eb.bound = np.where(np.isfinite(o).all(-1, keepdims=True), eb.bound, np.inf)
        obs = errors.compare(np.nan_to_num(o), eb, ref)
    except (NotApplicable, ValueError):
        return math.inf
    if obs.bound > 0:
        return obs.observed / obs.bound
    return 0.0 if obs.observed == 0 else math.inf


def _detail(found) -> str:
    if found is None:
        return "no convention (none, add, floor) fits every row within its D10 bound"
    eps, mode = found
    if not eps:
        return "no eps: every row's divisor is the kernel sum D (within the D10 bound)"
    if mode == "add":
        return f"the divisor is D + eps, eps = {eps:.6g} (within the D10 bound on every row)"
    return (
        f"the divisor is max(D, eps), eps = {eps:.6g}: a denominator clamped at eps (within the "
        "D10 bound on every row)"
    )


# -- the empty-row convention, per dtype ----------------------------------------------------------

#: key and value entries of the empty-row probe: positive, so zeros, NaN and the mean of the
#: values are three different answers
EMPTY_LO, EMPTY_HI = 0.125, 1.0


def probe_empty_rows(variant, report: ProbeReport, device: str, seed: int, dtypes=None) -> None:
    """Fill ``report.cross["empty_rows_by_dtype"]``: for each dtype of ``dtypes`` (default every
    probe dtype) ``{"causal": c, "mask": m, "convention": x}``, c what the first T - S rows of a
    bottom-right causal call with T = 2m', S = m' return (m' the length multiple; probed when
    ``report.cross`` found the bottom-right alignment), m what a row emptied by ``attn_mask``
    returns (probed when the variant ``supports_mask``), each :func:`empty_row_kind` or None
    (not probed, or the call raised), and x the convention of the dtype: the one both give,
    ``other`` when they differ (no single convention), None when neither was read."""
    from verify.probes.runner import PROBE_DTYPES

    causal = report.cross.get("alignment") == "bottom-right"
    if not (causal or variant.supports_mask):
        return
    m = report.lengths.get("multiple") or 1
    compute = report.restrictions.get("compute_dtype")
    out: dict[str, dict[str, str | None]] = {}
    for dt in dtypes or PROBE_DTYPES:
        run = Runner(variant, dt, device, seed)
        seen = {
            "causal": _causal_empty(run, m, compute) if causal else None,
            "mask": _mask_empty(run, m, compute, report) if variant.supports_mask else None,
        }
        kinds = {k for k in seen.values() if k is not None}
        seen["convention"] = kinds.pop() if len(kinds) == 1 else ("other" if kinds else None)
        out[dt] = seen
    report.cross["empty_rows_by_dtype"] = out


def _causal_empty(run: Runner, m: int, compute: str | None) -> str | None:
    T, S = 2 * m, m
    q = run.rand(1, 1, T, DIM, lo=EMPTY_LO, hi=EMPTY_HI)
    k, v = (run.rand(1, 1, S, DIM, lo=EMPTY_LO, hi=EMPTY_HI) for _ in range(2))
    try:
        o = run.out(q, k, v, True, allow_nonfinite=True)[0, 0, : T - S]
    except VariantError:
        return None
    return empty_row_kind(o, v[0, 0].numpy(), run.dtype, compute)


def _mask_empty(run: Runner, m: int, compute: str | None, report: ProbeReport) -> str | None:
    """What row 0 returns when ``attn_mask`` hides every key from it (T = S = 2m, non-causal
    where supported, else causal: row 0 then sees key 0 only, which the mask hides)."""
    import torch

    from verify.properties.support.calls import call

    T = 2 * m
    q, k, v = (run.rand(1, 1, T, DIM, lo=EMPTY_LO, hi=EMPTY_HI) for _ in range(3))
    mask = torch.ones(1, 1, T, T, dtype=torch.bool, device=run.device)
    mask[..., 0, :] = False
    causal = report.causal_support == "yes"
    try:
        o = call(run.variant, run.t(q), run.t(k), run.t(v), causal=causal, attn_mask=mask,
                 allow_nonfinite=True, restricted=False)  # fmt: skip
    except VariantError:
        return None
    rows = o[0, 0, :1].detach().cpu().double().numpy()
    return empty_row_kind(rows, v[0, 0].numpy(), run.dtype, compute)
