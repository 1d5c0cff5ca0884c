"""The path adapters (verify.adapters.hf_cache, fla_paths, flex): released decode, packed and
FlexAttention code passes the properties that name its path, and each published defect class
emulated on top of it (``tests/path_release_variants.py``) fails exactly that property while its
fix passes it.

Every comparison's bound is the checker's own (D11's kernel-free threshold or twice the claim's
D10 bound for decode and packed rows, D10 with D16's propagation for a score_mod, exact counts
for isolation and BlockMasks); nothing here sets a tolerance. Small example budgets keep the file
short: each twin's property draws its failing case within them (the derandomized draws of the
ci profile).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import path_release_variants as prv  # noqa: E402

#: examples per property and dtype
EXAMPLES = 3
NEW_MODULES = ("hf_cache", "fla_paths", "flex")
#: package (import name) each twin's adapter needs
NEEDS = {"hf_cache": "transformers", "fla_paths": "fla", "flex": "torch"}


def _needs(build) -> None:
    """Skip the test when the adapter behind ``build`` has no package (its factory's
    ImportError, as the other adapters' tests skip)."""
    try:
        build()
    except ImportError as exc:
        pytest.skip(f"adapter package missing: {exc}")


def _run(variant, props, dtypes=("float64",), examples=EXAMPLES):
    import torch

    from verify.engine import check as engine

    torch.set_num_threads(1)
    res = engine.check(
        variant, select=list(props), dtypes=dtypes, isolate=False, probe=False,
        max_examples=examples,
    )  # fmt: skip
    return {(r.property_id, r.dtype): r for r in res.results}


# -- registration -------------------------------------------------------------------------------
def test_path_modules_are_registered_with_requirements():
    from verify.adapters import ADAPTERS, MODULES, REQUIRES, module_of

    for key in NEW_MODULES:
        assert key in MODULES and key in REQUIRES
        assert MODULES[key].VARIANTS, key
        for name, spec in MODULES[key].VARIANTS.items():
            assert ADAPTERS[name] == spec and module_of(name) == key
            assert spec.startswith(f"verify.adapters.{key}:")


def test_importing_the_path_adapters_does_not_import_the_packages():
    import subprocess

    code = (
        "import sys, verify.adapters.hf_cache, verify.adapters.fla_paths, verify.adapters.flex; "
        "print([m for m in ('transformers', 'fla') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- the released code passes its paths --------------------------------------------------------
#: card -> (factory, the path properties checked here besides those its twins' fixes pass)
RELEASED = {
    "hf-dynamic-cache": (
        prv.hf_dynamic_cache, ("decode-steps", "decode-multi-token", "packed-isolation")
    ),
    "hf-sliding-window-cache": (prv.hf_sliding_window_cache, ("decode-steps", "decode-window")),
    "fla-naive_recurrent_gated_delta_product": (
        prv.fla_delta_product,
        ("decode-resume", "decode-batch-rows", "decode-unused-slots", "packed-documents"),
    ),
    "fla-naive_attn_decoding-window": (prv.fla_attn_decoding, ("decode-unused-slots",)),
    "torch-flex-softcap-alibi": (prv.flex_softcap_alibi, ("packed-documents",)),
    "torch-flex-document-window": (prv.flex_document_window, ("flex-score-mod",)),
}  # fmt: skip


@pytest.mark.thirdparty
@pytest.mark.parametrize("name", sorted(RELEASED))
def test_released_paths_pass(name):
    build, props = RELEASED[name]
    _needs(build)
    variant = build()
    assert variant.name == name
    runs = _run(variant, props)
    for prop in props:
        r = runs[(prop, "float64")]
        assert r.status == "pass", (prop, r.status, r.reason)
        assert r.examples > 0 and r.max_ratio is not None and r.max_ratio <= 1.0


def test_a_path_without_a_backward_is_checked_forward_only_when_declared(no_shrink):
    """Eager flex on CPU refuses gradients: declared (``differentiable=False``, what the adapter
    measures), packed-isolation checks its forward statement and says the gradient statement
    was not checked, and the gradient properties skip with the reason; undeclared, the refusal
    is the variant's failure of packed-isolation, gradcheck and gradients-vs-reference (not an
    input left out as outside its domain)."""
    _needs(prv.flex_softcap_alibi)
    from verify.adapters import flex

    if flex.grad_refusal() is None:
        pytest.skip("this torch build has a CPU backward for flex_attention")
    declared = prv.flex_softcap_alibi()
    assert declared.differentiable is False
    props = ("packed-isolation", "gradients-vs-reference", "gradient-identities")
    runs = _run(declared, props)
    iso = runs[("packed-isolation", "float64")]
    assert iso.status == "pass" and iso.examples > 0, (iso.status, iso.reason)
    assert "gradient statement not checked" in str(iso.to_json()), iso.to_json()
    for prop in props[1:]:
        r = runs[(prop, "float64")]
        assert r.status == "skip" and "not differentiable" in r.reason, (prop, r.reason)
    undeclared = declared.with_claims(differentiable=True)
    from verify.render.check import look_at

    runs = _run(undeclared, ("packed-isolation", "gradcheck", "gradients-vs-reference"))
    for prop in ("packed-isolation", "gradcheck", "gradients-vs-reference"):
        r = runs[(prop, "float64")]  # failed, not skipped as an input outside the domain
        assert r.status == "fail" and "NotImplementedError" in r.reason, (prop, r.reason)
        hint = look_at(prop, undeclared, (r.reason,))
        assert "--not-differentiable" in hint and "by design" in hint, (prop, hint)


# -- each published defect class fails the property naming its path; its fix passes ------------
@pytest.mark.thirdparty
@pytest.mark.parametrize("twin", prv.TWINS, ids=[t.name for t in prv.TWINS])
def test_defect_fails_its_path_and_the_fix_passes(twin):
    _needs(twin.fix)
    bad = _run(twin.build(), (twin.prop,), examples=twin.examples)[(twin.prop, "float64")]
    assert bad.status == "fail", (twin.name, bad.status, bad.reason)
    assert bad.counterexample, "a failure must come with a counterexample"
    good = _run(twin.fix(), (twin.prop,), examples=twin.examples)[(twin.prop, "float64")]
    assert good.status == "pass", (twin.name, good.status, good.reason)
    assert good.examples > 0


@pytest.mark.thirdparty
def test_hf_static_sliding_layer_hides_its_warm_up_slots():
    """transformers 5.23's StaticSlidingWindowLayer returns all W slots with kv_length = W while
    the cache fills (the premise of PR 45940): the causal mask hides the zero slots, so the
    released layer passes decode-capacity (the hf-sliding-window-cache card's capacity path)."""
    _needs(prv.hf_sliding_window_cache)
    from verify.adapters.hf_cache import HFCacheDecode

    dec = HFCacheDecode(prv.W)
    cache = dec.new_cache(8)
    assert type(cache.layers[0]).__name__ == "StaticSlidingWindowLayer"
    assert cache.layers[0].max_cache_len == prv.W
    r = _run(prv.hf_sliding_window_cache(), ("decode-capacity",))[("decode-capacity", "float64")]
    assert r.status == "pass", r.reason


@pytest.mark.thirdparty
def test_the_rolled_buffer_defect_drops_token_zero_and_keeps_a_zero_slot():
    """What the emulated early roll does to the buffer (the issue's own description): after W
    single tokens the W slots hold tokens 1 .. W - 2, a zero slot and token W - 1."""
    _needs(prv.hf_sliding_window_cache)
    import torch

    dec = prv._rolls_early_decode()
    cache = dec.new_cache(None)
    for t in range(1, prv.W + 1):
        x = torch.full((1, 1, 1, 1), float(t), dtype=torch.float64)
        dec.attend(cache, x, x, x)
    keys = cache.layers[0].keys.flatten().tolist()
    assert keys == [*range(2, prv.W), 0.0, float(prv.W)], keys


# -- cards' facts -------------------------------------------------------------------------------
@pytest.mark.thirdparty
@pytest.mark.parametrize("key", NEW_MODULES)
def test_card_facts_are_json(key):
    import json

    from verify.adapters import MODULES
    from verify.spec.target import as_variant

    module = MODULES[key]
    for name, spec in module.VARIANTS.items():
        _needs(lambda spec=spec: as_variant(spec))
        facts = module.card_facts(name, quick=True, isolate=False)
        assert json.loads(json.dumps(facts)) == facts
    with pytest.raises(KeyError):
        module.card_facts("no-such-card")


@pytest.mark.thirdparty
def test_measured_facts_read_what_the_libraries_document():
    """transformers' DynamicSlidingWindowLayer keeps the last W - 1 tokens ("Only cache the
    last `self.sliding_window - 1` tokens"), its static layer min(W, max_cache_len) slots; fla's
    reference casts q, k, v, beta but not g; eager flex multiplies every masked weight (0) by
    the value row, so one NaN or inf value reaches every row that masks it (T - 1 of T)."""
    _needs(prv.hf_sliding_window_cache)
    _needs(prv.fla_delta_product)
    from verify.adapters import fla_paths, flex, hf_cache

    rows = hf_cache.cache_layers()["hf-sliding-window-cache"]
    n = 2 * prv.W + 1
    assert rows["dynamic"]["slots_after_T_tokens"] == [min(t, prv.W - 1) for t in range(1, n + 1)]
    assert rows["static (capacity 8)"]["slots_after_T_tokens"] == [prv.W] * n
    dt = fla_paths.float64_dtypes()
    assert dt["state dtype (g float64)"] == "float64" and dt["state dtype (g float32)"] == "float32"
    assert dt["outputs_are_float32_numbers"] is True
    assert flex.masked_nonfinite_leak(T=8) == {"nan": 7, "inf": 7}


def test_every_softmax_card_also_runs_bfloat16():
    """The kernels people run in bf16 are checked in bf16 on their cards (the flex, cache and
    decoding cards ran float64/float32 only): every card whose adapter claims the softmax
    kernel lists bfloat16 among its card dtypes. Cards whose package is missing are skipped."""
    from verify.adapters import ADAPTERS, CARDS
    from verify.adapters.card_settings import card_dtypes
    from verify.spec.imports import load_spec

    seen, missing = [], []
    for name in CARDS:
        try:
            variant = load_spec(ADAPTERS[name])()
        except ImportError:
            missing.append(name)
            continue
        if variant.kernel == "softmax":
            seen.append(name)
            assert "bfloat16" in card_dtypes(variant), name
    if not seen:
        pytest.skip(f"no softmax adapter's package is installed ({missing})")


def test_a_block_local_alibi_in_flex_fails_flex_score_mod_on_a_long_example():
    """An ALiBi distance taken from block-local indices (q_idx % 128, kv_idx % 128) is right on
    every short sequence; flex-score-mod's long examples (past flex's 128-key block, against
    the float64 reference) catch it, in float32 and bf16; the correct score_mod passes them."""
    _needs(prv.flex_softcap_alibi)
    dtypes = ("float32", "bfloat16")
    bad = _run(prv.flex_alibi_block_local(), ["flex-score-mod"], dtypes, examples=10)
    assert [r.status for r in bad.values()] == ["fail", "fail"], [r.reason for r in bad.values()]
    assert all(r.reason.startswith("on a long example") for r in bad.values()), bad
    good = _run(prv.flex_softcap_alibi(), ["flex-score-mod"], dtypes, examples=10)
    assert all(r.status == "pass" and r.examples == 11 for r in good.values()), good
