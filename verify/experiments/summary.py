"""Statistics over seeds, the measured ordering with its tests, and the papers' qualitative
claims as tested results (verdicts follow from the tests).

Scores. A run's score is its accuracy at the end of training. A run that diverged for a reason
of its own (loss above the threshold, a non-finite value not caused by a vanishing divisor)
scores 0: the model failed. A run whose divergence is a *missing eps* (``recall.divergence_cause``:
0/0 or x/0 in the denominator) is excluded -- it says nothing about the form, only about calling
it without eps -- and reported as such; it is never counted as evidence.

Tests (``verify.experiments.stats``). Two forms a and b of one set-up are compared on the seeds
where both have a score, through the per-seed differences d = score(a) - score(b). An ordering
joins neighbours by the two-sided sign-flip test of mean d = 0. A claim's comparison is decided
by three tests with one margin ``MARGIN``: *above* (mean d > +MARGIN: one-sided test of
d - MARGIN), *below* (mean d < -MARGIN: one-sided test of d + MARGIN) and *equivalent*
(|mean d| < MARGIN: TOST). Its outcome (``outcome``) is the one whose Holm-adjusted p-value is
<= ``ALPHA``, else undecided: a point estimate beyond the margin decides nothing by itself. All
three tests of every comparison of a claim form one Holm family, and every claim maps the same
outcomes to support or against.

Verdicts (``VERDICTS``) hold at the scale of this experiment only (one-layer models, T <= 24, at
most a few hundred steps): "supported / not supported / mixed at this scale" say what these runs
show, never that a paper's claim holds or fails at the scale the paper addresses. When each rule
was fixed relative to the runs is stated in the report (``rules_fixed`` and the note of the
document), not here.
"""

from __future__ import annotations

import statistics as st
from dataclasses import dataclass

from verify.experiments.recall import Form, RunResult
from verify.experiments.stats import (
    ALPHA,
    beyond_margin_p,
    equivalence_p,
    holm,
    mean,
    sample_std,
    sign_flip_p,
)

#: the margin of accuracy of every claim's comparison: "above" / "below" mean beyond +-MARGIN
#: (one-sided tests of the shifted differences), "equivalent" within +-MARGIN (TOST)
MARGIN = 0.02
#: a pair whose mean accuracies are both at least CEILING is flagged "at the ceiling": an
#: equivalence there says both solve the task, not that the forms are alike elsewhere
CEILING = 0.97

SUPPORTED = "supported at this scale"
NOT_SUPPORTED = "not supported at this scale"
MIXED = "mixed at this scale"
UNDECIDED = "undecided"
NOT_TESTABLE = "not testable in this set-up"
NOT_MEASURED = "not measured"
#: the verdict vocabulary of the experiment's claims (decided verdicts name the scale)
VERDICTS = (SUPPORTED, NOT_SUPPORTED, MIXED, UNDECIDED, NOT_TESTABLE, NOT_MEASURED)


def score(r: RunResult) -> float | None:
    """The run's score (see the module docstring): accuracy, 0 for a genuine divergence, None
    for a missing-eps divergence (excluded)."""
    if not r.diverged:
        return r.accuracy
    return None if r.missing_eps else 0.0


@dataclass(frozen=True)
class FormSummary:
    """Statistics of one form in one set-up over seeds (score fields None when no run scored)."""

    setup: str
    form: str
    family: str
    order: int | None
    runs: int
    scored: int  # runs with a score (finished, or genuinely diverged and scored 0)
    diverged: int  # genuine divergences (scored 0)
    missing_eps: int  # divergences from a missing eps (excluded)
    mean: float | None
    std: float | None  # sample standard deviation over seeds (ddof = 1)
    min: float | None
    max: float | None
    plateau: int  # runs stopped by the plateau criterion
    cap: int  # runs stopped at max_steps
    median_steps: float | None
    final_loss: float | None  # mean over finished runs of the last interval's training loss
    radius: float | None  # median over runs of the final score radius
    min_abs_D: float | None  # smallest |D_t| over runs (final evaluations)
    neg_D_fraction: float | None  # mean over runs of the fraction of D_t < 0 (final evaluation)
    sign_change_rows: float | None  # mean over runs of the rows whose D_t changes sign
    seconds: float
    cpu_seconds: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _diag_values(runs: list[RunResult], key: str) -> list[float]:
    return [
        r.diagnostics[key]
        for r in runs
        if r.diagnostics is not None and r.diagnostics.get(key) is not None and not r.diverged
    ]


