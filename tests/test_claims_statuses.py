"""Statuses, conditions and credits that match the evidence (derivations and reports/claims.md).

Each condition a record or a claim row states is shown necessary here by its counterexample,
computed independently of the code under test (torch/numpy floating point, mpmath at 50+ digits,
exact fractions), and each added check is shown to reject the wrong statement it guards against.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import torch

from derivations import related, rounding, rounding_claims, separation, truncation
from derivations._record import Derivation, Status
from verify.render import claims as claims_page


def _failed(rec):
    return [c.name for c in rec.claims if c.status is Status.FAILED]


def _scratch(rid="DX"):
    return Derivation(rid, "scratch record for one claim group")


# -- D10: bf16 x bf16 products are not always exact in fp32 --------------------------------------
def test_bf16_product_counterexamples_in_torch():
    tiny = (1 + 2.0**-7) * 2.0**-70
    big = 2.0**100
    for v in (tiny, big):  # both are bfloat16 values
        assert torch.tensor(v, dtype=torch.bfloat16).item() == v
    t = torch.tensor([tiny, big], dtype=torch.bfloat16).to(torch.float32)
    prod32 = (t * t).tolist()
    exact = Fraction(tiny) ** 2  # (1 + 2^-6 + 2^-14) 2^-140
    assert exact == (1 + Fraction(1, 2**6) + Fraction(1, 2**14)) / 2**140
    assert Fraction(prod32[0]) != exact  # rounded in fp32's subnormal range
    assert math.isinf(prod32[1])  # 2^200 overflows fp32
    assert not rounding.product_always_exact("bfloat16", "float32")
    assert rounding.product_exact_in("bfloat16", "float32")  # the significand alone fits


def test_fp16_products_always_exact_in_fp32():
    """fp16 into fp32 (and fp32 into fp64) stay in the target's normal range: the extremes and
    random pairs multiply exactly (float64 products of fp16 values are exact: 22 <= 53 bits)."""
    assert rounding.product_always_exact("float16", "float32")
    assert rounding.product_always_exact("float32", "float64")
    fi = np.finfo(np.float16)
    special = np.array(
        [float(fi.smallest_subnormal), float(fi.smallest_normal), float(fi.max), 1 + 2.0**-10],
        dtype=np.float16,
    )
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 0x7BFF, size=4000, dtype=np.uint16)
    vals = np.concatenate([special, bits.view(np.float16)])
    a, b = np.meshgrid(vals[:80], vals)
    p32 = a.astype(np.float32) * b.astype(np.float32)
    p64 = a.astype(np.float64) * b.astype(np.float64)
    assert np.array_equal(p32.astype(np.float64), p64)
    assert rounding.smallest_subnormal("float16") == Fraction(float(fi.smallest_subnormal))


def test_claiming_bf16_products_always_exact_fails():
    rec = _scratch()
    rounding_claims.claim_two_level(rec, (("bfloat16", "float32"),))
    failed = _failed(rec)
    assert any("every product is exact for bfloat16" in n for n in failed), failed
    good = _scratch()
    rounding_claims.claim_two_level(good)
    assert not _failed(good)
    names = [c.name for c in good.claims]
    assert any("range condition is necessary" in n for n in names)
    assert not any("(2p <= 24)" in n for n in names)  # the old condition-free wording is gone


# -- D10: the two-level step shows the underflow term the code adds ------------------------------
def test_two_level_step_displays_what_the_code_computes():
    rec = _scratch()
    rounding_claims.claim_two_level(rec)
    step = next(s for s in rec.steps if s.text.startswith("Two-level model"))
    assert "eta_low" in step.text
    # the code adds eta_low: with a = |o| = 0 the bound is exactly the underflow term
    for dtype in ("float32", "float16", "bfloat16"):
        eta = rounding.underflow_abs_error(dtype)
        assert eta > 0 and rounding.low_precision_output_bound(0.0, 0.0, dtype) == eta
    claim = next(c for c in rec.claims if c.name.startswith("low_precision_output_bound"))
    assert claim.status is Status.VERIFIED


# -- D10: one convention for the cited library ulps ------------------------------------------
def test_library_ulps_one_convention():
    tables = (rounding.LIBRARY_EXP_ULPS, rounding.LIBRARY_DIV_ULPS)
    for table in tables:
        for name, c in table.items():
            assert c.measured_from in rounding.ULP_REFERENCES, name
            expected = c.stated + (0.0 if c.measured_from == "exact" else 0.5)
            assert c.value == expected, name
    exp = rounding.LIBRARY_EXP_ULPS
    # glibc measures from the correctly rounded result; SLEEF from the exact value
    assert exp["cpu-glibc"].measured_from == "correctly rounded" and exp["cpu-glibc"].value == 1.5
    assert "correctly rounded result" in exp["cpu-glibc"].source
    assert exp["cpu-sleef-u10"].measured_from == "exact" and exp["cpu-sleef-u10"].value == 1.0
    assert exp["cpu-torch-exp_u20"].measured_from == "not stated"
    assert exp["cpu-torch-exp_u20"].value == 20.5
    assert exp["cuda-expf"].value == 2.5 and exp["cuda-exp"].value == 1.5
    with pytest.raises(ValueError, match="measured_from"):
        rounding.ulps_from_exact(1.0, "nearest")


def test_mixed_ulp_convention_is_rejected(monkeypatch):
    """glibc's 1 ulp left unconverted (the mixed table the record used to show) fails."""
    old = rounding.LIBRARY_EXP_ULPS["cpu-glibc"]
    monkeypatch.setitem(rounding.LIBRARY_EXP_ULPS, "cpu-glibc", old._replace(value=1.0))
    rec = _scratch()
    rounding_claims.claim_library_ulps(rec)
    assert any("one convention" in n for n in _failed(rec)), _failed(rec)


