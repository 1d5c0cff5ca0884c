"""``attn-theory bench``: the Taylor-2 attention forms timed side by side (issue 3).

Writes ``benchmarks.md`` and ``benchmarks.json`` into the report directory (and nothing else:
``verify.render.staging.staged_write`` keeps every other report file). These two files carry
timings, so unlike the rest of ``reports/`` they are not byte-identical on rerun (DESIGN.md).

Method (one process, fp32, B = 1, H = 4, d = d_v = 16, causal):
- a correctness gate first: the chunked, parallel and recurrent forms and flash-linear-attention's
  ``naive_chunk_based`` against a float64 reference, within the derived D10 bound
  (``verify.errors.attention_error_bound``); a failure stops the run before anything is timed;
- every cell (a method at a length) is warmed up, then timed in interleaved repeats: each repeat
  visits every cell once, the starting cell rotated, so machine noise hits all methods alike;
- medians and interquartile ranges; ratios are paired per repeat (other / chunked in the same
  repeat) before the median is taken, so they are what the report leads with;
- ``torch.set_num_threads`` fixed (default 1), ``torch.inference_mode``, garbage collection off
  inside a timed call.

FLOPs of the chunked form are counted analytically (``chunked_flops``); its matmul part is
checked against ``torch.utils.flop_counter.FlopCounterMode`` on the same call.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import resource
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

SCHEMA = "attn-theory/benchmarks/1"
OWNED = ("benchmarks.md", "benchmarks.json")
METHODS = ("chunked", "recurrent", "parallel", "sdpa", "fla_naive_chunk_based")
METHOD_TEXT = {
    "chunked": "taylor_attention(form='chunked') -- Taylor-2, symmetric basis",
    "recurrent": "taylor_attention(form='recurrent') -- the per-token recurrence (token loop)",
    "parallel": "taylor_attention(form='parallel') -- kappa_2 on the T x T scores",
    "sdpa": "torch.nn.functional.scaled_dot_product_attention(is_causal=True) -- softmax",
    "fla_naive_chunk_based": "fla.ops.based.naive.naive_chunk_based -- pure-torch Taylor-2",
}
MATMUL_OPS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")
#: the linear-growth goal: fitted exponent of chunked time in T at most this (stated in advance:
#: 2^0.1 ~ 7 % more time per token at each doubling of T)
LINEAR_EXPONENT_MAX = 1.1
#: lengths from which the growth fit is judged: shorter calls are dominated by fixed overhead,
#: which flattens the slope and would flatter the result
GROWTH_FIT_MIN_T = 1024


@dataclass(frozen=True)
class Config:
    """What one run measures (``FULL`` by default, ``QUICK`` for ``--quick``)."""

    batch: int = 1
    heads: int = 4
    d: int = 16
    d_v: int = 16
    order: int = 2
    chunk_size: int = 64  # taylor_attention's default
    fla_chunk: int = 256  # naive_chunk_based's default
    lengths: tuple[int, ...] = (256, 1024, 2048, 4096, 8192, 16384)
    parallel_max_t: int = 4096
    goal_t: int = 4096
    sdpa_goal_t: int = 8192
    fla_goal_ratio: float = 1.5
    recurrent_goal_ratio: float = 20.0
    orders: tuple[int, ...] = (1, 2, 3, 4)
    orders_t: int = 1024
    decode_t: int = 1024
    decode_steps: int = 128
    matmul_n: int = 1024
    sanity_t: int = 256
    sanity_heads: int = 1
    repeats: int = 7
    threads: int = 1
    seed: int = 0
    quick: bool = False
    top_ops: int = 10
    profile_recurrent_t: int = 256  # per-token op counts do not depend on T
    profile_calls: int = 5
    chunk_sweep: tuple[int, ...] = (32, 64, 128, 256)


FULL = Config()
QUICK = replace(
    FULL,
    lengths=(256, 512),
    orders_t=64,
    decode_t=64,
    decode_steps=8,
    matmul_n=256,
    repeats=3,
    quick=True,
    profile_recurrent_t=64,
    profile_calls=3,
)


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


def summary(values: list[float]) -> dict[str, float]:
    """Median and quartiles (linear interpolation, numpy's default)."""
    import numpy as np

    q1, med, q3 = np.percentile(np.asarray(values, dtype=np.float64), [25, 50, 75])
    return {"median": float(med), "q1": float(q1), "q3": float(q3)}


def loglog_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y on log x (>= 2 points with distinct x)."""
    import numpy as np

    lx, ly = np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float))
    return float(np.polyfit(lx, ly, 1)[0])


def crossover(lengths: list[int], ratios: list[float]) -> dict[str, object]:
    """First T where ratio (other / chunked) reaches 1, log-log interpolated between grid points.

    Returns ``{"T": value | None, "how": text}``: ``T`` None when the ratio stays below 1.
    """
    if ratios[0] >= 1.0:
        return {"T": None, "how": f"chunked already faster at the smallest T = {lengths[0]}"}
    for (t0, r0), (t1, r1) in zip(zip(lengths, ratios), zip(lengths[1:], ratios[1:])):
        if r0 < 1.0 <= r1:
            frac = -math.log(r0) / (math.log(r1) - math.log(r0))
            t = math.exp(math.log(t0) + frac * (math.log(t1) - math.log(t0)))
            return {
                "T": round(t),
                "how": f"log-log interpolation of the median ratio between T = {t0} ({r0:.3g}) "
                f"and T = {t1} ({r1:.3g})",
            }
    return {"T": None, "how": f"chunked not faster at any measured T <= {lengths[-1]}"}


# ---------------------------------------------------------------------------------- pieces
def _fla_naive_chunk_based():
    """``naive_chunk_based`` or (None, reason) if flash-linear-attention is not installed."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from fla.ops.based.naive import naive_chunk_based
    except Exception as err:  # ImportError, or triton failing at import on this platform
        return None, f"{type(err).__name__}: {err}"
    return naive_chunk_based, None


def _inputs(cfg: Config, T: int, heads: int | None = None, dtype=None):
    import torch

    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + T)
    shape = (cfg.batch, cfg.heads if heads is None else heads, T)
    dt = torch.float32 if dtype is None else dtype
    q = torch.randn(shape + (cfg.d,), generator=g, dtype=dt)
    k = torch.randn(shape + (cfg.d,), generator=g, dtype=dt)
    v = torch.randn(shape + (cfg.d_v,), generator=g, dtype=dt)
    return q, k, v


