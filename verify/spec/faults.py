"""The fault classes the checker must catch: kinds of defect that have shipped in public
attention implementations. Properties cite them by number (``Property.faults``), the faulty
variants in ``tests/faulty_variants.py`` reproduce each one beside a correct twin, and the report
page ``reports/faults.md`` lists, per class, the properties that catch it and those variants.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FaultClass:
    """One kind of defect: ``title``, what goes wrong, the smallest known ``trigger`` and what a
    correct implementation does instead (``expected``)."""

    id: int
    title: str
    defect: str
    trigger: str
    expected: str


FAULTS: dict[int, FaultClass] = {
    f.id: f
    for f in (
        FaultClass(
            1,
            "chunked form reads the wrong state",
            "the cross-chunk term uses the current chunk's state, or misses a decay or "
            "normalization, instead of the state before the chunk",
            "T = 12, chunk 3, float32: outputs agree on the first chunk and diverge after",
            "chunked == recurrent == parallel for every chunk size, including 1 and sizes "
            "that do not divide T",
        ),
        FaultClass(
            2,
            "padding in the last chunk updates the state",
            "zero-padded positions still add phi(0) v to the state (phi(0) != 0 for Taylor "
            "features, whose constant term is 1)",
            "Taylor-2, T = 5, chunk 64: prefill of 4 tokens and one step vs the full forward",
            "outputs and state equal within the error model",
        ),
        FaultClass(
            3,
            "split and resume forgets the denominator",
            "only the numerator state is carried across segments; the running key sum restarts",
            "any T >= 2 split at s = 1",
            "concat(f(x[:s]), f(x[s:], state)) == f(x) for every s, and both states equal",
        ),
        FaultClass(
            4,
            "normalizer summed over the wrong axis",
            "the running key sum is taken over heads or batch instead of time",
            "H = 1, T = 2 (summing over a size-1 axis is silent)",
            "with features identically one (m of them), the denominator at position t is m t",
        ),
        FaultClass(
            5,
            "gradient path cut",
            "a helper computing the running key sum is outside autograd: dk is wrong while "
            "the forward pass, dq and dv are right",
            "B = 2, T = 64, H = 2, d = 8, positive q and k",
            "gradients equal autograd through the plain reference (gradcheck in float64)",
        ),
        FaultClass(
            6,
            "normalizer multiplied instead of divided, or the query left out of it",
            "the denominator is applied the wrong way or does not depend on the query",
            "T = 2, d = 1, positive features",
            "with positive features every output row is a convex combination of the visible "
            "values; v = 1 gives 1",
        ),
        FaultClass(
            7,
            "causal alignment when query and key lengths differ",
            "libraries disagree on top-left (SDPA) and bottom-right (FlashAttention >= 2.1) "
            "alignment of the causal mask when T != S",
            "T = 1, S = 2: top-left sees key 0 only, bottom-right sees both",
            "a variant declares its alignment and is held to it; the last row of a causal pass "
            "equals one decode step over the same keys",
        ),
        FaultClass(
            8,
            "fully masked rows",
            "a row that sees no key returns NaN and poisons the gradients of the whole batch; "
            "large finite values (1e10) at masked positions leak into the output",
            "one query row with every key masked; masked keys holding 1e10",
            "zeros for such rows, finite gradients everywhere, masked inputs without influence",
        ),
        FaultClass(
            9,
            "causal flag ignored on some code path",
            "one path (a form, a dtype, a length) drops the causal mask",
            "T = 2 with causal requested: output 0 changes when token 1 changes",
            "on every code path, perturbing tokens after t leaves output t unchanged",
        ),
        FaultClass(
            10,
            "second-order Taylor map built with an element-wise square",
            "phi(x) = [1, x, x^2/sqrt(2)] element-wise gives kappa_2 only for d = 1",
            "d = 2, q = k = (1, 1): the map gives 4 where 1 + s + s^2/2 gives 5 (scale 1)",
            "phi(q).phi(k) == kappa_N(q.k) within the float64 error model, both bases",
        ),
        FaultClass(
            11,
            "low-precision normalizer overflow or underflow",
            "in float16 the sum of positive features over a few thousand tokens exceeds 65504 "
            "(or underflows for exponential features)",
            "float16, T in the thousands, positive features",
            "float32 accumulation tracks the float64 result within the error model; "
            "denominators finite and positive",
        ),
        FaultClass(
            12,
            "backward pass disagrees with the forward",
            "with a single key the output is that key's value, yet dq is NaN or far from 0",
            "one key, any q",
            "dq = 0 within the gradient error model; gradients masked like the forward pass",
        ),
        FaultClass(
            13,
            "biased low-precision rounding",
            "the attention weights P are stored in bf16/fp16 by truncation (round toward zero) "
            "or another one-sided rounding, so every output shrinks by a fraction of an ulp: "
            "within a max-error bound, yet a systematic drift in training (a failure mode "
            "reported for low-precision flash attention: H. Qiu, Q. Yao, arXiv 2510.04212)",
            "bfloat16, values with a non-zero mean (v = 1): each output is 1 - 2^-8, not 1",
            "round to nearest: the signed error averages to 0 over independent inputs within "
            "a Hoeffding width",
        ),
    )
}


def describe(fault_id: int) -> str:
    """``"fault class N (title)"``, as cards and messages cite a class.

    Raises:
        KeyError: an unknown class number.
    """
    if fault_id not in FAULTS:
        raise KeyError(f"fault_id: expected one of {sorted(FAULTS)}, got {fault_id!r}")
    return f"fault class {fault_id} ({FAULTS[fault_id].title})"
