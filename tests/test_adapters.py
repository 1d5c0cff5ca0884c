"""Third-party adapters (verify.adapters): they build, the battery gives the expected verdicts on
a few properties, and the card writer is deterministic.

Expected verdicts come from the implementations' sources (fla-core 0.6, performer-pytorch 1.1.4,
torch 2.13), not from the code under test: SDPA is exact softmax (oracle-agreement passes);
naive_recurrent_linear_attn computes in float32 (fails the float64 bound, passes float32);
naive_chunk_based needs T to be a multiple of its chunk size; TaylorFeatureMap realizes
kappa_2(q.k/sqrt(d)); RebasedFeatureMap realizes (q.k)^2/d; performer adds 1e-4 to every feature
and samples its orthogonal blocks with an unsigned QR.
"""

from __future__ import annotations

import math

import pytest
import torch

import verify
from verify.adapters import ADAPTERS, MODULES, module_of
from verify.spec.target import as_variant
from verify.spec.variant import AttentionVariant

torch.set_num_threads(1)

SMOKE = dict(profile="ci", max_examples=4, isolate=False, seed=0)


def _fla():
    return pytest.importorskip("fla.ops.based.naive", reason="fla-core (with triton) not installed")


def _performer():
    return pytest.importorskip("performer_pytorch", reason="performer-pytorch not installed")


def _status(result, prop, dtype="float64"):
    (r,) = [r for r in result.results if r.property_id == prop and r.dtype == dtype]
    return r


# -- building -----------------------------------------------------------------------------------
def test_sdpa_adapter_builds_with_its_conventions():
    from verify.adapters.sdpa import sdpa_variant

    v = sdpa_variant()
    assert isinstance(v, AttentionVariant)
    assert (v.kernel, v.causal, v.causal_alignment) == ("softmax", "both", "top-left")
    assert v.exp_library == "cpu-torch-exp_u20" and v.supports_mask


@pytest.mark.thirdparty
def test_fla_adapters_build():
    _fla()
    from verify.adapters import fla

    expected = {
        "parallel_based_variant": ("taylor:2", "BHTD", 1e-6, 1),
        "chunk_based_variant": ("taylor:2", "BHTD", 1e-6, fla.CHECK_CHUNK),
        "chunk_based_default_variant": ("taylor:2", "BHTD", 1e-6, 256),
        "recurrent_linear_normalized_variant": ("linear:identity", "BTHD", 1e-10, 1),
        "recurrent_linear_unnormalized_variant": ("linear:identity", "BTHD", 0.0, 1),
        "taylor_feature_map_variant": ("linear:taylor:2", "BHTD", 0.0, 1),
        "rebased_feature_map_variant": ("unknown", "BHTD", 0.0, 1),
    }
    for factory, (kernel, layout, eps, mult) in expected.items():
        v = getattr(fla, factory)()
        assert (v.kernel, v.layout, v.eps, v.length_multiple) == (kernel, layout, eps, mult)


@pytest.mark.thirdparty
def test_performer_adapters_build_with_fixed_directions():
    _performer()
    from verify.adapters import performer

    for factory, causal in ((performer.noncausal_variant, "no"), (performer.causal_variant, "yes")):
        v = factory()
        assert v.kernel == "linear:favor" and v.causal == causal
        p1 = v.projection(3, torch.float64, "cpu")
        p2 = v.projection(3, torch.float64, "cpu")
        assert p1.shape == (performer.NB_FEATURES, 3) and torch.equal(p1, p2)


@pytest.mark.thirdparty
def test_every_adapter_spec_resolves():
    _fla()
    _performer()
    for name, spec in ADAPTERS.items():
        v = as_variant(spec)
        assert v.name == name


def test_adapters_are_the_modules_variants_in_card_order():
    names = [n for m in MODULES.values() for n in m.VARIANTS]
    assert list(ADAPTERS) == names and names[0] == "torch-sdpa"
    assert all(ADAPTERS[n].startswith(f"verify.adapters.{module_of(n)}:") for n in names)
    with pytest.raises(KeyError, match="unknown adapter"):
        module_of("no-such-adapter")


def test_card_dtypes_follow_the_claims():
    from verify.adapters.card_settings import card_dtypes
    from verify.adapters.sdpa import sdpa_variant

    v = sdpa_variant()
    assert card_dtypes(v) == ("float64", "float32", "bfloat16", "float16")
    assert card_dtypes(v.with_claims(dtypes=("float64", "float32"))) == ("float64", "float32")
    no_fp16 = v.with_claims(dtypes=("float64", "float32", "bfloat16"))
    assert card_dtypes(no_fp16) == ("float64", "float32", "bfloat16")
    assert card_dtypes(v, quick=True) == ("float64",)


