"""PyTorch ``torch.nn.functional.scaled_dot_product_attention`` as a checked variant.

SDPA is the softmax yardstick: the same battery that checks the project's softmax runs
on it, causal and not. Findings on torch 2.13 (CPU) that the claims declare:

* kernel ``softmax`` at the default scale 1/sqrt(d); boolean ``attn_mask`` with True = keep (the
  project's convention); the torch documentation forbids ``is_causal`` together with
  ``attn_mask``, and torch 2.13 is inconsistent about it (the fused CPU kernel applies both, the
  math path -- taken e.g. when d != d_v or under autograd -- raises), so for a masked causal
  call the adapter passes the documented equivalent: ``attn_mask & tril`` (top-left) with
  ``is_causal=False``;
* causal T != S is aligned top-left (query t sees keys s <= t; fault class 7), declared
  ``causal_alignment="top-left"`` and checked by the ``causal-alignment`` property;
* a row with no visible key returns zeros (older torch returned NaN; fault class 8);
* every CPU dtype runs ``aten::_scaled_dot_product_flash_attention_for_cpu`` (seen with
  ``torch.profiler``), whose ``_exp_reduce_sum_fusion_kernel`` calls ``Vectorized::exp_u20()``
  (pytorch/pytorch, aten/src/ATen/native/cpu/FlashAttentionKernel.cpp): declared
  ``exp_library="cpu-torch-exp_u20"`` (20 ulps as cited, 20.5 from the exact result,
  ``derivations.rounding.LIBRARY_EXP_ULPS``; for
  float64 exp_u20 falls back to exp(), so the declaration is conservative there);
* for bfloat16/float16 the same kernel stores the exponentials in the input's type before
  multiplying by V (``conditional_data_ptr(qk_data, qk_reduced_data)``) while summing them in
  float32, over key blocks of 512 with the online rescaling: the ``online:512`` precision model
  of D10 (``derivations.precision_models``). Nothing is declared: the checker's precision probe
  bit-matches the outputs against the models' emulations and names it (the card's notes), and
  :func:`bf16_weight_rounding_evidence` measures the mechanism on one key block.

:data:`VARIANTS` names the variant's card; :func:`card_facts` measures what the card shows.
"""

from __future__ import annotations

from typing import Any

from verify.adapters.card_settings import CARD_TIMEOUT, PROFILE, SEED
from verify.adapters.measure import row_kind
from verify.spec.variant import AttentionVariant

#: the exp SDPA's fused CPU kernel calls in float32 / bf16 / fp16 (see the module docstring)
SDPA_EXP_LIBRARY = "cpu-torch-exp_u20"
#: the 1-ulp exp model the card compares the declared one with
ALTERNATIVE_EXP_LIBRARY = "cpu-sleef-u10"
#: the properties and dtypes of that comparison
EXP_COMPARISON_SELECT = ("oracle-agreement", "edge-cases")
EXP_COMPARISON_DTYPES = ("float32", "bfloat16")

#: card name -> import spec of the variant's zero-argument factory
VARIANTS: dict[str, str] = {"torch-sdpa": "verify.adapters.sdpa:sdpa_variant"}


def sdpa_forward(q, k, v, *, causal: bool, attn_mask=None, attn_bias=None):
    """``scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal)``.

    Args:
        q: (B, H, T, d); k: (B, H, S, d); v: (B, H, S, d_v); any float dtype SDPA accepts.
        causal: SDPA's ``is_causal`` (top-left aligned when T != S).
        attn_mask: optional bool (B, H, T, S), True = keep. With ``causal`` it is combined
            with the top-left causal mask (SDPA's documented way to ask for both).
        attn_bias: optional float bias broadcastable to (B, H, T, S), added to the scaled
            scores: SDPA's float ``attn_mask`` (hidden keys, boolean mask or causal, become
            -inf in it).

    Returns:
        (B, H, T, d_v) tensor of q's dtype.

    Raises:
        Whatever SDPA raises (the checker reports it as a failure of the property).
    """
    import torch.nn.functional as F

    if attn_mask is not None and causal:
        attn_mask = attn_mask & causal_mask(q.shape[-2], k.shape[-2], attn_mask.device)
        causal = False
    if attn_bias is not None:
        keep = attn_mask
        if causal:
            keep = causal_mask(q.shape[-2], k.shape[-2], attn_bias.device)
            causal = False
        bias = attn_bias.to(q.dtype)
        attn_mask = bias if keep is None else bias.masked_fill(~keep, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal)