def _method_fn(cfg: Config, name: str, q, k, v, fla):
    import torch.nn.functional as F

    from verify.attention import taylor_attention

    if name == "sdpa":
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if name == "fla_naive_chunk_based":
        return lambda: fla(q, k, v, chunk_size=cfg.fla_chunk)
    kw = dict(order=cfg.order, causal=True, form=name)
    if name == "chunked":
        kw["chunk_size"] = cfg.chunk_size
    return lambda: taylor_attention(q, k, v, **kw)


def _chunked_fn(cfg: Config, q, k, v, chunk_size: int):
    from verify.attention import taylor_attention

    return lambda: taylor_attention(
        q, k, v, order=cfg.order, causal=True, form="chunked", chunk_size=chunk_size
    )


def _applies(cfg: Config, name: str, T: int, fla) -> str | None:
    """None if ``name`` runs at length T, else the reason it does not."""
    if name == "parallel" and T > cfg.parallel_max_t:
        return f"parallel form only up to T = {cfg.parallel_max_t} (T x T weights)"
    if name == "fla_naive_chunk_based":
        if fla is None:
            return "flash-linear-attention not installed"
        if T % cfg.fla_chunk:
            return f"T not a multiple of its chunk {cfg.fla_chunk}"
    return None


def sanity(cfg: Config, fla) -> list[dict]:
    """Each timed Taylor-2 implementation against float64, within the derived D10 bound.

    Bound: ``attention_error_bound('taylor:2', form='any', basis=None)`` (the worst form and
    basis per key, plus the float64 reference's own bound). naive_chunk_based adds 1e-6 to the
    denominator D: its result differs from N/D by |o| 1e-6 / (D + 1e-6) <= |o| 1e-6 / D, added
    to its bound (D and |o| from the float64 reference).
    """
    import numpy as np
    import torch

    from verify.attention import taylor_attention, taylor_kernel
    from verify.exact.errors import attention_error_bound

    T = cfg.sanity_t
    q, k, v = _inputs(cfg, T, heads=cfg.sanity_heads)
    q64, k64, v64 = q.double(), k.double(), v.double()
    ref = taylor_attention(q64, k64, v64, order=cfg.order, causal=True).numpy()
    w = taylor_kernel((q64 @ k64.transpose(-1, -2)) / math.sqrt(cfg.d), cfg.order)
    den = torch.tril(w).sum(-1).numpy()[..., None]
    eb = attention_error_bound(
        f"taylor:{cfg.order}", q, k, v, dtype="float32", causal=True, form="any", basis=None
    )
    shift = np.abs(ref) * 1e-6 / den
    out = {
        m: _method_fn(cfg, m, q, k, v, fla)().numpy() for m in ("chunked", "parallel", "recurrent")
    }
    if fla is not None:
        out["fla_naive_chunk_based"] = _method_fn(cfg, "fla_naive_chunk_based", q, k, v, fla)()
        out["fla_naive_chunk_based"] = out["fla_naive_chunk_based"].numpy()
    rows = []
    for name, o in out.items():
        bound = eb.bound + (shift if name == "fla_naive_chunk_based" else 0.0)
        err = np.abs(o.astype(np.float64) - ref)
        worst = float((err / bound).max())
        rows.append(
            {
                "method": name,
                "T": T,
                "max_abs_diff_vs_float64": float(err.max()),
                "max_abs_diff_vs_parallel": float(np.abs(o - out["parallel"]).max()),
                "max_error_over_bound": worst,
                "ok": bool(worst <= 1.0),
            }
        )
    return rows


def _state_bytes(st) -> dict[str, int]:
    def nbytes(t):
        return 0 if t is None else t.numel() * t.element_size()

    return {
        "numerator": nbytes(st.numerator),
        "denominator": nbytes(st.denominator),
        "count": nbytes(st.count),
        "projection": nbytes(st.projection),
    }


def _peak_rss_mib() -> float:
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


