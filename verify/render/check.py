"""What a check says: the one-sentence description, the JSON document (schema
``attn-theory/check/v1``) and the terminal summary of a :class:`verify.engine.check.CheckResult`.

The summary (:func:`summary_text`) is short by default: what the variant was found to compute,
what the probes found that the check used ("found:" lines), what ran, the failures grouped by
root cause (``verify.engine.groups``) with one minimal counterexample per group and the first
group's reproducer, the skips counted by reason, and what to do next. ``verbose=True`` adds the
table of every property and dtype and every failure's counterexample and reproducer; the JSON
document and the report card always hold everything.
"""

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
    """What the variant computes: the probes' description when they identified the kernel, else
    the claims' (a claimed kernel is the claim's, the probes read only its conventions)."""
    if result.probe is not None and getattr(result.probe, "scope", "full") == "full":
        return describe_probe(result.probe)
    return describe_claims(result.variant)


def to_json(result) -> dict[str, Any]:
    """The check result as plain JSON values (``groups``: the failures by root cause;
    ``skips``: the skipped runs by reason)."""
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
        "findings": list(getattr(result, "findings", [])),
        "groups": [{**g.to_json(), "look_at": look_at(g.root.property_id)} for g in result.groups],
        "skips": [
            {"reason": why, "runs": len(rs), "properties": _ids(rs), "to_run": to_run(why)}
            for why, rs in result.skips
        ],
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


#: what to look at when a group's root fails (by root property)
LOOK_AT = {
    "accepts-inputs": "the variant raised on an input inside its claimed domain: (B, T, H, d) "
    "tensors are claimed with --layout BTHD, restrictions with --dv-equals-d or "
    "--self-attention-only",
    "determinism": "two calls on the same inputs differ: uninitialized memory, an atomic or "
    "unordered reduction, a random draw",
    "gradcheck": "the backward pass disagrees with finite differences of the forward: a custom "
    "autograd Function, a detached term, an in-place update",
    "causal-mismatch-rejected": "causal=True with T != S should raise a ValueError naming "
    "'causal', or the alignment be declared (--alignment)",
    "batch-independence": "batch elements mix: a reshape or transpose across the batch axis, a "
    "reduction over it",
    "head-independence": "heads mix: a reshape that interleaves heads, (B, T, H, d) read as "
    "(B, H, T, d) (--layout), a reduction over heads",
    "causality": "the causal mask: query t may see keys s <= t only (torch.ones(T, T).tril(), "
    "not tril(1)); or a statistic over all positions (a max, a norm) used before masking",
    "prefix-invariance": "outputs at t depend on the sequence length: the causal mask, padding, "
    "a statistic over the whole sequence",
    "causal-alignment": "the alignment of the causal mask for T != S (--alignment states it)",
    "masks": "masked keys must have no influence and a row with no visible key must be zeros "
    "(--empty-rows states another convention)",
    "oracle-agreement": "the output differs from the claimed kernel: compare o with the "
    "reference in the reproducer; state what the variant does: --scale X, --eps X (a constant "
    "in the denominator), --compute-dtype (computes narrower than its inputs), --precision "
    "MODEL (bf16/fp16 rounding), or another --kernel",
    "edge-cases": "zeros, one key, equal scores, large norms: overflow, 0/0, a missing "
    "max-subtraction; --eps X if the denominator adds a constant",
    "claimed-scale": "the scores are not scaled as claimed (the reason names the scale that "
    "fits): fix it or claim it with --scale X",
    "weights-vs-reference": "the normalized weights (read with v = identity) differ from the "
    "claimed kernel's: the mask, the scale, a constant in the denominator (--eps X)",
    "gradients-vs-reference": "dq, dk, dv differ from the exact gradients: a custom backward, a "
    "detached term",
    "dtype-agreement": "long sequences in the narrower dtype drift from the float64 result: "
    "accumulation in the input dtype (--precision input-accumulation:... states it), "
    "--compute-dtype",
    "rounding-bias": "a one-sided rounding (truncation) of the weights or the output",
}

