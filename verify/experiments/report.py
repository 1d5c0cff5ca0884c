"""``reports/experiments.md`` / ``.json`` and ``figures/experiments_recall.png`` for the recall run.

These files carry training noise and run times, so they are written only by
``attn-theory experiment`` and are not part of ``attn-theory report --check`` (DESIGN.md, Reports).
"""

from __future__ import annotations

import math
from pathlib import Path

from verify.experiments.recall import ExperimentConfig, Form, RunResult
from verify.experiments.summary import RESOLUTION, claims, ordering, summarize

SCHEMA = "attn-theory/experiment-recall/1"
FIGURE = "figures/experiments_recall.png"
OWNED = ("experiments.md", "experiments.json", FIGURE)


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

    from verify.render.metadata import versions

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


def write(stage: Path, doc: dict) -> None:
    """Write the three owned files under ``stage`` (a report directory or its staging copy)."""
    from verify.render.markdown import write_json, write_text

    caption = figure(stage / FIGURE, doc)
    write_json(stage / "experiments.json", doc)
    write_text(stage / "experiments.md", markdown(doc, caption))


# ----------------------------------------------------------------------------- figure


def figure(path: Path, doc: dict) -> str:
    """Accuracy against Taylor order with seed spread; reference lines for the other forms."""
    from verify.render.figures import _plt, save

    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.0, 4.8))
    summ = doc["summary"]
    runs = doc["runs"]
    tay = sorted((s for s in summ if s["family"] == "taylor"), key=lambda s: s["order"])
    ok = [s for s in tay if s["accuracy_mean"] is not None]
    if ok:
        ax.errorbar(
            [s["order"] for s in ok],
            [s["accuracy_mean"] for s in ok],
            yerr=[s["accuracy_std"] or 0.0 for s in ok],
            fmt="o-",
            color="C3",
            lw=1.8,
            capsize=4,
            label="Taylor-N (mean ± std over seeds)",
        )
    for s in tay:
        pts = [r["accuracy"] for r in runs if r["form"] == s["form"] and not r["diverged"]]
        ax.plot([s["order"]] * len(pts), pts, ".", color="C3", alpha=0.45, ms=6)
        if s["diverged"]:
            ax.plot([s["order"]], [0.0], "x", color="k", ms=9, mew=2)
            ax.annotate(
                f"{s['diverged']}/{s['runs']} diverged",
                (s["order"], 0.0),
                textcoords="offset points",
                xytext=(6, 6),
                fontsize=8,
            )
    styles = {
        "softmax": ("k", "-", 2.0),
        "exp-l2": ("C0", "--", 1.3),
        "exp-rms": ("C9", "--", 1.3),
        "exp-none": ("C7", "-.", 1.3),
        "linear-elu1": ("C2", ":", 1.6),
        "linear-relu": ("C1", ":", 1.6),
        "linear-identity-l2": ("C4", ":", 1.6),
    }
    for s in summ:
        if s["family"] == "taylor":
            continue
        color, ls, lw = styles.get(s["form"], ("C5", "-", 1.0))
        if s["accuracy_mean"] is None:
            ax.plot([], [], color=color, ls=ls, lw=lw, label=f"{s['form']}: all runs diverged")
            continue
        div = f", {s['diverged']}/{s['runs']} diverged" if s["diverged"] else ""
        ax.axhline(
            s["accuracy_mean"],
            color=color,
            ls=ls,
            lw=lw,
            label=f"{s['form']} ({s['accuracy_mean']:.3f}{div})",
        )
    chance = 1.0 / doc["config"]["task"]["num_values"]
    ax.axhline(
        chance, color="grey", lw=0.8, ls=(0, (1, 3)), label=f"chance (1/{round(1 / chance)})"
    )
    ax.set_xticks([1, 2, 3, 4])
    ax.set_xlim(0.6, 4.4)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel(r"Taylor order $N$ (kernel $\kappa_N(x) = \sum_{n \leq N} x^n / n!$)")
    ax.set_ylabel("accuracy (fraction of query positions)")
    t = doc["config"]["task"]
    ax.set_title(
        f"MQAR, {t['num_pairs']} pairs, {len(doc['seeds'])} seed(s): "
        "accuracy vs Taylor order, other forms as lines"
    )
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    save(fig, path)
    return "Recall accuracy against Taylor order, with softmax, exp-norm and linear forms as lines"


# ----------------------------------------------------------------------------- markdown


