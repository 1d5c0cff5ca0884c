#!/usr/bin/env python
"""The CUDA side of attn-theory in one command: ``python scripts/gpu_check.py --out reports/gpu``.

It writes ``gpu.md`` and ``gpu.json`` into ``--out`` with four sections:

1. ``device_agreement``: ``verify.engine.check.check`` on CUDA (in this process) for the
   built-in ``softmax`` variant and SDPA's adapter (``verify.adapters.sdpa:sdpa_variant``), the
   properties device-agreement, oracle-agreement, dtype-agreement, rounding-bias and
   gradients-vs-reference; per result: property, dtype, status, max ratio, reason.
2. ``precision_models``: for each CUDA SDPA backend (flash, efficient, math, forced with
   ``torch.nn.attention.sdpa_kernel``), bfloat16 and float16, causal and not: the D10 precision
   model whose emulation bit-matches the backend's outputs best
   (``verify.probes.precision_model.identify_precision``; its own fixed shapes, d = 16).
3. ``tolerance``: each backend's forward on q, k, v ~ N(0, 1) rounded to the dtype (B = 1,
   H = 2, T = S in {1024, 8192}, d = d_v in {64, 128}, causal and not) against the derived
   tolerance: ``verify.testing.assert_attention_close`` pass/fail and the greatest
   error/bound ratio (``attention_tolerance`` and ``verify.exact.errors.float64_reference``),
   with ``precision=None`` (the envelope) and with the model section 2 identified. T = 1024 compares
   every query row; T = 8192 compares a fixed sample of rows (half evenly spread, half the last
   rows), passed as the row slice of q with the causal mask of those rows (the bound is per
   element and depends on its own row only, so this is the same bound as for the full call).
4. ``gradients``: ``verify.testing.assert_attention_grads_close`` on each backend's dq, dk, dv
   at T = 1024 (precision None), pass/fail and the greatest ratio per tensor
   (``verify.exact.gradient_bounds``).

The bounds are computed on the CPU (float64 numpy); the CUDA tensors are handed to the testing
API as they are. That CPU work runs in a pool of spawned worker processes (``--workers``) while
this process runs section 1, and whatever is not finished ``--budget`` seconds after the start is
recorded as not run. A backend that raises for a shape or dtype is recorded as
``unavailable: <message>``; every section and row is wrapped so that a failure is recorded and the
run goes on. The exit code is 0 when the script ran (failing checks included), 2 on a usage error
(no CUDA device without ``--dry-run`` among them).

``--dry-run`` does the same on CPU tensors with tiny sizes (T = 32 every row, T = 64 sampled
rows, d = 16, two examples per property) and marks the report "dry run (no CUDA device): not a
result". ``--quick`` runs on CUDA with small sizes (T = 256 every row, T = 1024 sampled rows,
d = 64), a smoke test for a GPU machine.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # a checkout without ``pip install -e .``
    sys.path.insert(0, str(ROOT))

DRY_RUN_BANNER = "dry run (no CUDA device): not a result"
SECTIONS = (
    "device_agreement",
    "precision_models",
    "tolerance",
    "gradients",
    "kernel_arithmetic",
    "backward_benchmark",
)
CHECK_TARGETS = ("softmax", "verify.adapters.sdpa:sdpa_variant")
CHECK_SELECT = (
    "device-agreement",
    "oracle-agreement",
    "dtype-agreement",
    "rounding-bias",
    "gradients-vs-reference",
)
BACKENDS = ("flash", "efficient", "math")
BACKEND_ENUM = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}
LOW_DTYPES = ("bfloat16", "float16")
REASON_CHARS = 200
MESSAGE_CHARS = 2000


@dataclass(frozen=True)
class Plan:
    """What a run covers."""

    mode: str  # full | quick | dry-run
    device: str
    check_dtypes: tuple[str, ...]
    max_examples: int | None
    lengths: tuple[int, ...]
    dims: tuple[int, ...]
    grad_lengths: tuple[int, ...]
    full_rows_upto: int  # T at or below which every query row is compared
    sample_rows: int  # rows compared above that
    bench_lengths: tuple[int, ...] = (4096, 16384)  # section 6 (verify.bench.backward_cuda)
    bench_repeats: int = 5
    batch: int = 1
    heads: int = 2
    backends: tuple[str, ...] = BACKENDS
    dtypes: tuple[str, ...] = LOW_DTYPES


PLANS = {
    "full": Plan(
        mode="full",
        device="cuda",
        check_dtypes=("float64", "float32", "bfloat16", "float16"),
        max_examples=None,
        lengths=(1024, 8192),
        dims=(64, 128),
        grad_lengths=(1024,),
        full_rows_upto=1024,
        sample_rows=256,
    ),
    "quick": Plan(
        mode="quick",
        device="cuda",
        check_dtypes=("float32", "bfloat16"),
        max_examples=3,
        lengths=(256, 1024),
        dims=(64,),
        grad_lengths=(256,),
        full_rows_upto=256,
        sample_rows=64,
        bench_lengths=(1024, 4096),
        bench_repeats=3,
    ),
    "dry-run": Plan(
        mode="dry-run",
        device="cpu",
        check_dtypes=("float32", "bfloat16"),
        max_examples=2,
        lengths=(32, 64),
        dims=(16,),
        grad_lengths=(32,),
        full_rows_upto=32,  # T = 64 takes the row-sample path of T = 8192
        sample_rows=16,
        bench_lengths=(256, 512),
        bench_repeats=2,
    ),
}


@dataclass
class State:
    """Everything the report shows; written after each section."""

    plan: Plan
    out: Path
    argv: list[str]
    started: float = field(default_factory=time.time)
    environment: dict = field(default_factory=dict)
    sections: dict = field(default_factory=lambda: {s: {"status": "not run"} for s in SECTIONS})

    def write(self) -> None:
        data = {
            "schema": 1,
            "dry_run": self.plan.mode == "dry-run",
            "mode": self.plan.mode,
            "banner": banner(self.plan, self.environment),
            "command": " ".join(["python", "scripts/gpu_check.py", *self.argv]),
            "wall_s": round(time.time() - self.started, 1),
            "environment": self.environment,
            "plan": asdict(self.plan),
            "sections": self.sections,
        }
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "gpu.json").write_text(json.dumps(_jsonable(data), indent=2) + "\n")
        (self.out / "gpu.md").write_text(render_markdown(data))


def banner(plan: Plan, env: dict) -> str:
    if plan.mode == "dry-run":
        return DRY_RUN_BANNER
    name = env.get("device_name", "CUDA device")
    what = "quick run (reduced sizes)" if plan.mode == "quick" else "full run"
    return f"{what} on {name}"


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _say(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------------------- environment


def environment(plan: Plan, workers: int) -> dict:
    import torch

    env: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "workers": workers,
        "device": plan.device,
    }
    try:
        env["git_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except Exception:  # noqa: BLE001 - not a git checkout: nothing to say
        env["git_commit"] = ""
    if plan.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env["device_name"] = torch.cuda.get_device_name(0)
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        env["device_memory_gib"] = round(props.total_memory / 2**30, 1)
        env["cuda_device_count"] = torch.cuda.device_count()
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        env["matmul_allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
        flag = getattr(torch.backends.cuda, "fp16_bf16_reduction_math_sdp_allowed", None)
        env["fp16_bf16_reduction_math_sdp_allowed"] = flag() if flag else None
    else:
        env["device_name"] = "none (CPU tensors)"
    return env


# ---------------------------------------------------------------------------- tasks

_WORKER_DEVICE = "cpu"


def _init_worker(device: str) -> None:
    """Pool initializer: one thread per worker (the pool is the parallelism)."""
    global _WORKER_DEVICE
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    import torch

    torch.set_num_threads(1)
    _WORKER_DEVICE = device


def _pack(obj: dict) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _unpack(blob: bytes) -> dict:
    import torch

    return torch.load(io.BytesIO(blob), weights_only=True)


def _ratio(err, bound):
    """Greatest err/bound as ``verify.testing`` counts it (0/0 = 0, x/0 = inf, NaN = inf)."""
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(bound > 0, err / bound, np.where(err == 0, 0.0, np.inf))
    r = np.where(np.isnan(err), np.inf, r)
    return float(r.max()) if r.size else 0.0


def task_tolerance_ratio(blob: bytes) -> dict:
    """attention_tolerance + float64_reference once; the ratio of each backend's output."""
    import numpy as np
    import torch

    from verify.exact.errors import float64_reference
    from verify.testing import attention_tolerance

    t0 = time.time()
    x = _unpack(blob)
    dev = _WORKER_DEVICE
    q, k, v = (x[n].to(dev) for n in ("q", "k", "v"))
    mask = x["mask"].to(dev) if x["mask"] is not None else None
    tol = attention_tolerance(
        q, k, v, causal=x["causal_arg"], attn_mask=mask, precision=x["precision"]
    )
    tol = tol.cpu().numpy()
    ref = float64_reference(
        "softmax",
        q.cpu(),
        k.cpu(),
        v.cpu(),
        causal=x["causal_arg"],
        attn_mask=None if mask is None else mask.cpu(),
    )
    ratios = {}
    for backend, o in x["outs"].items():
        err = np.abs(o.to(torch.float64).numpy() - ref)
        ratios[backend] = _ratio(err, tol)
    return {"ratios": ratios, "wall_s": round(time.time() - t0, 2)}


