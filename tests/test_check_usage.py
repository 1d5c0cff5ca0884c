"""``attn-theory check`` as a person uses it: a target the checker cannot call is a usage error
before any work (exit 2, the expected and the found signature), a variant that hangs on the
2-token call fails there, the checker's own limits are ``inconclusive`` (exit 5, never the
variant's failure), contradictory options are usage errors, the summary names every claim and
cuts no reason, no library warning reaches the terminal, the README's option lists and
property count are the code's, the README's StateAPI example passes, and the empty-row
convention is judged per dtype.

CLI tests run the real command in a subprocess from the repository root (``tests.<module>``
importable, as with ``python -m``) with a few properties selected.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
U = "tests.usage_variants"


def run_cli(*args: str, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, ATTN_THEORY_PROFILE="ci")
    return subprocess.run(
        [sys.executable, "-m", "verify.cli", "check", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _cpu_seconds(fn):
    """(fn(), CPU seconds its child processes used): a measure of work the machine's load does
    not inflate (wall time on a shared 2-core machine does)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = fn()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


# -- 1. the target before any work ------------------------------------------------------------
def test_signature_problems_say_what_was_expected_and_found():
    """SDPA's spelling, a required extra argument and the keywords the claims add are named;
    the README's function, **kwargs and the project's own variants fit."""
    import usage_variants as uv

    from verify import builtins
    from verify.engine.preflight import signature_problems
    from verify.spec.target import as_variant
    from verify.spec.variant import AttentionVariant, StateAPI

    (sdpa,) = signature_problems(as_variant(uv.sdpa_style))
    assert "expected a callable forward(q, k, v, *, causal)" in sdpa
    assert "sdpa_style(q, k, v, *, is_causal=False)" in sdpa
    assert "'is_causal' where the checker passes 'causal'" in sdpa and "wrap it" in sdpa
    (extra,) = signature_problems(as_variant(uv.extra_argument))
    assert "'scale'" in extra
    assert signature_problems(as_variant(uv.attention)) == []
    assert signature_problems(as_variant(lambda q, k, v, **kw: q)) == []
    for name in ("softmax", "taylor-2", "linear-elu1"):
        assert signature_problems(builtins.get(name)) == []
    masked = AttentionVariant(name="m", forward=uv.attention, supports_mask=True, key_padding=True)
    (both,) = signature_problems(masked)
    assert "attn_mask (claimed by supports_mask=True)" in both
    assert "key_padding_mask (claimed by --key-padding)" in both
    bad_state = AttentionVariant(
        name="s", forward=uv.attention, state_api=StateAPI(lambda q, k, v: (q, None), uv.attention)
    )
    problems = " ".join(signature_problems(bad_state))
    assert "state_api.prefill" in problems and "state_api.step" in problems


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("myattn.py:attention", "drop .py: myattn:attention"),
        ("models/myattn.py:attention", "run from models and check myattn:attention"),
        ("myattn:attention", None),
    ],
)
def test_spec_problem_tells_the_module_name(spec, said):
    from verify.engine.preflight import spec_problem

    got = spec_problem(spec)
    assert (got is None) if said is None else (said in got), got


def test_tiny_call_tells_usage_from_what_the_battery_judges():
    """A TypeError or no tensor of the input's shape is a usage error, with what was expected
    and returned; a restriction's exception is the battery's (a note); the README's function
    is ok. One call each, on B = H = 1, T = S = 2, d = d_v = 2 float32 inputs."""
    import usage_variants as uv

    from verify.engine.preflight import tiny_call
    from verify.spec.target import as_variant

    def restricted(q, k, v, *, causal):
        raise ValueError("d must be a multiple of 4")

    ok = tiny_call(as_variant(uv.attention), "float32")
    assert ok["status"] == "ok", ok
    squeezed = tiny_call(as_variant(uv.squeezed), "float32")
    assert squeezed["status"] == "usage"
    assert "returned shape (1, 2, 2); expected (1, 1, 2, 2)" in squeezed["message"]
    listed = tiny_call(as_variant(uv.not_a_tensor), "float32")
    assert listed["status"] == "usage" and "returned list" in listed["message"]
    note = tiny_call(as_variant(restricted), "float32")
    assert note["status"] == "note" and "ValueError: d must be a multiple of 4" in note["message"]


