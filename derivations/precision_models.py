"""D10, continued: precision models of real low-precision attention kernels.

D10's two-level model (``derivations.rounding``: fp32 arithmetic, the output rounded once to the
bf16/fp16 input type) is what a kernel that keeps every intermediate in fp32 satisfies. Real
kernels store intermediates in the input type. Each model below names where, and the bound it
implies is composed from the D10 lemmas (Higham's standard model, eq. 2.4; Lemma 3.1; eq. 4.4)
plus the lemmas here:

* ``two-level``: the D10 baseline.
* ``fused``: the weights P = exp(s - max) are rounded to the input type before P.V, with fp32
  accumulation; the row sum is accumulated from the fp32 weights (FlashAttention-2, T. Dao,
  arXiv 2307.08691, Algorithm 1: P~ cast to the input type for the second matmul; PyTorch's CPU
  kernel, aten/src/ATen/native/cpu/FlashAttentionKernel.cpp: ``conditional_data_ptr(qk_data,
  qk_reduced_data)``). The numerator's weights carry one more rounding (1 + u_in) than the
  denominator's: :func:`fused_numerator_weight_rel`.
* ``online:B``: ``fused`` over key blocks of B keys with the running-maximum rescaling of the
  online softmax (M. Milakov, N. Gimelshein, arXiv 1805.02867; FlashAttention-2 Algorithm 1):
  every key's term is rescaled once per later block, :func:`online_rescale_rel`. ``fused`` is
  ``online`` with one block.
* ``eager``: scores rounded to the input type (the matmul's output and the scale: two roundings,
  :func:`eager_score_abs_error`), softmax in fp32 with its output rounded, P.V in the input type
  with fp32 accumulation inside the matmul (e.g. Hugging Face ``eager_attention_forward``):
  the weights are normalized before P.V, :func:`eager_weight_rel`.
* ``rounded-weights``: ``eager`` with the scores and the softmax in fp32 (code that upcasts q
  and k): the weights p_s = w_s / D rounded to the input type before P.V, :func:`eager_weight_rel`
  without the scores' input-type roundings.
* ``input-accumulation:SCHEME``: as ``fused``, but P.V and the row sum accumulate in the input
  type with products rounded. A recursive sum of n terms has gamma_{n-1} (Higham eq. 4.4) only
  while (n - 1) u < 1; bf16 (u = 2^-8) loses it at 257 keys. Pairwise summation has
  gamma_{ceil(log2 n)} (Higham eq. 4.6) and blocked summation with blocks of b terms
  gamma_{b - 1 + ceil(n/b) - 1} (P. Blanchard, N. J. Higham, T. Mary, SIAM J. Sci. Comput. 42(3),
  2020, eq. 2.4): :func:`summation_index`, :func:`accumulation_gamma`, which says "not
  applicable" with the reason where no gamma exists. Never inferred by a probe, only declared.
* ``envelope``: the elementwise largest of the ``fused``, ``eager`` and ``online:16`` bounds;
  each bounds its own arithmetic, so their maximum bounds a kernel that computes by any of them
  (the model of a bf16/fp16 kernel that declares none); ``envelope:fp32-scores`` the largest of
  ``fused``, ``rounded-weights`` and ``online:16``, for a kernel found to keep its scores at
  float32 resolution (``verify.probes.precision_model.score_resolution``).

Backward (dq, dk, dv) of softmax attention, in FlashAttention-2's order (Algorithm 2): P
recomputed from the log-sum-exp L (:func:`lse_abs_error`, :func:`recomputed_weight_rel`),
dv = P^T dO, dP = dO V^T, Delta = rowsum(dO o o), dS = P (dP - Delta) rounded to the input
type, dq = c dS K, dk = c dS^T Q; :func:`score_gradient_bound` composes the error of dS from the
errors of its factors. The formulas are plain arithmetic, so they apply elementwise to numpy
arrays (``verify.exact.gradient_bounds`` evaluates them).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from derivations._validate import check_choice, check_int, check_real
from derivations.rounding import (
    CitedConstant,
    _result,
    exp_relative_bound,
    gamma,
    ratio_relative_bound,
    ulps_to_relative,
)

MODELS = (
    "two-level",
    "fused",
    "online",
    "rounded-weights",
    "eager",
    "input-accumulation",
    "envelope",
)
#: the models a probe may infer (float32 accumulation); input-type accumulation is only declared
INFERABLE = ("two-level", "fused", "online", "rounded-weights", "eager")
SCHEMES = ("recursive", "pairwise", "blocked")
#: the envelope without the eager member: for kernels whose scores keep float32 resolution
FP32_SCORES = "fp32-scores"
#: input-type roundings of an eager score: the matmul's output, then the scale's product
EAGER_SCORE_ROUNDINGS = 2

MODEL_SOURCES = {
    "two-level": "D10 (fp32 arithmetic, the output rounded once to the input type)",
    "fused": "T. Dao, FlashAttention-2, arXiv 2307.08691, Algorithm 1 (P cast to the input "
    "type before P.V, fp32 row sum); PyTorch aten/src/ATen/native/cpu/FlashAttentionKernel.cpp",
    "online": "M. Milakov, N. Gimelshein, Online normalizer calculation for softmax, arXiv "
    "1805.02867; FlashAttention-2 Algorithm 1 (per key block: running maximum, rescaling)",
    "eager": "scores, softmax and P.V as separate input-type tensor operations (e.g. Hugging "
    "Face transformers' eager_attention_forward)",
    "rounded-weights": "scores and softmax in float32, the normalized weights rounded to the "
    "input type before P.V with float32 accumulation (code that upcasts q and k, e.g. "
    "softmax(q.float() @ k.float().T).to(dtype) @ v)",
    "input-accumulation": "Higham eq. 4.4 (recursive), eq. 4.6 (pairwise); Blanchard, Higham, "
    "Mary, SIAM J. Sci. Comput. 42(3) 2020 (blocked)",
    "envelope": "the elementwise largest of the fused, eager and online:16 bounds (each a "
    "bound of its own arithmetic, so their maximum bounds any of them)",
}

#: maximum error of log in ulps of the exact result (the log-sum-exp of the backward pass)
LOG_ULPS = CitedConstant(
    1.5,
    "CUDA C++ Programming Guide, 'Mathematical Functions': logf maximum 1 ulp (from the "
    "correctly rounded result: 1 + 0.5 from the exact one); SLEEF logf_u10: 1.0 ulp",
    "the larger of the two conventions, from the exact result",
)


class ModelNotApplicable(ValueError):
    """The model gives no bound for these sizes (e.g. a recursive sum with (n - 1) u >= 1)."""


class PrecisionModel(NamedTuple):
    """A parsed precision model: ``name`` in :data:`MODELS`, ``block`` (online: keys per block;
    blocked accumulation: terms per block), ``scheme`` (input-accumulation: :data:`SCHEMES`)."""

    name: str
    block: int | None = None
    scheme: str | None = None

    @property
    def spec(self) -> str:
        """The string :func:`parse_precision` reads back."""
        if self.name == "online":
            return f"online:{self.block}"
        if self.name == "input-accumulation":
            tail = f"blocked:{self.block}" if self.scheme == "blocked" else str(self.scheme)
            return f"input-accumulation:{tail}"
        if self.name == "envelope" and self.scheme:
            return f"envelope:{self.scheme}"
        return self.name

    @property
    def key_block(self) -> int | None:
        """Keys per online-softmax block (None: the whole row is one block)."""
        return self.block if self.name == "online" else None


def parse_precision(spec: str) -> PrecisionModel:
    """``two-level`` | ``fused`` | ``eager`` | ``rounded-weights`` | ``envelope`` | ``online:B`` |
    ``input-accumulation:recursive`` | ``input-accumulation:pairwise`` |
    ``input-accumulation:blocked:B`` -> PrecisionModel.

    Raises:
        ValueError: naming ``precision`` and the accepted forms.
    """
    expected = (
        "expected two-level, fused, eager, rounded-weights, envelope, envelope:fp32-scores, "
        "online:B, "
        "input-accumulation:recursive, "
        "input-accumulation:pairwise or input-accumulation:blocked:B (B a positive integer)"
    )
    if not isinstance(spec, str):
        raise ValueError(f"precision: {expected}, got {spec!r}")
    parts = spec.split(":")
    name = parts[0]

    def block(text: str) -> int:
        if not text.isdigit() or int(text) < 1:
            raise ValueError(f"precision: {expected}, got {spec!r}")
        return int(text)

    if name in ("two-level", "fused", "eager", "rounded-weights", "envelope") and len(parts) == 1:
        return PrecisionModel(name)
    if name == "envelope" and parts[1:] == [FP32_SCORES]:
        return PrecisionModel(name, scheme=FP32_SCORES)
    if name == "online" and len(parts) == 2:
        return PrecisionModel(name, block=block(parts[1]))
    if name == "input-accumulation" and len(parts) >= 2:
        if parts[1] in ("recursive", "pairwise") and len(parts) == 2:
            return PrecisionModel(name, scheme=parts[1])
        if parts[1] == "blocked" and len(parts) == 3:
            return PrecisionModel(name, block=block(parts[2]), scheme="blocked")
    raise ValueError(f"precision: {expected}, got {spec!r}")


# -- summation in the input type ----------------------------------------------------------------
def summation_index(n: int, scheme: str, block: int | None = None) -> int:
    """k with |fl(sum x_i) - sum x_i| <= gamma_k sum |x_i| for n terms (n >= 1).

    recursive: n - 1 (Higham eq. 4.4); pairwise: ceil(log2 n) (Higham eq. 4.6); blocked with
    blocks of b terms, each summed recursively, then the ceil(n/b) block sums recursively:
    (b' - 1) + (ceil(n/b) - 1), b' = min(b, n) (Blanchard, Higham, Mary 2020, eq. 2.4).

    Raises:
        TypeError, ValueError: bad arguments (blocked needs ``block``).
    """
    n = check_int("n", n, 1, array_ok=True)
    check_choice("scheme", scheme, SCHEMES)
    if scheme == "recursive":
        return n - 1
    if scheme == "pairwise":
        if isinstance(n, int):
            return math.ceil(math.log2(n)) if n > 1 else 0
        # ceil(log2 n) exactly for integers: the bit length of n - 1
        return np.array([int(k - 1).bit_length() for k in n.ravel()], dtype=np.int64).reshape(
            n.shape
        )
    if block is None:
        raise ValueError("block: blocked summation needs the block size, got None")
    b = check_int("block", block, 1)
    if isinstance(n, int):
        return (min(b, n) - 1) + (math.ceil(n / b) - 1)
    return (np.minimum(b, n) - 1) + (-(-n // b) - 1)


def accumulation_gamma(
    n: int, u: float, scheme: str, block: int | None = None, products_rounded: bool = True
) -> float:
    """gamma_k of a sum of n products accumulated at unit roundoff u (k = summation index,
    + 1 when each product is rounded first: Higham eq. 3.5 for the recursive case).

    Raises:
        ModelNotApplicable: k u >= 1, where Lemma 3.1 gives no bound (a recursive bf16 sum of
            257 or more terms); the message names n, the scheme and u.
        TypeError, ValueError: bad arguments.
    """
    k = summation_index(n, scheme, block) + (1 if products_rounded else 0)
    uu = check_real("u", u, nonneg=True)
    if np.any(k * uu >= 1.0):
        where = f"blocks of {block}" if scheme == "blocked" else scheme
        worst = int(np.max(k))
        raise ModelNotApplicable(
            f"a {where} sum of {int(np.max(n))} terms at u = 2^{math.log2(uu):.0f} has index "
            f"k = {worst} with k u >= 1: gamma_k does not exist (Higham Lemma 3.1), no bound"
        )
    return gamma(k, uu)


# -- forward models (softmax: shifted exp weights, sum denominator) -----------------------------
def eager_score_abs_error(
    d: int,
    abs_dot,
    u_acc: float,
    u_in: float,
    scale_roundings: int = 5,
    input_roundings: int = EAGER_SCORE_ROUNDINGS,
    *,
    score_abs=None,
):
    """|x_hat - x| for an eager score: the fp32 dot product (gamma_d), the scale's roundings
    at u_acc (r_c), and ``input_roundings`` roundings to the input type (derived; floats or
    numpy arrays):

        x_hat = (x + theta)(1 + delta_in)^r with |theta| <= e_acc = gamma_{d + r_c}(u_acc) abs_dot
        (Lemma 3.3: (1 + gamma_d)(1 + u)^{r_c} <= 1 + gamma_{d + r_c}), abs_dot = c sum_i
        |q_i k_i|, so |x_hat - x| <= e_acc (1 + u_in)^r + ((1 + u_in)^r - 1) |x|.

    ``score_abs`` is |x| (<= abs_dot); None takes |x| <= abs_dot, the bound
    [(1 + gamma_{d + r_c})(1 + u_in)^r - 1] abs_dot.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    g = gamma(check_int("d", d, 1) + check_int("scale_roundings", scale_roundings, 0), u_acc)
    r = check_int("input_roundings", input_roundings, 0)
    a = check_real("abs_dot", abs_dot, nonneg=True, array_ok=True)
    grow = (1.0 + check_real("u_in", u_in, nonneg=True)) ** r
    if score_abs is None:
        return _result(((1.0 + g) * grow - 1.0) * a)
    x = check_real("score_abs", score_abs, nonneg=True, array_ok=True)
    return _result(g * a * grow + (grow - 1.0) * x)


def fused_numerator_weight_rel(weight_rel: float, u_in: float) -> float:
    """The fused model's numerator weight: fl_in(w_hat) = w (1 + e)(1 + delta), |delta| <= u_in,
    so the relative error is (1 + e)(1 + u_in) - 1; the denominator keeps e (derived).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    e = check_real("weight_rel", weight_rel, nonneg=True, array_ok=True)
    return _result((1.0 + e) * (1.0 + check_real("u_in", u_in, nonneg=True)) - 1.0)


def online_rescale_rel(
    n_blocks: int, score_range, u: float, exp_ulps: float, subtraction_roundings: int = 1
):
    """Extra relative error of one key's term from the online rescaling (derived).

    A term of block i is multiplied by alpha_j = fl(exp(fl(m_{j-1} - m_j))) and rounded (one
    product) for every later block j <= n_blocks: at most n_blocks - 1 factors. The running
    maximum is non-decreasing, so the subtractions' errors sum to at most
    u sum_j |m_{j-1} - m_j| = u (m_last - m_i) <= u * score_range, and the exact factors
    telescope to e^{m_i - m_last} (the shift that cancels in N/D, D6). Hence

        (1 + rel) <= e^{u R} (1 + r_exp)^{n_b - 1} (1 + u)^{n_b - 1},  r_exp = 2 ulps u.

    With ``subtraction_roundings`` k the factor's argument (m_{j-1} - m_j) carries k roundings
    (FlashAttention-2: exp2f((m_prev - m_cur) * scale_log2), a subtraction and a product: k = 2)
    and e^{u R} becomes e^{gamma_k R} (D17). ``score_range`` may be a numpy array.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    nb = check_int("n_blocks", n_blocks, 1)
    r = check_real("score_range", score_range, nonneg=True, array_ok=True)
    uu = check_real("u", u, nonneg=True)
    g = gamma(check_int("subtraction_roundings", subtraction_roundings, 1), uu)
    r_exp = ulps_to_relative(exp_ulps, uu)
    with np.errstate(over="ignore"):
        return _result(np.exp(g * r) * ((1.0 + r_exp) * (1.0 + uu)) ** (nb - 1) - 1.0)


def eager_weight_rel(weight_rel: float, den_rel: float, div_rel: float, u_in: float) -> float:
    """Relative error of an eager softmax weight p_s = w_s / D against the exact one: the fp32
    ratio (``ratio_relative_bound``, a positive kernel: |D_hat - D| <= den_rel D), then its
    rounding to the input type: (1 + ratio)(1 + u_in) - 1 (derived).

    Raises:
        TypeError, ValueError: bad arguments (den_rel >= 1).
    """
    ratio = ratio_relative_bound(weight_rel, den_rel, div_rel)
    return _result((1.0 + ratio) * (1.0 + check_real("u_in", u_in, nonneg=True)) - 1.0)


# -- backward -----------------------------------------------------------------------------------
def lse_abs_error(den_rel: float, n_keys: int, shift_abs: float, u: float) -> float:
    """|L_hat - L| for L = m + log(l), l = sum_s exp(x_s - m) in [1, n] (derived).

    l_hat = l (1 + theta), |theta| <= den_rel: |log l_hat - log l| <= -log(1 - den_rel); the
    log adds 2 ``LOG_ULPS`` u |log l_hat| <= r_log log(n (1 + den_rel)); the sum m + log(l) one
    rounding u (|m| + log(n (1 + den_rel))). ``shift_abs`` bounds |m|.

    Raises:
        TypeError, ValueError: bad arguments (den_rel >= 1).
    """
    dr = check_real("den_rel", den_rel, nonneg=True)
    if dr >= 1.0:
        raise ValueError(f"den_rel: expected < 1, got {den_rel!r}")
    n = check_int("n_keys", n_keys, 1)
    uu = check_real("u", u, nonneg=True)
    log_l = math.log(n * (1.0 + dr))
    r_log = ulps_to_relative(LOG_ULPS.value, uu)
    return -math.log1p(-dr) + r_log * log_l + uu * (check_real("shift_abs", shift_abs) + log_l)


def recomputed_weight_rel(argument_abs_error: float, u: float, exp_ulps: float, u_in: float):
    """Relative error of P_hat = fl_in(exp(x_hat - L_hat)) recomputed in the backward pass:
    exp's argument carries ``argument_abs_error`` (the scores', the exact log-sum-exp's
    1-Lipschitz response to them, ``lse_abs_error`` and the subtraction), then
    ``exp_relative_bound`` and the rounding to the input type (derived).

    Raises:
        TypeError, ValueError: bad arguments.
    """
    e = exp_relative_bound(argument_abs_error, u, exp_ulps)
    return (1.0 + e) * (1.0 + check_real("u_in", u_in, nonneg=True)) - 1.0


def score_gradient_bound(p, p_rel, p_abs, resid, resid_err, rho):
    """|dS_hat - dS| for dS = P (dP - Delta), elementwise (derived; works on numpy arrays).

    With |P_hat - P| <= p_rel P + p_abs, |(dP_hat - Delta_hat) - (dP - Delta)| <= resid_err,
    |dP - Delta| = resid, and the product, subtraction and storage roundings
    (1 + rho) = (1 + u)^2 (1 + u_in):

        |dS_hat - dS| <= [(p_rel P + p_abs) resid + (P (1 + p_rel) + p_abs) resid_err](1 + rho)
                         + rho P resid,

    from P_hat R_hat - P R = (P_hat - P) R + P_hat (R_hat - R) and the rounding of P_hat R_hat.
    """
    pert = (p_rel * p + p_abs) * resid + (p * (1.0 + p_rel) + p_abs) * resid_err
    return pert * (1.0 + rho) + rho * p * resid


# -- perturbed weights: the centred bound ---------------------------------------------------------
def perturbed_weights_deviation(w, rel, dev):
    """Bound on |sum_s w_hat_s v_s / sum_s w_hat_s - o| for weights w_hat_s = w_s (1 + theta_s),
    |theta_s| <= r_s, o = sum_s w_s v_s / sum_s w_s (derived; numpy arrays, keys on the last
    axis; ``dev`` >= |v_s - o| per key, broadcast against ``w``):

        sum_s w_s r_s |v_s - o| / sum_s w_s max(0, 1 - r_s).

    Since sum_s w_s (v_s - o) = 0, the perturbed combination minus o is
    sum_s w_s theta_s (v_s - o) / sum_s w_hat_s: the values enter centred on the output and each
    key with its own r_s, where D10's linear form charges every key the row's largest weight
    error twice (numerator and sum) on |v_s|. inf where no key keeps a positive lower weight.
    No validation: the caller's arrays are non-negative.
    """
    import numpy as np

    num = np.sum(w * rel * dev, axis=-1)
    den = np.sum(w * np.maximum(0.0, 1.0 - rel), axis=-1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.inf)


# -- elementwise forms (numpy arrays) of the D10 output lemmas ----------------------------------
def output_bound_elementwise(num_rel, den_rel, abs_numerator, abs_denominator, denominator,
                             output_abs, div_rel):  # fmt: skip
    """``derivations.rounding.kernel_attention_output_bound`` applied elementwise to arrays
    (same formula: (num_rel A + |o| den_rel B)/(|D| - den_rel B) (1 + div_rel) + div_rel |o|;
    inf where |D| <= den_rel B). No validation: the caller's arrays are non-negative."""
    import numpy as np

    margin = np.abs(denominator) - den_rel * abs_denominator
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        err = (num_rel * abs_numerator + output_abs * den_rel * abs_denominator) / margin
        out = err * (1.0 + div_rel) + div_rel * output_abs
    return np.where(margin > 0, out, np.inf)


def low_precision_elementwise(accum_bound, output_abs, out_dtype: str):
    """``derivations.rounding.low_precision_output_bound`` applied elementwise to arrays:
    accum (1 + u_low) + u_low |o| + eta_low."""
    from derivations.rounding import underflow_abs_error, unit_roundoff

    ul = unit_roundoff(out_dtype)
    return accum_bound * (1.0 + ul) + ul * output_abs + underflow_abs_error(out_dtype)


# -- the bias statistic ------------------------------------------------------------------------
def hoeffding_half_width(n: int, alpha: float, n_tests: int = 1) -> float:
    """t with P(|mean_n Z - E mean_n Z| >= t) <= alpha/n_tests for n independent Z_t in [-1, 1]
    (W. Hoeffding, J. Amer. Statist. Assoc. 58, 1963, Theorem 2: 2 exp(-2 n^2 t^2 / sum (b -
    a)^2) with b - a = 2): t = sqrt(2 ln(2 n_tests / alpha) / n). No variance assumption;
    Bonferroni over ``n_tests`` simultaneous checks.

    Raises:
        TypeError, ValueError: bad arguments (alpha outside (0, 1)).
    """
    m = check_int("n", n, 1)
    a = check_real("alpha", alpha, nonneg=True)
    if not 0.0 < a < 1.0:
        raise ValueError(f"alpha: expected a number in (0, 1), got {alpha!r}")
    k = check_int("n_tests", n_tests, 1)
    return math.sqrt(2.0 * math.log(2.0 * k / a) / m)


EXPORTS = (
    "MODELS",
    "INFERABLE",
    "SCHEMES",
    "MODEL_SOURCES",
    "LOG_ULPS",
    "ModelNotApplicable",
    "PrecisionModel",
    "parse_precision",
    "summation_index",
    "accumulation_gamma",
    "eager_score_abs_error",
    "fused_numerator_weight_rel",
    "online_rescale_rel",
    "eager_weight_rel",
    "lse_abs_error",
    "recomputed_weight_rel",
    "score_gradient_bound",
    "hoeffding_half_width",
    "output_bound_elementwise",
    "low_precision_elementwise",
    "perturbed_weights_deviation",
)
