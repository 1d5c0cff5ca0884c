"""The zoo (``entries.py``): each pinned release is installed on its own and checked in a
subprocess, and the checker must give the verdict the theory gives.

Runs only with ``ATTN_THEORY_ZOO=1`` (``.ci/run`` has a step for it; by hand:
``ATTN_THEORY_ZOO=1 pytest tests/zoo -p no:xdist --durations=0``); skipped otherwise, so the
main test command stays within its budget.

Installs: ``pip install --no-deps --target DIR pkg==X.Y.Z`` into ``$ATTN_ZOO_DIR/<pkg>-<ver>``
(default ``~/.cache/attn-theory-zoo``), reused when present; dependencies (torch, einops, triton,
local-attention, axial-positional-embedding) come from the project environment. Two versions of
a package cannot share an environment, so the check runs as ``python -m verify.cli check`` with
DIR first on ``PYTHONPATH`` and ``ATTN_THEORY_PROFILE=ci``. When pip cannot reach the package
index the entry is skipped, and the skip says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from entries import ENTRIES, Entry

ROOT = Path(__file__).resolve().parents[2]
CATALOGUE = ROOT / "verify" / "properties" / "catalogue.json"
ENABLED = os.environ.get("ATTN_THEORY_ZOO") == "1"
CHECK_TIMEOUT = 600
INSTALL_TIMEOUT = 600
#: what pip prints when the index cannot be reached (then the entry is skipped, not failed)
NETWORK_MARKERS = (
    "NewConnectionError",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Connection refused",
    "ConnectionError",
    "ProxyError",
    "ReadTimeoutError",
    "SSLError",
    "No route to host",
)


def zoo_dir() -> Path:
    return Path(os.environ.get("ATTN_ZOO_DIR") or Path.home() / ".cache" / "attn-theory-zoo")


def install(entry: Entry) -> Path:
    """The directory holding ``entry.package==entry.version`` alone (installed on first use into
    a temporary directory, then renamed into place, so an interrupted install is never reused).
    Skips the test when pip cannot reach the index."""
    final = zoo_dir() / f"{entry.package}-{entry.version}"
    if (final / entry.module).is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-input",
        "--disable-pip-version-check",
        "--quiet",
        "--target",
        str(tmp),
        f"{entry.package}=={entry.version}",
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired:
        shutil.rmtree(tmp, ignore_errors=True)
        pytest.skip(f"pip could not reach the package index within {INSTALL_TIMEOUT} s")
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        out = proc.stdout + proc.stderr
        tail = " | ".join(out.strip().splitlines()[-3:])
        if any(m in out for m in NETWORK_MARKERS):
            pytest.skip(f"pip could not reach the package index for {entry.package}: {tail}")
        pytest.fail(f"pip install {entry.package}=={entry.version} failed: {tail}")
    if not (tmp / entry.module).is_dir():
        shutil.rmtree(tmp, ignore_errors=True)
        pytest.fail(f"{entry.package}=={entry.version} did not install {entry.module}/")
    try:
        tmp.rename(final)
    except OSError:  # another process installed it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def check_command(entry: Entry, json_path: Path) -> list[str]:
    cmd = [sys.executable, "-m", "verify.cli", "check", entry.target, *entry.args]
    return [*cmd, "--json", str(json_path)]


def run_check(entry: Entry, pkg_dir: Path, json_path: Path) -> tuple[int, dict, float, str]:
    env = dict(os.environ, ATTN_THEORY_PROFILE="ci")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(pkg_dir), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        check_command(entry, json_path),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT,
    )
    seconds = time.monotonic() - t0
    if not json_path.exists():
        pytest.fail(f"no JSON result (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.returncode, json.loads(json_path.read_text()), seconds, proc.stdout


def statuses(doc: dict) -> dict[str, set[str]]:
    """property id -> the statuses of its runs (one per dtype)."""
    out: dict[str, set[str]] = {}
    for r in doc["results"]:
        out.setdefault(r["property_id"], set()).add(r["status"])
    return out


def _param(entry: Entry):
    return pytest.param(entry, id=entry.id, marks=pytest.mark.zoo)


@pytest.mark.skipif(
    not ENABLED,
    reason="the zoo runs in its own CI step: ATTN_THEORY_ZOO=1 pytest tests/zoo -p no:xdist",
)
@pytest.mark.parametrize("entry", [_param(e) for e in ENTRIES])
def test_zoo_entry(entry: Entry, tmp_path):
    pkg_dir = install(entry)
    code, doc, seconds, stdout = run_check(entry, pkg_dir, tmp_path / "result.json")
    print(f"zoo {entry.id}: exit {code} in {seconds:.1f} s")
    st = statuses(doc)
    failing = {p for p, s in st.items() if "fail" in s}
    passing = {p for p, s in st.items() if s == {"pass"} or s == {"pass", "skip"}}
    summary = stdout[-4000:]
    assert code == doc["exit_code"], f"exit {code} but the JSON says {doc['exit_code']}"
    assert code != 4, f"internal error of the checker:\n{summary}"
    for p in entry.must_pass:
        assert p in passing, f"{p} must pass (the fixed defect's property): {st.get(p)}\n{summary}"
    for p in entry.deciding:
        assert p in failing, f"{p} must be reported failing: {st.get(p)}\n{summary}"
    assert code == entry.expected_exit, (
        f"exit {code}, expected {entry.expected_exit}; failing {sorted(failing)}\n{summary}"
    )
    if entry.expected_exit == 0:
        assert not failing


def test_entries_are_consistent():
    """The table itself: unique ids, a failing verdict names its deciding properties, a passing
    one none, the named properties exist in the catalogue, every adapter exists."""
    ids = {p["id"] for p in json.loads(CATALOGUE.read_text())}
    assert len({e.id for e in ENTRIES}) == len(ENTRIES)
    for e in ENTRIES:
        assert e.expected_exit in (0, 1), e.id
        assert bool(e.deciding) == (e.expected_exit == 1), e.id
        named = (*e.deciding, *e.must_pass)
        assert set(named) <= ids, (e.id, set(named) - ids)
        assert not set(e.deciding) & set(e.must_pass), e.id
        module, _, fn = e.target.partition(":")
        assert (ROOT / (module.replace(".", "/") + ".py")).is_file() and fn, e.target


def test_readme_table_is_current():
    """The README's zoo table is ``entries.markdown_table()`` (regenerate it from the entries)."""
    from entries import markdown_table

    text = (ROOT / "README.md").read_text()
    start, end = "<!-- zoo:start -->\n", "<!-- zoo:end -->"
    assert start in text and end in text, "README.md lacks the zoo table markers"
    table = text.split(start, 1)[1].split(end, 1)[0]
    assert table == markdown_table(), "README zoo table is stale: paste entries.markdown_table()"
