"""``verify.testing`` (derived tolerances for other projects' tests) and the low-precision claims
on the command line: ``--dtype bfloat16`` is a claim, the probes name the precision model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from derivations.rounding import unit_roundoff
from verify.testing import assert_attention_close, assert_attention_grads_close, attention_tolerance

ROOT = Path(__file__).resolve().parents[1]


def _readme_example() -> str:
    """The README's example function (the first Python block of "Checking your own attention
    variant"), read from the README so the test checks what users copy."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Checking your own attention variant") :]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


README_EXAMPLE = _readme_example()


def _qkv(dtype, T=512, d=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, 2, T, d, generator=g).to(dtype) for _ in range(3))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_passes(dtype, causal):
    q, k, v = _qkv(dtype)
    assert_attention_close(F.scaled_dot_product_attention(q, k, v, is_causal=causal), q, k, v,
                           causal=causal)  # fmt: skip


def _ulp_above(x: float, dtype) -> float:
    t = torch.tensor([x], dtype=dtype)
    return float(torch.nextafter(t, torch.tensor([float("inf")], dtype=dtype)) - t)


def test_one_element_a_few_ulps_beyond_the_bound_is_rejected():
    q, k, v = _qkv(torch.bfloat16)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    tol = attention_tolerance(q, k, v, causal=True)
    assert tol.shape == o.shape and tol.dtype == torch.float64
    i = (0, 1, 300, 7)
    exact = torch.from_numpy(
        __import__("verify.exact.errors", fromlist=["x"]).float64_reference(
            "softmax", q, k, v, causal=True)
    )[i]  # fmt: skip
    # the smallest bf16 number beyond exact + bound, then three ulps further
    x = torch.tensor([float(exact + tol[i])], dtype=torch.float64).to(torch.bfloat16)
    while float(x) <= float(exact + tol[i]):
        x = torch.nextafter(x, torch.tensor([float("inf")], dtype=torch.bfloat16))
    for _ in range(3):
        x = torch.nextafter(x, torch.tensor([float("inf")], dtype=torch.bfloat16))
    bad = o.clone()
    bad[i] = x[0]
    with pytest.raises(AssertionError) as info:
        assert_attention_close(bad, q, k, v, causal=True)
    text = str(info.value)
    assert "Mismatched elements: 1 / 65536" in text
    assert "at index (0, 1, 300, 7)" in text and "ulps of bfloat16" in text
    assert "precision model 'envelope'" in text


def test_tolerance_is_tighter_than_a_unit_roundoff_model_where_it_can_be():
    """Sanity of scale: for bf16 SDPA the bound of an element is a few u_bf16 of the values'
    size (it is relative to sum_s p_s |v_s|, not to |o|)."""
    q, k, v = _qkv(torch.bfloat16, T=256)
    tol = attention_tolerance(q, k, v)
    assert float(tol.max()) < 20 * unit_roundoff("bfloat16") * float(v.abs().max())


def test_long_rows_work():
    q, k, v = _qkv(torch.bfloat16, T=8192, d=64)
    q = q[:, :1, :64]  # 64 queries over 8192 keys, one head
    k, v = k[:, :1], v[:, :1]
    assert_attention_close(F.scaled_dot_product_attention(q, k, v), q, k, v)


def test_gradients():
    q, k, v = _qkv(torch.bfloat16, T=128, d=32)
    g = torch.randn(1, 2, 128, 32, generator=torch.Generator().manual_seed(4)).bfloat16()
    qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
    F.scaled_dot_product_attention(qq, kk, vv, is_causal=True).backward(g)
    assert_attention_grads_close(qq.grad, kk.grad, vv.grad, q, k, v, g, causal=True)
    bad = vv.grad.clone()
    bad[0, 0, 5, 3] += 1.0
    with pytest.raises(AssertionError, match="dv is not within its derived bound"):
        assert_attention_grads_close(qq.grad, kk.grad, bad, q, k, v, g, causal=True)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((torch.zeros(2, 3), None), "q: expected a 4-d"),
        ((None, "float"), "dtype"),
        ((None, "mask"), "attn_mask"),
        ((None, "precision"), "precision"),
    ],
)
def test_bad_input_names_the_argument(args, match):
    q, k, v = _qkv(torch.float32, T=4, d=4)
    kw = {}
    if args[1] == "float":
        k = k.double()
    elif args[1] == "mask":
        kw["attn_mask"] = torch.ones(4, 4)
    elif args[1] == "precision":
        kw["precision"] = "fast"
    elif args[0] is not None:
        q = args[0]
    with pytest.raises((TypeError, ValueError), match=match):
        attention_tolerance(q, k, v, **kw)


# -- the command line: a dtype asked for is a claim; the probes name the model ----------------
def _cli(tmp_path, *args):
    (tmp_path / "myattn.py").write_text(README_EXAMPLE)
    env = dict(os.environ, ATTN_THEORY_PROFILE="ci", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "verify.cli", "check", *args, "--json", "-"], cwd=tmp_path,
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_readme_example_passes_in_bfloat16_under_the_eager_model(tmp_path):
    proc = _cli(tmp_path, "myattn:attention", "--kernel", "softmax", "--dtype", "bfloat16",
                "--select", "oracle-agreement", "dtype-agreement", "rounding-bias",
                "gradients-vs-reference")  # fmt: skip
    out = json.loads(proc.stdout)
    assert proc.returncode == 0, out["results"]
    assert out["claims"]["precision"] == "eager" and "bfloat16" in out["claims"]["dtypes"]
    assert out["precision_model"]["found"][0]["matches"]["eager"] == 1.0
    assert {r["status"] for r in out["results"]} == {"pass"} and len(out["results"]) == 4


def test_bf16_accumulation_fails_against_the_default_envelope_model():
    """A kernel accumulating P.V in bf16 on long rows, checked as a plain function in bf16: no
    model bit-matches it, so the default (envelope: fused, eager, online:16) model decides, and
    dtype-agreement fails."""
    import lowprec_variants as lv

    from verify import profiles
    from verify.probes.precision_model import identify_precision
    from verify.properties import get
    from verify.properties.support.base import RunContext, run_property
    from verify.spec.target import as_variant

    variant = as_variant(lv.bf16_accumulating).with_claims(
        kernel="softmax", dtypes=("float64", "float32", "bfloat16")
    )
    assert identify_precision(variant, dtype="bfloat16")["model"] is None
    with profiles.without_shrinking():
        res = run_property(
            get("dtype-agreement"), variant, RunContext(dtype="bfloat16", max_examples=1)
        )
    assert res.status == "fail" and res.max_ratio > 1
    assert "precision model envelope" in res.reason


def test_pytest_plugin_runs_the_bfloat16_battery(tmp_path):
    (tmp_path / "myattn.py").write_text(README_EXAMPLE)
    env = dict(os.environ, ATTN_THEORY_PROFILE="ci", PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(tmp_path), str(tmp_path), "--attn-variant", "myattn:attention", "--attn-kernel",
         "softmax", "--attn-dtype", "bfloat16", "--attn-select", "oracle-agreement",
         "--attn-select", "rounding-bias"], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "2 passed" in proc.stdout
