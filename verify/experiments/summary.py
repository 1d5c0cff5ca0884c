"""Statistics over seeds, the measured ordering with its tests, and the papers' qualitative
claims as tested results (verdicts follow from the tests).

Scores. A run's score is its accuracy at the end of training. A run that diverged for a reason
of its own (loss above the threshold, a non-finite value not caused by a vanishing divisor)
scores 0: the model failed. A run whose divergence is a *missing eps* (``recall.divergence_cause``:
0/0 or x/0 in the denominator) is excluded -- it says nothing about the form, only about calling
it without eps -- and reported as such; it is never counted as evidence.

Tests (``verify.experiments.stats``). Two forms of one set-up are compared on the seeds where
both have a score, by the exact paired sign-flip permutation test of the mean per-seed
difference (two-sided), or for an equivalence its TOST form with margin ``MARGIN``. Each claim's
tests form one family and each set-up's ordering another; p-values are Holm-adjusted within the
family and a test decides when its adjusted p-value is <= ``ALPHA``. The rules below are fixed
here, before any run is read.
"""

from __future__ import annotations

import statistics as st
from dataclasses import dataclass

from verify.experiments.recall import Form, RunResult
from verify.experiments.stats import ALPHA, equivalence_p, holm, mean, sample_std, sign_flip_p

#: equivalence margin of accuracy (TOST): two forms are "equivalent" when the mean per-seed
#: difference is shown to lie within +- MARGIN
MARGIN = 0.02
#: a pair whose mean accuracies are both at least CEILING is flagged "at the ceiling": an
#: equivalence there says both solve the task, not that the forms are alike elsewhere
CEILING = 0.97

NOT_TESTABLE = "not testable in this set-up"
#: the verdict vocabulary of the experiment's claims
VERDICTS = ("agree", "disagree", "mixed", "undecided", NOT_TESTABLE, "not measured")


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


def paired(results: list[RunResult], setup: str, a: str, b: str) -> tuple[list[int], list[float]]:
    """Seeds where both forms scored in ``setup``, and the differences score(a) - score(b)."""
    sa = {r.seed: score(r) for r in results if r.setup == setup and r.form == a}
    sb = {r.seed: score(r) for r in results if r.setup == setup and r.form == b}
    seeds = sorted(s for s in sa if s in sb and sa[s] is not None and sb[s] is not None)
    return seeds, [sa[s] - sb[s] for s in seeds]


def compare(results, setup: str, a: str, b: str, *, kind: str = "difference") -> dict:
    """One paired test of forms ``a`` and ``b`` in ``setup`` (unadjusted; see ``adjust``).

    ``kind``: ``difference`` (two-sided sign-flip test of mean d = 0) or ``equivalence`` (TOST,
    |mean d| < MARGIN). ``p`` is None when no seed has both scores.
    """
    seeds, d = paired(results, setup, a, b)
    rec = {
        "setup": setup, "a": a, "b": b, "kind": kind, "n": len(d),
        "test": (
            "exact paired sign-flip permutation test, two-sided"
            if kind == "difference"
            else f"TOST of two one-sided exact sign-flip tests, margin ±{MARGIN:g}"
        ),
        "mean_diff": mean(d) if d else None,
        "min_diff": min(d) if d else None,
        "max_diff": max(d) if d else None,
        "a_better": sum(x > 0 for x in d),
        "b_better": sum(x < 0 for x in d),
        "p": None, "p_holm": None, "decided": False,
    }  # fmt: skip
    if d:
        rec["p"] = sign_flip_p(d) if kind == "difference" else equivalence_p(d, MARGIN)
    return rec


def adjust(tests: list[dict]) -> list[dict]:
    """Holm-adjust the tests of one family in place (tests without a p-value are left out of the
    family); ``decided`` = adjusted p <= ALPHA. Returns ``tests``."""
    run = [t for t in tests if t["p"] is not None]
    for t, adj in zip(run, holm([t["p"] for t in run])):
        t["p_holm"] = adj
        t["decided"] = adj <= ALPHA
        t["family_size"] = len(run)
    return tests


def _fmt_p(p: float | None) -> str:
    if p is None:
        return "—"
    return f"{p:.2g}" if p < 0.01 else f"{p:.3f}"


