"""The property battery on the project's built-in implementations (``verify.builtins``): what
``attn-theory verify`` prints and ``reports/verification.md`` tabulates."""

from __future__ import annotations

from verify.engine.jobs import BuiltinLoader, Job, battery
from verify.engine.pool import run_jobs
from verify.spec.vocabulary import FULL_PRECISION_DTYPES, LOW_PRECISION_DTYPES

ALL_DTYPES = FULL_PRECISION_DTYPES + LOW_PRECISION_DTYPES
#: seconds per job before the watchdog fails it (the built-ins are trusted not to hang; the
#: limit only keeps a regression from stalling the report)
BUILTIN_TIMEOUT = 900.0


def plan(variants=None, *, dtypes=ALL_DTYPES, select=None) -> list[Job]:
    """Every (built-in variant, property, dtype) job, in a fixed order.

    Raises:
        KeyError: an unknown variant name (the message lists the registered ones).
        ValueError: an unknown property id in ``select``.
    """
    from verify import builtins

    names = sorted(builtins.registered()) if not variants else list(variants)
    for n in names:
        builtins.get(n)  # raises KeyError with the list
    return [
        job
        for n in names
        for job in battery(BuiltinLoader(n), dtypes=dtypes, select=select, label=n)
    ]


def run(jobs: list[Job], **kw) -> list[tuple[Job, object]]:
    """``(job, PropertyResult)`` for every job, in job order (keywords: ``verify.engine.pool``'s
    ``run_jobs``; ``timeout`` defaults to :data:`BUILTIN_TIMEOUT`)."""
    kw.setdefault("timeout", BUILTIN_TIMEOUT)
    return list(zip(jobs, run_jobs(jobs, **kw)))


def summarize(results) -> list[dict]:
    """One row per property: examples, max observed/bound, counts of pass/fail/skip/error."""
    rows: dict[str, dict] = {}
    for job, r in results:
        row = rows.setdefault(
            r.property_id,
            {
                "property": r.property_id,
                "derivation": r.derivation,
                "examples": 0,
                "max_ratio": None,
                "pass": 0,
                "fail": 0,
                "skip": 0,
                "error": 0,
                "loose": 0,
                "failing": [],
            },
        )
        row["examples"] += r.examples
        row[r.status] = row.get(r.status, 0) + 1  # inconclusive: the checker's limits ran out
        row["loose"] += int(r.loose)
        if r.max_ratio is not None and r.status in ("pass", "fail"):
            row["max_ratio"] = max(row["max_ratio"] or 0.0, r.max_ratio)
        if r.status in ("fail", "error"):
            row["failing"].append(f"{job.label}/{job.dtype}")
    return rows and list(rows.values()) or []
