"""Plain low-precision softmax functions ``f(q, k, v, *, causal) -> o`` as users bring them,
built on the emulations of ``verify.attention.lowprec`` (importable as
``tests.lowprec_variants:<name>`` for ``attn-theory check ... --kernel softmax --dtype bfloat16``):

* ``fused_once``: float32 accumulation, P rounded once to the input type (FlashAttention's
  order) -- correct;
* ``fused_truncated``: the same with P rounded toward zero (fault class 13) -- within a
  max-error bound, biased;
* ``rowsum_rounded``: the row sum rounded to the input type before the division (one extra
  rounding at a named place);
* ``bf16_accumulating``: P.V and the row sum accumulated in the input type, recursively (no
  gamma beyond 256 bf16 terms) -- wrong on long rows against the fused model.
"""

from __future__ import annotations

from verify.attention import lowprec


def fused_once(q, k, v, *, causal):
    return lowprec.fused_attention(q, k, v, causal=causal)


def fused_truncated(q, k, v, *, causal):
    return lowprec.fused_attention(q, k, v, causal=causal, faults=("p-truncated",))


def rowsum_rounded(q, k, v, *, causal):
    return lowprec.fused_attention(q, k, v, causal=causal, faults=("rowsum-rounded",))


def bf16_accumulating(q, k, v, *, causal):
    return lowprec.input_accumulation_attention(q, k, v, causal=causal, scheme="recursive")
