"""D19's reverse-time backward on CUDA, beside flash-linear-attention's Triton backward.

The CPU table (``verify.bench.backward``) cannot run fla's own chunked backward: its
``parallel_based`` and ``fused_chunk_based`` are Triton kernels. This module times one training
step (forward, then ``o.backward(g)`` with a fixed g) of Taylor-2, causal, normalized, on a CUDA
device, for

- ``chunked/reverse``: ``taylor_attention(form='chunked', backward='reverse')`` (the reference);
- ``chunked/autograd``: the same form under torch autograd;
- ``fla_parallel_based``, ``fla_fused_chunk_based``: fla's Triton forward and backward
  (``fla.ops.based``; inputs laid out [B, T, H, d] as fla 0.6 takes them; both add 1e-6 to the
  denominator);
- ``fla_naive_chunk_based/autograd``: fla's pure-torch chunked Taylor-2 under torch autograd.

The per-token recurrence is left out on CUDA: it launches some eighty kernels per token, so it
measures launch latency; the CPU table has it.

Per cell: forward and backward time (``torch.cuda.synchronize`` around each, perf_counter), the
step's peak device memory above what was allocated before it
(``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``) and the bytes saved for
backward (``saved_tensors_hooks``, counted on the warm-up step; a custom Triton Function's
``save_for_backward`` is counted too). Cells are warmed up (Triton compiles then), then timed in
interleaved repeats with the starting cell rotated; ratios to ``chunked/reverse`` are paired per
repeat.

Accuracy, before timing, at ``gate_t``: each method's unnormalized gradients (``denominator=
'none'``; fla: ``use_norm=False``) against float64 autograd of the parallel form, as observed /
the D19 bound (``verify.attention.reverse_bound.gradient_bound``, float32). The bound assumes
IEEE float32 products (D10: no TF32); fla's kernels run their own tile arithmetic, so their
ratios are measurements against that model, not a gate: only ours must stay <= 1.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from verify.bench.backward import timing_row

REFERENCE = "chunked/reverse"
OURS = ("chunked/reverse", "chunked/autograd")
FLA = ("fla_parallel_based", "fla_fused_chunk_based", "fla_naive_chunk_based/autograd")
METHODS = OURS + FLA


def _fla():
    """fla's three Taylor-2 entry points, or the reason they are missing."""
    try:
        from fla.ops.based import fused_chunk_based, parallel_based
        from fla.ops.based.naive import naive_chunk_based
    except Exception as exc:  # noqa: BLE001 - any import failure is a reason to record
        return None, f"flash-linear-attention not importable: {type(exc).__name__}: {exc}"
    return (parallel_based, fused_chunk_based, naive_chunk_based), None


def _forward(method: str, fla, chunk_size: int, fla_chunk: int, norm: bool = True):
    """(q, k, v) [B, H, T, d] -> o [B, H, T, d_v]."""
    from verify.attention import taylor_attention

    if method in OURS:
        form, how = method.split("/")
        den = "sum" if norm else "none"
        kw = dict(order=2, causal=True, form=form, backward=how, denominator=den)
        return lambda q, k, v: taylor_attention(q, k, v, chunk_size=chunk_size, **kw)
    parallel, fused, naive = fla
    if method == "fla_naive_chunk_based/autograd":
        if not norm:
            return None  # naive_chunk_based always normalizes
        return lambda q, k, v: naive(q, k, v, chunk_size=fla_chunk)
    fn = parallel if method == "fla_parallel_based" else fused

    def call(q, k, v):
        t = [x.transpose(1, 2) for x in (q, k, v)]
        return fn(*t, use_norm=norm).transpose(1, 2)

    return call


def _inputs(T: int, heads: int, d: int, device: str, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed * 1_000_003 + T)
    xs = [torch.randn(1, heads, T, d, generator=g) for _ in range(4)]
    return [x.to(device) for x in xs]


def _cuda(device: str) -> bool:
    return str(device).startswith("cuda")


def _sync(device: str) -> None:
    import torch

    if _cuda(device):
        torch.cuda.synchronize()


def gate(device: str, fla, *, T: int, d: int, chunk_size: int, seed: int) -> list[dict]:
    """Unnormalized gradients of each method against float64 parallel autograd, / D19 bound."""
    import torch

    from verify.bench.backward import gate_reference, gradient_ratios

    q, k, v, dO = _inputs(T, 1, d, "cpu", seed)
    ref, bounds = gate_reference(q, k, v, dO, order=2)
    rows = []
    for method in METHODS:
        if method in FLA and (fla is None or (not _cuda(device) and method in FLA[:2])):
            continue
        fwd = _forward(method, fla, chunk_size, 256, norm=False)
        if fwd is None:
            continue
        row: dict = {"method": method, "T": T, "judged": method in OURS}
        try:
            lv = [x.to(device).clone().requires_grad_(True) for x in (q, k, v)]
            got = torch.autograd.grad(fwd(*lv), lv, dO.to(device))
            row["max_error_over_bound"] = gradient_ratios(got, ref, bounds)
            row["ok"] = max(row["max_error_over_bound"].values()) <= 1.0
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            row["error"] = f"{type(exc).__name__}: {exc}"
            row["ok"] = False
        rows.append(row)
    return rows


