"""The probes run under any claim: restrictions, the compute dtype and the eps convention are
found when a kernel is claimed, fill only the fields a variant does not declare, and are stated.

Variants in ``tests/convention_variants.py``: an eager softmax computing in float32 (Hugging
Face's pattern), elu+1 linear attention with its denominator clamped at eps (N/max(D, eps)) or
with eps added (N/(D + eps)), and twins declaring the other convention or a compute dtype they
do not have. Each correct variant passes with the probes and fails without them (the finding is
what makes it pass); each twin fails although the probes find the truth (a declared claim is
never overwritten). The floor's D10 bound (``verify.exact.eps_floor``) holds for the clamped
computation in float64 and float32 and rejects the added one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import convention_variants as cv  # noqa: E402

from verify.engine.check import check  # noqa: E402
from verify.exact import errors, oracle  # noqa: E402
from verify.probes import probe, suggested_claims  # noqa: E402
from verify.probes.findings import merge  # noqa: E402
from verify.render.card import render as render_card  # noqa: E402
from verify.render.check import summary_text, to_json  # noqa: E402
from verify.spec.target import apply_claims, as_variant  # noqa: E402
from verify.spec.variant import AttentionVariant  # noqa: E402

FLOAT32_FINDING = "computes in float32 for float64 inputs: judged against the float32 bound"
FAST = dict(isolate=False, profile="ci", max_examples=20)
OUTPUT = ["oracle-agreement", "weights-vs-reference"]


def statuses(result) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for r in result.results:
        out.setdefault(r.property_id, set()).add(r.status)
    return out


# -- the compute dtype ---------------------------------------------------------------------------
def test_float32_internal_softmax_passes_the_default_battery_with_the_finding(tmp_path):
    """`attn-theory check ... --kernel softmax` on the eager float32 softmax: every property
    passes or skips on float64 and float32, the summary states the finding, the JSON carries
    the claim it led to."""
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "verify.cli", "check", "tests.convention_variants:hf_eager_float32",
         "--kernel", "softmax", "--json", str(out)],
        cwd=ROOT, env=dict(os.environ, ATTN_THEORY_PROFILE="ci"), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"found: {FLOAT32_FINDING}" in proc.stdout
    import json

    doc = json.loads(out.read_text())
    assert doc["claims"]["compute_dtype"] == "float32"
    assert any(f.startswith(FLOAT32_FINDING) for f in doc["findings"])
    ran = {(r["property_id"], r["dtype"]) for r in doc["results"] if r["status"] == "pass"}
    assert ("oracle-agreement", "float64") in ran and ("oracle-agreement", "float32") in ran


def test_float32_internal_softmax_fails_the_float64_bound_without_the_probes():
    """The twin of the finding: the same variant judged against the float64 bound fails."""
    res = check(cv.hf_eager_float32, kernel="softmax", probe=False, select=OUTPUT,
                dtypes=("float64",), **FAST)  # fmt: skip
    assert res.exit_code == 1
    assert statuses(res)["oracle-agreement"] == {"fail"}


WEIGHTS_FINDING = "computes in float32 for float64 inputs"


def test_softmax_computed_in_float32_alone_is_found_from_its_weights():
    """Llama's eager pattern (only the softmax in float32, its outputs float64 numbers): the
    outputs cannot tell it, the weights read with V = I can; with the finding it passes the
    float64 output properties, without the probes it fails them (was: 10 failed runs by
    default); the float64 softmax's weights are not called float32."""
    report = probe(as_variant(cv.hf_llama_eager), seed=0)
    assert report.restrictions.get("compute_dtype") == "float32", report.notes
    assert any("every attention weight is a float32 number" in n for n in report.notes)
    plain = probe(as_variant(cv.hf_llama_eager).with_claims(kernel="softmax"), seed=0,
                  identify=False)  # fmt: skip
    assert plain.restrictions.get("compute_dtype") == "float32"

    def float64_softmax(q, k, v, *, causal):
        s = cv._causal(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, causal)
        return torch.softmax(s, dim=-1) @ v

    exact = probe(as_variant(float64_softmax), seed=0)
    assert "compute_dtype" not in exact.restrictions, exact.notes
    kw = dict(kernel="softmax", select=OUTPUT, dtypes=("float64",), **FAST)
    res = check(cv.hf_llama_eager, **kw)
    assert res.exit_code == 0 and res.variant.compute_dtype == "float32", summary_text(res)
    assert any(f.startswith(WEIGHTS_FINDING) for f in res.findings), res.findings
    assert check(cv.hf_llama_eager, probe=False, **kw).exit_code == 1