def describe(t: dict) -> str:
    """One test in words: the pair, n, mean difference, p and Holm-adjusted p, the decision."""
    if t["p"] is None:
        return f"{t['a']} vs {t['b']} ({t['setup']}): not measured (no seed with both scores)"
    if t["kind"] == "equivalence":
        what = f"equivalent within ±{MARGIN:g}" if t["decided"] else "equivalence not shown"
    elif t["decided"]:
        what = f"{t['a']} > {t['b']}" if t["mean_diff"] > 0 else f"{t['a']} < {t['b']}"
    else:
        what = "difference not resolved"
    return (
        f"{t['a']} − {t['b']} ({t['setup']}, n={t['n']}): mean {t['mean_diff']:+.3f} "
        f"[{t['min_diff']:+.3f}, {t['max_diff']:+.3f}], p={_fmt_p(t['p'])}, "
        f"Holm p={_fmt_p(t['p_holm'])}: {what}"
    )


# ----------------------------------------------------------------------------- ordering


def ordering(summaries: list[FormSummary], results: list[RunResult], setup: str) -> dict:
    """Forms of ``setup`` by mean score, best first, each neighbour pair tested (two-sided
    sign-flip, Holm over the set-up's neighbour pairs). The line joins neighbours by ``>`` when
    the adjusted p-value is <= ALPHA and by ``~`` (not resolved) otherwise; ``~`` never claims
    equality. Forms with no score (every run a missing-eps divergence) are listed apart.
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


def _material(diff: dict, eq: dict) -> str:
    """Outcome of a directional comparison (a above b claimed): support when the difference is
    decided and larger than MARGIN; against when a and b are shown equivalent within MARGIN or
    a is decided below b; undecided otherwise (a decided difference within the margin included);
    not measured without a common seed."""
    if diff["p"] is None:
        return "not measured"
    if diff["decided"] and diff["mean_diff"] > MARGIN:
        return "support"
    if eq["decided"] or (diff["decided"] and diff["mean_diff"] < 0):
        return "against"
    return "undecided"


def _verdict(outcomes: list[str]) -> str:
    """agree: every measured comparison supports; disagree: every one is against; mixed: some
    support and some against; undecided: otherwise; not measured: nothing measured."""
    got = [o for o in outcomes if o != "not measured"]
    if not got:
        return "not measured"
    if all(o == "support" for o in got):
        return "agree"
    if all(o == "against" for o in got):
        return "disagree"
    if "support" in got and "against" in got:
        return "mixed"
    return "undecided"


def _ceiling(by: dict, t: dict) -> str:
    a, b = by.get((t["setup"], t["a"])), by.get((t["setup"], t["b"]))
    if a and b and a.mean is not None and b.mean is not None and min(a.mean, b.mean) >= CEILING:
        return " (both at the ceiling)"
    return ""


def _entry(cid, claim, source, verdict, evidence, tests, rule, setups=None, summary="") -> dict:
    return {
        "id": cid, "claim": claim, "source": source, "verdict": verdict, "summary": summary,
        "evidence": evidence, "tests": tests, "rule": rule, "setups": setups or {},
    }  # fmt: skip


def _tally(outcomes: list[str], support: str, against: str) -> str:
    """The outcomes of a claim's comparisons in words (for the one-line summary)."""
    parts = [
        f"{outcomes.count('support')} {support}",
        f"{outcomes.count('against')} {against}",
        f"{outcomes.count('undecided')} undecided",
    ]
    if "not measured" in outcomes:
        parts.append(f"{outcomes.count('not measured')} not measured")
    return f"of {len(outcomes)} comparisons: " + ", ".join(parts)


_TESTS = "exact paired sign-flip tests over seeds, Holm within the claim; see experiments.md"