# ---------------------------------------------------------------------------------- the run
def collect(cfg: Config, log: Callable[[str], None] = print) -> dict:
    """Run the whole benchmark under ``cfg`` and return the JSON document (no files written).

    Raises:
        RuntimeError: the correctness gate failed (nothing is timed then).
    """
    import torch

    from derivations import state_size as d5
    from verify.attention import state as st
    from verify.render.metadata import environment

    t_start = time.perf_counter()
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    fla, fla_reason = _fla_naive_chunk_based()
    with torch.inference_mode():
        log(f"correctness gate at T = {cfg.sanity_t}")
        gate = sanity(cfg, fla)
        bad = [r for r in gate if not r["ok"]]
        if bad:
            raise RuntimeError(
                "correctness gate failed, nothing timed: "
                + "; ".join(
                    f"{r['method']} error/bound {r['max_error_over_bound']:.3g}" for r in bad
                )
            )
        rss_gate = _peak_rss_mib()

        # -- orders 1..N: symmetric vs tensor basis (first, so its peak RSS is its own) --------
        log(f"orders {cfg.orders} at T = {cfg.orders_t}")
        q, k, v = _inputs(cfg, cfg.orders_t)
        order_cells, order_rows = [], []
        for n in cfg.orders:
            for basis in ("symmetric", "tensor"):

                def fn(n=n, basis=basis):
                    return st.prefill(
                        q, k, v, kernel=f"taylor:{n}", form="chunked",
                        chunk_size=cfg.chunk_size, basis=basis,
                    )  # fmt: skip

                _, state = fn()
                b = _state_bytes(state)
                itemsize = state.numerator.element_size()
                d5_numbers = d5.state_numbers(n, cfg.d, cfg.d_v, basis)
                d5_bytes = d5_numbers * cfg.batch * cfg.heads * itemsize
                order_rows.append(
                    {
                        "order": n,
                        "basis": basis,
                        "features": sum(state.block_sizes),
                        "state_bytes": b,
                        "state_bytes_total": sum(b.values()),
                        "d5_numbers_per_head": d5_numbers,
                        "d5_bytes": d5_bytes,
                        "matches_d5": b["numerator"] + b["denominator"] == d5_bytes,
                        "kv_cache_crossover_T": d5.crossover_length(n, cfg.d, cfg.d_v, basis),
                    }
                )
                order_cells.append(Cell(f"prefill/{n}/{basis}", fn))
        measure(order_cells, cfg.repeats, log)
        for row, c in zip(order_rows, order_cells):
            row["time_s"] = summary(c.times)
            row["times_s"] = c.times
        rss_orders = _peak_rss_mib()

        # -- Taylor-2 forms against T, SDPA, fla, decode, matmul -----------------------------
        log(f"forms at T = {cfg.lengths}")
        cells: list[Cell] = []
        skipped: dict[str, dict[str, str]] = {}
        flop_rows = []
        for T in cfg.lengths:
            q, k, v = _inputs(cfg, T)
            for name in METHODS:
                why = _applies(cfg, name, T, fla)
                if why is not None:
                    skipped.setdefault(str(T), {})[name] = why
                    continue
                cells.append(Cell(f"{name}/{T}", _method_fn(cfg, name, q, k, v, fla), units=T))
            analytic = chunked_flops(
                T, order=cfg.order, d=cfg.d, d_v=cfg.d_v, chunk_size=cfg.chunk_size
            )
            bh = cfg.batch * cfg.heads
            counted = counted_matmul_flops(_method_fn(cfg, "chunked", q, k, v, fla))
            flop_rows.append(
                {
                    "T": T,
                    "analytic_total": analytic["total"] * bh,
                    "analytic_matmul": analytic["matmul"] * bh,
                    "analytic_elementwise": analytic["elementwise"] * bh,
                    "flop_counter_matmul": counted,
                    "matmul_count_agrees": counted == analytic["matmul"] * bh,
                }
            )
        # chunk-size sweep of the chunked form at the goal length
        t_goal = cfg.goal_t if cfg.goal_t in cfg.lengths else max(cfg.lengths)
        q, k, v = _inputs(cfg, t_goal)
        for C in cfg.chunk_sweep:
            if C != cfg.chunk_size:
                cells.append(Cell(f"chunk/{C}", _chunked_fn(cfg, q, k, v, C), units=t_goal))
        # streaming decode: state.step per token after a prefill of decode_t tokens
        qd, kd, vd = _inputs(cfg, cfg.decode_t + cfg.decode_steps)
        T0 = cfg.decode_t
        _, st0 = st.prefill(
            qd[:, :, :T0], kd[:, :, :T0], vd[:, :, :T0], kernel=f"taylor:{cfg.order}",
            form="chunked", chunk_size=cfg.chunk_size,
        )  # fmt: skip

        def decode():
            s = st0
            for t in range(T0, T0 + cfg.decode_steps):
                _, s = st.step(s, qd[:, :, t], kd[:, :, t], vd[:, :, t])
            return s

        cells.append(Cell("decode", decode, units=cfg.decode_steps))
        a = torch.randn(cfg.matmul_n, cfg.matmul_n, generator=torch.Generator().manual_seed(1))
        b_ = torch.randn(cfg.matmul_n, cfg.matmul_n, generator=torch.Generator().manual_seed(2))
        c_ = torch.empty(cfg.matmul_n, cfg.matmul_n)
        cells.append(Cell("matmul", lambda: torch.matmul(a, b_, out=c_)))
        measure(cells, cfg.repeats, log)
        rss_final = _peak_rss_mib()

        # -- profiles (after timing, so they do not disturb it) ------------------------------
        log("profiles")
        q, k, v = _inputs(cfg, t_goal)
        prof_chunked = profile_top(
            _method_fn(cfg, "chunked", q, k, v, fla), cfg.top_ops, cfg.profile_calls
        )
        prof_chunked["T"] = t_goal
        q, k, v = _inputs(cfg, cfg.profile_recurrent_t)
        # the recurrent profile holds ~80 events per token; summarizing them is the slow part
        prof_rec = profile_top(
            _method_fn(cfg, "recurrent", q, k, v, fla), cfg.top_ops, min(3, cfg.profile_calls)
        )
        prof_rec["T"] = cfg.profile_recurrent_t
        prof_decode = cprofile_top(decode, cfg.top_ops)
        prof_decode["T"] = cfg.decode_t
        prof_decode["steps"] = cfg.decode_steps

    by_key = {c.key: c for c in cells}
    doc = analyse(cfg, by_key, skipped, flop_rows, gate, order_rows, prof_chunked, prof_rec)
    doc["profiles"]["decode_cprofile"] = prof_decode
    doc["fla"] = {"available": fla is not None, "reason": fla_reason}
    doc["memory"] = {
        "peak_rss_mib_after_gate": rss_gate,
        "peak_rss_mib_after_orders": rss_orders,
        "peak_rss_mib_final": rss_final,
        "how": "resource.getrusage(RUSAGE_SELF).ru_maxrss: the process's peak resident set, "
        "monotone: after the gate = imports + the float64 correctness gate; after the orders "
        "section = the largest of those and the order-N prefills; final = also the T x T "
        "parallel form and the other methods",
    }
    load_end = os.getloadavg() if hasattr(os, "getloadavg") else None
    doc["load_average"] = {
        "start": None if load_start is None else [round(x, 2) for x in load_start],
        "end": None if load_end is None else [round(x, 2) for x in load_end],
        "cores": os.cpu_count(),
    }
    doc["runtime_s"] = round(time.perf_counter() - t_start, 1)
    doc["environment"] = environment(seed=cfg.seed)
    return doc


