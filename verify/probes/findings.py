"""What the checker does with the probes' suggestions, and how it says so.

:func:`merge` fills a variant's undeclared fields with the probes' suggestions
(``verify.probes.suggested_claims``): a declared field -- given to the variant's constructor or
as a claim -- is never overwritten (``AttentionVariant.declared``), and eps with its mode is one
convention, taken whole or not at all. :func:`sentences` words each finding the check uses or
overrides ("computes in float32 for float64 inputs: judged against the float32 bound"), for the
summary and the report card.
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


def sentences(m: Merge) -> list[str]:
    """One sentence per finding the check used (``m.applied``), overrode with a declared claim
    (``m.kept``) or could not apply (``m.invalid``)."""
    a, v = m.applied, m.variant
    out = []
    if "compute_dtype" in a:
        c = a["compute_dtype"]
        out.append(
            f"computes in {c} for float64 inputs: judged against the {c} bound (every output of "
            f"a float64 call is a {c} number; --compute-dtype {c} states it)"
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
            "those are drawn"
        )
    if "causal_alignment" in a:
        out.append(
            f"aligns a causal T != S call {a['causal_alignment']}: checked as that alignment "
            f"(--alignment {a['causal_alignment']} states it)"
        )
    if "empty_rows" in a:
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
                f"every output of a float64 call is a {found} number, but compute_dtype = "
                f"{declared!r} is declared: judged against the "
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
