"""`attn-theory report` (issue 6): byte-identical reruns, staging (a killed or failing run
leaves the previous reports intact), the --check comparison rules, and path safety."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verify.cli.report import owns
from verify.render.compare import RATIO_FACTOR, compare_dirs, diff_json
from verify.render.staging import staged_write
from verify.spec.variant import sanitize_name

ROOT = Path(__file__).resolve().parents[1]


def _digest(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _report(report_dir: Path, *extra: str, **kw) -> subprocess.Popen | subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "verify.cli",
        "report",
        "--quick",
        "--quiet",
        "--report-dir",
        str(report_dir),
        *extra,
    ]
    env = dict(os.environ, ATTN_THEORY_PROFILE="ci")
    if kw.get("background"):
        return subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def quick_reports(tmp_path_factory) -> Path:
    """One quick report run (the smoke-sized main job) into a fresh directory."""
    d = tmp_path_factory.mktemp("reports") / "reports"
    d.mkdir()
    (d / "benchmarks.md").write_text("owned by `attn-theory bench`: must survive\n")
    proc = _report(d)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return d


def test_quick_run_writes_every_page(quick_reports):
    files = set(_digest(quick_reports))
    for name in (
        "index.md",
        "derivations.md",
        "derivations.json",
        "verification.md",
        "verification.json",
        "figures/truncation_error.png",
        "figures/ratio_distribution.png",
        "figures/error_vs_radius.png",
    ):
        assert name in files, name
    # a file the report does not own is carried over untouched
    assert (quick_reports / "benchmarks.md").read_text().startswith("owned by")
    # staging leaves nothing behind next to the report directory
    assert not [p for p in quick_reports.parent.iterdir() if p.name.startswith(".reports.")]


@pytest.mark.slow  # CI's `attn-theory report --check` regenerates the full set and compares it
def test_second_run_changes_no_byte(quick_reports):
    before = _digest(quick_reports)
    proc = _report(quick_reports)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _digest(quick_reports) == before


def test_killed_run_leaves_previous_reports_intact(quick_reports):
    before = _digest(quick_reports)
    proc = _report(quick_reports, background=True)
    parent = quick_reports.parent
    deadline = time.monotonic() + 300
    staging = []
    while time.monotonic() < deadline and proc.poll() is None:
        staging = [p for p in parent.iterdir() if p.name.startswith(".reports.staging-")]
        if staging and any(staging[0].rglob("truncation_error.png")):
            break  # the run is midway: its first new file (a derivation figure) is staged
        time.sleep(0.2)
    assert proc.poll() is None, "the run finished before it could be interrupted"
    assert staging, "no staging directory appeared"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert _digest(quick_reports) == before
    for p in staging:  # a kill cannot clean up: the partial set is a hidden sibling
        assert p.name.startswith(".")


def test_failing_writer_leaves_previous_reports_intact(tmp_path):
    d = tmp_path / "reports"
    d.mkdir()
    (d / "index.md").write_text("old index\n")
    (d / "keep.md").write_text("not owned\n")
    before = _digest(d)

    def writer(stage: Path) -> None:
        (stage / "index.md").write_text("half-written new index\n")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        staged_write(d, lambda rel: rel == "index.md", writer)
    assert _digest(d) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports"]


def test_staged_write_drops_stale_owned_files_and_keeps_others(tmp_path):
    d = tmp_path / "reports"
    (d / "variants").mkdir(parents=True)
    (d / "variants" / "old.md").write_text("stale card\n")
    (d / "benchmarks.json").write_text("{}\n")
    staged_write(
        d,
        lambda rel: rel.startswith("variants/"),
        lambda stage: (
            (stage / "variants").mkdir(exist_ok=True)
            or (stage / "variants" / "new.md").write_text("new\n")
        ),
    )
    assert sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file()) == [
        "benchmarks.json",
        "variants/new.md",
    ]
    assert oct(d.stat().st_mode & 0o777) == "0o755"


def test_check_rules():
    base = {
        "status": "pass",
        "max_ratio": 0.02,
        "counterexample": "",
        "examples": 10,
        "environment": {"versions": {"torch": "2.13.0"}},
        "detail": "error 1e-17",
    }
    # measured ratios may move within the stated factor; machine descriptions are ignored
    moved = dict(
        base,
        max_ratio=0.02 * (RATIO_FACTOR / 2),
        environment={"versions": {"torch": "9"}},
        detail="error 3e-17",
    )
    assert diff_json(moved, base) == []
    assert diff_json(dict(base, max_ratio=0.02 * RATIO_FACTOR * 2), base)
    # statuses, counterexamples, example counts and exported numbers must be equal
    assert diff_json(dict(base, status="fail"), base)
    assert diff_json(dict(base, counterexample="q=[1.0]"), base)
    assert diff_json(dict(base, examples=11), base)
    assert diff_json({"rows": [[2080, 4096]]}, {"rows": [[2080, 4095]]})


def test_check_detects_missing_and_changed_files(tmp_path):
    new, old = tmp_path / "new", tmp_path / "old"
    for d in (new, old):
        (d / "variants").mkdir(parents=True)
        (d / "index.md").write_text("x\n")
    (new / "claims.json").write_text('{"verdict": "confirmed"}\n')
    (old / "claims.json").write_text('{"verdict": "refuted"}\n')
    (new / "variants" / "a.json").write_text("{}\n")
    problems = compare_dirs(new, old, owns)
    assert any("claims.json" in p and "refuted" in p for p in problems)
    assert any("variants/a.json" in p and "missing" in p for p in problems)
    (old / "variants" / "a.json").write_text("{}\n")
    (old / "claims.json").write_text('{"verdict": "confirmed"}\n')
    assert compare_dirs(new, old, owns) == []


def test_variant_names_are_sanitized():
    for evil in ("../../etc/passwd", "/abs/path", "a b/c\\d:e", "..", ""):
        safe = sanitize_name(evil)
        assert safe and "/" not in safe and "\\" not in safe and not safe.startswith(".")


def test_report_dir_stays_inside(tmp_path):
    """A report directory given as a path with '..' resolves to one place; nothing is written
    anywhere else in its parent (staging is removed after the swap)."""
    outer = tmp_path / "outer"
    (outer / "inner").mkdir(parents=True)
    target = outer / "inner" / ".." / "reports"
    from verify.cli.derive import owned_paths

    staged_write(
        target,
        lambda rel: rel in owned_paths(),
        lambda stage: (stage / "derivations.md").write_text("x\n"),
    )
    assert sorted(p.name for p in outer.iterdir()) == ["inner", "reports"]
    assert [p.name for p in (outer / "reports").iterdir()] == ["derivations.md"]
