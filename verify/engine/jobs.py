"""What the engine runs: jobs, the plan of a battery, and how a worker builds a variant."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verify.spec.vocabulary import FULL_PRECISION_DTYPES, LOW_PRECISION_DTYPES

#: the property id of the black-box probe job
PROBE = "probe"
#: the property id of the one tiny call made before any other work (``verify.engine.preflight``)
PRECALL = "precall"


@dataclass(frozen=True)
class BuiltinLoader:
    """Builds the registered built-in variant ``name`` (``verify.builtins``)."""

    name: str

    def __call__(self):
        from verify import builtins

        return builtins.get(self.name)


@dataclass(frozen=True)
class SpecLoader:
    """Builds a variant from its import spec ``pkg.module:object`` and re-applies ``claims``
    (picklable: what a spawned worker receives)."""

    spec: str
    claims: tuple[tuple[str, Any], ...] = ()

    def __call__(self):
        from verify.spec.target import apply_claims, as_variant

        return apply_claims(as_variant(self.spec), dict(self.claims))


@dataclass(frozen=True, eq=False)
class ObjectLoader:
    """Returns a variant object as it is (for forked workers: nothing is pickled)."""

    variant: Any = field(repr=False)

    def __call__(self):
        return self.variant


class Loaders:
    """One loader per variant object of a check: :class:`SpecLoader` with the variant's claim
    fields when the target is an import spec, else :class:`ObjectLoader`. Each variant is kept
    beside its loader: the cache is keyed by ``id``, and a freed variant's id is reused by a
    later object (the per-dtype variant built after the probes' merge), which would get the
    stale loader and lose the claims found since."""

    def __init__(self, spec: str | None):
        self.spec = spec
        self._by_id: dict[int, tuple[Any, Any]] = {}

    def __call__(self, v):
        from verify.spec.variant import claim_fields

        if id(v) not in self._by_id:
            given = tuple(sorted(claim_fields(v).items()))
            loader = SpecLoader(self.spec, given) if self.spec else ObjectLoader(v)
            self._by_id[id(v)] = (v, loader)
        return self._by_id[id(v)][1]


@dataclass(frozen=True)
class Job:
    """One property (``property_id``, or :data:`PROBE`) in one dtype on the variant ``loader``
    builds; ``label`` names the variant in progress lines and summaries."""

    loader: Any
    property_id: str
    dtype: str
    label: str = ""


def battery(loader, *, dtypes=FULL_PRECISION_DTYPES, select=None, label: str = "") -> list[Job]:
    """Every (property, dtype) job of the catalogue, in catalogue order then ``dtypes`` order;
    the low-precision dtypes only for properties that state a low-precision model.

    Raises:
        ValueError: an unknown property id in ``select`` (the message lists the known ones).
    """
    from verify.properties import catalogue

    props = catalogue()
    known = {p.id for p in props}
    for s in select or ():
        if s not in known:
            raise ValueError(f"select: unknown property {s!r}; known: {sorted(known)}")
    return [
        Job(loader, p.id, dt, label)
        for p in props
        if not select or p.id in select
        for dt in dtypes
        if dt not in LOW_PRECISION_DTYPES or p.low_precision
    ]
