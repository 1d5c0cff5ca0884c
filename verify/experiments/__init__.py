"""Train tiny attention models on synthetic tasks (``attn-theory experiment``, ``verify.cli``).

Sub-command ``recall``: multi-query associative recall with one model per attention form and
set-up (``verify.experiments.recall``), paired tests across seeds (``stats``), summaries,
orderings and claims (``summary``), assembled into the JSON document (``payload``) and written
to ``experiments.md`` / ``.json`` and ``figures/experiments_*.png`` by
``verify.render.experiments``. The committed ``reports/experiments.*`` are written only by the
full run (``attn-theory experiment recall``); ``--quick`` writes to a scratch directory unless
``--out`` says otherwise. Files are swapped in with ``verify.render.staging.staged_write``, so
the other reports in the directory are preserved.

Importing this package is cheap: torch loads when a command runs.
"""

from __future__ import annotations

__all__ = ["DEFAULT_SEEDS", "QUICK_FORMS", "QUICK_SEEDS", "default_setups", "quick_setups"]

#: forms of the ``--quick`` smoke run (one of each family that matters: exp, Taylor, linear)
QUICK_FORMS = ("softmax", "taylor-3", "linear-relu")
#: ten seeds: the smallest two-sided sign-flip p-value is 2/2^10 = 0.002, small enough for a
#: Holm family of up to 25 tests (at 5 seeds it is 0.0625 and nothing could be decided)
DEFAULT_SEEDS = tuple(range(10))
QUICK_SEEDS = (0, 1)
#: forms of the set-up without LayerNorms (the test of "a norm is needed")
NO_LN_FORMS = ("softmax", "exp-none")


def default_setups(forms: list[str] | None = None):
    """The set-ups of the full run: 8 pairs (main), 4 pairs (the second task size), and 8
    pairs without LayerNorms (where the scale of an unnormalized attention output reaches the
    read-out). ``forms`` restricts the forms (a set-up left with none is dropped).

    The sizes are set by the budget (the full run within about 40 minutes on 2 shared CPU
    cores, 10 seeds): a 16-pair step costs twice an 8-pair step."""
    from dataclasses import replace

    from verify.experiments.recall import (
        FORM_NAMES,
        ExperimentConfig,
        ModelConfig,
        Setup,
        TaskConfig,
        builtin_forms,
    )

    builtin = builtin_forms()
    base = ExperimentConfig()
    specs = [
        (
            "P8",
            "8 pairs, T = 24 (main)",
            replace(base, task=TaskConfig(num_pairs=8, num_queries=8)),
            FORM_NAMES,
        ),
        (
            "P4",
            "4 pairs, T = 12 (second task size)",
            replace(base, task=TaskConfig(num_pairs=4, num_queries=4)),
            FORM_NAMES,
        ),
        (
            "P8-noLN",
            "8 pairs, T = 24, no LayerNorm anywhere",
            replace(
                base,
                task=TaskConfig(num_pairs=8, num_queries=8),
                model=ModelConfig(layernorm=False),
            ),
            NO_LN_FORMS,
        ),
    ]
    out = []
    for name, desc, cfg, names in specs:
        chosen = [n for n in names if forms is None or n in forms]
        if chosen:
            out.append(Setup(name, desc, cfg, tuple(builtin[n] for n in chosen)))
    return out


def quick_setups(forms: list[str] | None = None):
    """The ``--quick`` smoke run: the two task sizes, ``QUICK_FORMS``, at most 60 steps."""
    from dataclasses import replace

    out = []
    for st in default_setups(list(forms or QUICK_FORMS))[:2]:
        tc = replace(
            st.config.train, max_steps=60, min_steps=40, patience=2, eval_size=64,
            eval_every=20, diag_size=16,
        )  # fmt: skip
        out.append(replace(st, config=replace(st.config, train=tc)))
    return out
