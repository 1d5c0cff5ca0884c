"""Check any attention variant against the theory: ``verify.check(target, **claims)``.

The target is an :class:`~verify.spec.variant.AttentionVariant`, a plain function
``f(q, k, v, *, causal) -> o``, a zero-argument factory returning either, or an import spec
``"pkg.module:object"``. Claims given here override the variant's own; a variant that claims
no kernel is first probed (``verify.probes``) and the identified claims are used (and said so).

Every applicable property of the catalogue runs in a worker process under a watchdog: a
variant that raises, hangs, crashes, returns the wrong shape/dtype or NaN fails the property
being run with the reason, and the run continues with the next property.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from verify.spec.target import TargetError, apply_claims, as_variant, load_spec  # noqa: F401
from verify.spec.variant import AttentionVariant

SCHEMA = "attn-theory/check/v1"
DEFAULT_DTYPES = ("float64", "float32")
DEFAULT_TIMEOUT = 60.0  # seconds per property (watchdog)


# -- results --------------------------------------------------------------------------------
@dataclass
class CheckResult:
    """Outcome of a check: what the variant computes, and each property's result."""

    variant: str
    description: str
    claims: dict[str, Any]
    results: list[dict[str, Any]] = field(default_factory=list)
    probe: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    target: str = ""

    @property
    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "fail": 0, "skip": 0, "error": 0}
        for r in self.results:
            out[r["status"]] = out.get(r["status"], 0) + 1
        return out

    @property
    def exit_code(self) -> int:
        """0: at least one property ran and none failed; 1: a failure; 3: nothing applied."""
        c = self.counts
        if c["fail"] or c["error"]:
            return 1
        if c["pass"] == 0:
            return 3
        return 0

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.results if r["status"] in ("fail", "error")]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "variant": self.variant,
            "target": self.target,
            "description": self.description,
            "claims": self.claims,
            "probe": self.probe,
            "counts": self.counts,
            "exit_code": self.exit_code,
            "notes": self.notes,
            "results": self.results,
        }


def claims_of(v: AttentionVariant) -> dict[str, Any]:
    """The declared claims as plain JSON values."""
    return {
        "kernel": v.kernel,
        "layout": v.layout,
        "causal": v.causal,
        "causal_alignment": v.causal_alignment,
        "normalized": v.normalized,
        "eps": v.eps,
        "scale": v.scale,
        "dtypes": list(v.dtypes),
        "devices": list(v.devices),
        "feature_map": v.feature_map is not None,
        "state_api": v.state_api is not None,
        "forms": sorted(v.forms),
        "supports_mask": v.supports_mask,
        "denominators": list(v.denominators),
        "length_multiple": v.length_multiple,
        "exp_library": v.exp_library,
        "tolerances": {
            k: {"factor": t.factor, "reason": t.reason} for k, t in v.tolerances.items()
        },
    }


def describe_claims(v: AttentionVariant) -> str:
    """A sentence from the claims, e.g. 'normalized kernel attention, kappa_2 (Taylor-2 of exp)'."""
    norm = "normalized" if v.normalized else "unnormalized"
    if v.kernel_family == "softmax":
        k = "softmax attention (kernel exp)"
    elif v.kernel_family == "taylor":
        k = f"{norm} kernel attention, kappa_{v.order} (Taylor-{v.order} of exp)"
    elif v.kernel_family == "linear":
        k = f"{norm} kernel linear attention, feature map {v.linear_map}"
    else:
        k = f"{norm} attention with an unidentified kernel"
    causal = {"yes": "causal only", "no": "non-causal only", "both": "causal and non-causal"}[
        v.causal
    ]
    return f"{k}, {causal}"


# -- running ---------------------------------------------------------------------------------
def _jobs(variant: AttentionVariant, dtypes, select) -> list[tuple[str, str]]:
    from verify.properties import catalogue

    props = catalogue()
    known = {p.id for p in props}
    for s in select or ():
        if s not in known:
            raise ValueError(f"select: unknown property {s!r}; known: {sorted(known)}")
    out = []
    for p in props:
        if select and p.id not in select:
            continue
        for dt in dtypes:
            if dt in ("bfloat16", "float16") and not p.low_precision:
                continue
            out.append((p.id, dt))
    return out


def run_one(
    variant: AttentionVariant,
    property_id: str,
    dtype: str,
    device: str,
    max_examples: int | None,
    seed: int,
) -> dict[str, Any]:
    """Run one property in this process; returns its JSON result (never raises)."""
    from verify.properties import get
    from verify.properties.support.base import RunContext, run_property
    from verify.spec.results import PropertyResult

    prop = get(property_id)
    if dtype not in variant.dtypes:
        res = PropertyResult(
            property_id=prop.id,
            derivation=prop.derivation,
            statement=prop.statement,
            status="skip",
            dtype=dtype,
            device=device,
            reason=f"the variant does not claim {dtype}",
        )
    else:
        ctx = RunContext(dtype=dtype, device=device, max_examples=max_examples, seed=seed)
        try:
            res = run_property(prop, variant, ctx)
        except Exception as exc:  # the runner itself must never take the battery down
            res = PropertyResult(
                property_id=prop.id,
                derivation=prop.derivation,
                statement=prop.statement,
                status="error",
                dtype=dtype,
                device=device,
                reason=f"internal error: {type(exc).__name__}: {exc}\n"
                + traceback.format_exc(limit=3),
            )
    out = res.to_json()
    out["faults"] = list(prop.faults)
    return out


