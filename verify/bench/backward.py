"""The backward table of ``attn-theory bench``: D19's reverse-time RNN against autograd.

Taylor-2 (symmetric basis), causal, normalized, float32, B = 1, H = ``backward_heads``,
d = d_v = ``d``: one training step's cost, forward then ``o.backward(g)`` with a fixed g, for

- ``recurrent/reverse``, ``chunked/reverse``: ``taylor_attention(form=..., backward='reverse')``
  (``verify.attention.reverse``: chunk-checkpointed, O(T / C) stored states);
- ``recurrent/autograd``, ``chunked/autograd``: the same forms, ``backward='autograd'`` (torch
  autograd through the token loop or the chunk passes);
- ``fla_naive_chunk_based/autograd``: flash-linear-attention's pure-torch chunked Taylor-2
  (``fla.ops.based.naive.naive_chunk_based``) under torch autograd: the only fla backward that
  runs on a CPU (fla's own chunked backward, ``fused_chunk_based`` and ``parallel_based``, is
  Triton: it needs a GPU and is not run here). It adds 1e-6 to the denominator.

Per cell: forward and backward time, peak memory of the step (the process's peak resident set,
reset through ``/proc/self/clear_refs`` before the step and read from ``VmHWM``, minus the
resident set before it, after ``malloc_trim``: Linux only, else None) and the bytes saved for
backward (``torch.autograd.graph.saved_tensors_hooks``, counted on the warm-up step). Every
cell is warmed up once, then timed in interleaved repeats (the starting cell rotated); ratios
other / ``chunked/reverse`` are paired per repeat. A gate runs first: at T = ``backward_gate_t``
the gradients of the four Taylor methods with ``denominator='none'`` against float64 autograd of
the parallel form, within the D19 bound (``verify.attention.reverse_bound.gradient_bound``).
"""

from __future__ import annotations

import ctypes
import gc
import time
from collections.abc import Callable

from verify.bench.analyse import summary
from verify.bench.config import BACKWARD_METHODS, Config

REFERENCE = "chunked/reverse"


def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def _status_bytes(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak() -> int | None:
    """Release freed memory, reset the peak resident set; returns the resident set (bytes)."""
    gc.collect()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    return _status_bytes("VmRSS:")


def _peak_since(base: int | None) -> int | None:
    hwm = _status_bytes("VmHWM:")
    return None if base is None or hwm is None else hwm - base


def _inputs(cfg: Config, T: int, dtype=None):
    import torch

    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + T + 7)
    shape = (cfg.batch, cfg.backward_heads, T)
    dt = torch.float32 if dtype is None else dtype
    q, k = (torch.randn(shape + (cfg.d,), generator=g, dtype=dt) for _ in range(2))
    v = torch.randn(shape + (cfg.d_v,), generator=g, dtype=dt)
    dO = torch.randn(shape + (cfg.d_v,), generator=g, dtype=dt)
    return q, k, v, dO


def _forward(cfg: Config, method: str, fla, denominator: str = "sum"):
    from verify.attention import taylor_attention

    form, how = method.split("/")
    if form == "fla_naive_chunk_based":
        return lambda q, k, v: fla(q, k, v, chunk_size=cfg.fla_chunk)
    kw = dict(order=cfg.order, causal=True, form=form, backward=how, denominator=denominator)
    if form == "chunked":
        kw["chunk_size"] = cfg.chunk_size
    return lambda q, k, v: taylor_attention(q, k, v, **kw)


def _applies(cfg: Config, method: str, T: int, fla) -> str | None:
    if method.startswith("fla_"):
        if fla is None:
            return "flash-linear-attention not installed"
        if T % cfg.fla_chunk:
            return f"T not a multiple of its chunk {cfg.fla_chunk}"
    return None


def gate(cfg: Config) -> list[dict]:
    """The Taylor methods' unnormalized gradients against float64 parallel autograd, within
    the D19 bound (observed/bound <= 1 for each of dq, dk, dv)."""
    import torch

    T = cfg.backward_gate_t
    q, k, v, dO = _inputs(cfg, T)
    ref, bounds = gate_reference(q, k, v, dO, order=cfg.order)
    rows = []
    for method in BACKWARD_METHODS:
        if method.startswith("fla_"):
            continue
        leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
        got = torch.autograd.grad(_forward(cfg, method, None, "none")(*leaves), leaves, dO)
        ratios = gradient_ratios(got, ref, bounds)
        rows.append(
            {"method": method, "T": T, "max_error_over_bound": ratios,
             "ok": max(ratios.values()) <= 1.0}
        )  # fmt: skip
    return rows


def gate_reference(q, k, v, dO, *, order: int):
    """The gate's float64 autograd gradients of the unnormalized causal Taylor-N parallel form
    and D19's float32 bounds on (dq, dk, dv) (scale 1/sqrt(d))."""
    import torch

    from verify.attention import taylor_attention
    from verify.attention.reverse_bound import gradient_bound

    leaves = [x.double().requires_grad_(True) for x in (q, k, v)]
    out = taylor_attention(*leaves, order=order, causal=True, denominator="none")
    ref = torch.autograd.grad(out, leaves, dO.double())
    va = torch.cat([v, torch.ones_like(v[..., :1])], -1)
    ga = torch.cat([dO, torch.zeros_like(dO[..., :1])], -1)
    bq, bk, bva = gradient_bound(
        f"taylor:{order}", q, k, va, ga, scale=q.shape[-1] ** -0.5, causal=True, dtype="float32"
    )
    return ref, (bq, bk, bva[..., :-1])


