"""Jobs in worker processes, each under one watchdog.

Workers take one job at a time from the parent (so the load balances itself) and send back
its result. A job that raises inside a check is the check's concern (``run.run_job``). Time
limits are the checker's, never the variant's verdict:

* a property job starts no example past ``timeout`` seconds (``RunContext.deadline``) and
  reports what it had then: the failure it found (shrinking stopped), else status
  ``inconclusive``; a worker stuck in one call past it is killed :func:`grace` seconds later,
  and its job is ``inconclusive`` too;
* the tiny call made before any work (:data:`~verify.engine.jobs.PRECALL`) has
  :func:`precall_timeout`: a 2-token call that does not return is the variant's hang;
* the probe job gets one more, longer, try (:data:`RETRIES`) before its reason is reported.

A worker that dies fails the job it was running (a crash is the variant's), and a fresh worker
takes the rest; one killed by SIGKILL (the out-of-memory killer) leaves its job
``inconclusive`` (:func:`killed_reason`). Each worker runs one torch thread, loads the
hypothesis profile, writes nothing to stdout (the variant's own prints go to stderr:
``--json -`` keeps stdout for the JSON) and records every warning a library issues (sent to
the parent and counted, never printed); variants are built once per worker and loader.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Any

from verify.engine.jobs import PRECALL, PROBE, Job

#: seconds one property job may run before it stops with what it has (``--timeout``)
DEFAULT_TIMEOUT = 120.0
#: seconds a fresh worker may take to import torch and build the variant, at least
LOAD_TIMEOUT = 120.0
#: the probe job the watchdog stopped runs once more with twice the time before its reason is
#: reported (a slow, loaded machine)
RETRIES = 1
#: what a worker sends when a job's variant is built and the job itself starts
START = ("start",)
#: the tag of a worker's message with the warnings one job issued
WARNINGS = "warnings"


def grace(timeout: float) -> float:
    """Seconds past a property job's deadline before the watchdog kills its worker: the time
    to finish the example running then and to report a found failure (its reproducer's
    reference)."""
    return max(10.0, timeout / 4)


def precall_timeout(timeout: float) -> float:
    """Seconds the tiny 2-token call may take (a first call may compile kernels): ``timeout``,
    at most 60."""
    return min(timeout, 60.0)


def _load() -> str:
    """The machine's load, for the watchdog's message."""
    try:
        one, five, _ = os.getloadavg()
    except OSError:  # pragma: no cover - not on every platform
        return "load average unavailable"
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def killed_reason() -> str:
    """Why a worker killed by SIGKILL mid-job is the checker's limit: the kernel's
    out-of-memory killer sends it (a drawn example too large for this machine's memory beside
    the other workers), or something outside the run did; a crash of the variant's own raises
    another signal or exits."""
    return (
        "inconclusive: the worker was killed by SIGKILL mid-job, most likely by the system's "
        f"out-of-memory killer ({_load()}): the checker's limit, not the variant's failure; "
        "rerun with fewer workers (--jobs 1) or fewer examples"
    )


def _worker(conn, settings: dict[str, Any]) -> None:
    """Worker process: receive jobs until ``None``, send each result (after its warnings)."""
    import sys
    import warnings

    sys.stdout.flush()
    os.dup2(2, 1)  # stdout is the parent's (the JSON of --json -): prints go to stderr
    import torch

    from verify import profiles
    from verify.engine.run import result_for, run_job, warning_counts

    torch.set_num_threads(1)
    profiles.load(settings["profile"])
    variants: dict[Any, Any] = {}
    while True:
        job = conn.recv()
        if job is None:
            break
        key = job.loader
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if key not in variants:
                try:
                    variants[key] = ("ok", job.loader())
                except BaseException as exc:  # noqa: BLE001 - reported as the job's failure
                    variants[key] = ("error", f"{type(exc).__name__}: {exc}")
            kind, variant = variants[key]
            conn.send(START)  # the variant is built: the job's own time starts now
            if kind == "error":
                res = (
                    ("load-error", variant)
                    if job.property_id in (PROBE, PRECALL)
                    else result_for(
                        job.property_id,
                        job.dtype,
                        settings["device"],
                        status="fail",
                        reason=f"could not build the variant: {variant}",
                    )
                )
            else:
                res = run_job(
                    variant,
                    job,
                    device=settings["device"],
                    max_examples=settings["max_examples"],
                    seed=settings["seed"],
                    shrink_draws=settings["shrink_draws"],
                    deadline=None if job.property_id in (PROBE, PRECALL) else settings["timeout"],
                )
        counts = warning_counts(caught)
        if counts:
            conn.send((WARNINGS, counts))
            if hasattr(res, "warnings") and isinstance(res.warnings, dict):
                res.warnings = counts
        conn.send(res)
    conn.close()


class _Slot:
    """One worker process and the job it is running."""

    def __init__(self, ctx, settings: dict[str, Any]) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_worker, args=(child, settings), daemon=True)
        self.proc.start()
        child.close()
        self.loading = True
        self.job: tuple[int, Job, int] | None = None  # (index, job, attempt)
        self.started = 0.0

    def submit(self, index: int, job: Job, attempt: int = 1) -> None:
        self.conn.send(job)
        self.job, self.started, self.loading = (index, job, attempt), time.monotonic(), True

    def limit(self, timeout: float) -> float:
        """Seconds the current stage may take: importing torch and building the variant (at
        least ``LOAD_TIMEOUT``), then the job itself: a property job ``timeout`` plus
        :func:`grace` (it stops itself at ``timeout``), the tiny call
        :func:`precall_timeout`, the probe ``timeout`` doubled on a retry."""
        index, job, attempt = self.job
        if job.property_id == PRECALL:
            base = precall_timeout(timeout)
        elif job.property_id == PROBE:
            base = timeout * 2 ** (attempt - 1)
        else:
            base = timeout + grace(timeout)
        return max(base, LOAD_TIMEOUT) if self.loading else base

    def stop(self, *, kill: bool = False) -> None:
        try:
            if kill:
                self.proc.kill()
            else:
                self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self.conn.close()


def _timed_out(job: Job, device: str, timeout: float, limit: float, loading: bool) -> Any:
    """What a job the watchdog stopped gives: the probe and the tiny call a reason (a string;
    the tiny call's says the variant hung on it), a property job an ``inconclusive`` result."""
    from verify.engine.run import limit_words, result_for

    if loading:
        why = (
            f"building the variant took more than {limit:.0f} s (the watchdog stopped the "
            f"worker; {_load()})"
        )
        if job.property_id in (PROBE, PRECALL):
            return f"inconclusive: {why}"
        return result_for(job.property_id, job.dtype, device, status="inconclusive", reason=why)
    if job.property_id == PRECALL:
        return (
            f"hung on a 2-token call: no result within {limit:.0f} s (the watchdog killed the "
            f"worker; {_load()})"
        )
    if job.property_id == PROBE:
        return (
            f"hung: no result within {timeout:.0f} s, nor within {limit:.0f} s on a retry (the "
            f"watchdog killed the worker; {_load()})"
        )
    return result_for(
        job.property_id,
        job.dtype,
        device,
        status="inconclusive",
        reason=f"{limit_words(timeout)} ran out and the run did not stop within "
        f"{grace(timeout):.0f} s more (one example, or one call, that long: the watchdog "
        f"killed it; {_load()})",
    )


class Workers:
    """Worker processes kept across the :func:`run_jobs` calls of one check (the tiny call and
    the probe, then the battery): each fresh worker imports torch and the catalogue, seconds
    of CPU. ``with Workers() as pool: run_jobs(..., pool=pool)``; idle workers are stopped on
    exit, and a call with other settings starts fresh ones."""

    def __init__(self) -> None:
        self.slots: list[_Slot] = []
        self.settings: dict[str, Any] | None = None
        self.method: str | None = None

    def adopt(self, settings: dict[str, Any], method: str) -> list[_Slot]:
        """The kept workers when they run under ``settings`` and ``method``, else none (the
        others are stopped)."""
        if (settings, method) != (self.settings, self.method):
            self.close()
            self.settings, self.method = settings, method
        self.slots = [s for s in self.slots if s.proc.is_alive()]
        return self.slots

    def close(self) -> None:
        for slot in self.slots:
            slot.stop()
        self.slots = []

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_jobs(
    jobs: Sequence[Job],
    *,
    device: str = "cpu",
    max_examples: int | None = None,
    seed: int = 0,
    profile: str = "ci",
    shrink_draws: int | None,
    timeout: float = DEFAULT_TIMEOUT,
    workers: int | None = None,
    start_method: str = "fork",
    progress: Callable[[int, int, Job, Any], None] | None = None,
    stop: Callable[[Job, Any], bool] | None = None,
    warnings: Counter | None = None,
    pool: Workers | None = None,
) -> list[Any]:
    """Run ``jobs`` in ``workers`` processes (default: the CPU count); results in job order.
    ``pool``: keep the workers for the next call (:class:`Workers`).

    A property job gives a ``PropertyResult`` (``inconclusive`` when its time ran out, module
    docstring; failing when its worker crashed). A :data:`PROBE` job gives the ``ProbeReport``,
    or a string (the reason) when the probe could not finish; a :data:`PRECALL` job the tiny
    call's verdict, or a string (it hung, crashed, or its variant could not be built).
    ``stop(job, result)`` True leaves the jobs not yet started unrun (their results None);
    ``warnings`` (a Counter) receives every warning the workers recorded.
    """
    from verify.engine.run import result_for

    settings = dict(
        device=device,
        max_examples=max_examples,
        seed=seed,
        profile=profile,
        shrink_draws=shrink_draws,
        timeout=timeout,
    )
    ctx = mp.get_context(start_method)
    results: list[Any] = [None] * len(jobs)
    pending = [(i, job, 1) for i, job in enumerate(jobs)][::-1]  # popped from the end: in order
    n = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    slots: list[_Slot] = [] if pool is None else pool.adopt(settings, start_method)
    done = 0

    def finish(index: int, job: Job, res: Any) -> None:
        nonlocal done
        results[index] = res
        done += 1
        if progress:
            progress(done, len(jobs), job, res)
        if stop is not None and stop(job, res):
            pending.clear()

    def crashed(job: Job, code) -> Any:
        if job.property_id == PRECALL:
            return f"crashed on a 2-token call: the worker died (exit code {code})"
        why = f"the worker crashed (exit code {code})"
        if job.property_id == PROBE:
            return why
        if code == -signal.SIGKILL:  # not ours (the watchdog's kills are handled apart)
            return result_for(job.property_id, job.dtype, device, status="inconclusive",
                              reason=killed_reason())  # fmt: skip
        return result_for(job.property_id, job.dtype, device, status="fail", reason=why)

    try:
        while pending or any(s.job for s in slots):
            busy_count = sum(s.job is not None for s in slots)
            while len(slots) < min(n, busy_count + len(pending)):
                slots.append(_Slot(ctx, settings))
            for slot in slots:
                if slot.job is None and pending:
                    slot.submit(*pending.pop())
            busy = [s for s in slots if s.job is not None]
            now = time.monotonic()
            limits = {s: s.started + s.limit(timeout) for s in busy}
            ready = wait([s.conn for s in busy], max(0.0, min(limits.values()) - now))
            for slot in busy:
                index, job, attempt = slot.job
                if slot.conn in ready:
                    try:
                        res = slot.conn.recv()
                    except (EOFError, OSError):
                        res = None
                    if res is None:  # the worker died mid-job
                        slot.proc.join(5)
                        finish(index, job, crashed(job, slot.proc.exitcode))
                        slot.stop(kill=True)
                        slots.remove(slot)
                        continue
                    if res == START:
                        slot.started, slot.loading = time.monotonic(), False
                        continue
                    if isinstance(res, tuple) and res and res[0] == WARNINGS:
                        if warnings is not None:
                            warnings.update(res[1])
                        continue
                    if isinstance(res, tuple) and res and res[0] == "load-error":
                        res = f"could not build the variant: {res[1]}"
                    slot.job = None
                    finish(index, job, res)
                elif time.monotonic() >= limits[slot]:
                    limit, loading = slot.limit(timeout), slot.loading
                    slot.stop(kill=True)
                    slots.remove(slot)
                    if job.property_id == PROBE and attempt < RETRIES + 1:
                        pending.append((index, job, attempt + 1))  # a loaded machine: once more
                        continue
                    finish(index, job, _timed_out(job, device, timeout, limit, loading))
    finally:
        for slot in list(slots):
            if pool is None or slot.job is not None:  # a kept worker must be idle
                slot.stop(kill=slot.job is not None)
                slots.remove(slot)
    return results