def causal_mask(t: int, s: int, device):
    """Top-left aligned causal mask (T, S) as SDPA builds it: query t sees keys s <= t."""
    from verify.spec.visibility import visible

    return visible(t, s, causal=True, alignment="top-left", device=device)


def sdpa_variant() -> AttentionVariant:
    """SDPA with its declared conventions (zero-argument factory for ``attn-theory check``)."""
    return AttentionVariant(
        name="torch-sdpa",
        forward=sdpa_forward,
        layout="BHTD",
        kernel="softmax",
        causal="both",
        causal_alignment="top-left",
        normalized=True,
        supports_mask=True,
        score_bias=True,  # a float attn_mask is added to the scaled scores
        empty_rows="zeros",  # measured on the card (measure_conventions: empty_row)
        exp_library=SDPA_EXP_LIBRARY,
        dtypes=("float64", "float32", "bfloat16", "float16"),
        devices=("cpu", "cuda"),
        description="torch.nn.functional.scaled_dot_product_attention (boolean attn_mask, "
        "is_causal)",
    )


# -- conventions measured for the report card ---------------------------------------------------
def measure_conventions(dtypes: tuple[str, ...] = ("float64", "float32", "bfloat16")) -> dict:
    """What SDPA does where conventions differ between libraries (fault classes 7 and 8),
    measured.

    Returns a dict of JSON values:
        ``empty_row``: {dtype: output of a query row whose mask is all False ("zeros", "NaN")};
        ``nan_in_masked_key``: {dtype: the output of a row whose only masked key holds NaN};
        ``alignment``: causal T = 1, S = 2: which keys query 0 sees ("key 0 only" = top-left);
        ``causal_with_mask``: {path: "accepted, equals attn_mask & tril" | "raises ..."} for the
        fused CPU kernel (d == d_v) and the math path (d != d_v), both called with
        ``is_causal=True`` and a boolean mask directly (not through the adapter).
    """
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(0)
    out: dict = {"empty_row": {}, "nan_in_masked_key": {}}
    for name in dtypes:
        dt = getattr(torch, name)
        q, k, v = (torch.randn(1, 1, 3, 4, generator=gen).to(dt) for _ in range(3))
        mask = torch.ones(1, 1, 3, 3, dtype=torch.bool)
        mask[..., 1, :] = False
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out["empty_row"][name] = row_kind(o[0, 0, 1])
        mask2 = torch.ones(1, 1, 3, 3, dtype=torch.bool)
        mask2[..., 2] = False  # key 2 hidden from every query
        k2, v2 = k.clone(), v.clone()
        k2[..., 2, :] = float("nan")
        v2[..., 2, :] = float("nan")
        o2 = F.scaled_dot_product_attention(q, k2, v2, attn_mask=mask2)
        out["nan_in_masked_key"][name] = row_kind(o2[0, 0, 0])
    q1 = torch.randn(1, 1, 1, 4, generator=gen, dtype=torch.float64)
    k2 = torch.randn(1, 1, 2, 4, generator=gen, dtype=torch.float64)
    eye = torch.eye(2, dtype=torch.float64).view(1, 1, 2, 2)
    w = F.scaled_dot_product_attention(q1, k2, eye, is_causal=True)[0, 0, 0]
    seen = [s for s in range(2) if w[s] > 0]
    out["alignment"] = {
        "weights": [float(x) for x in w],
        "sees": "key 0 only (top-left)" if seen == [0] else f"keys {seen} (bottom-right)",
    }
    out["causal_with_mask"] = {}
    for path, dv in (("fused CPU kernel (d == d_v)", 4), ("math path (d != d_v)", 3)):
        q = torch.randn(1, 1, 3, 4, generator=gen)
        k = torch.randn(1, 1, 3, 4, generator=gen)
        v = torch.randn(1, 1, 3, dv, generator=gen)
        mask = torch.tensor([[True, False, True], [True, True, False], [False, True, True]])
        mask = mask.view(1, 1, 3, 3)
        try:
            both = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True)
        except Exception as exc:  # noqa: BLE001 - the finding is the message
            out["causal_with_mask"][path] = f"raises {type(exc).__name__}: {exc}"
            continue
        comb = F.scaled_dot_product_attention(q, k, v, attn_mask=mask & causal_mask(3, 3, "cpu"))
        same = torch.equal(both, comb)
        out["causal_with_mask"][path] = "accepted, " + (
            "equals attn_mask & tril (both applied)" if same else "differs from attn_mask & tril"
        )
    return out


