"""How tight the bounds of D16's transforms and D17's kernel arithmetic are on real kernels'
arithmetic: the observed/bound distribution of emulated kernels (``verify.attention.flash``:
FlashAttention-2's forward as its sources state it; ``verify.attention.lowprec``: eager and
rounded-weights code) against the float64 reference on the same rounded inputs, under the
declared model and arithmetic and under the default one, with each emulation's defects
(``reports/anchors.md``, "Kernel arithmetics").

Lengths cross the 64-key block and end in a partial block (T = 96 queries, S = 200 keys).
"""

from __future__ import annotations

import statistics
from typing import Any

#: the inputs of every row: seeds, sizes, element scale (normal q, k, v times SCALE)
SEEDS = (0, 1)
SIZES = {"H": 2, "T": 96, "S": 200, "d": 16}
SCALE = 1.5
DTYPES = ("bfloat16", "float32")
FA = "flash-attention-2"


def _rows() -> list[dict[str, Any]]:
    """The emulated kernels: name, how to call it, its claims, declared model and arithmetic,
    and the defects reported beside it."""
    from derivations.decay import alibi_slopes

    slopes = [float(m) for m in alibi_slopes(SIZES["H"])]
    fa = {"kernel": "flash", "precision": "online:64", "arithmetic": FA}
    return [
        {**fa, "name": "FlashAttention-2", "claims": {}, "faults": ("no-rescale",)},
        {**fa, "name": "FlashAttention-2, softcap 20", "claims": {"softcap": 20.0},
         "faults": ("softcap-scale",)},
        {**fa, "name": "FlashAttention-2, ALiBi", "claims": {"alibi_slopes": slopes},
         "faults": ("alibi-unscaled",)},
        {**fa, "name": "FlashAttention-2, window (70, -1)", "claims": {"window": (70, -1)},
         "faults": ("window-wide", "last-block-unmasked")},
        {**fa, "name": "FlashAttention-2, 4 query heads on 2 kv heads", "claims": {}, "gqa": 2,
         "faults": ("gqa-modulo",)},
        {**fa, "name": "FlashAttention-2, split-KV 3", "claims": {}, "split": 3,
         "arithmetic": f"{FA}+split:3", "faults": ("split-lse-base",)},
        {"kernel": "eager", "name": "eager (Hugging Face), softcap 20",
         "claims": {"softcap": 20.0}, "precision": "eager", "arithmetic": None, "faults": ()},
        {"kernel": "rounded-weights", "name": "rounded weights, ALiBi",
         "claims": {"alibi_slopes": slopes}, "precision": "rounded-weights", "arithmetic": None,
         "faults": ()},
    ]  # fmt: skip


def _inputs(seed: int, dtype: str, gqa: int | None):
    import torch

    g = torch.Generator().manual_seed(seed)
    H, T, S, d = SIZES["H"] * (2 if gqa else 1), SIZES["T"], SIZES["S"], SIZES["d"]
    G = gqa or H
    dt = getattr(torch, dtype)

    def mk(*shape):
        return (SCALE * torch.randn(*shape, generator=g, dtype=torch.float64)).to(dt)

    return mk(1, H, T, d), mk(1, G, S, d), mk(1, G, S, d)


def _call(row, q, k, v, faults=()):
    from verify.attention import lowprec
    from verify.attention.flash import flash_attention

    claims = row["claims"]
    if row["kernel"] == "flash":
        return flash_attention(q, k, v, causal=False, split_kv=row.get("split", 1),
                               faults=faults, **claims)  # fmt: skip
    fn = lowprec.eager_attention if row["kernel"] == "eager" else lowprec.rounded_weights_attention
    return fn(q, k, v, causal=False, **claims)


def _ratio(out, q, k, v, row, dtype: str, precision, arithmetic) -> float:
    import numpy as np

    from verify.exact.errors import attention_error_bound, float64_reference

    kw = dict(row["claims"], enable_gqa=k.shape[1] != q.shape[1])
    ref = float64_reference("softmax", q, k, v, **kw)
    low = dtype != "float32"
    eb = attention_error_bound(
        "softmax", q, k, v, dtype=dtype, exact=None, precision=precision if low else None,
        arithmetic=arithmetic, **kw,
    )  # fmt: skip
    err = np.abs(out.double().numpy() - ref)
    return float(np.max(err / eb.bound))


def measure() -> dict[str, Any]:
    """The table: per row and dtype, the observed/bound ratios over :data:`SEEDS` under the
    declared model and arithmetic (median, max) and under the default (max), and each defect's
    smallest ratio (JSON values)."""
    from verify.exact.errors import default_precision

    rows = []
    for row in _rows():
        for dtype in DTYPES:
            declared, default, faults = [], [], {f: [] for f in row["faults"]}
            for seed in SEEDS:
                q, k, v = _inputs(seed, dtype, row.get("gqa"))
                out = _call(row, q, k, v)
                declared.append(_ratio(out, q, k, v, row, dtype, row["precision"],
                                       row["arithmetic"]))  # fmt: skip
                default.append(_ratio(out, q, k, v, row, dtype, default_precision(dtype), None))
                for f in faults:
                    bad = _call(row, q, k, v, faults=(f,))
                    faults[f].append(_ratio(bad, q, k, v, row, dtype, row["precision"],
                                            row["arithmetic"]))  # fmt: skip
            arith = row["arithmetic"]
            rows.append({
                "kernel": row["name"],
                "dtype": dtype,
                "model": row["precision"] if dtype != "float32" else "two-level",
                "arithmetic": arith or "cpu (default)",
                "median_ratio": statistics.median(declared),
                "max_ratio": max(declared),
                "default_model": default_precision(dtype),
                "default_max_ratio": max(default),
                "faults": {f: min(r) for f, r in faults.items()},
            })  # fmt: skip
    return {
        "sizes": dict(SIZES),
        "seeds": list(SEEDS),
        "scale": SCALE,
        "rows": rows,
    }