def task_tolerance_assert(blob: bytes) -> dict:
    """assert_attention_close on one backend's output (tensors on the run's device)."""
    from verify.testing import assert_attention_close

    t0 = time.time()
    x = _unpack(blob)
    dev = _WORKER_DEVICE
    q, k, v, o = (x[n].to(dev) for n in ("q", "k", "v", "out"))
    mask = x["mask"].to(dev) if x["mask"] is not None else None
    try:
        assert_attention_close(
            o, q, k, v, causal=x["causal_arg"], attn_mask=mask, precision=x["precision"]
        )
        passed, message = True, ""
    except AssertionError as exc:
        passed, message = False, str(exc)
    return {"passed": passed, "message": message[:MESSAGE_CHARS], "wall_s": time.time() - t0}


def task_gradient_ratio(blob: bytes) -> dict:
    """The gradient bounds and float64 gradients once; each backend's greatest ratio."""
    import numpy as np
    import torch

    from verify.exact import gradient_bounds as gb
    from verify.testing import DEVICE_EXP_LIBRARY

    t0 = time.time()
    x = _unpack(blob)
    args = [x[n] for n in ("q", "k", "v", "grad_out")]
    dev = "cuda" if _WORKER_DEVICE == "cuda" else "cpu"
    bounds = gb.gradient_bounds(
        *args,
        dtype=x["dtype"],
        causal=x["causal"],
        exp_library=DEVICE_EXP_LIBRARY[dev],
        device=dev,
    )
    ref = gb.reference_gradients(*args, causal=x["causal"])[1:]
    ratios = {}
    for backend, grads in x["grads"].items():
        ratios[backend] = {
            name: _ratio(np.abs(g.to(torch.float64).numpy() - want), bounds[name])
            for name, g, want in zip(gb.NAMES, grads, ref)
        }
    return {"ratios": ratios, "wall_s": round(time.time() - t0, 2)}


def task_gradient_assert(blob: bytes) -> dict:
    """assert_attention_grads_close on one backend's gradients (tensors on the run's device)."""
    from verify.testing import assert_attention_grads_close

    t0 = time.time()
    x = _unpack(blob)
    dev = _WORKER_DEVICE
    q, k, v, go = (x[n].to(dev) for n in ("q", "k", "v", "grad_out"))
    dq, dk, dv = (g.to(dev) for g in x["grads"])
    try:
        assert_attention_grads_close(dq, dk, dv, q, k, v, go, causal=x["causal"])
        passed, message = True, ""
    except AssertionError as exc:
        passed, message = False, str(exc)
    return {"passed": passed, "message": message[:MESSAGE_CHARS], "wall_s": time.time() - t0}