def summarize(setups: list[tuple[str, list[Form]]], results: list[RunResult]) -> list[FormSummary]:
    """One ``FormSummary`` per (set-up, form), in the order given (``setups``: name and forms)."""
    out = []
    for name, forms in setups:
        for f in forms:
            runs = [r for r in results if r.setup == name and r.form == f.name]
            scores = [s for s in (score(r) for r in runs) if s is not None]
            ok = [r for r in runs if not r.diverged]
            losses = [r.final_loss for r in ok if r.final_loss is not None]
            radius = _diag_values(runs, "radius")
            dmin = _diag_values(runs, "min_abs_D")
            neg = _diag_values(runs, "neg_D_fraction")
            flips = _diag_values(runs, "sign_change_rows")
            out.append(
                FormSummary(
                    setup=name,
                    form=f.name,
                    family=f.family,
                    order=f.order,
                    runs=len(runs),
                    scored=len(scores),
                    diverged=sum(r.diverged and not r.missing_eps for r in runs),
                    missing_eps=sum(r.diverged and r.missing_eps for r in runs),
                    mean=mean(scores) if scores else None,
                    std=sample_std(scores),
                    min=min(scores) if scores else None,
                    max=max(scores) if scores else None,
                    plateau=sum(r.stop == "plateau" for r in runs),
                    cap=sum(r.stop == "cap" for r in runs),
                    median_steps=st.median(r.steps for r in ok) if ok else None,
                    final_loss=mean(losses) if losses else None,
                    radius=st.median(radius) if radius else None,
                    min_abs_D=min(dmin) if dmin else None,
                    neg_D_fraction=mean(neg) if neg else None,
                    sign_change_rows=mean(flips) if flips else None,
                    seconds=sum(r.seconds for r in runs),
                    cpu_seconds=sum(r.cpu_seconds for r in runs),
                )
            )
    return out


# ----------------------------------------------------------------------------- paired tests

_TEST_NAMES = {
    "difference": "exact paired sign-flip permutation test, two-sided (H0: mean d = 0)",
    "above": f"one-sided exact sign-flip test of d − {MARGIN:g} (H0: mean d ≤ +{MARGIN:g})",
    "below": f"one-sided exact sign-flip test of d + {MARGIN:g} (H0: mean d ≥ −{MARGIN:g})",
    "equivalence": f"TOST of two one-sided exact sign-flip tests (H0: |mean d| ≥ {MARGIN:g})",
}
#: the three tests of a claim's comparison, in the order ``comparison`` returns them
MARGIN_KINDS = ("above", "below", "equivalence")
#: the decided outcomes of a claim's comparison a − b
ABOVE, BELOW, EQUIVALENT = "above", "below", "equivalent"


def paired(results: list[RunResult], setup: str, a: str, b: str) -> tuple[list[int], list[float]]:
    """Seeds where both forms scored in ``setup``, and the differences score(a) - score(b)."""
    sa = {r.seed: score(r) for r in results if r.setup == setup and r.form == a}
    sb = {r.seed: score(r) for r in results if r.setup == setup and r.form == b}
    seeds = sorted(s for s in sa if s in sb and sa[s] is not None and sb[s] is not None)
    return seeds, [sa[s] - sb[s] for s in seeds]