def _acc(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def markdown(doc: dict, caption: str) -> str:
    from verify.render.markdown import table

    cfg = doc["config"]
    task, model, train = cfg["task"], cfg["model"], cfg["train"]
    lines = [
        "# Experiment: multi-query associative recall (issue 7)",
        "",
        "Generated by `" + doc["command"] + "`. This file carries training noise and run times; "
        "it is written only by `attn-theory experiment` and is **not** part of "
        "`attn-theory report --check`.",
    ]
    if doc["quick"]:
        lines += ["", "**Quick smoke run** (`--quick`): too few steps and seeds to mean anything."]
    lines += [
        "",
        "## Set-up",
        "",
        "Task: MQAR (Arora et al. 2023, *Zoology*). Each sequence holds "
        f"{task['num_pairs']} key-value pairs as tokens `k1 v1 … kP vP` (keys distinct, drawn "
        f"from {task['num_keys']} key tokens; values from {task['num_values']} value tokens, with "
        f"replacement), then {task['num_queries']} queries, distinct keys of the context in random "
        f"order; length T = {task['seq_len']}. The target at a query is the value paired with "
        "that key; loss and accuracy are taken at the query positions only. Accuracy = fraction "
        f"of the {train['eval_size']} × {task['num_queries']} query positions of a fixed "
        "evaluation set (per seed) whose arg-max prediction is the right value; chance is "
        f"1/{task['num_values']}.",
        "",
        f"Model: {model['n_layers']} pre-LayerNorm block(s) of causal multi-head attention "
        f"({model['n_heads']} heads × {model['head_dim']}, d_model = {model['d_model']}) and a "
        f"GELU MLP ({model['mlp_ratio']}×), residual connections, token + learned position "
        "embeddings"
        + (
            " plus an embedding of the previous token (a width-2 causal convolution, as the short "
            "convolutions of Zoology's models; it places the key beside its value, so one "
            "attention layer can do the look-up)"
            if model["token_shift"]
            else ""
        )
        + ", final LayerNorm, linear read-out. The attention core is the suite's own function "
        "(parallel form, `causal=True`, default scale); only this call changes between forms. "
        "Note that the LayerNorms around the attention normalize its output downstream for every "
        "form, including exp-none.",
        "",
        f"Training, the same for every form (fixed before any run; no per-form tuning): AdamW "
        f"(lr {train['lr']:g}, betas {tuple(train['betas'])}, weight decay "
        f"{train['weight_decay']:g}), linear warm-up {train['warmup']} steps then cosine decay "
        f"to {train['min_lr_ratio']:g} × lr, {train['steps']} steps of batch {train['batch']}, "
        f"gradient norm clipped at {train['clip']:g}, float32, {train['threads']} torch "
        "thread per run, `torch.use_deterministic_algorithms(True)`, `torch.manual_seed(seed)` "
        "for the weights and seeded generators for the data (the same batches for every form at "
        "a seed). A run **diverges** when its loss or gradient norm is not finite or its loss "
        f"exceeds {train['divergence_loss']:g} nats (chance ≈ ln {task['vocab_size']} = "
        f"{math.log(task['vocab_size']):.2f} nats); it is recorded with its step "
        "and reason and excluded from the accuracy statistics, never hidden.",
        "",
        "Seeds: " + ", ".join(str(s) for s in doc["seeds"]) + ".",
        "",
        "### Forms",
        "",
        table(
            ["form", "family", "call (verify.attention)"],
            [[f["name"], f["family"], f"`{f['call']}`"] for f in doc["forms"]],
        ),
        "",
        'The "linear map with an L2 norm" uses the identity feature map (plain linear attention '
        "q·k, THEORY.md D3) with the denominator replaced by the L2 norm of the numerator (D7). "
        "No form gets an eps: vanishing denominators (relu, odd Taylor orders, D4) give the IEEE "
        "result and are reported as they fall.",
        "",
        "## Results",
        "",
    ]
    rows = []
    for s in doc["summary"]:
        rows.append(
            [
                s["form"],
                f"{s['runs'] - s['diverged']}/{s['runs']}",
                s["diverged"],
                _acc(s["accuracy_mean"]),
                _acc(s["accuracy_std"]),
                _acc(s["accuracy_min"]),
                _acc(s["accuracy_max"]),
                "—" if s["final_loss_mean"] is None else f"{s['final_loss_mean']:.4g}",
                f"{s['seconds']:.1f} / {s['cpu_seconds']:.1f}",
            ]
        )
    lines += [
        table(
            [
                "form",
                "runs used",
                "diverged",
                "accuracy mean",
                "std (seeds)",
                "min",
                "max",
                "final train loss (nats)",
                "time wall / CPU (s)",
            ],
            rows,
        ),
        "",
        "Accuracy statistics over the runs that did not diverge; std is the sample standard "
        "deviation over seeds (— with fewer than two runs). Final train loss: mean training loss "
        "over the last evaluation interval.",
        "",
        f"![{caption}]({FIGURE})",
        "",
        f"*{caption}.* Dots: single seeds; × at 0: diverged runs.",
        "",
        "Caveats. (1) Accuracy after a fixed budget mixes what a form can represent with how "
        "fast it learns it: several forms learn MQAR through a sudden transition whose step "
        "varies by form and seed (see the accuracy-during-training column below), so a form "
        "near chance here may still learn with more steps. (2) The LayerNorms after the "
        "attention remove the scale of its output, which is why an unnormalized form can train "
        "at all; only non-finite values break it. (3) No eps anywhere: a denominator that "
        "vanishes (relu features, odd κ_N) gives inf/nan and the run is reported as diverged.",
        "",
        "### Ordering (measured)",
        "",
        doc["ordering_line"],
        "",
        "Neighbours are joined by ≈ when their mean accuracies differ by at most "
        f"max({doc['resolution']:g}, 2 × the standard error of the difference over seeds), "
        "and by > otherwise.",
        "",
        "### The papers' qualitative claims, as measured",
        "",
        table(
            ["claim", "source", "verdict", "evidence (accuracy mean ± std over seeds)"],
            [
                [c["claim"], c["source"], f"**{c['verdict']}**", c["evidence"]]
                for c in doc["claims"]
            ],
        ),
        "",
        "Verdict criteria (fixed in `verify/experiments/summary.py` before the runs): "
        "*≈* means indistinguishable as in the ordering; *improves with N* means no decrease "
        "beyond that tolerance between consecutive orders and N = 4 above N = 1 (*mixed* when it "
        "rises overall but not monotonically); *lags* means below softmax by more than the "
        "tolerance (or diverged); *unstable* means the runs diverge (*mixed* if some do).",
        "",
        "### Diverged runs",
        "",
    ]
    div = [r for r in doc["runs"] if r["diverged"]]
    if div:
        lines.append(
            table(
                ["form", "seed", "step", "reason"],
                [[r["form"], r["seed"], r["diverged_step"], r["reason"]] for r in div],
            )
        )
    else:
        lines.append("None.")
    lines += [
        "",
        "### Every run",
        "",
        table(
            [
                "form",
                "seed",
                "accuracy",
                "eval loss (nats)",
                "accuracy during training (step:accuracy)",
                "time wall / CPU (s)",
            ],
            [
                [
                    r["form"],
                    r["seed"],
                    "diverged" if r["diverged"] else _acc(r["accuracy"]),
                    "—" if r["eval_loss"] is None else f"{r['eval_loss']:.4g}",
                    " ".join(f"{c['step']}:{c['eval_accuracy']:.2f}" for c in r["curve"]) or "—",
                    f"{r['seconds']:.1f} / {r['cpu_seconds']:.1f}",
                ]
                for r in doc["runs"]
            ],
        ),
        "",
        "## Time taken",
        "",
        f"Total wall time {doc['timing']['total_seconds']:.1f} s, CPU time of the runs "
        f"{doc['timing']['total_cpu_seconds']:.1f} s, with "
        f"{doc['timing']['workers']} worker process(es), one torch thread each, on "
        f"{doc['timing']['cpu_count']} CPU cores"
        + (
            ""
            if doc["timing"]["load_average_1min"] is None
            else " (1-minute load average {:.2f} at the start, {:.2f} at the end: other processes "
            "share the cores)".format(*doc["timing"]["load_average_1min"])
        )
        + ". Per-form times above are summed run times.",
        "",
        "<details><summary>Environment</summary>",
        "",
    ]
    env = doc["environment"]
    lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()))
    lines.append(f"- torch CPU capability: {env['torch_cpu_capability']}")
    lines.append(f"- torch threads per run: {env['torch_threads_per_run']}")
    lines.append(f"- deterministic algorithms: {env['deterministic_algorithms']}")
    lines += ["", "</details>"]
    return "\n".join(lines)
