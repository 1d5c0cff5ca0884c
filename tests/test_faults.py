"""Every fault class (``verify/spec/faults.py``) is caught: a deliberately faulty variant fails
the matching property of the catalogue, found from the property's own strategy (the fault
class's trigger is never handed to it), and the correct twin passes the same property.

The faulty variants and twins live in ``tests/faulty_variants.py`` (importable as
``tests.faulty_variants:<name>`` for ``attn-theory check``). Shrinking is switched off here
(the first failing example suffices to show the catch; shrinking costs tens of draws of large
examples and is exercised in the property tests).
"""

from __future__ import annotations

import faulty_variants as fv
import pytest

from verify.properties import catalogue
from verify.properties.support.base import RunContext, run_property

#: (fault class number, faulty variant, property id, dtype, examples of the twin's run, words
#: the failure reason must hold)
CASES = [
    (1, "fault01_chunk_wrong_state", "forms-agree", "float32", 10, ("chunked",)),
    (1, "fault01_chunk_wrong_state", "oracle-agreement", "float32", 15, ("chunked",)),
    (2, "fault02_padding_enters_state", "state-step", "float64", 10, ("step",)),
    (2, "fault02_padding_enters_state", "state-split-resume", "float64", 10, ("prefill",)),
    (3, "fault03_resume_forgets_denominator", "state-split-resume", "float64", 10, ("prefill",)),
    (4, "fault04_normalizer_over_heads", "uniform-weights", "float64", 10, ("bound",)),
    (4, "fault04_normalizer_over_heads", "convex-combination", "float64", 10, ("bound",)),
    (5, "fault05_key_sum_detached", "gradients-vs-reference", "float64", 10, ("dk",)),
    (5, "fault05_key_sum_detached", "gradcheck", "float64", 10, ("analytic", "numeric")),
    (6, "fault06_normalizer_multiplied", "convex-combination", "float64", 10, ("bound",)),
    (6, "fault06_query_left_out", "convex-combination", "float64", 10, ("bound",)),
    (6, "fault06_normalizer_multiplied", "weights-vs-reference", "float64", 10, ("bound",)),
    (7, "fault07_alignment_mislabelled", "causal-alignment", "float64", 10, ("causal",)),
    (8, "fault08_masked_rows_nan", "masks", "float64", 10, ()),
    (8, "fault08_masked_rows_nan", "empty-row-gradients", "float64", 10, ("NaN",)),
    (8, "fault08_sentinel_leak", "masks", "float64", 10, ()),
    (8, "fault08_sentinel_leak", "masked-key-gradients", "float64", 10, ("exactly 0",)),
    (8, "fault08_sentinel_leak", "empty-row-gradients", "float64", 10, ("no visible key",)),
    (9, "fault09_causal_ignored_short_path", "causality", "float64", 10, ()),
    (10, "fault10_elementwise_square_map", "kernel-identity", "float64", 10, ()),
    (10, "fault10_elementwise_square_map", "weights-vs-reference", "float64", 10, ()),
    (11, "fault11_fp16_normalizer", "dtype-agreement", "float16", 3, ("bound",)),
    (12, "fault12_single_key_dq", "single-key-gradients", "float64", 10, ("one key",)),
    (12, "fault12_single_key_dq", "gradients-vs-reference", "float32", 10, ("bound",)),
    (12, "fault12_single_key_dq", "gradcheck", "float64", 10, ("analytic", "numeric")),
    (13, "fault13_p_truncated", "rounding-bias", "bfloat16", 3, ("Hoeffding",)),
]


@pytest.fixture(scope="module", autouse=True)
def _no_shrinking():
    """The whole module without hypothesis' shrink phase (the failures' first examples)."""
    from verify import profiles

    with profiles.without_shrinking():
        yield


def _property(pid: str):
    props = {p.id: p for p in catalogue()}
    assert pid in props, f"property {pid!r} is not in the catalogue: {sorted(props)}"
    return props[pid]


def _case_id(case) -> str:
    return f"F{case[0]:02d}-{case[1].split('_', 1)[1]}-{case[2]}"


#: examples a faulty variant gets (a failing run stops at its first failure, so this costs
#: nothing when the fault shows early; hypothesis' draws depend on the modules imported so far,
#: so the budget must not rely on one particular early example)
FAULTY_EXAMPLES = 25


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_faulty_variant_fails(case):
    fault, name, pid, dtype, n, words = case
    prop = _property(pid)
    n = max(n, FAULTY_EXAMPLES) if pid != "dtype-agreement" else n
    res = run_property(prop, fv.load(name), RunContext(dtype=dtype, max_examples=n))
    assert res.status == "fail", (res.status, res.reason)
    assert res.counterexample, "a failure must come with its counterexample"
    assert res.snippet, "a failure must come with a reproducing snippet"
    for word in words:
        assert word in res.reason, (word, res.reason)


#: one twin run per (fault, property, dtype)
TWIN_CASES = sorted({(c[0], c[2], c[3], c[4]) for c in CASES})


@pytest.mark.parametrize("case", TWIN_CASES, ids=lambda c: f"F{c[0]:02d}-{c[1]}")
def test_correct_twin_passes(case):
    fault, pid, dtype, n = case
    prop = _property(pid)
    res = run_property(prop, fv.load(fv.TWINS[fault]), RunContext(dtype=dtype, max_examples=n))
    assert res.status == "pass", (res.status, res.reason, res.counterexample[:2000])
    assert res.examples > 0


def test_every_fault_class_has_a_case():
    assert {c[0] for c in CASES} == set(range(1, 14))
    assert set(fv.FAULTY) == set(range(1, 14)) == set(fv.TWINS)
    named = {n for names in fv.FAULTY.values() for n in names}
    assert named == {c[1] for c in CASES}


@pytest.mark.parametrize("fault", range(1, 14))
def test_first_property_declares_the_fault(fault):
    pid = next(c[2] for c in CASES if c[0] == fault)
    assert fault in _property(pid).faults


def test_loadable_by_the_checker(monkeypatch):
    """Every faulty variant and twin loads as ``tests.faulty_variants:<name>`` from the
    repository root, as ``attn-theory check`` does."""
    from pathlib import Path

    from verify.spec.target import as_variant
    from verify.spec.variant import AttentionVariant

    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    names = {n for group in fv.FAULTY.values() for n in group} | set(fv.TWINS.values())
    for name in sorted(names):
        variant = as_variant(f"tests.faulty_variants:{name}")
        assert isinstance(variant, AttentionVariant), name