def _worker(conn, loader, claims, jobs, device, max_examples, seed, profile) -> None:
    """Worker process: build the variant, run the jobs, send each result as it finishes."""
    import torch

    from verify import profiles

    torch.set_num_threads(1)
    profiles.load(profile)
    try:
        variant = apply_claims(loader(), claims)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send(("load-error", f"{type(exc).__name__}: {exc}"))
        conn.close()
        return
    for pid, dt in jobs:
        conn.send(("start", (pid, dt)))
        conn.send(("result", run_one(variant, pid, dt, device, max_examples, seed)))
    conn.send(("done", None))
    conn.close()


class _SpecLoader:
    """Picklable loader that rebuilds the variant from its import spec in a spawned worker."""

    def __init__(self, spec: str) -> None:
        self.spec = spec

    def __call__(self) -> AttentionVariant:
        return as_variant(self.spec)


class _ObjectLoader:
    def __init__(self, variant: AttentionVariant) -> None:
        self.variant = variant

    def __call__(self) -> AttentionVariant:
        return self.variant


def run_isolated(
    loader,
    claims,
    jobs,
    *,
    device,
    max_examples,
    seed,
    profile,
    timeout,
    start_method,
    progress=None,
) -> list[dict[str, Any]]:
    """Run ``jobs`` in worker processes under a watchdog; a hang or crash fails that job only."""
    from verify.properties import get

    ctx = mp.get_context(start_method)
    results: list[dict[str, Any]] = []
    remaining = list(jobs)
    while remaining:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=_worker,
            args=(child, loader, claims, remaining, device, max_examples, seed, profile),
            daemon=True,
        )
        proc.start()
        child.close()
        current = None
        started = time.monotonic()
        load_limit = max(timeout, 120.0)  # importing torch and the variant can take a while
        while True:
            limit = timeout if current is not None else load_limit
            if parent.poll(max(0.0, limit - (time.monotonic() - started))):
                try:
                    kind, payload = parent.recv()
                except EOFError:
                    kind, payload = "crash", None
            else:
                kind, payload = "timeout", None
            if kind == "start":
                current, started = payload, time.monotonic()
                continue
            if kind == "result":
                results.append(payload)
                remaining.pop(0)
                if progress:
                    progress(payload)
                current = None
                started = time.monotonic()
                continue
            if kind == "done":
                break
            if kind == "load-error":
                for pid, dt in remaining:
                    results.append(
                        _failed(get(pid), dt, device, f"could not build the variant: {payload}")
                    )
                remaining = []
                break
            # timeout or crash: the job in flight fails, the battery continues in a new worker
            proc.kill() if kind == "timeout" else None
            proc.join(5)
            if current is None and remaining:
                current = remaining[0]
            if current is not None:
                pid, dt = current
                why = (
                    f"hung: no result within {timeout:.0f} s (watchdog killed the worker)"
                    if kind == "timeout"
                    else f"the worker crashed (exit code {proc.exitcode})"
                )
                res = _failed(get(pid), dt, device, why)
                results.append(res)
                if progress:
                    progress(res)
                remaining.pop(0)
            break
        proc.join(5)
        if proc.is_alive():
            proc.kill()
        parent.close()
    return results


def _failed(prop, dtype: str, device: str, reason: str) -> dict[str, Any]:
    return {
        "property_id": prop.id,
        "derivation": prop.derivation,
        "statement": prop.statement,
        "status": "fail",
        "dtype": dtype,
        "device": device,
        "examples": 0,
        "max_ratio": None,
        "observed": None,
        "bound": None,
        "bound_kind": None,
        "loose": False,
        "reason": reason,
        "counterexample": "",
        "snippet": "",
        "faults": list(prop.faults),
    }


