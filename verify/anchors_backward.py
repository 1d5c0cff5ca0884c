"""Gradient tolerance rules of other projects' attention tests, ported from their public sources
(the backward counterpart of ``verify.anchors``), and the same-precision reference gradients
those rules measure a kernel against.

Every rule judges one gradient tensor (dq, dk or dv) at a time; the source asserts each of the
three, so a kernel passes a rule when all three pass. :func:`decide` returns, per tensor, the
rule's threshold (``bound``), the statistic it compares with it (``observed``), their ratio
(``max_ratio``; for the elementwise rules the largest elementwise ratio) and the decision.
:data:`RULES` maps each rule to its source (repository, path, 40-hex commit, lines or function
names), the same-precision reference it needs and a description.

Conventions (the sources name them differently):

* ``actual``: the kernel's gradient, in the kernel dtype ``dtype`` (float16, bfloat16, float32);
* ``ref64``: the same gradient from the float64 reference on the same rounded inputs and upstream
  gradient (``verify.exact.gradient_bounds.reference_gradients``). Where a source rounds its
  float32 reference to ``dtype`` (FlashAttention, xformers), the port uses ``ref64.to(dtype)``;
  where it keeps a high-precision "golden" (PyTorch's SDPA and FlexAttention tests), ``ref64``;
* ``ref_lp``: the gradient of the source's same-precision reference, in ``dtype``:
  :func:`plain_reference_grads` (FlashAttention's ``attention_ref(upcast=False,
  reorder_ops=True)``), :func:`math_sdpa_grads` (PyTorch's math SDPA) or
  :func:`flex_eager_grads` (FlexAttention's eager path).

Differences between a source's setting and these conventions are stated per rule in
:data:`RULES` (``differences``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from verify import anchors

__all__ = [
    "FLASH_ATTN_GRADS",
    "FLEX_FUDGE",
    "PT_CHECK_OUT_AND_GRAD_FUDGE",
    "PT_GET_TOLERANCES_FUDGE",
    "REFERENCES",
    "RULES",
    "TENSORS",
    "XFORMERS_BW_ATOL",
    "XFORMERS_BW_RTOL",
    "decide",
    "flex_eager_grads",
    "math_sdpa_grads",
    "passes_flex_attention",
    "passes_xformers_backward",
    "plain_reference_grads",
    "threshold_flex_attention",
    "threshold_xformers_backward",
]

TENSORS = ("dq", "dk", "dv")
_PT_NAME = {"dq": "grad_query", "dk": "grad_key", "dv": "grad_value"}

# ------------------------------------------------------------------------------------------------
# Sources
# ------------------------------------------------------------------------------------------------

_FA_REPO, _FA_COMMIT = "Dao-AILab/flash-attention", "0251105a2fb19d2957484b7f023cd8c115286ced"
_PT_REPO, _PT_COMMIT = "pytorch/pytorch", "00030eb8e81f911c48c4d7634fa6b8bb2fae1a1b"
_PT_FORK_REPO, _PT_FORK_COMMIT = "ROCm/pytorch", "08df56932afab2f183c7fb9d044ebacad8f505cd"
_FLEX_COMMIT = "00125ef3dad64a9f8dd8768e81326a34ed7ba91d"
_XF_REPO, _XF_COMMIT = "facebookresearch/xformers", "bed3978b5efc34b92a84e6116b01f598d83b8af1"
_NO_LINES = (
    "no line numbers: pytorch/pytorch is too large to bring here whole and the index serves this "
    "file by character offset, so the functions and statements are named instead"
)

# ------------------------------------------------------------------------------------------------
# Rule constants
# ------------------------------------------------------------------------------------------------

#: ``(mult, add)`` of ``(dq - dq_ref).abs().max().item() <= 3 * (dq_pt - dq_ref).abs().max()
#: .item()`` in test_flash_attn_output (tests/test_flash_attn.py lines 1130-1132; causal and
#: not, softcap 0 and 50, MHA/MQA/GQA). ``verify.anchors.FLASH_ATTN_VARIANTS`` lists the other
#: tests' forms (2x + 1e-5 in test_flash_attn_causal, 2x + 2e-4 in the split-KV test).
FLASH_ATTN_GRADS = anchors.FLASH_ATTN_VARIANTS["output_grads"]

#: ``get_tolerances`` fudge factors of test_mem_efficient_attention_vs_math_ref_grads
#: (pytorch/pytorch@00030eb8; no dropout, SM80 or later): ``dropout_fudge_factor = 1.5``,
#: ``query_fudge_factor = dropout_fudge_factor``, ``key_fudge_factor = 8 *
#: dropout_fudge_factor``, ``value_fudge_factor = 1.0`` (7 before SM80 with float16). The flash
#: test's (dq 4, dk 2, dv 2) are in ``verify.anchors.PYTORCH_GET_TOLERANCES_FUDGE``; it runs no
#: float32, so the mem-efficient test (float16, bfloat16, float32) is the one ported here.
PT_GET_TOLERANCES_FUDGE = {"dq": 1.5, "dk": 12.0, "dv": 1.0}

#: ``check_out_and_grad`` fudge factors of test_mem_efficient_attention_vs_math_ref_grads
#: (ROCm/pytorch@08df5693, CUDA values; the attn_mask test uses dq 160, dk 25, dv 8).
PT_CHECK_OUT_AND_GRAD_FUDGE = {
    t: anchors.PYTORCH_CHECK_OUT_AND_GRAD_FUDGE["mem_efficient"][_PT_NAME[t]] for t in TENSORS
}

#: FlexAttention's ``_check_out_and_grad``: ``fudge_factor = 10.0`` for float32, else 1.1; each
#: gradient's fudge is ``1.0 * fudge_factor``.
FLEX_FUDGE = {torch.float32: 10.0, torch.float16: 1.1, torch.bfloat16: 1.1}

#: xformers ``AttentionBwOpBase.ERROR_ATOL`` / ``ERROR_RTOL`` (xformers/ops/fmha/common.py lines
#: 533-542; no backward op overrides them): the tolerances of every gradient in test_backward.
XFORMERS_BW_ATOL = {torch.float32: 9e-4, torch.float16: 0.2, torch.bfloat16: 0.9}
XFORMERS_BW_RTOL = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 0.1}

# ------------------------------------------------------------------------------------------------
# The sources' same-precision references
# ------------------------------------------------------------------------------------------------


def _leaves(*ts: torch.Tensor) -> list[torch.Tensor]:
    return [t.detach().clone().requires_grad_(True) for t in ts]


def _check(q, k, v, g) -> None:
    for name, t in (("q", q), ("k", k), ("v", v), ("g", g)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name}: expected a 4-d (B, H, T|S, d) tensor, got {type(t)}")
    if not q.dtype == k.dtype == v.dtype == g.dtype:
        raise TypeError(f"q, k, v, g: expected one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[1] % k.shape[1] or k.shape[1] != v.shape[1]:
        raise ValueError(f"k, v: expected G heads dividing H = {q.shape[1]}, got {k.shape[1]}")


def _causal_hidden(T: int, S: int) -> torch.Tensor:
    """True where key s is hidden from query t (causal, T == S)."""
    return torch.arange(S)[None, :] > torch.arange(T)[:, None]


def plain_reference_grads(q, k, v, g, *, causal: bool = False, softcap: float | None = None):
    """(dq, dk, dv) of FlashAttention's ``attention_ref(..., upcast=False, reorder_ops=True)``
    (Dao-AILab/flash-attention@0251105a, tests/test_flash_attn.py lines 217-304): every step in
    the input dtype, ``scores = q @ (k / sqrt(d))^T``, the cap as ``scores / C``, ``tanh``,
    ``* C``, masked entries -inf, ``torch.softmax(scores).to(v.dtype) @ v``, k and v repeated
    to H heads (``einops.repeat``); gradients by autograd with upstream ``g``.

    q (B, H, T, d), k (B, G, S, d), v (B, G, S, d_v), g (B, H, T, d_v), one dtype; causal needs
    T == S. Returns dq, dk, dv in that dtype, shaped like q, k, v."""
    _check(q, k, v, g)
    ql, kl, vl = _leaves(q, k, v)
    r = q.shape[1] // k.shape[1]
    kr, vr = kl.repeat_interleave(r, 1), vl.repeat_interleave(r, 1)
    s = ql @ (kr / math.sqrt(q.shape[-1])).transpose(-1, -2)
    if softcap:
        s = (s / softcap).tanh() * softcap
    if causal:
        s = s.masked_fill(_causal_hidden(s.shape[-2], s.shape[-1]), float("-inf"))
    out = torch.softmax(s, dim=-1).to(v.dtype) @ vr
    return torch.autograd.grad(out, (ql, kl, vl), g)


def math_sdpa_grads(q, k, v, g, *, causal: bool = False, softcap: float | None = None):
    """(dq, dk, dv) of PyTorch's low-precision math reference (``sdpa_kernel([SDPBackend.MATH])``,
    ``F.scaled_dot_product_attention`` on the kernel's own dtype, as the SDPA gradient tests
    compute ``out_lp_ref``), by autograd with upstream ``g``; the math backend of the installed
    torch (2.13 computes float16/bfloat16 in float32 and rounds the result). Shapes as
    :func:`plain_reference_grads` (``enable_gqa`` when G < H).

    Raises:
        ValueError: ``softcap`` (SDPA has no cap; use :func:`plain_reference_grads`).
    """
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if softcap:
        raise ValueError("softcap: SDPA's math backend has no softcap")
    _check(q, k, v, g)
    ql, kl, vl = _leaves(q, k, v)
    gqa = k.shape[1] != q.shape[1]
    with sdpa_kernel([SDPBackend.MATH]):
        out = F.scaled_dot_product_attention(ql, kl, vl, is_causal=causal, enable_gqa=gqa)
    return torch.autograd.grad(out, (ql, kl, vl), g)


def flex_eager_grads(q, k, v, g, *, causal: bool = False, softcap: float | None = None):
    """(dq, dk, dv) of FlexAttention's eager path, the ``ref_out`` of its tests (uncompiled
    ``flex_attention`` in the kernel's dtype): ``math_attention`` forward and
    ``sdpa_dense_backward`` of torch 2.13's torch/_higher_order_ops/flex_attention.py (lines
    177-217, 220-289, 965-1155), restated here because flex_attention refuses gradients on CPU.

    Scores in float32 (float64 for float64 inputs), the score_mod (``C * tanh(s / C)`` for
    ``softcap``), masked -inf (``causal``: mask_mod ``q_idx >= kv_idx``); forward
    ``softmax.to(dtype) @ v``; backward: P = exp(y - lse), dV = P.to(dtype)^T g, dP = g v^T
    and Delta = rowsum(o * g) in float32, dY = P (dP - Delta), times the score_mod's derivative,
    times the scale, rounded to dtype, masked to 0, dQ = dY K and dK = dY^T Q in dtype, kv
    heads summed. Shapes as :func:`plain_reference_grads`."""
    _check(q, k, v, g)
    dt = q.dtype
    wp = torch.float64 if dt == torch.float64 else torch.float32
    B, H, T, D = q.shape
    G, S = k.shape[1], k.shape[2]
    r = H // G
    ke, ve = k.repeat_interleave(r, 1), v.repeat_interleave(r, 1)
    scale = 1.0 / math.sqrt(D)
    keep = ~_causal_hidden(T, S) if causal else torch.ones(T, S, dtype=torch.bool)

    def score_mod(s):
        return s if not softcap else softcap * torch.tanh(s / softcap)

    scores = ((q.to(wp) @ ke.to(wp).transpose(-2, -1)) * scale).to(wp)
    post = torch.where(keep, score_mod(scores), torch.tensor(-math.inf, dtype=wp))
    lse = post.logsumexp(dim=-1)
    empty = torch.all(post == -math.inf, dim=-1)
    lse = torch.where(empty, -math.inf, lse)
    p = torch.where(empty[..., None], 0.0, torch.softmax(post, dim=-1))  # _safe_softmax
    out = p.to(dt) @ ve.to(dt)
    lse = (lse / math.log(2)) * math.log(2)  # returned in log2 units, converted back
    p = torch.where(empty[..., None], 0, torch.exp(post - lse[..., None]))
    grad_v = p.to(dt).transpose(-2, -1) @ g
    dp = g.to(wp) @ ve.to(wp).transpose(-2, -1)
    delta = torch.sum(out.to(wp) * g.to(wp), -1, keepdim=True)
    grad_mod = p * (dp - delta + torch.zeros_like(lse)[..., None])
    if softcap:  # the joint graph of the score_mod: its derivative times grad_mod
        leaf = scores.detach().requires_grad_(True)
        (grad_mod,) = torch.autograd.grad(score_mod(leaf), leaf, grad_mod)
    ds = torch.where(keep, (grad_mod * scale).to(dt), torch.tensor(0, dtype=dt))
    grad_q = ds @ ke
    grad_k = (ds.transpose(-2, -1) @ q).view(B, G, r, S, D).sum(2)
    grad_v = grad_v.view(B, G, r, S, v.shape[-1]).sum(2)
    return grad_q, grad_k, grad_v


#: reference name -> function ``(q, k, v, g, *, causal, softcap) -> (dq, dk, dv)``
REFERENCES = {
    "plain": plain_reference_grads,
    "math_sdpa": math_sdpa_grads,
    "flex_eager": flex_eager_grads,
}

# ------------------------------------------------------------------------------------------------
# New ports: FlexAttention's mean-error ratio, xformers' absolute tolerances
# ------------------------------------------------------------------------------------------------


def threshold_flex_attention(
    *, golden: torch.Tensor, ref_lp: torch.Tensor, fudge_factor: float
) -> dict:
    """FlexAttention's threshold (pytorch/pytorch@00125ef3, test/inductor/
    test_flex_attention.py, ``TestFlexAttention._check_equal``): ``ref_error * fudge_factor``
    with ``ref_error = (golden - ref_lp).abs().mean()``, golden the float64 clone's result,
    ``ref_lp`` the eager result in the kernel dtype (promoted to float64 by the subtraction).
    Returns ``{"threshold", "ref_error", "fudge_factor"}``."""
    ref_error = (golden - ref_lp).abs().mean()
    return {
        "threshold": float(ref_error) * fudge_factor,
        "ref_error": float(ref_error),
        "fudge_factor": fudge_factor,
    }


def passes_flex_attention(
    actual: torch.Tensor, *, golden: torch.Tensor, ref_lp: torch.Tensor, fudge_factor: float
) -> bool:
    """``_check_equal`` as a bool: fails when ``compiled_error = (golden - actual).abs().mean()``
    or ``ref_error`` is NaN, or when ``compiled_error > ref_error * fudge_factor`` (strict;
    equality passes). Same shapes; ``actual`` in the kernel dtype."""
    compiled_error = (golden - actual).abs().mean()
    ref_error = (golden - ref_lp).abs().mean()
    if torch.isnan(compiled_error).any() or torch.isnan(ref_error).any():
        return False
    return not bool(compiled_error > ref_error * fudge_factor)


def threshold_xformers_backward(dtype: torch.dtype) -> dict:
    """``(atol, rtol)`` of xformers' test_backward for every gradient (``op_bw.ERROR_ATOL[dtype]``,
    ``op_bw.ERROR_RTOL[dtype]``; :data:`XFORMERS_BW_ATOL`). Returns ``{"atol", "rtol"}``.

    Raises:
        ValueError: a dtype with no tolerance (xformers has none for float64)."""
    if dtype not in XFORMERS_BW_ATOL:
        raise ValueError(f"dtype: expected one of {tuple(XFORMERS_BW_ATOL)}, got {dtype}")
    return {"atol": XFORMERS_BW_ATOL[dtype], "rtol": XFORMERS_BW_RTOL[dtype]}


def passes_xformers_backward(
    actual: torch.Tensor, *, ref: torch.Tensor, dtype: torch.dtype
) -> bool:
    """``assert_allclose(calc_grad, ref_grad, atol=atol, rtol=rtol)`` (xformers tests/utils.py
    lines 105-131) as a bool: same shape and dtype, and ``torch.allclose(actual, ref, rtol,
    atol)``, i.e. ``|actual - ref| <= atol + rtol |ref|`` everywhere in the tensors' dtype (a
    NaN fails). ``ref`` is the gradient of the float32 reference rounded to ``dtype`` (here
    ``ref64.to(dtype)``)."""
    thr = threshold_xformers_backward(dtype)
    if actual.shape != ref.shape or actual.dtype != ref.dtype:
        return False
    if actual.numel() == 0:
        return True
    return bool(torch.allclose(actual, ref, rtol=thr["rtol"], atol=thr["atol"]))


# ------------------------------------------------------------------------------------------------
# One decision per rule and tensor
# ------------------------------------------------------------------------------------------------


def _ratio(observed: float, bound: float) -> float:
    if math.isnan(observed):
        return math.inf
    if bound > 0:
        return observed / bound
    return 0.0 if observed == 0 else math.inf


def _elementwise_ratio(actual, expected, atol: float, rtol: float) -> float:
    """max |actual - expected| / (atol + rtol |expected|) in float64 (NaN -> inf)."""
    e = expected.double()
    r = (actual.double() - e).abs() / (atol + rtol * e.abs())
    return math.inf if torch.isnan(r).any() else float(r.max())


def _flash_attn(actual, ref64, ref_lp, dtype, tensor, softcap) -> dict:
    mult, add = FLASH_ATTN_GRADS
    thr = anchors.threshold_flash_attn(
        out_ref64=ref64, out_ref_lowprec=ref_lp, dtype=dtype, mult=mult, add=add
    )
    obs = (actual - ref64.to(dtype)).abs().max().item()
    passed = anchors.passes_flash_attn(
        actual, out_ref64=ref64, out_ref_lowprec=ref_lp, dtype=dtype, mult=mult, add=add
    )
    return {
        "passed": passed,
        "observed": obs,
        "bound": thr["threshold"],
        "max_ratio": _ratio(obs, thr["threshold"]),
        "measured_ref_error": thr["ref_error"],
    }


def _fa3_args(softcap) -> dict:
    return {"rtol": 3.0 if softcap else 2.0, "extra_atol": 3e-4 if softcap else 0.0}


def _flash_attn3(actual, ref64, ref_lp, dtype, tensor, softcap) -> dict:
    kw = dict(out_ref64=ref64, out_ref_lowprec=ref_lp, dtype=dtype, **_fa3_args(softcap))
    thr = anchors.threshold_flash_attn3_hopper(**kw)
    obs = (actual - ref64.to(dtype)).abs().max().item()
    return {
        "passed": anchors.passes_flash_attn3_hopper(actual, **kw),
        "observed": obs,
        "bound": thr["threshold"],
        "max_ratio": _ratio(obs, thr["threshold"]),
        "measured_ref_error": thr["ref_error"],
        "measured_atol": thr["fwd_atol"],
    }


def _pt_get_tolerances(actual, ref64, ref_lp, dtype, tensor, softcap) -> dict:
    kw = dict(
        out_ref64=ref64,
        out_ref_lowprec=ref_lp,
        dtype=dtype,
        fudge_factor=PT_GET_TOLERANCES_FUDGE[tensor],
    )
    thr = anchors.threshold_pytorch_get_tolerances(**kw)
    expected = ref64.to(dtype)
    return {
        "passed": anchors.passes_pytorch_get_tolerances(actual, **kw),
        "observed": (actual.double() - expected.double()).abs().max().item(),
        "bound": thr["atol"],
        "measured_rtol": thr["rtol"],
        "max_ratio": _elementwise_ratio(actual, expected, thr["atol"], thr["rtol"]),
    }


def _pt_check_out_and_grad(actual, ref64, ref_lp, dtype, tensor, softcap) -> dict:
    kw = dict(
        out_ref64=ref64,
        out_ref_lowprec=ref_lp,
        dtype=dtype,
        fudge_factor=PT_CHECK_OUT_AND_GRAD_FUDGE[tensor],
    )
    thr = anchors.threshold_pytorch_check_out_and_grad(**kw)
    obs = (ref64 - actual).abs().max().item()
    return {
        "passed": anchors.passes_pytorch_check_out_and_grad(actual, **kw),
        "observed": obs,
        "bound": thr["threshold"],
        "max_ratio": _ratio(obs, thr["threshold"]),
        "measured_ref_error": thr["ref_error"],
    }


def _flex(actual, ref64, ref_lp, dtype, tensor, softcap) -> dict:
    kw = dict(golden=ref64, ref_lp=ref_lp, fudge_factor=FLEX_FUDGE[dtype])
    thr = threshold_flex_attention(**kw)
    obs = (ref64 - actual).abs().mean().item()
    return {
        "passed": passes_flex_attention(actual, **kw),
        "observed": obs,
        "bound": thr["threshold"],
        "max_ratio": _ratio(obs, thr["threshold"]),
        "measured_ref_error": thr["ref_error"],
    }


def _xformers(actual, ref64, ref_lp, dtype, tensor, softcap) -> dict:
    thr = threshold_xformers_backward(dtype)
    ref = ref64.to(dtype)
    return {
        "passed": passes_xformers_backward(actual, ref=ref, dtype=dtype),
        "observed": (actual.double() - ref.double()).abs().max().item(),
        "bound": thr["atol"],
        "measured_rtol": thr["rtol"],
        "max_ratio": _elementwise_ratio(actual, ref, thr["atol"], thr["rtol"]),
    }


def decide(
    rule: str,
    grads: dict[str, torch.Tensor],
    *,
    ref64: dict[str, torch.Tensor],
    ref_lp: dict[str, torch.Tensor] | None,
    dtype: torch.dtype,
    softcap: float | None = None,
) -> dict[str, Any]:
    """The decision of ``rule`` (a key of :data:`RULES`) on a kernel's gradients.

    Args:
        grads: ``{"dq", "dk", "dv"}`` -> the kernel's gradients in ``dtype``.
        ref64: the same keys -> float64 reference gradients (same shapes).
        ref_lp: the same keys -> the gradients of the rule's same-precision reference
            (``RULES[rule]["reference"]``) in ``dtype``; None for a rule that needs none.
        dtype: the kernel dtype (float16, bfloat16, float32). softcap: the cap of the inputs'
            configuration (FlashAttention-3's tolerances depend on it).

    Returns:
        ``{"passed": all three passed, "max_ratio": the largest, "tensors": {name: {"passed",
        "observed", "bound", "max_ratio", "measured_*"}}}`` (module docstring).

    Raises:
        ValueError: unknown rule, missing tensors or a missing ``ref_lp`` the rule needs.
    """
    if rule not in RULES:
        raise ValueError(f"rule: expected one of {tuple(RULES)}, got {rule!r}")
    if set(grads) != set(TENSORS) or set(ref64) != set(TENSORS):
        raise ValueError(f"grads, ref64: expected the keys {TENSORS}")
    if RULES[rule]["reference"] is not None and (ref_lp is None or set(ref_lp) != set(TENSORS)):
        raise ValueError(f"ref_lp: rule {rule!r} needs {RULES[rule]['reference']!r} gradients")
    fn = RULES[rule]["decide"]
    out = {
        t: fn(grads[t], ref64[t], None if ref_lp is None else ref_lp[t], dtype, t, softcap)
        for t in TENSORS
    }
    return {
        "passed": all(bool(r["passed"]) for r in out.values()),
        "max_ratio": max(r["max_ratio"] for r in out.values()),
        "tensors": out,
    }


def _src(repo: str, path: str, commit: str, where: str, **extra: str) -> dict:
    return {"repo": repo, "path": path, "commit": commit, "lines": where, **extra}


RULES: dict[str, dict[str, Any]] = {
    "flash_attn_grads": {
        "decide": _flash_attn,
        "reference": "plain",
        "source": _src(
            _FA_REPO,
            "tests/test_flash_attn.py",
            _FA_COMMIT,
            "1130-1132 (dq, dk, dv at most 3x), 1071-1105 (g = randn_like(out); dq, "
            "dq_ref, dq_pt by autograd), attention_ref 217-304",
            also="713 (qkvpacked, 2x), 1558-1560 (test_flash_attn_causal, 2x + "
            "1e-5), 1853-1855 (split-KV, 2x + 2e-4, 8x with ALiBi)",
        ),
        "description": "max|dX - dX_ref| <= 3 max|dX_pt - dX_ref| for dX in dq, dk, dv; dX_ref "
        "from the float32-upcast reference rounded to dtype, dX_pt from the same-dtype PyTorch "
        "reference (attention_ref(upcast=False, reorder_ops=True)).",
        "differences": "dX_ref here is the float64 gradient rounded to dtype (the source's is "
        "computed in float32); the source runs float16 and bfloat16 only.",
    },
    "flash_attn3_hopper_grads": {
        "decide": _flash_attn3,
        "reference": "plain",
        "source": _src(
            _FA_REPO,
            "hopper/test_flash_attn.py",
            _FA_COMMIT,
            "256 (rtol), 328-329 (dq_ref, dq_pt), 343-348 (dq/dk/dv atol and assertions)",
        ),
        "description": "max|dX - dX_ref| <= rtol max|dX_pt - dX_ref| + 2 max|dX_ref + 0.3 - 0.3 "
        "- dX_ref| (+ 3e-4 with softcap); rtol 2, 3 with softcap.",
        "differences": "dX_ref: float64 gradient rounded to dtype; dX_pt from FlashAttention-2's "
        "attention_ref (the hopper test_util.py one has the same arithmetic for these inputs); "
        "the source runs float16, bfloat16 and float8 only.",
    },
    "pytorch_get_tolerances_grads": {
        "decide": _pt_get_tolerances,
        "reference": "math_sdpa",
        "source": _src(
            _PT_REPO,
            "test/test_transformers.py",
            _PT_COMMIT,
            "test_mem_efficient_attention_vs_math_ref_grads (dropout_fudge_factor, "
            "query/key/value_fudge_factor, grad_q/k/v_ref_atol and _rtol from "
            "get_tolerances, the three self.assertEqual on query.grad, key.grad, "
            "value.grad); get_tolerances, get_atol, get_rtol",
            line_numbers=_NO_LINES,
        ),
        "description": "per tensor atol = fudge max(max|g_hp - g_lp|, default_atol), rtol = "
        "fudge max(max|(g_hp - g_lp)/g_hp|, default_rtol); pass iff isclose(dX, g_hp.to(dtype), "
        "rtol, atol) everywhere. Fudges dq 1.5, dk 12, dv 1.",
        "differences": "g_hp is float64 (the source's is float32 for float16/bfloat16 inputs); "
        "g_lp: the installed torch's math SDPA; with softcap (no SDPA cap) g_lp is the plain "
        "same-dtype reference.",
    },
    "pytorch_check_out_and_grad_grads": {
        "decide": _pt_check_out_and_grad,
        "reference": "math_sdpa",
        "source": _src(
            _PT_FORK_REPO,
            "test/test_transformers.py",
            _PT_FORK_COMMIT,
            "test_mem_efficient_attention_vs_math_ref_grads (fudge_factors 'out' 3.0, "
            "'grad_query' 150.0, 'grad_key' 25.0, 'grad_value' 8.5; golden float64); "
            "check_out_and_grad, _check_equal",
            line_numbers=_NO_LINES,
            upstream="fork of pytorch/pytorch; the index holds no pytorch/pytorch "
            "commit with check_out_and_grad",
        ),
        "description": "max|g_golden - dX| <= max(1e-5, fudge max|g_golden - g_lp|); fudges "
        "dq 150, dk 25, dv 8.5 (attn_mask test: 160, 25, 8).",
        "differences": "g_lp: the installed torch's math SDPA; with softcap the plain "
        "same-dtype reference.",
    },
    "flex_attention_grads": {
        "decide": _flex,
        "reference": "flex_eager",
        "source": _src(
            "pytorch/pytorch",
            "test/inductor/test_flex_attention.py",
            _FLEX_COMMIT,
            "TestFlexAttention._check_equal (compiled_error, ref_error as means), "
            "_check_out_and_grad (fudge_factor 10.0 for float32 else 1.1; q/k/v "
            "fudge 1.0 * fudge_factor), run_test (float64 golden clones, eager ref "
            "in dtype, backward_grad = randn in dtype)",
            line_numbers=_NO_LINES,
            also="other stored copies of this file (not attributable to a "
            "pytorch/pytorch commit by the index) assert torch.testing.assert_close("
            "compiled_error, ref_error, rtol=fudge_factor, atol=1e-7), which passes "
            "up to (1 + fudge) ref_error + 1e-7; not ported",
        ),
        "description": "mean|g_golden - dX| <= fudge mean|g_golden - g_eager| (fudge 1.1, 10 "
        "for float32); a NaN in either mean fails.",
        "differences": "g_eager: flex_eager_grads, a restatement of torch 2.13's eager flex "
        "(flex_attention refuses gradients on CPU).",
    },
    "xformers_backward": {
        "decide": _xformers,
        "reference": None,
        "source": _src(
            _XF_REPO,
            "tests/test_mem_eff_attention.py",
            _XF_COMMIT,
            "749 (test_backward), 837 (grad_out = randn_like(out)), 881-882 (ref "
            "gradients), 896-897 (atol, rtol = op_bw.ERROR_ATOL/RTOL[dtype]), "
            "938-945 (assert_allclose per gradient)",
            also="xformers/ops/fmha/common.py 527-542 (AttentionBwOpBase.ERROR_ATOL "
            "float32 9e-4, float16 0.2, bfloat16 0.9; ERROR_RTOL 1e-4, 2e-2, 0.1); "
            "tests/utils.py 105-131 (assert_allclose); xformers/attn_bias_utils.py "
            "374-429 (ref_attention, float32)",
        ),
        "description": "torch.allclose(dX, dX_ref, rtol, atol) for each gradient with "
        "(atol, rtol) = (9e-4, 1e-4) float32, (0.2, 2e-2) float16, (0.9, 0.1) bfloat16; dX_ref "
        "the float32 reference's gradient in dtype.",
        "differences": "dX_ref: the float64 gradient rounded to dtype; the source's inputs are "
        "3 N(0, 1).",
    },
}
