"""FlexAttention's score_mod, mask_mod and BlockMask as claims (verify.spec.flex,
verify.properties.flex_checks).

Torch's eager ``flex_attention`` with correct score_mods and mask_mods (softcap, ALiBi, a
document mask, a sliding window; ``tests/flex_variants.py``) passes ``flex-score-mod`` in
float32 and bfloat16 against the exact reference of the user's own functions, within D10's
bound with D16's score error propagated through the score_mod; the same claims on a forward
that applies the score_mod with the wrong sign fail. BlockMasks built by torch pass
``flex-block-mask``; one reused at another block size (keys dropped) and one whose blocks are
all listed full (the window boundary inside a block lost) fail it. Eager flex ignores a
BlockMask's block lists (it applies the mask_mod to every score), so only the BlockMask check
sees these faults.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import flex_variants as fv  # noqa: E402

PROPS = ("flex-score-mod", "flex-block-mask")
#: torch's tanh is 2.5 ulps (derivations.transform_rounding.TANH_ULPS): 5 u, plus the division
#: and the product of C tanh(s / C)
SOFTCAP_ROUNDINGS = 7


def _check(forward, dtypes=("float32", "bfloat16"), **claims):
    from verify.engine import check as engine
    from verify.spec.variant import AttentionVariant

    variant = AttentionVariant(name=forward.__name__, forward=forward, dtypes=dtypes, **claims)
    return engine.check(
        variant, select=list(PROPS), dtypes=dtypes, isolate=False, probe=False, max_examples=6
    )


def _statuses(result):
    return {(r.property_id, r.dtype): r.status for r in result.results}


@pytest.mark.parametrize(
    "forward, claims",
    [
        (
            fv.flex_softcap_document,
            dict(
                score_mod=fv.softcap,
                mask_mod=fv.document,
                score_mod_roundings=SOFTCAP_ROUNDINGS,
                block_mask=fv.document_block_mask,
            ),
        ),
        (fv.flex_alibi, dict(score_mod=fv.alibi)),
        (fv.flex_window, dict(mask_mod=fv.sliding_window, block_mask=fv.window_block_mask)),
    ],
    ids=["softcap+document", "alibi", "window"],
)
def test_correct_flex_attention_passes(forward, claims):
    result = _check(forward, **claims)
    assert not result.failed, [(r.property_id, r.reason[:300]) for r in result.failed]
    ran = _statuses(result)
    assert ran[("flex-score-mod", "float32")] == "pass", ran
    assert ran[("flex-score-mod", "bfloat16")] == "pass", ran
    if "block_mask" in claims:
        assert ran[("flex-block-mask", "float32")] == "pass", ran
    # the card says what the declared functions do (the probes read only the causal flag)
    from verify.render.check import describe

    text = describe(result)
    for attr in ("score_mod", "mask_mod"):
        if attr in claims:
            assert f"its {attr} `{claims[attr].__name__}`" in text, text


@pytest.mark.parametrize(
    "forward, claims",
    [
        (fv.flex_alibi_wrong_sign, dict(score_mod=fv.alibi)),
        (fv.flex_softcap_wrong_sign, dict(score_mod=fv.softcap, score_mod_roundings=7)),
    ],
    ids=["alibi", "softcap"],
)
def test_score_mod_with_the_wrong_sign_fails(forward, claims):
    result = _check(forward, dtypes=("float32",), **claims)
    failed = {r.property_id for r in result.failed}
    assert failed == {"flex-score-mod"}, _statuses(result)
    assert all("EXCEED" in r.reason or "> bound" in r.reason for r in result.failed)


@pytest.mark.parametrize(
    "forward, mask_mod, block_mask, why",
    [
        (fv.flex_document, fv.document, fv.document_block_mask_wrong_size, "dropped"),
        (fv.flex_window, fv.sliding_window, fv.window_block_mask_all_full, "listed full"),
    ],
    ids=["wrong-block-size", "all-full"],
)
def test_faulty_block_mask_fails(forward, mask_mod, block_mask, why):
    result = _check(forward, dtypes=("float32",), mask_mod=mask_mod, block_mask=block_mask)
    status = _statuses(result)
    assert status == {("flex-score-mod", "float32"): "pass", ("flex-block-mask", "float32"): "fail"}
    assert all(why in r.reason for r in result.failed), [r.reason for r in result.failed]


def test_block_mask_problems_directly():
    """The token grid of a BlockMask: torch's own is exact; reused at half its block size it
    drops the keys of documents that cross a 32-boundary; all blocks listed full show keys
    across the window's edge."""
    from verify.spec.flex import block_mask_problems

    T = 130
    assert block_mask_problems(fv.document_block_mask(1, 1, T, T), fv.document, 1, 1, T, T) == []
    bad = block_mask_problems(
        fv.document_block_mask_wrong_size(1, 1, T, T), fv.document, 1, 1, T, T
    )
    assert len(bad) == 1 and "dropped" in bad[0] and "(32, 32)" in bad[0], bad
    full = fv.window_block_mask_all_full(1, 1, T, T)
    bad = block_mask_problems(full, fv.sliding_window, 1, 1, T, T)
    assert any("listed full" in p for p in bad), bad
    # a BlockMask carrying another mask_mod than the claim's
    other = fv.window_block_mask(1, 1, T, T)
    assert any("own mask_mod" in p for p in block_mask_problems(other, fv.document, 1, 1, T, T))