def compare(results, setup: str, a: str, b: str, *, kind: str = "difference") -> dict:
    """One paired test of d = score(a) - score(b) in ``setup`` (unadjusted; see ``adjust``).

    ``kind``: ``difference`` (two-sided, H0 mean d = 0), ``above`` (H0 mean d <= +MARGIN),
    ``below`` (H0 mean d >= -MARGIN) or ``equivalence`` (TOST, H0 |mean d| >= MARGIN); any
    other value raises ValueError. ``p`` is None when no seed has both scores.
    """
    if kind not in _TEST_NAMES:
        raise ValueError(f"kind: expected one of {', '.join(_TEST_NAMES)}, got {kind!r}")
    seeds, d = paired(results, setup, a, b)
    rec = {
        "setup": setup, "a": a, "b": b, "kind": kind, "n": len(d), "test": _TEST_NAMES[kind],
        "mean_diff": mean(d) if d else None,
        "min_diff": min(d) if d else None,
        "max_diff": max(d) if d else None,
        "a_better": sum(x > 0 for x in d),
        "b_better": sum(x < 0 for x in d),
        "p": None, "p_holm": None, "decided": False,
    }  # fmt: skip
    if d:
        if kind == "difference":
            rec["p"] = sign_flip_p(d)
        elif kind == "equivalence":
            rec["p"] = equivalence_p(d, MARGIN)
        else:
            rec["p"] = beyond_margin_p(d, MARGIN, kind)
    return rec


def comparison(results, setup: str, a: str, b: str) -> list[dict]:
    """The three margin tests of a − b in ``setup`` (``MARGIN_KINDS`` order), unadjusted:
    Holm-adjust them with the rest of their claim's family (``adjust``), then read them with
    ``outcome``."""
    return [compare(results, setup, a, b, kind=k) for k in MARGIN_KINDS]


def adjust(tests: list[dict]) -> list[dict]:
    """Holm-adjust the tests of one family in place (tests without a p-value are left out of the
    family); ``decided`` = adjusted p <= ALPHA. Returns ``tests``."""
    run = [t for t in tests if t["p"] is not None]
    for t, adj in zip(run, holm([t["p"] for t in run])):
        t["p_holm"] = adj
        t["decided"] = adj <= ALPHA
        t["family_size"] = len(run)
    return tests


def outcome(tests: list[dict]) -> str:
    """The outcome of one comparison from its Holm-adjusted margin tests (``comparison``, then
    ``adjust``): ``above`` / ``below`` (by more than MARGIN) or ``equivalent`` (within
    +-MARGIN) -- the one whose test decided; ``undecided`` when none did (or, which the exact
    tests make impossible but is guarded, more than one); ``not measured`` without a common
    seed. ValueError when ``tests`` are not one comparison's three adjusted margin tests."""
    if sorted(t["kind"] for t in tests) != sorted(MARGIN_KINDS):
        raise ValueError(
            f"tests: expected the tests {', '.join(MARGIN_KINDS)} of one comparison, got "
            f"{[t['kind'] for t in tests]}"
        )
    if all(t["p"] is None for t in tests):
        return NOT_MEASURED
    if any(t["p_holm"] is None for t in tests):
        raise ValueError("tests: expected Holm-adjusted tests (adjust), got unadjusted ones")
    won = [t["kind"] for t in tests if t["decided"]]
    if len(won) != 1:
        return UNDECIDED
    return {"above": ABOVE, "below": BELOW, "equivalence": EQUIVALENT}[won[0]]


def _fmt_p(p: float | None) -> str:
    if p is None:
        return "—"
    return f"{p:.2g}" if p < 0.01 else f"{p:.3f}"


def _words(tests: list[dict]) -> str:
    t = tests[0]
    return {
        ABOVE: f"{t['a']} above {t['b']} by more than {MARGIN:g}",
        BELOW: f"{t['a']} below {t['b']} by more than {MARGIN:g}",
        EQUIVALENT: f"equivalent within ±{MARGIN:g}",
        UNDECIDED: f"undecided (neither beyond ±{MARGIN:g} nor equivalent shown)",
        NOT_MEASURED: NOT_MEASURED,
    }[outcome(tests)]