def analyse(cfg, cells, skipped, flop_rows, gate, order_rows, prof_chunked, prof_rec) -> dict:
    """Turn the raw timings into the report's numbers, goals and explanations."""
    lengths = list(cfg.lengths)
    timings, ratios = [], []
    for T in lengths:
        base = cells[f"chunked/{T}"].times
        for name in METHODS:
            c = cells.get(f"{name}/{T}")
            if c is None:
                continue
            s = summary(c.times)
            timings.append(
                {
                    "T": T,
                    "method": name,
                    "time_s": s,
                    "us_per_token": s["median"] / T * 1e6,
                    "runs": len(c.times),
                    "times_s": c.times,
                }
            )
            if name != "chunked":
                r = summary([x / y for x, y in zip(c.times, base)])
                ratios.append({"T": T, "method": name, **r})

    def ratio(name, T):
        for r in ratios:
            if r["method"] == name and r["T"] == T:
                return r
        return None

    def med(name, T):
        return summary(cells[f"{name}/{T}"].times)["median"]

    # growth exponent of chunked time in T: all T, T >= GROWTH_FIT_MIN_T, and per repeat
    fit_t = [T for T in lengths if T >= GROWTH_FIT_MIN_T]
    if len(fit_t) < 2:
        fit_t = lengths
    chunked_med = [med("chunked", T) for T in lengths]
    per_repeat = [
        loglog_slope(fit_t, [cells[f"chunked/{T}"].times[r] for T in fit_t])
        for r in range(cfg.repeats)
    ]
    growth = {
        "exponent_all_T": loglog_slope(lengths, chunked_med) if len(lengths) > 1 else None,
        "exponent": loglog_slope(fit_t, [med("chunked", T) for T in fit_t]),
        "fit_T": fit_t,
        "exponent_per_repeat": summary(per_repeat),
        "local_slopes": [
            {"from_T": t0, "to_T": t1, "slope": loglog_slope([t0, t1], [m0, m1])}
            for t0, t1, m0, m1 in zip(lengths, lengths[1:], chunked_med, chunked_med[1:])
        ],
        "how": "least squares of log(median time) on log(T); the goal is judged on T >= "
        f"{GROWTH_FIT_MIN_T} (shorter calls are dominated by fixed per-call overhead)",
    }
    sdpa_ratios = [ratio("sdpa", T)["median"] for T in lengths]
    cross = crossover(lengths, sdpa_ratios)

    mm = summary(cells["matmul"].times)
    mm_flops = 2 * cfg.matmul_n**3
    matmul_gflops = mm_flops / mm["median"] / 1e9
    for row in flop_rows:
        row["gflops_per_s"] = row["analytic_total"] / med("chunked", row["T"]) / 1e9
        row["fraction_of_matmul"] = row["gflops_per_s"] / matmul_gflops

    dec = summary([t / cfg.decode_steps for t in cells["decode"].times])
    decode = {
        "T": cfg.decode_t,
        "steps": cfg.decode_steps,
        "ms_per_token": {k: v * 1e3 for k, v in dec.items()},
        "recurrent_form_ms_per_token": (
            med("recurrent", cfg.decode_t) / cfg.decode_t * 1e3
            if f"recurrent/{cfg.decode_t}" in cells
            else None
        ),
        "step_over_recurrent_form": (
            dec["median"] / (med("recurrent", cfg.decode_t) / cfg.decode_t)
            if f"recurrent/{cfg.decode_t}" in cells
            else None
        ),
        "how": f"state.step called {cfg.decode_steps} times after a chunked prefill of "
        f"{cfg.decode_t} tokens; time per call / {cfg.decode_steps}",
    }

    t_goal = prof_chunked["T"]
    base = cells[f"chunked/{t_goal}"].times
    sweep = []
    for C in cfg.chunk_sweep:
        times = base if C == cfg.chunk_size else cells[f"chunk/{C}"].times
        sweep.append(
            {
                "chunk_size": C,
                "time_s": summary(times),
                "time_over_default": summary([x / y for x, y in zip(times, base)]),
            }
        )
    # the chunked profile's matmul ops: their achieved rate on the analytic matmul FLOPs
    mm_self_s = prof_chunked["matmul_share"] * prof_chunked["total_self_ms"] / 1e3
    goal_flops = next(r for r in flop_rows if r["T"] == t_goal)
    prof_chunked["matmul_gflops_per_s"] = (
        goal_flops["analytic_matmul"] / mm_self_s / 1e9 if mm_self_s > 0 else None
    )
    goals = _goals(cfg, lengths, ratio, growth, cross)
    ctx = {
        "med": med,
        "ratio": ratio,
        "flop_rows": flop_rows,
        "matmul_gflops": matmul_gflops,
        "prof_c": prof_chunked,
        "prof_r": prof_rec,
        "sweep": sweep,
    }
    limits = _limits(cfg, goals, ctx)
    doc = {
        "schema": SCHEMA,
        "command": "attn-theory bench" + (" --quick" if cfg.quick else ""),
        "quick": cfg.quick,
        "config": {**asdict(cfg), "dtype": "float32", "causal": True, "scale": "1/sqrt(d)"},
        "methods": METHOD_TEXT,
        "skipped": skipped,
        "correctness": gate,
        "timings": timings,
        "ratios": ratios,
        "crossover_sdpa": cross,
        "growth": growth,
        "chunk_sweep": {"T": t_goal, "rows": sweep},
        "flops": {
            "how": chunked_flops.__doc__.split("Returns:")[0].strip(),
            "matmul_reference": {
                "n": cfg.matmul_n,
                "flops": mm_flops,
                "time_s": mm,
                "gflops_per_s": matmul_gflops,
            },
            "chunked": flop_rows,
        },
        "decode": decode,
        "orders": order_rows,
        "goals": goals,
        "limits": limits,
        "profiles": {"chunked": prof_chunked, "recurrent": prof_rec},
    }
    return doc