def test_every_dtype_runs_with_the_claims_found_when_conventions_differ_by_dtype():
    """Llama's eager code with its finfo.min mask: the empty-row convention differs by dtype, so
    each dtype gets its own variant after the probes. The float64 one got a stale loader of
    the pre-probe variant (a freed variant's id reused), lost compute_dtype = float32, and
    failed gradcheck and convex-combination on the float64 bound (a new user's false failure).
    Now both dtypes run with what was found, and the correct code passes."""
    res = check("tests.convention_variants:hf_llama_eager_min_mask",
                select=["gradcheck", "convex-combination"], profile="ci")  # fmt: skip
    assert set(res.empty_rows_by_dtype.values()) == {"nan", "uniform"}, res.empty_rows_by_dtype
    assert res.exit_code == 0, summary_text(res)
    skipped = {r.dtype: r.reason for r in res.results if r.property_id == "gradcheck"}
    assert "computes in float32" in skipped["float64"], skipped


def test_a_variant_with_a_loader_is_kept_alive_so_its_id_is_never_reused():
    """The cause of the stale claims above, held deterministically: the loaders are cached by
    ``id``, so a variant that was given one must stay alive (else a later variant allocated at
    its address, e.g. the per-dtype one after the probes' merge, gets its loader and claims);
    and each live variant gets a loader with its own claims."""
    import gc
    import weakref

    from verify.engine.jobs import Loaders

    loaders = Loaders("tests.convention_variants:hf_llama_eager")
    first = AttentionVariant("x", cv.hf_llama_eager)
    alive = weakref.ref(first)
    assert dict(loaders(first).claims)["compute_dtype"] is None
    del first
    gc.collect()
    assert alive() is not None
    later = AttentionVariant("x", cv.hf_llama_eager).with_found(compute_dtype="float32")
    assert dict(loaders(later).claims)["compute_dtype"] == "float32"


def test_a_declared_compute_dtype_is_not_excused_by_the_probes():
    """Declaring compute_dtype float64 while computing in float32 fails: the probes' finding
    is stated, not applied."""
    res = check(cv.hf_eager_float32_claimed_float64, select=OUTPUT, dtypes=("float64",), **FAST)
    assert res.variant.compute_dtype == "float64"
    assert res.exit_code == 1
    assert "fail" in statuses(res)["oracle-agreement"]
    assert any("compute_dtype = 'float64' is declared" in f for f in res.findings)
    assert FLOAT32_FINDING not in " ".join(res.findings)


# -- input restrictions --------------------------------------------------------------------------
@pytest.mark.thirdparty
def test_taylor_series_value_restriction_found_under_a_kernel_claim():
    """taylor-series-linear-attention's core needs d_v == d: with `--kernel taylor:2` the probes
    find the restriction and only d_v = d is drawn; without them accepts-inputs fails."""
    pytest.importorskip("taylor_series_linear_attention", reason="package not installed")
    from verify.adapters.taylor_series import taylor_series_forward

    claims = dict(kernel="taylor:2", layout="BTHD", causal="no", dtypes=("float64",))
    sel = ["accepts-inputs", "oracle-agreement"]
    res = check(taylor_series_forward, select=sel, **claims, **FAST)
    assert res.exit_code == 0, [r.reason for r in res.failed]
    assert res.variant.dv_equals_d is True
    assert any("the restriction d_v = d was found" in f for f in res.findings)
    assert "found: rejects a value dimension" in summary_text(res)
    without = check(taylor_series_forward, select=sel, probe=False, **claims, **FAST)
    assert statuses(without)["accepts-inputs"] == {"fail"}