def describe(tests: list[dict]) -> str:
    """One comparison in words: the pair, n, mean and range of d, seeds a > b / a < b, the
    Holm-adjusted p of each margin test, and the outcome."""
    t = tests[0]
    if t["p"] is None:
        return f"{t['a']} vs {t['b']} ({t['setup']}): not measured (no seed with both scores)"
    what = _words(tests)
    ps = ", ".join(f"{x['kind']} {_fmt_p(x['p_holm'])}" for x in tests)
    return (
        f"{t['a']} − {t['b']} ({t['setup']}, n={t['n']}): mean {t['mean_diff']:+.3f} "
        f"[{t['min_diff']:+.3f}, {t['max_diff']:+.3f}], seeds a > b / a < b "
        f"{t['a_better']}/{t['b_better']}, Holm p {ps}: {what}"
    )


# ----------------------------------------------------------------------------- ordering


def ordering(summaries: list[FormSummary], results: list[RunResult], setup: str) -> dict:
    """Forms of ``setup`` by mean score, best first, each neighbour pair tested (two-sided
    sign-flip, Holm over the set-up's neighbour pairs). The line joins neighbours by ``>`` when
    the adjusted p-value is <= ALPHA and by ``~`` (not resolved) otherwise; ``~`` never claims
    equality, and ``>`` claims a non-zero difference, not one beyond the claims' margin. Forms
    with no score (every run a missing-eps divergence) are listed apart.
    """
    mine = [s for s in summaries if s.setup == setup]
    measured = sorted((s for s in mine if s.mean is not None), key=lambda s: -s.mean)
    excluded = [s for s in mine if s.mean is None]
    tests = adjust(
        [compare(results, setup, a.form, b.form) for a, b in zip(measured, measured[1:])]
    )
    parts = []
    for i, s in enumerate(measured):
        if i:
            t = tests[i - 1]
            parts.append(">" if t["decided"] else "~")
        parts.append(f"{s.form} {s.mean:.3f}")
    line = " ".join(parts)
    if excluded:
        line += " ; no score (every run a missing-eps divergence): " + ", ".join(
            s.form for s in excluded
        )
    return {
        "setup": setup,
        "forms": [s.form for s in measured],
        "excluded": [s.form for s in excluded],
        "line": line,
        "tests": tests,
    }


# ----------------------------------------------------------------------------- claims


def _family(results, comps: list[tuple[str, str, str]]) -> tuple[list[dict], list[list[dict]]]:
    """The margin tests of the comparisons ``comps`` ((set-up, a, b), each a − b), Holm-adjusted
    as one family: the flat list and the three tests of each comparison."""
    groups = [comparison(results, s, a, b) for s, a, b in comps]
    tests = adjust([t for g in groups for t in g])
    return tests, groups


def _rate(got: str, support: str) -> str:
    """A comparison's outcome for a claim: ``support`` when it is the claimed outcome, against
    when it is another decided outcome (above, below, equivalent), else as it is (undecided,
    not measured). The same for every claim: only the claimed outcome differs."""
    if got == support:
        return "support"
    return "against" if got in (ABOVE, BELOW, EQUIVALENT) else got


def _verdict(outcomes: list[str]) -> str:
    """supported: every measured comparison supports; not supported: every one is against;
    mixed: some support and some against; undecided: otherwise; not measured: nothing
    measured (all at this scale)."""
    got = [o for o in outcomes if o != NOT_MEASURED]
    if not got:
        return NOT_MEASURED
    if all(o == "support" for o in got):
        return SUPPORTED
    if all(o == "against" for o in got):
        return NOT_SUPPORTED
    if "support" in got and "against" in got:
        return MIXED
    return UNDECIDED


def _at_ceiling(by: dict, t: dict) -> bool:
    a, b = by.get((t["setup"], t["a"])), by.get((t["setup"], t["b"]))
    return bool(a and b and a.mean is not None and b.mean is not None) and (
        min(a.mean, b.mean) >= CEILING
    )


def _ceiling(by: dict, t: dict) -> str:
    return " (both at the ceiling)" if _at_ceiling(by, t) else ""


