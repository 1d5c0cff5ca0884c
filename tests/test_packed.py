"""Packed sequences (verify.properties.packed; D20's block-diagonal visibility).

Two correct varlen implementations in ``tests/decode_variants.py`` -- one document at a time,
and one call under the block-diagonal mask (masked by a select, so NaN or inf in the slack
never enters) -- pass ``packed-documents`` and ``packed-isolation``; a torch fallback that
ignores ``cu_seqlens`` (the documents bleed into each other) fails ``packed-documents``, and a
varlen backward that mixes documents when there are several fails ``packed-isolation`` while
its outputs pass ``packed-documents``. The documents' bound is D11's kernel-free threshold
(or twice the claim's D10 bound); isolation is exact (D20).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import decode_variants as dv  # noqa: E402

PACKED = ("packed-documents", "packed-isolation")


def _check(packed, select=PACKED, **claims):
    from verify.engine import check as engine
    from verify.spec.variant import AttentionVariant

    variant = AttentionVariant(name="packed", forward=dv.softmax_forward, packed=packed, **claims)
    return engine.check(variant, select=list(select), isolate=False, probe=False, max_examples=6)


@pytest.mark.parametrize("name", ["packed_loop", "packed_mask"])
def test_correct_packed_paths_pass(name):
    result = _check(getattr(dv, name), kernel="softmax")
    assert not result.failed, [(r.property_id, r.reason[:300]) for r in result.failed]
    ran = {(r.property_id, r.dtype): r.status for r in result.results}
    assert set(ran.values()) == {"pass"} and len(ran) == 4, ran
    docs = [r for r in result.results if r.property_id == "packed-documents"]
    # the long examples ran too: boundaries off the 64/128 grid
    assert all(r.examples > 6 for r in docs), [r.examples for r in docs]


def test_ignoring_cu_seqlens_fails_documents():
    result = _check(dv.packed_ignores_cu, select=("packed-documents",))
    assert {r.property_id for r in result.failed} == {"packed-documents"}
    assert all("vs forward on it alone" in r.reason for r in result.failed)


def test_mixed_varlen_gradients_fail_isolation_only():
    result = _check(dv.packed_grad_corrupt)
    status = {(r.property_id, r.status) for r in result.results}
    assert status == {("packed-documents", "pass"), ("packed-isolation", "fail")}, status
    assert all("/d" in r.reason and "exact" in r.reason for r in result.failed)


def test_slack_and_empty_documents_reach_the_function():
    """The drawn examples include empty documents, one-row documents and slack rows."""
    from hypothesis import given, settings

    from verify.properties.packed import _packed_examples
    from verify.properties.support.base import RunContext
    from verify.spec.variant import AttentionVariant

    variant = AttentionVariant(name="p", forward=dv.softmax_forward, packed=dv.packed_loop)
    seen = set()

    @settings(max_examples=60, derandomize=True, database=None)
    @given(_packed_examples(variant, RunContext()))
    def collect(ex):
        lens, slack = ex.choices["lengths"], ex.choices["slack"]
        seen.update({"empty"} if 0 in lens else set())
        seen.update({"one"} if 1 in lens else set())
        seen.update({"slack"} if slack else set())
        seen.update({"several"} if len(lens) > 1 else set())
        assert ex.inputs["q"].shape[0] == sum(lens) + slack
        assert ex.choices["cu_seqlens"][-1] == sum(lens)

    collect()
    assert seen == {"empty", "one", "slack", "several"}


def test_packed_function_misbehaving_is_the_variants_failure():
    def wrong_shape(q, k, v, cu_seqlens, *, causal):
        return q[:-1]

    result = _check(wrong_shape, select=("packed-documents",))
    assert [r.property_id for r in result.failed] == ["packed-documents"] * 2
    assert all("shape" in r.reason for r in result.failed)
