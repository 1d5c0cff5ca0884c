"""Tests of the derivations D1-D5: records, exported numbers, wrong statements.

Expected values come from (a) independent computations in this file -- mpmath at >= 100 digits,
exact ``Fraction`` arithmetic, brute-force enumeration -- or (b) the values D4, D5 state.
Float tolerances: the D4 exports document "within 2 ulp" (values rounded from >= 20 guard bits,
see ``derivations.truncation``), so relative error <= 2^-52 is asserted against 100+ digit refs.
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from fractions import Fraction

import mpmath
import pytest
import sympy

from derivations import feature_maps as fm
from derivations import linear, recurrent, state_size, truncation, truncation_record
from derivations._record import Status
from derivations.truncation_claims import random_perturbations, weight_change

TWO_ULP = 2.0**-52
MODULES = {"D1": fm, "D2": recurrent, "D3": linear, "D4": truncation_record, "D5": state_size}
#: where each record's numeric exports live (D4 keeps its record apart from its exports)
EXPORTS_IN = {**MODULES, "D4": truncation}


@pytest.fixture(scope="module")
def records(derived):
    return {key: derived(key) for key in MODULES}


def _failed(rec):
    return [c.name for c in rec.claims if c.status is Status.FAILED]


# -- the records ------------------------------------------------------------------------------
@pytest.mark.parametrize("key", list(MODULES))
def test_record_not_failed(records, key):
    rec = records[key]
    assert rec.id == key
    assert rec.status is not Status.FAILED, _failed(rec)
    assert not _failed(rec)
    assert rec.title and rec.statement and rec.steps and rec.claims and rec.exports
    for name in rec.exports:  # every listed export exists in the module
        assert hasattr(EXPORTS_IN[key], name), name
    json.dumps(rec.to_json())  # serializable for the report


@pytest.mark.parametrize("key", list(MODULES))
def test_instance_checks_are_never_proved(records, key):
    """'proved' only for general symbolic proofs: every instance check says so in its detail."""
    for claim in records[key].claims:
        if claim.status is Status.VERIFIED:
            assert claim.detail, claim.name
        if claim.status is Status.CITED:
            assert claim.source, claim.name


def test_expected_statuses(records):
    # each record mixes general proofs with instance checks -> weakest claim is "verified"
    assert {k: r.status for k, r in records.items()} == dict.fromkeys(MODULES, Status.VERIFIED)
    proved = {k: sum(c.status is Status.PROVED for c in r.claims) for k, r in records.items()}
    assert all(v >= 1 for v in proved.values()), proved


def _cited(rec, needle):
    return [c for c in rec.claims if c.status is Status.CITED and needle in c.source]


def test_kernel_attention_and_feature_maps_are_credited(records):
    """Katharopoulos, Vyas, Pappas & Fleuret (ICML 2020) for the recurrent form of kernel
    attention (D2, D3) and elu+1 (D3, where it is introduced); Based (Arora et al. 2024) for the
    1/sqrt(2)-weighted Taylor-2 map (D1, its order-2 step); each says what is theirs and what is
    the project's. Without the citations (the old records) these lists were empty."""
    for key in ("D2", "D3"):
        (cite,) = _cited(records[key], "Katharopoulos, A. Vyas, N. Pappas, F. Fleuret")
        assert "Transformers are RNNs" in cite.source and "ICML 2020" in cite.source
        assert "theirs" in cite.detail and "this project's" in cite.detail
    (elu,) = _cited(records["D3"], "Katharopoulos")
    assert "elu(x) + 1" in elu.name and "eq. 7" in elu.source
    step = next(s for s in records["D3"].steps if s.text.startswith("Any feature map"))
    assert "elu+1 of Katharopoulos et al. 2020" in step.text
    (based,) = _cited(records["D1"], "Arora")
    assert "Simple linear attention language models balance the recall-throughput" in based.source
    assert "1/sqrt(2)" in based.name and "ICML 2024" in based.source
    step = next(s for s in records["D1"].steps if s.text.startswith("Order 2"))
    assert "Based (Arora et al. 2024)" in step.text
    assert _cited(records["D2"], "Mongaras & Larson")


def test_unknown_override_is_a_type_error():
    for mod in MODULES.values():
        with pytest.raises(TypeError, match="unexpected override"):
            mod.derive(no_such_piece=1)


