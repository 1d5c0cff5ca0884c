"""Tolerance rules other projects use to test attention kernels against a reference, ported
faithfully from their public sources so that this suite's own thresholds can be compared with
them ("anchors").

Every rule has a ``threshold_<name>(...) -> dict`` (the tolerance the source would use, with
the intermediate quantities) and a ``passes_<name>(actual, ...) -> bool`` (the decision exactly as
the source takes it: max-abs error against a threshold, an elementwise ``torch.isclose`` with
``atol``/``rtol``, or an RMS ratio). :data:`RULES` maps each rule name to its functions, its
source (repository, path, 40-hex commit, lines or function names) and a description.

Conventions shared by the rules (the sources name them differently):

* ``actual``: the kernel's output (or one gradient), any shape, in the kernel dtype ``dtype``
  (``torch.float16``, ``torch.bfloat16`` or ``torch.float32``).
* ``out_ref64``: the same quantity from a float64 reference, same shape. Where a source rounds
  its high-precision reference to ``dtype`` before comparing (FlashAttention, flash-linear-
  attention, hipDNN), the port does the same with ``out_ref64.to(dtype)``.
* ``out_ref_lowprec``: the same quantity from the plain PyTorch reference evaluated in ``dtype``
  (PyTorch's "low precision math reference", FlashAttention's ``out_pt``), same shape and dtype.

Differences between a source's setting and these conventions are stated per rule: PyTorch's
SDPA tests take a float32 "golden" reference for float16/bfloat16 kernels (float64 only for
float32 kernels, and in the newer mem-efficient test always); FlashAttention's ``out_pt`` is
computed in ``dtype`` with the 1/sqrt(d) scale applied to K instead of Q (``reorder_ops=True``).

Two of the cited commits are in forks, not in the upstream repository: the index holds no
upstream commit with that text (see ``source["upstream"]`` in :data:`RULES`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import torch

__all__ = [
    "DEFAULT_ATOL",
    "DEFAULT_RTOL",
    "FLASH_ATTN_VARIANTS",
    "FLA_DEFAULT_RATIO",
    "PYTORCH_CHECK_OUT_AND_GRAD_FUDGE",
    "PYTORCH_GET_TOLERANCES_FUDGE",
    "RULES",
    "THRESHOLDS",
    "fla_get_abs_err",
    "fla_get_err_ratio",
    "decide_fla_assert_close",
    "hipdnn_compute_gamma",
    "hipdnn_ranges_from_tensors",
    "passes_fla_assert_close",
    "passes_flash_attn",
    "passes_flash_attn3_hopper",
    "passes_hipdnn_sdpa_fwd",
    "passes_pytorch_check_out_and_grad",
    "passes_pytorch_get_tolerances",
    "pytorch_get_tolerances",
    "threshold_fla_assert_close",
    "threshold_flash_attn",
    "threshold_flash_attn3_hopper",
    "threshold_hipdnn_sdpa_fwd",
    "threshold_pytorch_check_out_and_grad",
    "threshold_pytorch_get_tolerances",
]

# ------------------------------------------------------------------------------------------------
# Sources
# ------------------------------------------------------------------------------------------------

_PT_REPO, _PT_COMMIT = "pytorch/pytorch", "00030eb8e81f911c48c4d7634fa6b8bb2fae1a1b"
_PT_FORK_REPO, _PT_FORK_COMMIT = "ROCm/pytorch", "08df56932afab2f183c7fb9d044ebacad8f505cd"
_FA_REPO, _FA_COMMIT = "Dao-AILab/flash-attention", "0251105a2fb19d2957484b7f023cd8c115286ced"
_FLA_REPO, _FLA_COMMIT = (
    "fla-org/flash-linear-attention",
    "bc3b101dcb713ddc5bd8924b66754eb68b5ccf89",
)
_HIP_REPO, _HIP_COMMIT = "tfalders/rocm-libraries", "f6b59e297db83684f6d88a68a7ef1d369f94bf3f"
_HIP_DIR = "projects/hipdnn/test_sdk"

# ------------------------------------------------------------------------------------------------
# Rule 1: PyTorch SDPA tests, get_tolerances (pytorch/pytorch test/test_transformers.py)
# ------------------------------------------------------------------------------------------------

#: ``default_atol`` of pytorch/pytorch test/test_transformers.py (commented there "Found in
#: torch/testing/_comparison.py", but the float16/bfloat16 atol is 1e-3 here, not the 1e-5 of
#: torch.testing's own table).
DEFAULT_ATOL = {torch.float16: 1e-3, torch.bfloat16: 1e-3, torch.float32: 1e-5}
#: ``default_rtol`` of the same file.
DEFAULT_RTOL = {torch.float16: 1e-3, torch.bfloat16: 1.6e-2, torch.float32: 1.3e-6}

#: Fudge factors passed to ``get_tolerances`` (pytorch/pytorch@00030eb8, test/test_transformers.py)
#: in ``test_flash_attention_vs_math_ref_grads`` and ``test_mem_efficient_attention_vs_math_ref_
#: grads`` (CUDA, no ROCm). The ``None`` fudge of the output check means 1.0.
PYTORCH_GET_TOLERANCES_FUDGE = {
    "flash": {
        "out": 1.0,  # 3 when head_dim % 8 != 0 (or on ROCm)
        "grad_query": 4.0,
        "grad_key": 2.0,
        "grad_value": 2.0,
    },
    "mem_efficient": {
        "out": 1.0,
        "grad_query": 1.5,  # dropout_fudge_factor: 1.5 without dropout, 2.0 with
        "grad_key": 12.0,  # 8 * dropout_fudge_factor
        "grad_value": 1.0,  # 7 before SM80 with float16
    },
}


def _pt_get_atol(true_value: torch.Tensor, computed_value: torch.Tensor) -> float:
    deviation = true_value - computed_value
    return torch.abs(deviation).max().item()


def _pt_get_rtol(true_value: torch.Tensor, computed_value: torch.Tensor) -> float:
    deviation = true_value - computed_value
    deviation = torch.abs(deviation / true_value)
    # NaN (0/0) -> default rtol; +inf (x/0) -> the dtype's largest finite value (nan_to_num)
    torch.nan_to_num_(deviation, nan=DEFAULT_RTOL[computed_value.dtype])
    return deviation.max().item()


def pytorch_get_tolerances(
    true_value: torch.Tensor, computed_value: torch.Tensor, fudge_factor: float | None = None
) -> tuple[float, float]:
    """``get_tolerances`` of pytorch/pytorch test/test_transformers.py, line for line.

    ``true_value``: the high-precision reference (any float dtype), ``computed_value``: the
    low-precision math reference (float16, bfloat16 or float32; indexes the default tables),
    same shape. Returns ``(atol, rtol)`` with
    ``atol = fudge * max(max|true - computed|, default_atol[dtype])`` and
    ``rtol = fudge * max(max|(true - computed) / true|, default_rtol[dtype])`` (NaN ratios count
    as ``default_rtol``; an rtol above 1e30, from a zero ``true_value``, is reset to the
    unfudged ``default_rtol``)."""
    fudge_factor = fudge_factor if fudge_factor is not None else 1.0
    atol = _pt_get_atol(true_value, computed_value)
    rtol = _pt_get_rtol(true_value, computed_value)
    atol = fudge_factor * max(atol, DEFAULT_ATOL[computed_value.dtype])
    rtol = fudge_factor * max(rtol, DEFAULT_RTOL[computed_value.dtype])
    if rtol > 1e30:
        rtol = DEFAULT_RTOL[computed_value.dtype]
    return atol, rtol


def _check_lowprec(out_ref_lowprec: torch.Tensor, dtype: torch.dtype) -> None:
    if out_ref_lowprec.dtype != dtype:
        raise ValueError(f"out_ref_lowprec has dtype {out_ref_lowprec.dtype}, expected {dtype}")


def threshold_pytorch_get_tolerances(
    *,
    out_ref64: torch.Tensor,
    out_ref_lowprec: torch.Tensor,
    dtype: torch.dtype,
    fudge_factor: float = 1.0,
) -> dict:
    """The ``(atol, rtol)`` PyTorch's SDPA tests (pytorch/pytorch@00030eb8, test/
    test_transformers.py) derive from the deviation of the low-precision math reference from the
    high-precision one: :func:`pytorch_get_tolerances` (``out_ref64``, ``out_ref_lowprec``).

    ``out_ref64``: float64 reference, ``out_ref_lowprec``: the math reference in ``dtype``
    (float16, bfloat16 or float32), same shape. ``fudge_factor``: see
    :data:`PYTORCH_GET_TOLERANCES_FUDGE`. The source's high-precision reference is float32 for
    float16/bfloat16 kernels; passing float64 measures the same deviation slightly more exactly.
    Returns ``{"atol", "rtol", "measured_atol", "measured_rtol", "default_atol",
    "default_rtol", "fudge_factor"}``."""
    _check_lowprec(out_ref_lowprec, dtype)
    atol, rtol = pytorch_get_tolerances(out_ref64, out_ref_lowprec, fudge_factor)
    return {
        "atol": atol,
        "rtol": rtol,
        "measured_atol": _pt_get_atol(out_ref64, out_ref_lowprec),
        "measured_rtol": _pt_get_rtol(out_ref64, out_ref_lowprec),
        "default_atol": DEFAULT_ATOL[dtype],
        "default_rtol": DEFAULT_RTOL[dtype],
        "fudge_factor": fudge_factor,
    }


def passes_pytorch_get_tolerances(
    actual: torch.Tensor,
    *,
    out_ref64: torch.Tensor,
    out_ref_lowprec: torch.Tensor,
    dtype: torch.dtype,
    fudge_factor: float = 1.0,
) -> bool:
    """``self.assertEqual(out, out_ref.to(out.dtype), atol=atol, rtol=rtol)`` with the tolerances
    of :func:`threshold_pytorch_get_tolerances`: elementwise
    ``|actual - expected| <= atol + rtol * |expected|`` on ``expected = out_ref64.to(dtype)``,
    evaluated by ``torch.isclose`` in ``dtype`` with ``equal_nan=True`` (TestCase.assertEqual's
    default), every element required. ``actual``: ``dtype``, same shape as the references."""
    thr = threshold_pytorch_get_tolerances(
        out_ref64=out_ref64, out_ref_lowprec=out_ref_lowprec, dtype=dtype, fudge_factor=fudge_factor
    )
    expected = out_ref64.to(actual.dtype)
    if actual.shape != expected.shape:
        raise ValueError(f"shape mismatch: {tuple(actual.shape)} vs {tuple(expected.shape)}")
    close = torch.isclose(actual, expected, rtol=thr["rtol"], atol=thr["atol"], equal_nan=True)
    return bool(close.all())


# ------------------------------------------------------------------------------------------------
# Rule 2: PyTorch SDPA tests, check_out_and_grad / _check_equal (newer test_transformers.py)
# ------------------------------------------------------------------------------------------------

#: Fudge factors of ``check_out_and_grad`` (ROCm/pytorch@08df5693, test/test_transformers.py),
#: CUDA values (the ROCm branches raise them). ``default`` is ``default_fudge_factor``.
PYTORCH_CHECK_OUT_AND_GRAD_FUDGE = {
    "default": 5.0,
    "flash": {"out": 4.0, "grad_query": 180.0, "grad_key": 16.0, "grad_value": 4.0},
    "mem_efficient": {"out": 3.0, "grad_query": 150.0, "grad_key": 25.0, "grad_value": 8.5},
    "mem_efficient_attn_mask": {
        "out": 4.0,
        "grad_query": 160.0,
        "grad_key": 25.0,
        "grad_value": 8.0,
        "grad_attn_mask": 45.0,
    },
}


def threshold_pytorch_check_out_and_grad(
    *,
    out_ref64: torch.Tensor,
    out_ref_lowprec: torch.Tensor,
    dtype: torch.dtype,
    fudge_factor: float = 5.0,
) -> dict:
    """``_check_equal``'s threshold (ROCm/pytorch@08df5693, test/test_transformers.py):
    ``max(default_atol[torch.float32], ref_error * fudge_factor)`` with
    ``ref_error = max|golden - reference|`` (golden ``out_ref64``, reference
    ``out_ref_lowprec`` in ``dtype``, same shape); the floor is 1e-5 whatever ``dtype``.

    Python's ``max`` is applied to the 0-dim tensor as in the source, so a NaN ``ref_error``
    gives the floor. Returns ``{"threshold", "ref_error", "floor", "fudge_factor"}``."""
    _check_lowprec(out_ref_lowprec, dtype)
    ref_error = (out_ref64 - out_ref_lowprec).abs().max()
    threshold = max(DEFAULT_ATOL[torch.float32], ref_error * fudge_factor)
    return {
        "threshold": float(threshold),
        "ref_error": float(ref_error),
        "floor": DEFAULT_ATOL[torch.float32],
        "fudge_factor": fudge_factor,
    }


def passes_pytorch_check_out_and_grad(
    actual: torch.Tensor,
    *,
    out_ref64: torch.Tensor,
    out_ref_lowprec: torch.Tensor,
    dtype: torch.dtype,
    fudge_factor: float = 5.0,
) -> bool:
    """``_check_equal(golden, reference, test, fudge_factor)`` as a bool: fails when
    ``max|golden - actual|`` is NaN while ``ref_error`` is not, or when it exceeds
    :func:`threshold_pytorch_check_out_and_grad` (strict ``>``; equality passes). A NaN in both
    errors passes (the source's comparisons with NaN are false). Shapes as in the threshold."""
    _check_lowprec(out_ref_lowprec, dtype)
    test_error = (out_ref64 - actual).abs().max()
    ref_error = (out_ref64 - out_ref_lowprec).abs().max()
    if torch.isnan(test_error).any() and not torch.isnan(ref_error).any():
        return False
    threshold = max(DEFAULT_ATOL[torch.float32], ref_error * fudge_factor)
    return not bool(test_error > threshold)


# ------------------------------------------------------------------------------------------------
# Rule 3: FlashAttention 2 tests: max-abs error at most mult x PyTorch's (+ an additive term)
# ------------------------------------------------------------------------------------------------

#: ``(mult, add)`` of ``(x - x_ref).abs().max() <= mult * (x_pt - x_ref).abs().max() + add`` in
#: Dao-AILab/flash-attention@0251105a tests/test_flash_attn.py, by test and tensor.
FLASH_ATTN_VARIANTS = {
    "output": (2.0, 0.0),  # test_flash_attn_output, line 1121 (also qkvpacked, line 704)
    "output_grads": (3.0, 0.0),  # test_flash_attn_output dq/dk/dv, lines 1130-1132
    "qkvpacked_grads": (2.0, 0.0),  # test_flash_attn_qkvpacked dqkv, line 713
    "causal": (2.0, 1e-5),  # test_flash_attn_causal out and grads, lines 1556-1560
    "splitkv_out": (2.0, 1e-5),  # test_flash_attn_splitkv, line 1850
    "splitkv_grads": (2.0, 2e-4),  # lines 1853-1855 (mult 8 with alibi)
    "kvcache_out": (3.0, 1e-5),  # test_flash_attn_kvcache, line 2140 (mult 5 with alibi)
}


def threshold_flash_attn(
    *,
    out_ref64: torch.Tensor,
    out_ref_lowprec: torch.Tensor,
    dtype: torch.dtype,
    mult: float = 2.0,
    add: float = 0.0,
) -> dict:
    """FlashAttention's threshold ``mult * (out_pt - out_ref).abs().max().item() + add``
    (Dao-AILab/flash-attention@0251105a, tests/test_flash_attn.py; ``(mult, add)`` per test in
    :data:`FLASH_ATTN_VARIANTS`, default the output check of ``test_flash_attn_output``).

    ``out_ref`` there is ``attention_ref(..., upcast=True)``: computed in float32 and cast back
    to ``dtype``; here ``out_ref64.to(dtype)``. ``out_pt`` = ``out_ref_lowprec`` (``dtype``, same
    shape). Differences are taken in ``dtype`` as in the source. When the reference error is 0
    (``out_pt`` equal to the rounded reference) the threshold is ``add``: with ``add == 0`` only a
    bit-identical ``actual`` passes. Returns ``{"threshold", "ref_error", "mult", "add"}``."""
    _check_lowprec(out_ref_lowprec, dtype)
    out_ref = out_ref64.to(dtype)
    ref_error = (out_ref_lowprec - out_ref).abs().max().item()
    return {"threshold": mult * ref_error + add, "ref_error": ref_error, "mult": mult, "add": add}


def passes_flash_attn(
    actual: torch.Tensor,
    *,
    out_ref64: torch.Tensor,
    out_ref_lowprec: torch.Tensor,
    dtype: torch.dtype,
    mult: float = 2.0,
    add: float = 0.0,
) -> bool:
    """``(out - out_ref).abs().max().item() <= mult * (out_pt - out_ref).abs().max().item() +
    add`` (non-strict; a NaN on either side fails). Arguments as in
    :func:`threshold_flash_attn`; ``actual`` in ``dtype``, same shape."""
    thr = threshold_flash_attn(
        out_ref64=out_ref64, out_ref_lowprec=out_ref_lowprec, dtype=dtype, mult=mult, add=add
    )
    err = (actual - out_ref64.to(dtype)).abs().max().item()
    return err <= thr["threshold"]


# ------------------------------------------------------------------------------------------------
# Rule 4: FlashAttention 3 (hopper) tests: rtol x PyTorch's error + the rounding noise of out_ref
# ------------------------------------------------------------------------------------------------


def threshold_flash_attn3_hopper(
    *,
    out_ref64: torch.Tensor,
    out_ref_lowprec: torch.Tensor,
    dtype: torch.dtype,
    rtol: float = 2.0,
    extra_atol: float = 0.0,
) -> dict:
    """hopper/test_flash_attn.py (Dao-AILab/flash-attention@0251105a, lines 255-256, 285,
    343-348): ``rtol * (out_pt - out_ref).abs().max().item() + fwd_atol`` with
    ``fwd_atol = 2 * (out_ref + 0.3 - 0.3 - out_ref).abs().max().item()`` ("numerical error if we
    just do any arithmetic on out_ref"), arithmetic in ``dtype``. ``rtol`` is 2 (3 with softcap);
    the gradient checks add ``extra_atol = 3e-4`` with softcap. Unlike :func:`threshold_flash_attn`
    this stays positive when the PyTorch reference error is 0, unless every element survives
    ``+ 0.3 - 0.3`` exactly. Arguments and shapes as in :func:`threshold_flash_attn`.
    Returns ``{"threshold", "ref_error", "fwd_atol", "rtol"}``."""
    _check_lowprec(out_ref_lowprec, dtype)
    out_ref = out_ref64.to(dtype)
    fwd_atol = 2 * (out_ref + 0.3 - 0.3 - out_ref).abs().max().item() + extra_atol
    ref_error = (out_ref_lowprec - out_ref).abs().max().item()
    return {
        "threshold": rtol * ref_error + fwd_atol,
        "ref_error": ref_error,
        "fwd_atol": fwd_atol,
        "rtol": rtol,
    }


def passes_flash_attn3_hopper(
    actual: torch.Tensor,
    *,
    out_ref64: torch.Tensor,
    out_ref_lowprec: torch.Tensor,
    dtype: torch.dtype,
    rtol: float = 2.0,
    extra_atol: float = 0.0,
) -> bool:
    """``(out - out_ref).abs().max().item() <= rtol * (out_pt - out_ref).abs().max().item() +
    fwd_atol`` (non-strict), thresholds from :func:`threshold_flash_attn3_hopper`."""
    thr = threshold_flash_attn3_hopper(
        out_ref64=out_ref64,
        out_ref_lowprec=out_ref_lowprec,
        dtype=dtype,
        rtol=rtol,
        extra_atol=extra_atol,
    )
    err = (actual - out_ref64.to(dtype)).abs().max().item()
    return err <= thr["threshold"]


# ------------------------------------------------------------------------------------------------
# Rule 5: flash-linear-attention assert_close: RMS error / RMS reference < ratio
# ------------------------------------------------------------------------------------------------

#: The ratio ``tests/ops/test_attn.py`` passes for the output and dq/dk/dv (the most common value
#: in fla's tests; others use 1e-3 to 0.02).
FLA_DEFAULT_RATIO = 0.005


def fla_get_abs_err(x: torch.Tensor, y: torch.Tensor) -> float:
    """``get_abs_err`` (fla/utils/_testing.py): ``max|x - y|`` in the tensors' dtype."""
    return (x.detach() - y.detach()).flatten().abs().max().item()


def fla_get_err_ratio(x: torch.Tensor, y: torch.Tensor) -> float:
    """``get_err_ratio`` (fla/utils/_testing.py): ``rms(x - y) / (rms(x) + 1e-8)`` with ``x`` the
    reference; squares and means are taken in the tensors' dtype (so in float16 an error element
    below about 2.4e-4 squares to zero)."""
    err = (x.detach() - y.detach()).flatten().square().mean().sqrt().item()
    base = (x.detach()).flatten().square().mean().sqrt().item()
    return err / (base + 1e-8)


def threshold_fla_assert_close(
    *,
    out_ref64: torch.Tensor,
    dtype: torch.dtype,
    out_ref_lowprec: torch.Tensor | None = None,
    ratio: float = FLA_DEFAULT_RATIO,
    err_atol: float = 1e-6,
) -> dict:
    """The thresholds of ``assert_close(prefix, ref, tri, ratio, warning=False, err_atol=1e-6)``
    (fla-org/flash-linear-attention@bc3b101d, fla/utils/_testing.py): the relative RMS ratio and
    the absolute early-pass ``err_atol``, plus the reference RMS the ratio divides by
    (``ref = out_ref64.to(dtype)``, as tests/ops/test_attn.py rounds its float32 reference to the
    kernel dtype). ``out_ref_lowprec`` is not used by this rule. Returns ``{"ratio",
    "err_atol", "ref_rms", "max_rms_error"}`` (``max_rms_error = ratio * (ref_rms + 1e-8)``)."""
    ref = out_ref64.to(dtype)
    ref_rms = ref.flatten().square().mean().sqrt().item()
    return {
        "ratio": ratio,
        "err_atol": err_atol,
        "ref_rms": ref_rms,
        "max_rms_error": ratio * (ref_rms + 1e-8),
    }


def decide_fla_assert_close(
    actual: torch.Tensor,
    *,
    out_ref64: torch.Tensor,
    dtype: torch.dtype,
    out_ref_lowprec: torch.Tensor | None = None,
    ratio: float = FLA_DEFAULT_RATIO,
    warning: bool = False,
    err_atol: float = 1e-6,
    ci_env: bool = False,
) -> dict:
    """``assert_close`` step by step, without raising or warning. ``ref = out_ref64.to(dtype)``,
    ``tri = actual`` (same shape). Order of the source:

    1. ``abs_err = max|ref - tri| <= err_atol`` -> pass (``reason "abs_err<=err_atol"``);
    2. a NaN in ``ref`` or ``tri`` -> fail;
    3. if ``warning`` (or ``ci_env``, i.e. ``FLA_CI_ENV=1``, and ``error_rate < 0.01`` or
       ``abs_err <= 0.3``): never fails; ``warned`` when ``error_rate > ratio``;
    4. otherwise pass iff ``error_rate < ratio`` (strict).

    Returns ``{"passed", "warned", "abs_err", "error_rate", "reason"}``."""
    ref = out_ref64.to(dtype)
    abs_err = fla_get_abs_err(ref, actual)
    error_rate = fla_get_err_ratio(ref, actual)
    out = {"passed": True, "warned": False, "abs_err": abs_err, "error_rate": error_rate}
    if abs_err <= err_atol:
        return {**out, "reason": "abs_err<=err_atol"}
    if torch.isnan(ref).any() or torch.isnan(actual).any():
        return {**out, "passed": False, "reason": "nan"}
    if warning or (ci_env and (error_rate < 0.01 or abs_err <= 0.3)):
        return {**out, "warned": error_rate > ratio, "reason": "warning-only"}
    passed = error_rate < ratio
    return {**out, "passed": passed, "reason": "ratio"}


def passes_fla_assert_close(actual: torch.Tensor, **kwargs: Any) -> bool:
    """Whether fla's ``assert_close`` would not raise (keywords of
    :func:`decide_fla_assert_close`; with ``warning=True`` it never raises, and a
    ``warnings.warn`` is issued here as in the source when the ratio is exceeded)."""
    d = decide_fla_assert_close(actual, **kwargs)
    if d["warned"]:
        warnings.warn(
            f"diff: {d['abs_err']:.6f} ratio: {d['error_rate']:.6f}", UserWarning, stacklevel=2
        )
    return d["passed"]


# ------------------------------------------------------------------------------------------------
# Rule 6: hipDNN SDPA forward: a-priori max-norm bound with Higham gamma factors
# ------------------------------------------------------------------------------------------------


def hipdnn_compute_gamma(k: int, epsilon: float) -> float:
    """``computeGamma`` (hipDNN DynamicTolerancesCommon.hpp): with ``nU = 2 k epsilon``,
    ``nU / (1 - nU)`` when ``nU < 0.01``, else ``6 * sqrt(2 k) * epsilon``."""
    nu = 2.0 * float(k) * epsilon
    if nu < 0.01:
        return nu / (1.0 - nu)
    return 6.0 * math.sqrt(2.0 * float(k)) * epsilon


def _hip_validate_gamma(gamma: float, max_gamma: float = 0.5) -> None:
    if gamma >= max_gamma:
        raise OverflowError(f"Error growth factor gamma >= {max_gamma}")


def _eps(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).eps)  # == std::numeric_limits<T>::epsilon()


