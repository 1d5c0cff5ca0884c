"""What a check says: the one-sentence description, the JSON document (schema
``attn-theory/check/v1``) and the terminal summary of a :class:`verify.engine.check.CheckResult`.

The summary (:func:`summary_text`) is short by default: what the variant was found to compute
and every claim checked (:func:`claims_line`), what the probes found that the check used
("found:" lines), what ran (inconclusive runs counted apart), the failures grouped by root cause
(``verify.engine.groups``) with one minimal counterexample per group and the first group's
reproducer, the runs the checker's limits stopped and what to raise, the skips counted by reason,
and what to do next; reasons are wrapped, never cut. ``verbose=True`` adds the
table of every property and dtype and every failure's counterexample and reproducer; the JSON
document and the report card always hold everything.
"""

from __future__ import annotations

import re
from typing import Any

from verify.render import markdown as md
from verify.render.look_at_text import LOOK_AT
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
        text = describe_probe(result.probe)
    else:
        text = describe_claims(result.variant)
    return text + _flex_words(result.variant)


def _flex_words(v) -> str:
    """The declared FlexAttention functions: the probes call with the causal flag, which a
    mask_mod may ignore, so the visibility a card states is the mask_mod's."""
    words = []
    for attr, what, prop in (
        ("score_mod", "scores changed by its score_mod", "flex-score-mod"),
        ("mask_mod", "visibility set by its mask_mod", "flex-block-mask"),
    ):
        fn = getattr(v, attr, None)
        if fn is not None:
            name = getattr(fn, "__name__", type(fn).__name__)
            words.append(f"{what} `{name}` (checked token by token: {prop})")
    return "".join(f", {w}" for w in words)


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
        "empty_rows_by_dtype": dict(getattr(result, "empty_rows_by_dtype", {}) or {}),
        "warnings": dict(getattr(result, "warnings", {}) or {}),
        "groups": [
            {**g.to_json(), "look_at": group_look_at(g, result.variant, ran_ids(result))}
            for g in result.groups
        ],
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


#: float32 units of relative error up to which a float64 run's error reads as float32 rounding
FLOAT32_LEVEL = 4096
#: ... and from which: an error far below one float32 rounding (a 4.5e-10 relative error of a
#: wrong softcap constant) is no float32 step
FLOAT32_FLOOR = 1 / 16
#: the rounding-bias failure of one head beyond its max-error bound: a defect of the arithmetic
BIAS_BEYOND_BOUND = (
    "a head's output exceeds its max-error bound on 128-key rows, beyond any rounding: a "
    "defect of the computation past a few dozen keys (the online softmax's rescaling, the "
    "masking of the last block's padding)"
)


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


#: properties whose failure may be a backward that raises (``look_at``)
GRADIENT_ROOTS = frozenset(
    {"gradcheck", "gradients-vs-reference", "single-key-gradients", "gradient-identities",
     "masked-key-gradients", "empty-row-gradients", "key-padding", "packed-isolation"}
)  # fmt: skip


def look_at(
    property_id: str,
    variant: Any = None,
    reasons: tuple[str, ...] = (),
    ran: frozenset[str] | None = None,
) -> str:
    """What to look at when ``property_id`` is a group's root ('' when nothing specific): the
    fix of the defects the property decides, with the claimed constants a wrong output may come
    from (``variant``'s claims), and for a low-precision failure what its reasons (the root's
    failure messages) measured: a ``--precision`` claim is named only where a failure found
    the error within that model's bound (``verify.properties.support.diagnose``)."""
    from verify.properties.support.diagnose import STEP_FIT_SAYS, STEP_FITTED, SUGGESTS

    text = LOOK_AT.get(property_id, "")
    said = " ".join(reasons)
    marker = SUGGESTS.split("{model}")
    if property_id in ("dtype-agreement", "oracle-agreement") and marker[0] in said:
        model = said.split(marker[0], 1)[1].split(marker[1], 1)[0].strip()
        return (
            "the error is within the bound of the precision model "
            f"{model} (the reason measures every model, and the same inputs in float32 pass): "
            f"--precision {model} states it, if the kernel computes that way; else " + text
        )
    if "backward" in said and "raised" in said and property_id in GRADIENT_ROOTS:
        return (  # a backward that raises is seen by whoever trains with it; none is declared
            "the backward pass raised: if the code has no backward by design (inference only, "
            "eager FlexAttention on CPU), --not-differentiable states it and the gradient "
            "checks skip saying so; else make the backward run" + (f"; {text}" if text else "")
        )
    if property_id == "rounding-bias" and "exceeds its max-error bound" in said:
        return BIAS_BEYOND_BOUND
    if property_id == "oracle-agreement" and variant is not None:
        return f"{text}: {'; '.join(_constants(variant, narrower(said), ran, said))}"
    if property_id in STEP_FITTED and STEP_FIT_SAYS in said:  # measured on the counterexample
        fit = said.split(STEP_FIT_SAYS, 1)[1]  # the reason's last sentence (``base``)
        return f"{STEP_FIT_SAYS}{fit}; else {text}"
    if (fit := _fitted_cap(said)) and property_id != "causality":
        return f"{fit}; else {text}"
    if property_id == "causality" and getattr(variant, "softcap", None) is not None:
        return (  # a claimed softcap: the cap applied after the mask fill comes first
            f"the softcap (C = {variant.softcap:g}) applied after the mask: C tanh(-inf / C) = "
            "-C gives masked keys weight: cap the scores before masking; else " + text
        )
    return text


