"""Statistics over seeds, the measured ordering, and the papers' qualitative claims as results.

Accuracy statistics use the runs that did not diverge; diverged runs are counted and listed.
Two mean accuracies are called *indistinguishable* when they differ by at most
``max(RESOLUTION, 2 * standard error of the difference)``, the standard error from the sample
standard deviations over seeds (Welch form); with a single run per form only ``RESOLUTION``
applies. The criteria are fixed here, before any result is read, and every verdict is printed with
its numbers (issue 7: agreement with the papers is a result, not a target).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from verify.experiments.recall import Form, RunResult

#: smallest accuracy difference treated as real (1 point of the query positions)
RESOLUTION = 0.01


@dataclass(frozen=True)
class FormSummary:
    """Statistics of one form over seeds (accuracy fields are None when every run diverged)."""

    form: str
    family: str
    order: int | None
    runs: int
    diverged: int
    mean: float | None
    std: float | None  # sample standard deviation (ddof = 1); None with fewer than 2 runs
    min: float | None
    max: float | None
    final_loss: float | None  # mean training loss over the last evaluation interval
    seconds: float  # summed wall time of this form's runs
    cpu_seconds: float  # summed CPU time of this form's runs

    @property
    def n_ok(self) -> int:
        return self.runs - self.diverged

    def to_dict(self) -> dict:
        return {
            "form": self.form,
            "family": self.family,
            "order": self.order,
            "runs": self.runs,
            "diverged": self.diverged,
            "accuracy_mean": self.mean,
            "accuracy_std": self.std,
            "accuracy_min": self.min,
            "accuracy_max": self.max,
            "final_loss_mean": self.final_loss,
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
        }


def summarize(forms: list[Form], results: list[RunResult]) -> list[FormSummary]:
    """One ``FormSummary`` per form, in the order of ``forms``."""
    out = []
    for f in forms:
        runs = [r for r in results if r.form == f.name]
        ok = [r for r in runs if not r.diverged]
        accs = [r.accuracy for r in ok]
        losses = [r.final_loss for r in ok if r.final_loss is not None]
        mean = sum(accs) / len(accs) if accs else None
        std = None
        if len(accs) >= 2:
            std = math.sqrt(sum((a - mean) ** 2 for a in accs) / (len(accs) - 1))
        out.append(
            FormSummary(
                form=f.name,
                family=f.family,
                order=f.order,
                runs=len(runs),
                diverged=len(runs) - len(ok),
                mean=mean,
                std=std,
                min=min(accs) if accs else None,
                max=max(accs) if accs else None,
                final_loss=sum(losses) / len(losses) if losses else None,
                seconds=sum(r.seconds for r in runs),
                cpu_seconds=sum(r.cpu_seconds for r in runs),
            )
        )
    return out


def tolerance(a: FormSummary, b: FormSummary) -> float:
    """Largest difference of mean accuracy treated as noise (see the module docstring)."""
    var = 0.0
    for s in (a, b):
        if s.std is not None:
            var += s.std**2 / s.n_ok
    return max(RESOLUTION, 2.0 * math.sqrt(var))


def ordering(summaries: list[FormSummary]) -> tuple[list[str], str]:
    """Forms by mean accuracy (best first; forms with every run diverged last).

    Returns the list of names and a one-line rendering where neighbours are joined by ``≈`` when
    indistinguishable and ``>`` otherwise, with ``(k/n diverged)`` marks.
    """
    measured = sorted((s for s in summaries if s.mean is not None), key=lambda s: -s.mean)
    failed = [s for s in summaries if s.mean is None]
    parts = []
    for i, s in enumerate(measured):
        if i:
            prev = measured[i - 1]
            parts.append("≈" if prev.mean - s.mean <= tolerance(prev, s) else ">")
        mark = f" ({s.diverged}/{s.runs} diverged)" if s.diverged else ""
        parts.append(f"{s.form} {s.mean:.3f}{mark}")
    line = " ".join(parts)
    if failed:
        line += " ; all runs diverged: " + ", ".join(s.form for s in failed)
    return [s.form for s in measured + failed], line


def _fmt(s: FormSummary) -> str:
    if s.mean is None:
        return f"{s.form}: all {s.runs} runs diverged"
    spread = f" ± {s.std:.3f}" if s.std is not None else ""
    div = f", {s.diverged}/{s.runs} diverged" if s.diverged else ""
    return f"{s.form} {s.mean:.3f}{spread}{div}"


def _against_softmax(
    forms: list[FormSummary],
    soft: FormSummary,
    *,
    holds: Callable[[FormSummary, float], bool],
    if_diverged: bool,
) -> tuple[str, str]:
    """Verdict and evidence of a claim that compares each of ``forms`` with softmax.

    ``holds(form, tolerance)`` says whether the claim holds for a form with results (the
    tolerance against softmax, :func:`tolerance`); a form whose every run diverged counts as
    ``if_diverged``. The verdict is ``agree`` when the claim holds for every form, ``mixed`` for
    some, ``disagree`` for none; the evidence gives softmax and each form's difference.
    """
    verdicts, notes = [], []
    for r in forms:
        if r.mean is None:
            verdicts.append(if_diverged)
            notes.append(f"{r.form}: every run diverged")
            continue
        tol = tolerance(r, soft)
        verdicts.append(holds(r, tol))
        notes.append(f"{_fmt(r)} (difference {r.mean - soft.mean:+.3f}, tolerance {tol:.3f})")
    v = "agree" if all(verdicts) else ("mixed" if any(verdicts) else "disagree")
    return v, f"{_fmt(soft)}; " + "; ".join(notes)


def claims(summaries: list[FormSummary]) -> list[dict]:
    """The papers' qualitative claims, each with a verdict and the numbers behind it.

    Verdicts: ``agree``, ``disagree``, ``mixed`` (holds for some of the forms or orders only),
    ``not measured`` (a form the claim needs was not run or every run of it diverged, where that
    does not itself decide the claim).
    """
    by = {s.form: s for s in summaries}
    out = []
    soft = by.get("softmax")

    def entry(claim: str, source: str, verdict: str, evidence: str) -> dict:
        return {"claim": claim, "source": source, "verdict": verdict, "evidence": evidence}

    # 1. the denominator acts as a norm: exp with L2 / RMS in its place ~ softmax
    claim = "softmax ≈ exp with the denominator replaced by a norm (L2, RMS)"
    src = "Mongaras & Larson 2025 (D7)"
    reps = [by[n] for n in ("exp-l2", "exp-rms") if n in by]
    if soft is None or soft.mean is None or not reps:
        out.append(entry(claim, src, "not measured", "softmax or the norm forms missing"))
    else:
        v, ev = _against_softmax(
            reps,
            soft,
            holds=lambda r, tol: abs(r.mean - soft.mean) <= tol and r.diverged == 0,
            if_diverged=False,
        )
        out.append(entry(claim, src, v, ev))

    # 2. Taylor-N improves with N (the truncated series approaches exp)
    claim = "Taylor-N attention improves with the order N"
    src = "Mongaras & Larson 2025 (D2, D4)"
    tay = sorted((s for s in summaries if s.family == "taylor"), key=lambda s: s.order)
    got = [s for s in tay if s.mean is not None]
    if len(got) < 2:
        out.append(entry(claim, src, "not measured", "fewer than two orders with results"))
    else:
        drops = []
        for a, b in zip(got, got[1:]):
            if b.mean < a.mean - tolerance(a, b):
                drops.append(f"N={a.order} → N={b.order}: {a.mean:.3f} → {b.mean:.3f}")
        first, last = got[0], got[-1]
        rises = last.mean > first.mean + tolerance(first, last)
        lost = [s.form for s in tay if s.mean is None]
        if not drops and rises and not lost:
            v = "agree"
        elif rises:
            v = "mixed"
        else:
            v = "disagree"
        ev = "; ".join(_fmt(s) for s in tay)
        if drops:
            ev += "; decreases beyond noise: " + ", ".join(drops)
        out.append(entry(claim, src, v, ev))

    # 3. linear attention (elu+1, relu, identity + L2) lags softmax
    claim = "linear attention (elu+1, relu, linear map with L2 norm) lags softmax"
    src = "Deng, Song & Zhou 2023; Mongaras & Larson 2025 (D3, D8)"
    lin = [s for s in summaries if s.family == "linear"]
    if soft is None or soft.mean is None or not lin:
        out.append(entry(claim, src, "not measured", "softmax or the linear forms missing"))
    else:
        v, ev = _against_softmax(
            lin, soft, holds=lambda s, tol: s.mean < soft.mean - tol, if_diverged=True
        )
        out.append(entry(claim, src, v, ev))

    # 4. exp without any normalization is unstable
    claim = "exp without a normalization (no denominator, no norm) is unstable"
    src = "Mongaras & Larson 2025 (D7)"
    raw = by.get("exp-none")
    if raw is None:
        out.append(entry(claim, src, "not measured", "exp-none was not run"))
    else:
        if raw.diverged == raw.runs:
            v = "agree"
        elif raw.diverged:
            v = "mixed"
        else:
            v = "disagree"
        ev = f"{raw.diverged}/{raw.runs} runs of exp-none diverged; {_fmt(raw)}"
        if soft is not None and soft.mean is not None:
            ev += f"; {_fmt(soft)}"
        out.append(entry(claim, src, v, ev))
    return out