# -- smoke checks with expected verdicts --------------------------------------------------------
def _passes_oracle_agreement_and_causality_in_float64(target) -> None:
    props = ["oracle-agreement", "causality"]
    res = verify.check(target, dtypes=("float64",), select=props, **SMOKE)
    for prop in props:
        assert _status(res, prop).status == "pass", prop


def test_sdpa_passes_oracle_agreement_and_causality_in_float64():
    _passes_oracle_agreement_and_causality_in_float64("verify.adapters.sdpa:sdpa_variant")


@pytest.mark.thirdparty
def test_parallel_based_passes_with_its_declared_eps():
    _fla()
    from verify.adapters.fla import parallel_based_variant

    _passes_oracle_agreement_and_causality_in_float64(parallel_based_variant())


@pytest.mark.thirdparty
def test_chunk_based_restriction_is_found_by_the_probes():
    _fla()
    from verify import probes
    from verify.adapters.fla import CHUNK_SIZE, chunk_based_default_variant

    rep = probes.probe(chunk_based_default_variant())
    assert rep.lengths["multiple"] == CHUNK_SIZE
    assert rep.lengths["smallest_failing"] == 1
    assert probes.suggested_claims(rep)["length_multiple"] == CHUNK_SIZE


@pytest.mark.thirdparty
def test_chunk_based_small_chunk_agrees_with_the_oracle():
    _fla()
    from verify.adapters.fla import chunk_based_variant

    res = verify.check(
        chunk_based_variant(), dtypes=("float64",), select=["oracle-agreement"], **SMOKE
    )
    assert _status(res, "oracle-agreement").status == "pass"


@pytest.mark.thirdparty
def test_recurrent_linear_attn_computes_in_float32_as_declared():
    """fla casts to float32: declared (the adapter), float64 calls pass against float32 bounds;
    the same function claimed to compute in float64 fails oracle-agreement in float64."""
    _fla()
    from verify.adapters import fla

    declared = fla.recurrent_linear_unnormalized_variant()
    assert declared.compute_dtype == "float32"
    kw = dict(dtypes=("float64", "float32"), select=["oracle-agreement"], **SMOKE)
    res = verify.check(declared, **kw)
    assert {r.status for r in res.results} == {"pass"}, [(r.dtype, r.reason) for r in res.results]
    undeclared = verify.check(declared.with_claims(compute_dtype=None), **kw)
    r64 = _status(undeclared, "oracle-agreement", "float64")
    assert r64.status == "fail" and r64.counterexample
    assert _status(undeclared, "oracle-agreement", "float32").status == "pass"
    finding = fla.recurrent_float64_finding()
    assert all(v["outputs_are_float32_numbers"] for v in finding.values())


@pytest.mark.thirdparty
def test_feature_map_kernels_are_identified():
    _fla()
    from verify.adapters import fla

    k = fla.feature_map_kernels(pairs=200)
    u = 2.0**-53
    taylor = k["TaylorFeatureMap"]["max_relative_deviation"]
    rebased = k["RebasedFeatureMap"]["max_relative_deviation"]
    # a realized kernel matches to a few dozen unit roundoffs; the other candidate is off by O(1)
    assert taylor["kappa_2(x) = 1 + x + x^2/2"] < 64 * u and taylor["x^2"] > 0.1
    assert rebased["x^2"] < 64 * u and rebased["kappa_2(x) = 1 + x + x^2/2"] > 0.1
    assert k["TaylorFeatureMap"]["features_by_d"]["4"] == 1 + 4 + 10
    res = verify.check(
        fla.taylor_feature_map_variant(), dtypes=("float64",), select=["kernel-identity"], **SMOKE
    )
    assert _status(res, "kernel-identity").status == "pass"


@pytest.mark.thirdparty
def test_performer_differs_from_favor_only_by_its_feature_eps():
    pp = _performer().performer_pytorch
    from verify.adapters.performer import fast_attention
    from verify.attention import linear_attention

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    mod = fast_attention(4, causal=False)
    proj = mod.projection_matrix.to(torch.float64)
    favor = linear_attention(q, k, v, feature_map="favor", projection=proj)
    with torch.no_grad():
        out = mod(q, k, v)
        # performer's own pipeline with its 1e-4 feature constant set to 0
        fq = pp.softmax_kernel(q, projection_matrix=proj, is_query=True, eps=0.0)
        fk = pp.softmax_kernel(k, projection_matrix=proj, is_query=False, eps=0.0)
        no_eps = pp.linear_attention(fq, fk, v)
    scale = favor.abs().max().item()
    assert (out - favor).abs().max().item() > 1e-8 * scale  # far above float64 rounding
    assert (no_eps - favor).abs().max().item() < 1e-12 * scale  # the eps is the whole gap


