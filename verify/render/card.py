"""Report cards for checked variants: ``<name>.md`` and ``<name>.json`` (schema in JSON)."""

from __future__ import annotations

from pathlib import Path

from verify.render import markdown as md
from verify.spec.variant import sanitize_name


def _ratio(r) -> str:
    return "" if r.get("max_ratio") is None else f"{r['max_ratio']:.3g}"


def render(result, *, extra_sections: list[str] | None = None) -> str:
    """Markdown report card of a :class:`verify.checker.CheckResult`."""
    c = result.counts
    verdict = {
        0: "passes every applicable property",
        1: "FAILS at least one property",
        3: "no property applied",
    }[result.exit_code]
    out = [
        f"# Report card: `{result.variant}`",
        "",
        f"**What it computes:** {result.description}.",
        "",
        f"**Verdict:** {verdict} — {c['pass']} passed, {c['fail']} failed, {c['skip']} skipped"
        + (f", {c['error']} internal errors" if c.get("error") else "")
        + ".",
        "",
    ]
    if result.notes:
        out += [f"- {n}" for n in result.notes] + [""]
    out += [
        "## Declared conventions",
        "",
        md.table(
            ["claim", "value"],
            [
                [k, v if not isinstance(v, (list, dict)) else (v if v else "—")]
                for k, v in result.claims.items()
            ],
        ),
        "",
    ]
    for section in extra_sections or []:
        out += [section, ""]
    if result.probe:
        out += [
            "## Black-box probes",
            "",
            md.table(
                ["probe", "finding"],
                [
                    [k, v]
                    for k, v in result.probe.items()
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
                for r in result.results
            ],
        ),
        "",
    ]
    failed = result.failed
    if failed:
        out += ["## Failures with minimal counterexamples", ""]
        for r in failed:
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
    return "\n".join(out)


def write(result, report_dir: Path) -> tuple[Path, Path]:
    """Write ``<sanitized name>.md`` and ``.json`` under ``report_dir``; returns both paths."""
    report_dir = Path(report_dir)
    name = sanitize_name(result.variant)
    md_path, json_path = report_dir / f"{name}.md", report_dir / f"{name}.json"
    md.write_text(md_path, render(result))
    md.write_json(json_path, result.to_json())
    return md_path, json_path