def test_head_dimension_restriction_found_under_a_kernel_claim():
    """Code that needs an even head dimension: with `--kernel softmax` the probes find it and
    only even d is drawn; without them accepts-inputs fails."""
    sel = ["accepts-inputs", "oracle-agreement"]
    claims = dict(kernel="softmax", dtypes=("float64",))
    res = check(cv.even_head_dim_softmax, select=sel, **claims, **FAST)
    assert res.exit_code == 0, [r.reason for r in res.failed]
    assert res.variant.head_dim_multiple == 2
    assert "found: accepts only head dimensions that are multiples of 2" in summary_text(res)
    without = check(cv.even_head_dim_softmax, select=sel, probe=False, **claims, **FAST)
    assert statuses(without)["accepts-inputs"] == {"fail"}


# -- the eps convention --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fn", "mode"), [(cv.clamped_linear, "floor"), (cv.added_linear, "add")], ids=["floor", "add"]
)
def test_the_eps_convention_is_found_under_a_kernel_claim(fn, mode):
    report = probe(apply_claims(as_variant(fn), {"kernel": "linear:elu1"}), identify=False)
    assert report.scope == "conventions"
    assert report.kernel["verdict"] == "not run"  # the claimed kernel is not re-identified
    claims = suggested_claims(report)
    assert (claims["eps"], claims["eps_mode"]) == (cv.EPS, mode)
    assert "kernel" not in claims and "normalized" not in claims and "scale" not in claims


def test_clamped_denominator_passes_under_the_floor_and_fails_without_it():
    sel = [*OUTPUT, "convex-combination", "edge-cases", "single-key"]
    res = check(cv.clamped_linear, kernel="linear:elu1", select=sel, **FAST)
    assert res.exit_code == 0, [r.reason for r in res.failed]
    assert (res.variant.eps, res.variant.eps_mode) == (cv.EPS, "floor")
    assert "found: clamps its denominator at eps = 0.5, N/max(D, eps)" in summary_text(res)
    assert "eps_mode=floor" in summary_text(res)
    doc = to_json(res)
    assert doc["claims"]["eps_mode"] == "floor"
    page = render_card(doc)
    assert "**Found by the probes:**" in page and "- clamps its denominator at eps = 0.5" in page
    without = check(cv.clamped_linear, kernel="linear:elu1", select=sel, probe=False, **FAST)
    assert "fail" in statuses(without)["oracle-agreement"]


@pytest.mark.parametrize(
    ("twin", "found"),
    [(cv.added_claims_floor, "add"), (cv.clamped_claims_add, "floor")],
    ids=["adds-claims-floor", "clamps-claims-add"],
)
def test_a_declared_eps_convention_is_checked_not_replaced(twin, found):
    """Each twin declares the other convention: the probes find the right one, say so, and the
    declared one is what fails."""
    res = check(twin, select=OUTPUT, **FAST)
    assert res.variant.eps_mode != found
    assert res.exit_code == 1
    assert "fail" in statuses(res)["oracle-agreement"]
    assert any(f"the probes found {found!r}" in f for f in res.findings)


# -- declared fields -----------------------------------------------------------------------------
def _softmax(q, k, v, *, causal):
    """Plain softmax attention in the input dtype (non-causal calls only are made here)."""
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        T, S = s.shape[-2], s.shape[-1]
        s = s.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


def test_a_declared_field_is_never_overwritten_by_a_probe_suggestion():
    """AttentionVariant(normalized=False) around a normalized softmax: the probes identify
    softmax and suggest normalized=True; the declared False stays, is checked and fails."""
    declared = AttentionVariant(name="claims_unnormalized", forward=_softmax, normalized=False)
    assert "normalized" in declared.declared and "kernel" not in declared.declared
    res = check(declared, select=["oracle-agreement"], dtypes=("float64",), **FAST)
    assert res.variant.normalized is False
    assert res.variant.kernel == "softmax"  # undeclared: identified and filled
    assert any("declared normalized = False is checked" in f for f in res.findings)
    assert res.exit_code == 1