def narrower(reason: str) -> str:
    """The sentence for an output of a float64 run off by about a float32 rounding (the
    reason's error relative to |o| between :data:`FLOAT32_FLOOR` and :data:`FLOAT32_LEVEL`
    float32 units): a step computed in float32; '' otherwise."""
    m = re.search(r"([0-9.e+-]+) u of float64 relative to \|o\|", reason)
    if not m:
        return ""
    rel = float(m.group(1)) * 2.0**-53
    if not FLOAT32_FLOOR * 2.0**-24 <= rel <= FLOAT32_LEVEL * 2.0**-24:
        return ""
    return (
        f"a step computed in float32 (the error, {rel:.2g} relative to |o|, is a float32 "
        "rounding's size): compute it in the input's dtype, or state --compute-dtype float32 "
        "if every step is float32"
    )


def _scale_source(variant, ran: frozenset[str] | None = None) -> str:
    """Where the scale that fits is named: claimed-scale's reason when that check ran (``ran``:
    the ids that ran; None: when it applies to ``variant`` in float64), else that it did not
    and the claim that states another scale."""
    from verify.properties import get
    from verify.properties.support.base import RunContext

    if ran is not None:
        if "claimed-scale" in ran:
            return "the reason of claimed-scale names the one that fits"
        return "claimed-scale did not run in this check; --scale VALUE states another"

    try:
        why = get("claimed-scale").applies(variant, RunContext(dtype="float64"))
    except Exception as exc:  # noqa: BLE001 - a hint never fails the summary
        why = f"{type(exc).__name__}: {exc}"
    if why is None:
        return "the reason of claimed-scale names the one that fits"
    return f"claimed-scale does not run here ({why}); --scale VALUE states another"


def _fitted_cap(said: str) -> str:
    """The sentence for a failure whose reason found the softcap its outputs fit ('' if
    none): the constant to fix or to claim."""
    from verify.properties.support.base import SOFTCAP_FIT_SAYS

    m = re.search(re.escape(SOFTCAP_FIT_SAYS) + r" (no softcap|a softcap C = ([0-9.e+-]+))", said)
    if not m:
        return ""
    if m.group(2) is None:
        return "the outputs fit no softcap at all: apply C tanh(s / C) to the scaled scores"
    c = m.group(2)
    return (f"the softcap constant: the outputs fit C = {c}: fix the constant, or claim "
            f"--softcap {c} if that is the one meant")  # fmt: skip