def threshold_hipdnn_sdpa_fwd(
    *,
    q_range: tuple[float, float],
    k_range: tuple[float, float],
    v_range: tuple[float, float],
    head_dim: int,
    seq_kv: int,
    dtype: torch.dtype,
    input_dtype: torch.dtype | None = None,
    compute_dtype: torch.dtype = torch.float32,
    scale: float | None = None,
) -> dict:
    """``calculateSdpaFwdTolerance<OutputType=dtype, InputType=input_dtype,
    ComputeType=compute_dtype>`` (hipDNN test_sdk DynamicTolerancesSdpa.hpp, cited from the
    fork tfalders/rocm-libraries@f6b59e29). An a-priori absolute bound from value ranges and
    sizes only; it does not look at any reference output. With ``u = eps(compute_dtype)``,
    ``A = max|Q| max|K|``, ``s = |scale|`` (default ``1/sqrt(head_dim)``),
    ``g(k) =`` :func:`hipdnn_compute_gamma`:

    * ``score = g(D) D A s + D A s u``; ``softmax = g(Skv) + (Skv + 1) u``;
      ``pv = g(Skv) max|V|``;
    * ``tol = score max|V| + softmax max|V| + pv``
      ``+ 2 D A s u max|V| + max|V| u`` (only if ``eps(input_dtype) < u``)
      ``+ max|V| eps(dtype)`` (only if ``eps(dtype) > u``), returned rounded to float32.

    ``q_range`` etc.: ``(min, max)`` of the tensors (the hipDNN tests pass their init range);
    ``input_dtype`` defaults to ``dtype``. Raises ``ValueError`` for ``head_dim`` or ``seq_kv``
    below 1 and ``OverflowError`` when a gamma is >= 0.5 or the tolerance exceeds
    ``finfo(dtype).max``, as the source throws. Returns ``{"tolerance", "gamma_d",
    "gamma_skv", "score_error", "softmax_error", "pv_accum_error", "cast_error_qkt",
    "cast_error_pv", "output_cast_error", "epsilon"}``."""
    input_dtype = dtype if input_dtype is None else input_dtype
    if head_dim < 1:
        raise ValueError("headDim must be at least 1.")
    if seq_kv < 1:
        raise ValueError("seqKv must be at least 1.")
    max_q = max(abs(q_range[0]), abs(q_range[1]))
    max_k = max(abs(k_range[0]), abs(k_range[1]))
    max_v = max(abs(v_range[0]), abs(v_range[1]))
    abs_scale = abs(scale if scale is not None else 1.0 / math.sqrt(float(head_dim)))
    eps = _eps(compute_dtype)

    sum_abs_qk = float(head_dim) * (max_q * max_k)
    gamma_d = hipdnn_compute_gamma(head_dim, eps)
    _hip_validate_gamma(gamma_d)
    score_error = gamma_d * sum_abs_qk * abs_scale + sum_abs_qk * abs_scale * eps

    gamma_skv = hipdnn_compute_gamma(seq_kv, eps)
    _hip_validate_gamma(gamma_skv)
    softmax_error = gamma_skv + (float(seq_kv) + 1.0) * eps
    pv_accum_error = gamma_skv * max_v

    total = score_error * max_v + softmax_error * max_v + pv_accum_error

    def input_cast(signal: float, n: int) -> float:
        return float(n) * signal * eps if _eps(input_dtype) < eps else 0.0

    cast_qkt = input_cast(sum_abs_qk * abs_scale, 2)
    total += cast_qkt * max_v
    cast_pv = input_cast(max_v, 1)
    total += cast_pv
    out_cast = max_v * _eps(dtype) if _eps(dtype) > eps else 0.0
    total += out_cast
    if total > float(torch.finfo(dtype).max):
        raise OverflowError(
            "Calculated tolerance exceeds the maximum representable value of the output type."
        )
    return {
        "tolerance": float(torch.tensor(total, dtype=torch.float32)),
        "gamma_d": gamma_d,
        "gamma_skv": gamma_skv,
        "score_error": score_error,
        "softmax_error": softmax_error,
        "pv_accum_error": pv_accum_error,
        "cast_error_qkt": cast_qkt,
        "cast_error_pv": cast_pv,
        "output_cast_error": out_cast,
        "epsilon": eps,
    }