def _goal_t(want: int, lengths: list[int]) -> tuple[int, str]:
    if want in lengths:
        return want, ""
    got = max(lengths)
    return got, f"quick run: evaluated at T = {got}, not the goal's T = {want}"


def _goals(cfg, lengths, ratio, growth, cross) -> list[dict]:
    goals = []
    t, note = _goal_t(cfg.goal_t, lengths)
    r = ratio("fla_naive_chunk_based", t)
    goals.append(
        {
            "goal": f"chunked >= {cfg.fla_goal_ratio}x faster than naive_chunk_based at "
            f"T = {cfg.goal_t}",
            "T": t,
            "measured": None if r is None else r["median"],
            "iqr": None if r is None else [r["q1"], r["q3"]],
            "met": None if r is None else bool(r["median"] >= cfg.fla_goal_ratio),
            "note": note if r is not None else "flash-linear-attention not measured",
        }
    )
    r = ratio("recurrent", t)
    goals.append(
        {
            "goal": f"chunked >= {cfg.recurrent_goal_ratio:g}x faster than the per-token "
            f"recurrence at T = {cfg.goal_t}",
            "T": t,
            "measured": r["median"],
            "iqr": [r["q1"], r["q3"]],
            "met": bool(r["median"] >= cfg.recurrent_goal_ratio),
            "note": note,
        }
    )
    big = [T for T in lengths if T >= cfg.sdpa_goal_t]
    note = ""
    if not big:
        big, note = [max(lengths)], f"quick run: no T >= {cfg.sdpa_goal_t}; largest T used"
    rs = [ratio("sdpa", T) for T in big]
    goals.append(
        {
            "goal": f"chunked beats SDPA for T >= {cfg.sdpa_goal_t}",
            "T": big,
            "measured": min(r["median"] for r in rs),
            "iqr": [min(r["q1"] for r in rs), min(r["q3"] for r in rs)],
            "met": bool(all(r["median"] > 1.0 for r in rs)),
            "note": (note + "; " if note else "")
            + f"smallest median SDPA/chunked ratio over T in {big}; crossover T ~ "
            + (str(cross["T"]) if cross["T"] is not None else "n/a")
            + f" ({cross['how']})",
        }
    )
    goals.append(
        {
            "goal": f"linear growth in T (fitted exponent <= {LINEAR_EXPONENT_MAX})",
            "T": growth["fit_T"],
            "measured": growth["exponent"],
            "iqr": [growth["exponent_per_repeat"]["q1"], growth["exponent_per_repeat"]["q3"]],
            "met": bool(growth["exponent"] <= LINEAR_EXPONENT_MAX),
            "note": "IQR over per-repeat fits; " + growth["how"],
        }
    )
    return goals


