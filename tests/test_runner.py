"""The hypothesis runner of one property (``verify.properties.support.base.run_property``): a
property whose inputs all fall outside its range is skipped with the reason (never an internal
error), derandomized draws depend on the property id and the seed (never on the runner's source
text), and shrinking stops after a counted budget of candidates."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from verify import builtins
from verify.properties.support.base import Property, RunContext, run_property
from verify.spec.results import NotApplicable, Observation

SOFTMAX = builtins.get("softmax")


def _prop(check, *, pid="runner-test", examples=None):
    return Property(
        id=pid,
        statement="test property",
        derivation="contract",
        applies=lambda variant, ctx: None,
        examples=examples or (lambda variant, ctx: st.integers(0, 10**6)),
        check=check,
    )


def _never_applicable(variant, x, ctx):
    raise NotApplicable("outside the range of this test")


def test_inputs_all_outside_the_range_are_a_skip_with_the_reason():
    res = run_property(_prop(_never_applicable), SOFTMAX, RunContext(max_examples=20))
    assert res.status == "skip", res.reason
    assert "outside the range of this test" in res.reason


def _drawn(pid: str, seed: int) -> list[int]:
    seen: list[int] = []

    def check(variant, x, ctx):
        seen.append(x)
        return Observation(0.0, 1.0)

    run_property(_prop(check, pid=pid), SOFTMAX, RunContext(max_examples=15, seed=seed))
    return seen


def test_derandomized_draws_follow_the_property_id_and_the_seed():
    assert _drawn("a", 0) == _drawn("a", 0)
    assert _drawn("a", 0) != _drawn("b", 0)
    assert _drawn("a", 0) != _drawn("a", 1)


def test_shrinking_stops_after_its_budget_of_candidates():
    calls = {"n": 0}

    def check(variant, x, ctx):
        calls["n"] += 1
        return Observation(float(x), 1.0)  # fails for every x > 1

    prop = _prop(check, examples=lambda variant, ctx: st.integers(10**5, 10**6))
    res = run_property(prop, SOFTMAX, RunContext(max_examples=20, shrink_draws=3))
    assert res.status == "fail"
    assert "[shrinking stopped after 3 candidates]" in res.reason
    assert calls["n"] == 1 + 3  # the first failure and 3 candidates; the 4th stopped it
    unbounded = RunContext(max_examples=20, shrink_draws=None)  # hypothesis' own limits
    full = run_property(replace(prop, id="runner-test-2"), SOFTMAX, unbounded)
    assert full.status == "fail" and "shrinking stopped" not in full.reason
    assert full.counterexample == str(10**5)  # shrunk all the way to the smallest failing x


def test_every_catalogue_entry_is_declared_once_in_order():
    """``verify/properties/catalogue.json`` holds each property's text and options once; the
    groups declare each entry with its functions, and nothing else."""
    import json
    from importlib.resources import files

    import pytest

    from verify.properties import catalogue
    from verify.properties.support.base import declare

    entries = json.loads(files("verify.properties").joinpath("catalogue.json").read_text())
    assert [e["id"] for e in entries] == [p.id for p in catalogue()]
    with pytest.raises(KeyError, match="property_id"):
        declare("no-such-property", None, None, None)