class Runner:
    """Runs tasks in a spawned pool (``workers`` >= 2) or inline, until a deadline."""

    def __init__(self, workers: int, device: str, deadline: float) -> None:
        self.deadline = deadline
        self.pool = None
        self.pending: list[tuple[Any, Any, bytes, Any]] = []  # (callback, fn, blob, async)
        if workers >= 2:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            self.pool = ctx.Pool(workers, initializer=_init_worker, initargs=(device,))
        else:
            _init_worker_inline(device)

    def submit(self, fn, blob: bytes, callback) -> None:
        if self.pool is None:
            self.pending.append((callback, fn, blob, None))
        else:  # the pool holds the payload until a worker takes it
            self.pending.append((callback, fn, b"", self.pool.apply_async(fn, (blob,))))

    def finish(self) -> None:
        """Deliver every result (or the reason it has none) to its callback."""
        for callback, fn, blob, handle in self.pending:
            left = self.deadline - time.time()
            if left <= 0:
                callback({"error": "not run: over the time budget (--budget)"})
                continue
            try:
                callback(handle.get(timeout=left) if handle else fn(blob))
            except Exception as exc:  # noqa: BLE001 - recorded in the row
                if type(exc).__name__ == "TimeoutError":
                    callback({"error": "not run: over the time budget (--budget)"})
                else:
                    callback({"error": _error(exc)})
        self.pending = []
        self.close()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None


def _init_worker_inline(device: str) -> None:
    global _WORKER_DEVICE
    _WORKER_DEVICE = device


# ---------------------------------------------------------------------------- SDPA calls


def sdpa_backend(name: str):
    from torch.nn.attention import SDPBackend

    return getattr(SDPBackend, BACKEND_ENUM[name])


def backend_forward(name: str):
    """``forward(q, k, v, *, causal)``: SDPA's adapter forced onto one backend."""

    def forward(q, k, v, *, causal, attn_mask=None):
        from torch.nn.attention import sdpa_kernel

        from verify.adapters.sdpa import sdpa_forward

        with sdpa_kernel(sdpa_backend(name)):
            return sdpa_forward(q, k, v, causal=causal, attn_mask=attn_mask)

    return forward


def backend_variant(name: str, causal: bool):
    from verify.spec.variant import AttentionVariant

    return AttentionVariant(
        name=f"sdpa-{name}",
        forward=backend_forward(name),
        kernel="softmax",
        causal="yes" if causal else "no",
        causal_alignment="top-left",
        dtypes=LOW_DTYPES,
        devices=("cpu", "cuda"),
        description=f"torch SDPA under sdpa_kernel(SDPBackend.{BACKEND_ENUM[name]})",
    )


def make_inputs(dtype: str, T: int, d: int, causal: bool, plan: Plan):
    """q, k, v, grad_out ~ N(0, 1) drawn in float64 on the CPU and rounded to ``dtype``."""
    import torch

    seed = zlib.crc32(f"{dtype}-{T}-{d}-{causal}".encode())
    gen = torch.Generator().manual_seed(seed)
    shape = (plan.batch, plan.heads, T, d)
    return [
        torch.randn(shape, generator=gen, dtype=torch.float64).to(getattr(torch, dtype))
        for _ in range(4)
    ]


def sample_rows(T: int, plan: Plan) -> list[int] | None:
    """None (every row) up to ``full_rows_upto``; else half spread evenly, half the last rows."""
    if T <= plan.full_rows_upto:
        return None
    half = plan.sample_rows // 2
    spread = {round(i * (T - half - 1) / max(half - 1, 1)) for i in range(half)}
    return sorted(spread | set(range(T - half, T)))


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


# ---------------------------------------------------------------------------- section 1


def section_device_agreement(state: State) -> None:
    from verify import builtins
    from verify.engine.check import check

    plan = state.plan
    sec: dict[str, Any] = {
        "status": "running",
        "ran": (
            f"verify.engine.check.check(target, dtypes={list(plan.check_dtypes)}, "
            f"device={plan.device!r}, select={list(CHECK_SELECT)}, profile='ci', "
            f"isolate=False, max_examples={plan.max_examples})"
        ),
        "targets": [],
    }
    state.sections["device_agreement"] = sec
    for name in CHECK_TARGETS:
        entry: dict[str, Any] = {"target": name}
        sec["targets"].append(entry)
        t0 = time.time()
        try:
            target = builtins.get(name) if ":" not in name else name
            res = check(
                target,
                dtypes=plan.check_dtypes,
                device=plan.device,
                select=list(CHECK_SELECT),
                profile="ci",
                isolate=False,
                max_examples=plan.max_examples,
                progress=lambda r, n=name: _say(
                    f"  [{n}] {r.property_id} {r.dtype}: {r.status}"
                    + (f" (max ratio {r.max_ratio:.3g})" if r.max_ratio is not None else "")
                ),
            )
            entry.update(
                status="ran",
                name=res.name,
                counts=res.counts,
                exit_code=res.exit_code,
                notes=res.notes,
                precision_model=(res.precision or {}).get("model"),
                results=[
                    {
                        "property_id": r.property_id,
                        "dtype": r.dtype,
                        "device": r.device,
                        "status": r.status,
                        "max_ratio": r.max_ratio,
                        "reason": (r.reason or "")[:REASON_CHARS],
                    }
                    for r in res.results
                ],
            )
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            entry.update(status=f"error: {_error(exc)}", traceback=traceback.format_exc()[-3000:])
        entry["wall_s"] = round(time.time() - t0, 1)
        _say(f"device-agreement [{name}]: {entry['status']} ({entry['wall_s']} s)")
        state.write()
    sec["status"] = "ok" if all(t["status"] == "ran" for t in sec["targets"]) else "errors"


# ---------------------------------------------------------------------------- section 2


