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