def _limits(cfg: Config, goals: list[dict], ctx: dict) -> list[dict]:
    """For each missed goal: what limits it (from the measurements) and what would close it."""
    from verify.attention.feature_maps import taylor_block_sizes

    med, prof_c, prof_r = ctx["med"], ctx["prof_c"], ctx["prof_r"]
    share = prof_c["matmul_share"]
    top = ", ".join(f"{e['op']} {e['share']:.0%}" for e in prof_c["top"][:6])
    mm_rate = ctx["matmul_gflops"]
    in_prof = prof_c.get("matmul_gflops_per_s")
    matmul_line = (
        f"In the chunked profile at T = {prof_c['T']} the matmul ops take {share:.0%} of the "
        f"self time"
        + (
            f" and run at {in_prof:.1f} GFLOP/s ({in_prof / mm_rate:.0%} of the large matmul: "
            f"skinny products such as (m x C)(C x (d_v + 1)) with m = "
            f"{sum(taylor_block_sizes(cfg.order, cfg.d))} features and d_v + 1 = {cfg.d_v + 1})"
            if in_prof
            else ""
        )
        + f"; the rest is element-wise work and data movement (top ops: {top})."
    )
    others = [r for r in ctx["sweep"] if r["chunk_size"] != cfg.chunk_size]
    best = min(others, key=lambda r: r["time_over_default"]["median"]) if others else None
    if best is None:
        sweep_line = ""
    elif best["time_over_default"]["median"] >= 1.0:
        sweep_line = (
            f"Chunk size is not the lever: the default C = {cfg.chunk_size} is the fastest of "
            f"{[r['chunk_size'] for r in ctx['sweep']]} (the next best, C = "
            f"{best['chunk_size']}, takes {best['time_over_default']['median']:.3g}x its time)."
        )
    else:
        sweep_line = (
            f"Over C in {[r['chunk_size'] for r in ctx['sweep']]} the fastest, C = "
            f"{best['chunk_size']}, takes {best['time_over_default']['median']:.3g}x the time of "
            f"the default C = {cfg.chunk_size}."
        )
    gain = 1.0 if best is None else min(1.0, best["time_over_default"]["median"])
    out = []
    for g in goals:
        if g["met"] is not False:
            continue
        T = g["T"] if isinstance(g["T"], int) else None
        if "recurrence" in g["goal"]:
            m = sum(taylor_block_sizes(cfg.order, cfg.d))
            rec_us = med("recurrent", T) / T * 1e6
            ch_us = med("chunked", T) / T * 1e6
            need = rec_us / cfg.recurrent_goal_ratio
            per_tok = prof_r["op_calls"] / prof_r["T"]
            rec_flops = 4 * m * (cfg.d_v + 1) * cfg.batch * cfg.heads
            text = (
                f"The per-token recurrence costs {rec_us:.1f} us/token with {per_tok:.0f} op "
                f"calls per token (profile at T = {prof_r['T']}); its arithmetic, 4 m (d_v + 1) "
                f"B H = {rec_flops} FLOPs per token for the state update and read, would take "
                f"{rec_flops / mm_rate / 1e3:.2f} us at the large-matmul rate: it is bound by "
                "per-op dispatch, and already vectorized over heads and features, so it is not "
                f"a slow baseline. The chunked form costs {ch_us:.2f} us/token, ratio "
                f"{g['measured']:.3g}; {cfg.recurrent_goal_ratio:g}x needs <= {need:.2f} "
                f"us/token, {ch_us / need:.2f}x faster than now. {matmul_line} {sweep_line} "
                + (
                    f"(With that chunk size the ratio would be ~{g['measured'] / gain:.3g}.) "
                    if gain < 1.0
                    else ""
                )
                + "What would close it: removing all non-matmul time would give at most "
                f"{1 / share:.2f}x (ratio ~{g['measured'] / share:.3g}), so the fix is one fused "
                "chunk kernel (monomials, Horner, mask and both products in one pass, as "
                "flash-linear-attention's Triton fused_chunk_based does on GPU; on CPU a C++ "
                "kernel or torch.compile of the chunk body) that also raises the matmul "
                "efficiency, and monomials written in the layout the products read (the "
                "copy_/cat time)."
            )
        elif "naive_chunk_based" in g["goal"]:
            text = (
                f"naive_chunk_based / chunked = {g['measured']:.3g}. {matmul_line} "
                f"{sweep_line} What would close it: the non-matmul ops above are the part to "
                "fuse."
            )
        elif "SDPA" in g["goal"]:
            rows = [r for r in ctx["flop_rows"] if r["T"] in g["T"]]
            frac = max(r["fraction_of_matmul"] for r in rows)
            text = (
                f"SDPA / chunked = {g['measured']:.3g} at T in {g['T']}: the chunked form runs "
                f"at {frac:.0%} of the large-matmul rate ({mm_rate:.1f} GFLOP/s). {matmul_line} "
                f"{sweep_line} What would close it: the fused chunk kernel described above."
            )
        else:
            text = (
                f"Fitted exponent {g['measured']:.3f} > {LINEAR_EXPONENT_MAX}. The algorithm is "
                "O(T) (the chunk count grows linearly, the per-chunk work is fixed), so "
                "super-linear time comes from the memory hierarchy as the per-call tensors "
                f"outgrow the caches. {matmul_line} What would close it: a fixed working set "
                "per group of chunks (outputs written in place instead of concatenated)."
            )
        out.append({"goal": g["goal"], "limit": text})
    return out


# ---------------------------------------------------------------------------------- report
def _ms(s: dict) -> str:
    return f"{s['median'] * 1e3:.3g} [{s['q1'] * 1e3:.3g}, {s['q3'] * 1e3:.3g}]"


def _r(r: dict | None) -> str:
    return "--" if r is None else f"{r['median']:.3g} [{r['q1']:.3g}, {r['q3']:.3g}]"