def _qualifier(by: dict, groups: list[list[dict]], verdict: str) -> str:
    """'at the ceiling ...' when the verdict is decided and every measured comparison of the
    claim is between two forms at the ceiling (the task does not separate them), else ''."""
    measured = [g[0] for g in groups if g[0]["p"] is not None]
    if verdict not in (SUPPORTED, NOT_SUPPORTED, MIXED) or not measured:
        return ""
    if not all(_at_ceiling(by, t) for t in measured):
        return ""
    return (
        f"at the ceiling: every form compared scores ≥ {CEILING:g} on average (accuracy ≈ 1), "
        "so this says that all of them solve the task, not that they are alike where it is hard"
    )


def _entry(cid, claim, source, verdict, evidence, tests, rule, setups=None, summary="",
           qualifier="") -> dict:  # fmt: skip
    return {
        "id": cid, "claim": claim, "source": source, "verdict": verdict,
        "qualifier": qualifier, "summary": summary, "evidence": evidence, "tests": tests,
        "rule": rule, "setups": setups or {},
    }  # fmt: skip


def _tally(outcomes: list[str], support: str, against: str) -> str:
    """The outcomes of a claim's comparisons in words (for the one-line summary)."""
    parts = [
        f"{outcomes.count('support')} {support}",
        f"{outcomes.count('against')} {against}",
        f"{outcomes.count(UNDECIDED)} undecided",
    ]
    if NOT_MEASURED in outcomes:
        parts.append(f"{outcomes.count(NOT_MEASURED)} not measured")
    return f"of {len(outcomes)} comparisons: " + ", ".join(parts)


def _scale(setups: list[dict]) -> str:
    """The scale of the runs in words (layers, sequence lengths, step cap), from the set-ups'
    configurations; '' when they carry none."""
    cfg = [s["config"] for s in setups if s.get("config")]
    if not cfg:
        return ""
    layers = sorted({c["model"]["n_layers"] for c in cfg})
    lengths = sorted({c["task"]["seq_len"] for c in cfg})
    steps = max(c["train"]["max_steps"] for c in cfg)
    return (
        f"at this scale: {'/'.join(map(str, layers))}-layer models, "
        f"T = {', '.join(map(str, lengths))}, at most {steps} steps"
    )


def _how(scale: str) -> str:
    return (
        f"exact paired sign-flip tests over seeds: beyond ±{MARGIN:g} one-sided, equivalence "
        "TOST, Holm within the claim" + (f"; {scale}" if scale else "") + "; see experiments.md"
    )


_RULE_COMPARISON = (
    f"Each comparison a − b is decided by three exact sign-flip tests of the per-seed "
    f"differences d, Holm-adjusted with all the claim's tests: above by more than {MARGIN:g} "
    f"(one-sided, d − {MARGIN:g}), below by more than {MARGIN:g} (one-sided, d + {MARGIN:g}), "
    f"equivalent within ±{MARGIN:g} (TOST); its outcome is the one decided, else undecided"
)


def _rule(claimed: str) -> str:
    return (
        f"{_RULE_COMPARISON}. A comparison supports the claim when its outcome is {claimed} and "
        "goes against it when it is another decided outcome; supported at this scale when "
        "every measured comparison supports, not supported at this scale when every one goes "
        "against, mixed at this scale when both occur, undecided otherwise"
    )