def test_merge_fills_undeclared_fields_and_takes_the_eps_convention_whole():
    v = apply_claims(as_variant(cv.clamped_linear), {"kernel": "linear:elu1", "eps": 0.1})
    m = merge(v, {"eps": 0.5, "eps_mode": "floor", "dv_equals_d": True, "kernel": "softmax"})
    assert m.applied == {"dv_equals_d": True}  # eps declared 0.1: the found pair is not applied
    assert (m.variant.eps, m.variant.eps_mode, m.variant.kernel) == (0.1, "add", "linear:elu1")
    assert set(m.kept) == {"eps", "eps_mode", "kernel"}
    assert m.variant.declared == v.declared  # a found value does not become declared
    m2 = merge(as_variant(cv.clamped_linear), {"eps": 0.5, "eps_mode": "floor"})
    assert (m2.variant.eps, m2.variant.eps_mode) == (0.5, "floor") and not m2.kept


# -- the floor's D10 bound -----------------------------------------------------------------------
def _draws(n: int = 6):
    g = torch.Generator().manual_seed(7)
    for _ in range(n):
        # entries around -2: elu+1 features e^x, kernel sums on both sides of EPS
        q, k = (2 * torch.randn(1, 2, 5, 3, generator=g, dtype=torch.float64) - 2 for _ in range(2))
        yield q, k, torch.randn(1, 2, 5, 2, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_floor_bound_holds_for_the_clamp_and_rejects_the_addition(dtype):
    """N/max(D, eps) computed as the clamp is within the floor's stated bound of the exact
    result (mpmath oracle, eps_mode="floor"); the same inputs computed as N/(D + eps) are not
    (the twin); the rows drawn have D on both sides of eps; the float64 reference agrees with the
    oracle within its own bound."""
    below = above = 0
    for q, k, v in _draws():
        q, k, v = (t.to(getattr(torch, dtype)) for t in (q, k, v))
        exact = oracle.reference(q, k, v, kernel="elu1", eps=cv.EPS, eps_mode="floor")
        D = np.asarray(exact.denominator, dtype=np.float64)
        below, above = below + int((D < cv.EPS).sum()), above + int((D > cv.EPS).sum())
        eb = errors.attention_error_bound("linear:elu1", q, k, v, dtype=dtype, exact=exact,
                                          eps=cv.EPS, eps_mode="floor")  # fmt: skip
        assert errors.compare(cv.clamped_linear(q, k, v, causal=False), eb, exact).ratio <= 1.0
        assert errors.compare(cv.added_linear(q, k, v, causal=False), eb, exact).ratio > 1.0
        assert (eb.bound < 1e-3).all()  # not vacuous at O(1) data
        ref = errors.float64_reference("linear:elu1", q, k, v, eps=cv.EPS, eps_mode="floor")
        own = errors.attention_error_bound("linear:elu1", q, k, v, dtype="float64",
                                           exact=exact, eps=cv.EPS, eps_mode="floor")  # fmt: skip
        assert errors.compare(ref, own, exact).ratio <= 1.0
    assert below and above


def test_floor_convention_validation():
    with pytest.raises(ValueError, match="eps_mode"):
        AttentionVariant(name="x", forward=cv.clamped_linear, eps_mode="floor")  # eps = 0
    with pytest.raises(ValueError, match="eps_mode"):
        AttentionVariant(name="x", forward=cv.clamped_linear, eps=0.1, eps_mode="clip")
    q = torch.ones(1, 1, 2, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="eps_mode"):
        errors.attention_error_bound("softmax", q, q, q, dtype="float64", eps=0.1,
                                     denominator="count", eps_mode="floor")  # fmt: skip
    with pytest.raises(ValueError, match="eps_mode"):
        oracle.reference(q, q, q, kernel="softmax", eps=0.1, eps_mode="clip")
