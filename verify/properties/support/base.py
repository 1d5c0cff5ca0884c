"""The property abstraction and the hypothesis-driven runner.

A :class:`Property` names one statement of the theory (or of the API contract), the derivation
it checks, when it applies to a variant, a strategy of examples and a check that returns
observed/bound (:class:`Observation`). The runner draws examples with hypothesis, fails when an
observation exceeds its bound (or the variant raises, hangs, returns NaN or the wrong shape), lets
hypothesis shrink the failure to a minimal counterexample and returns a :class:`PropertyResult`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
import traceback
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verify.properties.support import observe
from verify.spec.results import (
    LOOSE,
    NoStatement,
    NotApplicable,
    Observation,
    OutOfTime,
    PropertyResult,
    VariantError,
    VariantRaised,
)


@dataclass(frozen=True)
class Property:
    """An entry of the property catalogue.

    Args:
        id: stable identifier (``kebab-case``), used by ``--select`` and in reports.
        statement: one line saying what must hold.
        derivation: the derivation id it checks (``"D2"``: D1..D10, ``reports/derivations.md``),
            or ``"contract"`` for API behaviour.
        applies: ``applies(variant, ctx) -> None | str``; a string is the reason to skip.
        examples: ``examples(variant, ctx) -> hypothesis strategy`` of examples.
        check: ``check(variant, example, ctx) -> Observation | list[Observation]``.
        faults: the fault classes this property catches (``verify.spec.faults``).
        max_examples: cap on examples (expensive checks), ``None`` = the profile's count.
        low_precision: also meaningful for bf16/fp16 runs (the two-level model); the
            catalogue runner runs the others in float64 and float32 only.
        shrink: hypothesis shrinks a failure (False for examples that are seeds of a
            statistic: no seed is simpler than another, and each candidate costs a full run).
        long_examples: ``long_examples(variant, ctx) -> hypothesis strategy`` of examples past
            the block sizes of real kernels (``support.common.long_inputs_strategy``): run
            after the regular examples, :data:`LONG_EXAMPLES` of them (:func:`run_property`).
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
    shrink: bool = True
    long_examples: Callable[[Any, Any], Any] | None = None


@functools.cache
def _catalogue_metadata() -> dict[str, dict[str, Any]]:
    """id -> statement, derivation, fault classes and run options of every property, from
    ``verify/properties/catalogue.json`` (the catalogue's text lives there, once)."""
    from importlib.resources import files

    entries = json.loads(files("verify.properties").joinpath("catalogue.json").read_text())
    return {e["id"]: e for e in entries}


def declare(
    property_id: str, applies, examples, check, *, shrink: bool = True, long_examples=None
) -> Property:
    """The catalogue entry ``property_id`` with its three functions (see :class:`Property`).

    Raises:
        KeyError: ``property_id`` is not in ``catalogue.json`` (the message lists the ids).
    """
    meta = _catalogue_metadata()
    if property_id not in meta:
        raise KeyError(f"property_id: expected one of {sorted(meta)}, got {property_id!r}")
    m = meta[property_id]
    return Property(
        id=property_id,
        statement=m["statement"],
        derivation=m["derivation"],
        applies=applies,
        examples=examples,
        check=check,
        faults=tuple(m["faults"]),
        max_examples=m["max_examples"],
        low_precision=m["low_precision"],
        shrink=shrink,
        long_examples=long_examples,
    )


#: the one property that fails when the variant's forward raises on an input of its domain
ACCEPTS_INPUTS = "accepts-inputs"

#: the shrink policy of every run (``RunContext.shrink_draws``)
SHRINK_DRAWS = 25

#: the factor within which a measured observed/bound ratio may differ between machines (their
#: CPUs round sums, products and exp differently: vector widths, FMA, library ulps); a failure
#: whose ratio exceeds it on one machine fails on every machine, so only such failures steer
#: the shrinker (``run_property``) and ``verify.render.compare`` accepts ratios within it
MACHINE_RATIO_FACTOR = 16.0


class _ShrinkStop(BaseException):
    """Raised once the shrink budget of candidates is spent (a BaseException, so hypothesis lets
    it through)."""


class _RejectStop(BaseException):
    """Raised once a pass has rejected :attr:`RunContext.max_rejected` draws before any was
    checked (a BaseException, so hypothesis lets it through): the pass has no applicable
    example, reported as a skip (each long draw costs a bound, so hypothesis' own limit of
    hundreds of rejected draws would cost minutes)."""