def test_propagation_holds_on_float32_softcap_and_refuses_non_monotone_maps():
    """The endpoint bound (verify.spec.flex.propagate) contains the error of float32's softcap
    of float32-rounded scores; with the map's own roundings dropped (K = 0) it does not; a map
    that is not monotone on an error interval is not applicable."""
    import torch

    from derivations.rounding import unit_roundoff
    from verify.spec.flex import propagate
    from verify.spec.results import NotApplicable

    rng = np.random.default_rng(0)
    x = rng.uniform(-6, 6, size=(1, 2, 64, 64))
    u = unit_roundoff("float32")
    x32 = torch.from_numpy(x).float()
    e_x = np.abs(x32.double().numpy() - x)
    got = (fv.CAP * torch.tanh(x32 / fv.CAP)).double().numpy()
    exact = fv.CAP * np.tanh(x / fv.CAP)
    err = np.abs(got - exact)
    _, e = propagate(fv.softcap, x, e_x, u, SOFTCAP_ROUNDINGS)
    assert (err <= e).all(), float((err / e).max())
    _, e0 = propagate(fv.softcap, x, e_x, u, 0)
    assert (err > e0).any()  # the twin: the map's own roundings are needed

    def wiggle(score, b, h, q_idx, kv_idx):
        return torch.sin(8 * score)

    with pytest.raises(NotApplicable, match="monotone"):
        propagate(wiggle, x, np.full_like(x, 0.5), u, 2)


def test_claims_are_validated_and_loaded_from_specs():
    from verify.spec.variant import AttentionVariant, claims_json

    v = AttentionVariant(
        "x",
        fv.flex_softcap,
        score_mod_spec="flex_variants:softcap",
        mask_mod_spec="flex_variants:document",
    )
    assert v.score_mod is fv.softcap and v.mask_mod is fv.document
    assert v.kernel == "softmax" and "kernel" in v.declared
    assert claims_json(v)["score_mod"] == "flex_variants:softcap"
    with pytest.raises(ValueError, match="score_mod_spec"):
        AttentionVariant("x", fv.flex_softcap, score_mod_spec="flex_variants:no_such_mod")
    with pytest.raises(ValueError, match="score_mod_roundings"):
        AttentionVariant("x", fv.flex_softcap, score_mod=fv.softcap, score_mod_roundings=-1)
    with pytest.raises(ValueError, match="softcap"):
        AttentionVariant("x", fv.flex_softcap, score_mod=fv.softcap, softcap=2.0)
    with pytest.raises(ValueError, match="block_mask"):
        AttentionVariant("x", fv.flex_window, block_mask=fv.window_block_mask)


def test_command_line_options_claim_the_specs():
    import argparse

    from verify.cli.options import add_claim_options, claims_from

    p = argparse.ArgumentParser()
    add_claim_options(p.add_argument)
    args = p.parse_args(["--score-mod", "m:f", "--mask-mod", "m:g", "--score-mod-roundings", "5"])
    claims = claims_from(lambda dest: getattr(args, dest))
    assert claims["score_mod_spec"] == "m:f" and claims["mask_mod_spec"] == "m:g"
    assert claims["score_mod_roundings"] == 5


def test_structural_bound_of_a_flex_call_covers_retiled_scores(monkeypatch):
    """Eager flex at two lengths (a prefix) computes the same rows' scores under other tilings;
    at scores near -1e5 (the extreme-scores case, |q_0| = |k_0| = 447.2) each rounds by ~1e-11,
    so the rows differ by ~4e-12 where the kernel-free threshold (identical weights) allows
    1.2e-14: the default check failed this correct call (prefix-invariance, ratio 294). The
    structural bound now takes flex-score-mod's model (D10 with the mask_mod's visibility)."""
    import torch

    from verify.adapters.flex import document_window_variant
    from verify.properties import dependence
    from verify.properties.support import structure
    from verify.properties.support.base import RunContext
    from verify.properties.support.common import Example
    from verify.strategies import AttentionInputs, Shape

    gen = torch.Generator().manual_seed(3)
    B, H, T, d = 2, 2, 10, 4
    q, k = (torch.randn(B, H, T, d, generator=gen, dtype=torch.float64) for _ in range(2))
    q[..., 0], k[..., 0] = 447.21359549995793, -447.21359549995793
    v = torch.randn(B, H, T, 1, generator=gen, dtype=torch.float64)
    x = AttentionInputs(
        q=q,
        k=k,
        v=v,
        causal=True,
        scale=None,
        radius=None,
        shape=Shape(B=B, H=H, T=T, S=T, d=d, d_v=1),
        case="extreme_scores",
    )
    ex = Example(x, {"prefix": 8, "path": "forward", "denominator": "sum"})
    variant, ctx = document_window_variant(), RunContext(dtype="float64")
    obs = dependence._prefix_check(variant, ex, ctx)
    assert obs.observed <= obs.bound, obs
    monkeypatch.setattr(structure, "_flex_model_bound", lambda *a, **kw: None)
    obs = dependence._prefix_check(variant, ex, ctx)
    assert obs.observed > obs.bound, obs  # the kernel-free threshold alone fails it
