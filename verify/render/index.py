"""``index.md``, the page a reader opens first, and the per-variant error-vs-radius figure."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from verify.environment import environment
from verify.render import markdown as md
from verify.render.card import failed
from verify.render.metadata import markdown_block
from verify.render.verification import failing_paragraph, totals
from verify.spec.variant import sanitize_name

#: score radii of the error-vs-radius figure, and the fixed inputs it uses
RADII = tuple(float(r) for r in np.round(np.logspace(-1, np.log10(12.0), 14), 6))
FIGURE_SEED = 20251130
FIGURE_VARIANTS = ("taylor-1", "taylor-2", "taylor-4", "taylor-6", "linear-elu1", "linear-favor")


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _committed(
    source_dir: Path, page: str, key: str, title: str, header: list[str], row
) -> list[str]:
    """The section on a committed ``<page>.json``: a table of ``row(entry)`` for each entry of
    its ``key`` and a link to ``<page>.md``; none when the file or the entries are missing."""
    doc = _load(source_dir / f"{page}.json")
    if not (doc and doc.get(key)):
        return []
    return [
        f"## {title}",
        "",
        md.table(header, [row(entry) for entry in doc[key]]),
        "",
        f"Details: [{page}.md]({page}.md).",
        "",
    ]


def _accuracy_row(r: dict) -> list[str]:
    """A form's row of the experiment table: score over seeds and diverged runs (schema 2: per
    set-up, with missing-eps divergences excluded; schema 1: ``accuracy_mean``)."""
    mean = r.get("mean", r.get("accuracy_mean"))
    std = r.get("std", r.get("accuracy_std"))
    accuracy = "—" if mean is None else f"{mean:.3f} ± {std or 0:.3f}"
    form = f"{r['setup']}: {r['form']}" if r.get("setup") else r["form"]
    diverged = f"{r['diverged']}/{r['runs']}"
    if r.get("missing_eps"):
        diverged += f" (+{r['missing_eps']} missing eps, excluded)"
    return [form, accuracy, diverged]


#: the fixed inputs of the error-vs-radius figure: one head of T queries and keys, sizes d, d_v
FIGURE_T, FIGURE_D, FIGURE_DV = 16, 4, 4
#: errors below this are drawn at it (a log axis has no zero)
FIGURE_FLOOR = 1e-17


def error_vs_radius_data() -> dict:
    """Max |variant - softmax| over fixed inputs rescaled to score radius r, for r in RADII,
    for the built-ins of ``FIGURE_VARIANTS``, with the D4 output bound
    output_error_bound(delta_N(r)) max|v| for the Taylor variants (float64, non-causal)."""
    import torch

    from derivations import truncation as d4
    from verify import builtins as variants

    gen = np.random.default_rng(FIGURE_SEED)
    T, d, d_v = FIGURE_T, FIGURE_D, FIGURE_DV
    q0, k0 = gen.standard_normal((1, 1, T, d)), gen.standard_normal((1, 1, T, d))
    v = torch.from_numpy(gen.uniform(-1, 1, (1, 1, T, d_v)))
    c = 1 / np.sqrt(d)
    base = np.max(np.abs(c * q0 @ np.swapaxes(k0, -1, -2)))
    data: dict = {"radii": list(RADII)}
    curves = {}
    for name in FIGURE_VARIANTS:
        fwd = variants.get(name).forward
        errs = []
        for r in RADII:
            s = np.sqrt(r / base)
            q, k = torch.from_numpy(q0 * s), torch.from_numpy(k0 * s)
            ref = torch.softmax(c * q @ k.transpose(-1, -2), -1) @ v
            out = fwd(q, k, v, causal=False)
            if isinstance(out, tuple):
                out = out[0]
            errs.append(float((out.double() - ref).abs().max()))
        curves[name] = errs
    data["max_error"] = curves
    bounds = {}
    vmax = float(v.abs().max())
    for n in (1, 2, 4, 6):
        b = []
        for r in RADII:
            delta = d4.delta(n, r)
            b.append(d4.output_error_bound(delta) * vmax if delta < 1 else None)
        bounds[f"taylor-{n}"] = b
    data["d4_bound"] = bounds
    data["max_abs_v"] = vmax
    return data


def error_vs_radius_caption(max_abs_v: float) -> str:
    """The caption of the error-vs-radius figure: what is plotted, then its inputs (the bound
    scales with ``max_abs_v`` = max|v| of the drawn values)."""
    from verify.builtins import FAVOR_FEATURES, FAVOR_SEED
    from verify.render.figures import num

    return (
        "Each built-in variant's largest output error max |o − o_softmax| against exact softmax "
        "as the score radius r = max over t, s of |c q_t·k_s| grows (float64, non-causal). "
        "Dotted: the D4 output bound B(δ_N(r)) · max|v| of Taylor-N, drawn while δ_N(r) < 1; "
        f"it scales with max|v| = {max_abs_v:.3f} of these values. linear-elu1 and linear-favor "
        f"have no such bound. Inputs: one head, T = {FIGURE_T} queries and keys, d = "
        f"{FIGURE_D}, d_v = {FIGURE_DV}, c = 1/√d; q and k drawn once from N(0, 1) and "
        "both scaled by one factor per r so that the radius is r; v ~ U(−1, 1); generator "
        f"seed {FIGURE_SEED}; {len(RADII)} radii log-spaced from {RADII[0]:g} to "
        f"{RADII[-1]:g}; linear-favor with m = {FAVOR_FEATURES} orthogonal random features "
        f"(seed {FAVOR_SEED} + d). Errors below {num(FIGURE_FLOOR)} are drawn at "
        f"{num(FIGURE_FLOOR)}."
    )


def draw_error_vs_radius(data: dict):
    """The error-vs-radius figure of ``data`` (:func:`error_vs_radius_data`), a
    ``figures.Drawn``."""
    from verify.render.figures import Drawn, _plt

    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    radii, bounds = data["radii"], data["d4_bound"]
    for i, (name, errs) in enumerate(data["max_error"].items()):
        color = f"C{i % 10}"
        ax.loglog(radii, np.maximum(errs, FIGURE_FLOOR), "o-", ms=3, color=color, label=name)
        if name in bounds:
            ys = [np.nan if y is None else y for y in bounds[name]]
            ax.loglog(radii, ys, ":", color=color, lw=1.2)
    ax.set_xlabel(r"score radius $r = \max_{t,s} |c\, q_t \cdot k_s|$ (dimensionless)")
    ax.set_ylabel(r"$\max |o - o_{\mathrm{softmax}}|$ (units of $v$)")
    ax.set_title(
        "Error against exact softmax vs score radius "
        rf"(dotted: D4 bound, $\max|v| = {data['max_abs_v']:.3f}$)"
    )
    ax.legend(fontsize=7, ncol=2)
    return Drawn(fig, error_vs_radius_caption(data["max_abs_v"]))


def error_vs_radius(path: Path) -> tuple[str, str]:
    """Compute, draw and save the error-vs-radius figure; (relative path, caption)."""
    from verify.render.figures import save

    drawn = draw_error_vs_radius(error_vs_radius_data())
    save(drawn.fig, path)
    return "figures/error_vs_radius.png", drawn.caption


def build(
    stage: Path, *, records, verification, cards, claims, source_dir: Path, quick: bool = False
) -> None:
    """Write ``index.md`` (and the error-vs-radius figure) under ``stage``."""
    from verify.render import figures

    fig_path, fig_caption = error_vs_radius(stage / "figures" / "error_vs_radius.png")
    s = verification["summary"]
    out = [
        "# attn-theory reports",
        "",
        "Softmax attention rewritten through the Taylor series of exp as an infinite sum of "
        "linear RNNs; linear attention as its first-order truncation (Mongaras & Larson 2025); "
        "why the exponential separates what linear attention cannot (Deng, Song & Zhou 2023). "
        "Everything below is regenerated by `attn-theory report` "
        + ("(**quick smoke run: not the committed numbers**)" if quick else "")
        + "; `attn-theory report --check` fails CI when it is stale.",
        "",
        "## What was derived",
        "",
        md.table(
            ["id", "title", "status"],
            [
                [f"[{r.id}](derivations.md#{r.id.lower()})", r.title, r.status.value]
                for r in records
            ],
        ),
        "",
        "Failed derivations: "
        + (", ".join(r.id for r in records if r.status.value == "failed") or "none")
        + ".",
        "",
        "## What was verified",
        "",
        "The property catalogue on the built-in implementations ([verification.md]"
        f"(verification.md)): {totals(s)}.",
        "",
    ]
    out += failing_paragraph("What failed: ", s["failing"])
    if cards:
        out += [
            "## Third-party variants",
            "",
            md.table(
                ["variant", "what the suite finds it computes", "verdict", "failing properties"],
                [
                    [
                        f"[{c['variant']}](variants/{sanitize_name(c['variant'])}.md)",
                        c["description"],
                        {0: "passes", 1: "fails", 3: "nothing applied", 4: "checker error"}[
                            c["exit_code"]
                        ],
                        ", ".join(sorted({r["property_id"] for r in failed(c)})) or "—",
                    ]
                    for c in cards
                ],
            ),
            "",
        ]
    if claims:
        out += [
            "## The seed papers' claims",
            "",
            claims["summary_markdown"],
            "",
            "Full table: [claims.md](claims.md).",
            "",
        ]
    out += [
        "## Figures",
        "",
        "![truncation error](figures/truncation_error.png)",
        "",
        f"*{figures.truncation_error_caption()}*",
        "",
        f"![error vs radius]({fig_path})",
        "",
        f"*{fig_caption}*",
        "",
        "![positivity](figures/kappa_positivity.png)",
        "",
        f"*{figures.positivity_caption()}*",
        "",
        "![state size](figures/state_vs_kv_cache.png)",
        "",
        f"*{figures.state_vs_kv_caption()}*",
        "",
        "![observed/bound](figures/ratio_distribution.png)",
        "",
        "*"
        + figures.ratio_distribution_caption(
            max_examples=verification["max_examples"], profile=verification["profile"]
        )
        + "*",
        "",
    ]
    out += _committed(
        source_dir,
        "benchmarks",
        "goals",
        "Benchmarks (committed `attn-theory bench` results, not re-timed)",
        ["goal", "measured", "met"],
        lambda g: [g["goal"], f"{g['measured']:.3g}", "yes" if g["met"] else "**no**"],
    )
    out += _committed(
        source_dir,
        "experiments",
        "summary",
        "Expressiveness experiment (committed `attn-theory experiment recall`)",
        ["set-up: form", "score (mean ± std over seeds)", "diverged (scored 0)"],
        _accuracy_row,
    )
    out += [
        "## Pages",
        "",
        f"- [derivations.md](derivations.md): {records[0].id}–{records[-1].id} with LaTeX, "
        "statuses, exported numbers",
        "- [verification.md](verification.md): property × implementation matrix per dtype",
        "- [variants/](variants/): report cards of third-party variants",
        "- [claims.md](claims.md): the seed papers' claims, traced",
        "- [faults.md](faults.md): the fault classes the checker catches, with their properties",
        "- [anchors.md](anchors.md): other projects' attention tolerance rules beside the "
        "derived bound, on the same kernels and faulty twins (false alarms, misses, tightness)",
        "- [arithmetic.md](arithmetic.md): the bounds of D16's transforms and D17's kernel "
        "arithmetic on emulated FlashAttention-2, eager and rounded-weights kernels (median and "
        "max observed/bound, defects), the defaults per device and dtype",
        "- [benchmarks.md](benchmarks.md), [experiments.md](experiments.md)",
        "",
    ]
    out += [markdown_block(environment(profile="ci", seed=0)), ""]
    md.write_text(stage / "index.md", "\n".join(out))
