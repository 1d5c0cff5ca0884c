"""Failures grouped by root cause: one group per cause, one minimal counterexample per group.

The rule (README, "Reading the result"):

0. Failures without a counterexample (the worker crashed, the watchdog stopped a hung run, the
   variant could not be built) are grouped by the first clause of their reason.
1. Failing runs are taken in *dependency order* (:data:`ORDER`): the properties that explain
   nothing but themselves (:data:`ISOLATED`); the structure every output relies on (batch and
   head independence, the causal mask, the mask); the forward pass against the exact result;
   then everything read from the forward pass (weights, normalization, scale, peaks, gradients
   against the reference, long sequences and other dtypes, statistics) in catalogue order.
2. What a failure *needs* is read from its minimal counterexample (``PropertyResult.features``):
   ``causal`` (causal=True), ``mask`` (an attn_mask), ``batch`` (B > 1), ``heads`` (H > 1),
   ``cross`` (T != S). Shrinking removes what a failure does not need (causal=True becomes
   False, B and H become 1, T and S shrink; ``verify.strategies.sizes``), so what is left is
   what it needs.
3. A structural property's *cause* is what it tests (:data:`STRUCTURAL`: causality and
   prefix-invariance ``causal``, batch-independence ``batch``, ...); any other property's cause
   is what its own counterexample needs.
4. A failure joins the group whose root is its own property (in another dtype); else, unless
   it or the root is isolated, the first group whose cause is contained in what the failure
   needs; else it opens a group of its own, as its root.

So a causal mask shifted by one position (``tril(1)``) fails causality (cause: ``causal``) and,
with causal counterexamples, oracle-agreement, the weights, gradients...: one group. A wrong
scale fails oracle-agreement on non-causal inputs too: a group of its own beside the mask's. A
group is a hypothesis to test: fix its root, rerun, and the failures it explained go with it
(or show what else is wrong).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: failures that explain no other property's: an input the variant rejects (the other
#: properties leave such inputs out), nondeterminism, the variant's backward against its own
#: forward (finite differences), the API's rejection of causal T != S
ISOLATED = ("accepts-inputs", "determinism", "gradcheck", "causal-mismatch-rejected")
#: the structural properties and the need each one tests (its cause when it fails)
STRUCTURAL = {
    "batch-independence": ("batch",),
    "head-independence": ("heads",),
    "causality": ("causal",),
    "prefix-invariance": ("causal",),
    "causal-alignment": ("causal", "cross"),
    "masks": ("mask",),
    "masked-key-gradients": ("mask",),
    "empty-row-gradients": ("mask",),
}
#: the head of the dependency order; every other property follows in catalogue order
ORDER = (
    *ISOLATED,
    "batch-independence",
    "head-independence",
    "causality",
    "prefix-invariance",
    "causal-alignment",
    "masks",
    "oracle-agreement",
    "edge-cases",
    "forms-agree",
    "state-step",
    "state-split-resume",
    "kernel-identity",
)
#: the needs, in the order they are named
NEEDS = ("causal", "mask", "batch", "heads", "cross")


def needs(features: dict[str, Any]) -> tuple[str, ...]:
    """What a counterexample with these features needs (see the module docstring, rule 2)."""
    if not features:
        return ()
    have = {
        "causal": bool(features.get("causal")),
        "mask": bool(features.get("mask")),
        "batch": features.get("B", 1) > 1,
        "heads": features.get("H", 1) > 1,
        "cross": features.get("T") != features.get("S"),
    }
    return tuple(n for n in NEEDS if have[n])


def size(features: dict[str, Any]) -> tuple[int, ...]:
    """How big a counterexample is: (elements of q, k, v, then T, S, B, H); no shape sorts
    last."""
    if not features:
        return (1 << 62,)
    f = features
    elems = f["B"] * f["H"] * (f["T"] * f["d"] + f["S"] * (f["d"] + f["d_v"]))
    return (elems, f["T"], f["S"], f["B"], f["H"])


@dataclass
class FailureGroup:
    """Failing runs with one root cause: the root (the first failure of the group in dependency
    order), its cause (the needs it stands for), the members (the root first) and the member
    whose counterexample is smallest (the one to show)."""

    root: Any
    cause: tuple[str, ...]
    members: list[Any] = field(default_factory=list)
    #: the shared reason of a group of failures without a counterexample (rule 0), else ''
    reason: str = ""

    @property
    def property_ids(self) -> list[str]:
        """The failing properties of the group, root first, each once."""
        return list(dict.fromkeys(r.property_id for r in self.members))

    @property
    def dtypes(self) -> list[str]:
        return list(dict.fromkeys(r.dtype for r in self.members))

    @property
    def example(self) -> Any:
        """The member whose counterexample to show: the smallest (ties: the earliest), among
        those whose reproducer shows the output off the reference beyond the bound
        (``features["vs_reference"] > 1``) when there are such, else among all; runs without a
        counterexample last."""
        rank = {id(r): i for i, r in enumerate(self.members)}

        def shows(r) -> bool:
            ratio = r.features.get("vs_reference")
            return ratio is not None and ratio > 1

        return min(
            self.members,
            key=lambda r: (not r.counterexample, not shows(r), size(r.features), rank[id(r)]),
        )

    def to_json(self) -> dict[str, Any]:
        ex = self.example
        return {
            "root": self.root.property_id,
            "cause": list(self.cause),
            "properties": self.property_ids,
            "dtypes": self.dtypes,
            "runs": [[r.property_id, r.dtype] for r in self.members],
            "example": [ex.property_id, ex.dtype] if ex.counterexample else None,
            "reason": self.reason or None,
        }


def rank(property_ids: list[str]) -> dict[str, int]:
    """Position of each property in the dependency order (``property_ids``: catalogue order)."""
    rest = [p for p in property_ids if p not in ORDER]
    return {p: i for i, p in enumerate([*ORDER, *rest])}


def no_example_reason(reason: str) -> str:
    """What failures without a counterexample are grouped by: the reason's first clause
    ('the worker crashed', 'hung', 'could not build the variant')."""
    head = (reason or "no reason").strip().split("\n")[0]
    return head.split(":")[0].split(" (")[0].strip() or "no reason"


def group_failures(failures: list[Any], catalogue_order: list[str] | None = None) -> list[Any]:
    """The failing runs (``PropertyResult`` objects with status ``fail``) in groups by root
    cause, groups in dependency order of their roots (module docstring)."""
    order = rank(catalogue_order or list(dict.fromkeys(r.property_id for r in failures)))
    pending = sorted(
        enumerate(failures), key=lambda ir: (order.get(ir[1].property_id, len(order)), ir[0])
    )
    groups: list[FailureGroup] = []
    by_reason: dict[str, FailureGroup] = {}
    for _, r in pending:
        if not r.counterexample:  # a crash, a hang, a variant that cannot be built: rule 0
            key = no_example_reason(r.reason)
            if key in by_reason:
                by_reason[key].members.append(r)
            else:
                by_reason[key] = FailureGroup(root=r, cause=(), members=[r], reason=key)
                groups.append(by_reason[key])
            continue
        have = set(needs(r.features))
        ours = [g for g in groups if not g.reason]
        home = next((g for g in ours if g.root.property_id == r.property_id), None)
        if home is None and r.property_id not in ISOLATED:
            home = next(
                (g for g in ours if g.root.property_id not in ISOLATED and set(g.cause) <= have),
                None,
            )
        if home is None:
            cause = STRUCTURAL.get(r.property_id, needs(r.features))
            groups.append(FailureGroup(root=r, cause=tuple(cause), members=[r]))
        else:
            home.members.append(r)
    return groups