@dataclass
class RunContext:
    """Where and how a property runs: dtype name, device, example budget, seed."""

    dtype: str = "float64"
    device: str = "cpu"
    max_examples: int | None = None  # None: the loaded hypothesis profile decides
    seed: int = 0
    #: candidate examples hypothesis may run after a property's first failure before shrinking
    #: stops and the latest (simplest so far) failure is reported: a count, not seconds, so the
    #: same minimal input on every run and a bounded cost when one example is slow. None:
    #: hypothesis' own limits.
    shrink_draws: int | None = SHRINK_DRAWS
    #: the dtype the variant computes in when coarser than ``dtype`` (its ``compute_dtype``
    #: claim, set by :func:`run_property`): every bound uses :attr:`model_dtype`
    compute_dtype: str | None = None
    #: ``time.monotonic()`` past which no further example starts: the run stops with what it
    #: has (:class:`~verify.spec.results.OutOfTime`: a failure found, else ``inconclusive``);
    #: None: no time limit (``verify.engine.run`` sets it from ``--timeout``)
    deadline: float | None = None
    #: rejected draws (outside the property's range, or inputs the variant rejects) after which
    #: a pass with no checked example stops as a skip; None: hypothesis' own limits
    max_rejected: int | None = None

    @property
    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)

    @property
    def model_dtype(self) -> str:
        """The dtype the error models use: the input dtype, or a coarser declared compute
        dtype (a float64 call computed in float32 has float32 roundings)."""
        from derivations.rounding import unit_roundoff

        c = self.compute_dtype
        if c is not None and unit_roundoff(c) > unit_roundoff(self.dtype):
            return c
        return self.dtype


#: long examples run per property and dtype (after the regular ones): each costs a bound over
#: up to ~10^6 scores, about a second
LONG_EXAMPLES = 3
#: a capped run draws one long example per this many regular ones (at least one)
LONG_SHARE = 8
#: shrink candidates of a failing long example (each a long call and bound)
LONG_SHRINK_DRAWS = 10
#: rejected long draws per long example before the long pass stops as a skip (a variant that
#: rejects the long shapes, e.g. an undeclared d_v == d: accepts-inputs reports that)
LONG_MAX_REJECTED = 8