def section_precision_models(state: State) -> dict[tuple[str, str, bool], str | None]:
    """Fills ``precision_models``; returns (backend, dtype, causal) -> the identified model."""
    from verify.probes.precision_model import identify_precision

    plan = state.plan
    sec: dict[str, Any] = {
        "status": "running",
        "ran": (
            "verify.probes.precision_model.identify_precision(variant, dtype, "
            f"device={plan.device!r}) with variant = SDPA's adapter under "
            "sdpa_kernel(SDPBackend.X), claiming causal 'no' or 'yes' (the probe calls T = 16 "
            "over S = 2048, then T = S = 512, each causal as claimed; d = 16, its fixed "
            "shapes; a model is named when both calls agree and its bound holds on both)"
        ),
        "rows": [],
    }
    state.sections["precision_models"] = sec
    found: dict[tuple[str, str, bool], str | None] = {}
    for backend in plan.backends:
        for dtype in plan.dtypes:
            for causal in (False, True):
                row: dict[str, Any] = {"backend": backend, "dtype": dtype, "causal": causal}
                t0 = time.time()
                try:
                    res = identify_precision(
                        backend_variant(backend, causal), dtype=dtype, device=plan.device
                    )
                    row.update(res)
                    reason = res.get("reason", "")
                    if res.get("model"):
                        row["status"] = "identified"
                    elif reason.startswith("the variant could not be called"):
                        row["status"] = f"unavailable: {reason}"
                    else:
                        row["status"] = f"no model: {reason}"
                    found[(backend, dtype, causal)] = res.get("model")
                except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                    row["status"] = f"error: {_error(exc)}"
                row["wall_s"] = round(time.time() - t0, 2)
                sec["rows"].append(row)
                _say(
                    f"precision model [{backend} {dtype} causal={causal}]: "
                    f"{row.get('model') or row['status'][:120]}"
                )
    sec["status"] = "ok"
    state.write()
    return found


# ---------------------------------------------------------------------------- section 5


def section_kernel_arithmetic(state: State) -> None:
    """D17 on the device: each SDPA backend's output and FlashAttention-2's emulation (with a
    softcap and ALiBi) against the float64 reference, within the bound of the device's default
    arithmetic (CUDA: ``flash-attention-2``) and of D10's CPU model (``cpu``), bf16/fp16, the
    first length and head dimension of the plan, causal."""

    from derivations.decay import alibi_slopes
    from verify.attention.flash import flash_attention
    from verify.exact.errors import attention_error_bound, default_precision, float64_reference

    plan = state.plan
    sec: dict[str, Any] = {"status": "running", "rows": []}
    state.sections["kernel_arithmetic"] = sec
    T, d = plan.lengths[0], plan.dims[0]
    slopes = [float(m) for m in alibi_slopes(plan.heads)]
    for dtype in plan.dtypes:
        q, k, v, _ = make_inputs(dtype, T, d, True, plan)
        kernels = {f"sdpa {b}": (backend_forward(b), {}) for b in plan.backends}
        kernels["flash-attention-2 emulation, softcap 30"] = (
            lambda q_, k_, v_, causal: flash_attention(q_, k_, v_, causal=causal, softcap=30.0),
            {"softcap": 30.0},
        )
        kernels["flash-attention-2 emulation, ALiBi"] = (
            lambda q_, k_, v_, causal: flash_attention(
                q_, k_, v_, causal=causal, alibi_slopes=slopes
            ),  # fmt: skip
            {"alibi_slopes": slopes},
        )
        for name, (fwd, claims) in kernels.items():
            row: dict[str, Any] = {"kernel": name, "dtype": dtype, "T": T, "d": d}
            try:
                o = fwd(q.to(plan.device), k.to(plan.device), v.to(plan.device), causal=True)
                _sync(plan.device)
                ref = float64_reference("softmax", q, k, v, causal=True, **claims)
                err = (o.detach().cpu().double().numpy() - ref).__abs__()
                for arith in (None, "cpu"):
                    eb = attention_error_bound(
                        "softmax", q, k, v, dtype=dtype, exact=None, causal=True,
                        device=plan.device, precision=default_precision(dtype),
                        arithmetic=arith, **claims,
                    )  # fmt: skip
                    row[f"ratio_{arith or 'device'}"] = float((err / eb.bound).max())
                row["status"] = "ran"
            except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                row["status"] = f"error: {_error(exc)}"
            sec["rows"].append(row)
            _say(f"kernel arithmetic [{name} {dtype}]: {row}")
    sec["tf32_rows"] = _tf32_rows(plan, T, d)
    sec["status"] = "ok"
    state.write()


def _tf32_rows(plan: Plan, T: int, d: int) -> list[dict]:
    """D17's TF32 parameter on the device: float32 SDPA (math and efficient backends, causal)
    with ``torch.backends.cuda.matmul.allow_tf32`` off and on, each output against the float64
    reference, under the bound of float32 products (``tf32=False``) and of TF32 inputs
    (``tf32=True``), both otherwise D10's CPU model on the device's exp."""
    import torch

    from derivations.kernel_arithmetic import KernelArithmetic
    from verify.exact.errors import attention_error_bound, float64_reference

    rows: list[dict] = []
    try:
        q, k, v, _ = make_inputs("float32", T, d, True, plan)
        ref = float64_reference("softmax", q, k, v, causal=True)
        bounds = {}
        for tf32 in (False, True):
            eb = attention_error_bound(
                "softmax", q, k, v, dtype="float32", exact=None, causal=True,
                device=plan.device,
                arithmetic=KernelArithmetic(name="tf32" if tf32 else "fp32", tf32=tf32),
            )  # fmt: skip
            bounds[tf32] = eb.bound
    except Exception as exc:  # noqa: BLE001 - recorded, the section keeps its rows
        return [{"kernel": "sdpa", "dtype": "float32", "T": T, "d": d, "allow_tf32": None,
                 "status": f"error: {_error(exc)}"}]  # fmt: skip
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        for backend in ("math", "efficient"):
            for allow in (False, True):
                row: dict[str, Any] = {"kernel": f"sdpa {backend}", "dtype": "float32",
                                       "T": T, "d": d, "allow_tf32": allow}  # fmt: skip
                try:
                    torch.backends.cuda.matmul.allow_tf32 = allow
                    torch.backends.cudnn.allow_tf32 = allow
                    o = backend_forward(backend)(*(x.to(plan.device) for x in (q, k, v)),
                                                 causal=True)  # fmt: skip
                    _sync(plan.device)
                    err = abs(o.detach().cpu().double().numpy() - ref)
                    row["ratio_fp32_bound"] = float((err / bounds[False]).max())
                    row["ratio_tf32_bound"] = float((err / bounds[True]).max())
                    row["status"] = "ran"
                except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                    row["status"] = f"error: {_error(exc)}"
                rows.append(row)
                _say(f"kernel arithmetic [tf32]: {row}")
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old
    return rows


