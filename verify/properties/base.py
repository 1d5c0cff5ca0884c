"""The property abstraction and the hypothesis-driven runner.

A :class:`Property` names one statement of the theory (or of the API contract), the derivation
it checks, when it applies to a variant, a strategy of examples and a check that returns
observed/bound (:class:`Observation`). The runner draws examples with hypothesis, fails when an
observation exceeds its bound (or the variant raises, hangs, returns NaN or the wrong shape), lets
hypothesis shrink the failure to a minimal counterexample and returns a :class:`PropertyResult`.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verify.spec.results import (
    LOOSE,
    NotApplicable,
    Observation,
    PropertyResult,
    VariantError,
)


@dataclass(frozen=True)
class Property:
    """An entry of the property catalogue.

    Args:
        id: stable identifier (``kebab-case``), used by ``--select`` and in reports.
        statement: one line saying what must hold.
        derivation: the THEORY.md id it checks (``"D2"``), or ``"contract"`` for API behaviour.
        applies: ``applies(variant, ctx) -> None | str``; a string is the reason to skip.
        examples: ``examples(variant, ctx) -> hypothesis strategy`` of examples.
        check: ``check(variant, example, ctx) -> Observation | list[Observation]``.
        faults: the FAULTS.md entries this property catches.
        max_examples: cap on examples (expensive checks), ``None`` = the profile's count.
        low_precision: also meaningful for bf16/fp16 runs (the two-level model); the
            catalogue runner runs the others in float64 and float32 only.
    """

    id: str
    statement: str
    derivation: str
    applies: Callable[[Any, Any], str | None]
    examples: Callable[[Any, Any], Any]
    check: Callable[[Any, Any, Any], Any]
    faults: tuple[int, ...] = ()
    max_examples: int | None = None
    low_precision: bool = False


@dataclass
class RunContext:
    """Where and how a property runs: dtype name, device, example budget, seed."""

    dtype: str = "float64"
    device: str = "cpu"
    max_examples: int | None = None  # None: the loaded hypothesis profile decides
    seed: int = 0
    #: seconds of shrinking after the first failure; then only already-failing examples are
    #: re-run (the minimal one found so far is reported). None: hypothesis' own limits.
    shrink_budget: float | None = 20.0

    @property
    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)


def run_property(prop: Property, variant: Any, ctx: RunContext) -> PropertyResult:
    """Run ``prop`` on ``variant`` with hypothesis; never raises for a misbehaving variant."""
    from hypothesis import given, settings

    base = dict(
        property_id=prop.id,
        derivation=prop.derivation,
        statement=prop.statement,
        dtype=ctx.dtype,
        device=ctx.device,
    )
    try:
        reason = prop.applies(variant, ctx)
    except Exception as exc:  # an applicability test that crashes is a bug in the catalogue
        reason = f"applicability check raised {exc!r}"
        return PropertyResult(status="fail", reason=reason, **base)
    if reason:
        return PropertyResult(status="skip", reason=reason, **base)

    observations: list[Observation] = []
    state: dict[str, Any] = {}

    def one(example: Any) -> None:
        if ctx.shrink_budget is not None and "first_failure" in state:
            key = hash(repr(example))
            if time.monotonic() - state["first_failure"] > ctx.shrink_budget:
                if key in state.get("rejected_keys", ()):  # replay as rejected (no Flaky)
                    from hypothesis import assume

                    assume(False)
                if key not in state["failing_keys"]:
                    return  # shrink budget spent: stop exploring new candidates
        try:
            result = prop.check(variant, example, ctx)
        except NotApplicable:
            from hypothesis import assume

            if ctx.shrink_budget is not None:
                state.setdefault("rejected_keys", set()).add(hash(repr(example)))
            assume(False)
            return
        except VariantError as exc:
            state["failure"] = (example, None, str(exc))
            _mark_failing(state, example)
            raise
        except Exception as exc:  # a bug in the catalogue, not in the variant: reported as such
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-4:])
            state["internal"] = (example, f"{type(exc).__name__}: {exc}\n{tb}")
            raise
        obs_list = result if isinstance(result, list) else [result]
        worst = max(obs_list, key=lambda o: o.ratio)
        if "first_failure" not in state:  # examples before the first failure (not shrinking)
            observations.append(worst)
        if worst.ratio > 1.0:
            state["failure"] = (example, worst, _fail_message(worst))
            _mark_failing(state, example)
            raise AssertionError(_fail_message(worst))

    overrides: dict[str, Any] = {"database": None, "report_multiple_bugs": False}
    limit = prop.max_examples
    if ctx.max_examples is not None:
        limit = min(limit, ctx.max_examples) if limit else ctx.max_examples
    if limit:
        overrides["max_examples"] = limit
    wrapped = settings(settings(), **overrides)(given(prop.examples(variant, ctx))(one))

    failed = False
    err_text = ""
    try:
        wrapped()
    except (AssertionError, VariantError) as exc:
        failed = True
        err_text = str(exc)
    except Exception as exc:  # internal errors, hypothesis errors (e.g. Unsatisfiable)
        example, text = state.get("internal", (None, f"{type(exc).__name__}: {exc}"))
        res = PropertyResult(status="error", reason=f"internal error in the check: {text}", **base)
        if example is not None:
            res.counterexample = repr(example)
            res.snippet = example.snippet() if hasattr(example, "snippet") else ""
        return res

    ratios = [o.ratio for o in observations]
    worst_obs = max(observations, key=lambda o: o.ratio) if observations else None
    res = PropertyResult(
        status="fail" if failed else "pass",
        examples=len(observations),
        ratios=ratios,
        **base,
    )
    if failed and "failure" in state:
        example, obs, msg = state["failure"]
        worst_obs = obs or worst_obs
        res.reason = msg or err_text
        if example is not None:
            res.counterexample = repr(example)
            res.snippet = example.snippet() if hasattr(example, "snippet") else ""
    elif failed:
        res.reason = err_text
    if worst_obs is not None:
        res.max_ratio = worst_obs.ratio
        res.observed = float(worst_obs.observed)
        res.bound = float(worst_obs.bound)
        res.bound_kind = worst_obs.kind
        res.detail = worst_obs.detail
        res.loose = (
            not failed
            and worst_obs.kind in ("derived", "calibrated")
            and all(r < LOOSE for r in ratios)
        )
    if not failed and not observations:
        res.status = "skip"
        res.reason = "no example was applicable"
    return res


def _mark_failing(state: dict[str, Any], example: Any) -> None:
    state.setdefault("first_failure", time.monotonic())
    state.setdefault("failing_keys", set()).add(hash(repr(example)))


def _fail_message(obs: Observation) -> str:
    where = f" at {obs.where}" if obs.where else ""
    detail = f"; {obs.detail}" if obs.detail else ""
    return (
        f"observed {obs.observed:.3e} > bound {obs.bound:.3e} "
        f"(ratio {obs.ratio:.3g}, {obs.kind}){where}{detail}"
    )