@pytest.mark.thirdparty
def test_performer_causal_single_key_fails_only_through_its_denominator_constant():
    pp = _performer().performer_pytorch
    from verify.adapters import performer

    def constants_off(q, k, v, *, causal):
        proj = performer.fast_attention(q.shape[-1], causal=True).projection_matrix
        fq = pp.softmax_kernel(q, projection_matrix=proj, is_query=True, eps=0.0)
        fk = pp.softmax_kernel(k, projection_matrix=proj, is_query=False, eps=0.0)
        return pp.causal_linear_attention_noncuda(fq, fk, v, eps=0.0)

    default = performer.causal_variant()
    twin = default.with_claims(forward=constants_off, feature_map=None)
    kw = dict(dtypes=("float64",), select=["single-key"], **SMOKE)
    assert _status(verify.check(default, **kw), "single-key").status == "fail"
    assert _status(verify.check(twin, **kw), "single-key").status == "pass"


@pytest.mark.thirdparty
def test_performer_orthogonal_blocks_are_not_haar_distributed():
    _performer()
    from verify.adapters.performer import orthogonal_sign_bias

    # Haar: each fraction is 1/2 (P(all 200 draws negative) = 2^-200); performer's QR without
    # the sign(diag(R)) correction puts the first direction in a half-space every time
    frac = orthogonal_sign_bias(d=2, draws=200)["negative_diagonal_fraction"]
    assert frac[0] == 1.0
    with pytest.raises(ValueError, match="draws"):
        orthogonal_sign_bias(draws=0)


@pytest.mark.thirdparty
def test_performer_causal_leak_comes_from_the_key_maximum_and_its_constants():
    _performer()
    from verify.adapters.performer import causal_leak_evidence

    rows = {(r["feature_eps"], r["denominator_eps"]): r for r in causal_leak_evidence()}
    # performer's defaults: a later key changes earlier outputs far above float64 rounding
    assert rows[(1e-4, 1e-6)]["max_change_of_earlier_outputs"] > 1e-3
    # without the two constants the e^-M rescaling cancels exactly (rounding only)
    assert rows[(0.0, 0.0)]["max_change_of_earlier_outputs"] < 1e-12


@pytest.mark.thirdparty
def test_feature_count_experiment_error_shrinks():
    _performer()
    from verify.adapters.performer import feature_count_experiment

    exp = feature_count_experiment((16, 256), seeds=2, length=16, d=8)
    e16, e256 = (r["mean_error"] for r in exp["rows"])
    assert e256 < e16
    assert exp["slope"] < 0 and math.isfinite(exp["slope"])
    with pytest.raises(ValueError, match="feature_counts"):
        feature_count_experiment((16,))


# -- cards --------------------------------------------------------------------------------------
@pytest.mark.thirdparty
def test_cards_are_byte_identical_on_rerun(tmp_path):
    _fla()
    from verify.render.cards import build_cards

    names = ["torch-sdpa", "fla-naive_chunk_based"]
    first = build_cards(tmp_path / "a", quick=True, names=names, isolate=False)
    build_cards(tmp_path / "b", quick=True, names=names, isolate=False)
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == sorted(f"{n}.{ext}" for n in names for ext in ("md", "json"))
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    text = (tmp_path / "a" / "fla-naive_chunk_based.md").read_text()
    assert "smallest failing T = 1" in text and "multiple of 256" in text
    assert [d["variant"] for d in first] == names


def test_build_cards_rejects_unknown_names(tmp_path):
    from verify.render.cards import build_cards

    with pytest.raises(KeyError, match="unknown adapter"):
        build_cards(tmp_path, names=["no-such-adapter"])


def test_slow_first_names_committed_cards():
    """The cards started first (longest first) are cards the report builds: a renamed adapter
    would silently drop out of the ordering."""
    from verify.adapters import CARDS
    from verify.adapters.card_settings import SLOW_FIRST

    assert set(SLOW_FIRST) <= set(CARDS), set(SLOW_FIRST) - set(CARDS)
