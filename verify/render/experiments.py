"""``experiments.md`` / ``.json`` and ``figures/experiments_*.png`` of an
``attn-theory experiment recall`` document (``verify.experiments.payload.payload``'s result, or
the committed ``reports/experiments.json``).

These files carry training noise and run times, so they are written only by
``attn-theory experiment`` and are not part of ``attn-theory report --check`` (README, Reports).
``markdown`` is a pure function of the document and the figures' captions.
"""

from __future__ import annotations

import math
from pathlib import Path

from verify.render.markdown import table, write_json, write_text

FIGURE = "figures/experiments_recall.png"
CURVES = "figures/experiments_curves.png"
#: the files ``write`` writes (and ``attn-theory experiment`` owns) in a report directory
OWNED = ("experiments.md", "experiments.json", FIGURE, CURVES)

_STYLES = {
    "softmax": ("k", "-"),
    "exp-l2": ("C0", "--"),
    "exp-rms": ("C9", "--"),
    "exp-none": ("C7", "-."),
    "linear-elu1": ("C2", ":"),
    "linear-relu": ("C1", ":"),
    "linear-relu-eps": ("C5", ":"),
    "linear-identity-l2": ("C4", ":"),
}


def _style(form: str, order: int | None) -> tuple[str, str]:
    if order is not None:
        taylor = ("#d62728", "#ff7f0e", "#bcbd22", "#2ca02c", "#17becf", "#1f3f9f")
        return taylor[(order - 1) % len(taylor)], "-"
    return _STYLES.get(form, ("C8", "-"))


def write(stage: Path, doc: dict) -> None:
    """Write the owned files (``OWNED``) under ``stage`` (a report directory or its staging
    copy)."""
    captions = (accuracy_figure(stage / FIGURE, doc), curves_figure(stage / CURVES, doc))
    write_json(stage / "experiments.json", doc)
    write_text(stage / "experiments.md", markdown(doc, captions))


# ----------------------------------------------------------------------------- figures


def accuracy_figure(path: Path, doc: dict) -> str:
    """Per set-up: score against Taylor order (mean ± std, seed dots); other forms as lines."""
    from verify.render.figures import _plt, save

    plt = _plt()
    setups = doc["setups"]
    fig, axes = plt.subplots(1, len(setups), figsize=(5.2 * len(setups), 6.4), squeeze=False)
    runs = doc["runs"]
    for ax, st in zip(axes[0], setups):
        summ = [s for s in doc["summary"] if s["setup"] == st["name"]]
        tay = sorted((s for s in summ if s["family"] == "taylor"), key=lambda s: s["order"])
        ok = [s for s in tay if s["mean"] is not None]
        if ok:
            ax.errorbar(
                [s["order"] for s in ok], [s["mean"] for s in ok],
                yerr=[s["std"] or 0.0 for s in ok], fmt="o-", color="C3", lw=1.8, capsize=4,
                label="Taylor-N (mean ± std over seeds)",
            )  # fmt: skip
        for s in tay:
            pts = [
                _score(r) for r in runs
                if r["setup"] == st["name"] and r["form"] == s["form"] and _score(r) is not None
            ]  # fmt: skip
            ax.plot([s["order"]] * len(pts), pts, ".", color="C3", alpha=0.4, ms=5)
        for s in summ:
            if s["family"] == "taylor":
                continue
            color, ls = _style(s["form"], None)
            if s["mean"] is None:
                ax.plot([], [], color=color, ls=ls, label=f"{s['form']}: no score (missing eps)")
                continue
            ax.axhline(
                s["mean"], color=color, ls=ls, lw=1.4, label=f"{s['form']} ({s['mean']:.3f})"
            )
        chance = 1.0 / st["config"]["task"]["num_values"]
        ax.axhline(
            chance, color="grey", lw=0.8, ls=(0, (1, 3)), label=f"chance (1/{round(1 / chance)})"
        )
        if tay:
            ax.set_xticks(sorted(s["order"] for s in tay))
            ax.set_xlim(0.6, max(s["order"] for s in tay) + 0.4)
            ax.set_xlabel(r"Taylor order $N$ ($\kappa_N(x) = \sum_{n \leq N} x^n / n!$)")
        else:
            ax.set_xticks([])
        ax.set_ylim(-0.03, 1.03)
        ax.set_ylabel("score (accuracy at the end of training)")
        ax.set_title(st["name"] + ": " + st["description"], fontsize=9)
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    save(fig, path)
    return (
        "Score at the end of training against Taylor order, per set-up (mean ± std over seeds, "
        "dots: single seeds; a genuine divergence scores 0, a missing-eps divergence has no "
        "score); the other forms as horizontal lines at their mean"
    )


