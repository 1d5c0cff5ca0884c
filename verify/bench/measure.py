"""Measuring one thing: analytic and counted FLOPs, interleaved timing, peak memory, profiles.

Nothing here knows the benchmark's cells; ``verify.bench.collect`` builds them and times them
with ``measure``.
"""

from __future__ import annotations

import gc
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from verify.bench.config import MATMUL_OPS


# ---------------------------------------------------------------------------------- FLOPs
def chunked_flops(
    T: int, *, order: int, d: int, d_v: int, chunk_size: int, basis: str = "symmetric"
) -> dict[str, int]:
    """FLOPs of one causal ``taylor_attention(form='chunked')`` call per (batch, head).

    Counted from the code path (``verify.attention._scan._causal_chunks``,
    ``feature_maps._monomials_into``, ``_kernels.taylor_kernel``), T = n C + r split into n whole
    chunks of C and a partial chunk of r, m = sum_n m_n features (D1 block sizes), one multiply or
    add = 1 FLOP, a multiply-add = 2. Executed work is counted (the full C x C score block,
    although the causal mask keeps only its lower triangle).

    Returns:
        dict with ``matmul`` (scores 2 d sum L^2, within-chunk A V 2 (d_v+1) sum L^2, chunk
        states and reads 4 T m (d_v+1)), ``elementwise`` (Horner 2N sum L^2, scale T d,
        monomials 2 T sum_{n>=2} m_n for q and k, state weights and cumsum 3 n_c m (d_v+1),
        baddbmm's add T (d_v+1), the division T d_v) and ``total``; sum L^2 = n C^2 + r^2 and
        n_c = n + [r > 0].

    Raises:
        ValueError: a size below 1 (T >= 1, chunk_size >= 1, order >= 0).
    """
    from verify.attention.feature_maps import taylor_block_sizes

    for name, value, low in (("T", T, 1), ("d", d, 1), ("d_v", d_v, 1), ("order", order, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size: expected an int >= 1, got {chunk_size!r}")
    sizes = taylor_block_sizes(order, d, basis)
    m, dv1 = sum(sizes), d_v + 1
    n, r = divmod(T, chunk_size)
    sq = n * chunk_size**2 + r * r
    chunks = n + (r > 0)
    matmul = 2 * d * sq + 2 * dv1 * sq + 4 * T * m * dv1
    elementwise = (
        2 * order * sq + T * d + 2 * T * sum(sizes[2:]) + 3 * chunks * m * dv1 + T * dv1 + T * d_v
    )
    return {"matmul": matmul, "elementwise": elementwise, "total": matmul + elementwise}


def counted_matmul_flops(fn: Callable[[], object]) -> int:
    """Matmul FLOPs of ``fn()`` as ``torch.utils.flop_counter.FlopCounterMode`` counts them."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


# ---------------------------------------------------------------------------------- timing
@dataclass
class Cell:
    """One timed thing: ``fn()`` timed ``repeats`` times; ``units`` items per call."""

    key: str
    fn: Callable[[], object]
    units: int = 1
    times: list[float] = field(default_factory=list)


def _timed(fn: Callable[[], object]) -> float:
    enabled = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    finally:
        if enabled:
            gc.enable()


def measure(cells: list[Cell], repeats: int, log: Callable[[str], None]) -> None:
    """Warm each cell up (once, three times if a call takes under 50 ms), then ``repeats``
    interleaved rounds over all cells, the starting cell rotated each round."""
    for c in cells:
        if _timed(c.fn) < 0.05:
            _timed(c.fn)
            _timed(c.fn)
    for r in range(repeats):
        s = r % len(cells)
        t0 = time.perf_counter()
        for c in cells[s:] + cells[:s]:
            c.times.append(_timed(c.fn))
        log(f"  repeat {r + 1}/{repeats}: {time.perf_counter() - t0:.1f} s")
        gc.collect()


def state_bytes(st) -> dict[str, int]:
    def nbytes(t):
        return 0 if t is None else t.numel() * t.element_size()

    return {
        "numerator": nbytes(st.numerator),
        "denominator": nbytes(st.denominator),
        "count": nbytes(st.count),
        "projection": nbytes(st.projection),
    }


def peak_rss_mib() -> float:
    # Linux reports ru_maxrss in KiB (macOS in bytes)
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(kib / (1024 * 1024) if sys.platform == "darwin" else kib / 1024, 1)


def profile_top(fn: Callable[[], object], top: int, calls: int = 5) -> dict:
    """torch.profiler (CPU) of ``calls`` separately profiled calls after a warm-up call.

    Per op, the median over the calls of its self CPU time (robust to a preemption spike in one
    call on a shared machine); shares are of the sum of those medians. Returns the ``top`` ops.
    """
    import numpy as np
    from torch.profiler import ProfilerActivity, profile

    fn()
    runs = []
    for _ in range(calls):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        runs.append({e.key: (e.count, e.self_cpu_time_total) for e in prof.key_averages()})
    ops = sorted(set().union(*runs))
    self_us = {op: float(np.median([r.get(op, (0, 0.0))[1] for r in runs])) for op in ops}
    count = {op: int(np.median([r.get(op, (0, 0))[0] for r in runs])) for op in ops}
    total = sum(self_us.values())
    matmul = sum(t for op, t in self_us.items() if op in MATMUL_OPS)
    order = sorted(ops, key=lambda op: self_us[op], reverse=True)
    return {
        "profiled_calls": calls,
        "total_self_ms": total / 1e3,
        "op_calls": sum(count.values()),
        "matmul_share": matmul / total if total else 0.0,
        "top": [
            {
                "op": op,
                "calls": count[op],
                "self_ms": self_us[op] / 1e3,
                "share": self_us[op] / total if total else 0.0,
            }
            for op in order[:top]
        ],
    }


def cprofile_top(fn: Callable[[], object], top: int) -> dict:
    """cProfile of one call: the ``top`` Python functions by own time (``tottime``)."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    stats = pstats.Stats(prof)
    total = stats.total_tt
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)

    def where(key):
        filename, line, name = key
        if filename == "~":
            return name
        parts = Path(filename).parts
        return f"{'/'.join(parts[-2:])}:{line}({name})"

    return {
        "total_s": total,
        "function_calls": stats.total_calls,
        "top": [
            {
                "function": where(key),
                "calls": nc,
                "tottime_ms": tt * 1e3,
                "cumtime_ms": ct * 1e3,
                "share": tt / total if total else 0.0,
            }
            for key, (_, nc, tt, ct, _) in rows[:top]
        ],
    }