def section_backward_benchmark(state: State) -> None:
    """D19's reverse-time backward of Taylor-2 beside fla's Triton backward on the device
    (``verify.bench.backward_cuda``): gate, then time and peak memory of one training step."""
    from verify.bench import backward_cuda

    plan = state.plan
    sec: dict[str, Any] = {"status": "running"}
    state.sections["backward_benchmark"] = sec
    doc = backward_cuda.collect(
        plan.device,
        lengths=plan.bench_lengths,
        repeats=plan.bench_repeats,
        gate_t=256 if plan.mode != "dry-run" else 64,
        log=_say,
    )
    sec.update(doc)
    sec["status"] = "ok"
    state.write()


# ---------------------------------------------------------------------------- sections 3, 4


@dataclass
class Case:
    """One input set: its inputs (CPU) and each backend's outputs / gradients (CPU)."""

    dtype: str
    T: int
    d: int
    causal: bool
    rows: list[int] | None
    inputs: list = field(default_factory=list)
    outs: dict = field(default_factory=dict)  # backend -> output rows (CPU)
    grads: dict = field(default_factory=dict)  # backend -> (dq, dk, dv) (CPU)
    status: dict = field(default_factory=dict)  # backend -> "ran" | "unavailable: ..."
    grad_status: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.dtype} T=S={self.T} d={self.d} causal={self.causal}"

    def tolerance_payload(self) -> dict:
        """q rows, k, v and the visibility of those rows (``causal_arg``, ``mask``)."""
        import torch

        q, k, v, _ = self.inputs
        if self.rows is None:
            return {"q": q, "k": k, "v": v, "causal_arg": self.causal, "mask": None}
        idx = torch.tensor(self.rows)
        mask = None
        if self.causal:  # top-left: query t sees keys s <= t
            mask = (torch.arange(self.T)[None, :] <= idx[:, None]).view(1, 1, len(idx), self.T)
        return {"q": q[..., idx, :].contiguous(), "k": k, "v": v, "causal_arg": False, "mask": mask}


def run_backends(case: Case, plan: Plan, grads: bool) -> None:
    """Each backend's forward (and backward when ``grads``) on the run's device."""
    import torch

    q, k, v, go = (x.to(plan.device) for x in case.inputs)
    for backend in plan.backends:
        fwd = backend_forward(backend)
        try:
            with torch.no_grad():
                o = fwd(q, k, v, causal=case.causal)
            _sync(plan.device)
            o = o if case.rows is None else o[..., torch.tensor(case.rows, device=o.device), :]
            case.outs[backend] = o.detach().cpu().contiguous()
            case.status[backend] = "ran"
        except Exception as exc:  # noqa: BLE001 - a backend not available for this case
            case.status[backend] = f"unavailable: {_error(exc)}"[:400]
        if not grads:
            continue
        try:
            leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
            o = fwd(*leaves, causal=case.causal)
            dq, dk, dv = torch.autograd.grad(o, leaves, go)
            _sync(plan.device)
            case.grads[backend] = tuple(g.detach().cpu() for g in (dq, dk, dv))
            case.grad_status[backend] = "ran"
        except Exception as exc:  # noqa: BLE001 - a backend without this backward
            case.grad_status[backend] = f"unavailable: {_error(exc)}"[:400]
    del q, k, v, go
    if plan.device == "cuda":
        torch.cuda.empty_cache()


def _ran_forward(case: Case, backend: str, plan: Plan) -> str:
    rows = "every query row" if case.rows is None else f"{len(case.rows)} of {case.T} query rows"
    return (
        f"sdpa_kernel(SDPBackend.{BACKEND_ENUM[backend]}) forward, {case.dtype} on "
        f"{plan.device}, B={plan.batch} H={plan.heads} T=S={case.T} d=d_v={case.d}, "
        f"causal={case.causal}; assert_attention_close on {rows}"
    )


def submit_tolerance(
    runner: Runner, case: Case, sec: dict, backends: list[str], precision: str | None, key: str
) -> None:
    """Ratio task (all ``backends`` at once) and one assert task per backend, into sec rows."""
    rows = {r["backend"]: r for r in sec["rows"] if r["case"] == case.label}
    base = case.tolerance_payload()
    outs = {b: case.outs[b] for b in backends}

    def on_ratio(res: dict) -> None:
        for b in backends:
            rows[b][key]["max_ratio"] = res.get("ratios", {}).get(b)
            if "error" in res:
                rows[b][key]["ratio_error"] = res["error"]

    runner.submit(task_tolerance_ratio, _pack({**base, "outs": outs, "precision": precision}),
                  on_ratio)  # fmt: skip
    for b in backends:

        def on_assert(res: dict, b=b) -> None:
            cell = rows[b][key]
            if "error" in res:
                cell["result"] = res["error"]
            else:
                cell["result"] = "pass" if res["passed"] else "fail"
                cell["message"] = res["message"]

        runner.submit(
            task_tolerance_assert,
            _pack({**base, "out": case.outs[b], "precision": precision}),
            on_assert,
        )


def submit_gradients(runner: Runner, case: Case, sec: dict) -> None:
    q, k, v, go = case.inputs
    rows = {r["backend"]: r for r in sec["rows"] if r["case"] == case.label}
    ran = [b for b, s in case.grad_status.items() if s == "ran"]
    if not ran:
        return
    base = {"q": q, "k": k, "v": v, "grad_out": go, "causal": case.causal, "dtype": case.dtype}

    def on_ratio(res: dict) -> None:
        for b in ran:
            rows[b]["max_ratio"] = res.get("ratios", {}).get(b)
            if "error" in res:
                rows[b]["ratio_error"] = res["error"]

    runner.submit(task_gradient_ratio, _pack({**base, "grads": {b: case.grads[b] for b in ran}}),
                  on_ratio)  # fmt: skip
    for b in ran:

        def on_assert(res: dict, b=b) -> None:
            row = rows[b]
            if "error" in res:
                row["result"] = res["error"]
            else:
                row["result"] = "pass" if res["passed"] else "fail"
                row["message"] = res["message"]

        runner.submit(task_gradient_assert, _pack({**base, "grads": case.grads[b]}), on_assert)