def run_property(prop: Property, variant: Any, ctx: RunContext) -> PropertyResult:
    """Run ``prop`` on ``variant`` with hypothesis; never raises for a misbehaving variant.

    A property with ``long_examples`` then runs :data:`LONG_EXAMPLES` of them (one per
    :data:`LONG_SHARE` when the run caps its examples, at least one) unless the regular pass
    failed or did not apply; one
    result reports both (a long failure with its shrunk counterexample, or the examples and
    ratios of both passes)."""
    res = _run_once(prop, variant, ctx)
    if prop.long_examples is None or res.status in ("fail", "error", "inconclusive"):
        return res
    if res.status == "skip" and not res.reason.startswith(NO_EXAMPLE_REASONS):
        return res  # the property does not apply: no pass of it does
    # a run capped below the profile's count (the report's 10, a quick check) keeps one long
    # example per LONG_SHARE regular ones, at least one
    count = LONG_EXAMPLES
    if ctx.max_examples is not None:
        count = max(1, min(LONG_EXAMPLES, ctx.max_examples // LONG_SHARE))
    long_prop = dataclasses.replace(
        prop, examples=prop.long_examples, long_examples=None, max_examples=count
    )
    shrink = LONG_SHRINK_DRAWS if ctx.shrink_draws is None else min(ctx.shrink_draws,
                                                                    LONG_SHRINK_DRAWS)  # fmt: skip
    long_ctx = dataclasses.replace(
        ctx, seed=ctx.seed + 1, shrink_draws=shrink, max_rejected=LONG_MAX_REJECTED * count
    )
    long = _run_once(long_prop, variant, long_ctx)
    return _merged(res, long)


#: how a pass with no applicable example begins its reason (a long pass may still apply)
NO_EXAMPLE_REASONS = ("no applicable example", "no example was applicable")


def _merged(short: PropertyResult, long: PropertyResult) -> PropertyResult:
    """One result of a regular and a long pass (:func:`run_property`)."""
    if long.status in ("fail", "error"):
        long.examples += short.examples
        long.reason = f"on a long example: {long.reason}"
        return long
    if long.status == "inconclusive":  # the regular examples passed, the long ones ran out
        long.reason = f"{short.examples} regular examples passed; on the long examples: " + (
            long.reason
        )
        long.examples += short.examples
        return long
    if long.status == "skip":
        if short.status == "pass":
            short.detail = (short.detail + "; " if short.detail else "") + (
                f"long examples: {long.reason}"
            )
        return short
    if short.status == "skip":
        return long
    worse = long if (long.max_ratio or 0.0) > (short.max_ratio or 0.0) else short
    short.examples += long.examples
    short.ratios = short.ratios + long.ratios
    for name in ("max_ratio", "observed", "bound", "bound_kind", "detail"):
        setattr(short, name, getattr(worse, name))
    short.loose = short.loose and long.loose
    return short


def _run_once(prop: Property, variant: Any, ctx: RunContext) -> PropertyResult:
    """One hypothesis pass of ``prop`` over ``prop.examples``."""
    from hypothesis import given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis.errors import Unsatisfiable

    base = dict(
        property_id=prop.id,
        derivation=prop.derivation,
        statement=prop.statement,
        dtype=ctx.dtype,
        device=ctx.device,
    )
    ctx = dataclasses.replace(ctx, compute_dtype=getattr(variant, "compute_dtype", None))
    try:
        from verify.properties.support.claims import structure_reason

        reason = prop.applies(variant, ctx) or structure_reason(variant, prop.id)
    except Exception as exc:  # an applicability test that crashes is a bug in the catalogue
        reason = f"applicability check raised {exc!r}"
        return PropertyResult(status="fail", reason=reason, **base)
    if reason:
        return PropertyResult(status="skip", reason=reason, **base)

    observations: list[Observation] = []
    state: dict[str, Any] = {"draws": 0}

    def checked() -> int:  # examples with a statement and those without (``NoStatement``)
        return len(observations) + state.get("unstated", 0)

    def reject(why: str) -> None:
        from hypothesis import assume

        state["rejected"] = state.get("rejected", 0) + 1
        state["rejected_why"] = why
        cap = ctx.max_rejected
        if cap is not None and state["rejected"] > cap and not checked() and "failure" not in state:
            raise _RejectStop
        assume(False)

    def one(example: Any) -> None:
        if ctx.shrink_draws is not None and state["draws"] > ctx.shrink_draws:
            raise _ShrinkStop  # the shrink budget is spent (``_counted``)
        if ctx.deadline is not None and time.monotonic() > ctx.deadline:
            raise OutOfTime("the time limit (--timeout)")
        try:
            result = prop.check(variant, example, ctx)
        except NoStatement as exc:  # decided by floats: counted, no draw rejected
            if "failure" not in state:
                state["unstated"] = state.get("unstated", 0) + 1
                state["unstated_why"] = str(exc)
            return
        except NotApplicable as exc:
            reject(str(exc))
            return
        except VariantRaised as exc:
            if prop.id != ACCEPTS_INPUTS:  # left out here; accepts-inputs fails on it
                reject(f"{exc} (an input the variant rejects: accepts-inputs)")
            state.setdefault("examples", checked() + 1)
            state["failure"] = (example, None, str(exc))
            raise
        except VariantError as exc:
            state.setdefault("examples", checked() + 1)  # those run up to the failure
            state["failure"] = (example, None, str(exc))
            raise
        except Exception as exc:  # a bug in the catalogue, not in the variant: reported as such
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-4:])
            state["internal"] = (example, f"{type(exc).__name__}: {exc}\n{tb}")
            raise
        worst = observe.worst(result)
        if "failure" not in state:  # examples before the first failure (not shrinking)
            observations.append(worst)
        if worst.ratio > 1.0:
            if not _steers_shrinking(worst, example, state):
                return  # a shrink candidate failing by less than the machine factor: passed
            state.setdefault("examples", checked())
            state.setdefault("first_failure", repr(example))
            state["failure"] = (example, worst, _fail_message(worst))
            raise AssertionError(_fail_message(worst))

    # no hypothesis deadline whatever profile the caller loaded (hypothesis' default is 200 ms):
    # a first call that imports or compiles exceeds it, passes on replay, and the run would end
    # in a FlakyFailure, an internal error; time limits are the engine's (``OutOfTime``)
    overrides: dict[str, Any] = {"database": None, "report_multiple_bugs": False, "deadline": None}
    limit = prop.max_examples
    if ctx.max_examples is not None:
        limit = min(limit, ctx.max_examples) if limit else ctx.max_examples
    if limit:
        overrides["max_examples"] = limit
    if not prop.shrink:
        from hypothesis import Phase

        overrides["phases"] = [p for p in settings().phases if p != Phase.shrink]
    wrapped = settings(settings(), **overrides)(
        given(_counted(prop.examples(variant, ctx), state, ctx))(one)
    )
    if settings().derandomize:
        # hypothesis would seed a derandomized run from a digest of ``one``'s source text, so a
        # change to this runner would change every draw: seed from the property and the run's
        # seed instead (the draws then depend only on the strategy, the id and the seed)
        wrapped = hypothesis_seed(derandomized_seed(prop.id, ctx.seed))(wrapped)

    failed = False
    err_text = ""
    try:
        wrapped()
    except _ShrinkStop:
        return _stopped(ctx, state, base, variant)
    except OutOfTime as exc:  # the engine's time limit (``verify.engine.run``)
        if "failure" in state:  # a failure was found: report it, shrinking stopped
            return _stopped(ctx, state, base, variant, why=str(exc))
        return PropertyResult(
            status="inconclusive",
            examples=checked(),
            reason=f"{exc} ran out: {checked()} examples passed before it",
            **base,
        )
    except (AssertionError, VariantError) as exc:
        failed = True
        err_text = str(exc)
    except (Unsatisfiable, _RejectStop):  # every draw outside the property's range: no statement
        return PropertyResult(
            status="skip",
            reason=f"no applicable example: {state.get('rejected', 0)} draws outside the "
            f"property's range (the last: {state.get('rejected_why', 'filtered')})",
            **base,
        )
    except Exception as exc:  # internal errors, hypothesis errors
        example, text = state.get("internal", (None, f"{type(exc).__name__}: {exc}"))
        res = PropertyResult(status="error", reason=f"internal error in the check: {text}", **base)
        if example is not None:
            _describe_example(res, example)
        return res

    ratios = [o.ratio for o in observations]
    worst_obs = observe.worst(observations) if observations else None
    res = PropertyResult(
        status="fail" if failed else "pass",
        examples=checked(),
        ratios=ratios,
        **base,
    )
    if failed and "failure" in state:
        example, obs, msg = state["failure"]
        worst_obs = obs or worst_obs
        res.reason = msg or err_text
        if example is not None:
            _describe_example(res, example, variant, ctx)
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
        why = state.get("unstated_why") or state.get("rejected_why")
        res.reason = "no example was applicable" + (f" (the last reason: {why})" if why else "")
    elif state.get("unstated") and not failed:
        res.detail += (
            f"; {state['unstated']} of {res.examples} examples without a statement (the last: "
            f"{state['unstated_why']})"
        )
    return res