def claims(
    summaries: list[FormSummary], results: list[RunResult], setups: list[dict]
) -> list[dict]:
    """The papers' qualitative claims, each with its tests, a verdict and the evidence.

    ``setups``: dicts with ``name`` and ``layernorm`` (bool). Verdicts (``VERDICTS``) follow from
    the Holm-adjusted tests by the rule stated in each entry's ``rule``.
    """
    by = {(s.setup, s.form): s for s in summaries}
    ln = [s["name"] for s in setups if s["layernorm"]]
    no_ln = [s["name"] for s in setups if not s["layernorm"]]

    def has(setup, *forms):
        return all((setup, f) in by for f in forms)

    out = []

    # E1 -- the denominator acts as a norm: exp with L2 / RMS in its place ~ softmax
    claim = "softmax ≈ exp with the denominator replaced by a norm (L2, RMS)"
    src = "Mongaras & Larson 2025 (D7)"
    pairs = [(s, n, "softmax") for s in ln for n in ("exp-l2", "exp-rms") if has(s, n, "softmax")]
    tests = []
    for s, a, b in pairs:
        tests += [compare(results, s, a, b, kind="equivalence"), compare(results, s, a, b)]
    adjust(tests)
    outcomes, notes = [], []
    for eq, diff in zip(tests[0::2], tests[1::2]):
        if eq["p"] is None:
            outcomes.append("not measured")
        elif eq["decided"]:
            outcomes.append("support")
        elif diff["decided"] and abs(diff["mean_diff"]) > MARGIN:
            outcomes.append("against")
        else:
            outcomes.append("undecided")
        notes.append(describe(eq) + _ceiling(by, eq) + "; " + describe(diff))
    v = _verdict(outcomes)
    out.append(
        _entry(
            "E1", claim, src, v, "; ".join(notes) or "forms missing", tests,
            f"agree when every exp-norm form is shown equivalent to softmax within ±{MARGIN:g} "
            "accuracy (TOST, Holm); disagree when each differs by more than the margin "
            "(two-sided test, Holm); mixed when both occur; undecided otherwise",
            summary=f"{v}: exp-l2 and exp-rms against softmax in {', '.join(ln)}, "
            + _tally(outcomes, f"equivalent within ±{MARGIN:g}", "differ by more")
            + f" ({_TESTS})",
        )
    )  # fmt: skip

    # E2 -- Taylor-N improves with N
    claim = "Taylor-N attention improves with the order N"
    src = "Mongaras & Larson 2025 (D2, D4)"
    tests, per = [], {}
    for s in ln:
        orders = sorted(
            (x.order for x in summaries if x.setup == s and x.family == "taylor"),
        )
        if len(orders) < 2:
            continue
        mine = [
            compare(results, s, f"taylor-{b}", f"taylor-{a}") for a, b in zip(orders, orders[1:])
        ]
        mine.append(compare(results, s, f"taylor-{orders[-1]}", f"taylor-{orders[0]}"))
        per[s] = mine
        tests += mine
    adjust(tests)
    verdicts = {}
    for s, mine in per.items():
        steps, overall = mine[:-1], mine[-1]
        rises = overall["decided"] and overall["mean_diff"] > 0
        drops = [t for t in steps if t["decided"] and t["mean_diff"] < 0]
        if overall["p"] is None:
            verdicts[s] = "not measured"
        elif rises and not drops:
            verdicts[s] = "agree"
        elif rises:
            verdicts[s] = "mixed"
        elif overall["decided"] or drops:
            verdicts[s] = "disagree"
        else:
            verdicts[s] = "undecided"
    notes = []
    for s, mine in per.items():
        neg = [
            f"N={x.order}: {100 * x.neg_D_fraction:.0f}%"
            for x in summaries
            if x.setup == s and x.family == "taylor" and x.neg_D_fraction
        ]
        notes.append(
            f"{s}: {verdicts[s]} — "
            + "; ".join(describe(t) for t in mine)
            + (
                "; rows with D_t < 0 at the end of training: " + ", ".join(neg)
                if neg
                else "; no D_t < 0 at the end of training"
            )
        )
    v = _combine(list(verdicts.values()))
    out.append(
        _entry(
            "E2", claim, src, v, " | ".join(notes) or "fewer than two orders", tests,
            "per set-up: agree when the highest order beats the lowest (two-sided test, Holm) "
            "and no step N → N+1 is a decided decrease; mixed when it beats the lowest but some "
            "step decreases; disagree when it does not beat the lowest and some test decides "
            "against; undecided otherwise. Across set-ups: the common verdict, else mixed "
            "(agree/disagree disagreeing) or undecided",
            verdicts,
            summary=f"{v}: "
            + ", ".join(f"{k} {x}" for k, x in verdicts.items())
            + " (highest against lowest order and each step N → N+1; "
            + _TESTS
            + ")",
        )
    )  # fmt: skip

    # E3 -- linear attention lags the exp form with the same normalization
    claim = (
        "linear attention (elu+1, relu, linear map with L2 norm) lags the exp form with the "
        "same normalization (softmax; exp with L2 norm)"
    )
    src = "Deng, Song & Zhou 2023; Mongaras & Larson 2025 (D3, D8)"
    matched = (
        ("softmax", "linear-elu1"),
        ("softmax", "linear-relu"),
        ("softmax", "linear-relu-eps"),
        ("exp-l2", "linear-identity-l2"),
    )
    tests = []
    for s in ln:
        for a, b in matched:
            if has(s, a, b):
                tests += [compare(results, s, a, b), compare(results, s, a, b, kind="equivalence")]
    adjust(tests)
    outcomes = [_material(diff, eq) for diff, eq in zip(tests[0::2], tests[1::2])]
    notes = []
    for diff, eq in zip(tests[0::2], tests[1::2]):
        text = describe(diff) + ("" if eq["p"] is None else "; " + describe(eq) + _ceiling(by, eq))
        lin = by.get((diff["setup"], diff["b"]))
        if lin is not None and lin.missing_eps:
            text += (
                f" ({lin.missing_eps}/{lin.runs} runs of {diff['b']} were missing-eps "
                "divergences, excluded)"
            )
        notes.append(text)
    v = _verdict(outcomes)
    out.append(
        _entry(
            "E3", claim, src, v, "; ".join(notes) or "forms missing", tests,
            "a comparison supports the claim when the linear form is below its exp counterpart "
            f"by more than {MARGIN:g} (two-sided test, Holm) and goes against it when it is "
            f"equivalent (TOST ±{MARGIN:g}, Holm) or decided above; agree when every measured "
            "comparison supports, disagree when every one goes against, mixed when both occur, "
            "undecided otherwise. Missing-eps divergences are excluded (a form with no score is "
            "not measured)",
            summary=f"{v}: linear forms against their exp counterpart in {', '.join(ln)}, "
            + _tally(outcomes, f"below by more than {MARGIN:g}", "equivalent or above")
            + f"; missing-eps divergences excluded ({_TESTS})",
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
    tests = []
    for s in no_ln:
        for a in ("softmax", "exp-rms", "exp-l2"):
            if has(s, a, "exp-none"):
                tests += [compare(results, s, a, "exp-none"),
                          compare(results, s, a, "exp-none", kind="equivalence")]  # fmt: skip
    adjust(tests)
    outcomes, notes = [], []
    for diff, eq in zip(tests[0::2], tests[1::2]):
        outcomes.append(_material(diff, eq))
        notes.append(describe(diff) + "; " + describe(eq))
    for s in no_ln:
        raw = by.get((s, "exp-none"))
        if raw is not None:
            notes.append(
                f"{s}: {raw.diverged}/{raw.runs} runs of exp-none diverged (scored 0), "
                f"{raw.missing_eps} missing-eps"
            )
        setups_verdict[s] = _verdict(outcomes)
    verdict = _verdict(outcomes) if no_ln else NOT_TESTABLE
    evidence = f"LayerNorm set-ups ({', '.join(ln)}): {NOT_TESTABLE} — {why_ln}" + (
        f". No-LayerNorm set-up: {'; '.join(notes)}" if notes else ""
    )
    out.append(
        _entry(
            "E4", claim, src, verdict, evidence, tests,
            f"{NOT_TESTABLE} in the LayerNorm set-ups; in the set-up without LayerNorms, agree "
            "when exp-none scores below each normalized exp form run there (softmax; exp-rms, "
            f"exp-l2 if run) by more than {MARGIN:g} (two-sided test, Holm; a genuine divergence "
            "scores 0), disagree "
            f"when it is equivalent (TOST ±{MARGIN:g}) or above, mixed when both occur, "
            "undecided otherwise",
            setups_verdict,
            summary=f"{NOT_TESTABLE} with LayerNorms ({', '.join(ln)}): they rescale the "
            "attention output for every form"
            + (
                f"; without LayerNorms ({', '.join(no_ln)}): {verdict}, "
                + _tally(outcomes, "exp-none below", "exp-none equivalent or above")
                + f" ({_TESTS})"
                if no_ln
                else ""
            ),
        )
    )  # fmt: skip
    return out


def _combine(verdicts: list[str]) -> str:
    """One verdict from per-set-up verdicts: the common one; mixed when agree and disagree (or a
    mixed) occur; undecided otherwise; not measured when nothing was measured."""
    got = [v for v in verdicts if v != "not measured"]
    if not got:
        return "not measured"
    if len(set(got)) == 1:
        return got[0]
    if "mixed" in got or ("agree" in got and "disagree" in got):
        return "mixed"
    return "undecided"