# -- D10: the standard model's assumptions, each necessary; FMA covered ------------------------
def test_d10_statement_states_its_assumptions():
    rec = _scratch("D10")
    rounding_claims.claim_assumptions(rec)
    text = rec.statement["assumptions"].latex()
    for needle in (
        "round to nearest (ties to even)",
        "no TF32",
        "no flush-to-zero",
        "square root correctly rounded unless a library division is cited",
        "FMA contraction covered",
    ):
        assert needle in text, needle
    assert not _failed(rec)
    fma = next(c for c in rec.claims if c.name == rounding_claims.FMA_COVERED)
    assert fma.status is Status.PROVED
    cited = next(c for c in rec.claims if c.status is Status.CITED)
    assert "IEEE Std 754-2019" in cited.source and "Higham" in cited.source


@pytest.mark.parametrize("name", list(rounding_claims.ASSUMPTIONS))
def test_dropping_an_assumption_fails(name):
    """Claiming the model holds without one assumption fails that assumption's instance only."""
    rec = _scratch("D10")
    rounding_claims.claim_assumptions(rec, (name,))
    assert _failed(rec) == [
        f"{name} is needed: without it one float32 operation errs by more than the model's bound"
    ]
    with pytest.raises(ValueError, match="dropped"):
        rounding_claims.claim_assumptions(_scratch("D10"), ("no NaN",))


