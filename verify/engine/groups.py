"""Failures grouped by root cause: one group per cause, one minimal counterexample per group.

The rule (README, "Reading the result"):

0. Failures without a counterexample (the worker crashed, the watchdog stopped a hung run, the
   variant could not be built) are grouped by the first clause of their reason.
1. Failing runs are taken in *specificity order* (:data:`ORDER`): the properties that explain
   nothing but themselves (:data:`ALONE`); the axes (batch and head independence); the causal
   mask; the mask; the structural claims (window, kv-head map, key padding, score bias); the
   causal alignment; the alternative forms; the forward pass against the exact result (a
   rounding-bias failure of the mean signed error, a one-sided rounding, just before it);
   the backward against the forward (gradcheck); everything read from the forward, in
   catalogue order. The first failure of a group is its *root*: the most specific property
   that fails.
2. What a failure *has* is read from its counterexample (``PropertyResult.features``):
   ``causal`` (causal=True), ``mask`` (an attn_mask), ``batch`` (B > 1), ``heads`` (H > 1),
   ``cross`` (T != S). What it *needs* is what it has less what is shown not needed:

   * nothing, when the counterexample is not minimal (shrinking stopped early, a long
     example, a property that does not shrink: :func:`minimal`): its sizes and flags are
     the draw's, not the failure's;
   * B > 1 and H > 1 are needs only of batch and head independence: anywhere else, a failure
     at element (b, h, ...) is a failure of the slice b, h alone, since the variant keeps
     batch elements and heads apart (which those two properties check; a failure of theirs is
     a group that explains every later one, below);
   * T != S is a need only with causal=True: without the causal mask a query row sees every
     key whatever T is (shrinking lowers T first, so T = 1 < S = 2 is what a failure needing
     two keys shrinks to);
   * a flag every call of the variant has (``given``: causal=True for a variant that takes
     only causal calls) is no need: it tells no counterexample apart, and a draw that did not
     shrink would drop it where one that did keeps it.

3. A structural property's *cause* is what it tests (:data:`STRUCTURAL`: causality and
   prefix-invariance ``causal``, causal-alignment ``causal`` and ``cross``, masks ``mask``,
   ...; the structural claims' own properties: none); any other property's cause is what its
   own counterexample needs.
4. A failure joins the group whose root is its own property (in another dtype); else the first
   group whose root explains it (:func:`explains`): a batch or head mixing (an axis written
   for another layout also changes the computation when that axis has length 1) and a window
   wider or narrower than claimed (every call has the window) explain every failure; gradcheck
   (the backward against the variant's own forward) explains the gradient properties, and a
   failing forward explains gradcheck (finite differences of a forward off its exact values,
   e.g. weights computed in float32 in a float64 call, disagree with any backward); the
   kv-head map explains only failures with H > 1 (the forward properties call with G = H kv
   heads), key padding and score bias no other property's failure (the other properties call
   without them); any other root explains a failure whose counterexample has
   its cause; the causal mask and the attn_mask are one visibility (:data:`VISIBILITY`: a
   finite sentinel or a shifted mask leaks through both), so a root of causality, prefix
   invariance or the masks explains a failure with causal=True or an attn_mask. Else the
   failure opens a group, as its root.
5. A causal alignment failure is a comparison with the oracle on causal T != S inputs, a
   prefix invariance failure one of two lengths (which a computation depending on the length,
   a block's padding or a split of the keys, tells apart): when the computation is found wrong
   (the forward against the oracle, the feature map, a form: :data:`WRONG_COMPUTATION`) with
   a cause such a group's contains (non-causal inputs, say: a wrong constant), the group joins
   that one, whose root becomes the group's. (With causality failing too, prefix invariance
   is in causality's group already: a mask leak.)

So a causal mask shifted by one position (``tril(1)``) fails causality (cause: ``causal``) and,
with causal counterexamples, oracle-agreement, the weights, gradients...: one group. A wrong
scale fails oracle-agreement on non-causal inputs too: a group of its own beside the mask's. A
group is a hypothesis to test: fix its root, rerun, and the failures it explained go with it
(or show what else is wrong).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

#: failures that explain no other property's and no other explains: an input the variant
#: rejects (the other properties leave such inputs out), nondeterminism, the API's rejection
#: of causal T != S
ALONE = ("accepts-inputs", "determinism", "causal-mismatch-rejected")
#: kept for readers of the former name: the self-contained properties
ISOLATED = ALONE
#: a mixing of batch elements or heads: explains every later failure (rule 4)
AXES = ("batch-independence", "head-independence")
#: the structural claims every call carries (a window): their property explains every failure
EVERY_CALL = ("window-extent",)
#: the structural claims only their own property exercises (the forward properties call with
#: G = H kv heads, no key_padding_mask, no attn_bias), each with what another failure must
#: have to be explained by it: H > 1 for the kv-head map (a property calling with G < H kv
#: heads, e.g. the gradients against the reference); none for the others
OWN_CALLS = {"head-groups": ("heads",), "key-padding": (), "score-bias": ()}
#: the backward against the variant's own forward: explains the gradient properties; a
#: failing forward explains it (its finite differences are those of a forward off its exact
#: values: steps of a narrower dtype's roundings, a non-smooth step)
BACKWARD = "gradcheck"
FORWARD = ("oracle-agreement", "edge-cases")
GRADIENTS = (
    "gradients-vs-reference",
    "single-key-gradients",
    "masked-key-gradients",
    "empty-row-gradients",
)
#: the visibility: the causal pattern and the attn_mask are one mask in most code (a finite
#: sentinel or a shifted mask leaks through both), so a root here explains a failure with
#: either (rule 4)
VISIBILITY = (
    "causality",
    "prefix-invariance",
    "masks",
    "masked-key-gradients",
    "empty-row-gradients",
)
#: the mean signed error over heads: ranks before the forward pass when it is the mean that
#: fails (:func:`place`)
BIAS = "rounding-bias"
#: structural properties a wrong computation fails too (rule 5): the causal alignment is
#: compared with the oracle; prefix invariance compares calls of two lengths, which a
#: computation depending on the length (padding to a block, a split of the keys) or on a
#: score range outside the claimed one (the bound of the claim) tells apart
AGAINST_ORACLE = ("causal-alignment", "prefix-invariance")
#: roots that say the computation itself is wrong (the forward against the exact result, the
#: feature map, the alternative forms): what rule 5 merges a causal-alignment group into
WRONG_COMPUTATION = (
    "kernel-identity",
    "forms-agree",
    "state-step",
    "state-split-resume",
    "oracle-agreement",
    "edge-cases",
    "dtype-agreement",
    "rounding-bias",
)
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
    "window-extent": (),
    "head-groups": (),
    "key-padding": (),
    "score-bias": (),
}
#: the head of the specificity order; every other property follows in catalogue order
ORDER = (
    *ALONE,
    *AXES,
    "causality",
    "prefix-invariance",
    "masks",
    "masked-key-gradients",
    "empty-row-gradients",
    *EVERY_CALL,
    *OWN_CALLS,
    "causal-alignment",
    "forms-agree",
    "state-step",
    "state-split-resume",
    "kernel-identity",
    "oracle-agreement",
    "edge-cases",
    BACKWARD,
)
#: the needs, in the order they are named
NEEDS = ("causal", "mask", "batch", "heads", "cross")
#: what a failure's reason says when its counterexample is not minimal (rule 2)
UNSHRUNK_REASONS = ("[shrinking stopped after", "on a long example")


@functools.cache
def _unshrunk_properties() -> frozenset[str]:
    """Ids of the catalogue's properties whose examples are not shrunk (``shrink=False``)."""
    try:
        from verify.properties import catalogue

        return frozenset(p.id for p in catalogue() if not p.shrink)
    except Exception:  # noqa: BLE001 - grouping without the catalogue: every property shrinks
        return frozenset()


