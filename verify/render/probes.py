"""The wording of the black-box probes: one sentence saying what a probed variant computes.

:func:`describe` reads a :class:`verify.probes.ProbeReport` (or its JSON dict);
:func:`probe_json` is the report's JSON with that sentence in its ``description`` field, as the
check results and report cards carry it; :func:`taylor_formula` writes kappa_N (D1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from verify.probes import ProbeReport, constant_scale
from verify.spec.kernel import taylor_order

_SUP = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
_SCALE_WORDS = {"1/sqrt(d)": "1/√d", "1/d": "1/d", "d^-1/4": "d^−1/4", "1": "1"}


def taylor_formula(order: int) -> str:
    """'1 + x + x²/2' for kappa_2 (D1)."""
    terms = []
    for n in range(order + 1):
        if n == 0:
            terms.append("1")
        elif n == 1:
            terms.append("x")
        else:
            terms.append(f"x{str(n).translate(_SUP)}/{math.factorial(n)}")
    return " + ".join(terms)


def _kernel_words(report: Mapping[str, Any]) -> str:
    kern = report.get("kernel", {})
    verdict = kern.get("verdict")
    name = kern.get("kernel", "")
    if verdict == "consistent":
        if name == "softmax":
            return "kernel attention, κ(x) = exp(x) (softmax)"
        n = taylor_order(name)
        if n is not None:
            return f"kernel attention, κ(x) = {taylor_formula(n)} (Taylor-{n} of exp)"
        if name == "linear:identity":
            return "linear attention with the identity feature map (κ(x) = x)"
        m = {"linear:elu1": "elu(x)+1", "linear:relu": "relu(x)"}[name]
        return (
            f"linear attention with an element-wise feature map {m} "
            "(weights do not depend on q·k only)"
        )
    if verdict == "none" and kern.get("resembles"):
        # evidence, not a name: no family fits within its bound
        return (
            "attention with none of the known kernels (positive weights, not a function of q·k "
            f"only; log-weights ≈ {float(kern.get('fitted_scale', math.nan)):.3g}·q·k with rms "
            f"deviation {float(kern.get('scatter', math.nan)):.3g}, exp-like of the maps tried)"
        )
    if verdict == "none":
        fit = report.get("fit", {}).get("coefficients")
        shape = ""
        if fit:
            shape = "; fitted κ(x)/κ(0) ≈ " + " + ".join(
                f"{float(a):.3g}·x^{j}" if j else f"{float(a):.3g}" for j, a in enumerate(fit[:4])
            )
        qk_only = _result(report.get("qk_only"))
        if qk_only:
            return (
                "kernel attention with none of the known kernels "
                f"(weights depend on q·k only{shape})"
            )
        if qk_only is False:
            return "attention with none of the known kernels (weights do not depend on q·k only)"
        return f"attention with none of the known kernels{shape}"
    if report.get("scope") == "conventions":
        return "attention (the kernel claimed, not probed)"
    return "attention (kernel not identified)"


def describe(report: ProbeReport | Mapping[str, Any]) -> str:
    """One sentence saying what the probed variant computes, e.g. "normalized kernel attention,
    κ(x) = 1 + x + x²/2 (Taylor-2 of exp), scale 1/√d, causal".

    Args:
        report: a :class:`verify.probes.ProbeReport` or its ``to_json()`` dict (as a check
            result carries it); both give the same sentence.
    """
    r = report.to_json() if isinstance(report, ProbeReport) else report
    lengths, kernel = r.get("lengths", {}), r.get("kernel", {})
    normalization = r.get("normalization", {})
    support = r.get("causal_support")
    if support is None:
        tested = lengths.get("tested", {})
        if tested and not lengths.get("passing"):
            first = min(tested, key=int)
            return f"unusable: every tested length fails (T = {first}: {tested[first]})"
        reasons = [x for x in r.get("calls", {}).values() if x != "ok"] or r.get("notes", [])
        return f"unusable: {reasons[0] if reasons else 'no usable call'}"
    norm = normalization.get("kind")
    prefix = {
        "sum": "normalized ",
        "sum+eps": "normalized ",
        "sum+floor": "normalized ",
        "none": "unnormalized ",
        "count": "count-normalized ",
        "other": "",
        "unsettled": "",
    }.get(norm, "")
    linear_in_v = _result(r.get("linear_in_v"))
    if linear_in_v is False:
        parts = ["attention whose output is not linear in v (e.g. a norm of the numerator, D7)"]
    else:
        parts = [prefix + _kernel_words(r)]
    if norm == "sum+eps" and "eps" in normalization:
        parts.append(f"denominator + {float(normalization['eps']):.3g}")
    if norm == "sum+floor" and "eps" in normalization:
        parts.append(f"denominator clamped at {float(normalization['eps']):.3g}, max(D, eps)")
    if norm == "other" and linear_in_v is not False:
        parts.append("rows normalized by something other than the kernel sum")
    if norm == "unsettled" and linear_in_v is not False:
        parts.append("rows that do not sum to 1 (the probes could not tell the normalization)")
    scale = kernel.get("scale")
    if kernel.get("verdict") == "consistent" and scale not in (None, "any"):
        if scale == "fitted":
            const = constant_scale(kernel)
            if const is not None:
                parts.append(f"scale {const:.6g} (fitted, the same at every d)")
            else:
                by_d = kernel["scale_by_d"].items()
                parts.append("scale " + ", ".join(f"{float(v):.4g} at d = {d}" for d, v in by_d))
        else:
            parts.append(f"scale {_SCALE_WORDS[scale]}")
    if kernel.get("precision") not in (None, r.get("dtype")):
        parts.append(f"{kernel['precision']} accuracy")
    parts.append({"both": "causal and non-causal", "yes": "causal", "no": "non-causal"}[support])
    if _result(r.get("causal", {}).get("flag_ignored")):
        parts.append("the causal flag is ignored")
    align = r.get("cross", {}).get("alignment")
    if align:
        parts.append(f"causal T ≠ S aligned {align}")
    rule = lengths.get("rule", "")
    if rule and rule != "any T":
        parts.append(rule)
    parts += positional_words(r.get("positional", {}))
    return ", ".join(parts)


def positional_words(pos: Mapping[str, Any]) -> list[str]:
    """Phrases for what the positional probes found (``verify.probes.positional``)."""
    out = []
    win = pos.get("window", {})
    if win.get("window") is not None and not win.get("plain"):
        side = "causal" if win.get("causal") else "non-causal"
        out.append(f"window {tuple(win['window'])} ({side} calls, FlashAttention convention)")
    elif "pattern" in win and win.get("window") is None:
        out.append("visibility that is no FlashAttention window (e.g. bucketed)")
    elif win.get("detail", "").startswith("no key has a positive weight"):
        out.append("visibility not read (no key has a positive weight at constant q and k)")
    bias = pos.get("bias", {})
    if bias.get("linear"):
        slopes = ", ".join(f"{m:.4g}" for m in bias["slopes"])
        ref = " (ALiBi's reference slopes)" if bias.get("reference_slopes") else ""
        out.append(f"a bias linear in |t - s| with slopes {slopes}{ref}")
    kv = pos.get("kv_heads", {})
    if kv.get("accepts") and kv.get("convention") == "repeat_interleave":
        out.append("grouped kv heads (query head h reads kv head h // (H / G))")
    elif kv.get("accepts"):
        heads = kv.get("kv_head_of_query_head")
        out.append(f"grouped kv heads read as {heads} ({kv.get('convention')}, not h // (H / G))")
    cap = pos.get("cap", {})
    if cap.get("kind") == "softcap C tanh(s / C)":
        out.append(f"scores softcapped at C = {cap['C']:.6g}")
    elif cap.get("kind") == "saturating, not C tanh(s / C)":
        out.append(f"weights saturate in the score ({cap['kind']})")
    return out


def probe_json(report: ProbeReport) -> dict[str, Any]:
    """``report.to_json()`` with ``description`` set to :func:`describe` (key order unchanged)."""
    data = report.to_json()
    data["description"] = describe(data)
    data["identification"] = identification(data)
    return data


def identification(report: Mapping[str, Any]) -> str:
    """The measured fit behind the kernel verdict: observed/bound of the match (or, with no
    match, of the three closest candidates) against the D10 bound of the weights."""
    kern = report.get("kernel", {})
    closest = ", ".join(
        f"{c['kernel']} ({c['scale']}) {float(c['ratio']):.3g}" for c in kern.get("closest", [])
    )
    if kern.get("verdict") == "consistent":
        return (
            f"{kern.get('kernel')} (scale {kern.get('scale')}): weights within "
            f"{float(kern.get('max_ratio', math.nan)):.3g} x the {kern.get('precision')} D10 "
            f"bound at every d tried; closest at d = 4 (observed/bound): {closest}"
        )
    if kern.get("verdict") == "none":
        return f"no family within its bound; closest at d = 4 (observed/bound): {closest}"
    return f"not run: {kern.get('detail', '')}"


def _result(check: Any) -> bool | None:
    """The ``result`` of a :class:`verify.probes.Check` or of its JSON dict (None when absent)."""
    if check is None:
        return None
    return check.get("result") if isinstance(check, Mapping) else check.result