def hipdnn_ranges_from_tensors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> dict:
    """Keywords for :func:`threshold_hipdnn_sdpa_fwd` from actual tensors: ``q`` of shape
    ``(..., Sq, D)``, ``k`` ``(..., Skv, D)``, ``v`` ``(..., Skv, Dv)``; the ranges are the
    tensors' min and max (tighter than the init ranges the hipDNN tests pass)."""

    def rng(t: torch.Tensor) -> tuple[float, float]:
        return float(t.min()), float(t.max())

    return {
        "q_range": rng(q),
        "k_range": rng(k),
        "v_range": rng(v),
        "head_dim": int(q.shape[-1]),
        "seq_kv": int(k.shape[-2]),
    }


def passes_hipdnn_sdpa_fwd(
    actual: torch.Tensor, *, out_ref64: torch.Tensor, dtype: torch.dtype, tolerance: float
) -> bool:
    """``CpuFpReferenceValidation<T>::allClose`` with ``atol = tolerance, rtol = 0`` (as
    TestDynamicTolerancesSdpa.cpp's DetectsFailure uses it): the reference is held in the output
    type (``out_ref64.to(dtype)``), both sides are cast to float32, and every element must have
    ``|actual - ref| <= tolerance``; a NaN or Inf on either side fails. Equivalent to the global
    max-norm check ``max|actual - ref| <= tolerance`` for finite data."""
    ref = out_ref64.to(dtype).float()
    act = actual.to(dtype).float()
    if ref.shape != act.shape:
        return False
    if not (torch.isfinite(ref).all() and torch.isfinite(act).all()):
        return False
    thr = torch.tensor(tolerance, dtype=torch.float32)
    return bool(((act - ref).abs() <= thr).all())


