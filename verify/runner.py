"""``attn-theory verify``: run the property catalogue on the built-in implementations.

Runs every (variant, property, dtype) combination -- float64 and float32 for every property,
bf16/fp16 for the properties that state a low-precision model -- with hypothesis under the
chosen profile, in worker processes (one torch thread each), and prints one row per property:
examples run, max observed/bound, pass/fail/skip counts. The same results feed
``reports/verification.md`` (``attn-theory report``).
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from verify.properties.support.base import SHRINK_DRAWS

FULL_DTYPES = ("float64", "float32")
LOW_DTYPES = ("bfloat16", "float16")


@dataclass(frozen=True)
class Job:
    variant: str
    property_id: str
    dtype: str
    device: str
    profile: str
    max_examples: int | None
    seed: int
    shrink_draws: int | None = SHRINK_DRAWS


def plan(
    variants: list[str] | None = None,
    dtypes: tuple[str, ...] = FULL_DTYPES + LOW_DTYPES,
    device: str = "cpu",
    select: list[str] | None = None,
    profile: str = "ci",
    max_examples: int | None = None,
    seed: int = 0,
) -> list[Job]:
    """Every job to run, in a fixed order (variant, property, dtype).

    Raises:
        KeyError: an unknown variant or property id (message lists the known ones).
    """
    from verify import builtins as reg
    from verify.properties import catalogue

    names = sorted(reg.registered()) if not variants else list(variants)
    for n in names:
        reg.get(n)  # raises KeyError with the list
    props = catalogue()
    known = {p.id for p in props}
    for s in select or ():
        if s not in known:
            raise KeyError(f"select: unknown property {s!r}; known: {sorted(known)}")
    jobs = []
    for n in names:
        for p in props:
            if select and p.id not in select:
                continue
            for dt in dtypes:
                if dt in LOW_DTYPES and not p.low_precision:
                    continue
                jobs.append(Job(n, p.id, dt, device, profile, max_examples, seed))
    return jobs


def run_job(job: Job):
    """Run one job in this process; returns (job, PropertyResult)."""
    import torch

    from verify import builtins as variants
    from verify import profiles
    from verify.properties import get
    from verify.properties.support.base import RunContext, run_property

    torch.set_num_threads(1)
    profiles.load(job.profile)
    variant = variants.get(job.variant)
    ctx = RunContext(
        dtype=job.dtype,
        device=job.device,
        max_examples=job.max_examples,
        seed=job.seed,
        shrink_draws=job.shrink_draws,
    )
    if job.dtype not in variant.dtypes:
        from verify.spec.results import PropertyResult

        prop = get(job.property_id)
        return job, PropertyResult(
            property_id=prop.id,
            derivation=prop.derivation,
            statement=prop.statement,
            status="skip",
            dtype=job.dtype,
            device=job.device,
            reason=f"{job.variant} does not claim {job.dtype}",
        )
    return job, run_property(get(job.property_id), variant, ctx)


def run_all(jobs: list[Job], *, workers: int = 1, progress=None, shrink_draws="job") -> list:
    """Run ``jobs`` (in worker processes when ``workers`` > 1); results in the jobs' order.

    ``shrink_draws``: override every job's shrink budget (None: hypothesis' own limits);
    ``"job"`` keeps each job's own.
    """
    if shrink_draws != "job":
        from dataclasses import replace

        jobs = [replace(j, shrink_draws=shrink_draws) for j in jobs]
    results = []
    if workers <= 1:
        for i, job in enumerate(jobs):
            results.append(run_job(job))
            if progress:
                progress(i + 1, len(jobs), results[-1])
        return results
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for i, res in enumerate(pool.map(run_job, jobs, chunksize=1)):
            results.append(res)
            if progress:
                progress(i + 1, len(jobs), res)
    return results


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
        row[r.status] += 1
        row["loose"] += int(r.loose)
        if r.max_ratio is not None and r.status in ("pass", "fail"):
            row["max_ratio"] = max(row["max_ratio"] or 0.0, r.max_ratio)
        if r.status in ("fail", "error"):
            row["failing"].append(f"{job.variant}/{job.dtype}")
    return list(rows.values())


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default=None, help="hypothesis profile: ci, dev, thorough")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--variant", action="append", default=None, help="only these built-in variants")
    p.add_argument(
        "--select", action="append", default=None, metavar="PROPERTY", help="only these properties"
    )
    p.add_argument("--dtype", action="append", default=None, help="only these dtypes")
    p.add_argument("--max-examples", type=int, default=None, help="examples per property")
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: CPU count)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args: argparse.Namespace) -> int:
    from verify import profiles
    from verify.render.markdown import table

    profile = profiles.selected(args.profile)
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print("device: cuda requested but torch.cuda.is_available() is False", file=sys.stderr)
            return 2
    try:
        jobs = plan(
            args.variant,
            tuple(args.dtype) if args.dtype else FULL_DTYPES + LOW_DTYPES,
            args.device,
            args.select,
            profile,
            args.max_examples,
            args.seed,
        )
    except KeyError as exc:
        print(exc.args[0], file=sys.stderr)
        return 2
    workers = args.jobs or os.cpu_count() or 1

    def progress(i, n, res):
        if args.quiet:
            return
        job, r = res
        ratio = "" if r.max_ratio is None else f" max obs/bound {r.max_ratio:.3g}"
        print(
            f"[{i}/{n}] {job.variant:16s} {job.dtype:8s} {r.property_id:28s} {r.status}{ratio}",
            file=sys.stderr,
        )

    results = run_all(jobs, workers=workers, progress=progress)
    rows = summarize(results)
    print(
        table(
            [
                "property",
                "derivation",
                "examples",
                "max obs/bound",
                "pass",
                "fail",
                "skip",
                "error",
            ],
            [
                [
                    r["property"],
                    r["derivation"],
                    r["examples"],
                    "" if r["max_ratio"] is None else f"{r['max_ratio']:.3g}",
                    r["pass"],
                    r["fail"],
                    r["skip"],
                    r["error"],
                ]
                for r in rows
            ],
        )
    )
    bad = [r for r in rows if r["fail"] or r["error"]]
    for r in bad:
        print(f"FAILED {r['property']}: {', '.join(r['failing'])}", file=sys.stderr)
    return 1 if bad else 0
