"""One job in this process: a property run with hypothesis, the black-box probe, or the tiny
call made before any other work (``verify.engine.preflight``).

A property job may run under a time limit (``deadline``, seconds): no example starts past it
(``RunContext.deadline``), and the runner reports what it had (a failure found, shrinking
stopped; else status ``inconclusive``): the checker's limit, never the variant's failure
(``verify.engine.pool`` kills a worker stuck in one call past it).
"""

from __future__ import annotations

import time
import traceback
from collections import Counter

from verify.engine.jobs import PRECALL, PROBE, Job
from verify.spec.results import PropertyResult
from verify.spec.vocabulary import LOW_PRECISION_DTYPES


def result_for(property_id: str, dtype: str, device: str, **fields) -> PropertyResult:
    """A :class:`PropertyResult` of ``property_id`` with the catalogue's statement, derivation and
    fault classes filled in."""
    from verify.properties import get

    prop = get(property_id)
    return PropertyResult(
        property_id=prop.id,
        derivation=prop.derivation,
        statement=prop.statement,
        dtype=dtype,
        device=device,
        faults=list(prop.faults),
        **fields,
    )


def limit_words(seconds: float) -> str:
    """How a time limit is named in reasons and hints."""
    return f"the time limit ({seconds:g} s per property, --timeout)"


def warning_counts(caught) -> dict[str, int]:
    """``{"Category: message": count}`` of recorded warnings (``warnings.catch_warnings``)."""
    return dict(Counter(f"{w.category.__name__}: {w.message}" for w in caught))


def run_job(
    variant,
    job: Job,
    *,
    device: str,
    max_examples: int | None,
    seed: int,
    shrink_draws,
    deadline: float | None = None,
) -> PropertyResult | object:
    """Run ``job`` on ``variant``: a :class:`PropertyResult` (never raises: an error of the
    check itself is status ``error``; ``deadline`` seconds running out, ``inconclusive`` unless a
    failure was found), for :data:`PROBE` the ``ProbeReport``, for :data:`PRECALL` the tiny
    call's verdict (``verify.engine.preflight.tiny_call``)."""
    if job.property_id == PRECALL:
        from verify.engine.preflight import tiny_call

        return tiny_call(variant, job.dtype, device, seed)
    if job.property_id == PROBE:
        from verify import probes

        if job.dtype in LOW_PRECISION_DTYPES:  # only the precision model, in that dtype
            from verify.probes.precision_model import identify_precision

            return identify_precision(variant, dtype=job.dtype, device=device, seed=seed)
        from verify.probes.conventions import probe_empty_rows

        # a claimed kernel is the claim's: only the cheap probes of restrictions and conventions
        report = probes.probe(
            variant, device=device, seed=seed, identify=variant.kernel == "unknown"
        )
        try:
            probe_empty_rows(variant, report, device, seed)
        except Exception as exc:  # noqa: BLE001 - the other findings stand without it
            report.notes.append(f"empty rows per dtype: {type(exc).__name__}: {exc}")
        return report
    from verify.properties import get
    from verify.properties.support.base import RunContext, run_property

    if job.dtype not in variant.dtypes:
        return result_for(
            job.property_id,
            job.dtype,
            device,
            status="skip",
            reason=f"the variant does not claim {job.dtype}",
        )
    ctx = RunContext(
        dtype=job.dtype,
        device=device,
        max_examples=max_examples,
        seed=seed,
        shrink_draws=shrink_draws,
        deadline=None if deadline is None else time.monotonic() + deadline,
    )
    prop = get(job.property_id)
    try:
        res = run_property(prop, variant, ctx)
    except Exception as exc:  # the runner itself must never take the battery down
        return result_for(
            job.property_id,
            job.dtype,
            device,
            status="error",
            reason=f"internal error: {type(exc).__name__}: {exc}\n" + traceback.format_exc(limit=3),
        )
    res.faults = list(prop.faults)
    if deadline is not None:  # name the limit: an inconclusive run, a shrinking it stopped
        res.reason = res.reason.replace("the time limit (--timeout)", limit_words(deadline))
    return res