#: how to run what a skip reason leaves out: (words of the reason, a command-line claim or
#: "field=..." of an AttentionVariant to declare)
TO_RUN = (
    ("kernel unknown", "--kernel softmax|taylor:N|linear:MAP"),
    ("mask support", "supports_mask=True"),
    ("no attn_mask", "supports_mask=True"),
    ("causal alignment", "--alignment top-left|bottom-right (causal T != S)"),
    ("no alternative forms", "forms=..."),
    ("no state API", "state_api=..."),
    ("no CUDA device", "--device cuda (on a machine with a GPU)"),
    (
        "bfloat16/float16",
        "--dtype bfloat16 or --dtype float16 (the probes name the precision "
        "model; --precision MODEL declares it)",
    ),
    ("does not claim float", "--dtype DTYPE"),
    ("declared projection", "projection=..."),
    ("denominator modes", "denominators=..."),
)
#: skip reasons of statements about other kinds of variants (nothing to claim)
_KERNEL_SPECIFIC = ("needs a claimed Taylor kernel", "applies to linear", "needs normalized "
                    "linear", "needs a kernel with a known finite")  # fmt: skip
#: how each need of a failure group is said
NEED_WORDS = {
    "causal": "causal=True",
    "mask": "an attn_mask",
    "batch": "B > 1",
    "heads": "H > 1",
    "cross": "T != S",
}


def look_at(property_id: str) -> str:
    """What to look at when ``property_id`` is a group's root ('' when nothing specific)."""
    return LOOK_AT.get(property_id, "")


def to_run(reason: str) -> str:
    """How to run what a skip reason leaves out ('' when the property does not apply to this
    kind of variant, e.g. a Taylor kernel's statement on softmax)."""
    if any(reason.startswith(k) for k in _KERNEL_SPECIFIC):
        return ""
    return next((hint for words, hint in TO_RUN if words in reason), "")


def _ids(rows) -> list[str]:
    return list(dict.fromkeys(r.property_id for r in rows))


def _one_line(text: str, n: int = 200) -> str:
    s = " ".join((text or "").split())
    return s if len(s) <= n else s[: n - 1] + "…"


def _indent(text: str, pad: str, limit: int | None = None) -> list[str]:
    lines = text.rstrip("\n").split("\n")
    out = [pad + line for line in lines[:limit]]
    if limit is not None and len(lines) > limit:
        out.append(f"{pad}… ({len(lines) - limit} more lines: --verbose, or the JSON)")
    return out


def shape_words(features: dict) -> str:
    """'B=1 H=1 T=2 S=2 d=1 d_v=1, causal' from a counterexample's features."""
    if not features:
        return "no attention shape"
    sizes = " ".join(f"{k}={features[k]}" for k in ("B", "H", "T", "S", "d", "d_v"))
    flags = [f for f in ("causal", "mask") if features.get(f)]
    return sizes + (", " + ", ".join(flags) if flags else ", non-causal")


def claims_line(result) -> str:
    """The claims the battery checked, in one line."""
    v = result.variant
    scale = v.scale if v.scale != "default" else "default (1/sqrt(d) for exp-type kernels)"
    parts = [
        f"kernel={v.kernel}",
        f"causal={v.causal}",
        f"layout={v.layout}",
        "normalized" if v.normalized else "unnormalized",
        f"scale={scale}",
    ]
    for name in ("eps", "compute_dtype", "precision", "causal_alignment"):
        if getattr(v, name, None):
            parts.append(f"{name}={getattr(v, name)}")
    if v.eps and v.eps_mode == "floor":
        parts.append("eps_mode=floor")
    for name in ("dv_equals_d", "self_attention_only"):
        if getattr(v, name, False):
            parts.append(name)
    if getattr(v, "head_dim_multiple", 1) > 1:
        parts.append(f"head_dim_multiple={v.head_dim_multiple}")
    return "checked claims: " + ", ".join(parts)


def _header(result) -> list[str]:
    out = [f"{result.name}: {describe(result)}", f"  {claims_line(result)}"]
    out += [f"  found: {f}" for f in getattr(result, "findings", [])]
    out += [f"  note: {n}" for n in result.notes]
    c = result.counts
    ids = _ids(result.results)
    ran = [i for i in ids if any(r.property_id == i and r.status != "skip" for r in result.results)]
    dtypes = ", ".join(dict.fromkeys(r.dtype for r in result.results)) or "no dtype"
    out.append(
        f"ran {len(ran)} of {len(ids)} properties ({dtypes}): {c['pass']} runs passed, "
        f"{c['fail']} failed, {c['skip']} skipped, {c['error']} internal errors"
    )
    return out


