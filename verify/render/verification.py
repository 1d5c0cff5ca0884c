"""``verification.md`` / ``.json``: the property x implementation matrix per dtype and device.

Each cell is one (built-in variant, property, dtype) run of the catalogue: status, examples,
max observed/bound (tightness), and whether the bound is derived, calibrated, exact or
statistical. Also the distribution of observed/bound per dtype (figure).
"""

from __future__ import annotations

import math
from pathlib import Path

from verify.environment import environment
from verify.render import markdown as md
from verify.render.metadata import markdown_block

SCHEMA = "attn-theory/verification/v1"
#: max observed/bound is reported with this many significant digits (machine-dependent digits
#: beyond it would make the report differ across CPUs for no information)
RATIO_DIGITS = 3


def _round(x: float | None) -> float | None:
    if x is None or not math.isfinite(x) or x == 0:
        return x
    return float(f"{x:.{RATIO_DIGITS}g}")


def build(
    stage: Path,
    *,
    variants=None,
    max_examples: int,
    device: str = "cpu",
    jobs: int | None = None,
    progress=None,
) -> dict:
    """Run the catalogue and write verification.md/.json and the ratio figure; returns JSON."""

    from verify.engine import catalogue

    job_list = catalogue.plan(list(variants) if variants else None)
    devices = ["cpu"] + ([device] if device.startswith("cuda") else [])

    def tick(i, n, job, res):
        if progress and (i % 50 == 0 or i == n):
            progress(f"  verification {i}/{n}")

    results = []
    for dev in devices:
        results += catalogue.run(
            job_list,
            device=dev,
            max_examples=max_examples,
            profile="ci",
            workers=jobs,
            progress=tick,
            shrink_draws=None,
        )
    cells = []
    ratios_by_dtype: dict[str, list[float]] = {}
    for job, r in results:
        cells.append(
            {
                "variant": job.label,
                "property": r.property_id,
                "derivation": r.derivation,
                "dtype": job.dtype,
                "device": r.device,
                "status": r.status,
                "examples": r.examples,
                "max_ratio": _round(r.max_ratio),
                "bound_kind": r.bound_kind,
                "loose": r.loose,
                "reason": r.reason.split("\n")[0] if r.status != "pass" else "",
                "counterexample": r.counterexample if r.status in ("fail", "error") else "",
            }
        )
        if r.status == "pass":
            ratios_by_dtype.setdefault(job.dtype, []).extend(
                x for x in r.ratios if math.isfinite(x) and x > 0
            )
    from verify.properties import catalogue

    props = [
        {
            "id": p.id,
            "statement": p.statement,
            "derivation": p.derivation,
            "faults": list(p.faults),
            "low_precision": p.low_precision,
        }
        for p in catalogue()
    ]
    data = {
        "schema": SCHEMA,
        "profile": "ci",
        "max_examples": max_examples,
        "devices": sorted({c["device"] for c in cells}),
        "properties": props,
        "cells": cells,
        "summary": _summary(cells),
        "environment": environment(profile="ci", seed=0),
    }
    fig = _ratio_figure(
        stage / "figures" / "ratio_distribution.png",
        ratios_by_dtype,
        max_examples=max_examples,
        profile=data["profile"],
    )
    md.write_json(stage / "verification.json", data)
    md.write_text(stage / "verification.md", render(data, fig))
    return data


def _summary(cells) -> dict:
    out = {"pass": 0, "fail": 0, "skip": 0, "error": 0, "loose": 0}
    for c in cells:  # an inconclusive cell (the checker's limits ran out) adds its own key
        out[c["status"]] = out.get(c["status"], 0) + 1
        out["loose"] += int(c["loose"])
    out["failing"] = [
        f"{c['variant']}/{c['property']}/{c['dtype']}"
        for c in cells
        if c["status"] in ("fail", "error")
    ]
    return out


def _cell(c) -> str:
    if c["status"] == "pass":
        r = "" if c["max_ratio"] is None else f" {c['max_ratio']:.3g}"
        mark = {"calibrated": "ᶜ", "statistical": "ˢ", "exact": "⁼"}.get(c["bound_kind"] or "", "")
        return f"✓{r}{mark}" + (" (loose)" if c["loose"] else "")
    if c["status"] == "skip":
        return "–"
    if c["status"] == "inconclusive":  # the checker's limits ran out: no verdict
        return "… INCONCLUSIVE"
    return "✗ FAIL" if c["status"] == "fail" else "⚠ ERROR"


