"""Kernel identification: the measured weights against every member of the family at every scale
convention, confirmed at the other head dimensions; then the fits when none matches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verify.probes.fits import favor_like, fit_scale, poly_fit
from verify.probes.kernels import (
    CONVENTIONS,
    FALLBACK_CANDIDATES,
    FAMILY,
    IDENT_DIMS,
    N_KEYS,
    Ident,
    candidate_ratio,
    read_ident,
    scale_free,
)
from verify.probes.report import ProbeReport
from verify.probes.runner import Runner
from verify.spec.results import VariantError


def identify(
    run: Runner,
    report: ProbeReport,
    T_of: Callable[[int], int | None],
    causal: bool,
    window: tuple[int, int] | None = None,
):
    kernel: dict[str, Any] = {"verdict": "none", "kernel": "unknown"}
    report.kernel = kernel
    if report.linear_in_v.result is False:  # e.g. a norm of the numerator (D7): no weights
        kernel.update(verdict="not run", detail="the output is not linear in v: no weights")
        return
    norm_kind = report.normalization.get("kind")
    normalized = norm_kind != "none"
    reads: dict[int, Ident] = {}
    for d in IDENT_DIMS:
        T = T_of(N_KEYS)
        if T is None:
            kernel["verdict"] = "not run"
            kernel["detail"] = "no allowed length >= 12"
            return
        try:
            reads[d] = read_ident(run, d, T, causal, report.notes, window)
        except VariantError as exc:
            report.notes.append(f"identification at d = {d}: {exc}")
    if 4 not in reads:
        kernel["verdict"] = "not run"
        kernel["detail"] = "the identification call failed at d = 4"
        return
    A = reads[4].A[reads[4].vis]
    report.positivity = {
        "min_weight": float(A.min()),
        "positive": bool(A.min() > 0),
        "nonnegative": bool(A.min() >= 0),
        "detail": "over the identification weights (scaled scores down to -4d c)",
    }
    precisions = [run.bound_dtype] + (["float32"] if run.bound_dtype == "float64" else [])
    results: list[tuple[float, str, str, str]] = []
    first: list[tuple[float, str, str, str]] = []  # the pass at the output precision
    pool = [
        (kern, conv)
        for kern in FAMILY
        for conv in (["any"] if scale_free(kern, normalized) else list(CONVENTIONS))
    ]
    for prec in precisions:
        if results:  # the float32 fallback re-tests the closest candidates of the first pass
            pool = [(kern, conv) for _, kern, conv, _ in sorted(results)[:FALLBACK_CANDIDATES]]
        results = []
        for kern, conv in pool:
            c = 1.0 if conv == "any" else CONVENTIONS[conv](4)
            r, where = candidate_ratio(run, reads[4], kern, c, normalized, prec)
            results.append((r, kern, conv, where))
        first = first or sorted(results)
        matches = [x for x in results if x[0] <= 1.0]
        # confirm at the other dimensions (the conventions differ with d)
        confirmed = []
        for r, kern, conv, where in matches:
            ratios = [r]
            for d in IDENT_DIMS[1:]:
                if d not in reads:
                    continue
                c = 1.0 if conv == "any" else CONVENTIONS[conv](d)
                ratios.append(candidate_ratio(run, reads[d], kern, c, normalized, prec)[0])
            if max(ratios) <= 1.0:
                confirmed.append((max(ratios), kern, conv, where))
        if confirmed:
            best = min(confirmed)
            kernel.update(
                verdict="consistent",
                kernel=best[1],
                scale=best[2],
                precision=prec,
                max_ratio=best[0],
                scale_by_d={
                    str(d): (None if best[2] == "any" else CONVENTIONS[best[2]](d)) for d in reads
                },
                matches=[f"{k} (scale {c})" for _, k, c, _ in sorted(confirmed)],
                detail=f"D10 bound in {prec}, dims {sorted(reads)}, worst at {best[3]}",
            )
            break
    kernel["candidates"] = {f"{k} ({c})": r for r, k, c, _ in first}
    kernel["closest"] = [
        {"kernel": k, "scale": c, "ratio": r, "where": w} for r, k, c, w in first[:3]
    ]
    if kernel["verdict"] != "consistent":
        fitted = fit_scale(run, reads, normalized)
        if fitted is not None:
            kernel.update(fitted)
    poly_fit(report, reads[4])
    if kernel["verdict"] != "consistent":
        favor_like(run, report, reads[4], normalized)
