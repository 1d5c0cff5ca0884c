"""D10. Floating-point error model: the "stated precision" of every comparison.

Source for the model: N. J. Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed.,
SIAM, 2002 (cited as "Higham"): the standard model fl(x op y) = (x op y)(1 + delta),
|delta| <= u (eq. 2.4); Lemma 3.1 (products of n factors (1 + delta_i)^{+-1} are 1 + theta_n,
|theta_n| <= gamma_n = n u/(1 - n u)); Lemma 3.3 (gamma arithmetic); eq. 3.5 (dot products);
eq. 4.4 (sums); eq. 5.3 (Horner).

Assumptions (stated in the D10 record, each shown necessary there by a float32 instance):
IEEE 754 binary arithmetic rounding to nearest, ties to even; float32 matrix products in full
float32 (no TF32); gradual underflow (no flush-to-zero of subnormals: ``underflow_abs_error`` is
half the subnormal spacing); division and square root correctly rounded, unless a library
division of ``LIBRARY_DIV_ULPS`` is cited. FMA contraction is covered: an FMA rounds once where
the model counts a product and an addition, so every bound here holds with it.

How the pieces compose (each function's docstring states exactly what it bounds):

1. Scores x = c (q . k): ``score_abs_error`` = gamma_{d + r_c} c sum_i |q_i k_i|, r_c the roundings
   of forming and applying the scale (2 for c * fl(q.k); 5 when sqrt(c) is absorbed on q and k).
2. Weights. exp: ``softmax_weight_relative_bound`` (the rounded score, the max subtraction and
   the library's exp ulps); kappa_N: ``taylor_weight_relative_bound`` relative to the majorant
   ``taylor_weight_majorant`` = kappa_N(|x| + e) >= |kappa_N(x)|; feature forms (recurrent,
   chunked, kernel linear attention): ``feature_form_relative_bound`` relative to the majorant
   sum_m |phi_m(q)| |phi_m(k)| (for Taylor features kappa_N(c sum_i |q_i| |k_i|)).
3. Sums over keys: ``weighted_sum_relative_bound`` turns a weight error into the relative errors
   num_rel, den_rel of N_t = sum_s w_s v_s and D_t = sum_s w_s, relative to
   A = sum_s W_s |v_s| and B = sum_s W_s (W_s the majorant, W_s = |w_s| for exp).
4. Output: ``kernel_attention_output_bound`` bounds |o_hat - o| per component from num_rel,
   den_rel, A, B, D and the division's error; it is the conditioning-aware form (relative to
   A/|D| = sum_s W_s |v_s| / |sum_s w_s|) that signed kernels need.
5. Low precision (two-level model): inputs already in bf16/fp16, everything above at fp32, output
   rounded to the input dtype: ``low_precision_output_bound``; the comparison is against float64
   computed on the *same rounded inputs*, so input rounding is never charged.
6. A float64 reference has its own error: the stated bound for |impl - ref| is the sum of the
   two bounds (triangle inequality), e.g. bound(float32) + bound(float64).

Recipes (the tests in tests/test_derivations_d6_d10.py run each against mpmath):

* softmax, parallel: e_x = max_s score_abs_error(d, c|q|.|k_s|, u, 2);
  e_w = softmax_weight_relative_bound(e_x, max x_hat - min x_hat, u, exp ulps);
  num_rel / den_rel = weighted_sum_relative_bound(S, e_w, u, True / False);
  kernel_attention_output_bound(A = sum_s p_s |v_sj|, B = D = 1) with p the exact weights.
* kappa_N, parallel: e_w = taylor_weight_relative_bound(N, e_x, u, scheme);
  W_s = taylor_weight_majorant(N, |x_s|, e_s); A = sum_s W_s |v_sj|, B = sum_s W_s,
  D = sum_s kappa_N(x_s) (signed).
* kappa_N recurrent / chunked, kernel linear attention: e_phi = taylor_feature_relative_error
  (or the map's own feature error); num_rel / den_rel = feature_form_relative_bound(e_phi, m,
  t, u, True / False); W_s = kappa_N(c sum_i |q_i||k_si|) (Taylor) or sum |phi(q)||phi(k_s)|.
* bf16/fp16 inputs: the fp32 bound above, then low_precision_output_bound(., |o|, dtype).
* tensors: kernel_attention_relative_coefficient(num_rel, den_rel, max cond, div_rel) gives one
  C with |o_hat - o| <= C A/|D| elementwise.

Library constants that cannot be derived (ulp errors of exp and division) are cited in
``LIBRARY_EXP_ULPS`` / ``LIBRARY_DIV_ULPS``, each with the figure its source states and what the
source measures it from, converted to one convention: ulps from the exact result
(``ULP_CONVENTION``, ``ulps_from_exact``).
"""

from __future__ import annotations

import math
import sys
from typing import NamedTuple

import numpy as np

from derivations._validate import check_choice, check_int, check_real
from derivations.norms import NORM_KINDS

HIGHAM = "N. J. Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., SIAM, 2002"

#: (total bits, exponent bits) of each binary format (IEEE 754-2008 binary64/32/16; bfloat16)
FORMATS: dict[str, tuple[int, int]] = {
    "float64": (64, 11),
    "float32": (32, 8),
    "float16": (16, 5),
    "bfloat16": (16, 8),
}
FORMAT_SOURCES = (
    "IEEE Std 754-2008, Table 3.5 (binary64, binary32, binary16); bfloat16: Intel, "
    "'BFLOAT16 - Hardware Numerics Definition', white paper 338302-001US, 2018 (1 sign, "
    "8 exponent, 7 stored significand bits)"
)


