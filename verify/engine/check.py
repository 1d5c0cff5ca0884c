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

Before any of it the target's call signatures are checked and ONE tiny call is made
(``verify.engine.preflight``): a target the checker cannot call is a usage error (exit 2) within
seconds, and a variant that hangs or crashes on a 2-token call fails ``accepts-inputs`` there
(exit 1) without the battery running.

Every applicable property of the catalogue runs in worker processes under the watchdog
(``verify.engine.pool``): a variant that raises, crashes, returns the wrong shape/dtype or NaN
fails the property being run with the reason, and the run continues. A property whose time ran
out (the time limit, a machine too loaded) is ``inconclusive``: the checker's limit, counted
apart from passes and failures, never the variant's failure.

The empty-row convention is read in every dtype checked (``verify.probes.conventions.
probe_empty_rows``): when it differs by dtype, each dtype's runs are judged against their own.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from verify.engine import preflight
from verify.engine.groups import FailureGroup, given_needs, group_failures
from verify.engine.jobs import PRECALL, PROBE, Job, Loaders, battery
from verify.engine.pool import DEFAULT_TIMEOUT, Workers, run_jobs
from verify.spec.results import STATUSES, PropertyResult
from verify.spec.target import TargetError, apply_claims, as_variant
from verify.spec.variant import AttentionVariant, claim_fields, claims_json
from verify.spec.vocabulary import LOW_PRECISION_DTYPES

DEFAULT_DTYPES = ("float64", "float32")
#: exit codes of ``attn-theory check`` (and :attr:`CheckResult.exit_code`): a property passed and
#: none failed; a property failed; a usage or import error; nothing applied; an internal error of
#: the checker (never the variant's) and no failure; a run inconclusive (the checker's limits
#: ran out: the time limit, a loaded machine) and no failure nor internal error.
#: Precedence: fail > internal error > inconclusive > pass > nothing applied.
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_NONE, EXIT_INTERNAL, EXIT_INCONCLUSIVE = 0, 1, 2, 3, 4, 5


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
    #: the empty-row convention each dtype's runs were judged against, when it differs by
    #: dtype (``verify.probes.findings.empty_rows_by_dtype``); {} otherwise
    empty_rows_by_dtype: dict[str, str | None] = field(default_factory=dict)
    #: warnings libraries issued during the check ("Category: message" -> count), captured
    #: so that none reaches the terminal
    warnings: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.variant.name

    @property
    def claims(self) -> dict[str, Any]:
        return claims_json(self.variant)

    @property
    def counts(self) -> dict[str, int]:
        """Runs by status (every one of ``verify.spec.results.STATUSES``, 0 when none)."""
        out = dict.fromkeys(STATUSES, 0)
        for r in self.results:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    @property
    def exit_code(self) -> int:
        """1 when a property failed; else 4 when the checker itself erred (status ``error``);
        else 5 when a run was inconclusive (the checker's limits ran out); else 0 when a property
        passed; else 3 (nothing applied)."""
        c = self.counts
        if c["fail"]:
            return EXIT_FAIL
        if c["error"]:
            return EXIT_INTERNAL
        if c["inconclusive"]:
            return EXIT_INCONCLUSIVE
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
    def inconclusive(self) -> list[PropertyResult]:
        """The runs the checker's limits stopped before a verdict: not the variant's."""
        return [r for r in self.results if r.status == "inconclusive"]

    @property
    def groups(self) -> list[FailureGroup]:
        """The failures grouped by root cause (``verify.engine.groups``: the rule), roots in
        dependency order."""
        order = list(dict.fromkeys(r.property_id for r in self.results))
        return group_failures(self.failed, order, given_needs(self.variant))

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
    """Check the target's signatures and make one tiny call, run the probes (unless ``probe`` is
    False) and the property battery.

    Args:
        target: AttentionVariant, function ``f(q, k, v, *, causal)``, zero-argument factory, or
            ``"pkg.module:object"``.
        dtypes: dtypes to run (default float64 and float32; bf16/fp16 run the properties with a
            low-precision model).
        device: ``cpu`` or ``cuda``.
        select: property ids to run (default all).
        max_examples, seed, profile: hypothesis settings (profile: ci | dev | thorough).
        timeout: seconds per property; past them the run stops with what it has (a failure
            found, else ``inconclusive``), and a worker that does not stop is killed.
        isolate: run in worker processes (spawned from the import spec when ``target`` is a
            string, forked otherwise); False runs in this process (no time limit).
        workers: worker processes (default: the CPU count).
        probe: run the black-box probes (default True: the kernel identification when no kernel
            is claimed, else the cheap probes of restrictions and conventions); False: none.
        progress: called with each :class:`PropertyResult` as it finishes (and, when it has a
            ``start`` method, first with the number of runs planned).
        **claims: AttentionVariant fields overriding the variant's (kernel, layout, causal,
            causal_alignment, normalized, eps, scale, ...).

    Raises:
        TargetError: the target cannot be imported or built, a callable of it cannot take the
            checker's calls (``verify.engine.preflight``: the expected and the found signature),
            or its tiny call raised a TypeError or returned no tensor of the input's shape.
        ValueError, TypeError: invalid claims or options.
        ValueError: an unknown property id in ``select``.
    """
    import warnings

    with warnings.catch_warnings(record=True) as rec, Workers() as pool:  # no warning
        warnings.simplefilter("always")  # reaches the user's terminal; workers are kept
        result = _check(
            pool,
            target,
            dtypes=dtypes,
            device=device,
            select=select,
            max_examples=max_examples,
            seed=seed,
            profile=profile,
            timeout=timeout,
            isolate=isolate,
            workers=workers,
            probe=probe,
            progress=progress,
            **claims,
        )
    from verify.engine.run import warning_counts

    result.warnings = dict(Counter(result.warnings) + Counter(warning_counts(rec)))
    return result