def _steers_shrinking(worst: Observation, example: Any, state: dict[str, Any]) -> bool:
    """Whether a failing observation counts as a failure: always before the first failure and
    for the first failing example itself (hypothesis replays it); while shrinking only beyond
    :data:`MACHINE_RATIO_FACTOR`. A candidate that fails by less could pass on another machine,
    so the minimal counterexample would hinge on the last bits of a ratio; failures beyond the
    factor fail everywhere (a NaN or a raising variant always counts: ``VariantError``)."""
    if "failure" not in state or repr(example) == state.get("first_failure"):
        return True
    return worst.ratio > MACHINE_RATIO_FACTOR


def _counted(strategy, state: dict[str, Any], ctx: RunContext):
    """``strategy``, counting every candidate hypothesis tries once a failure is known: drawn
    or rejected while drawn (a filter, an ``assume``), each counts, so the shrink budget
    ``ctx.shrink_draws`` bounds the work (the next example to reach the check past it stops
    the run: stopping inside a draw would make the data generation inconsistent)."""
    from hypothesis import strategies as st

    @st.composite
    def tried(draw):
        if "failure" in state:
            state["draws"] += 1
        return draw(strategy)

    return tried()


def derandomized_seed(property_id: str, seed: int) -> int:
    """The hypothesis seed of a derandomized run: CRC-32 of the property id plus the run's seed
    (stable across processes and Python versions, unlike ``hash``)."""
    return zlib.crc32(property_id.encode()) + int(seed)