class CitedConstant(NamedTuple):
    """A constant taken from a source rather than derived: ``value`` with its ``source``.

    ``stated`` is the figure as the source gives it and ``measured_from`` the reference the source
    measures it from (:data:`ULP_REFERENCES`); ``value`` is the same error in this project's one
    convention, ulps from the *exact* result (:func:`ulps_from_exact`)."""

    value: float
    source: str
    note: str = ""
    stated: float | None = None
    measured_from: str = ""


#: what a cited ulp figure is measured from: the exact (infinitely precise) result, the correctly
#: rounded result, or not said by the source (then read as the correctly rounded result: the
#: larger of the two readings once converted)
ULP_REFERENCES = ("exact", "correctly rounded", "not stated")
#: the one convention of ``LIBRARY_EXP_ULPS`` / ``LIBRARY_DIV_ULPS`` / ``LOG_ULPS`` values
ULP_CONVENTION = (
    "ulps from the exact result: a figure k measured from the correctly rounded result (or with "
    "no stated reference) is k + 1/2 from the exact one, since the correctly rounded result is "
    "within 1/2 ulp of it"
)
_CUDA_CONVENTION = (
    "CUDA C++ Programming Guide, appendix 'Mathematical Functions': the maximum ulp error is the "
    "difference between the library's result and the correctly rounded result"
)
_GLIBC_CONVENTION = (
    "glibc measures from the correctly rounded result (J. Myers, glibc maintainer, libc-alpha, "
    "10 Sep 2020, https://sourceware.org/pipermail/libc-alpha/2020-September/117526.html: "
    "'we take an ideal correctly rounded result' and divide the difference by its ulp)"
)


def ulps_from_exact(stated: float, measured_from: str) -> float:
    """A cited ulp figure converted to ulps from the exact result (:data:`ULP_CONVENTION`).

    ``stated`` from the exact result is kept; from the correctly rounded result, or with no
    stated reference, it gains the 1/2 ulp between the correctly rounded and the exact result.

    Raises:
        TypeError, ValueError: negative ``stated`` or ``measured_from`` not in ``ULP_REFERENCES``.
    """
    k = check_real("stated", stated, nonneg=True)
    ref = check_choice("measured_from", measured_from, ULP_REFERENCES)
    return k if ref == "exact" else k + 0.5


#: maximum error of exp, in ulps of the exact result (relative error <= 2 * ulps * u)
LIBRARY_EXP_ULPS: dict[str, CitedConstant] = {
    "correctly-rounded": CitedConstant(
        0.5,
        "IEEE Std 754-2008, clause 9.2 (recommended correctly rounded exp)",
        "correct rounding is within 1/2 ulp of the exact result by definition",
        0.5,
        "exact",
    ),
    "cpu-glibc": CitedConstant(
        1.5,
        "GNU C Library manual, section 'Known Maximum Errors in Math Functions' (Errors in "
        "Math Functions): table of measured maximum ulps; exp/expf on x86_64 within 1 ulp; "
        + _GLIBC_CONVENTION,
        "1 ulp from the correctly rounded result: 1 + 1/2 from the exact one; scalar torch "
        "fallback uses std::exp",
        1.0,
        "correctly rounded",
    ),
    "cpu-sleef-u10": CitedConstant(
        1.0,
        "SLEEF documentation: functions with suffix _u10 have a maximum error of 1.0 ulp; "
        "SLEEF's tester measures the error against a higher-precision MPFR value, i.e. from the "
        "exact result (shibatch/sleef src/libm-tester, countULP); "
        "PyTorch Vectorized<float>::exp() and Vectorized<double>::exp() call Sleef_expf8_u10 / "
        "Sleef_expd4_u10 (aten/src/ATen/cpu/vec/vec256/vec256_float.h, vec256_double.h)",
        "torch.exp on CPU (AVX2/AVX512 builds)",
        1.0,
        "exact",
    ),
    "cpu-torch-exp_u20": CitedConstant(
        20.5,
        "PyTorch aten/src/ATen/cpu/vec/vec256/vec256_float.h, Vectorized<float>::exp_u20(): "
        "'A faster version of exp with ULP=20' (double and the generic fallback use exp()); "
        "the comment does not say what the 20 ulps are measured from",
        "read as from the correctly rounded result (the larger reading): 20 + 1/2 from the "
        "exact one; fused CPU kernels (e.g. the CPU flash-attention path of SDPA) may use it in "
        "float32",
        20.0,
        "not stated",
    ),
    "cuda-expf": CitedConstant(
        2.5,
        "CUDA C++ Programming Guide, appendix 'Mathematical Functions', table of single-"
        "precision functions: expf maximum 2 ulp (full range); " + _CUDA_CONVENTION,
        "2 ulps from the correctly rounded result: 2 + 1/2 from the exact one; the guide notes "
        "the bounds come from extensive but not exhaustive tests",
        2.0,
        "correctly rounded",
    ),
    "cuda-exp": CitedConstant(
        1.5,
        "CUDA C++ Programming Guide, appendix 'Mathematical Functions', double-precision "
        "table: exp maximum 1 ulp (full range); " + _CUDA_CONVENTION,
        "1 ulp from the correctly rounded result: 1 + 1/2 from the exact one",
        1.0,
        "correctly rounded",
    ),
}

