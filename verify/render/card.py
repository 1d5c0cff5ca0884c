"""Report cards for checked variants: ``<name>.md`` and ``<name>.json`` (schema in JSON).

:func:`render` writes the card of a check result; :func:`claims_vs_probes`, :func:`restrictions`
and :func:`reading` are the sections an adapter's card adds from the black-box probes and its
failures (``verify.render.cards`` assembles them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from verify.render import markdown as md
from verify.render.check import to_json
from verify.spec.variant import sanitize_name


def _ratio(r) -> str:
    return "" if r.get("max_ratio") is None else f"{r['max_ratio']:.3g}"


def render(doc: Mapping[str, Any], *, extra_sections: list[str] | None = None) -> str:
    """Markdown report card from a check's JSON document (``verify.render.check.to_json``)."""
    c = doc["counts"]
    verdict = {
        0: "passes every applicable property",
        1: "FAILS at least one property",
        3: "no property applied",
        4: "no property failed, but the checker itself erred (an internal error, not the "
        "variant's)",
        5: "no property failed, but some runs were inconclusive (the checker's limits ran out "
        "before a verdict, not the variant's failure)",
    }[doc["exit_code"]]
    out = [
        f"# Report card: `{doc['variant']}`",
        "",
        f"**What it computes:** {doc['description']}.",
        "",
        f"**Verdict:** {verdict} — {c['pass']} passed, {c['fail']} failed, {c['skip']} skipped"
        + (f", {c['inconclusive']} inconclusive" if c.get("inconclusive") else "")
        + (f", {c['error']} internal errors" if c.get("error") else "")
        + ".",
        "",
    ]
    if doc.get("findings"):  # what the probes found that the check used or a claim overrode
        out += ["**Found by the probes:**", ""] + [f"- {f}" for f in doc["findings"]] + [""]
    if doc["notes"]:
        out += [f"- {n}" for n in doc["notes"]] + [""]
    out += [
        "## Declared conventions",
        "",
        md.table(
            ["claim", "value"],
            [
                [k, v if not isinstance(v, (list, dict)) else (v if v else "—")]
                for k, v in doc["claims"].items()
            ],
        ),
        "",
    ]
    for section in extra_sections or []:
        out += [section, ""]
    if doc["probe"]:
        out += [
            "## Black-box probes",
            "",
            md.table(
                ["probe", "finding"],
                [
                    [k, v]
                    for k, v in doc["probe"].items()
                    if not isinstance(v, (dict, list)) and k != "runtime_s"  # no timings in cards
                ],
            ),
            "",
        ]
    out += [
        "## Properties",
        "",
        md.table(
            [
                "property",
                "derivation",
                "dtype",
                "status",
                "examples",
                "max obs/bound",
                "bound",
                "note",
            ],
            [
                [
                    r["property_id"],
                    r["derivation"],
                    r["dtype"],
                    r["status"],
                    r["examples"],
                    _ratio(r),
                    r.get("bound_kind") or "",
                    (r.get("reason") or "").split("\n")[0][:160],
                ]
                for r in doc["results"]
            ],
        ),
        "",
    ]
    out += root_causes(doc)
    failing = failed(doc)
    if failing:
        out += ["## Failures with minimal counterexamples", ""]
        for r in failing:
            out += [
                f"### `{r['property_id']}` ({r['dtype']})",
                "",
                r["statement"],
                "",
                f"Reason: {r['reason'].strip()}",
                "",
            ]
            if r.get("counterexample"):
                out += ["Shrunk counterexample:", "", "```", r["counterexample"].strip(), "```", ""]
            if r.get("snippet"):
                out += ["Reproducer:", "", "```python", r["snippet"].strip(), "```", ""]
    erred = [r for r in doc["results"] if r["status"] == "error"]
    if erred:
        out += ["## Internal errors of the checker (not the variant's)", ""]
        out += [f"- `{r['property_id']}` ({r['dtype']}): {r['reason'].strip()}" for r in erred]
        out.append("")
    return "\n".join(out)


def root_causes(doc: Mapping[str, Any]) -> list[str]:
    """The failures grouped by root cause (``doc["groups"]``, ``verify.engine.groups``): one
    line per group with its root, its cause, the properties it explains and the run whose
    counterexample is the smallest; [] without failures."""
    groups = doc.get("groups") or []
    if not groups:
        return []
    needs = {"causal": "causal=True", "mask": "an attn_mask", "batch": "B > 1", "heads": "H > 1",
             "cross": "T != S"}  # fmt: skip
    out = [
        "## Failures by root cause",
        "",
        "Grouped by `verify.engine.groups` (README, Reading the result): a failure joins the "
        "first failing property before it in dependency order whose cause its minimal "
        "counterexample has.",
        "",
    ]
    for i, g in enumerate(groups, 1):
        if g.get("reason"):
            cause = f"the same failure ({g['reason']})"
        elif g["cause"]:
            cause = "fails only with " + " and ".join(needs.get(n, n) for n in g["cause"])
        else:
            cause = "fails on its own"
        others = g["properties"][1:]
        line = f"{i}. `{g['root']}` ({', '.join(g['dtypes'])}): {cause}"
        if others:
            line += "; explains " + ", ".join(f"`{p}`" for p in others)
        if g.get("example"):
            line += f"; smallest counterexample: `{g['example'][0]}` ({g['example'][1]})"
        if g.get("look_at"):
            line += f". Look at: {g['look_at']}"
        out.append(line)
    return [*out, ""]


def failed(doc: Mapping[str, Any]) -> list[dict]:
    """The variant's failing results in a check document (internal errors are not)."""
    return [r for r in doc["results"] if r["status"] == "fail"]