def _constants(
    variant, narrow: str = "", ran: frozenset[str] | None = None, said: str = ""
) -> list[str]:
    """The constants and steps a wrong output of ``variant`` may come from, its claims named
    (``narrow``: the sentence of :func:`narrower` first, when it applies)."""
    scale = "1/sqrt(d)" if variant.scale == "default" else str(variant.scale)
    out = [narrow] if narrow and not _fitted_cap(said) else []
    out.append(f"the score scale (claimed {scale}; {_scale_source(variant, ran)})")
    if getattr(variant, "softcap", None) is not None:
        out.append(f"the softcap C tanh(s / C) with C = {variant.softcap:g} on the scaled "
                   "scores, the exponent's scale after the cap")  # fmt: skip
        if fit := _fitted_cap(said):  # measured on the counterexample: it comes first
            out.insert(0, fit)
    if getattr(variant, "alibi_slopes", None) is not None:
        out.append("the ALiBi bias -m_h |t' - s| (its sign, the slopes' head order, m_h not "
                   "divided or multiplied by the scale)")  # fmt: skip
    if variant.kernel_family == "sigmoid" and variant.sigmoid_bias is not None:
        out.append(f"the sigmoid bias b = {variant.sigmoid_bias:g} (its sign)")
    if getattr(variant, "qk_norm", False):
        out.append("the QK-norm: both q and k L2-normalized")
    if variant.kernel_family != "softmax":
        out.append("the feature map and the normalizer (N / D, phi(q) . z)")
    if variant.eps:
        out.append(f"eps = {variant.eps:g} ({variant.eps_mode} mode)")
    out.append(
        "an online softmax's rescaling across key blocks, the padding keys of a partial last "
        "block (masked), a split's log-sum-exp combination (base e)"
    )
    out.append("fix it, or state the constant the variant is meant to use (--scale X, "
               "--softcap C, --eps X)")  # fmt: skip
    return out


#: what to look at when the check stopped at its tiny call (``verify.engine.preflight``), by
#: the group's reason
PRECALL_LOOK_AT = {
    "hung on a 2-token call": "the forward never returned on B = H = 1, T = S = 2 inputs: a "
    "loop that does not end (a block index that never advances, a while on a condition the "
    "inputs never meet), a wait on a lock, a queue or a device; call it on two tokens yourself",
    "crashed on a 2-token call": "the process died inside the forward on two tokens: a "
    "segmentation fault or an abort in compiled code (a custom kernel reading out of bounds, a "
    "shape it does not support), os._exit or sys.exit in the variant",
}


def ran_ids(result) -> frozenset[str]:
    """The ids of the properties that ran (were not skipped) in ``result``."""
    return frozenset(r.property_id for r in result.results if r.status != "skip")


def group_look_at(group, variant: Any = None, ran: frozenset[str] | None = None) -> str:
    """:func:`look_at` of a failure group's root, with the reasons of its root property's runs
    (:data:`PRECALL_LOOK_AT` for a check stopped at its tiny call); ``ran``: the ids of the
    properties that ran (a hint names no check that did not)."""
    if hint := PRECALL_LOOK_AT.get(getattr(group, "reason", "") or ""):
        return hint
    root = group.root.property_id
    reasons = tuple(r.reason or "" for r in group.members if r.property_id == root)
    return look_at(root, variant, reasons, ran)


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


#: properties whose call is causal=True although their example holds the causal visibility as
#: a mask (``causal=False``: the reference's form); their reproducer sets causal = True
CAUSAL_CALLS = frozenset({"causal-alignment"})


def shape_words(features: dict, property_id: str | None = None) -> str:
    """'B=1 H=1 T=2 S=2 d=1 d_v=1, causal' from a counterexample's features (the call's causal
    flag: True for :data:`CAUSAL_CALLS`, whatever the example holds)."""
    if not features:
        return "no attention shape"
    sizes = " ".join(f"{k}={features[k]}" for k in ("B", "H", "T", "S", "d", "d_v"))
    if property_id in CAUSAL_CALLS:
        features = {**features, "causal": True}
    flags = [f for f in ("causal", "mask") if features.get(f)]
    return sizes + (", " + ", ".join(flags) if flags else ", non-causal")


#: the claims every summary names, whatever their value (the others when not the default)
ALWAYS_SAID = ("kernel", "causal", "layout", "normalized", "scale")


def claims_line(result) -> str:
    """Every claim the battery checked, in one line: :data:`ALWAYS_SAID`, the dtypes that ran,
    then each claim of
    ``verify.spec.variant.claims_json`` whose value is not a bare variant's default, and the
    empty-row convention of each dtype when it differs by dtype."""
    from verify.spec.variant import AttentionVariant, claims_json

    v = result.variant
    now = claims_json(v)
    default = claims_json(AttentionVariant(name="-", forward=_no_forward))
    parts = [_claim_word(k, now[k]) for k in ALWAYS_SAID if k in now]
    # the dtypes the battery ran (asking for one dtype claims it beside the variant's own, but
    # only the asked one is checked)
    ran = list(dict.fromkeys(r.dtype for r in getattr(result, "results", ()) or ()))
    if ran:
        parts.append(_claim_word("dtypes", ran))
    parts += [
        _claim_word(k, value)
        for k, value in now.items()
        if k not in ALWAYS_SAID and value != default.get(k) and not (ran and k == "dtypes")
    ]
    by_dtype = getattr(result, "empty_rows_by_dtype", None) or {}
    if by_dtype:
        parts.append(
            "empty_rows per dtype: "
            + ", ".join(f"{dt} {'not read' if x is None else x}" for dt, x in by_dtype.items())
        )
    return "checked claims: " + ", ".join(p for p in parts if p)