#: maximum error of division, in ulps of the exact result
LIBRARY_DIV_ULPS: dict[str, CitedConstant] = {
    "ieee": CitedConstant(
        0.5,
        "IEEE Std 754-2008, clause 5.4.1: division is correctly rounded (0.5 ulp); CPU x86 "
        "SSE/AVX divps/divpd are IEEE operations",
        "correct rounding is within 1/2 ulp of the exact result",
        0.5,
        "exact",
    ),
    "cuda-prec-div": CitedConstant(
        0.5,
        "CUDA C++ Programming Guide, 'Mathematical Functions': x/y 0 ulp (IEEE round-to-"
        "nearest) when compiled with -prec-div=true (the default without -use_fast_math); "
        + _CUDA_CONVENTION,
        "0 ulps from the correctly rounded result: 1/2 from the exact one",
        0.0,
        "correctly rounded",
    ),
    "cuda-fast-div": CitedConstant(
        2.5,
        "CUDA C++ Programming Guide, 'Mathematical Functions': __fdividef(x, y) and x/y with "
        "-prec-div=false: 2 ulp (for 2^-126 <= |y| <= 2^126); " + _CUDA_CONVENTION,
        "2 ulps from the correctly rounded result: 2 + 1/2 from the exact one",
        2.0,
        "correctly rounded",
    ),
}

POLYNOMIAL_SCHEMES = ("horner", "powers", "term_recurrence")


# -- validation -------------------------------------------------------------------------------
def _result(x):
    """A 0-d result as a Python float, an array as it is: the array-capable bounds below return
    what they are given (floats for floats, arrays for numpy arrays, elementwise)."""
    return float(x) if np.ndim(x) == 0 else x


def _unit(u: object) -> float:
    uf = check_real("u", u, positive=True)
    if uf >= 1.0:
        raise ValueError(f"u: expected a unit roundoff in (0, 1), got {u!r}")
    return uf


def _dtype(name: str, dtype_name: object) -> str:
    if not isinstance(dtype_name, str):
        raise TypeError(
            f"{name}: expected a dtype name (str) in {tuple(FORMATS)}, got "
            f"{type(dtype_name).__name__} {dtype_name!r}"
        )
    return check_choice(name, dtype_name, tuple(FORMATS))


# -- formats ---------------------------------------------------------------------------------
def precision_bits(dtype_name: str) -> int:
    """Significand precision p (with the implicit bit): 53, 24, 11, 8 (fp64/32/16, bf16).

    Raises:
        TypeError, ValueError: ``dtype_name`` not one of ``FORMATS`` (``"float64"``,
        ``"float32"``, ``"float16"``, ``"bfloat16"``; torch names without ``torch.``).
    """
    total, exponent = FORMATS[_dtype("dtype_name", dtype_name)]
    return total - exponent - 1 + 1  # stored significand bits + the implicit leading bit


def unit_roundoff(dtype_name: str) -> float:
    """Unit roundoff u = 2^-p (round to nearest; Higham Thm 2.2, u = beta^(1-t)/2).

    fp64 2^-53, fp32 2^-24, fp16 2^-11, bf16 2^-8 (exact powers of two as floats).

    Raises:
        TypeError, ValueError: unknown dtype name.
    """
    return 2.0 ** -precision_bits(dtype_name)


def underflow_abs_error(dtype_name: str) -> float:
    """Absolute rounding error in the subnormal range: half the subnormal spacing.

    fl(x) = x(1 + delta) + eta with |eta| <= this (Higham eq. 2.8 with gradual underflow):
    fp64 2^-1075, fp32 2^-150, fp16 2^-25, bf16 2^-134.

    Raises:
        TypeError, ValueError: unknown dtype name.
    """
    return 2.0 ** underflow_abs_error_log2(dtype_name)


def underflow_abs_error_log2(dtype_name: str) -> int:
    """log2 of :func:`underflow_abs_error`: emin - p (fp64 -1075, fp32 -150, fp16 -25,
    bf16 -134). For float64, 2^-1075 itself is below the smallest subnormal and rounds to 0 as a
    Python float; a caller that scales it (e.g. by e^m) works with this exponent instead.

    Raises:
        TypeError, ValueError: unknown dtype name.
    """
    total, exponent = FORMATS[_dtype("dtype_name", dtype_name)]
    emin = 2 - 2 ** (exponent - 1)
    return emin - precision_bits(dtype_name)


def largest_finite(dtype_name: str) -> float:
    """Largest finite value (2 - 2^(1-p)) 2^emax: fp16 65504, bf16 ~3.39e38, fp32 ~3.40e38.

    Raises:
        TypeError, ValueError: unknown dtype name.
    """
    total, exponent = FORMATS[_dtype("dtype_name", dtype_name)]
    p = precision_bits(dtype_name)
    emax = 2 ** (exponent - 1) - 1
    return (2.0 - 2.0 ** (1 - p)) * 2.0 ** (emax - 1) * 2.0


def product_exact_in(input_dtype: str, accum_dtype: str) -> bool:
    """Whether the significand of a product of two ``input_dtype`` numbers fits ``accum_dtype``.

    True iff 2 p_in <= p_acc (bf16/fp16 into fp32, fp32 into fp64): barring overflow or
    underflow of the product (always in range for fp16 into fp32; bf16 shares fp32's exponent
    range, so a product can leave it), the product is exact and the two-level model charges only
    the additions.

    Raises:
        TypeError, ValueError: unknown dtype names.
    """
    return 2 * precision_bits(input_dtype) <= precision_bits(accum_dtype)


def smallest_subnormal(dtype_name: str):
    """The smallest positive value 2^(emin + 1 - p) as an exact ``Fraction`` (fp32 2^-149,
    fp16 2^-24, bf16 2^-133, fp64 2^-1074).

    Raises:
        TypeError, ValueError: unknown dtype name.
    """
    from fractions import Fraction

    total, exponent = FORMATS[_dtype("dtype_name", dtype_name)]
    emin = 2 - 2 ** (exponent - 1)
    return Fraction(2) ** (emin + 1 - precision_bits(dtype_name))


