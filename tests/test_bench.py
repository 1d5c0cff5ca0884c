"""Tests of ``attn-theory bench`` (issue 3): the ``--quick`` run writes exactly its two files with
the expected structure, the analytic FLOP count agrees with torch's counter, the correctness gate
stops a wrong fast path. Timing values are never asserted (they depend on the machine)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

from derivations import state_size as d5
from verify.attention import taylor_attention
from verify.bench import analyse, config, measure
from verify.bench import collect as bench_collect
from verify.cli import main
from verify.render import benchmarks as bench_report

REPO_REPORTS = Path(__file__).resolve().parents[1] / "reports"
TOP_KEYS = {
    "schema", "command", "quick", "config", "methods", "skipped", "correctness", "timings",
    "ratios", "crossover_sdpa", "growth", "chunk_sweep", "flops", "decode", "orders", "goals",
    "limits", "profiles", "fla", "memory", "load_average", "runtime_s", "environment",
    "backward",
}  # fmt: skip


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _owned_in_repo() -> dict[str, int]:
    return {
        name: (REPO_REPORTS / name).stat().st_mtime_ns
        for name in bench_report.OWNED
        if (REPO_REPORTS / name).exists()
    }


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One ``--quick`` run from an empty working directory into ``<tmp>/out``, which already
    holds a file the bench does not own."""
    root = tmp_path_factory.mktemp("bench")
    cwd, out = root / "cwd", root / "out"
    cwd.mkdir()
    out.mkdir()
    (out / "other.md").write_text("kept\n")
    repo_before = _owned_in_repo()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        rc = main(["bench", "--quick", "--quiet", "--report-dir", str(out)])
    finally:
        os.chdir(old)
    return {"rc": rc, "root": root, "out": out, "repo_before": repo_before}


def test_quick_run_writes_exactly_the_two_owned_files(quick_run):
    assert quick_run["rc"] == 0
    root = quick_run["root"]
    assert _files(root) == {"out/benchmarks.md", "out/benchmarks.json", "out/other.md"}
    assert (quick_run["out"] / "other.md").read_text() == "kept\n"
    assert _owned_in_repo() == quick_run["repo_before"]  # the project's reports untouched
    assert torch.get_num_threads() == 1  # the bench restores the caller's thread count


@pytest.fixture(scope="module")
def doc(quick_run):
    return json.loads((quick_run["out"] / "benchmarks.json").read_text())


def _positive_finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def test_json_structure(doc):
    assert set(doc) == TOP_KEYS
    assert doc["schema"] == config.SCHEMA and doc["quick"] is True
    cfg = doc["config"]
    assert (cfg["batch"], cfg["heads"], cfg["d"], cfg["d_v"], cfg["dtype"]) == (
        1, 4, 16, 16, "float32",
    )  # fmt: skip
    lengths = cfg["lengths"]
    measured = {(r["T"], r["method"]) for r in doc["timings"]}
    for T in lengths:
        for m in ("chunked", "recurrent", "sdpa"):
            assert (T, m) in measured
    assert {r["method"] for r in doc["ratios"]} <= set(config.METHODS) - {"chunked"}
    assert len(doc["goals"]) == 4
    for g in doc["goals"]:
        assert g["met"] in (True, False, None)
        missed = [x["goal"] for x in doc["limits"]]
        assert (g["met"] is False) == (g["goal"] in missed)
    for name in ("chunked", "recurrent"):
        assert doc["profiles"][name]["top"]
    assert doc["profiles"]["decode_cprofile"]["top"]


def test_ratios_and_times_are_positive_finite(doc):
    assert doc["ratios"]
    for r in doc["ratios"]:
        assert all(_positive_finite(r[k]) for k in ("median", "q1", "q3")), r
        assert r["q1"] <= r["median"] <= r["q3"]
    for r in doc["timings"]:
        assert len(r["times_s"]) == doc["config"]["repeats"] == r["runs"]
        assert all(_positive_finite(t) for t in r["times_s"])
    for row in doc["flops"]["chunked"]:
        assert _positive_finite(row["gflops_per_s"]) and row["matmul_count_agrees"] is True
    assert _positive_finite(doc["decode"]["ms_per_token"]["median"])
    # a fitted slope of noisy times (the quick run's few short lengths on a loaded machine
    # measured -1.09 once): a number, its sign is the benchmark's finding, not a test's
    assert math.isfinite(doc["growth"]["exponent"])


