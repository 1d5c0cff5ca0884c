"""The pytest plugin behaves like a pytest plugin: collection reports the items it runs, node
ids can be passed back, ``-k``/``--deselect``/``--attn-select`` run only what is selected, and a
skip names its property.

Each test runs pytest in a subprocess in a temporary rootdir holding ``myattn.py``. The tests of
selection replace the engine (a ``conftest.py`` there) with one that records what it is asked to
check; two tests run the real engine on one property.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verify.properties import catalogue

VARIANTS = '''import torch


def attention(q, k, v, *, causal):
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        T = q.shape[-2]
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


def leaky(q, k, v, *, causal):
    """Ignores the causal mask."""
    return attention(q, k, v, causal=False)
'''

#: replaces the engine: records each call's selection; ``masks`` skips, ``causality`` passes
#: on ``attention`` and fails on ``leaky``, every other property passes
FAKE_ENGINE = """import json, os

from verify.engine import check as engine
from verify.engine.run import result_for


def fake_check(spec, *, select, dtypes=None, **kw):
    with open(os.environ["ATTN_CALLS"], "a") as f:
        f.write(json.dumps([spec, select]) + "\\n")
    rows = []
    for pid in select:
        for dt in dtypes or ("float64", "float32"):
            if pid == "masks":
                fields = dict(status="skip", reason="needs a claimed attention mask")
            elif pid == "causality" and spec.endswith(":leaky"):
                fields = dict(status="fail", reason="output at t depends on keys after t")
            else:
                fields = dict(status="pass")
            rows.append(result_for(pid, dt, "cpu", **fields))
    return engine.CheckResult(variant=None, results=rows)


engine.check = fake_check
"""

IDS = [p.id for p in catalogue()]


def _pytest(
    root: Path, *args: str, timeout: int = 300, path: Path | None = None
) -> subprocess.CompletedProcess:
    env = dict(os.environ, ATTN_THEORY_PROFILE="ci", ATTN_CALLS=str(root / "calls.jsonl"))
    if path:  # importable as well
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(path), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
         "--rootdir", str(root), *args],
        cwd=root, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _calls(root: Path) -> list:
    path = root / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def root(tmp_path):
    (tmp_path / "myattn.py").write_text(VARIANTS)
    return tmp_path


@pytest.fixture
def fake(root):
    (root / "conftest.py").write_text(FAKE_ENGINE)
    return root


def test_collect_only_lists_one_item_per_property(fake):
    proc = _pytest(fake, "--collect-only", "-q", "--attn-variant", "myattn:attention")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    listed = [line for line in proc.stdout.splitlines() if "::" in line]
    assert listed == [f"myattn.py::attention::{pid}" for pid in IDS]
    assert f"{len(IDS)} tests collected" in proc.stdout
    assert _calls(fake) == []  # collecting checks nothing


def test_k_runs_only_the_matching_items_in_one_engine_call(fake):
    proc = _pytest(
        fake, "-k", "causality or determinism", "--attn-variant", "myattn:attention", "-v"
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert f"collected {len(IDS)} items / {len(IDS) - 2} deselected / 2 selected" in proc.stdout
    assert "2 passed" in proc.stdout
    # both selected properties, in catalogue order, in one call: one worker pool for the two
    assert _calls(fake) == [["myattn:attention", ["causality", "determinism"]]]


def test_node_ids_select_one_item_and_skips_name_the_property(fake):
    nodeid = "myattn.py::attention::masks"
    proc = _pytest(fake, "--attn-variant", "myattn:attention", nodeid, "-rs")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "collected 1 item" in proc.stdout and "1 skipped" in proc.stdout
    assert _calls(fake) == [["myattn:attention", ["masks"]]]
    # reported at the variant's definition line (def attention: line 4), not in the plugin
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("SKIPPED"))
    assert line == (
        "SKIPPED [1] myattn.py:4: masks: needs a claimed attention mask (float64, float32)"
    )
    assert "pytest_plugin" not in proc.stdout


def test_deselect_and_attn_select(fake):
    proc = _pytest(
        fake,
        "--attn-variant", "myattn:attention", "--attn-select", "causality",
        "--attn-select", "determinism", "--deselect", "myattn.py::attention::determinism",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "collected 2 items / 1 deselected / 1 selected" in proc.stdout
    assert _calls(fake) == [["myattn:attention", ["causality"]]]
    bad = _pytest(fake, "--attn-variant", "myattn:attention", "--attn-select", "causalty")
    assert bad.returncode == 4 and "unknown property causalty" in bad.stderr


def test_two_variants_of_one_file_and_x(fake):
    proc = _pytest(
        fake,
        "--attn-variant", "myattn:leaky", "--attn-variant", "myattn:attention",
        "-k", "causality", "-v",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "myattn.py::leaky::causality FAILED" in proc.stdout
    assert "myattn.py::attention::causality PASSED" in proc.stdout
    assert "output at t depends on keys after t" in proc.stdout
    first = _pytest(
        fake, "--attn-variant", "myattn:leaky", "--attn-variant", "myattn:attention",
        "-k", "causality", "-x",
    )  # fmt: skip
    assert "1 failed" in first.stdout and "passed" not in first.stdout
    assert [spec for spec, _ in _calls(fake)] == ["myattn:leaky", "myattn:attention"] + [
        "myattn:leaky"
    ]


def test_real_engine_k_causality(root):
    """The real engine: ``-k causality`` checks one property (float64) on the leaky variant."""
    proc = _pytest(
        root, "--attn-variant", "myattn:leaky", "--attn-kernel", "softmax",
        "--attn-dtype", "float64", "-k", "causality",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert f"1 failed, {len(IDS) - 1} deselected" in proc.stdout
    good = _pytest(
        root, "--attn-variant", "myattn:attention", "--attn-kernel", "softmax",
        "--attn-dtype", "float64", "myattn.py::attention::causality",
    )  # fmt: skip
    assert good.returncode == 0, good.stdout[-3000:]
    assert "1 passed" in good.stdout


def test_variants_in_a_test_file_and_outside_the_rootdir(tmp_path):
    """A test file holding a variant keeps its tests beside the variant's items; a module
    outside the rootdir gets a rootdir-relative node id that selects again."""
    proj, lib = tmp_path / "proj", tmp_path / "lib"
    proj.mkdir()
    lib.mkdir()
    (lib / "fake_engine.py").write_text(FAKE_ENGINE)  # a plugin: no conftest is above ../lib
    (proj / "test_mine.py").write_text(VARIANTS + "\n\ndef test_plain():\n    assert True\n")
    (lib / "extattn.py").write_text(VARIANTS)
    both = ("-p", "fake_engine", "--attn-variant", "test_mine:attention", "--attn-variant",
            "extattn:attention")  # fmt: skip
    listed = _pytest(proj, "--collect-only", "-q", "--attn-select", "masks", *both, path=lib)
    nodeid = "../lib/extattn.py::attention::masks"
    again = _pytest(
        proj, "-q", "-p", "fake_engine", "--attn-variant", "extattn:attention", nodeid, path=lib
    )
    assert listed.returncode == 0, listed.stdout[-3000:] + listed.stderr[-3000:]
    ids = [line for line in listed.stdout.splitlines() if "::" in line]
    assert ids == [
        "test_mine.py::attention::masks",
        "test_mine.py::test_plain",
        "../lib/extattn.py::attention::masks",
    ]
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "1 skipped" in again.stdout
    assert _calls(proj) == [["extattn:attention", ["masks"]]]