def product_always_exact(input_dtype: str, accum_dtype: str) -> bool:
    """Whether *every* product of two finite ``input_dtype`` numbers is exact in ``accum_dtype``.

    True iff the significand fits (:func:`product_exact_in`, 2 p_in <= p_acc) and every non-zero
    product lies in the target's normal range: smallest_subnormal(in)^2 >= 2^emin(acc) and
    largest_finite(in)^2 <= largest_finite(acc) (|a b| lies between the two squares). fp16 into
    fp32 and fp32 into fp64: True. bf16 into fp32: False -- bf16 has fp32's exponent range, so
    ((1 + 2^-7) 2^-70)^2 falls in fp32's subnormal range and is rounded, and 2^100 * 2^100
    overflows (D10).

    Raises:
        TypeError, ValueError: unknown dtype names.
    """
    from fractions import Fraction

    if not product_exact_in(input_dtype, accum_dtype):
        return False
    total, exponent = FORMATS[_dtype("accum_dtype", accum_dtype)]
    normal_min = Fraction(2) ** (2 - 2 ** (exponent - 1))
    tiny_sq = smallest_subnormal(input_dtype) ** 2
    big_sq = Fraction(largest_finite(input_dtype)) ** 2
    return tiny_sq >= normal_min and big_sq <= Fraction(largest_finite(accum_dtype))


# -- the gamma constant -----------------------------------------------------------------------
def round_to_bits(x, bits: int, emin: int | None = None):
    """The rational ``x`` (a ``fractions.Fraction``) rounded exactly to the nearest number with
    ``bits`` significant bits, ties to even; below 2^emin the spacing stays that of 2^emin
    (gradual underflow), or the exponent is unbounded when ``emin`` is None. The exact emulation
    of a small floating format that the D10 and D11 claims are checked against."""
    from fractions import Fraction

    if x == 0:
        return Fraction(0)
    sign = -1 if x < 0 else 1
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    if emin is not None:
        e = max(e, emin)
    step = Fraction(2) ** (e - bits + 1)  # the spacing at a's binade
    n, rem = divmod(a / step, 1)
    n = int(n)
    if 2 * rem > 1 or (2 * rem == 1 and n % 2):
        n += 1
    return sign * n * step


def gamma(n: int, u: float) -> float:
    """gamma_n = n u/(1 - n u) (Higham Lemma 3.1): |theta_n| <= gamma_n for n roundings.

    Args:
        n: number of rounding errors (int >= 0). u: unit roundoff in (0, 1).

    Raises:
        TypeError: non-int ``n`` or non-real ``u``.
        ValueError: n < 0, u outside (0, 1), or n u >= 1 (the bound does not exist).
    """
    n = check_int("n", n, 0, array_ok=True)
    u = _unit(u)
    nu = n * u
    if np.any(nu >= 1.0):
        raise ValueError(
            f"n: gamma_n needs n*u < 1, got n = {np.max(n)}, u = {u!r} (n*u = {np.max(nu)!r})"
        )
    return _result(nu / (1.0 - nu))


def ulps_to_relative(ulps: float, u: float) -> float:
    """Relative error bound 2 ulps u of a result within ``ulps`` ulps of the exact value.

    For a normal result y in [2^e, 2^(e+1)), ulp(y) = 2^(e+1-p) <= 2^(1-p)|y| = 2u|y|
    (derived); 0.5 ulp (correct rounding) gives u. Subnormal results: add
    ``underflow_abs_error``.

    Raises:
        TypeError, ValueError: negative ``ulps`` or bad ``u``.
    """
    return _result(2.0 * check_real("ulps", ulps, nonneg=True, array_ok=True) * _unit(u))


def cuda_fast_expf_ulps(x: float) -> float:
    """Maximum ulps of CUDA's ``__expf(x)`` from the exact result: 2 + floor(|1.173 x|) + 0.5.

    Source: CUDA C++ Programming Guide, appendix 'Mathematical Functions', intrinsic
    functions table (__expf), converted from "ulps from the correctly rounded result".

    Raises:
        TypeError, ValueError: ``x`` not a finite real.
    """
    return 2.0 + math.floor(abs(1.173 * check_real("x", x))) + 0.5


# -- elementary bounds ---------------------------------------------------------------------
def dot_product_bound(n: int, abs_dot: float, u: float) -> float:
    """|fl(a.b) - a.b| <= gamma_n sum_i |a_i b_i| (Higham eq. 3.5; any summation order).

    Args:
        n: vector length (>= 1). abs_dot: sum_i |a_i b_i| (>= 0). u: unit roundoff.

    Raises:
        TypeError, ValueError: bad arguments or n u >= 1.
    """
    return gamma(check_int("n", n, 1), u) * check_real("abs_dot", abs_dot, nonneg=True)


def sum_bound(n_terms: int, abs_sum: float, u: float) -> float:
    """|fl(sum_i x_i) - sum_i x_i| <= gamma_{n-1} sum_i |x_i| (Higham eq. 4.4; any order).

    Args:
        n_terms: number of terms (>= 1). abs_sum: sum_i |x_i|. u: unit roundoff.

    Raises:
        TypeError, ValueError: bad arguments or (n-1) u >= 1.
    """
    return gamma(check_int("n_terms", n_terms, 1) - 1, u) * check_real(
        "abs_sum", abs_sum, nonneg=True
    )