def sections_tolerance_and_gradients(state: State, runner: Runner) -> list[Case]:
    """Runs every backend on every case, submits the fused-model and gradient tasks."""
    plan = state.plan
    tol: dict[str, Any] = {
        "status": "running",
        "ran": (
            "each backend's forward on q, k, v ~ N(0, 1) rounded to the dtype; "
            "verify.testing.assert_attention_close(out, q, k, v, causal=..., precision=P) "
            "pass/fail and the greatest |out - float64_reference| / attention_tolerance, for "
            "P = None (the envelope) and P = the model identified in section 2 for that "
            "backend, dtype and causality"
        ),
        "rows": [],
    }
    grad: dict[str, Any] = {
        "status": "running",
        "ran": (
            "each backend's backward (torch.autograd.grad with grad_out ~ N(0, 1) rounded to the "
            "dtype); verify.testing.assert_attention_grads_close(dq, dk, dv, q, k, v, grad_out, "
            "causal=...) pass/fail (precision None) and the greatest ratio per tensor against "
            "verify.exact.gradient_bounds"
        ),
        "rows": [],
    }
    state.sections["tolerance"], state.sections["gradients"] = tol, grad
    cases = []
    for dtype in plan.dtypes:
        for T in plan.lengths:
            for d in plan.dims:
                for causal in (False, True):
                    case = Case(dtype, T, d, causal, sample_rows(T, plan))
                    with_grads = T in plan.grad_lengths
                    try:
                        case.inputs = make_inputs(dtype, T, d, causal, plan)
                        run_backends(case, plan, grads=with_grads)
                    except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                        for b in plan.backends:
                            case.status.setdefault(b, f"error: {_error(exc)}")
                            if with_grads:
                                case.grad_status.setdefault(b, f"error: {_error(exc)}")
                    cases.append(case)
                    _say(f"ran backends [{case.label}]: {case.status}")
                    for b in plan.backends:
                        tol["rows"].append(
                            {
                                "case": case.label,
                                "backend": b,
                                "dtype": dtype,
                                "T": T,
                                "d": d,
                                "causal": causal,
                                "rows_compared": T if case.rows is None else len(case.rows),
                                "status": case.status.get(b, "not run"),
                                "ran": _ran_forward(case, b, plan),
                                "fused": {"precision": None},
                                "identified": {},
                            }
                        )
                        if with_grads:
                            grad["rows"].append(
                                {
                                    "case": case.label,
                                    "backend": b,
                                    "dtype": dtype,
                                    "T": T,
                                    "d": d,
                                    "causal": causal,
                                    "status": case.grad_status.get(b, "not run"),
                                    "ran": (
                                        f"sdpa_kernel(SDPBackend.{BACKEND_ENUM[b]}) forward and "
                                        f"backward, {dtype} on {plan.device}, B={plan.batch} "
                                        f"H={plan.heads} T=S={T} d=d_v={d}, causal={causal}"
                                    ),
                                }
                            )
                    ran = [b for b, s in case.status.items() if s == "ran"]
                    try:
                        if ran:
                            submit_tolerance(runner, case, tol, ran, None, "fused")
                        if with_grads:
                            submit_gradients(runner, case, grad)
                    except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                        tol.setdefault("errors", []).append(f"{case.label}: {_error(exc)}")
    state.write()
    return cases


def submit_identified(
    state: State, runner: Runner, cases: list[Case], found: dict[tuple[str, str, bool], str | None]
) -> None:
    """The identified-model tasks: one ratio task per (case, model), asserts per backend."""
    tol = state.sections["tolerance"]
    rows = {(r["case"], r["backend"]): r for r in tol["rows"]}
    for case in cases:
        by_model: dict[str, list[str]] = {}
        for b, s in case.status.items():
            if s != "ran":
                continue
            model = found.get((b, case.dtype, case.causal))
            cell = rows[(case.label, b)]["identified"]
            cell["precision"] = model
            if model is None:
                cell["result"] = "no model identified (section 2)"
            else:
                by_model.setdefault(model, []).append(b)
        for model, backends in by_model.items():
            try:
                submit_tolerance(runner, case, tol, backends, model, "identified")
            except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                tol.setdefault("errors", []).append(f"{case.label} {model}: {_error(exc)}")


def finish_rows(state: State) -> None:
    for name in ("tolerance", "gradients"):
        sec = state.sections[name]
        if sec.get("status") != "running":
            continue
        sec["status"] = "ok" if not sec.get("errors") else "errors"


# ---------------------------------------------------------------------------- markdown


def _cell(x: Any) -> str:
    if x is None:
        return ""
    if isinstance(x, float):
        return f"{x:.3g}"
    return str(x).replace("|", "\\|").replace("\n", " ")


def _ratio_cell(cell: dict) -> str:
    res = cell.get("result")
    if res is None:
        return "not run"
    r = cell.get("max_ratio")
    if isinstance(r, (int, float)):
        return f"{res} ({r:.3g})"
    return _cell(res)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _greatest(message: str) -> str:
    for line in message.splitlines():
        if line.startswith("Greatest error relative"):
            return line
    return message.splitlines()[0] if message else ""


