"""Structural claims in the checker (D12-D15): each correct variant passes, each faulty twin fails
the property that decides its fault, claims are validated, and the command line reads them."""

from __future__ import annotations

import argparse

import pytest
import torch

import tests.modern_variants as mv
from verify.cli.options import add_claim_options, claims_from
from verify.properties import get
from verify.properties.support.base import RunContext, run_property
from verify.spec.variant import AttentionVariant

#: examples a faulty twin gets (a failing run stops at its first failure)
TWIN_EXAMPLES = 25


@pytest.fixture(scope="module", autouse=True)
def _no_shrinking():
    from verify import profiles

    with profiles.without_shrinking():
        yield


@pytest.mark.parametrize("twin", sorted(mv.TWINS))
def test_faulty_twin_fails_its_property(twin):
    _, pid = mv.TWINS[twin]
    res = run_property(get(pid), getattr(mv, twin), RunContext(max_examples=TWIN_EXAMPLES))
    assert res.status == "fail", (res.status, res.reason)
    assert res.counterexample and res.snippet


@pytest.mark.parametrize("pair", sorted({v for v in mv.TWINS.values()}))
def test_correct_variant_passes_the_deciding_property(pair):
    name, pid = pair
    res = run_property(get(pid), getattr(mv, name), RunContext(max_examples=10))
    assert res.status == "pass", (res.status, res.reason, res.counterexample[:2000])
    assert res.examples > 0


OK = (
    "ok_window",
    "ok_gqa",
    "ok_softcap",
    "ok_alibi",
    "ok_sigmoid",
    "ok_padding",
    "ok_decay",
    "ok_hedgehog",
    "ok_cosine",
    "ok_bias",
)


@pytest.mark.parametrize("name", OK)
def test_correct_variant_passes_the_battery(name):
    """Every property that applies passes, none errs (no internal error of the checker), and
    the structural properties and the modern reference actually ran."""
    from verify.engine.check import check

    res = check(getattr(mv, name), dtypes=("float64",), isolate=False, max_examples=4)
    bad = [(r.property_id, r.status, r.reason[:300]) for r in res.results if r.status != "pass"
           and r.status != "skip"]  # fmt: skip
    assert not bad, bad
    ran = {r.property_id for r in res.results if r.status == "pass"}
    assert {"accepts-inputs", "oracle-agreement", "causality", "linearity-in-v"} <= ran
    own = {
        "ok_window": "window-extent",
        "ok_gqa": "head-groups",
        "ok_padding": "key-padding",
        "ok_decay": "forms-agree",
        "ok_bias": "score-bias",
    }.get(name)
    assert own is None or own in ran


def test_position_dependent_claims_turn_off_key_permutation():
    res = run_property(get("permutation-equivariance"), mv.ok_alibi, RunContext(max_examples=3))
    assert res.status == "skip" and "not exchangeable" in res.reason
    # a softcap depends on scores only: the keys stay exchangeable
    res = run_property(get("permutation-equivariance"), mv.ok_softcap, RunContext(max_examples=3))
    assert res.status == "pass", res.reason


def test_plain_kernel_statements_skip_with_the_claims_named():
    res = run_property(get("uniform-weights"), mv.ok_window, RunContext(max_examples=3))
    assert res.status == "skip" and "window (2, 1)" in res.reason


def _forward(q, k, v, *, causal):
    return q


@pytest.mark.parametrize(
    "claims, words",
    [
        (dict(window=(1,)), "window"),
        (dict(window=(-1, -1)), "window"),
        (dict(window=(2, 0), causal_alignment="top-left"), "bottom-right"),
        (dict(softcap=0.0), "softcap"),
        (dict(alibi_slopes=(0.5, -1.0)), "alibi_slopes"),
        (dict(alibi_slopes=[0.5]), "alibi_slopes"),
        (dict(decay=(1.5,), causal="yes", kernel="taylor:2"), "decay"),
        (dict(decay=(0.5,), causal="both", kernel="taylor:2"), "causal"),
        (dict(decay=(0.5,), causal="yes", kernel="softmax"), "ALiBi"),
        (dict(kernel="sigmoid"), "normalized=False"),
        (dict(sigmoid_bias=1.0), "sigmoid"),
        (dict(kv_heads=0), "kv_heads"),
        (dict(softcap=30.0, kernel="taylor:2"), "softcap"),
        (dict(key_padding=1), "key_padding"),
    ],
)
def test_bad_claims_are_rejected_by_name(claims, words):
    with pytest.raises((ValueError, TypeError), match=words):
        AttentionVariant("x", _forward, **claims)