def write(result, report_dir: Path) -> tuple[Path, Path]:
    """Write ``<sanitized name>.md`` and ``.json`` under ``report_dir``; returns both paths."""
    report_dir = Path(report_dir)
    doc = to_json(result)
    name = sanitize_name(doc["variant"])
    md_path, json_path = report_dir / f"{name}.md", report_dir / f"{name}.json"
    md.write_text(md_path, render(doc))
    md.write_json(json_path, doc)
    return md_path, json_path


# -- sections of the adapters' cards ------------------------------------------------------------
#: property ids that assume the normalized weights sum to exactly 1 (no declared eps)
SUM_ONE = ("convex-combination", "weights-vs-reference", "truncation-within-d4", "convergence-in-n")


def fmt(x: Any) -> str:
    """A float with 3 significant digits; anything else as ``str``."""
    if isinstance(x, float):
        return f"{x:.3g}"
    return str(x)


def short(text: Any, n: int = 120) -> str:
    """``text`` on one line, cut to ``n`` characters (an ellipsis marks the cut)."""
    s = " ".join(str(text).split())
    return s if len(s) <= n else s[: n - 1] + "…"


def claims_vs_probes(claims: Mapping, suggested: Mapping, compared: Sequence[str]) -> str:
    """The declared claims next to those the black-box probes suggest, for each of ``compared``
    (floats agree within a relative 1e-3)."""
    rows = []
    for key in compared:
        declared = claims.get(key)
        if key not in suggested:
            rows.append([key, fmt(declared), "not settled by the probes", ""])
            continue
        found = suggested[key]
        rows.append(
            [key, fmt(declared), fmt(found), "agrees" if _same(declared, found) else "DIFFERS"]
        )
    return "\n".join(
        [
            "## Declared claims against the black-box probes",
            "",
            md.table(["claim", "declared", "probes", ""], rows),
        ]
    )


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-3 * max(abs(a), abs(b))
    return a == b


def restrictions(title: str, probe: Mapping) -> str:
    """The probes' length scan and T != S findings (``probe``: a probe report's JSON)."""
    lengths = probe.get("lengths", {})
    tested = lengths.get("tested", {})
    rows = [[t, short(r)] for t, r in tested.items()]
    lines = [f"## {title}", ""]
    lines.append(
        f"- Sequence lengths (T = S, {lengths.get('mode', '?')}): {lengths.get('rule', '?')}; "
        f"smallest failing T: {lengths.get('smallest_failing')}."
    )
    cross = probe.get("cross", {})
    if cross.get("detail"):
        lines.append(f"- T ≠ S: {cross['detail']}.")
    lines += ["", md.table(["T", "result"], rows)]
    return "\n".join(lines)


def reading(
    doc: Mapping[str, Any],
    probe: Mapping,
    *,
    causes: Mapping[str, str] | None = None,
    causes_note: str = "",
) -> str:
    """Notes on what the failures show (the failures stay in the table; these lines say what
    causes them, or how a property meets a declared convention); "" when there is none.

    Args:
        doc: the check's JSON document (``verify.render.check.to_json``). probe: the probe
            report's JSON.
        causes: property id -> the cause of its failure, known for this implementation (listed
            first, for the properties that fail); causes_note: one more line when any does.
    """
    causes = causes or {}
    claims = doc["claims"]
    notes: list[str] = []
    failing = {r["property_id"]: r for r in failed(doc)}
    for pid, cause in causes.items():
        if pid in failing:
            notes.append(f"`{pid}`: {cause}.")
    if causes_note and any(p in failing for p in causes):
        notes.append(causes_note)
    if probe.get("output_precision") == "float32":
        f64 = sorted({r["property_id"] for r in failed(doc) if r["dtype"] == "float64"})
        if f64:
            notes.append(
                "Every output of a float64 call is a float32 number (probes): the float64 "
                f"failures ({', '.join(f'`{p}`' for p in f64)}) measure a float32 computation "
                "against float64 bounds; float32 and bfloat16 runs meet their own bounds "
                "where no other cause is listed."
            )
    kind = probe.get("normalization", {}).get("kind")
    if claims.get("normalized") and kind not in (None, "sum", "sum+eps"):
        notes.append(
            f"The probes read the normalization as `{kind}`; the declared kernel-sum "
            "normalization is what `oracle-agreement` checks (see its float32 verdict)."
        )
    if "causal-mismatch-rejected" in failing:
        notes.append(
            "`causal-mismatch-rejected` is the project's API contract (causal T ≠ S raises a "
            "ValueError naming `causal`); it runs here because the adapter's glue lives in "
            "`verify.adapters`. What the implementation does instead is in its reason and in "
            "the probes' T ≠ S line."
        )
    eps = claims.get("eps") or 0.0
    hit = [p for p in SUM_ONE if p in failing]
    if eps and hit:
        notes.append(
            f"{', '.join(f'`{p}`' for p in hit)} assume weights that sum to exactly 1; with the "
            f"declared eps = {eps:g} they sum to D/(D + eps), so the observed deviation is about "
            "eps/D (the properties do not take eps into account; `oracle-agreement` does)."
        )
    mult = claims.get("length_multiple") or 1
    edge = failing.get("edge-cases")
    if mult > 1 and edge and "forward raised" in (edge.get("reason") or ""):
        notes.append(
            f"`edge-cases` draws T = 1 (a single key), which the declared length_multiple = "
            f"{mult} excludes: the failure is the declared restriction, not a numerical error."
        )
    if not notes:
        return ""
    return "\n".join(["## Reading the failures", ""] + [f"- {n}" for n in notes])