def render_markdown(data: dict) -> str:
    env, secs = data["environment"], data["sections"]
    lines = ["# GPU check", ""]
    lines.append(f"**{data['banner']}**")
    lines.append("")
    lines.append(f"Command: `{data['command']}`; wall time {data['wall_s']} s.")
    lines.append("")
    lines += _table(
        ["what", "value"],
        [
            ["torch", env.get("torch")],
            ["torch CUDA", env.get("torch_cuda")],
            ["CUDA device", env.get("device_name")],
            ["compute capability", env.get("capability")],
            ["tensors on", env.get("device")],
            ["TF32 matmul", env.get("matmul_allow_tf32")],
            ["math SDPA fp16/bf16 reduction", env.get("fp16_bf16_reduction_math_sdp_allowed")],
            ["git commit", env.get("git_commit")],
            ["CPU workers for the bounds", env.get("workers")],
        ],
    )
    lines.append("")

    sec = secs["device_agreement"]
    lines += ["## 1. Device agreement and the battery on the device", ""]
    lines += [f"Status: {sec.get('status')}. Ran: `{sec.get('ran', '')}`.", ""]
    for t in sec.get("targets", []):
        lines.append(f"### `{t['target']}`: {t['status']} ({t.get('wall_s')} s)")
        lines.append("")
        if t.get("counts"):
            lines.append(f"Counts: {t['counts']}; precision model: {t.get('precision_model')}.")
        for note in t.get("notes", []):
            lines.append(f"- {note}")
        lines.append("")
        if t.get("results"):
            lines += _table(
                ["property", "dtype", "status", "max ratio", "reason"],
                [
                    [r["property_id"], r["dtype"], r["status"], r["max_ratio"], r["reason"]]
                    for r in t["results"]
                ],
            )
            lines.append("")

    sec = secs["precision_models"]
    lines += ["## 2. Precision models of SDPA's backends", ""]
    lines += [f"Status: {sec.get('status')}. Ran: {sec.get('ran', '')}.", ""]
    rows = []
    for r in sec.get("rows", []):
        m = r.get("model")
        frac = r.get("matches", {}).get(m) if m else None
        nxt = r.get("next")
        rows.append(
            [
                r["backend"],
                r["dtype"],
                r["causal"],
                "x".join(map(str, r.get("shape", []))),
                m or "",
                frac,
                f"{nxt[0]} {nxt[1]:.3g}" if nxt else "",
                r["status"][:160],
            ]
        )
    lines += _table(
        ["backend", "dtype", "causal", "T x S", "model", "bit-match", "next", "status"], rows
    )
    lines.append("")

    sec = secs["tolerance"]
    lines += ["## 3. Derived tolerance of each backend's output", ""]
    lines += [f"Status: {sec.get('status')}. Ran: {sec.get('ran', '')}.", ""]
    lines += [
        "Cells: pass/fail of `assert_attention_close` (greatest error/bound ratio). Each row "
        "ran: the backend forced with `sdpa_kernel`, the listed dtype and shape, B = 1, H = 2.",
        "",
    ]
    rows = []
    for r in sec.get("rows", []):
        if r["status"] != "ran":
            rows.append([r["backend"], r["dtype"], r["T"], r["d"], r["causal"], "",
                         r["status"][:160], "", ""])  # fmt: skip
            continue
        ident = r.get("identified", {})
        rows.append(
            [
                r["backend"],
                r["dtype"],
                r["T"],
                r["d"],
                r["causal"],
                r["rows_compared"],
                _ratio_cell(r["fused"]),
                ident.get("precision") or "",
                _ratio_cell(ident) if "max_ratio" in ident else ident.get("result", "not run"),
            ]
        )
    lines += _table(
        ["backend", "dtype", "T=S", "d", "causal", "rows", "precision None (envelope)",
         "identified", "under identified"],
        rows,
    )  # fmt: skip
    lines.append("")
    fails = [
        (r, key)
        for r in sec.get("rows", [])
        for key in ("fused", "identified")
        if r.get(key, {}).get("result") == "fail"
    ]
    if fails:
        lines += ["Failures (greatest error relative to the bound):", ""]
        for r, key in fails:
            cell = r[key]
            lines.append(
                f"- {r['backend']} {r['case']} precision {cell.get('precision') or 'None'}: "
                f"{_greatest(cell.get('message', ''))}"
            )
        lines.append("")

    sec = secs["gradients"]
    lines += ["## 4. Gradients of each backend", ""]
    lines += [f"Status: {sec.get('status')}. Ran: {sec.get('ran', '')}.", ""]
    rows = []
    for r in sec.get("rows", []):
        ratios = r.get("max_ratio") or {}
        ratio_txt = ", ".join(f"{n} {x:.3g}" for n, x in ratios.items() if isinstance(x, float))
        result = r.get("result", "not run") if r["status"] == "ran" else r["status"][:160]
        rows.append([r["backend"], r["dtype"], r["T"], r["d"], r["causal"], result, ratio_txt])
    lines += _table(["backend", "dtype", "T=S", "d", "causal", "result", "max ratio"], rows)
    lines.append("")
    for r in sec.get("rows", []):
        if r.get("result") == "fail":
            lines.append(f"- {r['backend']} {r['case']}: {_greatest(r.get('message', ''))}")
    lines.append("")

    sec = secs["kernel_arithmetic"]
    lines += ["", "## 5. Kernel arithmetic (D17) on the device", ""]
    lines += [
        f"Status: {sec.get('status')}. Each kernel's worst observed/bound (causal, the "
        "default precision model) under the device's default arithmetic (CUDA: "
        "flash-attention-2) and under D10's CPU model.",
        "",
    ]
    rows = [
        [r["kernel"], r["dtype"], r.get("T"), r.get("d"), r["status"][:160],
         _cell(r.get("ratio_device")), _cell(r.get("ratio_cpu"))]
        for r in sec.get("rows", [])
    ]  # fmt: skip
    lines += _table(["kernel", "dtype", "T=S", "d", "status", "device default", "cpu"], rows)
    if sec.get("tf32_rows"):
        lines += [
            "",
            "TF32 (D17's `tf32` parameter): float32 SDPA, causal, with "
            "`torch.backends.cuda.matmul.allow_tf32` off and on; worst observed/bound under "
            "float32 products and under TF32 inputs (both D10's CPU model otherwise).",
            "",
        ]
        rows = [
            [r["kernel"], r["dtype"], r["T"], r["d"], r["allow_tf32"], r["status"][:160],
             _cell(r.get("ratio_fp32_bound")), _cell(r.get("ratio_tf32_bound"))]
            for r in sec["tf32_rows"]
        ]  # fmt: skip
        lines += _table(["kernel", "dtype", "T=S", "d", "allow_tf32", "status",
                         "float32 products", "TF32 inputs"], rows)  # fmt: skip
    lines += _render_backward_benchmark(secs.get("backward_benchmark", {}))
    return "\n".join(lines)


def _ms(cell: dict | None) -> str:
    if not cell:
        return ""
    return f"{1e3 * cell['median']:.3g} [{1e3 * cell['q1']:.3g}, {1e3 * cell['q3']:.3g}]"


def _med(cell: dict | None) -> str:
    if not cell:
        return ""
    return f"{cell['median']:.3g} [{cell['q1']:.3g}, {cell['q3']:.3g}]"