def _check(
    pool: Workers,
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
    """:func:`check`'s work (its warnings recorded by :func:`check`)."""
    from verify import profiles

    spec = target if isinstance(target, str) else None
    if spec and (why := preflight.spec_problem(spec)):
        raise TargetError(why)
    variant = apply_claims(as_variant(target), claims)
    asked = tuple(dtypes) if dtypes else None
    if dtypes:  # asking for a dtype is claiming it
        claimed = tuple(dict.fromkeys((*variant.dtypes, *dtypes)))
        if claimed != variant.dtypes:
            variant = variant.with_claims(dtypes=claimed)
            claims = {**claims, "dtypes": claimed}
    if problems := preflight.signature_problems(variant):
        raise TargetError("the checker cannot call the target: " + "; ".join(problems))
    profile = profiles.selected(profile)
    profiles.load(profile)
    dtypes = tuple(dtypes or DEFAULT_DTYPES)
    plan = battery(None, dtypes=dtypes, select=select)  # validates ``select`` before any work
    caught: Counter = Counter()
    by_dtype: dict[str, AttentionVariant] = {}  # per-dtype claims (the empty-row convention)
    loader_of = Loaders(spec)

    def run(jobs: list[Job], tick=None, n: int | None = workers, stop=None) -> list[Any]:
        if not isolate:
            return _in_process(jobs, lambda dt: by_dtype.get(dt, variant), tick, stop, caught,
                               device=device, max_examples=max_examples, seed=seed)  # fmt: skip
        return run_jobs(
            [Job(loader_of(by_dtype.get(j.dtype, variant)), j.property_id, j.dtype, j.label)
             for j in jobs],
            device=device,
            max_examples=max_examples,
            seed=seed,
            profile=profile,
            shrink_draws=_shrink(),
            timeout=timeout,
            workers=n,
            start_method="spawn" if spec else "fork",
            progress=tick,
            stop=stop,
            warnings=caught,
            pool=pool,
        )  # fmt: skip

    def result(results, **kw) -> CheckResult:
        return CheckResult(variant=variant, results=results, notes=notes,
                           target=spec or variant.name, warnings=dict(caught), **kw)  # fmt: skip

    notes: list[str] = []
    findings: list[str] = []
    rows: dict[str, str | None] | None = None  # the empty-row convention of each dtype
    tiny = preflight.tiny_dtype(variant, asked)
    first = [Job(None, PRECALL, tiny)]
    if probe is not False:
        first.append(Job(None, PROBE, "float64"))
    got = run(first, n=1, stop=lambda job, res: job.property_id == PRECALL and _stops(res))
    pre, report = got[0], got[1] if len(got) > 1 else None
    if isinstance(pre, dict) and pre["status"] == "usage":
        raise TargetError(f"the checker's 2-token call: {pre['message']}")
    if isinstance(pre, dict) and pre["status"] == "note":
        notes.append(f"the 2-token call: {pre['message']} (the battery judges it)")
    elif isinstance(pre, str):
        if _stops(pre):  # the variant hung, crashed or could not be built on a 2-token call
            return result(stopped_results(pre, variant, tiny, device, plan))
        notes.append(f"the 2-token call: {pre}")
    if isinstance(report, str):  # the probe itself hung or crashed
        notes.append(f"probes: {report}")
        report = None
    elif report is not None:
        from verify import probes
        from verify.probes.findings import empty_rows_by_dtype, merge, sentences

        # fields the variant does not declare are taken from the probes, so a callable
        # without claims is checked against what it was found to compute; a declared
        # field keeps its value (the probes never excuse a variant from its own claim)
        suggested = probes.suggested_claims(report)
        rows, said = empty_rows_by_dtype(variant, report, dtypes)
        if rows is not None:  # read in every dtype: one convention, or one per dtype
            suggested.pop("empty_rows", None)
            if len(set(rows.values())) == 1 and None not in rows.values():
                suggested["empty_rows"], rows = next(iter(rows.values())), None
        merged = merge(variant, suggested)
        variant = merged.variant
        findings = sentences(merged, ("empty_rows",) if said else ()) + said
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
    if report is not None and rows:
        by_dtype.update({dt: variant.with_found(empty_rows=rows.get(dt)) for dt in dtypes})
    if progress is not None and hasattr(progress, "start"):
        progress.start(len(plan))
    tick = (lambda i, n, job, res: progress(res)) if progress else None
    results = run(plan, tick)
    if spec:
        beyond: dict[int, dict] = {}
        for r in results:
            if r.snippet:
                v = by_dtype.get(r.dtype, variant)
                given = beyond.setdefault(id(v), _claims_beyond(spec, v))
                r.snippet = reproducer(spec, v, r.snippet, claims=given, result=r)
    return result(
        results,
        probe=report,
        precision=precision,
        findings=findings,
        empty_rows_by_dtype=dict(rows or {}),
    )


def stopped_results(why: str, variant, dtype: str, device: str, jobs) -> list:
    """The results of a check stopped by its tiny call: ``accepts-inputs`` failing in ``dtype``
    with ``why`` (the variant's failure: it hung or crashed on a 2-token call), every other
    job of the battery (``jobs``) skipped, saying why it did not run."""
    from verify.engine.run import result_for
    from verify.properties.support.base import ACCEPTS_INPUTS as ACCEPTS_INPUTS_ID

    out = [result_for(ACCEPTS_INPUTS_ID, dtype, device, status="fail", reason=why)]
    head = why.split(":")[0]
    for job in jobs:
        if (job.property_id, job.dtype) != (ACCEPTS_INPUTS_ID, dtype):
            out.append(
                result_for(
                    job.property_id,
                    job.dtype,
                    device,
                    status="skip",
                    reason=f"the variant {head}, so this did not run (accepts-inputs, {dtype})",
                )
            )
    return out


def _stops(res: Any) -> bool:
    """Whether the tiny call's result ends the check: a usage error, or a reason string other
    than an inconclusive one (the variant hung, crashed or could not be built on it)."""
    if isinstance(res, dict):
        return res.get("status") == "usage"
    return isinstance(res, str) and not res.startswith("inconclusive")


def _in_process(jobs, variant_for, tick, stop, caught: Counter, **kw) -> list[Any]:
    """``jobs`` run one by one in this process (no time limit), warnings counted in
    ``caught``; ``stop(job, result)`` True leaves the rest unrun (None)."""
    import warnings

    from verify.engine.run import run_job, warning_counts

    out: list[Any] = [None] * len(jobs)
    for i, job in enumerate(jobs):
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            out[i] = run_job(variant_for(job.dtype), job, shrink_draws=_shrink(), **kw)
        if counts := warning_counts(rec):
            caught.update(counts)
            if isinstance(getattr(out[i], "warnings", None), dict):
                out[i].warnings = counts
        if tick:
            tick(i + 1, len(jobs), job, out[i])
        if stop is not None and stop(job, out[i]):
            break
    return out


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