def _no_forward(q, k, v, *, causal):  # the bare variant whose defaults claims_line leaves out
    return q


def _claim_word(name: str, value: Any) -> str:
    """How one claim is said: a flag by its name, a list comma-joined, ``key=value`` else."""
    if name == "normalized":
        return "normalized" if value else "unnormalized"
    if name == "scale" and value == "default":
        return "scale=default (1/sqrt(d) for exp-type kernels)"
    if value is True:
        return name
    if value is False or value is None:
        return f"{name}={value}"
    if isinstance(value, list):
        return f"{name}={','.join(str(x) for x in value)}" if value else ""
    if isinstance(value, dict):
        return f"{name}=" + "; ".join(
            f"{k}: {x.get('factor')}x ({x.get('reason')})" if isinstance(x, dict) else f"{k}: {x}"
            for k, x in value.items()
        )
    return f"{name}={value}"


def _example_label(r) -> str:
    """'minimal counterexample', or 'counterexample (shrinking stopped early)' when the run's
    shrinking ran out of its budget (the reason says so): smaller ones may exist."""
    if "[shrinking stopped" in (r.reason or ""):
        return "counterexample (shrinking stopped early)"
    return "minimal counterexample"


def _n(count: int, one: str, many: str | None = None) -> str:
    """'1 run', '2 runs' ('1 property', '2 properties' with ``many``)."""
    return f"{count} {one if count == 1 else (many or one + 's')}"


def _header(result) -> list[str]:
    out = [f"{result.name}: {describe(result)}", *_wrap(claims_line(result), "  ")]
    out += [f"  found: {f}" for f in getattr(result, "findings", [])]
    out += [f"  note: {n}" for n in result.notes]
    if caught := getattr(result, "warnings", None):
        out.append(
            f"  note: {sum(caught.values())} warnings ({len(caught)} kinds, of libraries or of "
            "the checker's own arithmetic on extreme inputs) were "
            "captured during the check, none printed: --verbose or the JSON's warnings list them"
        )
    c = result.counts
    ids = _ids(result.results)
    ran = [i for i in ids if any(r.property_id == i and r.status != "skip" for r in result.results)]
    dtypes = ", ".join(dict.fromkeys(r.dtype for r in result.results)) or "no dtype"
    out.append(
        f"ran {len(ran)} of {_n(len(ids), 'property', 'properties')} ({dtypes}): "
        f"{_n(c['pass'], 'run')} passed, "
        f"{c['fail']} failed, {c['skip']} skipped, {c.get('inconclusive', 0)} inconclusive, "
        f"{c['error']} internal errors"
    )
    out += _not_checked_lines(result.results)
    return out


#: the comparisons with a reference whose absence the summary states plainly (what they cover)
REFERENCE_CHECKS = (
    ("oracle-agreement", "the outputs against a reference"),
    ("gradients-vs-reference", "the gradients against a reference"),
)


def _not_checked_lines(results) -> list[str]:
    """'NOT CHECKED: the outputs against a reference (oracle-agreement skipped: ...)' for each
    comparison of :data:`REFERENCE_CHECKS` that was in the battery and ran in no dtype: a pass
    of the rest says nothing of the values (a skipped check is not a pass)."""
    out = []
    for pid, what in REFERENCE_CHECKS:
        rows = [r for r in results if r.property_id == pid]
        if rows and all(r.status == "skip" for r in rows):
            why = _one_line((rows[0].reason or "").split("\n")[0], 120)
            out += _wrap(f"NOT CHECKED: {what} ({pid} ran in no dtype: {why})", "  ")
    return out