def totals(s: dict) -> str:
    """The summary's counts in words (``verification.json`` ``summary``)."""
    return (
        f"**{s['pass']} passed, {s['fail']} failed**, {s['skip']} not applicable, "
        f"{s['error']} internal errors, {s['loose']} loose bounds"
    )


def failing_paragraph(label: str, failing: list[str]) -> list[str]:
    """``label`` and the failing cells of a summary in code spans, then a blank line; nothing when
    no cell fails."""
    return [label + ", ".join(f"`{f}`" for f in failing), ""] if failing else []


def render(data: dict, figure: tuple[str, str] | None) -> str:
    """``verification.md`` from its JSON; ``figure``: (relative path, caption) of the ratio
    figure, or None."""
    s = data["summary"]
    out = [
        "# Verification of the built-in implementations",
        "",
        "Generated by `attn-theory report`: every property of the catalogue "
        "(`verify/properties/`) run with hypothesis (profile `ci`, derandomized, "
        f"{data['max_examples']} examples per cell) on every registered built-in variant "
        "(`verify/builtins.py`), per dtype and device. A cell shows ✓ and the largest "
        "observed/bound over its examples (the bound is stated before the output is computed, "
        "from the error model of D10 or the derivation named); ᶜ marks a *calibrated* "
        "bound (gradients: stated rule), ˢ a statistical one (explicit confidence, Bonferroni), "
        "⁼ an exact identity; – means the property does not apply (the reason is in the JSON). "
        "A bound never approached within 1e-6 is flagged *loose*.",
        "",
        f"**Totals:** {totals(s)}.",
        "",
    ]
    out += failing_paragraph("**Failing cells:** ", s["failing"])
    if figure:
        out += [f"![observed/bound per dtype]({figure[0]})", "", f"*{figure[1]}*", ""]
    out += [
        "## Properties",
        "",
        md.table(
            ["id", "derivation", "statement", "fault classes"],
            [
                [p["id"], p["derivation"], p["statement"], ", ".join(map(str, p["faults"]))]
                for p in data["properties"]
            ],
        ),
        "",
    ]
    variants = sorted({c["variant"] for c in data["cells"]}, key=_variant_key)
    for device in data["devices"]:
        for dtype in ("float64", "float32", "bfloat16", "float16"):
            cells = [c for c in data["cells"] if c["dtype"] == dtype and c["device"] == device]
            if not cells:
                continue
            by = {(c["property"], c["variant"]): c for c in cells}
            props = [
                p["id"] for p in data["properties"] if any(c["property"] == p["id"] for c in cells)
            ]
            out += [
                f"## {dtype} on {device}",
                "",
                md.table(
                    ["property", *variants],
                    [
                        [p, *(_cell(by[(p, v)]) if (p, v) in by else "" for v in variants)]
                        for p in props
                    ],
                ),
                "",
            ]
    fails = [c for c in data["cells"] if c["status"] in ("fail", "error")]
    if fails:
        out += ["## Failures", ""]
        for c in fails:
            out += [f"### {c['variant']} / {c['property']} / {c['dtype']}", "", c["reason"], ""]
            if c["counterexample"]:
                out += ["```", c["counterexample"], "```", ""]
    out += [markdown_block(data["environment"]), ""]
    return "\n".join(out)


def _variant_key(name: str):
    order = {"softmax": 0, "taylor": 1, "linear": 2}
    fam = name.split("-")[0]
    tail = name.split("-", 1)[1] if "-" in name else ""
    return (order.get(fam, 3), int(tail) if tail.isdigit() else 0, tail)


def _ratio_figure(
    path: Path, ratios_by_dtype: dict[str, list[float]], *, max_examples: int, profile: str
) -> tuple[str, str] | None:
    """Write the ratio figure (``figures.draw_ratio_distribution``); (relative path, caption)."""
    if not ratios_by_dtype:
        return None
    from verify.render.figures import draw_ratio_distribution, save

    drawn = draw_ratio_distribution(ratios_by_dtype, max_examples=max_examples, profile=profile)
    save(drawn.fig, path)
    return "figures/ratio_distribution.png", drawn.caption
