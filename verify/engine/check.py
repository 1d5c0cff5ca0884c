"""Check any attention variant against the theory: the probes, then the battery.

The target is an :class:`~verify.spec.variant.AttentionVariant`, a plain function
``f(q, k, v, *, causal) -> o``, a zero-argument factory returning either, or an import spec
``"pkg.module:object"`` (``verify.spec.target``). Claims given here override the variant's own.
The black-box probes (``verify.probes``) run first, in a worker under the watchdog: with no
kernel claimed they identify it; with one claimed only the cheap probes run (input
restrictions, compute dtype, causal alignment, empty rows, the eps convention). What they find
fills the fields the variant does not declare -- a declared field (given to its constructor or
here) is never overwritten (``verify.probes.findings.merge``) -- and is said so
(:attr:`CheckResult.findings`).

Every applicable property of the catalogue runs in worker processes under the watchdog
(``verify.engine.pool``): a variant that raises, hangs, crashes, returns the wrong shape/dtype or
NaN fails the property being run with the reason, and the run continues.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verify.engine.groups import FailureGroup, group_failures
from verify.engine.jobs import PROBE, Job, ObjectLoader, SpecLoader, battery
from verify.engine.pool import DEFAULT_TIMEOUT, run_jobs
from verify.spec.results import PropertyResult
from verify.spec.target import apply_claims, as_variant
from verify.spec.variant import AttentionVariant, claim_fields, claims_json
from verify.spec.vocabulary import LOW_PRECISION_DTYPES

DEFAULT_DTYPES = ("float64", "float32")
#: exit codes of ``attn-theory check`` (and :attr:`CheckResult.exit_code`): a property passed and
#: none failed; a property failed; a usage or import error; nothing applied; an internal error of
#: the checker (never the variant's) and no failure. Precedence: fail > internal error > pass.
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_NONE, EXIT_INTERNAL = 0, 1, 2, 3, 4


@dataclass
class CheckResult:
    """Outcome of a check: the claims checked, the probe report (when the probes ran), notes,
    the probes' findings, and one :class:`PropertyResult` per (property, dtype)."""

    variant: AttentionVariant
    results: list[PropertyResult] = field(default_factory=list)
    probe: Any = None
    notes: list[str] = field(default_factory=list)
    target: str = ""
    #: the precision-model probe (``verify.probes.precision_model``) when it ran
    precision: dict | None = None
    #: what the probes found that the check used or that a declared claim overrode, one
    #: sentence each (``verify.probes.findings.sentences``)
    findings: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.variant.name

    @property
    def claims(self) -> dict[str, Any]:
        return claims_json(self.variant)

    @property
    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "fail": 0, "skip": 0, "error": 0}
        for r in self.results:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    @property
    def exit_code(self) -> int:
        """1 when a property failed; else 4 when the checker itself erred (status ``error``);
        else 0 when a property passed; else 3 (nothing applied)."""
        c = self.counts
        if c["fail"]:
            return EXIT_FAIL
        if c["error"]:
            return EXIT_INTERNAL
        if c["pass"] == 0:
            return EXIT_NONE
        return EXIT_OK

    @property
    def failed(self) -> list[PropertyResult]:
        """The variant's failures."""
        return [r for r in self.results if r.status == "fail"]

    @property
    def errors(self) -> list[PropertyResult]:
        """The checker's own errors (an exception in a check): not the variant's."""
        return [r for r in self.results if r.status == "error"]

    @property
    def groups(self) -> list[FailureGroup]:
        """The failures grouped by root cause (``verify.engine.groups``: the rule), roots in
        dependency order."""
        order = list(dict.fromkeys(r.property_id for r in self.results))
        return group_failures(self.failed, order)

    @property
    def skips(self) -> list[tuple[str, list[PropertyResult]]]:
        """The skipped runs by reason (the first clause of the reason), most frequent first."""
        by: dict[str, list[PropertyResult]] = {}
        for r in self.results:
            if r.status == "skip":
                by.setdefault(skip_reason(r.reason), []).append(r)
        return sorted(by.items(), key=lambda kv: -len(kv[1]))