def _group_lines(result, *, verbose: bool) -> list[str]:
    groups = result.groups
    if not groups:
        return []
    n_runs = sum(len(g.members) for g in groups)
    n_props = sum(len(g.property_ids) for g in groups)
    out = [
        "",
        f"FAILED: {n_runs} runs of {n_props} properties, {len(groups)} root "
        f"cause{'s' if len(groups) != 1 else ''} (grouping: README, Reading the result)",
    ]
    for i, g in enumerate(groups, 1):
        root = g.root
        out.append(
            f"[{i}] {root.property_id} ({', '.join(g.dtypes)}): {_one_line(root.statement, 160)}"
        )
        others = g.property_ids[1:]
        if g.reason:
            if others:
                out.append(
                    f"    the same ({g.reason}) in {len(others)} more propert"
                    f"{'y' if len(others) == 1 else 'ies'}: {', '.join(others)}"
                )
        elif g.cause:
            cause = " and ".join(NEED_WORDS[n] for n in g.cause)
            out.append(f"    cause: fails only with {cause}")
            if others:
                out.append(
                    f"    explains {len(others)} more failing propert"
                    f"{'y' if len(others) == 1 else 'ies'} (minimal counterexamples with "
                    f"{cause}): {', '.join(others)}"
                )
        elif others:
            out.append(
                f"    explains {len(others)} more failing propert"
                f"{'y' if len(others) == 1 else 'ies'} (read from the same output): "
                f"{', '.join(others)}"
            )
        out.append(f"    why: {_one_line(root.reason)}")
        ex = g.example
        if ex.counterexample:
            out.append(
                f"    minimal counterexample ({ex.property_id}, {ex.dtype}): "
                f"{shape_words(ex.features)}"
            )
            out += _indent(ex.counterexample, "      ", None if verbose else 8)
        if hint := look_at(root.property_id):
            out.append(f"    look at: {hint}")
        if ex.snippet and (i == 1 or verbose):
            out.append(
                "    reproduce (Python; prints o, the reference and |o - reference| "
                "against the bound):"
            )
            out += _indent(ex.snippet, "      ")
        elif ex.snippet:
            out.append("    reproduce: --verbose prints its reproducer (or the JSON's snippet)")
    return out


def _skip_lines(result) -> list[str]:
    skips = result.skips
    if not skips:
        return []
    n = sum(len(rs) for _, rs in skips)
    never = {
        i for i in _ids(result.results)
        if all(r.status == "skip" for r in result.results if r.property_id == i)
    }  # fmt: skip
    out = [f"skipped {n} runs ({len(never)} properties never ran), by reason:"]
    out += [f"  {len(rs):4d}  {why}" for why, rs in skips]
    return out


def _next_lines(result, *, verbose: bool) -> list[str]:
    out = ["next:"]
    if result.groups:
        out.append(
            "  - fix [1] first (run its reproducer), then rerun: the failures it explains "
            "should go with it, or show what else is wrong"
        )
    hints = list(dict.fromkeys(h for why, _ in result.skips if (h := to_run(why))))
    options = [h for h in hints if h.startswith("--")]
    fields = [h for h in hints if not h.startswith("--")]
    if options:
        out.append(f"  - to run more, claim: {'; '.join(options)}")
    if fields:
        out.append(
            f"  - or declare an AttentionVariant with {', '.join(fields)} (README: Declaring "
            "a variant)"
        )
    if not verbose:
        out.append(
            "  - --verbose: every property and dtype, every failure; --json PATH, "
            "--report-dir DIR: everything"
        )
    return out


def summary_text(result, *, verbose: bool = False) -> str:
    """The terminal summary (module docstring); ``verbose`` adds every property run (a table)
    and every failure's counterexample and reproducer."""
    out = _header(result)
    if verbose:
        rows = [
            [r.property_id, r.dtype, r.status, r.examples, ratio(r),
             _one_line((r.reason or "").split("\n")[0], 90)]
            for r in result.results
        ]  # fmt: skip
        out += ["", md.table(["property", "dtype", "status", "examples", "max obs/bound",
                              "note"], rows)]  # fmt: skip
    out += _group_lines(result, verbose=verbose)
    if verbose:
        shown = {id(g.example) for g in result.groups if g.example.counterexample}
        rest = [r for r in result.failed if id(r) not in shown]
        if rest:
            out += ["", "the other failing runs (each group's example is above):"]
            for r in rest:
                out += ["", failure_text(r)]
    for r in result.errors:
        out += [
            "",
            f"INTERNAL ERROR of the checker (not the variant's) in {r.property_id} "
            f"({r.dtype}): {_one_line(r.reason, 400) if not verbose else r.reason.strip()}",
        ]
    out += ["", *_skip_lines(result), *_next_lines(result, verbose=verbose)]
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