def gradient_ratios(got, ref, bounds) -> dict[str, float]:
    """{"dq", "dk", "dv"}: the greatest |computed - reference| / bound of each (any device)."""
    return {
        n: float(((g.detach().double().cpu() - r).abs() / b).max())
        for n, g, r, b in zip(("dq", "dk", "dv"), got, ref, bounds)
    }


def _step(fwd, q, k, v, dO, saved: list | None = None):
    """One forward + backward; (forward s, backward s, peak bytes or None)."""
    import torch

    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    base = _reset_peak()
    gc_on = gc.isenabled()
    gc.disable()
    try:
        if saved is None:
            t0 = time.perf_counter()
            out = fwd(*leaves)
        else:

            def pack(t):
                saved[0] += t.numel() * t.element_size()
                return t

            t0 = time.perf_counter()
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                out = fwd(*leaves)
        t1 = time.perf_counter()
        out.backward(dO)
        t2 = time.perf_counter()
    finally:
        if gc_on:
            gc.enable()
    return t1 - t0, t2 - t1, _peak_since(base)


def timing_row(c: dict, ref: dict | None, peak: Callable[[list], float]) -> dict:
    """One cell's row: median [IQR] forward, backward and step seconds, peak and saved MiB
    (``peak`` reduces the repeats' peak bytes), and, with the reference cell ``ref``, the
    step and backward ratios paired per repeat and the memory ratios. A cell holds ``T``,
    ``method``, per-repeat ``f``, ``b``, ``peak`` (bytes or None) and ``saved_bytes``."""
    step = [f + b for f, b in zip(c["f"], c["b"])]
    peaks = [p for p in c["peak"] if p is not None]
    row = {
        "T": c["T"],
        "method": c["method"],
        "forward_s": summary(c["f"]),
        "backward_s": summary(c["b"]),
        "step_s": summary(step),
        "peak_mib": peak(peaks) / 2**20 if peaks else None,
        "saved_mib": c["saved_bytes"] / 2**20,
    }
    if ref is not None:
        ref_step = [f + b for f, b in zip(ref["f"], ref["b"])]
        row["step_over_reference"] = summary([a / b for a, b in zip(step, ref_step)])
        row["backward_over_reference"] = summary([a / b for a, b in zip(c["b"], ref["b"])])
        rp = [p for p in ref["peak"] if p is not None]
        row["peak_over_reference"] = peak(peaks) / peak(rp) if peaks and rp else None
        row["saved_over_reference"] = c["saved_bytes"] / max(ref["saved_bytes"], 1)
    return row


def collect_backward(cfg: Config, fla, log: Callable[[str], None] = print) -> dict:
    """The backward section of the benchmark document (see the module docstring).

    Raises:
        RuntimeError: the gate failed (nothing timed then).
    """
    import numpy as np

    log(f"backward: gate at T = {cfg.backward_gate_t}")
    rows_gate = gate(cfg)
    bad = [r for r in rows_gate if not r["ok"]]
    if bad:
        raise RuntimeError(
            "backward gate failed, nothing timed: "
            + "; ".join(f"{r['method']} {r['max_error_over_bound']}" for r in bad)
        )
    cells, skipped = [], {}
    for T in cfg.backward_lengths:
        inputs = _inputs(cfg, T)
        for method in BACKWARD_METHODS:
            why = _applies(cfg, method, T, fla)
            if why is not None:
                skipped.setdefault(str(T), {})[method] = why
                continue
            cells.append({"T": T, "method": method, "fwd": _forward(cfg, method, fla), "x": inputs})
    for c in cells:  # warm-up, counting the bytes saved for backward
        saved = [0]
        _step(c["fwd"], *c["x"], saved=saved)
        c.update(saved_bytes=saved[0], f=[], b=[], peak=[])
        log(f"  warm-up {c['method']} at T = {c['T']}")
    for r in range(cfg.backward_repeats):
        t0 = time.perf_counter()
        s = r % len(cells)
        for c in cells[s:] + cells[:s]:
            f, b, p = _step(c["fwd"], *c["x"])
            c["f"].append(f)
            c["b"].append(b)
            c["peak"].append(p)
        log(f"  backward repeat {r + 1}/{cfg.backward_repeats}: {time.perf_counter() - t0:.1f} s")
    by = {(c["T"], c["method"]): c for c in cells}
    rows = []
    for c in cells:
        row = timing_row(c, by.get((c["T"], REFERENCE)), lambda p: float(np.median(p)))
        rows.append({**row, "times_forward_s": c["f"], "times_backward_s": c["b"]})
    return {
        "methods": list(BACKWARD_METHODS),
        "reference": REFERENCE,
        "heads": cfg.backward_heads,
        "lengths": list(cfg.backward_lengths),
        "repeats": cfg.backward_repeats,
        "gate": rows_gate,
        "rows": rows,
        "skipped": skipped,
        "fla_note": "fla's chunked backward (fused_chunk_based, parallel_based) is Triton and "
        "needs a GPU: not run; its pure-torch naive_chunk_based runs under torch autograd",
        "how": "forward then o.backward(g), float32, one thread; peak = VmHWM after a reset of "
        "/proc/self/clear_refs minus VmRSS before (after malloc_trim), median over repeats; "
        "saved = bytes packed by saved_tensors_hooks on the warm-up step",
    }
