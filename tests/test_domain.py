"""Restrictions found, not failed; crashes and causal NaN fail ``accepts-inputs`` only (the
closed list of restrictions: d_v == d, T == S, a length multiple, the compute dtype, the
empty-row convention). Checked in process with the ci profile on plain user functions."""

from __future__ import annotations

import pytest
import unclaimed_variants as U

from verify.engine.check import check

FAST = dict(isolate=False, profile="ci", max_examples=12, dtypes=("float64",))


def statuses(result) -> dict[str, str]:
    return {r.property_id: r.status for r in result.results}


def test_crash_at_one_token_fails_accepts_inputs_only():
    """A crash at T = 1 is a bug inside the domain: one failing property with the input, not a
    restriction; every other property leaves that input out and passes."""
    res = check(U.crash_at_one_token, **FAST)
    st = statuses(res)
    assert st["accepts-inputs"] == "fail"
    failing = [r for r in res.results if r.status == "fail"]
    assert [r.property_id for r in failing] == ["accepts-inputs"], failing
    ce = failing[0].counterexample
    assert "T=1" in ce or "T = 1" in ce or "'T': 1" in ce, ce
    assert "length_multiple" not in res.claims or res.claims["length_multiple"] in (None, 1)
    assert res.exit_code == 1


def test_off_by_one_causal_mask_is_not_explained_away():
    """NaN for causal=True: the probes do not conclude causal='no'; accepts-inputs fails."""
    res = check(U.off_by_one_causal, **FAST)
    assert res.variant.causal != "no"
    st = statuses(res)
    assert st["accepts-inputs"] == "fail", st
    assert res.exit_code == 1
    # declared non-causal, the same code passes (the defect is on the causal path only)
    ok = check(U.off_by_one_causal, causal="no", **FAST)
    assert ok.exit_code == 0, [(r.property_id, r.reason) for r in ok.results if r.status == "fail"]


@pytest.mark.parametrize(
    ("fn", "claim", "value"),
    [
        (U.needs_dv_equal_d, "dv_equals_d", True),
        (U.self_attention_only, "self_attention_only", True),
        (U.float32_inside, "compute_dtype", "float32"),
    ],
)
def test_restriction_found_and_the_battery_passes(fn, claim, value):
    """The probes find the restriction, the engine adopts it, the battery draws inside it: no
    property fails (float32 arithmetic gets float32 bounds, gradients included)."""
    res = check(fn, **FAST)
    assert res.claims[claim] == value, res.claims
    fails = [(r.property_id, r.reason) for r in res.results if r.status == "fail"]
    assert not fails and res.exit_code == 0
    assert statuses(res)["accepts-inputs"] == "pass"


def test_declared_restriction_is_respected_without_probes():
    res = check(U.needs_dv_equal_d, kernel="softmax", dv_equals_d=True, probe=False, **FAST)
    assert res.exit_code == 0


def test_declared_restriction_holds_for_every_property():
    """Declared d_v == d on a variant that returns a wrong shape (no error) outside it: no
    property calls it with d_v != d (weights are read in blocks of d_v = d one-hot values, the
    single-key and long-sequence draws keep d_v = d), so nothing fails and the weight properties
    run."""
    res = check(
        U.output_shaped_like_q,
        kernel="softmax",
        dv_equals_d=True,
        probe=False,
        select=("weights-vs-reference", "softmax-injectivity", "single-key", "accepts-inputs"),
        **FAST,
    )
    st = statuses(res)
    assert set(st.values()) == {"pass"}, [(r.property_id, r.status, r.reason) for r in res.results]
    assert len(st) == 4


def test_undeclared_restriction_with_a_kernel_claim_fails_accepts_inputs_only():
    """With the kernel claimed the probes do not run: the d_v restriction is not known, so the
    variant fails accepts-inputs (one property), never gradcheck or determinism. The selection
    is the properties whose calls draw d_v != d (each such draw is rejected, so a full battery
    spends minutes drawing past them) plus accepts-inputs, which must report it."""
    select = ["accepts-inputs", "oracle-agreement", "linearity-in-v", "determinism",
              "gradcheck", "gradients-vs-reference", "causality"]  # fmt: skip
    res = check(U.needs_dv_equal_d, kernel="softmax", probe=False, select=select, **FAST)
    failing = {r.property_id for r in res.results if r.status == "fail"}
    assert failing == {"accepts-inputs"}, failing