def render(doc: dict) -> str:
    """The Markdown report of a ``collect`` document."""
    from verify.render.markdown import table
    from verify.render.metadata import markdown_block

    cfg = doc["config"]
    lengths = cfg["lengths"]
    load = doc["load_average"]
    lines = [
        "# Benchmarks",
        "",
        "Generated by `" + doc["command"] + "`. Timings depend on the machine and its load; "
        "ratios (paired per repeat) are the numbers to read.",
        "",
        f"Setup: B = {cfg['batch']}, H = {cfg['heads']}, d = d_v = {cfg['d']}, float32, causal, "
        f"scale 1/sqrt(d), Taylor order {cfg['order']}, symmetric basis, chunk size "
        f"{cfg['chunk_size']} (naive_chunk_based: {cfg['fla_chunk']}). "
        f"`torch.set_num_threads({cfg['threads']})`, `torch.inference_mode()`, warm-up runs, "
        f"{cfg['repeats']} interleaved repeats (each repeat visits every cell once, starting cell "
        "rotated), median [first quartile, third quartile].",
        "",
        f"Machine: {load['cores']} cores shared with other jobs; load average (1, 5, 15 min) "
        f"{load['start']} at the start, {load['end']} at the end. Full run took "
        f"{doc['runtime_s']} s.",
        "",
        "## Correctness gate (before timing)",
        "",
        "Each implementation against a float64 evaluation of the parallel form, within the "
        "derived D10 bound (`verify.errors.attention_error_bound`, worst form and basis per key; "
        "naive_chunk_based also gets its +1e-6 denominator shift, |o| 1e-6 / D).",
        "",
        table(
            [
                "method",
                "T",
                "max abs diff vs float64",
                "max abs diff vs parallel",
                "max error / bound",
                "ok",
            ],
            [
                [
                    r["method"],
                    r["T"],
                    f"{r['max_abs_diff_vs_float64']:.3g}",
                    f"{r['max_abs_diff_vs_parallel']:.3g}",
                    f"{r['max_error_over_bound']:.3g}",
                    "yes" if r["ok"] else "NO",
                ]
                for r in doc["correctness"]
            ],
        ),  # fmt: skip
        "",
        "## Taylor-2 forms against T",
        "",
        "Time per call, ms (median [IQR]):",
        "",
    ]
    tim = {(r["T"], r["method"]): r for r in doc["timings"]}
    lines.append(
        table(
            ["T"] + list(METHODS),
            [
                [T] + [_ms(tim[(T, m)]["time_s"]) if (T, m) in tim else "--" for m in METHODS]
                for T in lengths
            ],
        )
    )
    rat = {(r["T"], r["method"]): r for r in doc["ratios"]}
    others = [m for m in METHODS if m != "chunked"]
    lines += [
        "",
        "Ratio other / chunked (> 1: chunked is faster), median [IQR] of per-repeat ratios:",
        "",
        table(["T"] + others, [[T] + [_r(rat.get((T, m))) for m in others] for T in lengths]),
        "",
    ]
    runs = {r["runs"] for r in doc["timings"]}
    lines.append(
        f"Every cell above was timed in all {cfg['repeats']} repeats (nothing extrapolated)."
        if runs == {cfg["repeats"]}
        else f"Timed runs per cell: {sorted(runs)}."
    )
    lines.append("")
    skipped = doc["skipped"]
    if skipped:
        lines.append(
            "Not run: "
            + "; ".join(
                f"{m} at T = {T} ({why})" for T, d in skipped.items() for m, why in d.items()
            )
            + "."
        )
        lines.append("")
    g = doc["growth"]
    cross = doc["crossover_sdpa"]
    lines += [
        f"- Crossover with SDPA: chunked Taylor-2 beats SDPA from T ~ "
        f"{cross['T'] if cross['T'] is not None else 'n/a'} ({cross['how']}).",
        f"- Growth of chunked time in T: exponent {g['exponent']:.3f} over T in {g['fit_T']} "
        f"(per-repeat fits: {_r(g['exponent_per_repeat'])}); over all T "
        f"{g['exponent_all_T']:.3f}; local slopes "
        + ", ".join(f"{s['from_T']}->{s['to_T']}: {s['slope']:.2f}" for s in g["local_slopes"])
        + f". {g['how']}.",
        "",
    ]
    sw = doc["chunk_sweep"]
    lines += [
        f"Chunk-size sweep of the chunked form at T = {sw['T']} (same interleaved repeats):",
        "",
        table(
            ["chunk size", "ms", "time / default"],
            [[r["chunk_size"], _ms(r["time_s"]), _r(r["time_over_default"])] for r in sw["rows"]],
        ),
        "",
        "## Streaming decode",
        "",
    ]
    dec = doc["decode"]
    lines.append(
        f"`state.step`: {dec['ms_per_token']['median']:.3g} ms/token "
        f"[{dec['ms_per_token']['q1']:.3g}, {dec['ms_per_token']['q3']:.3g}] at T = {dec['T']} "
        f"({dec['how']})"
        + (
            f"; the recurrent form's token loop costs "
            f"{dec['recurrent_form_ms_per_token']:.3g} ms/token at the same T, so one `step` "
            f"costs {dec['step_over_recurrent_form']:.3g}x a token of the loop (the step's "
            "own time, by function, is in the cProfile table at the end)."
            if dec["recurrent_form_ms_per_token"] is not None
            else "."
        )
    )
    fl = doc["flops"]
    mm = fl["matmul_reference"]
    lines += [
        "",
        "## Achieved FLOP/s of the chunked form",
        "",
        f"Reference: `torch.matmul` of two {mm['n']} x {mm['n']} float32 matrices "
        f"(2n^3 FLOPs), {mm['gflops_per_s']:.1f} GFLOP/s, same threads, timed in the same "
        "interleaved repeats.",
        "",
        "How the chunked form's FLOPs are counted: " + " ".join(fl["how"].split()) + " "
        "The matmul part is checked against `torch.utils.flop_counter.FlopCounterMode` on the "
        "same call (column 'counter agrees').",
        "",
        table(
            [
                "T",
                "FLOPs (analytic)",
                "of which matmul",
                "counter agrees",
                "GFLOP/s",
                "of matmul rate",
            ],
            [
                [
                    r["T"],
                    f"{r['analytic_total']:.4g}",
                    f"{r['analytic_matmul']:.4g}",
                    "yes" if r["matmul_count_agrees"] else f"NO ({r['flop_counter_matmul']})",
                    f"{r['gflops_per_s']:.3g}",
                    f"{r['fraction_of_matmul']:.1%}",
                ]
                for r in fl["chunked"]
            ],
        ),  # fmt: skip
        "",
        f"## Orders N = 1..{max(cfg['orders'])}: symmetric vs tensor basis",
        "",
        f"`verify.attention.state.prefill(form='chunked')` at T = {cfg['orders_t']}; state "
        "bytes = numel x itemsize of the returned numerator + denominator against the D5 size "
        "(`derivations.state_size.state_numbers` x B x H x 4 bytes); the state also holds the "
        "visible-key count (B x H numbers, for the `count` denominator mode), listed apart. "
        "KV-cache crossover: the T from which the state is no larger than the softmax KV cache "
        "(`crossover_length`).",
        "",
    ]
    orders = doc["orders"]
    sym = {r["order"]: r for r in orders if r["basis"] == "symmetric"}
    lines.append(
        table(
            [
                "N",
                "basis",
                "features",
                "state bytes (num + den)",
                "D5 bytes",
                "= D5",
                "count bytes",
                "KV crossover T",
                "prefill ms",
                "time / symmetric",
            ],
            [
                [
                    r["order"],
                    r["basis"],
                    r["features"],
                    r["state_bytes"]["numerator"] + r["state_bytes"]["denominator"],
                    r["d5_bytes"],
                    "yes" if r["matches_d5"] else "NO",
                    r["state_bytes"]["count"],
                    r["kv_cache_crossover_T"],
                    _ms(r["time_s"]),
                    f"{r['time_s']['median'] / sym[r['order']]['time_s']['median']:.3g}",
                ]
                for r in orders
            ],
        )  # fmt: skip
    )
    mem = doc["memory"]
    lines += [
        "",
        f"Peak RSS: {mem['peak_rss_mib_after_gate']} MiB after the correctness gate, "
        f"{mem['peak_rss_mib_after_orders']} MiB after the orders section, "
        f"{mem['peak_rss_mib_final']} MiB at the end ({mem['how']}).",
        "",
        "## Goals",
        "",
        table(
            ["goal", "T", "measured", "IQR", "met", "note"],
            [
                [
                    g["goal"],
                    g["T"],
                    "--" if g["measured"] is None else f"{g['measured']:.3g}",
                    "--" if g["iqr"] is None else f"[{g['iqr'][0]:.3g}, {g['iqr'][1]:.3g}]",
                    {True: "yes", False: "NO", None: "n/a"}[g["met"]],
                    g["note"],
                ]
                for g in doc["goals"]
            ],
        ),  # fmt: skip
        "",
    ]
    if doc["limits"]:
        lines += ["## What limits the missed goals", ""]
        lines += [f"- **{x['goal']}**: {x['limit']}" for x in doc["limits"]]
        lines.append("")
    lines += ["## Profiles (torch.profiler, CPU, top ops by self time)", ""]
    for name, p in doc["profiles"].items():
        if name == "decode_cprofile":
            continue
        lines += [
            f"{name} at T = {p['T']} (median per op over {p['profiled_calls']} separately "
            f"profiled calls after a warm-up; the profiler adds its own per-op overhead): "
            f"{p['total_self_ms']:.1f} ms self time in {p['op_calls']} op calls; matmul ops "
            f"{p['matmul_share']:.0%}"
            + (
                f", at {p['matmul_gflops_per_s']:.1f} GFLOP/s on the analytic matmul FLOPs."
                if p.get("matmul_gflops_per_s")
                else "."
            ),
            "",
            table(
                ["op", "calls", "self ms", "share"],
                [
                    [e["op"], e["calls"], f"{e['self_ms']:.2f}", f"{e['share']:.1%}"]
                    for e in p["top"]
                ],
            ),  # fmt: skip
            "",
        ]
    p = doc["profiles"]["decode_cprofile"]
    lines += [
        f"`state.step` decode loop ({p['steps']} steps after T = {p['T']}), cProfile: "
        f"{p['total_s'] * 1e3:.1f} ms in {p['function_calls']} Python function calls, top "
        "functions by own time:",
        "",
        table(
            ["function", "calls", "own ms", "cumulative ms", "share"],
            [
                [
                    e["function"],
                    e["calls"],
                    f"{e['tottime_ms']:.2f}",
                    f"{e['cumtime_ms']:.2f}",
                    f"{e['share']:.1%}",
                ]
                for e in p["top"]
            ],
        ),  # fmt: skip
        "",
    ]
    lines.append(markdown_block(doc["environment"]))
    return "\n".join(lines)