def skip_reason(reason: str) -> str:
    """The first clause of a skip reason (what the grouping of skips counts by)."""
    head = (reason or "no reason").split("\n")[0].split(": ")[0].split(" (")[0].strip()
    return head or "no reason"


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
    """Run the probes (unless ``probe`` is False) and the property battery.

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
        workers: worker processes (default: the CPU count).
        probe: run the black-box probes (default True: the kernel identification when no kernel
            is claimed, else the cheap probes of restrictions and conventions); False: none.
        progress: called with each :class:`PropertyResult` as it finishes.
        **claims: AttentionVariant fields overriding the variant's (kernel, layout, causal,
            causal_alignment, normalized, eps, scale, ...).

    Raises:
        TargetError: the target cannot be imported or built.
        ValueError, TypeError: invalid claims or options.
        ValueError: an unknown property id in ``select``.
    """
    from verify import profiles

    spec = target if isinstance(target, str) else None
    variant = apply_claims(as_variant(target), claims)
    if dtypes:  # asking for a dtype is claiming it
        claimed = tuple(dict.fromkeys((*variant.dtypes, *dtypes)))
        if claimed != variant.dtypes:
            variant = variant.with_claims(dtypes=claimed)
            claims = {**claims, "dtypes": claimed}
    profile = profiles.selected(profile)
    profiles.load(profile)
    dtypes = tuple(dtypes or DEFAULT_DTYPES)
    battery(None, select=select)  # validates ``select`` before any work

    def run(jobs: list[Job], tick=None) -> list[Any]:
        if not isolate:
            from verify.engine.run import run_job

            out = []
            for job in jobs:
                out.append(
                    run_job(
                        variant,
                        job,
                        device=device,
                        max_examples=max_examples,
                        seed=seed,
                        shrink_draws=_shrink(),
                    )
                )
                if tick:
                    tick(len(out), len(jobs), job, out[-1])
            return out
        loader = (
            SpecLoader(spec, tuple(sorted(claim_fields(variant).items())))
            if spec
            else ObjectLoader(variant)
        )
        return run_jobs(
            [Job(loader, j.property_id, j.dtype, j.label) for j in jobs],
            device=device,
            max_examples=max_examples,
            seed=seed,
            profile=profile,
            shrink_draws=_shrink(),
            timeout=timeout,
            workers=workers,
            start_method="spawn" if spec else "fork",
            progress=tick,
        )

    notes: list[str] = []
    findings: list[str] = []
    report = None
    if probe is not False:
        report = run([Job(None, PROBE, "float64")])[0]
        if isinstance(report, str):  # the probe itself hung or crashed
            notes.append(f"probes: {report}")
            report = None
        else:
            from verify import probes
            from verify.probes.findings import merge, sentences

            # fields the variant does not declare are taken from the probes, so a callable
            # without claims is checked against what it was found to compute; a declared
            # field keeps its value (the probes never excuse a variant from its own claim)
            merged = merge(variant, probes.suggested_claims(report))
            variant = merged.variant
            findings = sentences(merged)
            if merged.applied:
                notes.append(
                    "claims identified by the black-box probes (state your own to override): "
                    + ", ".join(f"{k}={v!r}" for k, v in sorted(merged.applied.items()))
                )
    precision = None
    low = [dt for dt in dtypes if dt in LOW_PRECISION_DTYPES]
    if low and variant.kernel_family == "softmax" and not variant.precision:
        from verify.probes.precision_model import combine, fallback, finding_sentence, sentence

        found = [f if isinstance(f, dict) else {"dtype": dt, "model": None, "reason": f}
                 for dt, f in zip(low, run([Job(None, PROBE, dt) for dt in low]))]  # fmt: skip
        chosen = combine(found)
        used = chosen or fallback(found)
        precision = {"found": found, "model": used}
        notes.append(f"{sentence(found, chosen)}: the low-precision bounds use it")
        if finding := finding_sentence(found):
            notes.append(finding)
        variant = apply_claims(variant, {"precision": used})
        claims = {**claims, "precision": used}
    tick = (lambda i, n, job, res: progress(res)) if progress else None
    results = run(battery(None, dtypes=dtypes, select=select), tick)
    if spec:
        given = _claims_beyond(spec, variant)
        for r in results:
            if r.snippet:
                r.snippet = reproducer(spec, variant, r.snippet, claims=given, result=r)
    return CheckResult(
        variant=variant,
        results=results,
        probe=report,
        notes=notes,
        target=spec or variant.name,
        precision=precision,
        findings=findings,
    )


def _shrink() -> int:
    from verify.properties.support.base import SHRINK_DRAWS

    return SHRINK_DRAWS


def _claims_beyond(spec: str, variant: AttentionVariant) -> dict[str, Any]:
    """The claims of ``variant`` that its import spec alone does not make (given or probed)."""
    try:
        base = claim_fields(as_variant(spec))
    except Exception:  # noqa: BLE001 - the reproducer then states every claim
        base = {}
    return {k: v for k, v in claim_fields(variant).items() if k != "name" and base.get(k) != v}


def reproducer(
    spec: str,
    variant: AttentionVariant,
    inputs_snippet: str,
    *,
    claims: dict | None = None,
    result: PropertyResult | None = None,
) -> str:
    """The example's tensors, the lines that call the variant (with ``claims``, the claims
    beyond its import spec) on them as the failing run did, the reference and the difference
    against the derived bound when the example is attention inputs and the claimed kernel has
    a reference, and the failing property (``result``'s) re-checked on the example
    (``verify.properties.support.reproduce.code``)."""
    from verify.properties.support.reproduce import code

    run = {} if result is None else {
        "property_id": result.property_id, "dtype": result.dtype, "device": result.device
    }  # fmt: skip
    return code(spec, variant, inputs_snippet, claims=claims, **run)
