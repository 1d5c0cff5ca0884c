"""Assertions on one property run, shared by the property-group tests.

``checks(examples)`` returns ``ctx, run, assert_pass, assert_fail, assert_fails, assert_skip``
bound to a test module's example budget. A failure must carry a counterexample and a
reproducing snippet; a pass must have run examples and stayed within its stated bound.
"""

from __future__ import annotations

from types import SimpleNamespace

from verify.properties.support.base import SHRINK_DRAWS, RunContext, run_property


def checks(examples: int) -> SimpleNamespace:
    def ctx(dtype="float64", n=examples, shrink_draws=SHRINK_DRAWS):
        return RunContext(dtype=dtype, max_examples=n, shrink_draws=shrink_draws)

    def run(prop, variant, dtype="float64", n=examples):
        return run_property(prop, variant, ctx(dtype, n))

    def assert_pass(prop, variant, dtype="float64", n=examples):
        res = run_property(prop, variant, ctx(dtype, n))
        assert res.status == "pass", (prop.id, variant.name, dtype, res.reason, res.counterexample)
        assert res.examples > 0
        assert res.max_ratio is not None and res.max_ratio <= 1.0
        return res

    def assert_fail(prop, variant, dtype="float64", n=examples):
        res = run_property(prop, variant, ctx(dtype, n))
        assert res.status == "fail", (prop.id, variant.name, res.status, res.reason)
        assert res.counterexample, "a failure must come with a counterexample"
        assert res.snippet
        return res

    def assert_fails(res, fragment: str = ""):
        """A result that failed with a counterexample and ``fragment`` in its reason."""
        assert res.status == "fail", (res.status, res.reason)
        assert res.counterexample, "a failure must come with a counterexample"
        assert fragment in res.reason, res.reason

    def assert_skip(prop, variant, text):
        res = run_property(prop, variant, ctx())
        assert res.status == "skip", (prop.id, variant.name, res.status, res.reason)
        assert text in res.reason, res.reason
        return res

    return SimpleNamespace(
        ctx=ctx,
        run=run,
        assert_pass=assert_pass,
        assert_fail=assert_fail,
        assert_fails=assert_fails,
        assert_skip=assert_skip,
    )
