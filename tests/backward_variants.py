"""FlashAttention-2's backward pass emulated (``verify.attention.flash_backward``) as checkable
variants: the correct kernel beside one variant per named backward defect, each with the
structural claim its defect concerns (plain, softcap, ALiBi, window, two kv heads), the
``online:64`` precision model and the ``flash-attention-2`` arithmetic (D17). The forward is
correct in every one of them: only the backward differs. ``TWINS``: faulty variant -> (correct
twin, the structure). Module-level objects: ``attn-theory check tests.backward_variants:<name>``.
"""

from __future__ import annotations

from derivations.decay import alibi_slopes
from verify.attention.flash_backward import flash_attention_trainable
from verify.spec.variant import AttentionVariant

SOFTCAP = 20.0
WINDOW = (3, -1)
KV_HEADS = 1
DTYPES = ("float64", "float32", "bfloat16")


def _variant(name: str, faults: tuple[str, ...] = (), **claims):
    window, softcap = claims.get("window"), claims.get("softcap")
    alibi = claims.get("alibi_slopes") is not None

    def forward(q, k, v, *, causal):
        slopes = [float(m) for m in alibi_slopes(q.shape[1])] if alibi else None
        return flash_attention_trainable(q, k, v, causal=causal, window=window, softcap=softcap,
                                         alibi_slopes=slopes, faults=faults)  # fmt: skip

    return AttentionVariant(
        name=name,
        forward=forward,
        kernel="softmax",
        causal_alignment="bottom-right",
        precision="online:64",
        arithmetic="flash-attention-2",
        dtypes=DTYPES,
        empty_rows="zeros",
        **claims,
    )


STRUCTURES = {
    "plain": {},
    "softcap": {"softcap": SOFTCAP},
    "alibi": {"alibi_slopes": "reference"},
    "window": {"window": WINDOW},
    "gqa": {"kv_heads": KV_HEADS},
}
#: defect -> the structure it is planted in
DEFECTS = {
    "delta-unnormalized": "plain",
    "mask-dropped": "window",
    "dk-unscaled": "alibi",
    "gqa-first-head": "gqa",
    "softcap-no-dtanh": "softcap",
    "lse-max-only": "plain",
    "dv-last-block-dropped": "plain",
    "delta-wrong-row": "plain",
}

ok = {name: _variant(f"ok-flash-bwd-{name}", **claims) for name, claims in STRUCTURES.items()}
bad = {
    fault: _variant(f"bad-flash-bwd-{fault}", (fault,), **STRUCTURES[where])
    for fault, where in DEFECTS.items()
}
TWINS = {f"bad-flash-bwd-{f}": (f"ok-flash-bwd-{w}", w) for f, w in DEFECTS.items()}
globals().update({f"ok_{n}": v for n, v in ok.items()})
globals().update({"bad_" + f.replace("-", "_"): v for f, v in bad.items()})