def _stopped(
    ctx: RunContext, state: dict, base: dict, variant: Any, why: str = ""
) -> PropertyResult:
    """The latest failure when the shrink budget (or ``why``: the time limit) ran out (the
    shrinker only accepts simpler failing inputs, so it is the simplest found)."""
    example, obs, msg = state["failure"]
    stop = why or f"{ctx.shrink_draws} candidates"
    res = PropertyResult(
        status="fail",
        examples=state["examples"],
        reason=f"{msg} [shrinking stopped after {stop}]",
        **base,
    )
    _describe_example(res, example, variant, ctx)
    if obs is not None:
        res.max_ratio = obs.ratio
        res.observed = float(obs.observed)
        res.bound = float(obs.bound)
        res.bound_kind = obs.kind
    return res


#: properties whose failure under a softcap claim states the cap the outputs fit
#: (``verify.properties.support.diagnose.fitted_softcap``), and how the reason says it (read
#: by the hint of ``verify.render.check``)
SOFTCAP_FITTED = frozenset({"oracle-agreement", "edge-cases", "weights-vs-reference"})
SOFTCAP_FIT_SAYS = "the outputs on this counterexample fit"


def _describe_example(res: PropertyResult, example: Any, variant: Any = None, ctx=None) -> None:
    """Fill ``res``'s counterexample, reproducer snippet and features from ``example``; for a
    failure (``variant`` given) also ``features["vs_reference"]``: what its reproducer shows,
    the variant's output against the reference on the example's inputs as a multiple of the
    bound (``verify.properties.support.diagnose.reference_ratio``), when there is one."""
    res.counterexample = repr(example)
    res.snippet = example.snippet() if hasattr(example, "snippet") else ""
    res.features = example_features(example)
    if variant is not None and res.features:
        from verify.properties.support.diagnose import (
            STEP_FITTED,
            fitted_softcap,
            reference_ratio,
            step_key_fit,
        )

        ratio = reference_ratio(variant, example, ctx)
        if ratio is not None:
            res.features["vs_reference"] = ratio
        if res.property_id in STEP_FITTED and (
            said := step_key_fit(variant, example, ctx, res.property_id)
        ):
            res.reason += f"; {said}"
        if res.property_id in SOFTCAP_FITTED and (fit := fitted_softcap(variant, example, ctx)):
            c, r = fit
            cap = "no softcap" if c is None else f"a softcap C = {c:.6g}"
            res.reason += (
                f"; {SOFTCAP_FIT_SAYS} {cap} (ratio {r:.2g} of that claim's bound; claimed C = "
                f"{variant.softcap:g})"
            )
            res.features["fitted_softcap"] = c


def example_features(example: Any) -> dict[str, Any]:
    """What an example is made of: ``B, H, T, S, d, d_v, causal, mask`` of its attention inputs
    (an ``AttentionInputs``, or an example holding one as ``.inputs``, several as ``.items``
    (largest sizes, any flag), or sizes as ``.sizes`` with ``S = T``); ``{}`` when it has no
    attention shape (score rows, query pairs, ...)."""
    inner = getattr(example, "inputs", example)
    if hasattr(inner, "items") and isinstance(inner.items, list):
        parts = [example_features(x) for x in inner.items]
        parts = [p for p in parts if p]
        if not parts:
            return {}
        out = {k: max(p[k] for p in parts) for k in ("B", "H", "T", "S", "d", "d_v")}
        out["causal"] = any(p["causal"] for p in parts)
        out["mask"] = any(p["mask"] for p in parts)
        return out
    shape = getattr(inner, "shape", None)
    if all(hasattr(shape, a) for a in ("B", "H", "T", "S", "d", "d_v")):
        sizes = {a: int(getattr(shape, a)) for a in ("B", "H", "T", "S", "d", "d_v")}
        mask = getattr(inner, "attn_mask", None) is not None
    elif isinstance(getattr(inner, "sizes", None), dict):
        z = inner.sizes
        sizes = {a: int(z.get(a, 1)) for a in ("B", "H", "T", "d", "d_v")}
        sizes["S"] = int(z.get("S", sizes["T"]))
        mask = False
    else:
        return {}
    causal = getattr(inner, "causal", None)
    return {**sizes, "causal": bool(causal), "mask": bool(mask)}


def _fail_message(obs: Observation) -> str:
    where = f" at {obs.where}" if obs.where else ""
    detail = f"; {obs.detail}" if obs.detail else ""
    return (
        f"observed {obs.observed:.3e} > bound {obs.bound:.3e} "
        f"(ratio {obs.ratio:.3g}, {obs.kind}){where}{detail}"
    )