def sum_of_products_bound(roundings: int, abs_sum: float, u: float) -> float:
    """gamma_k sum |terms|: error of a sum of products where each term meets <= k roundings.

    Each term (a product of computed factors) passes through at most ``roundings``
    multiplications, divisions and additions on its way to the result (Higham Lemma 3.1 with
    eqs. 3.2-3.5): e.g. a length-n dot product has k = n; recursive summation of n products,
    each of f factors, has k = (f - 1) + n.

    Raises:
        TypeError, ValueError: bad arguments or k u >= 1.
    """
    return gamma(check_int("roundings", roundings, 0), u) * check_real(
        "abs_sum", abs_sum, nonneg=True
    )


def score_abs_error(d: int, abs_dot: float, u: float, scale_roundings: int = 2) -> float:
    """|x_hat - x| for a score x = c (q.k): gamma_{d + r_c} c sum_i |q_i k_i|.

    Args:
        d: head dimension. abs_dot: c sum_i |q_i k_i| (the scale included).
        u: unit roundoff of the arithmetic. scale_roundings: r_c, the roundings of forming and
            applying the scale: 2 for c * fl(q.k) (c rounded, one product), 5 when sqrt(c) is
            absorbed into q and k (c, sqrt, and one product on each side, squared: 1 + 2 + 2),
            0 when the scale is a power of two applied exactly.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    return gamma(
        check_int("d", d, 1) + check_int("scale_roundings", scale_roundings, 0), u
    ) * check_real("abs_dot", abs_dot, nonneg=True)


#: log of the largest float64: ``math.expm1`` overflows beyond it
_LOG_MAX_FLOAT = math.log(sys.float_info.max)


def exp_relative_bound(score_abs_error: float, u: float, exp_ulps: float) -> float:
    """|fl(exp(x_hat)) - exp(x)| / exp(x) <= e^{e_x}(1 + 2 ulps u) - 1, |x_hat - x| <= e_x.

    Derived: exp(x_hat) = exp(x) e^t with |t| <= e_x and |e^t - 1| <= e^{e_x} - 1; the library
    adds a relative error <= 2 ulps u (``ulps_to_relative``). Grows with |x| through e_x.

    Args:
        score_abs_error: e_x >= 0. u: unit roundoff of the result. exp_ulps: the library's
            ulps (``LIBRARY_EXP_ULPS[...].value``).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    e = check_real("score_abs_error", score_abs_error, nonneg=True, array_ok=True)
    r = ulps_to_relative(exp_ulps, u)
    # e^e past float64: no finite statement (inf, never an overflow)
    grown = np.expm1(np.minimum(e, _LOG_MAX_FLOAT)) * (1.0 + r) + r
    return _result(np.where(e > _LOG_MAX_FLOAT, math.inf, grown))


def softmax_weight_relative_bound(
    score_abs_error: float, shifted_score_abs: float, u: float, exp_ulps: float
) -> float:
    """Relative error of w_hat_s = fl(exp(fl(x_hat_s - m_hat))) against e^{x_s - m_hat}.

    The subtracted maximum m_hat is one computed number common to every key, so it cancels
    exactly in N/D (D6) and only the per-key error matters: the exponent carries
    |x_hat_s - x_s| + u |x_hat_s - m_hat| (one subtraction), then ``exp_relative_bound``.

    Args:
        score_abs_error: bound on |x_hat_s - x_s|. shifted_score_abs: bound on |x_hat_s - m_hat|
            (e.g. max_s x_hat_s - min_s x_hat_s; 0 without the subtraction).
        u: unit roundoff. exp_ulps: library exp ulps.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    e = check_real("score_abs_error", score_abs_error, nonneg=True, array_ok=True)
    sh = check_real("shifted_score_abs", shifted_score_abs, nonneg=True, array_ok=True)
    return exp_relative_bound(e + _unit(u) * sh, u, exp_ulps)


def polynomial_roundings(order: int, scheme: str = "horner") -> int:
    """Roundings k per term when evaluating kappa_N(x) = sum_n x^n/n! (coefficients rounded).

    ``horner``: 2N + 1 (Higham eq. 5.3 gives 2N, plus the rounded coefficients 1/n!);
    ``powers``: x^n by n - 1 products, times fl(1/n!) (1 + 1), summed over N + 1 terms (N):
    2N + 1; ``term_recurrence``: t_n = fl(fl(t_{n-1} x)/n) (2 per step) then the sum (N): 3N.

    Raises:
        TypeError, ValueError: bad order or unknown scheme.
    """
    n = check_int("order", order, 0)
    check_choice("scheme", scheme, POLYNOMIAL_SCHEMES)
    return 3 * n if scheme == "term_recurrence" else 2 * n + 1


def taylor_weight_majorant(order: int, score_abs: float, score_abs_error: float) -> float:
    """W = kappa_N(|x| + e_x) >= |kappa_N(x)|: the magnitude the kappa_N weight error scales with.

    Args:
        order: N >= 0. score_abs: |x|. score_abs_error: e_x (bound on |x_hat - x|).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    n = check_int("order", order, 0)
    y = check_real("score_abs", score_abs, nonneg=True) + check_real(
        "score_abs_error", score_abs_error, nonneg=True
    )
    total, term = 0.0, 1.0
    for k in range(n + 1):
        total += term
        term *= y / (k + 1)
    return total


