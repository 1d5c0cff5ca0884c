"""One job in this process: a property run with hypothesis, or the black-box probe."""

from __future__ import annotations

import traceback

from verify.engine.jobs import PROBE, Job
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


def run_job(
    variant, job: Job, *, device: str, max_examples: int | None, seed: int, shrink_draws
) -> PropertyResult | object:
    """Run ``job`` on ``variant``: a :class:`PropertyResult` (never raises: an error of the
    check itself is status ``error``), or for :data:`PROBE` the ``ProbeReport``."""
    if job.property_id == PROBE:
        from verify import probes

        if job.dtype in LOW_PRECISION_DTYPES:  # only the precision model, in that dtype
            from verify.probes.precision_model import identify_precision

            return identify_precision(variant, dtype=job.dtype, device=device, seed=seed)
        # a claimed kernel is the claim's: only the cheap probes of restrictions and conventions
        return probes.probe(variant, device=device, seed=seed, identify=variant.kernel == "unknown")
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
    return res
