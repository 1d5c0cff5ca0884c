"""What a check says: the one-sentence description, the JSON document (schema
``attn-theory/check/v1``) and the terminal summary of a :class:`verify.engine.check.CheckResult`."""

from __future__ import annotations

from typing import Any

from verify.render import markdown as md
from verify.render.probes import describe as describe_probe
from verify.render.probes import probe_json

SCHEMA = "attn-theory/check/v1"


def describe_claims(v) -> str:
    """A sentence from the claims, e.g. 'normalized kernel attention, kappa_2 (Taylor-2 of exp)'."""
    norm = "normalized" if v.normalized else "unnormalized"
    kern = v.parsed_kernel
    if kern.family == "softmax":
        k = "softmax attention (kernel exp)"
    elif kern.family == "taylor":
        k = f"{norm} kernel attention, kappa_{kern.order} (Taylor-{kern.order} of exp)"
    elif kern.family == "linear":
        k = f"{norm} kernel linear attention, feature map {kern.map}"
    else:
        k = f"{norm} attention with an unidentified kernel"
    causal = {"yes": "causal only", "no": "non-causal only", "both": "causal and non-causal"}[
        v.causal
    ]
    return f"{k}, {causal}"


def describe(result) -> str:
    """What the variant computes: the probes' description when they ran, else the claims'."""
    if result.probe is not None:
        return describe_probe(result.probe)
    return describe_claims(result.variant)


def to_json(result) -> dict[str, Any]:
    """The check result as plain JSON values."""
    return {
        "schema": SCHEMA,
        "variant": result.name,
        "target": result.target,
        "description": describe(result),
        "claims": result.claims,
        "probe": None if result.probe is None else probe_json(result.probe),
        "precision_model": getattr(result, "precision", None),
        "counts": result.counts,
        "exit_code": result.exit_code,
        "notes": result.notes,
        "results": [r.to_json() for r in result.results],
    }


def ratio(r) -> str:
    """max observed/bound with 3 significant digits, or '' when none was measured."""
    return "" if r.max_ratio is None else f"{r.max_ratio:.3g}"


def progress_line(r) -> str:
    """One line per finished property run."""
    tail = f"  max obs/bound {r.max_ratio:.3g}" if r.max_ratio is not None else ""
    return f"  {r.status:5s} {r.property_id:30s} {r.dtype:8s}{tail}"


def failure_text(r) -> str:
    """A failing run: reason, shrunk counterexample and reproducer."""
    out = [f"FAILED {r.property_id} ({r.dtype}): {r.reason.strip()}"]
    if r.counterexample:
        out.append(f"counterexample:\n{r.counterexample}")
    if r.snippet:
        out.append(f"reproduce:\n{r.snippet}")
    return "\n".join(out)


def summary_text(result) -> str:
    """The terminal summary: description, notes, the property table, failures, counts."""
    out = [f"{result.name}: {describe(result)}"]
    out += [f"  note: {n}" for n in result.notes]
    rows = [
        [
            r.property_id,
            r.dtype,
            r.status,
            r.examples,
            ratio(r),
            (r.reason or "").split("\n")[0][:90],
        ]
        for r in result.results
    ]
    out.append(md.table(["property", "dtype", "status", "examples", "max obs/bound", "note"], rows))
    for r in result.failed:
        out += ["", failure_text(r)]
    for r in result.errors:
        out += [
            "",
            f"INTERNAL ERROR of the checker (not the variant's) in {r.property_id} "
            f"({r.dtype}): {r.reason.strip()}",
        ]
    c = result.counts
    out += ["", *coverage_lines(result.results)]
    out += [
        "",
        f"{c['pass']} passed, {c['fail']} failed, {c['skip']} skipped, {c['error']} errors",
    ]
    return "\n".join(out)


def coverage_lines(results) -> list[str]:
    """What ran and why the rest did not: the property ids with at least one run (pass, fail or
    error), and the skip reasons of the others grouped by their first clause. A skipped
    property is not a pass."""
    from collections import Counter

    ids = list(dict.fromkeys(r.property_id for r in results))
    ran = [i for i in ids if any(r.property_id == i and r.status != "skip" for r in results)]
    out = [f"ran {len(ran)} of {len(ids)} properties: {', '.join(ran) or 'none'}"]
    heads = Counter(
        (r.reason or "no reason").split("\n")[0].split(": ")[0].split(" (")[0].strip()
        for r in results
        if r.property_id not in ran
    )
    if heads:
        out.append(f"did not apply ({len(ids) - len(ran)} properties, every dtype):")
        out += [f"  {n:3d} runs: {head}" for head, n in heads.most_common()]
    return out