def check(
    target: Any,
    *,
    dtypes: tuple[str, ...] | None = None,
    device: str = "cpu",
    select: list[str] | None = None,
    max_examples: int | None = None,
    seed: int = 0,
    profile: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    isolate: bool = True,
    workers: int | None = None,
    probe: bool | None = None,
    progress=None,
    **claims: Any,
) -> CheckResult:
    """Run the property battery on ``target`` and return a :class:`CheckResult`.

    Args:
        target: AttentionVariant, function ``f(q, k, v, *, causal)``, zero-argument factory, or
            ``"pkg.module:object"``.
        dtypes: dtypes to run (default float64 and float32; bf16/fp16 run the properties with a
            low-precision model).
        device: ``cpu`` or ``cuda``.
        select: property ids to run (default all).
        max_examples, seed, profile: hypothesis settings (profile: ci | dev | thorough).
        timeout: seconds per property before the watchdog kills the worker.
        isolate: run in worker processes (spawned from the import spec when ``target`` is a
            string, forked otherwise); False runs in this process (no watchdog).
        workers: worker processes (default: the CPU count), each running a share of the
            properties under its own watchdog.
        probe: run the black-box probes (default: when the kernel claim is ``unknown``).
        **claims: AttentionVariant fields overriding the variant's (kernel, layout, causal,
            causal_alignment, normalized, eps, scale, ...).

    Raises:
        TargetError: the target cannot be imported or built.
        ValueError, TypeError: invalid claims or options.
    """
    from verify import profiles

    spec = target if isinstance(target, str) else None
    variant = apply_claims(as_variant(target), claims)
    profile = profiles.selected(profile)
    profiles.load(profile)
    dtypes = tuple(dtypes or DEFAULT_DTYPES)
    notes: list[str] = []
    probe_json = None
    if probe or (probe is None and variant.kernel == "unknown"):
        try:
            from verify import probes

            rep = probes.probe(variant)
            probe_json = rep.to_json()
            # claims not given (absent or None) are taken from the probes, so a callable
            # without claims is checked against what it was found to compute
            suggested = {
                k: v
                for k, v in probes.suggested_claims(rep).items()
                if claims.get(k) is None and v != getattr(variant, k, None)
            }
            if suggested:
                variant = apply_claims(variant, suggested)
                notes.append(
                    "claims identified by the black-box probes (state your own to override): "
                    + ", ".join(f"{k}={v!r}" for k, v in sorted(suggested.items()))
                )
            description = probes.describe(rep)
        except ImportError:
            description = describe_claims(variant)
    else:
        description = describe_claims(variant)
    jobs = _jobs(variant, dtypes, select)
    override = {k: v for k, v in claims_of_fields(variant).items()}
    if not isolate:
        results = []
        for pid, dt in jobs:
            r = run_one(variant, pid, dt, device, max_examples, seed)
            results.append(r)
            if progress:
                progress(r)
    else:
        loader = _SpecLoader(spec) if spec else _ObjectLoader(variant)
        start = "spawn" if spec else "fork"
        n = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
        shares = [jobs[i::n] for i in range(n)]  # round-robin: each worker gets a mix

        def run_share(share):
            return run_isolated(
                loader,
                override if spec else {},
                share,
                device=device,
                max_examples=max_examples,
                seed=seed,
                profile=profile,
                timeout=timeout,
                start_method=start,
                progress=progress,
            )

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=n) as pool:
            done = list(pool.map(run_share, shares))
        by_job = {}
        for share, res in zip(shares, done):
            for job, r in zip(share, res):
                by_job[job] = r
        results = [by_job[j] for j in jobs]
    if spec:
        for r in results:
            if r.get("snippet"):
                r["snippet"] = _reproducer(spec, variant, r["snippet"])
    return CheckResult(
        variant=variant.name,
        description=description,
        claims=claims_of(variant),
        results=results,
        probe=probe_json,
        notes=notes,
        target=spec or variant.name,
    )


def claims_of_fields(v: AttentionVariant) -> dict[str, Any]:
    """The claim fields (picklable values) to re-apply in a spawned worker."""
    return {
        "name": v.name,
        "layout": v.layout,
        "kernel": v.kernel,
        "causal": v.causal,
        "causal_alignment": v.causal_alignment,
        "normalized": v.normalized,
        "eps": v.eps,
        "scale": v.scale,
        "dtypes": v.dtypes,
        "devices": v.devices,
        "length_multiple": v.length_multiple,
        "exp_library": v.exp_library,
    }


def _reproducer(spec: str, variant: AttentionVariant, inputs_snippet: str) -> str:
    """The example's tensors plus the lines that call the variant on them."""
    mod, attr = spec.split(":")
    lines = [
        inputs_snippet.rstrip(),
        "",
        "from verify.spec.target import as_variant",
        "",
        f"variant = as_variant({spec!r})  # {mod}:{attr}",
    ]
    if variant.layout == "BTHD":
        lines.append("q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # the variant's layout")
    kwargs = "causal=causal"
    if "attn_mask = None" not in inputs_snippet and "attn_mask = " in inputs_snippet:
        kwargs += ", attn_mask=attn_mask"
    m = re.search(r"^# denominator = '(\w+)'", inputs_snippet, flags=re.M)
    if m and variant.denominators:
        kwargs += f", denominator={m.group(1)!r}"
    lines.append(f"o = variant.forward(q, k, v, {kwargs})")
    lines.append("print(o)")
    return "\n".join(lines) + "\n"