def taylor_weight_relative_bound(
    order: int, score_abs_error: float, u: float, scheme: str = "horner"
) -> float:
    """e_w with |fl(kappa_N(x_hat)) - kappa_N(x)| <= e_w kappa_N(|x| + e_x) (derived).

    e_w = gamma_k + e_x: rounding (k = ``polynomial_roundings``) relative to
    sum_n |x_hat|^n/n! <= kappa_N(|x| + e_x), plus |kappa_N(x_hat) - kappa_N(x)| <=
    kappa_{N-1}(|x| + e_x) e_x <= kappa_N(|x| + e_x) e_x (mean value theorem, kappa_N' =
    kappa_{N-1}). Relative to the majorant, not to |kappa_N(x)| (odd N can vanish).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    k = polynomial_roundings(order, scheme)
    return _result(
        gamma(k, u) + check_real("score_abs_error", score_abs_error, nonneg=True, array_ok=True)
    )


def taylor_feature_relative_error(order: int, u: float) -> float:
    """Relative error gamma_{4N+3} of one Taylor feature c^{n/2} x^alpha/sqrt(alpha!), n <= N.

    Count: each scaled entry fl(fl(sqrt(c)) x_i) carries 3 roundings (c, sqrt, product), a
    degree-n monomial n of them plus n - 1 products, the coefficient fl(1/sqrt(alpha!)) 3 and
    its product 1: 4n + 3 <= 4N + 3. Same count for the tensor-power basis (1/sqrt(n!)).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    return gamma(4 * check_int("order", order, 0) + 3, u)


def feature_form_relative_bound(
    feature_rel_error: float, n_features: int, n_keys: int, u: float, with_values: bool = True
) -> float:
    """Relative error (to the majorant) of N_t or D_t computed from feature maps.

    N_t,j = sum_s sum_m phi_m(q) phi_m(k_s) v_sj in any of the parallel-through-features,
    recurrent (state S_t = sum_s phi(k_s) v_s^T) or chunked forms: each product term carries
    the two feature errors (1 + e_phi)^2, two products (one without values) and at most
    n_keys + n_features additions (keys: <= n_keys - 1 inside the state plus one per chunk
    boundary; features: n_features - 1; + 1 joining the intra- and inter-chunk parts). Result:
    (1 + e_phi)^2 (1 + gamma_k) - 1 with k = n_keys + n_features + 2 (1 without values),
    relative to A = sum_s W_s |v_sj| (or B = sum_s W_s) with W_s = sum_m |phi_m(q)||phi_m(k_s)|
    (Taylor: kappa_N(c sum_i |q_i||k_si|), derived). For a chunked form whose intra-chunk part
    evaluates kappa_N(x) directly, use the larger of this and the parallel bound.

    Args:
        feature_rel_error: e_phi, relative error of each computed feature (e.g.
            ``taylor_feature_relative_error``). n_features: m per query. n_keys: keys summed
            (t for causal row t). u: unit roundoff. with_values: N_t (True) or D_t (False).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    e = check_real("feature_rel_error", feature_rel_error, nonneg=True)
    k = (
        check_int("n_features", n_features, 1)
        + check_int("n_keys", n_keys, 1, array_ok=True)
        + (2 if with_values else 1)
    )
    return _result((1.0 + e) ** 2 * (1.0 + gamma(k, u)) - 1.0)


def weighted_sum_relative_bound(
    n_terms: int, weight_rel: float, u: float, with_values: bool = True
) -> float:
    """num_rel / den_rel of sum_s w_hat_s v_s (or sum_s w_hat_s) given weight errors.

    If |w_hat_s - w_s| <= e_w W_s with W_s >= |w_s|, then
    |fl(sum_s w_hat_s v_sj) - sum_s w_s v_sj| <= [(1 + e_w)(1 + gamma_n) - 1] sum_s W_s |v_sj|
    (one product and n - 1 additions per term: gamma_n) and the plain sum (no values) has
    gamma_{n-1}. Derived in ``derive``.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    n = check_int("n_terms", n_terms, 1, array_ok=True)
    e = check_real("weight_rel", weight_rel, nonneg=True, array_ok=True)
    return _result((1.0 + e) * (1.0 + gamma(n if with_values else n - 1, u)) - 1.0)


