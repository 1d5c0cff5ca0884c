"""What a check produces: observations against stated bounds, per-property results, and the two
exceptions a check uses to tell a misbehaving variant from an input outside its range.

``PropertyResult`` objects travel end to end: the runner makes them, the engine carries them
(JSON only at the process boundary) and the renderers read them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

#: bound kinds: derived from the error model / a derivation; calibrated by a stated rule (labelled
#: in reports); exact (an identity that must hold bit for bit, bound 0); statistical (explicit
#: confidence level with Bonferroni correction).
BOUND_KINDS = ("derived", "calibrated", "exact", "statistical")
LOOSE = 1e-6  # observed/bound never above this over all examples: the bound is flagged loose


class VariantError(Exception):
    """The variant under test misbehaved: raised, returned NaN/inf, wrong shape or dtype."""


class VariantRaised(VariantError):
    """The variant's forward raised on an input: a failure of ``accepts-inputs`` when the input
    lies inside the variant's domain; every other property leaves such an input out (one
    restriction or defect fails one property, not every property)."""


class NotApplicable(Exception):
    """Raised by a check for an example outside the property's range (counts as rejected)."""


class NoStatement(NotApplicable):
    """Raised by a check whose example carries no statement by a decision on computed floats (a
    rounding bound that is not finite, a variant's or a float64 reference's output): such a
    decision may differ between machines in its last bits (README "Reports"), and a rejected
    draw changes every later draw of a run, so the property runner counts the example as
    checked without a statement and rejects nothing (``verify.properties.support.base``). A
    decision on the inputs alone (exact arithmetic, sizes) raises :class:`NotApplicable`: the
    draw is rejected on every machine alike. Code that catches NotApplicable catches it too."""


class OutOfTime(BaseException):
    """The run's time limit ran out (raised in a worker process by the engine's alarm,
    ``verify.engine.run``): the checker's limit, never the variant's failure. A BaseException,
    so neither hypothesis nor a check's ``except Exception`` swallows it; the runner reports
    the failure it had found (shrinking stopped) or an ``inconclusive`` result."""


#: what a run's status may be: passed, failed (the variant's), skipped (does not apply),
#: error (a bug in the check itself, never the variant's), inconclusive (the checker's own
#: limits ran out before a verdict: the time limit, a machine too loaded; never the variant's)
STATUSES = ("pass", "fail", "skip", "error", "inconclusive")


@dataclass
class Observation:
    """One comparison: the observed quantity against its stated bound.

    ``ratio = observed / bound``; > 1 fails. A zero bound means exact equality is required.
    """

    observed: float
    bound: float
    kind: str = "derived"
    where: str = ""
    detail: str = ""

    def __post_init__(self) -> None:
        if self.kind not in BOUND_KINDS:
            raise ValueError(f"kind: expected one of {BOUND_KINDS}, got {self.kind!r}")

    @property
    def ratio(self) -> float:
        obs = float(self.observed)
        if math.isnan(obs):
            return math.inf
        if self.bound == 0:
            return 0.0 if obs == 0 else math.inf
        return obs / float(self.bound)


@dataclass
class PropertyResult:
    """Outcome of one property on one variant in one context."""

    property_id: str
    derivation: str
    statement: str
    status: str  # one of STATUSES
    dtype: str
    device: str
    examples: int = 0
    max_ratio: float | None = None
    observed: float | None = None
    bound: float | None = None
    bound_kind: str | None = None
    loose: bool = False
    reason: str = ""  # skip reason, or failure message
    counterexample: str = ""
    snippet: str = ""
    detail: str = ""  # the worst observation's detail (evidence, also for passes)
    ratios: list[float] = field(default_factory=list)
    faults: list[int] = field(default_factory=list)  # the fault classes the property catches
    #: what the counterexample is made of (a failure or an internal error): sizes ``B``, ``H``,
    #: ``T``, ``S``, ``d``, ``d_v`` and flags ``causal``, ``mask`` (an attn_mask); empty when the
    #: example has no attention shape. Read by the failure grouping (``verify.engine.groups``).
    features: dict[str, Any] = field(default_factory=dict)
    #: warnings a library (torch, triton, hypothesis, the variant's own code) issued during the
    #: run, captured in the worker so none reaches the user's terminal: "Category: message"
    #: -> how many times
    warnings: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d.pop("ratios")
        return d