def bf16_weight_rounding_evidence(seed: int = 0) -> dict:
    """Does SDPA's bfloat16 CPU path round the softmax weights to bf16 before P @ V?

    The fused kernel stores exp(s - max) in the input's reduced type
    (``conditional_data_ptr(qk_data, qk_reduced_data)`` in FlashAttentionKernel.cpp) and
    multiplies that by V, while the row sum is accumulated from the float32 exponentials. This
    measures it: bf16 inputs (B = H = 2, T = 16, S = 64, d = 16, one key block), SDPA's output
    against (a) the exact softmax of the same bf16 inputs and (b) the same with the weights
    exp(s - max) rounded to bf16 before P @ V (both in float64, then rounded to bf16 once).

    Returns:
        {"exact" | "weights_rounded": {"bitwise_equal_fraction": f, "max_abs_diff": x}}.
    """
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(seed)
    b, h, t, s, d = 2, 2, 16, 64, 16
    q, k, v = (torch.randn(b, h, n, d, generator=gen).bfloat16() for n in (t, s, s))
    out = F.scaled_dot_product_attention(q, k, v)
    q64, k64, v64 = (x.double() for x in (q, k, v))
    scores = (q64 @ k64.transpose(-1, -2)) * d**-0.5
    e = torch.exp(scores - scores.amax(-1, keepdim=True))
    total = e.sum(-1, keepdim=True)
    models = {"exact": (e @ v64) / total, "weights_rounded": (e.bfloat16().double() @ v64) / total}
    return {
        name: {
            "bitwise_equal_fraction": float((x.bfloat16() == out).double().mean()),
            "max_abs_diff": float((out.double() - x).abs().max()),
        }
        for name, x in models.items()
    }


# -- the card's facts ---------------------------------------------------------------------------
def card_facts(name: str, *, quick: bool = False, isolate: bool = True) -> dict[str, Any]:
    """What the ``torch-sdpa`` card shows besides the battery (JSON values, in card order).

    Returns:
        ``conventions`` (:func:`measure_conventions`), ``bf16_weight_rounding``
        (:func:`bf16_weight_rounding_evidence`) and, unless ``quick``,
        ``exp_library_comparison``: the properties :data:`EXP_COMPARISON_SELECT` rerun in
        :data:`EXP_COMPARISON_DTYPES` under :data:`ALTERNATIVE_EXP_LIBRARY`
        (``verify.engine.check``, the card's profile and seed; ``isolate`` as for the card), as
        property_id, dtype, status and max_ratio per result.

    Raises:
        KeyError: ``name`` is not in :data:`VARIANTS`.
    """
    from verify.engine.check import check

    if name not in VARIANTS:
        raise KeyError(f"name: expected one of {sorted(VARIANTS)}, got {name!r}")
    facts: dict[str, Any] = {
        "conventions": measure_conventions(),
        "bf16_weight_rounding": bf16_weight_rounding_evidence(),
    }
    if not quick:
        alt = check(
            VARIANTS[name],
            dtypes=EXP_COMPARISON_DTYPES,
            profile=PROFILE,
            seed=SEED,
            select=list(EXP_COMPARISON_SELECT),
            exp_library=ALTERNATIVE_EXP_LIBRARY,
            isolate=isolate,
            timeout=CARD_TIMEOUT,
        )
        facts["exp_library_comparison"] = [
            {k: getattr(r, k) for k in ("property_id", "dtype", "status", "max_ratio")}
            for r in alt.results
        ]
    return facts