def _wrap(text: str, pad: str, rest: str | None = None, width: int = 100) -> list[str]:
    """``text`` on lines of at most ``width`` characters (a longer word stays whole), the first
    indented by ``pad`` and the others by ``rest`` (default ``pad`` and two spaces)."""
    import textwrap

    return textwrap.wrap(
        " ".join((text or "").split()),
        width=width,
        initial_indent=pad,
        subsequent_indent=pad + "  " if rest is None else rest,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [pad.rstrip()]


def time_limit_of(reason: str) -> float | None:
    """The seconds per property an inconclusive run's reason names, or None."""
    m = re.search(r"\(([0-9.]+) s per property", reason or "")
    return float(m.group(1)) if m else None


def _inconclusive_lines(result) -> list[str]:
    """The runs the checker's limits stopped, by property, with what to raise."""
    runs = [r for r in result.results if r.status == "inconclusive"]
    if not runs:
        return []
    ids = _ids(runs)
    out = [
        "",
        f"INCONCLUSIVE: {len(runs)} run{'s' if len(runs) != 1 else ''} of {len(ids)} "
        f"propert{'y' if len(ids) == 1 else 'ies'} stopped by the checker's limits before a "
        "verdict (not the variant's failure, counted apart from passes and failures):",
    ]
    for pid in ids:
        mine = [r for r in runs if r.property_id == pid]
        dts = ", ".join(r.dtype for r in mine)
        out += _wrap(f"{pid} ({dts}): {mine[0].reason}", "  ", "      ")
    out += _wrap(f"raise: {raise_hint(runs)}", "  ", "      ")
    return out


def raise_hint(runs) -> str:
    """What to raise so that inconclusive ``runs`` finish: --timeout (doubled), or fewer
    examples (--max-examples), or a less loaded machine."""
    limits = [t for r in runs if (t := time_limit_of(r.reason)) is not None]
    timeout = f"--timeout {2 * max(limits):g}" if limits else "--timeout (seconds per property)"
    return (
        f"{timeout}, or lower --max-examples (examples per property), or run where fewer jobs "
        "share the CPUs"
    )


def _group_lines(result, *, verbose: bool) -> list[str]:
    groups = result.groups
    if not groups:
        return []
    n_runs = sum(len(g.members) for g in groups)
    n_props = sum(len(g.property_ids) for g in groups)
    out = [
        "",
        f"FAILED: {_n(n_runs, 'run')} of {_n(n_props, 'property', 'properties')}, "
        f"{_n(len(groups), 'root cause')} (grouping: README, Reading the result)",
    ]
    for i, g in enumerate(groups, 1):
        root = g.root
        out += _wrap(f"[{i}] {root.property_id} ({', '.join(g.dtypes)}): {root.statement}", "")
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
        out += _wrap(f"why: {root.reason}", "    ", "      ")
        ex = g.example
        if ex.counterexample:
            out.append(
                f"    {_example_label(ex)} ({ex.property_id}, {ex.dtype}): "
                f"{shape_words(ex.features, ex.property_id)}"
            )
            out += _indent(ex.counterexample, "      ", None if verbose else 8)
        if hint := group_look_at(g, result.variant, ran_ids(result)):
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
    out = [f"skipped {_n(n, 'run')} ({_n(len(never), 'property', 'properties')} never ran), "
           "by reason:"]  # fmt: skip
    out += [f"  {len(rs):4d}  {why}" for why, rs in skips]
    return out


def _next_lines(result, *, verbose: bool) -> list[str]:
    out = ["next:"]
    if result.groups:
        out.append(
            "  - fix [1] first (run its reproducer), then rerun: the failures it explains "
            "should go with it, or show what else is wrong"
        )
    if stopped := [r for r in result.results if r.status == "inconclusive"]:
        out.append(f"  - to finish the inconclusive runs, raise {raise_hint(stopped)}")
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
    out += _inconclusive_lines(result)
    for r in result.errors:
        head = f"INTERNAL ERROR of the checker (not the variant's) in {r.property_id} ({r.dtype}):"
        if verbose:
            out += ["", f"{head} {r.reason.strip()}"]
        else:  # the message, wrapped; its traceback is --verbose's and the JSON's
            out += ["", *_wrap(f"{head} {r.reason.strip().split(chr(10))[0]}", "", "    ")]
    if verbose and (caught := getattr(result, "warnings", None)):
        out += ["", "warnings captured during the check (count: warning):"]
        out += [f"  {n:4d}: {w}" for w, n in sorted(caught.items(), key=lambda kv: -kv[1])]
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