def test_feature_map_from_the_command_line_claims_linear_phi():
    """``--feature-map pkg.mod:phi`` on a plain function: the kernel becomes linear:phi and the
    oracle runs against phi(q).phi(k) (the twin's half map fails, the right map passes)."""
    from verify.engine.check import check

    def run(target):
        res = check(target, dtypes=("float64",), isolate=False, max_examples=10,
                    select=["oracle-agreement"],
                    **_parse(["--feature-map", "tests.modern_variants:hedgehog"]))  # fmt: skip
        (r,) = res.results
        return res, r

    res, r = run(lambda q, k, v, *, causal: mv._hedgehog_forward(q, k, v, causal=causal))
    assert res.variant.kernel == "linear:phi" and r.status == "pass", (r.status, r.reason)
    res, r = run(lambda q, k, v, *, causal: mv._hedgehog_forward(q, k, v, causal=causal, flip=0))
    assert r.status == "fail", r.reason
    with pytest.raises(ValueError, match="feature_map_spec"):
        AttentionVariant("x", _forward, feature_map_spec="tests.modern_variants:no_such_map")
    with pytest.raises(ValueError, match="linear:phi"):
        AttentionVariant("x", _forward, kernel="linear:phi")


def _parse(argv):
    p = argparse.ArgumentParser()
    add_claim_options(p.add_argument)
    return claims_from(lambda dest: getattr(p.parse_args(argv), dest))


def test_command_line_reads_the_structural_claims():
    claims = _parse(
        ["--kv-heads", "2", "--window", "3,0", "--softcap", "30", "--alibi",
         "--kernel", "sigmoid", "--sigmoid-bias", "-1.5", "--key-padding", "--qk-norm",
         "--score-bias"]
    )  # fmt: skip
    assert claims["kv_heads"] == 2 and claims["window"] == (3, 0) and claims["softcap"] == 30.0
    assert claims["alibi_slopes"] == "reference"
    # --decay with --alibi is a contradiction (two position biases): parsed on its own
    assert _parse(["--decay", "0.9,1"])["decay"] == (0.9, 1.0)
    assert claims["sigmoid_bias"] == -1.5 and claims["key_padding"] is True
    assert claims["qk_norm"] is True and claims["score_bias"] is True
    assert _parse(["--alibi-slopes", "0.5,0.25"])["alibi_slopes"] == (0.5, 0.25)
    assert _parse([])["window"] is None


@pytest.mark.parametrize(
    "argv",
    [["--window", "3"], ["--window", "-2,0"], ["--window", "-1,-1"], ["--softcap", "-1"],
     ["--decay", "0.5,2"], ["--alibi-slopes", "a,b"], ["--kv-heads", "0"]],
)  # fmt: skip
def test_command_line_rejects_bad_structural_claims(argv, capsys):
    with pytest.raises(SystemExit):
        _parse(argv)
    assert argv[0] in capsys.readouterr().err


@pytest.mark.parametrize(
    ("cap", "claimed", "said"), [(8.0, 5.0, "a softcap C = 8"), (None, 5.0, "no softcap")]
)
def test_wrong_softcap_constant_is_fitted_and_the_hint_names_it(cap, claimed, said):
    """A kernel capping at C = 8 (or not at all) claimed as --softcap 5 fails oracle-agreement;
    its reason states the cap the counterexample's outputs fit within that cap's own D16 bound
    (found by search, not from a list of guesses), and the hint says it first. The correct
    claim's run states no fit."""
    from verify.render.check import look_at

    def forward(q, k, v, *, causal):
        s = mv._scores(q, k)
        s = s if cap is None else cap * torch.tanh(s / cap)
        return torch.softmax(mv._causal(s, causal), -1) @ v

    wrong = AttentionVariant("cap", forward, kernel="softmax", softcap=claimed)
    res = run_property(get("oracle-agreement"), wrong, RunContext(dtype="float64", max_examples=50))
    assert res.status == "fail", (res.status, res.reason)
    assert f"fit {said}" in res.reason, res.reason
    hint = look_at("oracle-agreement", wrong, (res.reason,))
    first = "the softcap constant: the outputs fit C = 8" if cap else "the outputs fit no softcap"
    assert first in hint and hint.index(first) < hint.index("the score scale"), hint
    right = wrong.with_claims(softcap=cap)
    ok = run_property(get("oracle-agreement"), right, RunContext(dtype="float64", max_examples=10))
    assert ok.status == "pass" and "fit" not in (ok.reason or ""), ok.reason


