"""scripts/gpu_check.py: the CUDA side in one command, and its dry run on CPU tensors.

The dry run goes through every section on CPU tensors with tiny sizes (T = 32 and 64, d = 16)
and writes the same two files, marked as not a result; the real run (``--quick``: small sizes
on CUDA) is only reached on a machine with a CUDA device.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"
SECTIONS = ("device_agreement", "precision_models", "tolerance", "gradients")
BANNER = "dry run (no CUDA device): not a result"


def _run(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _report(out: Path) -> tuple[dict, str]:
    assert (out / "gpu.json").is_file() and (out / "gpu.md").is_file()
    return json.loads((out / "gpu.json").read_text()), (out / "gpu.md").read_text()


def _rows_ran(data: dict) -> None:
    """Every section ran and recorded rows; every row that ran has a result."""
    secs = data["sections"]
    assert set(SECTIONS) <= set(secs)
    for name in SECTIONS:
        assert secs[name]["status"] == "ok", (name, secs[name].get("status"))
    for t in secs["device_agreement"]["targets"]:
        assert t["status"] == "ran" and t["results"], t
        for r in t["results"]:
            assert {"property_id", "dtype", "status", "max_ratio", "reason"} <= set(r)
    assert secs["precision_models"]["rows"]
    for name in ("tolerance", "gradients"):
        rows = secs[name]["rows"]
        assert rows and all(r["ran"] for r in rows)
        ran = [r for r in rows if r["status"] == "ran"]
        assert ran, f"{name}: no backend ran"
        for r in ran:
            cell = r["fused"] if name == "tolerance" else r
            assert cell.get("result") in ("pass", "fail"), (name, r)
    ran = [r for r in secs["kernel_arithmetic"]["rows"] if r["status"] == "ran"]
    assert ran and all(0 < r["ratio_device"] <= 1 for r in ran), ran  # correct kernels pass


def test_dry_run_writes_the_report(tmp_path):
    out = tmp_path / "gpu"
    proc = _run("--dry-run", "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data, md = _report(out)
    assert data["dry_run"] is True and data["banner"] == BANNER
    assert BANNER in md
    assert data["environment"]["torch"] == torch.__version__
    _rows_ran(data)
    # a backend that cannot run (on CPU tensors: the memory-efficient one) is recorded, not fatal
    statuses = [r["status"] for r in data["sections"]["tolerance"]["rows"]]
    assert all(s == "ran" or s.startswith("unavailable: ") for s in statuses), statuses
    for head in ("## 1.", "## 2.", "## 3.", "## 4.", "torch", "CUDA device"):
        assert head in md


def test_dry_run_of_selected_sections(tmp_path):
    """``--sections``: the chosen sections run (the backward benchmark's gate and our rows on
    CPU tensors, fla's Triton rows recorded as needing a device), the others say so."""
    out = tmp_path / "gpu"
    proc = _run("--dry-run", "--out", str(out), "--sections", "precision_models,backward_benchmark",
                timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data, md = _report(out)
    secs = data["sections"]
    assert secs["precision_models"]["status"] == "ok" and secs["precision_models"]["rows"]
    bench = secs["backward_benchmark"]
    assert bench["status"] == "ok" and all(r["ok"] for r in bench["gate"] if r["judged"])
    assert {r["method"] for r in bench["rows"] if "step_s" in r} >= {"chunked/reverse"}
    assert "need a CUDA device" in str(bench["skipped"])
    for name in ("device_agreement", "tolerance", "gradients", "kernel_arithmetic"):
        assert secs[name]["status"].startswith("not run (not selected"), name
    assert "## 6." in md


def test_usage_errors_exit_2(tmp_path):
    assert _run(timeout=60).returncode == 2  # no --out
    assert _run("--out", str(tmp_path), "--workers", "-1", timeout=60).returncode == 2
    assert _run("--dry-run", "--out", str(tmp_path), "--sections", "nope",
                timeout=60).returncode == 2  # fmt: skip
    if not torch.cuda.is_available():  # the real run needs a device
        proc = _run("--out", str(tmp_path / "x"), timeout=120)
        assert proc.returncode == 2 and "--dry-run" in proc.stderr
        assert not (tmp_path / "x").exists()


@pytest.mark.cuda
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device: scripts/gpu_check.py runs the CUDA side"
)
def test_cuda_quick_run(tmp_path):
    out = tmp_path / "gpu"
    proc = _run("--quick", "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data, md = _report(out)
    assert data["dry_run"] is False and BANNER not in md
    assert data["environment"]["device_name"] == torch.cuda.get_device_name(0)
    assert data["environment"]["device_name"] in md
    _rows_ran(data)
    agreement = [
        r
        for t in data["sections"]["device_agreement"]["targets"]
        for r in t["results"]
        if r["property_id"] == "device-agreement"
    ]
    assert agreement and all(r["status"] != "skip" for r in agreement), agreement