def test_tiny_call_checks_the_decode_protocol():
    """A decode step written for one token without its sequence axis (B, H, d) is a usage
    error naming the protocol's (B, H, n, d) and the wrapper, found by calling it both ways; a
    step whose output lacks the axis is one too; the protocol's own twin is ok."""
    import usage_variants as uv

    from verify.engine.preflight import tiny_call
    from verify.spec.target import as_variant

    def with_decode(obj):
        return as_variant(uv.attention).with_claims(decode=obj, causal="yes")

    tokenwise = tiny_call(with_decode(uv.TokenwiseDecode()), "float32")
    assert tokenwise["status"] == "usage", tokenwise
    assert "WITHOUT its sequence axis" in tokenwise["message"]
    assert "(B, H, n, d)" in tokenwise["message"] and "torch.stack(outs, 2)" in tokenwise["message"]
    squeezed = tiny_call(with_decode(uv.SqueezedStepOutput()), "float32")
    assert squeezed["status"] == "usage", squeezed
    assert "output shape (1, 1, 2), expected (1, 1, 1, 2)" in squeezed["message"]
    ok = tiny_call(with_decode(uv.ProtocolDecode()), "float32")
    assert ok["status"] == "ok", ok


def test_decode_step_without_sequence_axis_exits_2(tmp_path):
    """Was exit 1 with 'RuntimeError: Tensors must have same number of dimensions' blamed on
    the variant (a new user's KV cache); now exit 2 before the battery, and --json says so."""
    out = tmp_path / "r.json"
    proc = run_cli(f"{U}:attention", "--decode", f"{U}:TokenwiseDecode", "--select",
                   "decode-steps", "--json", str(out))  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "WITHOUT its sequence axis" in proc.stderr
    doc = json.loads(out.read_text())
    assert doc["exit_code"] == 2 and "WITHOUT its sequence axis" in doc["usage_error"]


