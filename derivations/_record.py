"""The derivation record: what every module in ``derivations/`` produces.

A record holds the statement of one derivation (D1 ... D10) as sympy objects, the steps that
establish it, and its status. Each *claim* inside a record is closed by a check that
either succeeds (``proved`` / ``verified`` / ``cited``) or does not (``failed``); a check that
raises or does not reduce to an exact ``True`` is ``failed`` -- never a better status.

Status order (weakest first): failed < verified < cited < proved. A record's status is the
weakest of its claims: a record that proves its general statement but only verifies a corollary
on instances is ``verified``.

This module imports sympy lazily (``import derivations`` stays cheap).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class Status(str, enum.Enum):
    """Status of a derivation claim (the order is in the module docstring)."""

    FAILED = "failed"
    VERIFIED = "verified"  # exact symbolic check on listed instances
    CITED = "cited"  # classical result with its source
    PROVED = "proved"  # general symbolic proof

    @property
    def rank(self) -> int:
        return {"failed": 0, "verified": 1, "cited": 2, "proved": 3}[self.value]


@dataclass
class Step:
    """One step of a derivation: prose plus an optional displayed formula.

    The prose says what the formula is; the formula is a sympy object (printed by
    ``derivations._latex.latex``) or a ``Tex`` (hand-written, slots from sympy objects).
    """

    text: str
    expr: Any = None  # sympy object or derivations._latex.Tex

    def latex(self) -> str | None:
        """The displayed formula: the project's printer or the step's ``Tex`` (``_latex``)."""
        if self.expr is None:
            return None
        from derivations._latex import latex

        return latex(self.expr)


@dataclass
class Claim:
    """A single checked statement inside a record."""

    name: str
    status: Status
    detail: str = ""  # instances checked, or the source for a cited result, or why it failed
    source: str | None = None


@dataclass
class Derivation:
    """Record of one derivation (D1 ... D10).

    Attributes:
        id: ``"D1"`` ... ``"D10"``.
        title: one-line title.
        statement: mapping label -> sympy object or ``Tex`` (``derivations._latex``) stating
            the result with its conditions.
        steps: the derivation, in order.
        claims: every checked statement and its status.
        exports: names of the numeric functions ``verify/`` imports from the module.
        tables: small tables of exported numbers for the report, ``{name: (header, rows)}``.
    """

    id: str
    title: str
    statement: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    exports: list[str] = field(default_factory=list)
    tables: dict[str, tuple[list[str], list[list[Any]]]] = field(default_factory=dict)

    # -- building ---------------------------------------------------------------------------
    def step(self, text: str, expr: Any = None) -> None:
        self.steps.append(Step(text, expr))

    def check(
        self,
        name: str,
        predicate: Callable[[], Any],
        *,
        status: Status = Status.PROVED,
        detail: str = "",
    ) -> bool:
        """Run ``predicate``; record ``status`` iff it returns exactly ``True``.

        ``predicate`` must return a Python ``bool`` or a sympy boolean that is exactly
        ``sympy.true``; anything else (None, an unevaluated relation, an exception) records
        ``failed`` with the reason.
        """
        try:
            result = predicate()
        except Exception as exc:  # a check that cannot close is failed, with the reason
            self.claims.append(Claim(name, Status.FAILED, f"{detail} -- raised {exc!r}".strip()))
            return False
        ok = _is_true(result)
        if ok:
            self.claims.append(Claim(name, status, detail))
        else:
            self.claims.append(Claim(name, Status.FAILED, f"{detail} -- check gave {result!r}"))
        return ok

    def prove(self, name: str, predicate: Callable[[], Any], detail: str = "") -> bool:
        """``check`` with status ``proved``: ``predicate`` is a general symbolic proof."""
        return self.check(name, predicate, status=Status.PROVED, detail=detail)

    def verify(self, name: str, predicate: Callable[[], Any], detail: str = "") -> bool:
        """``check`` with status ``verified``: ``predicate`` checks the instances in ``detail``."""
        return self.check(name, predicate, status=Status.VERIFIED, detail=detail)

    def cite(self, name: str, source: str, detail: str = "") -> None:
        """Record a classical result taken from ``source`` (status ``cited``)."""
        self.claims.append(Claim(name, Status.CITED, detail, source))

    # -- reading ----------------------------------------------------------------------------
    @property
    def status(self) -> Status:
        if not self.claims:
            return Status.FAILED
        return min((c.status for c in self.claims), key=lambda s: s.rank)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serializable dict (statement in LaTeX and sympy ``srepr``)."""
        import sympy

        from derivations._latex import Tex, latex

        def enc(x: Any) -> dict[str, Any]:
            if isinstance(x, str):
                return {"latex": x}
            if isinstance(x, Tex):
                out: dict[str, Any] = {"latex": x.latex(), "claim": x.claim}
                out["slots"] = {k: sympy.srepr(v) for k, v in x.slots.items()}
                if x.expr is not None:
                    out["srepr"] = sympy.srepr(x.expr)
                return out
            return {"latex": latex(x), "srepr": sympy.srepr(x)}

        return {
            "id": self.id,
            "title": self.title,
            "status": self.status.value,
            "statement": {k: enc(v) for k, v in self.statement.items()},
            "steps": [{"text": s.text, "latex": s.latex()} for s in self.steps],
            "claims": [
                {"name": c.name, "status": c.status.value, "detail": c.detail, "source": c.source}
                for c in self.claims
            ],
            "exports": list(self.exports),
            "tables": {
                k: {"header": h, "rows": [[_jsonable(x) for x in r] for r in rows]}
                for k, (h, rows) in self.tables.items()
            },
        }

    def describe(self) -> str:
        """Plain-text rendering used by ``python -m derivations.<name>``."""
        lines = [f"{self.id}: {self.title}  [{self.status.value}]", ""]
        if self.statement:
            lines.append("Statement:")
            for k, v in self.statement.items():
                lines.append(f"  {k}: {v}")
            lines.append("")
        lines.append("Steps:")
        for i, s in enumerate(self.steps, 1):
            lines.append(f"  {i}. {s.text}")
            if s.expr is not None:
                lines.append(f"       {s.expr}")
        lines.append("")
        lines.append("Claims:")
        for c in self.claims:
            extra = f" ({c.detail})" if c.detail else ""
            src = f" [source: {c.source}]" if c.source else ""
            lines.append(f"  [{c.status.value:8s}] {c.name}{extra}{src}")
        if self.exports:
            lines.append("")
            lines.append("Exports: " + ", ".join(self.exports))
        for name, (header, rows) in self.tables.items():
            lines.append("")
            lines.append(f"Table {name}: " + " | ".join(header))
            for r in rows:
                lines.append("  " + " | ".join(str(x) for x in r))
        return "\n".join(lines)


def _is_true(result: Any) -> bool:
    if result is True:
        return True
    try:
        import sympy

        return result is sympy.true
    except ImportError:  # pragma: no cover - sympy is a hard dependency
        return False


def _jsonable(x: Any) -> Any:
    if isinstance(x, (bool, int, str)) or x is None:
        return x
    if isinstance(x, float):
        return float(repr(x)) if x == x else "nan"
    return str(x)


def main_for(derive: Callable[[], Derivation]) -> None:
    """Entry point used by each module's ``if __name__ == "__main__"`` block."""
    record = derive()
    print(record.describe())
    raise SystemExit(0 if record.status is not Status.FAILED else 1)


def pick(table: dict[str, Any], *names: str) -> tuple[Any, ...]:
    """The entries ``names`` of a module's symbol table, in order.

    ``n, big_n, d = pick(_syms(), "n", "N", "d")`` unpacks the symbols a claim group uses.
    """
    return tuple(table[name] for name in names)
