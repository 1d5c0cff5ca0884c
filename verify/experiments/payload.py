"""The JSON document of a recall run (``reports/experiments.json``): set-ups, forms, per-run
results with learning curves and diagnostics, summaries, orderings with their tests, claims,
timing and environment. Pure data; the Markdown and the figures are written by
``verify.render.experiments``.
"""

from __future__ import annotations

import dataclasses

from verify.experiments import stats
from verify.experiments.recall import (
    EPS_RATIO,
    ExperimentConfig,
    ModelConfig,
    RunResult,
    Setup,
    TaskConfig,
    TrainConfig,
    builtin_forms,
)
from verify.experiments.summary import CEILING, MARGIN, claims, ordering, summarize

SCHEMA = "attn-theory/experiment-recall/2"


def run_record(r: RunResult) -> dict:
    """A run as JSON data (``runs_from_json`` reads it back)."""
    return {
        "setup": r.setup,
        "form": r.form,
        "seed": r.seed,
        "diverged": r.diverged,
        "diverged_step": r.diverged_step,
        "reason": r.reason,
        "cause": r.cause,
        "missing_eps": r.missing_eps,
        "accuracy": r.accuracy,
        "final_loss": r.final_loss,
        "eval_loss": r.eval_loss,
        "best_accuracy": r.best_accuracy,
        "stop": r.stop,
        "steps": r.steps,
        "diagnostics": r.diagnostics,
        "seconds": r.seconds,
        "cpu_seconds": r.cpu_seconds,
        "curve": r.curve,
    }


def payload(
    setups: list[Setup],
    seeds: list[int],
    results: list[RunResult],
    *,
    quick: bool,
    workers: int,
    total_seconds: float,
    command: str,
    load_average: tuple[float, float] | None = None,
) -> dict:
    """The JSON document. A ``quick`` run gets no orderings' decisions and no claims: its tests
    would be computed from too few steps and seeds to mean anything.

    ``load_average``: the machine's 1-minute load average at the start and end of the runs
    (context for the times: other processes share the CPU cores).
    """
    import os

    import torch

    from verify.environment import versions

    pairs = [(s.name, list(s.forms)) for s in setups]
    summaries = summarize(pairs, results)
    meta = [
        {
            "name": s.name,
            "description": s.description,
            "layernorm": s.config.model.layernorm,
            "config": s.config.to_dict(),
            "forms": [f.name for f in s.forms],
        }
        for s in setups
    ]
    forms = {}
    for s in setups:
        for f in s.forms:
            forms.setdefault(
                f.name,
                {
                    "name": f.name, "family": f.family, "order": f.order, "call": f.call,
                    "signed": f.signed,
                },
            )  # fmt: skip
    orderings = [] if quick else [ordering(summaries, results, s.name) for s in setups]
    return {
        "schema": SCHEMA,
        "experiment": "recall",
        "command": command,
        "quick": quick,
        "seeds": list(seeds),
        "setups": meta,
        "forms": list(forms.values()),
        "statistics": {
            "alpha": stats.ALPHA,
            "margin": MARGIN,
            "ceiling": CEILING,
            "eps_ratio": EPS_RATIO,
            "min_p_two_sided": stats.min_p(len(seeds)),
            "min_p_one_sided": stats.min_p(len(seeds), "greater"),
        },
        "summary": [s.to_dict() for s in summaries],
        "orderings": orderings,
        "claims": [] if quick else claims(summaries, results, meta),
        "runs": [run_record(r) for r in results],
        "timing": {
            "total_seconds": total_seconds,
            "total_cpu_seconds": sum(r.cpu_seconds for r in results),
            "workers": workers,
            "cpu_count": os.cpu_count(),
            "load_average_1min": None if load_average is None else list(load_average),
        },
        "environment": {
            "versions": versions(),
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads_per_run": setups[0].config.train.threads,
            "deterministic_algorithms": True,
        },
    }


# ----------------------------------------------------------------------------- from saved runs


def runs_from_json(rows: list[dict]) -> list[RunResult]:
    """``RunResult``s from ``run_record`` dicts (a document's ``runs``, or the lines of the runs
    log the command writes while it trains)."""
    names = {f.name for f in dataclasses.fields(RunResult)}
    return [RunResult(**{k: v for k, v in r.items() if k in names}) for r in rows]


def setups_from_doc(doc: dict) -> list[Setup]:
    """The set-ups of a document (configurations and built-in forms by name)."""
    builtin = builtin_forms()
    out = []
    for s in doc["setups"]:
        c = s["config"]
        cfg = ExperimentConfig(
            task=TaskConfig(
                **{k: v for k, v in c["task"].items() if k not in ("vocab_size", "seq_len")}
            ),
            model=ModelConfig(**{k: v for k, v in c["model"].items() if k != "head_dim"}),
            train=TrainConfig(**{**c["train"], "betas": tuple(c["train"]["betas"])}),
        )
        out.append(Setup(s["name"], s["description"], cfg, tuple(builtin[n] for n in s["forms"])))
    return out


def recompute(doc: dict, *, command: str | None = None) -> dict:
    """The document anew from its runs: statistics, orderings and claims recomputed with the
    current rules, no training (timing as recorded; environment of this process)."""
    t = doc["timing"]
    load = t.get("load_average_1min")
    new = payload(
        setups_from_doc(doc), doc["seeds"], runs_from_json(doc["runs"]), quick=doc["quick"],
        workers=t["workers"], total_seconds=t["total_seconds"],
        command=command or doc["command"], load_average=None if load is None else tuple(load),
    )  # fmt: skip
    if doc.get("note"):
        new["note"] = doc["note"]
    return new
