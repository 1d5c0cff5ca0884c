"""Decode paths (verify.spec.decode, verify.properties.decode_paths; D20).

Every correct decode path in ``tests/decode_variants.py`` -- a softmax KV cache with per-row
``cache_seqlens``, a static cache with ``capacity``, a windowed cache, a rolling buffer, a
recurrent linear attention and a delta rule that no kernel claim names -- passes every decode
property that applies to it; each faulty twin fails the property that names its path (a cache
off by one position: ``decode-steps``; attending unused zero slots: ``decode-capacity``; the
window forgotten on single-token steps: ``decode-window``; rows written at the first row's
position: ``decode-batch-rows``; a recurrent decode ignoring its scale: ``decode-steps`` and
``decode-resume``). The bound of each comparison is D11's kernel-free threshold (or twice the
claim's D10 bound), never a tolerance chosen here. The protocol's loading and the README's
KV-cache example (``tests/kv_cache_example.py``, run through ``attn-theory check``) are
tested too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import decode_variants as dv  # noqa: E402

DECODE = (
    "decode-steps",
    "decode-resume",
    "decode-multi-token",
    "decode-batch-rows",
    "decode-capacity",
    "decode-unused-slots",
    "decode-window",
)
WINDOW = {"window": (dv.LEFT, 0)}

#: name -> (forward, decode path, claims, the decode properties that must pass)
CORRECT = {
    "kv_cache": (dv.softmax_forward, dv.kv_cache, {}, DECODE[:6]),
    "static_cache": (dv.softmax_forward, dv.static_cache, {}, DECODE[:5]),
    "window_cache": (dv.window_forward, dv.window_cache, WINDOW, DECODE),
    "rolling_cache": (dv.window_forward, dv.rolling_cache, WINDOW, (*DECODE[:4], DECODE[6])),
    "linear_decode": (dv.linear_forward, dv.linear_decode, {}, DECODE[:4]),
    "delta_decode": (dv.delta_forward, dv.delta_decode, {"causal": "yes"}, DECODE[:4]),
}

#: twin -> (forward, decode path, claims, the property that names its path, its correct twin)
TWINS = {
    "kv_cache_off_by_one": (
        dv.softmax_forward,
        dv.kv_cache_off_by_one,
        {},
        "decode-steps",
        "kv_cache",
    ),
    "static_cache_zero_slots": (
        dv.softmax_forward,
        dv.static_cache_zero_slots,
        {},
        "decode-capacity",
        "static_cache",
    ),
    "window_cache_tq1": (
        dv.window_forward,
        dv.window_cache_tq1,
        WINDOW,
        "decode-window",
        "window_cache",
    ),
    "kv_cache_batch_position": (
        dv.softmax_forward,
        dv.kv_cache_batch_position,
        {},
        "decode-batch-rows",
        "kv_cache",
    ),
    "linear_decode_ignores_scale": (
        dv.linear_forward,
        dv.linear_decode_ignores_scale,
        {},
        "decode-resume",
        "linear_decode",
    ),
}


def _check(forward, decode, claims, select, *, max_examples=4):
    from verify.engine import check as engine
    from verify.spec.variant import AttentionVariant

    variant = AttentionVariant(name="decode", forward=forward, decode=decode, **claims)
    return engine.check(
        variant, select=list(select), isolate=False, probe=False, max_examples=max_examples
    )


def _status(result) -> dict[tuple[str, str], str]:
    return {(r.property_id, r.dtype): r.status for r in result.results}


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_paths_pass(name):
    forward, decode, claims, passing = CORRECT[name]
    result = _check(forward, decode, claims, DECODE)
    status = _status(result)
    assert not result.failed, [(r.property_id, r.reason[:300]) for r in result.failed]
    for prop in passing:
        for dtype in ("float64", "float32"):
            assert status[(prop, dtype)] == "pass", (prop, dtype, status)
    # a property the path cannot be asked for skips with the reason, never passes vacuously
    for r in result.results:
        if r.property_id not in passing:
            assert r.status == "skip" and r.reason, (r.property_id, r.status)


@pytest.mark.parametrize("name", sorted(TWINS))
def test_each_twin_fails_the_property_naming_its_path(name):
    forward, decode, claims, prop, correct = TWINS[name]
    result = _check(forward, decode, claims, (prop,))
    failed = {r.property_id for r in result.failed}
    assert failed == {prop}, _status(result)
    assert all("bound" in r.reason for r in result.failed)
    assert prop in CORRECT[correct][3]  # and the correct twin passes it (above)


def test_a_step_reading_one_cache_block_fails_on_a_long_example():
    """A decode step that reads only the first 64-key block of its cache agrees with the
    forward on every short sequence; the long examples of decode-steps, decode-resume and
    decode-multi-token (a cache past a block with a last partial block, the last tokens
    stepped, resumed or decoded several at a time) catch it; the correct cache passes them."""
    props = ("decode-steps", "decode-resume", "decode-multi-token", "decode-batch-rows")
    bad = _check(dv.softmax_forward, dv.kv_cache_one_block, {}, props)
    assert {r.property_id for r in bad.results} == set(props)
    for r in bad.results:
        assert r.status == "fail" and r.reason.startswith("on a long example"), (
            r.property_id, r.dtype, r.reason
        )  # fmt: skip
    good = _check(dv.softmax_forward, dv.kv_cache, {}, props)
    for r in good.results:
        assert r.status == "pass" and r.examples > 4, (r.property_id, r.dtype, r.status)


def test_a_rolling_buffer_whose_positions_wrap_fails_decode_window_on_a_long_example():
    """Position ids kept in int8 wrap past 127: every short sequence decodes right; the long
    examples of decode-window (the buffer wrapping many times past a 64-key block) catch it;
    the correct rolling buffer passes them."""
    # 24 examples: the capped run's three long examples (one per 8 regular ones)
    bad = _check(dv.window_forward, dv.rolling_cache_int8_positions, WINDOW, ("decode-window",),
                 max_examples=24)  # fmt: skip
    assert bad.results and all(
        r.status == "fail" and r.reason.startswith("on a long example") for r in bad.results
    ), _status(bad)
    good = _check(dv.window_forward, dv.rolling_cache, WINDOW, ("decode-window",), max_examples=24)
    assert all(r.status == "pass" and r.examples > 4 for r in good.results), _status(good)


def test_the_ignored_scale_fails_single_steps_too():
    forward, decode, claims, _, _ = TWINS["linear_decode_ignores_scale"]
    result = _check(forward, decode, claims, ("decode-steps",))
    assert {r.property_id for r in result.failed} == {"decode-steps"}


# --------------------------------------------------------------------------- bfloat16

#: the softmax caches and twins checked in bfloat16 with the kernel claimed (the bound: twice
#: the claim's bf16 D10 model; the kernel-free threshold does not hold there)
#: (one of each runs by default; the rest, 10-70 s each on 2 cores, with ``-m slow``)
BF16_CORRECT = ("kv_cache", pytest.param("window_cache", marks=pytest.mark.slow),
                pytest.param("rolling_cache", marks=pytest.mark.slow))  # fmt: skip
BF16_TWINS = ("kv_cache_off_by_one",
              pytest.param("kv_cache_batch_position", marks=pytest.mark.slow),
              pytest.param("window_cache_tq1", marks=pytest.mark.slow))  # fmt: skip


def _check_bf16(forward, decode, claims, select):
    from verify.engine import check as engine
    from verify.spec.variant import AttentionVariant

    variant = AttentionVariant(name="decode", forward=forward, decode=decode, **claims)
    return engine.check(variant, select=list(select), dtypes=("bfloat16",), isolate=False,
                        probe=False, max_examples=4)  # fmt: skip


@pytest.mark.parametrize("name", BF16_CORRECT)
def test_softmax_caches_pass_in_bfloat16_with_the_kernel_claimed(name):
    forward, decode, claims, passing = CORRECT[name]
    result = _check_bf16(forward, decode, {**claims, "kernel": "softmax"}, passing)
    status = _status(result)
    assert all(status[(p, "bfloat16")] == "pass" for p in passing), status


@pytest.mark.parametrize("name", BF16_TWINS)
def test_decode_twins_fail_in_bfloat16(name):
    forward, decode, claims, prop, _ = TWINS[name]
    result = _check_bf16(forward, decode, {**claims, "kernel": "softmax"}, (prop,))
    assert {r.property_id for r in result.failed} == {prop}, _status(result)


def test_unknown_kernel_path_in_bfloat16_skips_naming_the_claim():
    """No kernel: no two-evaluation bound in bf16 -- a skip that says to claim the kernel,
    decided before any draw (never a pass)."""
    forward, decode, claims, passing = CORRECT["kv_cache"]
    result = _check_bf16(forward, decode, claims, passing)
    assert {r.status for r in result.results} == {"skip"}
    assert all("--kernel" in r.reason and r.examples == 0 for r in result.results)


# --------------------------------------------------------------------------- the protocol


def test_protocol_reads_optional_keywords():
    from verify.spec.decode import DecodeAPI, as_decode

    assert as_decode(dv.kv_cache).keywords == ("cache_seqlens",)
    assert as_decode(dv.static_cache).keywords == ("capacity",)
    assert as_decode(dv.rolling_cache).keywords == ()
    declared = DecodeAPI(dv.rolling_cache.prefill, dv.rolling_cache.step, capacity=True)
    assert declared.keywords == ("capacity",)
    assert as_decode(dv.DeltaDecode).keywords == ()  # a class is built with no arguments


def test_protocol_rejects_bad_paths():
    from verify.spec.decode import DecodeAPI, load_decode
    from verify.spec.variant import AttentionVariant

    with pytest.raises(TypeError, match="step"):
        DecodeAPI(dv.kv_cache.prefill, 3)
    with pytest.raises(ValueError, match="decode_spec"):
        load_decode("decode_variants:softmax_forward")  # a function: no prefill/step
    with pytest.raises(ValueError, match="decode_spec"):
        load_decode("no_such_module_here:cache")
    with pytest.raises(TypeError, match="decode"):
        AttentionVariant(name="x", forward=dv.softmax_forward, decode=object())
    with pytest.raises(ValueError, match="packed_spec"):
        AttentionVariant(name="x", forward=dv.softmax_forward, packed_spec="decode_variants:LEFT")


def test_module_path_with_both_functions(tmp_path, monkeypatch):
    from verify.spec.decode import load_decode

    (tmp_path / "mydecode.py").write_text(
        "from decode_variants import kv_cache\nprefill, step = kv_cache.prefill, kv_cache.step\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    api = load_decode("mydecode")
    assert api.prefill == dv.kv_cache.prefill and api.keywords == ("cache_seqlens",)


def test_decode_spec_travels_to_workers():
    """``decode_spec`` is a claim field: a worker rebuilding the variant from its import spec
    loads the same path."""
    from verify.spec.variant import CLAIM_FIELDS, AttentionVariant

    assert "decode_spec" in CLAIM_FIELDS and "packed_spec" in CLAIM_FIELDS
    v = AttentionVariant(
        name="x", forward=dv.softmax_forward, decode_spec="decode_variants:kv_cache"
    )
    assert v.decode.prefill == dv.kv_cache.prefill and "decode_spec" in v.declared


# --------------------------------------------------------------------------- the README


def _readme_decode_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Decode paths and packed sequences") :]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_example_is_the_tested_file():
    assert _readme_decode_example() == (ROOT / "tests" / "kv_cache_example.py").read_text()


def test_readme_example_passes_through_the_command_line():
    """``attn-theory check kv_cache_example:attention --kernel softmax --decode
    kv_cache_example:cache`` on the decode properties: exit 0, each one passed."""
    import json
    import os
    import subprocess

    env = dict(os.environ, ATTN_THEORY_PROFILE="ci")
    proc = subprocess.run(
        [sys.executable, "-m", "verify.cli", "check", "kv_cache_example:attention"]
        + ["--kernel", "softmax", "--decode", "kv_cache_example:cache", "--json", "-"]
        + ["--select", *DECODE[:4]],
        cwd=ROOT / "tests",
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["claims"]["decode"] == "kv_cache_example:cache"
    ran = {(r["property_id"], r["status"]) for r in doc["results"]}
    assert ran == {(p, "pass") for p in DECODE[:4]}


# --------------------------------------------------------------------------- unknown recurrences


def test_rows_without_one_eps_are_not_called_sum_plus_eps():
    """The normalization probe calls D/(D + eps) only when one eps explains every row: a
    variant whose duplicated rows look like it but whose other rows need another eps (an exp
    kernel: kappa(q, 0) = 1 on every row) gets no eps and no normalization suggested (before,
    the median eps was taken)."""
    from verify import probes
    from verify.spec.variant import AttentionVariant

    report = probes.probe(AttentionVariant(name="e", forward=dv.row_eps_softmax, causal="yes"))
    assert report.normalization["eps_consistent"] is False, report.normalization
    assert "no single eps" in report.normalization["detail"]
    claims = probes.suggested_claims(report)
    assert "eps" not in claims and "normalized" not in claims


def test_declared_unnormalized_is_never_overwritten():
    from verify.probes.findings import merge
    from verify.spec.variant import AttentionVariant

    v = AttentionVariant(name="d", forward=dv.delta_forward, causal="yes", normalized=False)
    m = merge(v, {"normalized": True, "kernel": "unknown"})
    assert m.variant.normalized is False and m.kept["normalized"] == (False, True)


def test_kernel_unknown_delta_rule_passes_unnormalized():
    """A delta rule S_t = S_{t-1} + beta (v_t - S_{t-1} k_t) k_t^T, o_t = S_t q_t, with its
    decode path and no kernel claimed: the probes (run) find no known kernel and no sum
    normalization, and with normalized=False declared the whole battery passes -- the
    structural properties on D11's kernel-free threshold, the decode properties included."""
    from verify.engine import check as engine
    from verify.spec.variant import AttentionVariant

    v = AttentionVariant(
        name="delta",
        forward=dv.delta_forward,
        decode=dv.delta_decode,
        causal="yes",
        normalized=False,
    )
    result = engine.check(v, isolate=False, max_examples=6)
    assert result.exit_code == 0, [(r.property_id, r.reason[:300]) for r in result.failed]
    assert result.variant.normalized is False and result.variant.kernel == "unknown"
    passed = {r.property_id for r in result.results if r.status == "pass"}
    assert {"causality", "prefix-invariance", "decode-steps", "decode-resume"} <= passed


def test_pytest_plugin_takes_the_decode_path():
    """``pytest --attn-variant ... --attn-decode ...``: one item per decode property, passing."""
    import os
    import subprocess

    env = dict(os.environ, ATTN_THEORY_PROFILE="ci")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q"]
        + ["--attn-variant", "kv_cache_example:attention", "--attn-kernel", "softmax"]
        + ["--attn-decode", "kv_cache_example:cache", "--attn-select", "decode-steps"]
        + ["--attn-select", "decode-resume", "-rA", "kv_cache_example.py"],
        cwd=ROOT / "tests",
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "kv_cache_example.py::attention::decode-steps" in proc.stdout
    assert "2 passed" in proc.stdout
