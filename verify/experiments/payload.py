"""The JSON document of a recall run (``reports/experiments.json``): configuration, forms,
per-run results, summary, ordering, claims, timing and environment. Pure data; the Markdown and
the figure are written by ``verify.render.experiments``.
"""

from __future__ import annotations

from verify.experiments.recall import ExperimentConfig, Form, RunResult
from verify.experiments.summary import RESOLUTION, claims, ordering, summarize

SCHEMA = "attn-theory/experiment-recall/1"


def payload(
    cfg: ExperimentConfig,
    forms: list[Form],
    seeds: list[int],
    results: list[RunResult],
    *,
    quick: bool,
    workers: int,
    total_seconds: float,
    command: str,
    load_average: tuple[float, float] | None = None,
) -> dict:
    """The JSON document: configuration, forms, per-run results, summary, ordering, claims.

    ``load_average``: the machine's 1-minute load average at the start and end of the runs
    (context for the times: other processes share the CPU cores).
    """
    import os

    import torch

    from verify.environment import versions

    summaries = summarize(forms, results)
    names, line = ordering(summaries)
    return {
        "schema": SCHEMA,
        "experiment": "recall",
        "command": command,
        "quick": quick,
        "seeds": list(seeds),
        "config": cfg.to_dict(),
        "forms": [
            {"name": f.name, "family": f.family, "order": f.order, "call": f.call} for f in forms
        ],
        "summary": [s.to_dict() for s in summaries],
        "ordering": names,
        "ordering_line": line,
        "resolution": RESOLUTION,
        "claims": claims(summaries),
        "runs": [
            {
                "form": r.form,
                "seed": r.seed,
                "diverged": r.diverged,
                "diverged_step": r.diverged_step,
                "reason": r.reason,
                "accuracy": r.accuracy,
                "final_loss": r.final_loss,
                "eval_loss": r.eval_loss,
                "seconds": r.seconds,
                "cpu_seconds": r.cpu_seconds,
                "curve": r.curve,
            }
            for r in results
        ],
        "timing": {
            "total_seconds": total_seconds,
            "total_cpu_seconds": sum(r.cpu_seconds for r in results),
            "per_form_seconds": {s.form: s.seconds for s in summaries},
            "per_form_cpu_seconds": {s.form: s.cpu_seconds for s in summaries},
            "workers": workers,
            "cpu_count": os.cpu_count(),
            "load_average_1min": None if load_average is None else list(load_average),
        },
        "environment": {
            "versions": versions(),
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads_per_run": cfg.train.threads,
            "deterministic_algorithms": True,
        },
    }