def test_a_softcap_claim_without_a_kernel_is_checked_against_softmax_under_that_cap():
    """`--softcap 30` without --kernel passed a cap of 50 (no kernel identified: the kernel fit
    on raw scores cannot name exp(C tanh(x / C))). The cap probe's exact fit on normalized
    rows now names softmax, so oracle-agreement compares with the claimed cap and the fitted C
    comes first in the hint; the correct cap passes it; a float32 step is not suggested for an
    error far below a float32 rounding."""
    from verify.engine.check import check
    from verify.render.check import group_look_at, narrower

    def capped(cap):
        def forward(q, k, v, *, causal):
            s = mv._scores(q, k)
            return torch.softmax(mv._causal(cap * torch.tanh(s / cap), causal), -1) @ v

        return forward

    kw = dict(softcap=30.0, select=["oracle-agreement"], dtypes=("float64",), isolate=False,
              max_examples=30)  # fmt: skip
    bad = check(capped(50.0), **kw)
    assert bad.variant.kernel == "softmax" and bad.exit_code == 1
    hint = group_look_at(bad.groups[0], bad.variant)
    assert "the outputs fit C = 50" in hint and "float32" not in hint, hint
    assert check(capped(30.0), **kw).exit_code == 0
    assert narrower("x (4.04e+06 u of float64 relative to |o|)") == ""  # 4.5e-10 relative
    assert narrower("x (4.04e+08 u of float64 relative to |o|)") != ""  # 4.5e-8: a float32 step


def _eager_capped(cap):
    """Gemma's eager order in the input type: s / C, tanh, * C, softmax, P V (each op rounds)."""

    def forward(q, k, v, *, causal):
        s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        s = torch.tanh(s / cap) * cap
        return torch.softmax(mv._causal(s, causal), -1) @ v

    return forward


def test_a_wrong_softcap_in_bfloat16_fails_oracle_agreement():
    """A bf16 kernel capping at 50 claimed as --softcap 30 passed: its outputs match no emulated
    order, and the envelope's bound (tanh 1-Lipschitz, the row's largest weight error charged to
    every key twice) was 2.0 on outputs in [0, 1]. With the saturated cap's slope (D16) and the
    centred bound on perturbed weights (D10) it fails oracle-agreement, and the reason names the
    cap the outputs fit; the correct cap passes."""
    from verify.engine.check import check

    kw = dict(kernel="softmax", softcap=30.0, select=["oracle-agreement"],
              dtypes=("bfloat16",), isolate=False, max_examples=40)  # fmt: skip
    bad = check(_eager_capped(50.0), **kw)
    assert bad.exit_code == 1, [(r.property_id, r.status, r.reason) for r in bad.results]
    assert {r.property_id for r in bad.results if r.status == "fail"} == {"oracle-agreement"}
    # a range of caps fits bf16 outputs: the simplest one in it is named (not 51.3877)
    assert "fit a softcap C = 50 " in bad.failed[0].reason, bad.failed[0].reason
    good = check(_eager_capped(30.0), **kw)
    assert good.exit_code == 0, [(r.property_id, r.status, r.reason) for r in good.results]


def test_the_bfloat16_softcap_bound_separates_the_claimed_cap_from_another():
    """One row, keys at raw scores 90 and 200 (3C and 6.7C for C = 30, both saturated), V = I,
    the eager model: the bound contains the correct cap's bf16 output and not a cap of 50's
    (before: 2.01 on both elements, larger than any output)."""
    from verify.exact import errors

    q = torch.ones(1, 1, 1, 1, dtype=torch.bfloat16)
    k = torch.tensor([90.0, 200.0], dtype=torch.bfloat16).reshape(1, 1, 2, 1)
    v = torch.eye(2, dtype=torch.bfloat16).reshape(1, 1, 2, 2)
    eb = errors.attention_error_bound("softmax", q, k, v, dtype="bfloat16", scale=1.0,
                                      precision="eager", softcap=30.0)  # fmt: skip
    s = torch.tensor([90.0, 200.0], dtype=torch.float64)
    exact = torch.softmax(30.0 * torch.tanh(s / 30.0), -1).numpy()
    for cap, inside in ((30.0, True), (50.0, False)):
        o = (torch.softmax(torch.tanh((q @ k.transpose(-1, -2)) / cap) * cap, -1) @ v).double()
        err = abs(o.numpy().reshape(-1) - exact)
        assert bool((err <= eb.bound.reshape(-1)).all()) is inside, (cap, err, eb.bound)
