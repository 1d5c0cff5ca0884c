"""Running the benchmark: the inputs, the correctness gate, the cells and their timing, the
profiles; ``collect`` returns the whole JSON document (``verify.bench.analyse`` adds the numbers).
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Callable

from verify.bench.analyse import analyse, summary
from verify.bench.backward import collect_backward
from verify.bench.config import METHODS, Config
from verify.bench.measure import (
    Cell,
    chunked_flops,
    counted_matmul_flops,
    cprofile_top,
    measure,
    peak_rss_mib,
    profile_top,
    state_bytes,
)


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
    from verify.spec.visibility import visible

    T = cfg.sanity_t
    q, k, v = _inputs(cfg, T, heads=cfg.sanity_heads)
    q64, k64, v64 = q.double(), k.double(), v.double()
    ref = taylor_attention(q64, k64, v64, order=cfg.order, causal=True).numpy()
    w = taylor_kernel((q64 @ k64.transpose(-1, -2)) / math.sqrt(cfg.d), cfg.order)
    vis = visible(T, T, causal=True, device=w.device)
    den = torch.where(vis, w, 0.0).sum(-1).numpy()[..., None]
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


# ---------------------------------------------------------------------------------- the run
def collect(cfg: Config, log: Callable[[str], None] = print) -> dict:
    """Run the whole benchmark under ``cfg`` and return the JSON document (no files written).

    Raises:
        RuntimeError: the correctness gate failed (nothing is timed then).
    """
    import torch

    from derivations import state_size as d5
    from verify.attention import state as st
    from verify.environment import environment

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
        rss_gate = peak_rss_mib()

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
                b = state_bytes(state)
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
        rss_orders = peak_rss_mib()

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
        rss_final = peak_rss_mib()

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
    doc["backward"] = collect_backward(cfg, fla, log)  # autograd on: outside inference_mode
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