def curves_figure(path: Path, doc: dict) -> str:
    """Learning curves: evaluation accuracy against step, one line per run, one panel per
    (set-up, family group)."""
    from verify.render.figures import _plt, save

    plt = _plt()
    groups = (("exp", ("softmax", "exp-norm")), ("Taylor-N", ("taylor",)), ("linear", ("linear",)))
    setups = doc["setups"]
    fig, axes = plt.subplots(
        len(setups), len(groups), figsize=(14.0, 3.4 * len(setups)), squeeze=False, sharey=True
    )
    family = {f["name"]: (f["family"], f["order"]) for f in doc["forms"]}
    for row, st in zip(axes, setups):
        for ax, (title, fams) in zip(row, groups):
            seen = set()
            for r in doc["runs"]:
                fam, order = family.get(r["form"], ("custom", None))
                if r["setup"] != st["name"] or fam not in fams:
                    continue
                color, ls = _style(r["form"], order)
                steps = [c["step"] for c in r["curve"]]
                acc = [c["eval_accuracy"] for c in r["curve"]]
                label = None if r["form"] in seen else r["form"]
                seen.add(r["form"])
                ax.plot(steps, acc, color=color, ls=ls, lw=0.9, alpha=0.7, label=label)
                if r["diverged"]:
                    x = r["diverged_step"] if r["diverged_step"] is not None else 0
                    ax.plot([x], [0.0], "x" if r["missing_eps"] else "v", color=color, ms=6)
            ax.set_title(f"{st['name']}: {title}", fontsize=9)
            ax.set_ylim(-0.03, 1.03)
            if seen:
                ax.legend(fontsize=6, loc="lower right")
            else:
                ax.text(0.5, 0.5, "no form of this family\nin this set-up", ha="center",
                        va="center", transform=ax.transAxes, fontsize=8, color="grey")  # fmt: skip
                ax.set_xticks([])
        row[0].set_ylabel("evaluation accuracy")
    for ax in axes[-1]:
        ax.set_xlabel("training step")
    save(fig, path)
    return (
        "Learning curves: evaluation accuracy every evaluation interval, one line per run "
        "(seed), until the plateau criterion or the step cap stopped it; × marks a missing-eps "
        "divergence (excluded), ▼ a genuine divergence (scored 0)"
    )


def _score(r: dict) -> float | None:
    if not r["diverged"]:
        return r["accuracy"]
    return None if r["missing_eps"] else 0.0


# ----------------------------------------------------------------------------- markdown