def claims(
    summaries: list[FormSummary], results: list[RunResult], setups: list[dict]
) -> list[dict]:
    """The papers' qualitative claims, each with its tests, a verdict and the evidence.

    ``setups``: dicts with ``name``, ``layernorm`` (bool) and optionally ``config`` (a set-up's
    configuration as ``ExperimentConfig.to_dict``, for the scale named in the summaries).
    Verdicts (``VERDICTS``) follow from the Holm-adjusted margin tests by the rule stated in each
    entry's ``rule``; ``qualifier`` says when every comparison is at the ceiling.
    """
    by = {(s.setup, s.form): s for s in summaries}
    ln = [s["name"] for s in setups if s["layernorm"]]
    no_ln = [s["name"] for s in setups if not s["layernorm"]]
    how = _how(_scale(setups))

    def has(setup, *forms):
        return all((setup, f) in by for f in forms)

    out = []

    # E1 -- the denominator acts as a norm: exp with L2 / RMS in its place ~ softmax
    claim = "softmax ≈ exp with the denominator replaced by a norm (L2, RMS)"
    src = "Mongaras & Larson 2025 (D7)"
    comps = [(s, n, "softmax") for s in ln for n in ("exp-l2", "exp-rms") if has(s, n, "softmax")]
    tests, groups = _family(results, comps)
    outcomes = [_rate(outcome(g), EQUIVALENT) for g in groups]
    notes = [describe(g) + _ceiling(by, g[0]) for g in groups]
    v = _verdict(outcomes)
    qual = _qualifier(by, groups, v)
    out.append(
        _entry(
            "E1", claim, src, v, "; ".join(notes) or "forms missing", tests,
            _rule("equivalent (exp-l2 and exp-rms against softmax)"),
            summary=f"{v}: " + (f"{qual}; " if qual else "")
            + f"exp-l2 and exp-rms against softmax in {', '.join(ln)}, "
            + _tally(outcomes, f"equivalent within ±{MARGIN:g}", "beyond the margin")
            + f" ({how})",
            qualifier=qual,
        )
    )  # fmt: skip

    # E2 -- Taylor-N improves with N
    claim = "Taylor-N attention improves with the order N"
    src = "Mongaras & Larson 2025 (D2, D4)"
    per = {}
    for s in ln:
        orders = sorted(x.order for x in summaries if x.setup == s and x.family == "taylor")
        if len(orders) < 2:
            continue
        per[s] = [(s, f"taylor-{b}", f"taylor-{a}") for a, b in zip(orders, orders[1:])]
        per[s].append((s, f"taylor-{orders[-1]}", f"taylor-{orders[0]}"))
    tests, groups = _family(results, [c for cs in per.values() for c in cs])
    outcomes = [_rate(outcome(g), ABOVE) for g in groups]
    verdicts, notes, start = {}, [], 0
    for s, comps in per.items():
        mine = slice(start, start + len(comps))
        start += len(comps)
        verdicts[s] = _verdict(outcomes[mine])
        neg = [
            f"N={x.order}: {100 * x.neg_D_fraction:.0f}%"
            for x in summaries
            if x.setup == s and x.family == "taylor" and x.neg_D_fraction
        ]
        notes.append(
            f"{s}: {verdicts[s]} — "
            + "; ".join(describe(g) for g in groups[mine])
            + (
                "; rows with D_t < 0 at the end of training: " + ", ".join(neg)
                if neg
                else "; no D_t < 0 at the end of training"
            )
        )
    v = _verdict(outcomes)
    out.append(
        _entry(
            "E2", claim, src, v, " | ".join(notes) or "fewer than two orders", tests,
            _rule("above (each order N + 1 above N, and the highest above the lowest)")
            + "; the same rule per set-up gives the set-up's verdict",
            verdicts,
            summary=f"{v}: "
            + ", ".join(f"{k} {x}" for k, x in verdicts.items())
            + "; "
            + _tally(outcomes, f"above by more than {MARGIN:g}", "equivalent or below")
            + f" (each step N → N+1 and highest against lowest order; {how})",
        )
    )  # fmt: skip

    # E3 -- linear attention lags the exp form with the same normalization
    claim = (
        "linear attention (elu+1, relu, linear map with L2 norm) lags the exp form with the "
        "same normalization (softmax; exp with L2 norm)"
    )
    src = "Deng, Song & Zhou 2023; Mongaras & Larson 2025 (D3, D8)"
    matched = (
        ("linear-elu1", "softmax"),
        ("linear-relu", "softmax"),
        ("linear-relu-eps", "softmax"),
        ("linear-identity-l2", "exp-l2"),
    )
    comps = [(s, a, b) for s in ln for a, b in matched if has(s, a, b)]
    tests, groups = _family(results, comps)
    outcomes = [_rate(outcome(g), BELOW) for g in groups]
    notes = []
    for g in groups:
        text = describe(g) + _ceiling(by, g[0])
        lin = by.get((g[0]["setup"], g[0]["a"]))
        if lin is not None and lin.missing_eps:
            text += (
                f" ({lin.missing_eps}/{lin.runs} runs of {g[0]['a']} were missing-eps "
                "divergences, excluded)"
            )
        notes.append(text)
    v = _verdict(outcomes)
    qual = _qualifier(by, groups, v)
    out.append(
        _entry(
            "E3", claim, src, v, "; ".join(notes) or "forms missing", tests,
            _rule("below (the linear form below its exp counterpart)")
            + ". Missing-eps divergences are excluded (a form with no score is not measured)",
            summary=f"{v}: " + (f"{qual}; " if qual else "")
            + f"linear forms against their exp counterpart in {', '.join(ln)}, "
            + _tally(outcomes, f"below by more than {MARGIN:g}", "equivalent or above")
            + f"; missing-eps divergences excluded ({how})",
            qualifier=qual,
        )
    )  # fmt: skip

    # E4 -- exp without a normalization is unstable: a norm is needed
    claim = "exp without a normalization (no denominator, no norm) is unstable: a norm is needed"
    src = "Mongaras & Larson 2025 (D7)"
    why_ln = (
        "with LayerNorms before the attention's consumers (the MLP's pre-LayerNorm, the final "
        "LayerNorm) the scale of an unnormalized attention output never reaches the loss, so "
        "every form is normalized downstream"
    )
    setups_verdict = {s: NOT_TESTABLE for s in ln}
    comps = [
        (s, "exp-none", a)
        for s in no_ln
        for a in ("softmax", "exp-rms", "exp-l2")
        if has(s, a, "exp-none")
    ]
    tests, groups = _family(results, comps)
    outcomes = [_rate(outcome(g), BELOW) for g in groups]
    notes = [describe(g) for g in groups]
    for s in no_ln:
        raw = by.get((s, "exp-none"))
        if raw is not None:
            notes.append(
                f"{s}: {raw.diverged}/{raw.runs} runs of exp-none diverged (scored 0), "
                f"{raw.missing_eps} missing-eps"
            )
        setups_verdict[s] = _verdict(
            [o for o, g in zip(outcomes, groups) if g[0]["setup"] == s] or [NOT_MEASURED]
        )
    verdict = _verdict(outcomes) if no_ln else NOT_TESTABLE
    qual = _qualifier(by, groups, verdict)
    evidence = f"LayerNorm set-ups ({', '.join(ln)}): {NOT_TESTABLE} — {why_ln}" + (
        f". No-LayerNorm set-up: {'; '.join(notes)}" if notes else ""
    )
    out.append(
        _entry(
            "E4", claim, src, verdict, evidence, tests,
            f"{NOT_TESTABLE} in the LayerNorm set-ups. In the set-up without LayerNorms, each "
            "normalized exp form run there (softmax; exp-rms, exp-l2 if run) is compared with "
            "exp-none (a genuine divergence scores 0). " + _rule("below (exp-none below it)"),
            setups_verdict,
            summary=f"{NOT_TESTABLE} with LayerNorms ({', '.join(ln)}): they rescale the "
            "attention output for every form"
            + (
                f"; without LayerNorms ({', '.join(no_ln)}): {verdict}, "
                + (f"{qual}; " if qual else "")
                + _tally(outcomes, "exp-none below by more than the margin",
                         "exp-none equivalent or above")
                + "".join(
                    f"; exp-none − {g[0]['b']}: mean {g[0]['mean_diff']:+.3f}, exp-none lower "
                    f"on {g[0]['b_better']}/{g[0]['n']} seeds, {_words(g)}"
                    for g in groups if g[0]["p"] is not None
                )
                + f" ({how})"
                if no_ln
                else ""
            ),
            qualifier=qual,
        )
    )  # fmt: skip
    return out
