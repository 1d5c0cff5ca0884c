"""Jobs in worker processes, each under one watchdog.

Workers take one job at a time from the parent (so the load balances itself) and send back
its result. A job that raises inside a check is the check's concern (``run.run_job``); a worker
that hangs past the time limit or dies fails only the job it was running, with the reason, and a
fresh worker takes the rest. Each worker runs one torch thread and loads the hypothesis profile;
variants are built once per worker and loader.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Any

from verify.engine.jobs import PROBE, Job

#: seconds one job may run before the watchdog kills its worker
DEFAULT_TIMEOUT = 60.0
#: seconds a fresh worker may take to import torch and build the variant, at least
LOAD_TIMEOUT = 120.0
#: a job the watchdog stopped runs once more with twice the time before it fails (a hang is the
#: variant's; a slow, loaded machine is not)
RETRIES = 1
#: what a worker sends when a job's variant is built and the job itself starts
START = ("start",)


def _load() -> str:
    """The machine's load, for the watchdog's message."""
    try:
        one, five, _ = os.getloadavg()
    except OSError:  # pragma: no cover - not on every platform
        return "load average unavailable"
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def _worker(conn, settings: dict[str, Any]) -> None:
    """Worker process: receive jobs until ``None``, send each result."""
    import torch

    from verify import profiles
    from verify.engine.run import result_for, run_job

    torch.set_num_threads(1)
    profiles.load(settings["profile"])
    variants: dict[Any, Any] = {}
    while True:
        job = conn.recv()
        if job is None:
            break
        key = job.loader
        if key not in variants:
            try:
                variants[key] = ("ok", job.loader())
            except BaseException as exc:  # noqa: BLE001 - reported as the job's failure
                variants[key] = ("error", f"{type(exc).__name__}: {exc}")
        kind, variant = variants[key]
        conn.send(START)  # the variant is built: the job's own time starts now
        if kind == "error":
            if job.property_id == PROBE:
                conn.send(("load-error", variant))
            else:
                conn.send(
                    result_for(
                        job.property_id,
                        job.dtype,
                        settings["device"],
                        status="fail",
                        reason=f"could not build the variant: {variant}",
                    )
                )
            continue
        conn.send(
            run_job(
                variant,
                job,
                device=settings["device"],
                max_examples=settings["max_examples"],
                seed=settings["seed"],
                shrink_draws=settings["shrink_draws"],
            )
        )
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
        least ``LOAD_TIMEOUT``), then the job itself: ``timeout``, doubled on a retry."""
        base = timeout * 2 ** (self.job[2] - 1)
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
) -> list[Any]:
    """Run ``jobs`` in ``workers`` processes (default: the CPU count); results in job order.

    A property job gives a ``PropertyResult``; a watchdog timeout or a crashed worker gives a
    failing one that says so. A :data:`PROBE` job gives the ``ProbeReport``, or a string (the
    reason) when the probe could not finish.
    """
    from verify.engine.run import result_for

    settings = dict(
        device=device,
        max_examples=max_examples,
        seed=seed,
        profile=profile,
        shrink_draws=shrink_draws,
    )
    ctx = mp.get_context(start_method)
    results: list[Any] = [None] * len(jobs)
    pending = [(i, job, 1) for i, job in enumerate(jobs)][::-1]  # popped from the end: in order
    n = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    slots: list[_Slot] = []
    done = 0

    def finish(index: int, job: Job, res: Any) -> None:
        nonlocal done
        results[index] = res
        done += 1
        if progress:
            progress(done, len(jobs), job, res)

    def failed(job: Job, why: str) -> Any:
        if job.property_id == PROBE:
            return why
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
                        code = slot.proc.exitcode
                        finish(index, job, failed(job, f"the worker crashed (exit code {code})"))
                        slot.stop(kill=True)
                        slots.remove(slot)
                        continue
                    if res == START:
                        slot.started, slot.loading = time.monotonic(), False
                        continue
                    if isinstance(res, tuple) and res and res[0] == "load-error":
                        res = f"could not build the variant: {res[1]}"
                    slot.job = None
                    finish(index, job, res)
                elif time.monotonic() >= limits[slot]:
                    limit = slot.limit(timeout)
                    slot.stop(kill=True)
                    slots.remove(slot)
                    if attempt < RETRIES + 1:  # a loaded machine gets one more, longer, try
                        pending.append((index, job, attempt + 1))
                        continue
                    stage = (
                        f"building the variant took more than {limit:.0f} s"
                        if slot.loading
                        else f"no result within {timeout:.0f} s, nor within {limit:.0f} s on a "
                        "retry"
                    )
                    why = f"hung: {stage} (the watchdog killed the worker; {_load()})"
                    finish(index, job, failed(job, why))
    finally:
        for slot in slots:
            slot.stop()
    return results