def _render_backward_benchmark(sec: dict) -> list[str]:
    from verify.bench import backward_cuda

    lines = ["", "## 6. Backward: D19's reverse-time RNN beside fla's Triton backward", ""]
    lines += [f"Status: {sec.get('status', 'not run')}.", ""]
    if "rows" not in sec:
        return lines
    lines += [
        f"Taylor-2, causal, normalized, float32, B = 1, H = {sec['heads']}, d = d_v = "
        f"{sec['d']}, {sec['repeats']} interleaved repeats after two warm-ups, median "
        f"[IQR]; ratios to `{sec['reference']}` paired per repeat. {sec['how']}.",
        "",
        "Gate (before timing): unnormalized gradients against float64 autograd of the "
        "parallel form, observed / D19 bound (float32, no TF32). Only ours is judged; "
        "fla's rows measure its kernels against the same model.",
        "",
    ]
    rows = []
    for r in sec.get("gate", []):
        m = r.get("max_error_over_bound") or {}
        rows.append(
            [r["method"], r["T"], m.get("dq"), m.get("dk"), m.get("dv"),
             ("yes" if r["ok"] else "no") if r["judged"] else "(not judged)",
             r.get("error", "")]
        )  # fmt: skip
    lines += _table(["method", "T", "dq", "dk", "dv", "within", "error"], rows)
    lines.append("")
    for T in sec["lengths"]:
        lines += [f"### T = {T}", ""]
        rows = []
        for r in sec["rows"]:
            if r["T"] != T:
                continue
            if "error" in r:
                rows.append([r["method"], "", "", "", "", "", "", "", r["error"][:160]])
                continue
            rows.append(
                [r["method"], _ms(r["forward_s"]), _ms(r["backward_s"]), _ms(r["step_s"]),
                 _med(r.get("step_over_reference")), r["peak_mib"],
                 r.get("peak_over_reference"), r["saved_mib"], ""]
            )  # fmt: skip
        for method, why in sec.get("skipped", {}).get(str(T), {}).items():
            rows.append([method, "", "", "", "", "", "", "", f"not run: {why}"[:160]])
        lines += _table(
            ["method", "forward ms", "backward ms", "step ms", "step / ref", "peak MiB",
             "peak / ref", "saved MiB", "note"],
            rows,
        )  # fmt: skip
        lines.append("")
    lines.append(f"Methods: {', '.join(backward_cuda.METHODS)}.")
    return lines


# ---------------------------------------------------------------------------- main


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/gpu_check.py",
        description="Run the CUDA side of attn-theory and write gpu.md and gpu.json.",
    )
    p.add_argument("--out", required=True, type=Path, help="report directory (created)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="CPU tensors, tiny sizes: checks the script, not a result",
    )
    p.add_argument("--quick", action="store_true", help="CUDA with small sizes (smoke test)")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes for the CPU-side bounds (default: CPUs - 1, at most 12; < 2: inline)",
    )
    p.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help="comma-separated sections to run (default: all; tolerance and gradients run "
        "together); the others are recorded as not selected",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=450.0,
        help="seconds from the start after which unfinished bound tasks are recorded as not run",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
    except SystemExit as exc:  # argparse: 2 on a usage error, 0 for --help
        return int(exc.code or 0)
    workers = args.workers if args.workers is not None else min(12, (os.cpu_count() or 1) - 1)
    if workers < 0 or args.budget <= 0:
        print("gpu_check: --workers must be >= 0 and --budget > 0", file=sys.stderr)
        return 2
    chosen = {x.strip() for x in args.sections.split(",") if x.strip()}
    if not chosen or chosen - set(SECTIONS):
        print(f"gpu_check: --sections: expected names from {SECTIONS}, got {args.sections!r}",
              file=sys.stderr)  # fmt: skip
        return 2
    if chosen & {"tolerance", "gradients"}:
        chosen |= {"tolerance", "gradients"}
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print(
            "gpu_check: no CUDA device; run on a CUDA machine, or pass --dry-run to check the "
            "script on CPU tensors",
            file=sys.stderr,
        )
        return 2
    plan = PLANS["dry-run" if args.dry_run else "quick" if args.quick else "full"]
    state = State(plan=plan, out=args.out, argv=argv)
    try:
        state.environment = environment(plan, workers)
    except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
        state.environment = {"torch": torch.__version__, "error": _error(exc)}
    _say(f"gpu_check: {banner(plan, state.environment)}; torch {torch.__version__}")
    for name in set(SECTIONS) - chosen:
        state.sections[name] = {"status": "not run (not selected: --sections)"}
    state.write()
    runner = Runner(workers, plan.device, state.started + args.budget)
    try:
        cases: list[Case] = []
        if "tolerance" in chosen:
            try:
                cases = sections_tolerance_and_gradients(state, runner)
            except Exception as exc:  # noqa: BLE001
                for name in ("tolerance", "gradients"):
                    state.sections[name].update(status=f"error: {_error(exc)}")
        found: dict = {}
        if "precision_models" in chosen:
            try:
                found = section_precision_models(state)
            except Exception as exc:  # noqa: BLE001
                state.sections["precision_models"].update(status=f"error: {_error(exc)}")
        if "tolerance" in chosen:
            try:
                submit_identified(state, runner, cases, found)
            except Exception as exc:  # noqa: BLE001
                state.sections["tolerance"].setdefault("errors", []).append(_error(exc))
        for name, fn in (("device_agreement", section_device_agreement),
                         ("kernel_arithmetic", section_kernel_arithmetic)):  # fmt: skip
            if name not in chosen:
                continue
            try:
                fn(state)
            except Exception as exc:  # noqa: BLE001
                state.sections[name].update(status=f"error: {_error(exc)}")
        _say(f"gpu_check: collecting {len(runner.pending)} bound tasks")
        runner.finish()
    finally:
        runner.close()
    if "backward_benchmark" in chosen:
        try:  # timed alone: the bound workers are done and gone
            section_backward_benchmark(state)
        except Exception as exc:  # noqa: BLE001
            state.sections["backward_benchmark"].update(status=f"error: {_error(exc)}")
    finish_rows(state)
    state.write()
    took = time.time() - state.started
    _say(f"gpu_check: wrote {args.out / 'gpu.md'} and gpu.json in {took:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