def write(stage: Path, doc: dict) -> None:
    """Write the two owned files under ``stage``."""
    from verify.render.markdown import write_json, write_text

    write_json(stage / "benchmarks.json", doc)
    write_text(stage / "benchmarks.md", render(doc))


# ---------------------------------------------------------------------------------- CLI
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: T in {QUICK.lengths}, {QUICK.repeats} repeats (the test's setting)",
    )
    p.add_argument(
        "--repeats",
        type=_positive_int,
        default=None,
        help=f"timed repeats (default {FULL.repeats})",
    )
    p.add_argument("--threads", type=_positive_int, default=None, help="torch threads (default 1)")
    p.add_argument("--report-dir", default="reports", help="output directory (default: reports)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args: argparse.Namespace) -> int:
    import torch

    from verify.render.staging import staged_write

    cfg = QUICK if args.quick else FULL
    if args.repeats is not None:
        cfg = replace(cfg, repeats=args.repeats)
    if args.threads is not None:
        cfg = replace(cfg, threads=args.threads)

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, flush=True)

    before = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        doc = collect(cfg, log)
    except RuntimeError as err:
        print(f"bench: {err}", file=sys.stderr)
        return 1
    finally:
        torch.set_num_threads(before)
    if args.repeats is not None:
        doc["command"] += f" --repeats {args.repeats}"
    if args.threads is not None:
        doc["command"] += f" --threads {args.threads}"
    owned = set(OWNED)
    staged_write(Path(args.report_dir), lambda rel: rel in owned, lambda st: write(st, doc))
    log(f"wrote {args.report_dir}/benchmarks.md ({doc['runtime_s']} s)")
    for g in doc["goals"]:
        log(f"  [{ {True: 'met', False: 'MISSED', None: 'n/a'}[g['met']]}] {g['goal']}: "
            f"{g['measured']}")  # fmt: skip
    return 0