def elu1_feature_relative_error(x_abs_max: float, u: float, exp_ulps: float) -> float:
    """Relative part e of the error of the elu+1 feature map of Katharopoulos et al. 2020
    (eq. 7) as code computes it, fl(fl(elu(x_hat)) + 1), x_hat = fl(scale x) (one rounding):
    |phi_hat(x) - phi(x)| <= e phi(x) + a, a = ``elu1_feature_absolute_error`` (x <= 0 only).

    x > 0: fl(x_hat + 1) = (x + 1)(1 + t)(1 + t'), |t| <= u x/(x + 1) <= u: (1 + u)^2 - 1.
    x <= 0, E = fl-free e^{x_hat} = e^x e^{x_hat - x}: elu(x_hat) by expm1 (within r = 2 ulps
    u of E - 1) gives phi_hat = (E + t1 (E - 1))(1 + t2); by exp then a subtraction, phi_hat =
    (E(1 + te) + ts (E_hat - 1))(1 + t2). The terms proportional to E are relative: (1 +
    ``exp_relative_bound(u |x|_max, u, exp_ulps)``)(1 + u) - 1; the rest, t1 (E - 1) or ts
    (E_hat - 1) with |E - 1| <= 1, is absolute (``elu1_feature_absolute_error``): adding 1
    cancels elu(x) back to e^x, so the feature of x near -15 in float32 (e^x = 3e-7) is off by
    up to 9 % relative, which no relative bound of exp alone covers. The larger of the two
    branches' relative parts.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    uu = _unit(u)
    xm = check_real("x_abs_max", x_abs_max, nonneg=True)
    e_exp = exp_relative_bound(uu * xm, uu, exp_ulps)
    return max((1.0 + uu) ** 2 - 1.0, (1.0 + e_exp) * (1.0 + uu) - 1.0)


def elu1_feature_absolute_error(u: float, exp_ulps: float) -> float:
    """Absolute part a of the elu+1 feature error (``elu1_feature_relative_error``) for x <= 0:
    the rounding of elu(x_hat) = e^x - 1 (expm1: r = 2 ulps u of |E - 1| <= 1; exp then the
    subtraction: u |E_hat - 1| <= u), carried through the final rounding: max(r, u)(1 + u).
    Zero for x > 0 (that branch has no cancellation). The cited ulps of exp are taken for
    expm1 too (the same library: SLEEF's expm1 and exp are both 1.0-ulp functions).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    uu = _unit(u)
    r = ulps_to_relative(exp_ulps, uu)
    return max(r, uu) * (1.0 + uu)


def favor_feature_relative_error(
    abs_projection: float, x_sq: float, d: int, u: float, exp_ulps: float
) -> float:
    """Relative error of one FAVOR+ feature fl(exp(w.x - |x|^2/2) / sqrt(m)).

    The exponent has |error| <= gamma_{d+2} (sum_i |w_i x_i| + |x|^2/2) (two length-d dot
    products, a halving that is exact, one subtraction); then ``exp_relative_bound``, then
    the division by sqrt(m) (sqrt and division: 2 roundings).

    Args:
        abs_projection: sum_i |w_i x_i|. x_sq: |x|^2. d: dimension. u: unit roundoff.
        exp_ulps: library exp ulps.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    a = check_real("abs_projection", abs_projection, nonneg=True)
    s = check_real("x_sq", x_sq, nonneg=True)
    e = gamma(check_int("d", d, 1) + 2, u) * (a + s / 2.0)
    return (1.0 + exp_relative_bound(e, u, exp_ulps)) * (1.0 + gamma(2, u)) - 1.0


def division_relative_bound(u: float, div_ulps: float = 0.5) -> float:
    """Relative error 2 ulps u of one division (0.5 ulp, IEEE correctly rounded: u).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    return ulps_to_relative(div_ulps, u)


def ratio_relative_bound(num_rel: float, den_rel: float, div_rel: float = 0.0) -> float:
    """Worst relative error of a computed ratio: (1 + e_N)(1 + e_div)/(1 - e_D) - 1 (derived).

    The supremum of |(N_hat/D_hat)(1 + delta)/(N/D) - 1| over |N_hat/N - 1| <= e_N,
    |D_hat/D - 1| <= e_D and |delta| <= e_div; attained at a corner of that box.

    Raises:
        TypeError: non-real input. ValueError: negative input or e_D >= 1 (D_hat may vanish).
    """
    en = check_real("num_rel", num_rel, nonneg=True, array_ok=True)
    ed = check_real("den_rel", den_rel, nonneg=True, array_ok=True)
    ev = check_real("div_rel", div_rel, nonneg=True)
    if np.any(ed >= 1.0):
        raise ValueError(
            f"den_rel: expected < 1 (else the denominator may vanish), got {np.max(ed)!r}"
        )
    return _result((1.0 + en) * (1.0 + ev) / (1.0 - ed) - 1.0)


def kernel_attention_output_bound(
    *,
    num_rel: float,
    den_rel: float,
    abs_numerator: float,
    abs_denominator: float,
    denominator: float,
    output_abs: float,
    div_rel: float,
) -> float:
    """Bound on |o_hat_j - o_j| for o_j = N_j/D computed as fl(N_hat_j/D_hat) (derived).

    Hypotheses: |N_hat_j - N_j| <= num_rel * A and |D_hat - D| <= den_rel * B with
    A = ``abs_numerator`` = sum_s W_s |v_sj|, B = ``abs_denominator`` = sum_s W_s, W_s >= |w_s|
    (for exp W_s = w_s, so B = D), and a division with relative error <= div_rel. Then

        |o_hat_j - o_j| <= (num_rel A + |o_j| den_rel B) / (|D| - den_rel B) * (1 + div_rel)
                           + div_rel |o_j|,

    from N_hat/D_hat - N/D = [(N_hat - N) - o (D_hat - D)]/D_hat and |D_hat| >= |D| - den_rel B.
    With |o_j| <= A/|D| this is <= coefficient * A/|D|
    (``kernel_attention_relative_coefficient``): the error is relative to
    sum_s |kappa(x_s)| |v_sj| / |sum_s kappa(x_s)|, not to |o_j|.

    All arguments keyword-only, non-negative finite reals except ``denominator`` (any sign,
    D = sum_s w_s). ``count`` denominators: pass den_rel = 0 and D = B = t; ``none``: use
    num_rel * A directly.

    Returns:
        The bound, or ``math.inf`` when |D| <= den_rel B (the computed denominator may vanish).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    en = check_real("num_rel", num_rel, nonneg=True, array_ok=True)
    ed = check_real("den_rel", den_rel, nonneg=True, array_ok=True)
    a = check_real("abs_numerator", abs_numerator, nonneg=True, array_ok=True)
    b = check_real("abs_denominator", abs_denominator, nonneg=True, array_ok=True)
    d = np.abs(check_real("denominator", denominator, array_ok=True))
    o = check_real("output_abs", output_abs, nonneg=True, array_ok=True)
    ev = check_real("div_rel", div_rel, nonneg=True, array_ok=True)
    margin = d - ed * b
    ok = margin > 0.0
    with np.errstate(over="ignore"):
        err = (en * a + o * ed * b) / np.where(ok, margin, 1.0)
        return _result(np.where(ok, err * (1.0 + ev) + ev * o, math.inf))


def kernel_attention_relative_coefficient(
    num_rel: float, den_rel: float, cond: float, div_rel: float
) -> float:
    """C with |o_hat_j - o_j| <= C * A/|D| (A = sum_s W_s|v_sj|, D = sum_s w_s; derived).

    C = (1 + div_rel)(num_rel + den_rel cond)/(1 - den_rel cond) + div_rel, cond = B/|D| >= 1
    (= 1 for positive kernels). Increasing in cond, so the largest cond over the rows gives one
    coefficient valid for all of them.

    Returns:
        C, or ``math.inf`` when den_rel * cond >= 1.

    Raises:
        TypeError, ValueError: bad arguments (cond < 1 included).
    """
    en = check_real("num_rel", num_rel, nonneg=True)
    ed = check_real("den_rel", den_rel, nonneg=True)
    c = check_real("cond", cond)
    if c < 1.0:
        raise ValueError(f"cond: expected B/|D| >= 1, got {cond!r}")
    ev = check_real("div_rel", div_rel, nonneg=True)
    if ed * c >= 1.0:
        return math.inf
    return (1.0 + ev) * (en + ed * c) / (1.0 - ed * c) + ev


def low_precision_output_bound(accum_bound: float, output_abs: float, out_dtype: str) -> float:
    """Two-level model: |fl_low(o_hat) - o| <= accum (1 + u_low) + u_low |o| + eta_low.

    o_hat is computed at the accumulation precision (fp32) with |o_hat - o| <= accum_bound and
    then rounded to ``out_dtype`` (relative u_low, absolute eta_low =
    ``underflow_abs_error`` in the subnormal range). o is the exact result on the *same
    rounded inputs* (compare against float64 on those inputs, cast up exactly).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    a = check_real("accum_bound", accum_bound, nonneg=True, array_ok=True)
    o = check_real("output_abs", output_abs, nonneg=True, array_ok=True)
    ul = unit_roundoff(out_dtype)
    return _result(a * (1.0 + ul) + ul * o + underflow_abs_error(out_dtype))


def normalization_rounding_bound(
    kind: str, d_v: int, u: float, mean_abs_over_std: float | None = None
) -> float:
    """||fl(Norm(y)) - Norm(y)||_2 for an exactly known vector y (derived; eps allowed).

    l2 (x/sqrt(sum x^2 + eps)): per-component relative error
    rho_k = (1 + u)/(sqrt(1 - gamma_k)(1 - u)) - 1 with k = d_v + 1 (squares and sum: d_v,
    eps addition: 1; then sqrt and the division: the two (1 + u) factors); norm of Norm(y): 1.
    rms: k = d_v + 2 (the mean's division), scaled by sqrt(d_v).
    layernorm (two-pass: mean, then centred sum of squares): centring error
    eta = gamma_{d_v}(1 + u) mean|y|/std(y) + u (relative to ||y - mean||), propagated by the
    D7 sensitivity 2 sqrt(d_v) eta, plus sqrt(d_v) rho_{d_v+2}. Needs ``mean_abs_over_std``.

    Raises:
        TypeError, ValueError: unknown kind, bad numbers, missing mean_abs_over_std.
    """
    check_choice("kind", kind, NORM_KINDS)
    n = check_int("d_v", d_v, 2 if kind == "layernorm" else 1)
    uu = _unit(u)

    def rho(k: int) -> float:
        g = gamma(k, uu)
        if g >= 1.0:
            return math.inf
        return (1.0 + uu) / (math.sqrt(1.0 - g) * (1.0 - uu)) - 1.0

    if kind == "l2":
        return rho(n + 1)
    if kind == "rms":
        return math.sqrt(n) * rho(n + 2)
    if mean_abs_over_std is None:
        raise ValueError("mean_abs_over_std: required for kind='layernorm', got None")
    ratio = check_real("mean_abs_over_std", mean_abs_over_std, nonneg=True)
    eta = gamma(n, uu) * (1.0 + uu) * ratio + uu
    return math.sqrt(n) * (2.0 * eta + rho(n + 2))


# -- what the D10 record (``derivations.rounding_record``) checks ---------------------------
EXPORTS = (
    "FORMATS",
    "LIBRARY_EXP_ULPS",
    "LIBRARY_DIV_ULPS",
    "CitedConstant",
    "precision_bits",
    "unit_roundoff",
    "underflow_abs_error",
    "largest_finite",
    "product_exact_in",
    "smallest_subnormal",
    "product_always_exact",
    "ulps_from_exact",
    "ULP_CONVENTION",
    "gamma",
    "ulps_to_relative",
    "cuda_fast_expf_ulps",
    "dot_product_bound",
    "sum_bound",
    "sum_of_products_bound",
    "score_abs_error",
    "exp_relative_bound",
    "softmax_weight_relative_bound",
    "polynomial_roundings",
    "taylor_weight_majorant",
    "taylor_weight_relative_bound",
    "taylor_feature_relative_error",
    "feature_form_relative_bound",
    "weighted_sum_relative_bound",
    "elu1_feature_relative_error",
    "elu1_feature_absolute_error",
    "favor_feature_relative_error",
    "division_relative_bound",
    "ratio_relative_bound",
    "kernel_attention_output_bound",
    "kernel_attention_relative_coefficient",
    "low_precision_output_bound",
    "normalization_rounding_bound",
)
