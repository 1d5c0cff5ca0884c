"""The length floor: a kernel that takes only sequences of at least a tile's length (16) is
found by the probes' length scan and only such lengths are drawn (a restriction, not a failure);
declared with ``--min-length`` the same; without either it fails accepts-inputs (the twin);
a crash below 16 tokens stays a defect (``tests/test_domain.py``)."""

from __future__ import annotations

from verify.engine.check import check
from verify.probes.restrictions import MIN_LENGTH_FLOOR

FAST = dict(select=["accepts-inputs", "oracle-agreement"], dtypes=("float64",), isolate=False,
            max_examples=6)  # fmt: skip
SPEC = "tests.minlen_variants:tiled_softmax"


def test_floor_found_declared_and_failed_without():
    found = check(SPEC, kernel="softmax", causal_alignment="bottom-right", **FAST)
    assert found.variant.min_length == MIN_LENGTH_FLOOR == 16
    assert found.exit_code == 0, [(r.property_id, r.reason) for r in found.failed]
    declared = check(SPEC, kernel="softmax", causal_alignment="bottom-right", min_length=16,
                     probe=False, **FAST)  # fmt: skip
    assert declared.exit_code == 0
    twin = check(SPEC, kernel="softmax", causal_alignment="bottom-right", probe=False, **FAST)
    assert [r.property_id for r in twin.failed] == ["accepts-inputs"]