def test_assumption_instances_in_numpy_and_torch():
    """The instances, reproduced in real float32 arithmetic: round to nearest keeps x's error
    below u where truncation (masking the low bits) does not; 11-bit TF32 inputs lose 2^-11 on
    a product; torch's flush-denormal mode (where the CPU supports it) zeroes a subnormal product
    that gradual underflow keeps exactly; a / b is within u |a/b| where a * (1 / b) is not."""
    u = 2.0**-24
    x = Fraction(1) + (2 - Fraction(1, 2**10)) * Fraction(1, 2**24)
    near = np.float32(float(x))  # float64 holds x exactly; one rounding to float32
    assert abs(Fraction(float(near)) - x) <= u * x
    assert float(near) == 1.0 + 2.0**-23  # rounded up to the nearest float32
    assert abs(Fraction(1) - x) > u * x  # truncation, to 1, errs above u
    a = np.float32(1 + 2.0**-12)
    tf32 = np.array([a], dtype=np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    a_tf32 = tf32.view(np.float32)[0]  # 10 stored significand bits (TF32), here truncated to 1
    assert float(a_tf32) == 1.0
    err = abs(Fraction(float(np.float32(a_tf32 * a_tf32))) - Fraction(float(a)) ** 2)
    assert err > Fraction(u / (1 - u)) * Fraction(float(a)) ** 2
    t = torch.tensor([2.0**-70], dtype=torch.float32) * torch.tensor([1.5 * 2.0**-60])
    assert t.item() == 1.5 * 2.0**-130  # gradual underflow: exact
    if torch.set_flush_denormal(True):
        try:
            ftz = torch.tensor([2.0**-70], dtype=torch.float32) * torch.tensor([1.5 * 2.0**-60])
            assert ftz.item() == 0.0
        finally:
            torch.set_flush_denormal(False)
    an, bn = np.float32(67 / 64), np.float32(513 / 512)
    exact = Fraction(67, 64) / Fraction(513, 512)
    assert abs(Fraction(float(an / bn)) - exact) <= u * exact
    assert abs(Fraction(float(an * (np.float32(1) / bn))) - exact) > u * exact


# -- D8: power attention, proved in general ---------------------------------------------------
def test_power_attention_limit_general_and_configuration(derived):
    rec = derived("D8")
    power = [c for c in rec.claims if "power" in c.name]
    assert power and all(c.status is Status.PROVED for c in power)
    assert all("limit at r = 2" not in c.detail for c in power)
    assert any("(r z_0, z_0, ..., z_0)" in c.name for c in power)  # the configuration
    # independent: z^beta/sum z^beta on (r, 1, ..., 1) at 50 digits
    with mpmath.workdps(50):
        for r, n in ((1.05, 50), (3.0, 7)):
            beta = 400
            z = [mpmath.mpf(r)] + [mpmath.mpf(1)] * (n - 1)
            peak = z[0] ** beta / mpmath.fsum(v**beta for v in z)
            assert peak > 1 - mpmath.mpf(10) ** -6
            assert abs(separation.power_attention_peak(r, beta, n) - float(peak)) < 1e-12
    assert separation.power_attention_peak(1.0, 3.0, 8) == pytest.approx(1 / 8)
    assert separation.power_attention_peak(0.5, 200.0, 8) < 1e-50


# -- D9: exp(q_i . k_j) is full rank only for d = 1, distinct scalars ---------------------------
def test_exp_kernel_d2_counterexample_is_singular():
    keys = np.array([[1, 0], [2, 0], [-1, 0]], dtype=np.float64)
    queries = np.array([[1, 0], [1, 5], [0, 1]], dtype=np.float64)
    scores = queries @ keys.T
    assert np.array_equal(scores[0], scores[1])  # equal rows, whatever the kernel
    with mpmath.workdps(60):
        m = mpmath.matrix([[mpmath.exp(int(s)) for s in row] for row in scores])
        assert mpmath.det(m) == 0
    exact = related.exp_kernel_matrix_exact(queries.astype(int).tolist(), keys.astype(int).tolist())
    assert exact.det() == 0 and exact.rank() == 2
    # d = 1 with sorted distinct scalars: non-singular (Karlin), here 3 x 3
    tp = related.exp_kernel_matrix_exact([[-1], [0], [2]], [[-1], [1], [3]])
    with mpmath.workdps(60):
        assert mpmath.det(mpmath.matrix(tp.evalf(60).tolist())) > 0


def test_claiming_exp_kernel_full_rank_in_d2_fails(derived):
    rec = related.derive(claim_exp_full_rank_d2=True)
    assert rec.status is Status.FAILED
    assert any("(injected) exp(q_i . k_j) is full rank" in n for n in _failed(rec))
    good = derived("D9")
    names = {c.name: c for c in good.claims}
    cond = [c for n, c in names.items() if n.startswith("the conditions are necessary")]
    assert cond and cond[0].status is Status.VERIFIED
    karlin = [c for n, c in names.items() if "strictly totally positive" in n]
    assert karlin and all("d = 1" in c.name for c in karlin)


# -- D4 / ML-3: delta_N(r) -> 0 but rises first -----------------------------------------------
def _delta_ref(order, r):
    with mpmath.workdps(60):

        def g(x):
            x = mpmath.mpf(x)
            kap = mpmath.fsum(x**n / mpmath.factorial(n) for n in range(order + 1))
            return 1 - kap * mpmath.exp(-x)

        return max(abs(g(-r)), abs(g(r)))


def test_delta_rises_with_n_before_it_falls():
    vals = [_delta_ref(n, 4) for n in range(14)]
    assert all(vals[k] < vals[k + 1] for k in range(3))  # delta_0 < ... < delta_3 at r = 4
    assert all(vals[k] > vals[k + 1] for k in range(3, 13))
    assert [round(float(v), 1) for v in vals[:4]] == [53.6, 164.8, 272.0, 310.4]
    for n in range(14):
        assert float(truncation.delta(n, 4)) == pytest.approx(float(vals[n]), rel=2**-50)
    first = next(n for n in range(14) if vals[n] < 1)
    assert first == 12
    # "only where delta_N(r) < 1" was not a condition for convergence: delta_N(r) -> 0 for all r
    assert _delta_ref(60, 8) < mpmath.mpf(10) ** -20


def test_ml3_conditions_computed_from_delta():
    text = claims_page.ml3_conditions()
    assert "only where delta_N(r) < 1" not in text
    assert "delta_N(r) -> 0" in text
    rising = ", ".join(f"{float(truncation.delta(n, 4)):.3g}" for n in range(4))
    assert rising == "53.6, 165, 272, 310" and rising in text
    assert "N = 2, 5, 12 for r = 1, 2, 4" in text
    ml3 = next(c for c in claims_page.CLAIMS if c.id == "ML-3")
    assert ml3.resolved_conditions() == text


# -- claims.md: credits and conditions in each row --------------------------------------------
def test_claim_rows_credit_and_conditions():
    rows = {c.id: c for c in claims_page.CLAIMS}
    for cid in ("DSZ-A", "DSZ-B", "DSZ-C", "DSZ-D"):
        assert "reformulation" in rows[cid].source, cid
        assert "this project's" in rows[cid].source, cid
    assert "addition" in rows["DSZ-P"].source and "no source" in rows["DSZ-P"].source
    assert "(r z_0, z_0, ..., z_0)" in rows["DSZ-P"].statement
    assert "D_0 = U[0,1]^n" in rows["DSZ-B"].statement and "D_1 (" in rows["DSZ-B"].statement
    assert "non-constant z" in rows["DSZ-D"].statement
    assert "non-constant" in rows["DSZ-D"].resolved_conditions()
    assert "d = 1" in rows["REL-R"].statement
    assert "(1,5)" in rows["REL-R"].resolved_conditions()
    for c in claims_page.CLAIMS:  # every row says whose it is
        assert "this project's" in c.source or "Choromanski" in c.source, c.id


def test_verdict_with_conditions():
    row = next(c for c in claims_page.CLAIMS if c.id == "REL-R")
    ders = [{"id": "D9", "status": "verified"}]
    props = [{"property": "exp-kernel-full-rank", "passed": 2, "failed": 0}]
    verdict, why = claims_page._verdict(row, ders, props, [])
    assert verdict == "confirmed with conditions" and "det exp(Q K^T) = 0" in why


# -- the general rule on every record ------------------------------------------------------
def test_every_cited_claim_has_a_source_and_every_instance_check_names_its_instances(derived):
    for rec in (derived("D8"), derived("D9"), derived("D10")):
        for c in rec.claims:
            if c.status is Status.CITED:
                assert c.source, (rec.id, c.name)
            if c.status is Status.VERIFIED:
                assert c.detail, (rec.id, c.name)
        hoeffding = [c for c in rec.claims if "Hoeffding" in c.name]
        if rec.id == "D10":
            assert [c.status for c in hoeffding] == [Status.CITED]


def test_d7_d8_records_say_what_is_the_papers_and_what_is_the_projects(derived):
    """The record titles name the papers; each record also has a cited row saying that only the
    claim/thesis is the paper's, and that the statements and constants are this project's."""
    for rec, author in ((derived("D7"), "Mongaras & Larson"), (derived("D8"), "Deng")):
        cited = [c for c in rec.claims if c.status is Status.CITED and author in c.source]
        assert len(cited) == 1, rec.id
        assert "this project's" in cited[0].detail
    d8 = next(c for c in derived("D8").claims if c.status is Status.CITED)
    assert "reformulation" in d8.detail and "not the paper's" in d8.detail