def _step(fwd, q, k, v, dO, device: str, saved: list | None = None):
    """One forward + backward on ``device``: (forward s, backward s, peak bytes or None)."""
    import torch

    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    cuda = _cuda(device)
    _sync(device)
    if cuda:  # the peak counts allocated bytes, so the allocator's cache needs no emptying
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    if saved is None:
        out = fwd(*leaves)
    else:

        def pack(t):
            saved[0] += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = fwd(*leaves)
    _sync(device)
    t1 = time.perf_counter()
    out.backward(dO)
    _sync(device)
    t2 = time.perf_counter()
    peak = torch.cuda.max_memory_allocated() - base if cuda else None
    return t1 - t0, t2 - t1, peak


def collect(
    device: str = "cuda",
    *,
    lengths: tuple[int, ...] = (4096, 16384),
    heads: int = 4,
    d: int = 16,
    repeats: int = 5,
    chunk_size: int = 64,
    fla_chunk: int = 256,
    gate_t: int = 256,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> dict:
    """The document of this benchmark (module docstring); nothing is timed if our gate fails.

    Raises:
        RuntimeError: ``chunked/reverse`` or ``chunked/autograd`` exceeded its D19 bound.
    """
    import torch

    fla, fla_why = _fla()
    triton_why = None if _cuda(device) else "fla's Triton kernels need a CUDA device"
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        rows_gate = gate(device, fla, T=gate_t, d=d, chunk_size=chunk_size, seed=seed)
        log(f"backward (device): gate {rows_gate}")
        bad = [r for r in rows_gate if r["judged"] and not r["ok"]]
        if bad:
            raise RuntimeError(
                "our backward failed its gate (an error, or beyond its D19 bound), nothing "
                f"timed: {bad}"
            )
        cells, skipped = [], {}
        for T in lengths:
            x = _inputs(T, heads, d, device, seed)
            for method in METHODS:
                why = fla_why if method in FLA and fla is None else None
                if why is None and method in FLA[:2]:
                    why = triton_why
                if why is not None:
                    skipped.setdefault(str(T), {})[method] = why
                    continue
                if method == "fla_naive_chunk_based/autograd" and T % fla_chunk:
                    skipped.setdefault(str(T), {})[method] = f"T not a multiple of {fla_chunk}"
                    continue
                fwd = _forward(method, fla, chunk_size, fla_chunk)
                cells.append({"T": T, "method": method, "fwd": fwd, "x": x})
        for c in cells:
            saved = [0]
            try:
                _step(c["fwd"], *c["x"], device, saved=saved)
                _step(c["fwd"], *c["x"], device)  # a second warm-up: autotuning, caches
                c.update(saved_bytes=saved[0], f=[], b=[], peak=[], error=None)
            except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                c.update(error=f"{type(exc).__name__}: {exc}"[:300])
            log(f"  warm-up {c['method']} at T = {c['T']}: {c['error'] or 'ok'}")
        for r in range(repeats):
            live = [c for c in cells if c["error"] is None]
            s = r % max(len(live), 1)
            for c in live[s:] + live[:s]:
                try:
                    f, b, p = _step(c["fwd"], *c["x"], device)
                except Exception as exc:  # noqa: BLE001 - this cell is dropped, the rest go on
                    c["error"] = f"repeat {r + 1}: {type(exc).__name__}: {exc}"[:300]
                    continue
                c["f"].append(f)
                c["b"].append(b)
                c["peak"].append(p)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
    live = [c for c in cells if c["error"] is None]
    by = {(c["T"], c["method"]): c for c in live}
    rows = [
        {"T": c["T"], "method": c["method"], "error": c["error"]}
        if c["error"] is not None
        else timing_row(c, by.get((c["T"], REFERENCE)), max)
        for c in cells
    ]
    return {
        "device": device,
        "methods": list(METHODS),
        "reference": REFERENCE,
        "heads": heads,
        "d": d,
        "lengths": list(lengths),
        "repeats": repeats,
        "gate": rows_gate,
        "rows": rows,
        "skipped": skipped,
        "how": "float32, B = 1, causal, normalized; forward then o.backward(g), "
        "torch.cuda.synchronize around each; peak = max_memory_allocated after "
        "reset_peak_memory_stats minus memory_allocated before (greatest over repeats); "
        "saved = bytes packed by saved_tensors_hooks on the warm-up step",
    }
