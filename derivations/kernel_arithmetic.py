"""D17, numeric part: the arithmetic of real attention kernels as stated parameters of D10.

D10's standard model assumes round-to-nearest arithmetic, full float32 matrix products, gradual
underflow, IEEE division and a library exp of cited ulps. GPU attention kernels depart from each
of these, as their sources state; here every departure is a named parameter of
:class:`KernelArithmetic`, with the lemma that bounds it (the record, with its toy-format checks
and faulty twins, is ``derivations.kernel_arithmetic_record``):

* **truncating accumulation** in tensor-core matrix products (M. Fasi, N. J. Higham, M. Mikaitis,
  S. Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ Comput. Sci. 7:e330, 2021:
  products exact, sums normalized with truncation): a directed rounding has |delta| < 2u (the
  machine epsilon; Higham sec. 2.1), so the gamma of a sum uses 2u (:func:`mma_unit`);
* **TF32 inputs** to float32 matrix products (NVIDIA A100 white paper: 10 stored significand
  bits, u = 2^-11): every product term carries (1 + u_tf32)^2 (:func:`tf32_product_rel`);
* **approximate special functions**: ``ex2.approx.f32`` (2 ulp from the correctly rounded result,
  :data:`EX2_APPROX_F32_ULPS`), ``tanh.approx.f32`` (relative error 2^-11,
  :data:`TANH_APPROX_F32_REL`), ``rcp.approx.f32`` (1 ulp, :data:`RCP_APPROX_F32_ULPS`), each
  cited from NVIDIA's PTX ISA;
* **the exponent as one fused multiply-add** (FlashAttention-2, csrc/flash_attn/src/softmax.h,
  ``scale_apply_exp2``: exp2f(x * scale_log2 - max_scaled) with scale_log2 = c log2 e):
  :func:`fused_exponent_abs_error`;
* **normalization by a reciprocal and a product** (softmax.h, ``normalize_softmax_lse``:
  inv_sum = 1.f / sum, acc_o *= inv_sum): :func:`reciprocal_normalization_rel`;
* **flush-to-zero** of subnormal results (``ex2.approx.ftz.f32``; ``--use_fast_math``): the
  absolute error of a result below the normal range is the smallest normal number, not half the
  subnormal spacing (:func:`flushed_abs_error`);
* **split-KV** (flash-decoding; FlashAttention-2 ``combine_attn_seqk_parallel``): partial outputs
  o_i (float32) and log-sum-exps L_i combined as o = sum_i exp(L_i - L) o_i with L =
  max + log sum_i exp(L_i - max): :func:`split_kv_scale_rel`, :func:`split_kv_output_bound`.

FlashAttention-2's transforms of the score (flash_api.cpp: params.softcap = softmax_scale /
softcap, scale_softmax = softcap; utils.h ``apply_softcap``: cutlass::fast_tanh(s * softcap);
alibi.h / mask.h: s += (slope / scale_softmax) * col_idx for causal rows, s -= (slope /
scale_softmax) |row + S - T - col| otherwise) are parameters of D16's bounds
(``derivations.transform_rounding``): the softcap's argument is one product of the raw score
with fl(c / C) after the scale's own rounding (2 roundings), the cap's product by C is folded
into the exponent's scale (no rounding of its own), and the ALiBi bias is a product of a
rounded slope quotient and an integer (2 roundings) indexed by the key for causal rows.

The formulas are plain arithmetic on floats or numpy arrays (elementwise).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from derivations._validate import check_choice, check_int, check_real
from derivations.rounding import (
    LIBRARY_DIV_ULPS,
    LIBRARY_EXP_ULPS,
    CitedConstant,
    _result,
    _unit,
    gamma,
    ulps_from_exact,
    ulps_to_relative,
)
from derivations.transform_rounding import TANH_ULPS

FASI = (
    "M. Fasi, N. J. Higham, M. Mikaitis, S. Pranesh, Numerical behavior of NVIDIA tensor cores, "
    "PeerJ Comput. Sci. 7:e330, 2021"
)
PTX_ISA = (
    "NVIDIA, Parallel Thread Execution ISA (PTX ISA 9.1), section 9.7.3 'Floating Point "
    "Instructions'"
)

#: ex2.approx.f32: 2 ulps from the correctly rounded result, full range (PTX ISA, ex2)
EX2_APPROX_F32_ULPS = CitedConstant(
    ulps_from_exact(2.0, "correctly rounded"),
    f"{PTX_ISA}, ex2: 'The maximum ulp error is 2 ulp from correctly rounded result across the "
    "full range of inputs' (ex2.approx.f32; exp2f under --use_fast_math)",
    "2 ulps from the correctly rounded result: 2 + 1/2 from the exact one",
    2.0,
    "correctly rounded",
)
#: tanh.approx.f32: maximum relative error 2^-11 over the whole range (PTX ISA, tanh)
TANH_APPROX_F32_REL = CitedConstant(
    2.0**-11,
    f"{PTX_ISA}, tanh: 'The maximum relative error over the entire floating point range is "
    "2^-11' (tanh.approx.f32, sm_75+; FlashAttention-2's softcap calls cutlass::fast_tanh, "
    "which issues it)",
    "a relative error, not ulps: |tanh_approx(y) - tanh(y)| <= 2^-11 |tanh(y)|",
    2.0**-11,
    "exact",
)
#: rcp.approx.f32: 1 ulp, reference not stated (read as from the correctly rounded result)
RCP_APPROX_F32_ULPS = CitedConstant(
    ulps_from_exact(1.0, "not stated"),
    f"{PTX_ISA}, rcp: 'rcp.approx.f32 implements a fast approximation to reciprocal. The maximum "
    "ulp error is 1 across the full range of inputs'",
    "the reference is not stated: read as from the correctly rounded result, 1 + 1/2 from the "
    "exact one",
    1.0,
    "not stated",
)
#: logf under --use_fast_math (__logf): cited for the split-KV log-sum-exp
FAST_LOG_F32 = CitedConstant(
    2.0**-21.41,
    "CUDA C++ Programming Guide, 'Intrinsic Functions', single precision: __logf(x) for x in "
    "[0.5, 2] maximum absolute error 2^-21.41, otherwise maximum ulp error 3",
    "value: the absolute error on [0.5, 2]; elsewhere 3 ulps from the correctly rounded "
    "result, 3.5 from the exact one (FAST_LOG_F32_ULPS)",
    2.0**-21.41,
    "exact",
)
FAST_LOG_F32_ULPS = ulps_from_exact(3.0, "correctly rounded")
#: TF32's significand (10 stored bits + the implicit one): u = 2^-11
TF32_BITS = 11

ACCUMULATIONS = ("nearest", "truncate")
EXP_ARGUMENTS = ("subtract", "fma-scaled", "mul-sub-scaled")
SOFTCAP_ARGUMENTS = ("divide", "reciprocal", "scaled")
ALIBI_ANCHORS = ("distance", "key-index", "either")
NORMALIZATIONS = ("divide", "reciprocal")
#: roundings of the softcap's argument x / C: a division; a product with fl(1/C); the raw score
#: times fl(c / C) (the scale's own rounding is one of the two)
SOFTCAP_ARGUMENT_ROUNDINGS = {"divide": 1, "reciprocal": 2, "scaled": 2}


class KernelArithmetic(NamedTuple):
    """The arithmetic a kernel computes softmax attention with (D17; every field a parameter of
    the D10/D16 bounds, defaults = D10's standard model on a CPU).

    Fields: ``accumulation`` of matrix-product sums (``nearest`` | ``truncate``); ``tf32``
    (float32 matrix inputs rounded to TF32); ``exp_ulps`` (None: the device's cited exp);
    ``exp_argument`` (``subtract``: exp(fl(x - m)); ``fma-scaled``: exp2(fma(x, c log2 e,
    -m c log2 e)); ``mul-sub-scaled``: the same with a rounded product first); ``tanh_rel``
    (None: the library's ``TANH_ULPS``); ``softcap_argument`` (:data:`SOFTCAP_ARGUMENTS`);
    ``softcap_product`` (C tanh rounded on its own, or folded into the exponent's scale);
    ``bias_roundings`` (roundings of an ALiBi bias value before it is added); ``alibi_anchor``
    (``distance``: -m |t' - s|; ``key-index``: +m s on causal rows, the same softmax;
    ``either``: the larger bias magnitude of the two); ``normalization`` (``divide`` or
    ``reciprocal`` then a product); ``div_ulps`` (None: IEEE); ``flush_to_zero``;
    ``split_kv`` (key splits combined by log-sum-exp)."""

    name: str = "cpu"
    accumulation: str = "nearest"
    tf32: bool = False
    exp_ulps: float | None = None
    exp_argument: str = "subtract"
    tanh_rel: float | None = None
    softcap_argument: str = "divide"
    softcap_product: bool = True
    bias_roundings: int = 1
    alibi_anchor: str = "distance"
    normalization: str = "divide"
    div_ulps: float | None = None
    flush_to_zero: bool = False
    split_kv: int = 1

    def validated(self) -> KernelArithmetic:
        """Self, after checking every field (ValueError/TypeError naming the field)."""
        check_choice("accumulation", self.accumulation, ACCUMULATIONS)
        check_choice("exp_argument", self.exp_argument, EXP_ARGUMENTS)
        check_choice("softcap_argument", self.softcap_argument, SOFTCAP_ARGUMENTS)
        check_choice("alibi_anchor", self.alibi_anchor, ALIBI_ANCHORS)
        check_choice("normalization", self.normalization, NORMALIZATIONS)
        check_int("bias_roundings", self.bias_roundings, 0)
        check_int("split_kv", self.split_kv, 1)
        for name in ("exp_ulps", "tanh_rel", "div_ulps"):
            if getattr(self, name) is not None:
                check_real(name, getattr(self, name), nonneg=True)
        for name in ("tf32", "softcap_product", "flush_to_zero"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}: expected a bool, got {getattr(self, name)!r}")
        return self


#: FlashAttention-2 as its sources state it (csrc/flash_attn/src/softmax.h, utils.h, alibi.h,
#: flash_api.cpp; built with --use_fast_math), tensor cores per Fasi et al.; the exponent's
#: unfused form (PyTorch's build) is the larger bound and contains the FFMA one
FLASH_ATTENTION_2 = KernelArithmetic(
    name="flash-attention-2",
    accumulation="truncate",
    exp_ulps=EX2_APPROX_F32_ULPS.value,
    exp_argument="mul-sub-scaled",
    tanh_rel=TANH_APPROX_F32_REL.value,
    softcap_argument="scaled",
    softcap_product=False,
    bias_roundings=2,
    alibi_anchor="either",
    normalization="reciprocal",
    div_ulps=LIBRARY_DIV_ULPS["cuda-fast-div"].value,
    flush_to_zero=True,
)
#: the default per device, for a kernel that declares no arithmetic: on the CPU D10 as stated,
#: with an ALiBi bias anchored either way (a key-indexed bias is as common as the distance
#: form); on CUDA FlashAttention-2's arithmetic, whose departures contain those of SDPA's flash
#: path and of the eager path's tensor-core GEMMs (whose sums also truncate)
DEVICE_DEFAULTS = {"cpu": KernelArithmetic(alibi_anchor="either"), "cuda": FLASH_ATTENTION_2}
PRESETS = {"cpu": KernelArithmetic(), "flash-attention-2": FLASH_ATTENTION_2}


def parse_arithmetic(spec: str | KernelArithmetic | None, device: str = "cpu") -> KernelArithmetic:
    """A preset name (``cpu``, ``flash-attention-2``), a ``KernelArithmetic`` or None (the
    device's default, :data:`DEVICE_DEFAULTS`) -> a validated ``KernelArithmetic``; a preset
    name may end in ``+split:P`` for P key splits.

    Raises:
        ValueError: an unknown name (the message lists the presets) or a bad split count.
    """
    if spec is None:
        return DEVICE_DEFAULTS["cuda" if str(device).startswith("cuda") else "cpu"]
    if isinstance(spec, KernelArithmetic):
        return spec.validated()
    if not isinstance(spec, str):
        raise TypeError(f"arithmetic: expected a preset name or KernelArithmetic, got {spec!r}")
    name, _, tail = spec.partition("+split:")
    if name not in PRESETS or (tail and not (tail.isdigit() and int(tail) >= 1)):
        raise ValueError(
            f"arithmetic: expected one of {tuple(PRESETS)} (optionally '+split:P', P >= 1), "
            f"got {spec!r}"
        )
    base = PRESETS[name]
    return base._replace(split_kv=int(tail)) if tail else base


# -- lemmas -------------------------------------------------------------------------------------
def mma_unit(u: float, accumulation: str) -> float:
    """The unit of a matrix product's sums: u (round to nearest) or 2u (truncation: a directed
    rounding has |delta| < 2u, Higham sec. 2.1; Fasi et al. 2021 for tensor cores). Every gamma
    of those sums is taken at this unit (derived).

    Raises:
        TypeError, ValueError: bad ``u`` or ``accumulation``.
    """
    uu = _unit(u)
    return (
        2.0 * uu if check_choice("accumulation", accumulation, ACCUMULATIONS) == "truncate" else uu
    )


def tf32_product_rel(tf32: bool) -> float:
    """Relative error of one product of two float32 inputs rounded to TF32 first:
    (1 + u_tf32)^2 - 1 with u_tf32 = 2^-11 (the product of two 11-bit significands is exact in
    float32); 0 without TF32 (derived)."""
    if not tf32:
        return 0.0
    ut = 2.0**-TF32_BITS
    return (1.0 + ut) ** 2 - 1.0


def fused_exponent_abs_error(shift_abs, max_abs, u: float, *, fused: bool = True):
    """|e_hat - (x - m)| for the exponent of exp2(x s - fl(m s)) / log2 e, s = fl(c log2 e) the
    scale's rounded product, per key, up to a part common to the row (derived; floats or
    arrays). fl(m s) = m s (1 + d2) is common to the row and cancels in N / D (D6) except where
    a later rounding multiplies it:

    * ``fused`` (one FMA, FlashAttention-2's FFMA): e_hat = [(x - m) s - m s d2](1 + d3),
      s = c log2 e (1 + d1): |e_hat - (x - m) - common| <= gamma_2 |x - m| + u^2 (1 + u) |m|;
    * unfused (``fused=False``: fl(fl(x s) - fl(m s)), PyTorch's build of the same kernel with
      UNFUSE_FMA): e_hat = [(x - m) s (1 + d1') + m s (d1' - d2)](1 + d3), the product's own
      d1' is not common: |e_hat - (x - m) - common| <= gamma_3 |x - m| + u (1 + 2u)(1 + u) |m|.

    In natural units (divided by log2 e); ``shift_abs`` bounds |x - m| (scaled units),
    ``max_abs`` |m|. The score error e_x adds on top.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    uu = _unit(u)
    sh = check_real("shift_abs", shift_abs, nonneg=True, array_ok=True)
    m = check_real("max_abs", max_abs, nonneg=True, array_ok=True)
    if fused:
        return _result(gamma(2, uu) * sh + uu * uu * (1.0 + uu) * m)
    return _result(gamma(3, uu) * sh + uu * (1.0 + 2.0 * uu) * (1.0 + uu) * m)


def reciprocal_normalization_rel(u: float, rcp_ulps: float) -> float:
    """Relative error of o = acc * fl_lib(1 / l) (a reciprocal within ``rcp_ulps`` of the exact
    one, then one product): (1 + 2 rcp_ulps u)(1 + u) - 1 -- the ``div_rel`` of
    ``kernel_attention_output_bound`` for kernels that normalize by a product (derived).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    uu = _unit(u)
    return (1.0 + ulps_to_relative(rcp_ulps, uu)) * (1.0 + uu) - 1.0


def flushed_abs_error(smallest_normal: float, flush_to_zero: bool, eta: float) -> float:
    """Absolute error of one result below the normal range: half the subnormal spacing ``eta``
    with gradual underflow (Higham eq. 2.8), the smallest normal number when subnormal results
    are flushed to zero (a flushed |y| < smallest_normal becomes 0) (derived).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    tiny = check_real("smallest_normal", smallest_normal, positive=True)
    return tiny if flush_to_zero else check_real("eta", eta, nonneg=True)


def split_kv_scale_rel(lse_abs, combined_lse_abs, lse_gap_abs, u: float, exp_ulps: float):
    """Relative error theta_i of a split's scale fl(exp(L_hat_i - L_hat)) against exp(L_i - L)
    (derived; floats or arrays): the argument carries |L_hat_i - L_i| + |L_hat - L| and one
    subtraction of the computed values, u |L_hat_i - L_hat| <= u (gap_i + lse_i + lse), then
    the library exp:

        theta_i <= exp((1 + u)(lse_i + lse) + u gap_i)(1 + 2 exp_ulps u) - 1.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    uu = _unit(u)
    a = check_real("lse_abs", lse_abs, nonneg=True, array_ok=True)
    b = check_real("combined_lse_abs", combined_lse_abs, nonneg=True, array_ok=True)
    g = check_real("lse_gap_abs", lse_gap_abs, nonneg=True, array_ok=True)
    with np.errstate(over="ignore"):
        grown = np.exp((1.0 + uu) * (a + b) + uu * g) * (1.0 + ulps_to_relative(exp_ulps, uu)) - 1.0
    return _result(grown)


def split_kv_weighted_scale_rel(lse_abs, combined_lse_abs, n_splits: int, u: float, exp_ulps):
    """A bound on sum_i s_i theta_i, the scales' relative errors weighted by the exact scales
    s_i = exp(-g_i), g_i = L - L_i >= 0, sum_i s_i = 1 (derived; floats or arrays):

        theta_i <= [e^{c}(1 + r) - 1] + e^{c}(1 + r)(e^{u g_i} - 1), c = (1 + u)(a + b) (the
        subtraction of the computed values: u (g_i + a + b)), and
        e^{-g}(e^{u g} - 1) <= u g e^{-(1 - u) g} <= u / ((1 - u) e), so
        sum_i s_i theta_i <= e^{c}(1 + r) - 1 + P e^{c}(1 + r) u / ((1 - u) e),

    a = ``lse_abs`` (every split's |L_hat_i - L_i|), b = ``combined_lse_abs`` (|L_hat - L|),
    r = 2 exp_ulps u. The subtraction's error u g_i grows with a split's distance below the
    combined L, but that split's weight e^{-g_i} shrinks faster: no bound on g_i is needed.
    :func:`split_kv_output_bound` takes it as its ``scale_rel`` (it is linear in s_i theta_i).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    uu = _unit(u)
    a = check_real("lse_abs", lse_abs, nonneg=True, array_ok=True)
    b = check_real("combined_lse_abs", combined_lse_abs, nonneg=True, array_ok=True)
    p = check_int("n_splits", n_splits, 1)
    with np.errstate(over="ignore"):
        grow = np.exp((1.0 + uu) * (a + b)) * (1.0 + ulps_to_relative(exp_ulps, uu))
    return _result(grow - 1.0 + p * grow * uu / ((1.0 - uu) * np.e))


def split_kv_output_bound(split_bound, split_output_abs, scale_rel, n_splits: int, u: float):
    """|o_hat - o| for o = sum_i s_i o_i (s_i = exp(L_i - L), sum_i s_i = 1) computed from
    partial outputs o_hat_i with |o_hat_i - o_i| <= beta (``split_bound``), |o_i| <= a
    (``split_output_abs``) and scales s_hat_i = s_i (1 + theta_i), |theta_i| <= theta
    (``scale_rel``; or theta a bound on sum_i s_i theta_i, :func:`split_kv_weighted_scale_rel`:
    every term below is linear in s_i theta_i), summed in P = ``n_splits`` products and additions
    (derived; floats or arrays, elementwise):

        o_hat - o = sum_i s_i [(1 + theta_i)(o_hat_i - o_i) + theta_i o_i] + rounding, so
        |o_hat - o| <= (1 + theta) beta + theta a + gamma_P (1 + theta)(a + beta).

    The scales are not renormalized, so theta enters once against |o_i| (the lse errors do not
    cancel as the shared maximum of one softmax does).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    beta = check_real("split_bound", split_bound, nonneg=True, array_ok=True)
    a = check_real("split_output_abs", split_output_abs, nonneg=True, array_ok=True)
    th = check_real("scale_rel", scale_rel, nonneg=True, array_ok=True)
    g = gamma(check_int("n_splits", n_splits, 1), u)
    return _result((1.0 + th) * beta + th * a + g * (1.0 + th) * (a + beta))


def fast_log_abs_error(x_abs_log: float) -> float:
    """|__logf(x) - log x| <= 2^-21.41 + 2 * 3.5 * 2^-24 |log x| for any positive normal x: the
    larger of the two cited regimes of :data:`FAST_LOG_F32` (derived from the citation)."""
    lg = check_real("x_abs_log", x_abs_log, nonneg=True, array_ok=True)
    return _result(FAST_LOG_F32.value + ulps_to_relative(FAST_LOG_F32_ULPS, 2.0**-24) * lg)


def device_exp_ulps(arith: KernelArithmetic, device: str, default_library: str) -> float:
    """The exp ulps a bound uses: the arithmetic's own, else the cited ``default_library``."""
    if arith.exp_ulps is not None:
        return float(arith.exp_ulps)
    return LIBRARY_EXP_ULPS[default_library].value


def tanh_relative(arith: KernelArithmetic, u: float) -> float:
    """The relative error of the kernel's tanh: ``tanh_rel`` when given, else the library's
    ``TANH_ULPS`` at unit ``u``."""
    if arith.tanh_rel is not None:
        return float(arith.tanh_rel)
    return ulps_to_relative(TANH_ULPS.value, u)


def describe(arith: KernelArithmetic) -> str:
    """One line naming the arithmetic's departures from D10's standard model (for reports)."""
    parts = []
    if arith.accumulation == "truncate":
        parts.append("truncating matrix-product accumulation (2u)")
    if arith.tf32:
        parts.append("TF32 matrix inputs")
    if arith.exp_ulps is not None:
        parts.append(f"exp within {arith.exp_ulps:g} ulps")
    if arith.exp_argument != "subtract":
        parts.append(f"exponent {arith.exp_argument} (exp2)")
    if arith.tanh_rel is not None:
        parts.append(f"tanh relative error {arith.tanh_rel:.3g}")
    if arith.softcap_argument != "divide":
        parts.append(f"softcap argument {arith.softcap_argument}")
    if arith.normalization == "reciprocal":
        parts.append("normalization by a reciprocal and a product")
    if arith.flush_to_zero:
        parts.append("flush-to-zero")
    if arith.split_kv > 1:
        parts.append(f"{arith.split_kv} key splits (log-sum-exp combine)")
    if arith.alibi_anchor != "distance":
        parts.append(f"ALiBi anchored by {arith.alibi_anchor}")
    return f"{arith.name}: " + ("; ".join(parts) if parts else "D10's standard model")


EXPORTS = (
    "FASI",
    "EX2_APPROX_F32_ULPS",
    "TANH_APPROX_F32_REL",
    "RCP_APPROX_F32_ULPS",
    "FAST_LOG_F32",
    "TF32_BITS",
    "KernelArithmetic",
    "FLASH_ATTENTION_2",
    "DEVICE_DEFAULTS",
    "PRESETS",
    "parse_arithmetic",
    "mma_unit",
    "tf32_product_rel",
    "fused_exponent_abs_error",
    "reciprocal_normalization_rel",
    "flushed_abs_error",
    "split_kv_scale_rel",
    "split_kv_weighted_scale_rel",
    "split_kv_output_bound",
    "fast_log_abs_error",
)