def has(features: dict[str, Any]) -> tuple[str, ...]:
    """What a counterexample with these features has (rule 2), in :data:`NEEDS` order."""
    if not features:
        return ()
    present = {
        "causal": bool(features.get("causal")),
        "mask": bool(features.get("mask")),
        "batch": features.get("B", 1) > 1,
        "heads": features.get("H", 1) > 1,
        "cross": features.get("T") != features.get("S"),
    }
    return tuple(n for n in NEEDS if present[n])


def minimal(r) -> bool:
    """Whether ``r``'s counterexample is a shrunk, minimal one (rule 2)."""
    reason = r.reason or ""
    return r.property_id not in _unshrunk_properties() and not any(
        s in reason for s in UNSHRUNK_REASONS
    )


def needs(r, given: tuple[str, ...] = ()) -> tuple[str, ...]:
    """What failure ``r`` needs (rule 2); a features dict (read as a minimal counterexample of
    a property other than batch and head independence) is accepted too. ``given``: the needs
    every call of the variant has (``given_needs``), never a need."""
    if isinstance(r, dict):
        features, pid, exact = r, "", True
    else:
        features, pid, exact = r.features, r.property_id, minimal(r)
    if not exact:
        return ()
    out = set(has(features))
    if pid not in AXES:
        out -= {"batch", "heads"}
    if "causal" not in out:
        out.discard("cross")
    out -= set(given)
    return tuple(n for n in NEEDS if n in out)


