"""`attn-theory check` end to end (issue 5): exit codes, JSON output, the watchdog, every fault
class through the CLI against its correct twin, and the pytest plugin.

Each test runs the real command in a subprocess from the repository root (so
``tests.faulty_variants:<name>`` is importable, as ``python -m`` makes the current directory
importable) with a few properties selected to stay fast.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import faulty_variants as fv  # noqa: E402
from test_faults import CASES as FAULT_PROPERTY_CASES  # noqa: E402

#: fault class -> (faulty variant, the property that must catch it, dtype): the first case of
#: each class in tests/test_faults.py, run here through the CLI
FAULT_CASES = sorted({c[0]: c[:4] for c in reversed(FAULT_PROPERTY_CASES)}.values())
#: fault classes run through the CLI under the ci profile (one per kind of catching property:
#: forms, gradients, masks, a low-precision dtype); every class is caught property by property
#: in tests/test_faults.py, and the rest run here outside ci (``slow``)
CLI_FAULTS_IN_CI = {1, 5, 8, 11}


def _fault_params():
    for c in FAULT_CASES:
        marks = () if c[0] in CLI_FAULTS_IN_CI else (pytest.mark.slow,)
        yield pytest.param(*c, id=f"fault{c[0]:02d}", marks=marks)


def run_cli(*args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, ATTN_THEORY_PROFILE="ci")
    return subprocess.run(
        [sys.executable, "-m", "verify.cli", "check", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _json(proc) -> dict:
    return json.loads(proc.stdout)


#: a failure group's counterexample line (minimal, or shrinking stopped early)
EXAMPLE_LINE = r"(minimal counterexample|counterexample \(shrinking stopped early\)) \("


@pytest.mark.parametrize(("fault", "name", "prop", "dtype"), list(_fault_params()))
def test_cli_reports_each_fault_and_passes_its_twin(fault, name, prop, dtype):
    """fault class `fault`: exit code 1 and the named property failing for the faulty
    variant; exit code 0 and the same property passing for its correct twin."""
    common = ["--select", prop, "--dtype", dtype, "--json", "-", "--max-examples", "25"]
    bad = run_cli(f"tests.faulty_variants:{name}", *common)
    assert bad.returncode == 1, bad.stderr[-2000:]
    failing = {r["property_id"] for r in _json(bad)["results"] if r["status"] == "fail"}
    assert prop in failing
    twin = run_cli(f"tests.faulty_variants:{fv.TWINS[fault]}", *common)
    assert twin.returncode == 0, twin.stderr[-2000:]
    statuses = {r["status"] for r in _json(twin)["results"] if r["property_id"] == prop}
    assert statuses == {"pass"}


def test_json_dash_writes_only_json_to_stdout():
    proc = run_cli(
        "verify.builtins:softmax_variant",
        "--select",
        "determinism",
        "--dtype",
        "float64",
        "--json",
        "-",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)  # nothing but the JSON document on stdout
    assert data["schema"] == "attn-theory/check/v1"
    assert data["exit_code"] == 0


def test_usage_and_import_errors_exit_2(tmp_path):
    missing = run_cli("no_such_module_xyz:attention")
    assert missing.returncode == 2
    assert "no_such_module_xyz" in missing.stderr
    malformed = run_cli("not-a-spec")
    assert malformed.returncode == 2 and "pkg.module:object" in malformed.stderr
    bad_claim = run_cli("verify.builtins:softmax_variant", "--kernel", "cosine")
    assert bad_claim.returncode == 2 and "kernel" in bad_claim.stderr
    bad_scale = run_cli("verify.builtins:softmax_variant", "--scale", "big")
    assert bad_scale.returncode == 2 and "--scale" in bad_scale.stderr


def test_no_applicable_property_exits_3():
    # the state API properties need a state API, which SDPA-like functions do not have
    proc = run_cli(
        "tests.faulty_variants:twin09_causal_softmax",
        "--select",
        "state-step",
        "--dtype",
        "float64",
        "--json",
        "-",
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert all(r["status"] == "skip" for r in _json(proc)["results"])


def _write_module(tmp_path: Path, body: str) -> None:
    (tmp_path / "userattn.py").write_text(textwrap.dedent(body))


def test_user_module_in_current_directory_is_importable(tmp_path):
    _write_module(
        tmp_path,
        """
        import torch

        def attention(q, k, v, *, causal):
            s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
            if causal:
                T = q.shape[-2]
                s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
            return torch.softmax(s, -1) @ v
        """,
    )
    proc = run_cli(
        "userattn:attention",
        "--kernel",
        "softmax",
        "--select",
        "oracle-agreement",
        "causality",
        "--dtype",
        "float64",
        "--json",
        "-",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {r["status"] for r in _json(proc)["results"]} == {"pass"}


@pytest.mark.parametrize(("shift", "code"), [(True, 0), (False, 1)])
def test_without_claims_the_probes_claims_are_checked(tmp_path, shift, code):
    """No claim given: the probes identify softmax and the battery checks that claim, so an
    unshifted exp/sum softmax (correct on the probes' moderate scores) fails oracle-agreement
    at scores beyond exp's overflow, while the max-subtracting twin passes (D6)."""
    _write_module(
        tmp_path,
        f"""
        import torch

        def attention(q, k, v, *, causal):
            s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
            if causal:
                T = q.shape[-2]
                s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
            if {shift}:
                s = s - s.amax(-1, keepdim=True)
            w = torch.exp(s)
            return (w / w.sum(-1, keepdim=True)) @ v
        """,
    )
    proc = run_cli(
        "userattn:attention",
        "--select",
        "oracle-agreement",
        "--dtype",
        "float32",
        "--json",
        "-",
        cwd=tmp_path,
    )
    assert proc.returncode == code, proc.stderr[-2000:]
    out = _json(proc)
    assert out["claims"]["kernel"] == "softmax"
    assert any("identified by the black-box probes" in n for n in out["notes"])
    assert {r["status"] for r in out["results"]} == {"pass" if shift else "fail"}


def test_hanging_and_crashing_variants_fail_accepts_inputs_on_the_2_token_call(tmp_path):
    """A forward that never returns, or kills its process, on the tiny call made before any
    work (verify.engine.preflight) fails accepts-inputs with that reason (exit 1); the
    properties asked for are skipped saying why, without running."""
    _write_module(
        tmp_path,
        """
        import os
        import time
        import torch

        def hangs(q, k, v, *, causal):
            time.sleep(3600)

        def crashes(q, k, v, *, causal):
            os._exit(7)
        """,
    )
    common = ["--kernel", "softmax", "--select", "determinism", "oracle-agreement"]
    common += ["--dtype", "float64", "--json", "-"]
    for name, head in (("hangs", "hung on a 2-token call"), ("crashes", "crashed on a 2-token")):
        proc = run_cli(f"userattn:{name}", *common, "--timeout", "10", cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr[-2000:]
        results = {r["property_id"]: r for r in _json(proc)["results"]}
        assert set(results) == {"accepts-inputs", "determinism", "oracle-agreement"}
        assert results["accepts-inputs"]["status"] == "fail"
        assert results["accepts-inputs"]["reason"].startswith(head)
        for pid in ("determinism", "oracle-agreement"):
            assert results[pid]["status"] == "skip" and head in results[pid]["reason"]
        if name == "hangs":  # the watchdog says how loaded the machine was
            assert "load average" in results["accepts-inputs"]["reason"]


def _fault09_causality(*args: str) -> subprocess.CompletedProcess:
    """``check`` of causality in float64 on fault class 9's variant (it fails), with ``args``."""
    spec = "tests.faulty_variants:fault09_causal_ignored_short_path"
    return run_cli(spec, "--select", "causality", "--dtype", "float64", *args)


def _reproducer(stdout: str) -> str:
    """The reproducer the default summary prints under its first failure group (indented)."""
    lines = stdout.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("    reproduce (Python"))
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith("      ") and line.strip():
            break
        body.append(line[6:])
    return "\n".join(body).strip() + "\n"


def test_failure_prints_counterexample_and_reproducer(tmp_path):
    proc = _fault09_causality()
    assert proc.returncode == 1
    assert re.search(EXAMPLE_LINE, proc.stdout)
    assert "reproduce (Python" in proc.stdout
    snippet = _reproducer(proc.stdout)
    assert "variant.forward(q, k, v, causal=causal)" in snippet
    assert "reference(variant, q, k, v" in snippet
    # the reproducer runs as printed: the output, the reference and the difference vs the bound
    run = subprocess.run(
        [sys.executable, "-c", snippet], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "o = tensor(" in run.stdout and "reference = tensor(" in run.stdout
    assert "max |o - reference|" in run.stdout and "bound" in run.stdout


def test_report_card_is_written(tmp_path):
    proc = _fault09_causality("--report-dir", str(tmp_path / "cards"))
    assert proc.returncode == 1
    cards = sorted(p.name for p in (tmp_path / "cards").iterdir())
    assert len(cards) == 2 and cards[0].endswith(".json") and cards[1].endswith(".md")
    text = (tmp_path / "cards" / cards[1]).read_text()
    assert "causality" in text and "Shrunk counterexample" in text


def _result(*statuses):
    from verify import builtins
    from verify.engine.check import CheckResult
    from verify.spec.results import PropertyResult

    rows = [
        PropertyResult(f"p{i}", "contract", "s", status, "float64", "cpu")
        for i, status in enumerate(statuses)
    ]
    return CheckResult(variant=builtins.get("softmax"), results=rows)


@pytest.mark.parametrize(
    ("statuses", "code"),
    [
        (("fail", "error", "pass"), 1),  # a failing property wins over an internal error
        (("error", "pass", "skip"), 4),  # an internal error wins over a pass
        (("pass", "skip"), 0),
        (("skip",), 3),
        (("error",), 4),
    ],
)
def test_exit_code_precedence(statuses, code):
    res = _result(*statuses)
    assert res.exit_code == code
    assert all(r.status == "fail" for r in res.failed)  # internal errors are not failures
    assert [r.status for r in res.errors] == [s for s in statuses if s == "error"]


def test_cli_exits_4_on_an_internal_error_and_says_whose_it_is(monkeypatch, capsys):
    from verify.cli import main
    from verify.engine import check as engine

    monkeypatch.setattr(engine, "check", lambda *a, **kw: _result("pass", "error"))
    assert main(["check", "verify.builtins:softmax_variant"]) == 4
    out = capsys.readouterr().out
    assert "INTERNAL ERROR of the checker (not the variant's)" in out


def test_bad_output_options_fail_before_any_work(tmp_path):
    t0 = time.perf_counter()
    blocked = tmp_path / "file"
    blocked.write_text("")
    proc = run_cli("verify.builtins:softmax_variant", "--report-dir", str(blocked / "cards"))
    assert proc.returncode == 2 and "--report-dir" in proc.stderr
    proc = run_cli("verify.builtins:softmax_variant", "--max-examples", "0")
    assert proc.returncode == 2 and "--max-examples" in proc.stderr
    assert "checking" not in proc.stderr  # rejected before the battery started
    assert time.perf_counter() - t0 < 60


@pytest.mark.parametrize(
    ("name", "code", "failing"),
    # the stabilizer over every key leaks the future (causality) and makes the eps of the
    # denominator row-dependent, so the rows sum to D / (D + eps) < 1 with no one eps that the
    # probes could claim (convex-combination, non-causal too): two defects, two groups
    [
        ("windowed_softmax", 0, set()),
        ("stabilizer_leak_linear", 1, {"causality", "convex-combination"}),
    ],
)
def test_kernel_unknown_runs_the_structural_battery(name, code, failing, tmp_path):
    """``--kernel unknown``: every structural property runs (the summary counts what ran and
    the skips by reason); a correct windowed attention passes, a key stabilizer over the whole
    sequence fails causality with a shrunk counterexample."""
    out = tmp_path / "result.json"
    spec = f"tests.unclaimed_variants:{name}"
    proc = run_cli(spec, "--kernel", "unknown", "--dtype", "float64", "--json", str(out))
    assert proc.returncode == code, proc.stdout[-3000:] + proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    ran = {r["property_id"] for r in doc["results"] if r["status"] != "skip"}
    for pid in ("accepts-inputs", "causality", "prefix-invariance", "batch-independence",
                "head-independence", "linearity-in-v", "determinism"):  # fmt: skip
        assert pid in ran, ran
    assert any("kernel" in s["reason"] for s in doc["skips"]), doc["skips"]
    assert "skipped" in proc.stdout and "by reason" in proc.stdout
    assert {g["root"] for g in doc["groups"]} == failing
    for i, pid in enumerate(sorted(failing), 1):
        assert f"[{i}] {pid} (float64)" in proc.stdout
        assert re.search(EXAMPLE_LINE, proc.stdout)
        assert "reproduce (Python" in proc.stdout


#: a causal mask shifted by one position: query t also sees key t + 1 (``tril(1)``)
OFF_BY_ONE = """
import torch


def attention(q, k, v, *, causal):
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        T = q.shape[-2]
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(1), float("-inf"))
    return torch.softmax(s, -1) @ v
"""


def _readme_example() -> str:
    """The README's example function (the first Python block of "Checking your own attention
    variant"), read from the README so the test checks what users copy."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Checking your own attention variant") :]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


#: the default summary of a check fits on a screen (what the README promises)
SHORT = 60


def test_readme_example_prints_a_short_summary(tmp_path):
    """The README's ``attn-theory check myattn:attention --kernel softmax``: the whole battery,
    at most SHORT lines by default (stdout and stderr together), no property row printed (the
    table is --verbose's) and the counts and skips by reason there."""
    (tmp_path / "myattn.py").write_text(_readme_example())
    proc = run_cli("myattn:attention", "--kernel", "softmax", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    lines = (proc.stdout + proc.stderr).rstrip("\n").split("\n")
    assert len(lines) <= SHORT, "\n".join(lines)
    assert "| accepts-inputs |" not in proc.stdout
    assert "runs passed, 0 failed" in proc.stdout and "by reason" in proc.stdout
    assert "FAILED" not in proc.stdout


def test_off_by_one_causal_mask_is_one_root_cause_at_two_tokens(tmp_path):
    """A causal mask shifted by one (``tril(1)``): every failure of the battery is one group,
    rooted at causality, whose minimal counterexample has T = S <= 2 and B = H = 1; its
    reproducer shows the output off the reference beyond the bound; --verbose prints each
    property row once."""
    (tmp_path / "offby.py").write_text(OFF_BY_ONE)
    out = tmp_path / "result.json"
    proc = run_cli("offby:attention", "--kernel", "softmax", "--json", str(out), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert len(doc["groups"]) == 1, doc["groups"]
    group = doc["groups"][0]
    assert group["root"] == "causality" and group["cause"] == ["causal"]
    failing = [r for r in doc["results"] if r["status"] == "fail"]
    assert len(group["runs"]) == len(failing)
    pid, dtype = group["example"]
    shown = next(r for r in failing if (r["property_id"], r["dtype"]) == (pid, dtype))
    f = shown["features"]
    assert f["T"] <= 2 and f["S"] <= 2 and f["B"] == 1 and f["H"] == 1 and f["causal"]
    assert float(f["vs_reference"]) > 1  # JSON writes inf as "inf"
    assert "[1] causality" in proc.stdout and "[2]" not in proc.stdout
    run = subprocess.run(
        [sys.executable, "-c", _reproducer(proc.stdout)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "EXCEEDS the bound" in run.stdout


def test_verbose_prints_each_row_once(tmp_path):
    """--verbose adds the table: each (property, dtype) row once (nothing is streamed)."""
    proc = run_cli(
        "tests.faulty_variants:fault09_causal_ignored_short_path",
        "--select",
        "causality",
        "determinism",
        "--dtype",
        "float64",
        "--verbose",
    )
    assert proc.returncode == 1
    assert proc.stdout.count("| causality | float64 |") == 1
    assert proc.stdout.count("| determinism | float64 |") == 1
    assert "causality" not in proc.stderr