def test_correctness_gate_rows(doc):
    rows = {r["method"]: r for r in doc["correctness"]}
    assert {"chunked", "parallel", "recurrent"} <= set(rows)
    assert all(r["ok"] and r["max_error_over_bound"] <= 1.0 for r in rows.values())


def test_state_bytes_against_d5(doc):
    """The measured state bytes are the D5 sizes (derivations.state_size) x B x H x 4 bytes."""
    cfg = doc["config"]
    rows = doc["orders"]
    assert {(r["order"], r["basis"]) for r in rows} == {
        (n, b) for n in (1, 2, 3, 4) for b in ("symmetric", "tensor")
    }
    for r in rows:
        want = d5.state_numbers(r["order"], cfg["d"], cfg["d_v"], r["basis"])
        measured = r["state_bytes"]["numerator"] + r["state_bytes"]["denominator"]
        assert measured == want * cfg["batch"] * cfg["heads"] * 4
        assert r["matches_d5"] is True


def test_markdown_has_the_sections(quick_run):
    md = (quick_run["out"] / "benchmarks.md").read_text()
    for heading in (
        "## Correctness gate",
        "## Taylor-2 forms against T",
        "## Streaming decode",
        "## Achieved FLOP/s",
        "## Orders N = 1..4",
        "## Goals",
        "## Profiles",
    ):
        assert heading in md
    assert "load average" in md


@pytest.mark.parametrize(
    "T, chunk, order, basis",
    [
        (200, 64, 2, "symmetric"),
        (256, 64, 2, "symmetric"),
        (37, 8, 3, "tensor"),
        (5, 8, 1, "symmetric"),
    ],
)
def test_chunked_matmul_flops_match_the_flop_counter(T, chunk, order, basis):
    """The analytic matmul count equals FlopCounterMode's on the same call (partial chunks too)."""
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(1, 3, T, 4, generator=g) for _ in range(3))
    analytic = measure.chunked_flops(T, order=order, d=4, d_v=4, chunk_size=chunk, basis=basis)
    with torch.inference_mode():
        counted = measure.counted_matmul_flops(
            lambda: taylor_attention(
                q, k, v, order=order, causal=True, form="chunked", chunk_size=chunk, basis=basis
            )
        )
    assert counted == 3 * analytic["matmul"]
    assert analytic["total"] == analytic["matmul"] + analytic["elementwise"]


def test_chunked_flops_rejects_bad_sizes():
    with pytest.raises(ValueError, match="T"):
        measure.chunked_flops(0, order=2, d=4, d_v=4, chunk_size=8)
    with pytest.raises(ValueError, match="chunk_size"):
        measure.chunked_flops(8, order=2, d=4, d_v=4, chunk_size=0)


def test_loglog_slope_and_crossover():
    xs = [256, 1024, 4096]
    assert analyse.loglog_slope(xs, [3 * x**1.5 for x in xs]) == pytest.approx(1.5, rel=1e-12)
    # ratio T / 2000 crosses 1 at T = 2000 exactly under log-log interpolation
    got = analyse.crossover([1000, 4000], [0.5, 2.0])
    assert got["T"] == 2000
    assert analyse.crossover([1000, 4000], [1.5, 2.0])["T"] is None
    assert analyse.crossover([1000, 4000], [0.5, 0.9])["T"] is None


def test_summary_quartiles():
    s = analyse.summary([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s["q1"], s["median"], s["q3"]) == (2.0, 3.0, 4.0)


def test_gate_failure_times_nothing_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """A wrong chunked fast path (off by 1e-3) is caught before timing: exit 1, no files."""
    import verify.attention as va

    real = va.taylor_attention

    def wrong(q, k, v, **kw):
        o = real(q, k, v, **kw)
        return o + 1e-3 if kw.get("form") == "chunked" else o

    monkeypatch.setattr(va, "taylor_attention", wrong)
    monkeypatch.setattr(
        bench_collect, "_fla_naive_chunk_based", lambda: (None, "skipped in this test")
    )
    out = tmp_path / "out"
    assert main(["bench", "--quick", "--quiet", "--report-dir", str(out)]) == 1
    assert "correctness gate failed" in capsys.readouterr().err
    assert not out.exists() and _files(tmp_path) == set()


@pytest.mark.parametrize("argv", [["--repeats", "0"], ["--threads", "x"], ["--bogus"]])
def test_bad_arguments_are_usage_errors(argv):
    with pytest.raises(SystemExit) as exc:
        main(["bench", *argv])
    assert exc.value.code == 2
