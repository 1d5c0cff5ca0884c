"""reports/arithmetic.*: every correct emulation within its declared model's bound (not vacuous),
every defect beyond it, and the defaults stated per device and dtype."""

from __future__ import annotations

from verify.render import arithmetic


def test_arithmetic_report(tmp_path):
    doc = arithmetic.write(tmp_path)
    assert (tmp_path / "arithmetic.md").read_text().startswith("# Kernel arithmetics")
    assert doc["defaults"]["precision"]["bfloat16"] == "envelope"
    assert doc["defaults"]["arithmetic"]["cuda"].startswith("flash-attention-2:")
    for row in doc["rows"]:
        assert 1e-3 < row["max_ratio"] <= 1.0, row
        assert all(r > 1.0 for r in row["faults"].values()), row
    # the emulated tanh.approx is outside the CPU arithmetic: the default fails that kernel
    capped = [r for r in doc["rows"] if "softcap" in r["kernel"] and r["dtype"] == "float32"]
    assert any(r["default_max_ratio"] > 1.0 for r in capped)