def test_sdpa_signature_exits_2_before_any_work():
    """f(q, k, v, *, is_causal=False) ran the whole battery (475 s) to a false counterexample;
    now it is told in under 5 CPU seconds, naming causal against is_causal."""
    proc, cpu = _cpu_seconds(lambda: run_cli(f"{U}:sdpa_style", "--kernel", "softmax"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "'is_causal' where the checker passes 'causal'" in proc.stderr
    assert cpu < 5.0, cpu


def test_file_name_target_is_told_to_drop_py():
    proc = run_cli("usage_variants.py:attention", cwd=ROOT / "tests")
    assert proc.returncode == 2
    assert "drop .py: usage_variants:attention" in proc.stderr


def test_tiny_call_usage_error_exits_2():
    proc = run_cli(f"{U}:squeezed", "--kernel", "softmax")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "expected (1, 1, 2, 2)" in proc.stderr and "checker's 2-token call" in proc.stderr


# -- 2. the checker's limits ----------------------------------------------------------------
def _result(*statuses, reason=""):
    from verify import builtins
    from verify.engine.check import CheckResult
    from verify.spec.results import PropertyResult

    rows = [
        PropertyResult(f"p{i}", "contract", "s", status, "float64", "cpu", reason=reason)
        for i, status in enumerate(statuses)
    ]
    return CheckResult(variant=builtins.get("softmax"), results=rows)


@pytest.mark.parametrize(
    ("statuses", "code"),
    [
        (("fail", "inconclusive", "pass"), 1),  # a failure wins
        (("error", "inconclusive", "pass"), 4),  # the checker's bug wins over its limits
        (("inconclusive", "pass"), 5),  # a run without a verdict is not a pass
        (("inconclusive", "skip"), 5),
        (("pass", "skip"), 0),
    ],
)
def test_inconclusive_exit_code_and_counts(statuses, code):
    res = _result(*statuses)
    assert res.exit_code == code
    assert res.counts["inconclusive"] == statuses.count("inconclusive")
    assert all(r.status == "fail" for r in res.failed)  # inconclusive runs are not failures
    assert len(res.inconclusive) == statuses.count("inconclusive")


def test_summary_counts_inconclusive_apart_and_says_what_to_raise():
    from verify.render.check import summary_text, to_json

    why = "the time limit (8 s per property, --timeout) ran out: 130 examples passed before it"
    res = _result("inconclusive", "pass", reason=why)
    text = summary_text(res)
    assert "1 run passed, 0 failed, 0 skipped, 1 inconclusive, 0 internal errors" in text
    assert "INCONCLUSIVE: 1 run of 1 property" in text and "FAILED" not in text
    assert "130 examples passed before it" in text and "--timeout 16" in text
    assert "output differs from the claimed kernel" not in text
    assert to_json(res)["counts"]["inconclusive"] == 1


def test_time_limit_is_inconclusive_not_the_variants_failure(tmp_path):
    """A correct variant with far more examples than the time limit allows: every run stops at
    the limit with the examples that passed, exit 5, and the summary says what to raise."""
    out = tmp_path / "r.json"
    proc = run_cli(f"{U}:attention", "--kernel", "softmax", "--select", "causality",
                   "--dtype", "float64", "--max-examples", "100000", "--timeout", "6",
                   "--json", str(out))  # fmt: skip
    assert proc.returncode == 5, proc.stdout[-3000:] + proc.stderr[-2000:]
    (r,) = json.loads(out.read_text())["results"]
    assert r["status"] == "inconclusive" and r["examples"] > 0
    assert "the time limit (6 s per property, --timeout) ran out" in r["reason"]
    assert "INCONCLUSIVE" in proc.stdout and "FAILED" not in proc.stdout
    assert "--timeout 12" in proc.stdout and "--max-examples" in proc.stdout


def test_a_worker_killed_by_sigkill_is_inconclusive_a_crash_fails():
    """SIGKILL mid-job is what the out-of-memory killer sends (the dev profile's Taylor-3
    gradient example took 22 GB): the checker's limit, inconclusive; a variant that exits on
    its own is its failure. (Worker processes, as the command line runs them.)"""
    import usage_variants as uv

    from verify.engine.check import check

    for fn, status, words in (
        (uv.sigkilled, "inconclusive", "killed by SIGKILL"),
        (uv.exits_past_two_tokens, "fail", "the worker crashed (exit code 7)"),
    ):
        res = check(fn, kernel="softmax", select=["causality"], dtypes=("float64",),
                    isolate=True, probe=False)  # fmt: skip
        (r,) = [r for r in res.results if r.property_id == "causality"]
        assert r.status == status and words in r.reason, (fn, r.status, r.reason)


# -- 3. the summary ---------------------------------------------------------------------------
def test_claims_line_names_every_claim_checked():
    """Every claim that is not a bare variant's default is on the 'checked claims:' line
    (window, kv heads, softcap, ALiBi, precision, arithmetic, ...), the empty-row convention of
    each dtype when it differs."""
    import usage_variants as uv

    from verify.engine.check import CheckResult
    from verify.render.check import claims_line
    from verify.spec.variant import AttentionVariant

    v = AttentionVariant(
        name="mistral-like", forward=uv.attention, kernel="softmax", causal="yes",
        kv_heads=2, window=(3, 0), softcap=30.0, alibi_slopes="reference",
        precision="online:64", arithmetic="flash-attention-2", qk_norm=True,
        key_padding=True, score_bias=True, dv_equals_d=True, head_dim_multiple=2,
        compute_dtype="float32", eps=1e-6, eps_mode="floor", empty_rows="zeros",
    )  # fmt: skip
    line = claims_line(CheckResult(variant=v))
    for word in ("kernel=softmax", "causal=yes", "kv_heads=2", "window=3,0", "softcap=30.0",
                 "alibi_slopes=reference", "precision=online:64",
                 "arithmetic=flash-attention-2", "qk_norm", "key_padding", "score_bias",
                 "dv_equals_d", "head_dim_multiple=2", "compute_dtype=float32", "eps=1e-06",
                 "eps_mode=floor", "empty_rows=zeros"):  # fmt: skip
        assert word in line, (word, line)
    per = claims_line(
        CheckResult(variant=v, empty_rows_by_dtype={"float64": "nan", "float32": "uniform"})
    )
    assert "empty_rows per dtype: float64 nan, float32 uniform" in per


def test_claims_line_names_the_dtypes_that_ran():
    """Asking for bfloat16 claims it beside the variant's float64/float32, but only bfloat16
    runs: the line says the dtypes of the runs, not the claimed set."""
    import usage_variants as uv

    from verify.engine.check import CheckResult
    from verify.render.check import claims_line
    from verify.spec.results import PropertyResult
    from verify.spec.variant import AttentionVariant

    v = AttentionVariant(name="v", forward=uv.attention, kernel="softmax",
                         dtypes=("float64", "float32", "bfloat16"))  # fmt: skip
    runs = [PropertyResult(property_id="causality", derivation="D2", statement="-",
                           dtype="bfloat16", device="cpu", status="pass")]  # fmt: skip
    line = claims_line(CheckResult(variant=v, results=runs))
    assert "dtypes=bfloat16" in line and "float32" not in line, line


def test_summary_wraps_reasons_instead_of_cutting_them():
    from verify import builtins
    from verify.engine.check import CheckResult
    from verify.render.check import summary_text
    from verify.spec.results import PropertyResult

    reason = " ".join(f"word{i}" for i in range(150)) + " THE-END"
    r = PropertyResult("causality", "contract", "long " * 60, "fail", "float64", "cpu",
                       reason=reason, counterexample="x", features={"B": 1, "H": 1, "T": 2,
                       "S": 2, "d": 1, "d_v": 1, "causal": True, "mask": False})  # fmt: skip
    text = summary_text(CheckResult(variant=builtins.get("softmax"), results=[r]))
    assert "…" not in text
    assert "THE-END" in text and " ".join(text.split()).count("word149 THE-END") == 1
    assert max(len(line) for line in text.split("\n") if "word" in line) <= 100


# -- 4. options, progress, warnings ----------------------------------------------------------
def _claims(argv):
    from verify.cli.options import add_claim_options, claims_from

    p = argparse.ArgumentParser()
    add_claim_options(p.add_argument)
    args = p.parse_args(argv)
    return claims_from(lambda d: getattr(args, d))


@pytest.mark.parametrize(
    "argv",
    [
        ["--normalized", "--unnormalized"],
        ["--kernel", "sigmoid", "--normalized"],
        ["--dv-equals-d", "--dv-free"],
        ["--alibi", "--alibi-slopes", "0.5,0.25"],
        ["--kernel", "softmax", "--kernel", "taylor:2"],
        ["--feature-map", "tests.usage_variants:attention", "--kernel", "softmax"],
        ["--alignment", "bottom-right", "--causal", "no"],
        ["--decay", "0.9", "--alibi"],
    ],
)
def test_contradictory_options_are_usage_errors(argv):
    with pytest.raises(ValueError, match="contradict"):
        _claims(argv)


def test_consistent_options_are_claims():
    """The same value twice, and an option with its own unrelated claims, are no contradiction
    (the twin of the table above)."""
    got = _claims(["--kernel", "softmax", "--kernel", "softmax", "--unnormalized", "--alibi"])
    assert got["kernel"] == "softmax" and got["normalized"] is False
    assert got["alibi_slopes"] == "reference"


def test_contradictory_options_exit_2_through_the_cli():
    proc = run_cli(f"{U}:attention", "--normalized", "--unnormalized")
    assert proc.returncode == 2
    assert "--normalized and --unnormalized contradict each other" in proc.stderr
    assert "checking" not in proc.stderr  # before any work


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal(monkeypatch):
    """tqdm on a terminal (erased at the end), nothing on a pipe or a file."""
    from verify.cli import check as cli
    from verify.spec.results import PropertyResult

    monkeypatch.setattr(cli, "PROGRESS_DELAY", 0.0)
    row = PropertyResult("causality", "contract", "s", "pass", "float64", "cpu")
    for stream, shown in ((_Terminal(), True), (io.StringIO(), False)):
        bar = cli._Progress(stream)
        bar.start(3)
        bar(row)
        time.sleep(0.2)
        bar(row)
        bar.close()
        assert ("2/3" in stream.getvalue()) is shown, stream.getvalue()


def test_library_warnings_are_captured_and_counted_never_printed(tmp_path):
    """A warning issued in every call of the variant: counted in the JSON, never on stderr."""
    (tmp_path / "warner.py").write_text(
        "import warnings\n\nimport torch\n\n\n"
        "def attention(q, k, v, *, causal):\n"
        "    warnings.warn('deprecated kernel path', DeprecationWarning)\n"
        "    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5\n"
        "    if causal:\n"
        "        T = q.shape[-2]\n"
        "        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float('-inf'))\n"
        "    return torch.softmax(s, -1) @ v\n"
    )
    proc = run_cli("warner:attention", "--kernel", "softmax", "--select", "determinism",
                   "--dtype", "float64", "--json", "-", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "deprecated kernel path" not in proc.stderr
    doc = json.loads(proc.stdout)
    counted = doc["warnings"].get("DeprecationWarning: deprecated kernel path", 0)
    assert counted > 0, doc["warnings"]


# -- 5. the README ---------------------------------------------------------------------------
def test_readme_options_and_property_count_are_the_codes():
    """The generated parts of README.md equal what ``python -m verify.cli.readme --write`` makes
    from the option table, the plugin and the catalogue."""
    from verify.cli.readme import differences

    diff = differences((ROOT / "README.md").read_text(encoding="utf-8"))
    assert not diff, "README.md is stale: run python -m verify.cli.readme --write\n" + "\n".join(
        diff[:40]
    )


def test_readme_check_fails_on_a_stale_readme():
    """The faulty twin: a README missing an option row, or stating another property count, is
    caught; every option of the table and of the plugin is in the regenerated text."""
    from verify.cli.options import CLAIM_OPTIONS
    from verify.cli.readme import catalogue_size, differences, generated, plugin_options

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    row = next(line for line in text.split("\n") if line.startswith("| `--window"))
    assert differences(text.replace(row + "\n", ""))
    n = catalogue_size()
    assert differences(text.replace(f"of {n} properties", f"of {n + 3} properties"))
    fresh = generated(text)
    for opt in CLAIM_OPTIONS:
        assert f"`--{opt.name}" in fresh and f"`--attn-{opt.name}" in fresh
    for option, _ in plugin_options():
        assert f"`{option.split(' / ')[0]}" in fresh
    counts = re.findall(r"ran \d+ of (\d+) properties|\((\d+) with today's catalogue", fresh)
    assert counts and {int(a or b) for a, b in counts} == {n}


def _readme_state_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Declaring a variant") :]
    section = section[section.index("A streaming state API") :]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_state_api_example_is_the_tested_file_and_passes():
    """The README's KV cache is tests/state_api_example.py, and the checker passes its state
    API; the twin whose step does not see its own key fails state-step."""
    assert _readme_state_example() == (ROOT / "tests" / "state_api_example.py").read_text()
    common = ["--select", "state-step", "state-split-resume", "--dtype", "float64", "--json", "-"]
    good = run_cli("tests.state_api_example:kv_cache", *common)
    assert good.returncode == 0, good.stderr[-2000:]
    assert {r["status"] for r in json.loads(good.stdout)["results"]} == {"pass"}
    bad = run_cli(f"{U}:kv_cache_step_without_own_key", *common)
    assert bad.returncode == 1, bad.stderr[-2000:]
    failing = {r["property_id"] for r in json.loads(bad.stdout)["results"] if r["status"] == "fail"}
    assert failing == {"state-step"}


# -- 6. the empty-row convention per dtype --------------------------------------------------
def test_empty_row_convention_is_read_and_judged_per_dtype(tmp_path):
    """NaN in float64 and the mean of the values in float32 (whatever empties the row): each
    dtype is judged against its own and passes, with a finding line saying the convention
    differs by dtype; the twin declaring NaN for every dtype fails in float32."""
    common = ["--select", "masks", "causal-alignment", "--dtype", "float64", "--dtype",
              "float32"]  # fmt: skip
    out = tmp_path / "r.json"
    good = run_cli(f"{U}:per_dtype_empty_rows", *common, "--json", str(out))
    assert good.returncode == 0, good.stdout[-3000:] + good.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["empty_rows_by_dtype"] == {"float64": "nan", "float32": "uniform"}
    assert any("differs by dtype" in f for f in doc["findings"]), doc["findings"]
    bad = run_cli(f"{U}:per_dtype_empty_rows_declared_nan", *common, "--json", str(out))
    assert bad.returncode == 1, bad.stdout[-3000:]
    failing = {(r["property_id"], r["dtype"]) for r in json.loads(out.read_text())["results"]
               if r["status"] == "fail"}  # fmt: skip
    assert ("masks", "float32") in failing and not any(dt == "float64" for _, dt in failing)


@pytest.mark.thirdparty
def test_x_transformers_bfloat16_passes_masks(tmp_path):
    """x-transformers' Attend: NaN (float64) or the mean of the values (float32, bfloat16) on a
    row a causal T > S call empties, zeros on a row its mask empties: no single convention in
    any dtype, none judged, and masks passes in bfloat16 (it failed against the float64-probed
    NaN)."""
    pytest.importorskip("x_transformers", reason="x-transformers not installed")
    out = tmp_path / "r.json"
    proc = run_cli("verify.adapters.xtransformers:attend_variant", "--dtype", "bfloat16",
                   "--select", "masks", "--json", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert {(r["property_id"], r["status"]) for r in doc["results"]} == {("masks", "pass")}
    seen = doc["probe"]["cross"]["empty_rows_by_dtype"]
    assert seen["float64"]["causal"] == "nan" and seen["bfloat16"]["causal"] == "uniform"
    assert seen["bfloat16"]["mask"] == "zeros" and doc["claims"]["empty_rows"] == "other"


def test_a_causal_alignment_counterexample_is_shown_as_the_causal_call_it_was():
    """causal-alignment's example holds the aligned visibility as the reference's mask
    (causal=False in the example) but calls the variant with causal=True: the summary's
    counterexample line says causal, as its reproducer does (a user read 'non-causal')."""
    from verify.render.check import shape_words

    f = dict(B=1, H=1, T=1, S=6, d=1, d_v=1, causal=False, mask=False)
    assert shape_words(f, "causal-alignment") == "B=1 H=1 T=1 S=6 d=1 d_v=1, causal"
    assert shape_words(f, "oracle-agreement").endswith(", non-causal")


def test_a_slow_first_call_is_no_internal_error_under_hypothesis_default_deadline():
    """Under a caller's hypothesis profile with the default 200 ms deadline (a user's project,
    the plugin), a first call slower than it (imports, compilation) was DeadlineExceeded, then
    passed on replay: FlakyFailure, an internal error. A property run sets no deadline."""
    import time

    import usage_variants as uv
    from hypothesis import settings

    from verify.properties import get
    from verify.properties.support.base import RunContext, run_property
    from verify.spec.variant import AttentionVariant

    calls = []

    def slow_first(q, k, v, *, causal):
        if not calls:
            time.sleep(0.5)
        calls.append(1)
        return uv.attention(q, k, v, causal=causal)

    previous = settings._current_profile
    settings.register_profile("deadline-200ms", deadline=200)
    settings.load_profile("deadline-200ms")
    try:
        variant = AttentionVariant("slow-first", slow_first, kernel="softmax")
        res = run_property(get("oracle-agreement"), variant, RunContext(max_examples=5))
    finally:
        settings.load_profile(previous)
    assert res.status == "pass", res.reason[-500:]


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("kv_cache_step_without_own_key", "every key but its own"),
        ("kv_cache_dropping_oldest", "only the last 3 of its"),
    ],
)
def test_a_kv_cache_defect_is_named_by_the_keys_its_step_reads(name, said):
    """state-step's failure says which keys the stepped token's output reads, measured
    against the reference over each candidate key set within its own D10 bound: a step that
    reads the cache before appending, a cache that drops its oldest entries; the hint says it
    first. The README's cache passes with nothing said."""
    import usage_variants as uv
    from state_api_example import kv_cache

    from verify.properties import get
    from verify.properties.support.base import RunContext, run_property
    from verify.render.check import look_at

    bad = getattr(uv, name)()
    res = run_property(get("state-step"), bad, RunContext(dtype="float64", max_examples=50))
    assert res.status == "fail", res.reason
    assert f"the stepped token reads {said}" in res.reason, res.reason
    hint = look_at("state-step", bad, (res.reason,))
    assert hint.startswith(f"the stepped token reads {said}"), hint
    ok = run_property(get("state-step"), kv_cache(), RunContext(dtype="float64", max_examples=10))
    assert ok.status == "pass", ok.reason


def test_a_decode_step_reading_before_its_append_is_named_on_the_decode_path():
    """The same diagnosis on the decode protocol (decode-steps), the empty cache included: a
    KV cache whose step's query position is read before the append (decode_variants' off-by-one
    twin) is told as reading every key but its own."""
    import decode_variants as dv

    from verify.properties import get
    from verify.properties.support.base import RunContext, run_property
    from verify.spec.variant import AttentionVariant

    bad = AttentionVariant("off-by-one", dv.softmax_forward, kernel="softmax", causal="yes",
                           decode=dv.KVCache(fault="off_by_one"))  # fmt: skip
    res = run_property(get("decode-steps"), bad, RunContext(dtype="float64", max_examples=30))
    assert res.status == "fail", res.reason
    assert "the stepped token reads every key but its own" in res.reason, res.reason


def test_the_summary_says_plainly_when_no_output_was_compared_with_a_reference():
    """A window-only claim with no kernel (the kernel unknown): the structural properties pass,
    oracle-agreement skips in every dtype; the summary says NOT CHECKED with the reason (a new
    user read a pass of 10 structural properties as a pass). With the kernel claimed, no line."""
    import usage_variants as uv

    from verify.engine.check import check
    from verify.render.check import summary_text

    kw = dict(select=["oracle-agreement", "determinism"], dtypes=("float64",), isolate=False,
              max_examples=5, probe=False)  # fmt: skip
    unknown = summary_text(check(uv.attention, **kw))
    assert (
        "NOT CHECKED: the outputs against a reference (oracle-agreement ran in no dtype" in unknown
    )
    assert "NOT CHECKED" not in summary_text(check(uv.attention, kernel="softmax", **kw))
