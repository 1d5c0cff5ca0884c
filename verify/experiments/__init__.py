"""Train tiny attention models on synthetic tasks (``attn-theory experiment``, ``verify.cli``).

Sub-command ``recall``: multi-query associative recall with one model per attention form
(``verify.experiments.recall``), summarized over seeds (``summary``), assembled into the JSON
document (``payload``) and written to ``reports/experiments.md`` / ``.json`` and
``reports/figures/experiments_recall.png`` by ``verify.render.experiments``. Those files are owned
by this command only (they carry training noise and run times) and are swapped in with
``verify.render.staging.staged_write``, so the other reports in the directory are preserved.

Importing this package is cheap: torch loads when a command runs.
"""

from __future__ import annotations

__all__ = ["DEFAULT_SEEDS", "QUICK_FORMS", "quick_config"]

#: forms of the ``--quick`` smoke run (one of each family that matters: exp, Taylor, linear)
QUICK_FORMS = ("softmax", "taylor-2", "linear-elu1")
DEFAULT_SEEDS = (0, 1, 2)


def quick_config():
    """The ``--quick`` configuration: the default task and model, 30 steps, small batches."""
    from dataclasses import replace

    from verify.experiments.recall import ExperimentConfig

    cfg = ExperimentConfig()
    return replace(
        cfg,
        train=replace(cfg.train, steps=30, batch=16, warmup=5, eval_size=128, eval_every=10),
    )