def test_truncation_record_runs():
    out = subprocess.run(
        [sys.executable, "-m", "derivations.truncation_record"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("D4: ")
    assert "[failed" not in out.stdout


# -- wrong statements make the record fail ------------------------------------------------------
def _wrong_coefficient(n):
    return Fraction(1, max(n, 1))  # 1/n instead of 1/n!


def test_d1_elementwise_square_map_fails():
    rec = fm.derive(feature_map=fm.elementwise_square_map)
    assert rec.status is Status.FAILED
    assert "symmetric map: <Phi(q), Phi(k)> = kappa_N(c q.k)" in _failed(rec)
    assert "trigger inputs of the element-wise-square map give kappa_2 = 5" in _failed(rec)


def test_d1_faults_trigger_values_of_the_wrong_map():
    """The element-wise-square map gives 4 (not 5) and -1 (not 5) on its trigger inputs."""
    one = sympy.Integer(1)
    for q, k, wrong in (((one, one), (one, one), 4), ((one,) * 4, (-one,) * 4, -1)):
        feats = (fm.elementwise_square_map(q, 2, one), fm.elementwise_square_map(k, 2, one))
        assert sympy.nsimplify(sum(a * b for a, b in zip(*feats))) == wrong


def test_d1_wrong_coefficients_fail():
    rec = fm.derive(taylor_coefficient=_wrong_coefficient)
    assert rec.status is Status.FAILED
    assert "tensor-power map: <Phi(q), Phi(k)> = kappa_N(c q.k)" in _failed(rec)


def test_d1_wrong_sizes_fail():
    assert fm.derive(symmetric_block_size=lambda n, d: d**n).status is Status.FAILED
    assert fm.derive(multi_indices=lambda n, d: fm.multi_indices(n, d)[:-1]).status is (
        Status.FAILED
    )


def test_d2_wrong_coefficients_fail():
    rec = recurrent.derive(taylor_coefficient=_wrong_coefficient)
    assert rec.status is Status.FAILED
    assert "parallel == recurrent == chunked (tensor basis)" in _failed(rec)


def test_d2_chunk_reading_current_state_fails():
    rec = recurrent.derive(chunk_state="current")
    assert rec.status is Status.FAILED
    assert "parallel == recurrent == chunked (symmetric basis)" in _failed(rec)
    with pytest.raises(ValueError, match="chunk_state"):
        recurrent.derive(chunk_state="after")


def test_d2_padded_last_chunk_fails():
    def padded(length, size):  # every chunk full size: the last one runs past T
        return [(a, a + size) for a in range(0, length, size)]

    assert recurrent.derive(chunk_bounds=padded).status is Status.FAILED


def test_d3_map_without_constant_fails():
    rec = linear.derive(feature_map=lambda x, r, one: [r * xi for xi in x])
    assert rec.status is Status.FAILED
    assert "normalized Taylor-1 attention == kernel linear attention with phi = [1, x~]" in (
        _failed(rec)
    )


def test_d4_wrong_coefficients_fail():
    rec = truncation_record.derive(taylor_coefficient=_wrong_coefficient)
    assert rec.status is Status.FAILED
    assert "kappa_N from taylor_coefficient = Taylor polynomial of exp" in _failed(rec)


def test_d4_remainder_without_exp_factor_fails():
    def no_factor(order, x):
        return abs(x) ** (order + 1) / math.factorial(order + 1)

    rec = truncation_record.derive(remainder_bound=no_factor)
    assert rec.status is Status.FAILED
    assert any(name.startswith("remainder_bound ==") for name in _failed(rec))


def test_d4_loose_output_bound_is_not_accepted_as_the_export():
    rec = truncation_record.derive(output_error_bound=lambda d: 2 * d / (1 - d))
    assert rec.status is Status.FAILED


def test_d5_wrong_state_size_fails():
    rec = state_size.derive(symmetric_state_numbers=lambda n, d, dv: math.comb(n + d, n) * dv)
    assert rec.status is Status.FAILED
    rec = state_size.derive(closed_form=lambda n, d: sympy.binomial(n + d - 1, n))
    assert rec.status is Status.FAILED
    assert any(name.startswith("sum_{n<=N} C(n+d-1, n) = C(N+d, N)") for name in _failed(rec))


# -- D1 exports against enumeration ----------------------------------------------------------
@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_d1_sizes_by_enumeration(d):
    total_sym = total_ten = 0
    for n in range(7):
        brute = {a for a in itertools.product(range(n + 1), repeat=d) if sum(a) == n}
        got = fm.multi_indices(n, d)
        assert len(got) == len(set(got)) and set(got) == brute
        assert fm.symmetric_block_size(n, d) == len(brute)
        assert fm.tensor_block_size(n, d) == len(list(itertools.product(range(d), repeat=n)))
        total_sym += len(brute)
        total_ten += d**n
        assert fm.feature_count(n, d) == total_sym
        assert fm.feature_count(n, d, "tensor") == total_ten


def test_d1_monomial_weights_count_words():
    """n!/alpha! counts the index tuples with counts alpha (multinomial coefficient)."""
    for d, n in ((2, 4), (3, 5)):
        for alpha in fm.multi_indices(n, d):
            words = sum(
                1
                for idx in itertools.product(range(d), repeat=n)
                if tuple(idx.count(j) for j in range(d)) == alpha
            )
            assert math.factorial(n) * fm.monomial_weight(alpha) == words


def test_theory_block_sizes_d64():
    """D5 (stated): 2,080 vs 4,096; 45,760 vs 262,144; 766,480 vs 16,777,216."""
    stated = {2: (2_080, 4_096), 3: (45_760, 262_144), 4: (766_480, 16_777_216)}
    for n, (sym, ten) in stated.items():
        assert (fm.symmetric_block_size(n, 64), fm.tensor_block_size(n, 64)) == (sym, ten)


# -- D2 / D3 exports ---------------------------------------------------------------------------
def test_chunk_bounds():
    assert recurrent.chunk_bounds(5, 2) == [(0, 2), (2, 4), (4, 5)]
    assert recurrent.chunk_bounds(3, 64) == [(0, 3)]
    assert recurrent.chunk_bounds(0, 4) == []
    for length, size in itertools.product(range(9), range(1, 6)):
        bounds = recurrent.chunk_bounds(length, size)
        assert [i for a, b in bounds for i in range(a, b)] == list(range(length))
        assert all(0 < b - a <= size for a, b in bounds)


def test_feature_dimension():
    assert linear.feature_dimension("identity", 7) == 7
    assert linear.feature_dimension("taylor:1", 7) == 8  # phi(x) = [1, x~]
    assert linear.feature_dimension("taylor:2", 64) == 1 + 64 + 2_080
    assert linear.feature_dimension("taylor:2", 3, basis="tensor") == 1 + 3 + 9
    assert linear.feature_dimension("favor", 8, num_features=32) == 32
    assert linear.parse_feature_map("taylor:12") == ("taylor", 12)
    assert linear.parse_feature_map("elu1") == ("elu1", None)


# -- D4 exports against mpmath --------------------------------------------------------------------
def mp_kappa(order, x, dps=120):
    with mpmath.workdps(dps):
        x = mpmath.mpf(x)
        return mpmath.fsum(x**n / mpmath.factorial(n) for n in range(order + 1))


def mp_g(order, x, dps=120):
    """1 - kappa_N(x) e^{-x} at 120 digits: cancellation here is <= e^{32} (14 digits)."""
    with mpmath.workdps(dps):
        return 1 - mp_kappa(order, x, dps) * mpmath.exp(-mpmath.mpf(x))


def mp_delta(order, r, dps=120):
    with mpmath.workdps(dps):
        return max(abs(mp_g(order, -r, dps)), abs(mp_g(order, r, dps)))


def _rel_close(got, ref):
    with mpmath.workdps(120):
        return abs(mpmath.mpf(got) - ref) <= TWO_ULP * abs(ref)


XS = [-16.0, -8.0, -3.5, -1.0, -0.25, -1e-3, 0.0, 1e-3, 0.5, 1.0, 2.75, 7.0]


@pytest.mark.parametrize("order", [0, 1, 2, 3, 5, 8, 12])
def test_kappa_against_mpmath(order):
    for x in XS:
        got = truncation.kappa(order, x)
        assert isinstance(got, float)
        assert _rel_close(got, mp_kappa(order, x)) or got == 0 == mp_kappa(order, x)
    assert truncation.kappa(order, Fraction(1, 3)) == sum(
        Fraction(1, 3) ** n / math.factorial(n) for n in range(order + 1)
    )
    with mpmath.workdps(40):
        got = truncation.kappa(order, mpmath.mpf("-2.5"))
        assert isinstance(got, mpmath.mpf)
        assert abs(got - mp_kappa(order, mpmath.mpf("-2.5"))) <= mpmath.mpf(10) ** -38


@pytest.mark.parametrize("order", [0, 1, 2, 4, 6, 10, 20])
def test_relative_error_against_mpmath(order):
    for x in XS:
        got = truncation.relative_error(order, x)
        ref = mp_g(order, x)
        assert (got == 0 and ref == 0) or _rel_close(got, ref), (order, x, got, ref)


def test_relative_error_tiny_values_keep_relative_accuracy():
    """g_N(x) ~ x^{N+1}/(N+1)! for small x: 1e-41 at N = 10, x = 1e-3 (no cancellation loss)."""
    ref = mp_g(10, 1e-3, dps=200)
    assert _rel_close(truncation.relative_error(10, 1e-3), ref)
    with mpmath.workdps(50):
        got = truncation.relative_error(10, mpmath.mpf(1) / 1000)
        ref = mp_g(10, mpmath.mpf(1) / 1000, dps=200)
        assert abs(got - ref) <= mpmath.mpf(10) ** -48 * abs(ref)


def test_theory_delta_values():
    """D4 (stated): delta_2(1) ~ 0.36, delta_4(2) ~ 1.46, delta_6(2) ~ 0.15, delta_6(3) ~ 6.3."""
    stated = {(2, 1): 0.36, (4, 2): 1.46, (6, 2): 0.15, (6, 3): 6.3}
    digits = {(2, 1): 2, (4, 2): 2, (6, 2): 2, (6, 3): 1}
    for (order, r), value in stated.items():
        got = truncation.delta(order, float(r))
        assert round(got, digits[(order, r)]) == value
        assert _rel_close(got, mp_delta(order, r))


def test_delta_closed_form_is_the_sup_on_a_grid():
    """delta_N(r) >= |g_N(x)| on a grid of |x| <= r, with equality at an end point."""
    for order in (1, 2, 3, 6):
        r = 2.0
        grid = [r * k / 200 for k in range(-200, 201)]
        worst = max(abs(mp_g(order, x, 60)) for x in grid)
        with mpmath.workdps(60):
            assert abs(worst - mpmath.mpf(truncation.delta(order, r))) <= TWO_ULP * worst


def test_theory_convergence_numbers():
    """D4 (stated): |g_N(x)| first < 1 at N = 12, 26, 54 for x = -4, -8, -16; g_20(-8) ~ 4e2."""
    assert [truncation.first_order_below(x) for x in (-4, -8, -16)] == [12, 26, 54]
    for x in (-4, -8, -16, -2.5, 3.0):  # independent scan
        for level in (1.0, 0.1):
            ref = next(n for n in range(500) if abs(mp_g(n, x)) < level)
            assert truncation.first_order_below(x, level) == ref
    assert float(f"{abs(truncation.relative_error(20, -8)):.0e}") == 4e2
    assert _rel_close(truncation.relative_error(20, -8.0), mp_g(20, -8))


def test_dominant_order_by_brute_force():
    for x in [0, 0.3, 1, 1.5, 2, 3.7, 5, -4, -8, -7.9, 12.01, Fraction(17, 2)]:
        terms = [Fraction(abs(Fraction(x))) ** n / math.factorial(n) for n in range(40)]
        top = max(terms)
        argmax = [n for n, t in enumerate(terms) if t == top]
        assert truncation.dominant_order(x) == max(argmax)
        integer_tie = abs(Fraction(x)) >= 1 and Fraction(x).denominator == 1
        assert len(argmax) == (2 if integer_tie else 1)


def test_real_root_count_against_mpmath_polyroots():
    for order in range(1, 11):
        coeffs = [mpmath.mpf(1) / mpmath.factorial(n) for n in range(order, -1, -1)]
        with mpmath.workdps(60):
            roots = mpmath.polyroots(coeffs, maxsteps=200, extraprec=200)
            real = [z for z in roots if abs(mpmath.im(z)) < mpmath.mpf(10) ** -30]
        assert truncation.real_root_count(order) == len(real)
        assert all(mpmath.re(z) < 0 for z in real)
    assert truncation.real_root_count(0) == 0


def test_odd_order_counterexample_weights():
    """D4: N = 1, scores (-3, 0.5, 1) -> weights (-4/3, 1, 4/3)."""
    scores = [Fraction(-3), Fraction(1, 2), Fraction(1)]
    k = [truncation.kappa(1, s) for s in scores]
    assert [w / sum(k) for w in k] == [Fraction(-4, 3), Fraction(1), Fraction(4, 3)]


def test_remainder_bound_holds_and_is_not_vacuous():
    for order in (0, 1, 2, 4, 8):
        for x in (-6.0, -2.0, -0.5, 0.5, 2.0, 6.0):
            with mpmath.workdps(60):
                err = abs(mpmath.exp(mpmath.mpf(x)) - mp_kappa(order, x, 60))
                ref = (
                    mpmath.exp(max(mpmath.mpf(x), 0))
                    * abs(mpmath.mpf(x)) ** (order + 1)
                    / mpmath.factorial(order + 1)
                )
            bound = truncation.remainder_bound(order, x)
            assert _rel_close(bound, ref)
            assert err <= bound
            # Lagrange: err = e^xi |x|^{N+1}/(N+1)!, xi between 0 and x -> ratio >= e^{-|x|}
            assert err / bound >= math.exp(-abs(x)) * (1 - 1e-12)


def test_output_error_bound_is_the_supremum():
    """B(delta) >= max_a F(a) on a fine grid, within the grid's resolution, and B <= 2d/(1-d)."""
    for d in (0.05, 0.2, 0.36, 0.5, 0.8, 0.95):
        with mpmath.workdps(40):
            dd = mpmath.mpf(d)
            grid = [mpmath.mpf(k) / 20000 for k in range(20001)]
            best = max(4 * a * (1 - a) * dd / (1 - dd + 2 * a * dd) for a in grid)
            b = truncation.output_error_bound(d)
            assert best <= b * (1 + TWO_ULP)
            assert b - best <= mpmath.mpf(10) ** -7  # quadratic maximum, grid step 5e-5
        assert b <= 2 * d / (1 - d)
    assert truncation.output_error_bound(0.8) == pytest.approx(1.0, rel=TWO_ULP)


def test_output_error_bound_holds_on_random_weights():
    import random

    configs = random_perturbations(
        random.Random(1), 500, max_keys=7, steps=1000, max_weight=100, interior_steps=50
    )
    for d, w, eps in configs:
        moved = weight_change(w, eps)
        with mpmath.workdps(50):
            exact_b = 2 * mpmath.mpf(d.numerator) / d.denominator
            exact_b /= 1 + mpmath.sqrt(1 - (mpmath.mpf(d.numerator) / d.denominator) ** 2)
            # 50-digit rounding of both sides: slack 1e-45 (moved can equal B exactly)
            moved_mp = mpmath.mpf(moved.numerator) / moved.denominator
            assert moved_mp <= exact_b * (1 + mpmath.mpf(10) ** -45)


def test_informative_radius_is_the_largest():
    for order in (1, 2, 4, 6, 10):
        for target in (0.5, 1.0):
            r = truncation.informative_radius(order, target)
            assert mp_delta(order, r) < target <= mp_delta(order, math.nextafter(r, math.inf))


# -- D5 exports --------------------------------------------------------------------------------
def test_state_numbers_by_enumeration():
    for d, d_v, order in itertools.product((1, 2, 3), (1, 4), range(5)):
        features_sym = sum(
            1
            for n in range(order + 1)
            for a in itertools.product(range(n + 1), repeat=d)
            if sum(a) == n
        )
        features_ten = sum(
            len(list(itertools.product(range(d), repeat=n))) for n in range(order + 1)
        )
        assert state_size.symmetric_state_numbers(order, d, d_v) == features_sym * (d_v + 1)
        assert state_size.tensor_state_numbers(order, d, d_v) == features_ten * (d_v + 1)
        assert state_size.state_numbers(order, d, d_v, "tensor") == features_ten * (d_v + 1)
    assert state_size.kv_cache_numbers(10, 64, 32) == 10 * 64 + 10 * 32


def test_theory_crossover_d64():
    """D5 (stated): T* = 1,089, 24,327, 413,555 at d = d_v = 64 (ratio rounded to nearest);
    crossover_length is the first T with T (d + d_v) >= state (brute force)."""
    stated = {2: 1_089, 3: 24_327, 4: 413_555}
    for order, value in stated.items():
        state = math.comb(order + 64, order) * 65
        assert round(Fraction(state, 128)) == value
        assert state_size.crossover_ratio(order, 64, 64) == Fraction(state, 128)
        first = next(t for t in itertools.count(value - 3) if t * 128 >= state)
        assert state_size.crossover_length(order, 64, 64) == first
    assert state_size.crossover_length(2, 64, 64) == 1_090  # 1,089 * 128 < 139,425


# -- bad inputs --------------------------------------------------------------------------------
BAD = [
    (truncation.kappa, (-1, 0.5), ValueError),
    (truncation.kappa, (2.0, 0.5), TypeError),
    (truncation.kappa, (True, 0.5), TypeError),
    (truncation.kappa, (2, math.nan), ValueError),
    (truncation.kappa, (2, math.inf), ValueError),
    (truncation.kappa, (2, "1"), TypeError),
    (truncation.kappa, (2, 1j), TypeError),
    (truncation.remainder_bound, (2, -math.inf), ValueError),
    (truncation.relative_error, (-2, 1.0), ValueError),
    (truncation.delta, (2, -0.5), ValueError),
    (truncation.delta, (2, None), TypeError),
    (truncation.output_error_bound, (1.0,), ValueError),
    (truncation.output_error_bound, (1.5,), ValueError),
    (truncation.output_error_bound, (-0.1,), ValueError),
    (truncation.output_error_bound, ("0.5",), TypeError),
    (truncation.informative_radius, (2, 0.0), ValueError),
    (truncation.informative_radius, (2, -1.0), ValueError),
    (truncation.first_order_below, (-4.0, 0.0), ValueError),
    (truncation.first_order_below, (math.nan,), ValueError),
    (truncation.dominant_order, (math.inf,), ValueError),
    (truncation.real_root_count, (-1,), ValueError),
    (truncation.real_root_count, (1.5,), TypeError),
    (recurrent.chunk_bounds, (5, 0), ValueError),
    (recurrent.chunk_bounds, (-1, 2), ValueError),
    (recurrent.chunk_bounds, (5.0, 2), TypeError),
    (linear.parse_feature_map, ("taylor",), ValueError),
    (linear.parse_feature_map, ("taylor:x",), ValueError),
    (linear.parse_feature_map, ("softmax",), ValueError),
    (linear.parse_feature_map, (3,), TypeError),
    (linear.feature_dimension, ("favor", 4), ValueError),
    (linear.feature_dimension, ("identity", 0), ValueError),
    (state_size.symmetric_state_numbers, (2, 0, 4), ValueError),
    (state_size.tensor_state_numbers, (2, 4, 0), ValueError),
    (state_size.state_numbers, (2, 4, 4, "dense"), ValueError),
    (state_size.kv_cache_numbers, (-1, 4, 4), ValueError),
    (state_size.crossover_length, (2, 4, 4.0), TypeError),
]


@pytest.mark.parametrize(("func", "args", "exc"), BAD, ids=lambda v: getattr(v, "__name__", None))
def test_bad_inputs(func, args, exc):
    with pytest.raises(exc) as info:
        func(*args)
    assert ":" in str(info.value)  # "<argument>: expected ..., got ..."


def test_first_order_below_max_order():
    with pytest.raises(ValueError, match="max_order"):
        truncation.first_order_below(-16.0, max_order=10)
    assert linear.feature_dimension("favor", 4, num_features=16) == 16
    with pytest.raises(ValueError, match="num_features"):
        linear.feature_dimension("relu", 4, num_features=16)


_TINY_CASES = [(n, r) for n in (1, 2, 6) for r in (1e-300, 2.2e-308, 1e-100, 1e-5, 0.2)]
# order 40 only where delta > 1e-2900, which a 3000-digit direct evaluation still resolves
_TINY_CASES += [(40, 1e-5), (40, 0.2)]


@pytest.mark.parametrize(("order", "r"), _TINY_CASES)
def test_delta_tiny_radius_matches_high_precision(order, r):
    """delta_N(r) ~ r^{N+1}/(N+1)! is far below the working precision for tiny r; the
    cancellation-free tail must still agree with a 3000-digit direct evaluation of
    max(|g(-r)|, |g(r)|) (regression: it used to raise 'no convergence')."""
    import mpmath

    from derivations import truncation as d4

    got = d4.delta(order, mpmath.mpf(r))  # an mpf at the default 53-bit precision
    with mpmath.workdps(3000):
        x = mpmath.mpf(r)

        def g(t):
            return 1 - sum(t**n / mpmath.factorial(n) for n in range(order + 1)) * mpmath.exp(-t)

        ref = max(abs(g(x)), abs(g(-x)))
        # exported to 53 bits: a few ulp (2^-50 relative) is the stated accuracy of the export
        assert abs(got - ref) <= ref * mpmath.mpf(2) ** -50
        ref_float = float(ref)  # 0.0 where delta underflows float64
    assert abs(d4.delta(order, r) - ref_float) <= 4 * math.ulp(ref_float)
