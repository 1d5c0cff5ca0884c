"""What the checker does with the probes' suggestions, and how it says so.

:func:`merge` fills a variant's undeclared fields with the probes' suggestions
(``verify.probes.suggested_claims``): a declared field -- given to the variant's constructor or
as a claim -- is never overwritten (``AttentionVariant.declared``), and eps with its mode is one
convention, taken whole or not at all. :func:`sentences` words each finding the check uses or
overrides ("computes in float32 for float64 inputs: judged against the float32 bound"), for the
summary and the report card. :func:`empty_rows_by_dtype` reads the empty-row convention of each
checked dtype (``verify.probes.conventions.probe_empty_rows``) and says where it differs by dtype
or between the rows a causal call and an ``attn_mask`` empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Merge:
    """The variant after the merge, the suggestions applied, and the findings a declared claim
    overrode ({field: (the value checked, the value found)}: a declared field, or the other
    half of a declared eps convention)."""

    variant: Any
    applied: dict[str, Any] = field(default_factory=dict)
    kept: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    #: suggestions the variant's validation rejected: {field: "value (reason)"}
    invalid: dict[str, str] = field(default_factory=dict)


def merge(variant, suggested: dict[str, Any]) -> Merge:
    """Apply ``suggested`` to ``variant``'s undeclared fields (module docstring).

    Returns:
        :class:`Merge`; a suggestion the variant's validation rejects together with its declared
        claims is left out with the reason (``invalid``), never raised.
    """
    declared = variant.declared
    out = Merge(variant)
    wanted: dict[str, Any] = {}
    for k, v in suggested.items():
        if v is None or v == getattr(variant, k, None):
            continue
        if k in declared:
            out.kept[k] = (getattr(variant, k), v)
        else:
            wanted[k] = v
    if "eps_mode" in suggested:  # one convention: eps and its mode together
        pair = {"eps": suggested.get("eps", variant.eps), "eps_mode": suggested["eps_mode"]}
        clash = [k for k in pair if k in declared and getattr(variant, k) != pair[k]]
        if clash:
            for k in pair:
                wanted.pop(k, None)
                if k not in declared and getattr(variant, k) != pair[k]:
                    out.kept.setdefault(k, (getattr(variant, k), pair[k]))
    for k in sorted(wanted, key=lambda k: k in ("eps", "eps_mode")):  # the pair last
        group = ("eps", "eps_mode") if k in ("eps", "eps_mode") else (k,)
        if k in out.applied or any(g in out.invalid for g in group):
            continue
        part = {g: wanted[g] for g in group if g in wanted}
        try:
            out.variant = out.variant.with_found(**part)
            out.applied.update(part)
        except (ValueError, TypeError) as exc:
            out.invalid.update({g: f"{part[g]!r} ({exc})" for g in part})
    return out


def sentences(m: Merge, said: tuple[str, ...] = ()) -> list[str]:
    """One sentence per finding the check used (``m.applied``), overrode with a declared claim
    (``m.kept``) or could not apply (``m.invalid``); none for the fields in ``said`` (said
    elsewhere, e.g. by :func:`empty_rows_by_dtype`)."""
    a, v = {k: x for k, x in m.applied.items() if k not in said}, m.variant
    out = []
    if "compute_dtype" in a:
        c = a["compute_dtype"]
        out.append(
            f"computes in {c} for float64 inputs: judged against the {c} bound (every output, or "
            f"every weight read with V = I, of a float64 call is a {c} number; --compute-dtype "
            f"{c} states it)"
        )
    if a.get("dv_equals_d"):
        out.append(
            "rejects a value dimension other than the head dimension: the restriction d_v = d "
            "was found, and only d_v = d is drawn (--dv-equals-d states it)"
        )
    if a.get("self_attention_only"):
        out.append(
            "rejects T != S: self-attention only was found, and only T = S is drawn "
            "(--self-attention-only states it)"
        )
    if "head_dim_multiple" in a:
        m_ = a["head_dim_multiple"]
        out.append(
            f"accepts only head dimensions that are multiples of {m_}: only those are drawn "
            f"(--head-dim-multiple {m_} states it)"
        )
    if "length_multiple" in a:
        out.append(
            f"accepts only sequence lengths that are multiples of {a['length_multiple']}: only "
            f"those are drawn (--length-multiple {a['length_multiple']} states it)"
        )
    if "min_length" in a:
        out.append(
            f"accepts only sequence lengths of at least {a['min_length']}: only those are drawn "
            f"(--min-length {a['min_length']} states it)"
        )
    if "causal_alignment" in a:
        out.append(
            f"aligns a causal T != S call {a['causal_alignment']}: checked as that alignment "
            f"(--alignment {a['causal_alignment']} states it)"
        )
    if a.get("empty_rows") == "other":
        out.append(
            "returns no single convention (zeros, NaN or the mean of the values) on rows with "
            "no visible key: what they return is not judged (--empty-rows states a convention)"
        )
    elif "empty_rows" in a:
        out.append(
            f"returns {a['empty_rows']} on a row with no visible key: judged against that "
            f"convention (--empty-rows {a['empty_rows']} states it)"
        )
    if a.get("eps_mode") == "floor" or ("eps" in a and v.eps_mode == "floor"):
        out.append(
            f"clamps its denominator at eps = {v.eps:g}, N/max(D, eps) (the floor convention): "
            f"judged with it (--eps {v.eps:g} --eps-mode floor states it)"
        )
    elif a.get("eps"):
        out.append(
            f"adds eps = {v.eps:g} to its denominator, N/(D + eps): judged with it "
            f"(--eps {v.eps:g} states it)"
        )
    for k, (declared, found) in m.kept.items():
        if k == "compute_dtype":
            out.append(
                f"every output (or weight) of a float64 call is a {found} number, but "
                f"compute_dtype = {declared!r} is declared: judged against the "
                + (f"declared {declared} bound" if declared else "input dtype's bound")
            )
        elif k in v.declared:
            out.append(f"declared {k} = {declared!r} is checked; the probes found {found!r}")
        else:  # the other half of a declared eps convention
            out.append(
                f"{k} = {declared!r} is checked with the declared eps convention; the probes "
                f"found {found!r}"
            )
    for k, why in m.invalid.items():
        out.append(f"the probes found {k} = {why}: not applied with the declared claims")
    return out


#: how each cause of an empty row is said (``verify.probes.conventions.probe_empty_rows``)
EMPTY_CAUSES = {
    "causal": "rows a causal T > S call empties (bottom-right)",
    "mask": "rows attn_mask empties",
}


def empty_rows_by_dtype(variant, report, dtypes) -> tuple[dict[str, str | None] | None, list]:
    """The empty-row convention of each dtype in ``dtypes`` as the probes read it
    (``report.cross["empty_rows_by_dtype"]``), and the sentences saying where it differs by
    dtype or by cause.

    Returns:
        ``({dtype: convention or None}, sentences)``; ``(None, [])`` when the variant declares
        ``empty_rows`` (its declaration is judged in every dtype) or nothing was read.
    """
    seen = (getattr(report, "cross", None) or {}).get("empty_rows_by_dtype") or {}
    if "empty_rows" in variant.declared or not any(dt in seen for dt in dtypes):
        return None, []
    rows = {dt: (seen.get(dt) or {}).get("convention") for dt in dtypes}
    out = []
    for cause, words in EMPTY_CAUSES.items():
        by = {dt: (seen.get(dt) or {}).get(cause) for dt in dtypes}
        if len({k for k in by.values() if k is not None}) > 1:
            out.append(f"{words} return {_by_dtype(by)}: the convention differs by dtype")
    mixed = {
        dt: f"{(seen.get(dt) or {}).get('causal')} on {EMPTY_CAUSES['causal']} and "
        f"{(seen.get(dt) or {}).get('mask')} on {EMPTY_CAUSES['mask']}"
        for dt in dtypes
        if rows[dt] == "other" and None not in ((seen.get(dt) or {}).get(c) for c in EMPTY_CAUSES)
    }
    if mixed:
        out.append(
            f"returns {_by_dtype(mixed)}: no single convention, so what such rows return is not "
            "judged (--empty-rows states one)"
        )
    kinds = {k for k in rows.values() if k is not None}
    if len(kinds) > 1 or (kinds and None in rows.values()):
        out.append(
            f"the empty-row convention is {_by_dtype(rows)}: each dtype's runs are judged "
            "against their own (--empty-rows states one for every dtype)"
        )
    return rows, out


def _by_dtype(values: dict[str, Any]) -> str:
    """'nan in float64, uniform in float32 and bfloat16' (dtypes with the same value joined)."""
    groups: dict[Any, list[str]] = {}
    for dt, value in values.items():
        groups.setdefault(value, []).append(dt)
    return ", ".join(
        f"{'not read' if value is None else value} in {' and '.join(dts)}"
        for value, dts in groups.items()
    )