def given_needs(variant: Any) -> tuple[str, ...]:
    """The needs every call of ``variant`` has (rule 2): ``causal`` when it takes only causal
    calls (``AttentionVariant.causal == "yes"``); none for anything else."""
    return ("causal",) if getattr(variant, "causal", None) == "yes" else ()


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
    """Failing runs with one root cause: the root (the most specific failure of the group), its
    cause (the needs it stands for), the members (the root first) and the member whose
    counterexample is smallest (the one to show)."""

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
        those whose reproducer shows the output off the reference beyond the bound by more
        than the machine factor (``features["vs_reference"] >``
        ``verify.properties.support.base.MACHINE_RATIO_FACTOR``: beyond it on one machine, off
        on every machine, so the choice is the same everywhere) when there are such, else among
        all; runs without a counterexample last."""
        from verify.properties.support.base import MACHINE_RATIO_FACTOR

        rank_of = {id(r): i for i, r in enumerate(self.members)}

        def shows(r) -> bool:
            ratio = r.features.get("vs_reference")
            return ratio is not None and ratio > MACHINE_RATIO_FACTOR

        return min(
            self.members,
            key=lambda r: (not r.counterexample, not shows(r), size(r.features), rank_of[id(r)]),
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
    """Position of each property in the specificity order (``property_ids``: catalogue
    order)."""
    rest = [p for p in property_ids if p not in ORDER]
    return {p: i for i, p in enumerate([*ORDER, *rest])}


def place(r, order: dict[str, int]) -> float:
    """Where failure ``r`` comes in the specificity order: its property's rank; a rounding-bias
    failure of the mean signed error (a one-sided rounding, kind ``statistical``) comes just
    before oracle-agreement (it decides a truncation, which may also push a few outputs past
    the max-error bound), one of a head's max error past its bound stays in catalogue order."""
    pid = r.property_id
    if pid == BIAS and r.bound_kind == "statistical" and "oracle-agreement" in order:
        return order["oracle-agreement"] - 0.5
    return order.get(pid, len(order))


def no_example_reason(reason: str) -> str:
    """What failures without a counterexample are grouped by: the reason's first clause
    ('the worker crashed', 'hung', 'could not build the variant')."""
    head = (reason or "no reason").strip().split("\n")[0]
    return head.split(":")[0].split(" (")[0].strip() or "no reason"


def explains(group: FailureGroup, r) -> bool:
    """Whether ``group``'s root explains failure ``r`` (rule 4)."""
    root, pid = group.root.property_id, r.property_id
    if root == pid:
        return True
    if root in ALONE or pid in ALONE:
        return False
    if root in AXES or root in EVERY_CALL:
        return True
    if pid == BACKWARD:  # finite differences of a forward off its exact values
        return root in FORWARD
    if root in OWN_CALLS:
        need = set(OWN_CALLS[root])
        return bool(need) and pid not in OWN_CALLS and need <= set(has(r.features))
    if pid in OWN_CALLS:
        return False
    if root == BACKWARD:
        return pid in GRADIENTS
    present = set(has(r.features)) | set(STRUCTURAL.get(pid, ()))
    if root in VISIBILITY:
        return bool(present & {"causal", "mask"})
    return set(group.cause) <= present


def group_failures(
    failures: list[Any], catalogue_order: list[str] | None = None, given: tuple[str, ...] = ()
) -> list[Any]:
    """The failing runs (``PropertyResult`` objects with status ``fail``) in groups by root
    cause, groups in specificity order of their roots (module docstring); ``given``: the needs
    every call has (:func:`given_needs`)."""
    order = rank(catalogue_order or list(dict.fromkeys(r.property_id for r in failures)))
    pending = sorted(enumerate(failures), key=lambda ir: (place(ir[1], order), ir[0]))
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
        ours = [g for g in groups if not g.reason]
        home = next((g for g in ours if g.root.property_id == r.property_id), None)
        home = home or next((g for g in ours if explains(g, r)), None)
        if home is None:
            cause = STRUCTURAL.get(r.property_id, needs(r, given))
            groups.append(FailureGroup(root=r, cause=tuple(cause), members=[r]))
        else:
            home.members.append(r)
    return _merge_alignment(groups, order)


def _merge_alignment(groups: list[FailureGroup], order: dict[str, int]) -> list[FailureGroup]:
    """Rule 5: a causal-alignment or prefix-invariance group joins a group of a wrong
    computation whose cause it contains."""
    out = list(groups)
    for g in groups:
        if g.reason or g.root.property_id not in AGAINST_ORACLE:
            continue
        into = next(
            (
                h for h in out
                if h is not g and not h.reason and h.root.property_id in WRONG_COMPUTATION
                and set(h.cause) < set(g.cause)
            ),
            None,
        )  # fmt: skip
        if into is not None:
            into.members.extend(g.members)
            out.remove(g)
    for g in out:  # members in specificity order, the root first
        rest = sorted(g.members[1:], key=lambda r: place(r, order))
        g.members[1:] = rest
    return out