# ------------------------------------------------------------------------------------------------
# The table
# ------------------------------------------------------------------------------------------------


def _src(repo: str, path: str, commit: str, where: str, **extra: str) -> dict:
    return {"repo": repo, "path": path, "commit": commit, "lines": where, **extra}


RULES: dict[str, dict[str, Any]] = {
    "pytorch_get_tolerances": {
        "function": threshold_pytorch_get_tolerances,
        "passes": passes_pytorch_get_tolerances,
        "source": _src(
            _PT_REPO,
            "test/test_transformers.py",
            _PT_COMMIT,
            "default_atol/default_rtol, get_rtol, get_atol, get_tolerances; "
            "test_flash_attention_vs_math_ref_grads, "
            "test_mem_efficient_attention_vs_math_ref_grads",
        ),
        "description": "atol = fudge*max(max|ref_hp - ref_lp|, default_atol[dtype]), rtol = "
        "fudge*max(max|(ref_hp - ref_lp)/ref_hp|, default_rtol[dtype]); pass iff isclose("
        "out, ref_hp.to(dtype), rtol, atol) everywhere. Flash fudges: out 1, dq 4, dk 2, dv 2.",
    },
    "pytorch_check_out_and_grad": {
        "function": threshold_pytorch_check_out_and_grad,
        "passes": passes_pytorch_check_out_and_grad,
        "source": _src(
            _PT_FORK_REPO,
            "test/test_transformers.py",
            _PT_FORK_COMMIT,
            "_check_equal, check_out_and_grad; test_flash_attention_vs_math_ref_grads, "
            "test_mem_efficient_attention_vs_math_ref_grads",
            upstream="fork of pytorch/pytorch; the index holds no pytorch/pytorch commit "
            "with check_out_and_grad (its stored versions, e.g. 00030eb8, use get_tolerances)",
        ),
        "description": "max|golden - out| <= max(1e-5, fudge*max|golden - ref_lp|); fudges "
        "flash: out 4, dq 180, dk 16, dv 4; mem-efficient: out 3, dq 150, dk 25, dv 8.5; "
        "default 5.",
    },
    "flash_attn": {
        "function": threshold_flash_attn,
        "passes": passes_flash_attn,
        "source": _src(
            _FA_REPO,
            "tests/test_flash_attn.py",
            _FA_COMMIT,
            "1121 (out, 2x), 1130-1132 (grads, 3x), 1556-1560 (causal, 2x + 1e-5), "
            "1850-1855 (splitkv), 2140 (kvcache); attention_ref 217-304",
        ),
        "description": "max|out - out_ref| <= mult*max|out_pt - out_ref| + add, out_ref the "
        "float32-upcast reference rounded to dtype, out_pt the same-dtype PyTorch reference; "
        "threshold 0 when out_pt == out_ref and add == 0.",
    },
    "flash_attn3_hopper": {
        "function": threshold_flash_attn3_hopper,
        "passes": passes_flash_attn3_hopper,
        "source": _src(
            _FA_REPO,
            "hopper/test_flash_attn.py",
            _FA_COMMIT,
            "255-256 (fwd_atol, rtol), 285 (output), 343-348 (grads)",
        ),
        "description": "max|out - out_ref| <= rtol*max|out_pt - out_ref| + "
        "2*max|out_ref + 0.3 - 0.3 - out_ref| (rtol 2, 3 with softcap).",
    },
    "fla_assert_close": {
        "function": threshold_fla_assert_close,
        "passes": passes_fla_assert_close,
        "source": _src(
            _FLA_REPO,
            "fla/utils/_testing.py",
            _FLA_COMMIT,
            "18-41 (get_abs_err, get_err_ratio, assert_close)",
            also="tests/ops/test_attn.py lines 48-49, 61-64 (ratio 0.005, ref rounded to "
            "float16); fla/utils/_config.py line 10 (FLA_CI_ENV)",
        ),
        "description": "pass if max|ref - tri| <= 1e-6, else rms(ref - tri)/(rms(ref) + 1e-8) "
        "< ratio (0.005 in the attention tests); warning-only (never fails) with warning=True.",
    },
    "hipdnn_sdpa_fwd": {
        "function": threshold_hipdnn_sdpa_fwd,
        "passes": passes_hipdnn_sdpa_fwd,
        "source": _src(
            _HIP_REPO,
            f"{_HIP_DIR}/include/hipdnn_test_sdk/utilities/DynamicTolerancesSdpa.hpp",
            _HIP_COMMIT,
            "calculateSdpaFwdTolerance",
            also=f"{_HIP_DIR}/include/hipdnn_test_sdk/utilities/DynamicTolerancesCommon.hpp "
            "(computeGamma, validateGamma, computeInputCastingError, "
            "computeOutputCastingError, validateToleranceRange); "
            f"{_HIP_DIR}/include/hipdnn_test_sdk/utilities/CpuFpReferenceValidation.hpp "
            f"(allClose); {_HIP_DIR}/tests/utilities/TestDynamicTolerancesSdpa.cpp",
            upstream="fork of ROCm/rocm-libraries (projects/hipdnn); the index holds no "
            "upstream ROCm/rocm-libraries commit with these files",
        ),
        "description": "a-priori global max-norm bound: tol = (g(D) D A s + D A s u) max|V| + "
        "(g(Skv) + (Skv+1) u) max|V| + g(Skv) max|V| (+ cast terms); pass iff "
        "|out - ref| <= tol everywhere (atol=tol, rtol=0).",
    },
}

#: The threshold functions by rule name (the same objects as ``RULES[name]["function"]``).
THRESHOLDS: dict[str, Callable[..., dict]] = {k: v["function"] for k, v in RULES.items()}