def _f(x, spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _p(p) -> str:
    if p is None:
        return "—"
    return f"{p:.2g}" if p < 0.01 else f"{p:.3f}"


#: the test column of a test's row, by kind (``verify.experiments.summary.compare``)
_KIND = {
    "difference": "two-sided",
    "above": "above +margin (one-sided)",
    "below": "below −margin (one-sided)",
    "equivalence": "TOST ±margin",
}
_SHOWN = {
    "above": "**above by more than the margin**",
    "below": "**below by more than the margin**",
    "equivalence": "**equivalent**",
}


def _test_rows(tests: list[dict]) -> list[list]:
    rows = []
    for t in tests:
        if t["p"] is None:
            decision = "not measured"
        elif t["kind"] in _SHOWN:
            decision = _SHOWN[t["kind"]] if t["decided"] else "not shown"
        elif t["decided"]:
            decision = f"**{t['a']} {'>' if t['mean_diff'] > 0 else '<'} {t['b']}**"
        else:
            decision = "not resolved"
        rows.append(
            [
                t["setup"], f"{t['a']} − {t['b']}",
                _KIND.get(t["kind"], t["kind"]),
                t["n"], _f(t["mean_diff"], "+.3f"),
                "—" if t["min_diff"] is None else f"[{t['min_diff']:+.3f}, {t['max_diff']:+.3f}]",
                f"{t['a_better']}/{t['b_better']}", _p(t["p"]), _p(t["p_holm"]), decision,
            ]
        )  # fmt: skip
    return rows


_TEST_HEADER = [
    "set-up", "pair (a − b)", "test", "seeds", "mean diff", "range over seeds",
    "seeds a > b / a < b", "p", "Holm p", "decision",
]  # fmt: skip


def _verdict_cell(c: dict) -> str:
    """The verdict in bold, with its qualifier (e.g. at the ceiling) when there is one."""
    return f"**{c['verdict']}**" + (f" — {c['qualifier']}" if c.get("qualifier") else "")


def _scale(doc: dict) -> str:
    """What "at this scale" means for this document's verdicts."""
    cfg = [s["config"] for s in doc["setups"]]
    layers = sorted({c["model"]["n_layers"] for c in cfg})
    lengths = sorted({c["task"]["seq_len"] for c in cfg})
    heads = sorted({(c["model"]["n_heads"], c["model"]["head_dim"]) for c in cfg})
    steps = max(c["train"]["max_steps"] for c in cfg)
    return (
        "The verdicts hold **at this scale** only: "
        f"{'/'.join(map(str, layers))}-layer models with "
        + ", ".join(f"{h} heads × {d}" for h, d in heads)
        + f", sequences of T = {', '.join(map(str, lengths))} tokens, at most {steps} training "
        f"steps, {len(doc['seeds'])} seeds. *Supported / not supported / mixed at this scale* "
        "say what these runs show; none of them confirms or refutes a paper's claim at the "
        "scale the paper addresses (deeper models, longer sequences)."
    )


def markdown(doc: dict, captions: tuple[str, str]) -> str:
    """The Markdown report of a recall document; ``captions``: the two figures' captions."""
    stats = doc["statistics"]
    n = len(doc["seeds"])
    first = doc["setups"][0]["config"]
    train = first["train"]
    lines = [
        "# Experiment: multi-query associative recall",
        "",
        "Generated by `" + doc["command"] + "`. This file carries training noise and run times; "
        "it is written only by `attn-theory experiment` and is **not** part of "
        "`attn-theory report --check` (which reads the committed `experiments.json` and never "
        "trains).",
    ]
    if doc["quick"]:
        lines += [
            "",
            "**Quick smoke run** (`--quick`): too few steps and seeds to mean anything; no "
            "orderings are tested and no claim gets a verdict.",
        ]
    if doc.get("note"):
        lines += ["", f"**Note.** {doc['note']}"]
    lines += [
        "",
        "## Set-up",
        "",
        "Task: MQAR (Arora et al. 2023, *Zoology*). Each sequence holds P key-value pairs as "
        "tokens `k1 v1 … kP vP` (keys distinct, drawn from the key tokens; values drawn with "
        "replacement from the value tokens), then Q queries, distinct keys of the context in "
        "random order. The target at a query is the value paired with that key; loss and "
        "accuracy are taken at the query positions only. Accuracy = fraction of the query "
        "positions of a fixed evaluation set (per seed) whose arg-max prediction is right.",
        "",
        "Model: pre-LayerNorm block(s) of causal multi-head attention and a GELU MLP, residual "
        "connections, token + learned position embeddings plus an embedding of the previous "
        "token (a width-2 causal convolution, as the short convolutions of Zoology's models; it "
        "places the key beside its value, so one attention layer can do the look-up), final "
        "LayerNorm, linear read-out. The attention core is the suite's own function (parallel "
        "form, `causal=True`, default scale); only this call changes between forms.",
        "",
        table(
            [
                "set-up",
                "what it varies",
                "P pairs",
                "Q queries",
                "T",
                "vocabulary",
                "layers × heads × head dim",
                "LayerNorms",
                "forms",
            ],
            [
                [
                    s["name"],
                    s["description"],
                    s["config"]["task"]["num_pairs"],
                    s["config"]["task"]["num_queries"],
                    s["config"]["task"]["seq_len"],
                    "{num_keys} keys + {num_values} values".format(**s["config"]["task"]),
                    f"{s['config']['model']['n_layers']} × {s['config']['model']['n_heads']} × "
                    f"{s['config']['model']['head_dim']}",
                    "yes" if s["layernorm"] else "**none**",
                    len(s["forms"]),
                ]
                for s in doc["setups"]
            ],
        ),  # fmt: skip
        "",
        f"Training, the same for every form and set-up (fixed before any run; no per-form "
        f"tuning): AdamW (lr {train['lr']:g}, betas {tuple(train['betas'])}, weight decay "
        f"{train['weight_decay']:g}), linear warm-up over {train['warmup']} steps then a "
        f"constant learning rate, batch {train['batch']}, gradient norm clipped at "
        f"{train['clip']:g}, float32, {train['threads']} torch thread per run, "
        "`torch.use_deterministic_algorithms(True)`, `torch.manual_seed(seed)` for the weights "
        "and seeded generators for the data: at a seed every form of a set-up starts from the "
        "same weights and sees the same batches, so runs pair by seed.",
        "",
        f"**Plateau criterion** (the stopping rule): evaluate every {train['eval_every']} steps "
        f"on {train['eval_size']} fixed sequences; stop at the first evaluation at step ≥ "
        f"{train['min_steps']} where, over the last {train['patience']} evaluations, neither the "
        f"best accuracy rose by more than {train['min_acc_gain']:g} nor the best evaluation "
        f"loss fell by more than {train['min_loss_gain']:g} nats, compared with the best of all "
        f"earlier evaluations; stop at {train['max_steps']} steps otherwise (the cap: such runs "
        "are counted in the results as *cap*, i.e. not shown to have plateaued). The learning "
        "curves are in the second figure.",
        "",
        f"**Diagnostics** logged at every evaluation (on its first {train['diag_size']} "
        "sequences, recomputed in float64 from the attention's q, k, v): the score radius "
        "max |c q·k| over visible pairs (c = 1/√d for exp and Taylor, 1 for the element-wise "
        "feature maps, the suite's default scales), min |D_t| of the kernel sum "
        "D_t = Σ_{s≤t} κ(x_ts), the fraction of rows with D_t < 0, the fraction of "
        "(sequence, head) rows whose D_t changes sign along t, and min |divisor| of what the "
        "form divides by (D_t for `sum`, ‖N_t‖ for `l2`, the RMS of N_t for `rms`).",
        "",
        "**Divergences.** A run diverges when its loss or gradient norm is not finite or its "
        f"loss exceeds {train['divergence_loss']:g} nats. Its cause is read from the diagnostics "
        "of the diverging step's batch: when some row's divisor is exactly 0 (0/0 or x/0) or at "
        f"most 1/{stats['eps_ratio']:.0e} of its numerator, the divergence is a **missing eps** "
        "— a numerical artefact of calling the form without eps, reported as such, excluded "
        "from every statistic and never counted as evidence. Any other divergence is genuine: "
        "the model failed, and the run scores 0.",
        "",
        "Seeds: " + ", ".join(str(s) for s in doc["seeds"]) + f" (n = {n}).",
        "",
        "### Forms",
        "",
        table(
            ["form", "family", "call (verify.attention)", "signed kernel (D_t can vanish)"],
            [
                [f["name"], f["family"], f"`{f['call']}`", "yes" if f["signed"] else "no"]
                for f in doc["forms"]
            ],
        ),
        "",
        'The "linear map with an L2 norm" uses the identity feature map (plain linear attention '
        "q·k, D3) with the denominator replaced by the L2 norm of the numerator (D7). Only "
        "`linear-relu-eps` has an eps: it is the relu form with the 0/0 of a missing eps "
        "removed, so the relu kernel can be measured at all.",
        "",
        "## Statistics",
        "",
        "Each comparison of two forms A and B uses the per-seed differences "
        "d_i = score_A(seed i) − score_B(seed i) over the seeds where both have a score. "
        "**Test**: the exact paired sign-flip permutation test (all 2^n sign patterns of the "
        "d_i; p = fraction whose mean is at least as extreme as observed; two-sided), which "
        "assumes only that under the null the labels A and B are exchangeable within a seed; "
        "the orderings use it. **Claims**: every comparison of a claim is decided by three "
        f"tests with the margin m = {stats['margin']:g}: *above by more than m* (one-sided "
        "sign-flip test of the shifted differences d_i − m; null: mean d ≤ +m), *below by more "
        "than m* (one-sided test of d_i + m; null: mean d ≥ −m) and *equivalent within ±m* "
        "(two one-sided tests, TOST; null: |mean d| ≥ m). The shifted tests are exact when, at "
        "the null's boundary, the d_i are symmetric about their mean. The comparison's outcome "
        "is the one whose test decides, else *undecided*: a mean difference beyond the margin "
        "whose shifted test does not decide is undecided, not a difference beyond the margin. "
        "**Correction**: Holm's step-down method within each family — all the tests of one "
        "claim, or the neighbour pairs of one set-up's ordering — at family-wise level "
        f"α = {stats['alpha']:g}.",
        "",
        f"What {n} seeds can decide: the smallest two-sided p-value is 2/2^{n} = "
        f"{stats['min_p_two_sided']:.3g} (every d_i of one sign), so a family of k tests can "
        f"decide only if {stats['min_p_two_sided']:.3g} ≤ {stats['alpha']:g}/k, i.e. "
        f"k ≤ {math.floor(stats['alpha'] / stats['min_p_two_sided'] + 1e-9)}; the one-sided "
        f"and TOST tests of the claims reach 1/2^{n} = {stats['min_p_one_sided']:.3g} "
        f"(k ≤ {math.floor(stats['alpha'] / stats['min_p_one_sided'] + 1e-9)}); at 5 seeds "
        "(minimum two-sided p = 0.0625) no two-sided test could decide anything, which is why "
        f"the design uses {n}. A difference that is not resolved (`~`) is not an equality: "
        f"equality is claimed only through the equivalence test. Pairs whose means are both ≥ "
        f"{stats['ceiling']:g} are flagged *at the ceiling*: equivalence there says that both "
        "forms solve the task, not that they are alike elsewhere.",
        "",
        "## Results",
        "",
    ]
    finished = [r for r in doc["runs"] if not r["diverged"]]
    capped = sum(r["stop"] == "cap" for r in finished)
    lines += [
        f"Of the {len(finished)} runs that finished, {len(finished) - capped} stopped by the "
        f"plateau criterion and {capped} at the step cap ({train['max_steps']} steps): those "
        "were still improving by the criterion's measure (often only the evaluation loss, at "
        "an accuracy near 1), so their score is the accuracy reached within the budget, not "
        "shown to be final. The learning curves show which.",
        "",
    ]
    for st in doc["setups"]:
        summ = [s for s in doc["summary"] if s["setup"] == st["name"]]
        lines += [
            f"### {st['name']}: {st['description']}",
            "",
            table(
                [
                    "form",
                    "scored / runs",
                    "missing eps",
                    "diverged (0)",
                    "mean",
                    "std",
                    "min",
                    "max",
                    "stop: plateau / cap",
                    "median steps",
                    "radius (median)",
                    "min |D_t|",
                    "D_t < 0",
                    "rows with sign change",
                ],
                [
                    [
                        s["form"],
                        f"{s['scored']}/{s['runs']}",
                        s["missing_eps"],
                        s["diverged"],
                        _f(s["mean"]),
                        _f(s["std"]),
                        _f(s["min"]),
                        _f(s["max"]),
                        f"{s['plateau']} / {s['cap']}",
                        _f(s["median_steps"], ".0f"),
                        _f(s["radius"], ".3g"),
                        _f(s["min_abs_D"], ".3g"),
                        _pct(s["neg_D_fraction"]),
                        _pct(s["sign_change_rows"]),
                    ]
                    for s in summ
                ],
            ),  # fmt: skip
            "",
        ]
        ords = [o for o in doc["orderings"] if o["setup"] == st["name"]]
        if ords:
            o = ords[0]
            lines += [
                f"Ordering ({st['name']}): {o['line']}",
                "",
                table(_TEST_HEADER, _test_rows(o["tests"])),
                "",
            ]
    lines += [
        "Score statistics over the scored runs (finished runs at their accuracy, genuine "
        "divergences at 0; missing-eps divergences excluded); std is the sample standard "
        "deviation over seeds. Diagnostics at the final evaluation of the finished runs: "
        "radius is the median over runs, min |D_t| the smallest over runs, the last two "
        "columns means over runs. In an ordering, neighbours are joined by `>` when the "
        "Holm-adjusted p-value of their paired test is ≤ α and by `~` (not resolved) otherwise; "
        "`>` claims a non-zero difference, not one beyond the claims' margin.",
        "",
        f"![{captions[0]}]({FIGURE})",
        "",
        f"*{captions[0]}.*",
        "",
        f"![{captions[1]}]({CURVES})",
        "",
        f"*{captions[1]}.*",
        "",
        "### The papers' qualitative claims, as tested",
        "",
    ]
    if doc["quick"] or not doc["claims"]:
        lines.append("No verdicts: a quick run is too short to test anything.")
    else:
        fixed = (
            doc.get("rules_fixed") or "when they were fixed relative to the runs is not recorded"
        )
        lines += [
            _scale(doc),
            "",
            table(
                ["id", "claim", "source", "verdict", "evidence"],
                [
                    [c["id"], c["claim"], c["source"], _verdict_cell(c), c["evidence"]]
                    for c in doc["claims"]
                ],
            ),
            "",
            f"Verdict rules (`verify/experiments/summary.py`; {fixed}):",
            "",
        ]
        lines += [f"- {c['id']}: {c['rule']}." for c in doc["claims"]]
        for c in doc["claims"]:
            if c["tests"]:
                lines += ["", f"Tests of {c['id']} (one Holm family):", "",
                          table(_TEST_HEADER, _test_rows(c["tests"]))]  # fmt: skip
    lines += ["", "### Divergences", ""]
    div = [r for r in doc["runs"] if r["diverged"]]
    if div:
        lines.append(
            table(
                ["set-up", "form", "seed", "step", "what", "cause", "counted as"],
                [
                    [
                        r["setup"],
                        r["form"],
                        r["seed"],
                        r["diverged_step"],
                        r["reason"],
                        r["cause"],
                        "excluded (missing eps)" if r["missing_eps"] else "failure (score 0)",
                    ]
                    for r in div
                ],
            )  # fmt: skip
        )
    else:
        lines.append("None.")
    lines += [
        "",
        "<details><summary>Every run</summary>",
        "",
        table(
            [
                "set-up",
                "form",
                "seed",
                "score",
                "stop",
                "steps",
                "eval loss",
                "radius",
                "min |D_t|",
                "D_t < 0",
                "min |divisor|",
                "time wall / CPU (s)",
            ],
            [
                [
                    r["setup"],
                    r["form"],
                    r["seed"],
                    "excluded" if r["diverged"] and r["missing_eps"] else _f(_score(r)),
                    r["stop"],
                    r["steps"],
                    _f(r["eval_loss"], ".4g"),
                    _f((r["diagnostics"] or {}).get("radius"), ".3g"),
                    _f((r["diagnostics"] or {}).get("min_abs_D"), ".3g"),
                    _f((r["diagnostics"] or {}).get("neg_D_fraction"), ".3f"),
                    _f((r["diagnostics"] or {}).get("min_abs_divisor"), ".3g"),
                    f"{r['seconds']:.1f} / {r['cpu_seconds']:.1f}",
                ]
                for r in doc["runs"]
            ],
        ),  # fmt: skip
        "",
        "</details>",
        "",
        "## Time taken",
        "",
        f"Total wall time {doc['timing']['total_seconds']:.1f} s "
        f"({doc['timing']['total_seconds'] / 60:.1f} min), CPU time of the runs "
        f"{doc['timing']['total_cpu_seconds']:.1f} s, with {doc['timing']['workers']} worker "
        f"process(es), one torch thread each, on {doc['timing']['cpu_count']} CPU cores"
        + (
            ""
            if doc["timing"]["load_average_1min"] is None
            else " (1-minute load average {:.2f} at the start, {:.2f} at the end: other "
            "processes share the cores)".format(*doc["timing"]["load_average_1min"])
        )
        + ".",
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
