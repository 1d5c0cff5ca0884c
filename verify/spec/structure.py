"""The structural claims of a variant -- grouped key/value heads, a sliding window, a softcap, ALiBi
slopes, a per-head decay, sigmoid's bias, a key-padding mask -- validated once and turned into the
keywords of the modern reference and error model (``verify.exact.structure_oracle``,
``verify.exact.errors``; D12-D16 of ``reports/derivations.md``).

Conventions (D15): a window ``(left, right)`` is FlashAttention's ``window_size`` (bottom-right
aligned, -1 unbounded; a causal call has right = 0); kv heads map by ``repeat_interleave`` (query
head h uses kv head h // (H / G)); a softcap is C tanh(s / C) on the scaled scores, before the
ALiBi bias -m_h |t' - s| and the mask; a decay gamma_h in (0, 1] weighs key s of query t by
gamma_h^(t - s) (causal only; D12: the decayed RNN of ALiBi with m = -ln gamma).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

#: the claim that asks for the reference slopes of whatever head count a check draws
REFERENCE_SLOPES = "reference"


def check_claims(v) -> None:
    """Validate the structural claims of variant ``v`` (``qk_norm``: q and k L2-normalized before
    the score, D16).

    Raises:
        TypeError, ValueError: a bad ``kv_heads``, ``window``, ``softcap``, ``alibi_slopes``,
            ``decay``, ``sigmoid_bias`` or ``key_padding`` (the message names the field), or
            claims that contradict each other (a decay on a non-causal variant or with a
            softmax kernel, a sigmoid bias without the sigmoid kernel, ALiBi slopes and a decay
            together).
    """
    if v.kv_heads is not None and (
        isinstance(v.kv_heads, bool) or not isinstance(v.kv_heads, int) or v.kv_heads < 1
    ):
        raise ValueError(f"kv_heads: expected an int >= 1 or None, got {v.kv_heads!r}")
    if v.window is not None:
        w = v.window
        if (
            not isinstance(w, tuple)
            or len(w) != 2
            or any(isinstance(x, bool) or not isinstance(x, int) or x < -1 for x in w)
        ):
            raise ValueError(f"window: expected a pair (left, right) of ints >= -1, got {w!r}")
        if tuple(v.window) == (-1, -1):
            raise ValueError("window: (-1, -1) is no window; leave window=None")
        if v.causal_alignment == "top-left":
            raise ValueError(
                "window: windows are aligned bottom-right (FlashAttention's convention); "
                "claim causal_alignment='bottom-right' or None"
            )
    if v.softcap is not None and not _positive(v.softcap):
        raise ValueError(f"softcap: expected a positive finite number, got {v.softcap!r}")
    for name in ("alibi_slopes", "decay"):
        value = getattr(v, name)
        if value is None or (name == "alibi_slopes" and value == REFERENCE_SLOPES):
            continue
        if not isinstance(value, tuple) or not value:
            raise TypeError(
                f"{name}: expected a non-empty tuple of per-head numbers"
                + (f" or {REFERENCE_SLOPES!r}" if name == "alibi_slopes" else "")
                + f", got {value!r}"
            )
        for x in value:
            ok = _positive(x) and (name != "decay" or x <= 1)
            if not ok:
                want = "in (0, 1]" if name == "decay" else "positive and finite"
                raise ValueError(f"{name}: expected every entry {want}, got {value!r}")
    if v.decay is not None:
        if v.causal != "yes":
            raise ValueError("decay: a decayed RNN is causal; claim causal='yes'")
        if v.kernel_family not in ("taylor", "linear"):
            raise ValueError(
                f"decay: claimed for the Taylor and linear RNN kernels, got {v.kernel!r} "
                "(a decayed softmax is ALiBi: claim alibi_slopes)"
            )
        if v.alibi_slopes is not None:
            raise ValueError("decay: claim either alibi_slopes or decay, not both")
    if not (isinstance(v.sigmoid_bias, (int, float)) and math.isfinite(v.sigmoid_bias)):
        raise ValueError(f"sigmoid_bias: expected a finite number, got {v.sigmoid_bias!r}")
    if v.sigmoid_bias != 0 and v.kernel_family != "sigmoid":
        raise ValueError("sigmoid_bias: claimed only with kernel='sigmoid'")
    if v.kernel_family == "sigmoid" and v.normalized:
        raise ValueError("kernel: sigmoid attention is unnormalized; claim normalized=False")
    if (v.softcap is not None or v.alibi_slopes is not None) and v.kernel_family not in (
        "softmax",
        "sigmoid",
        "unknown",
    ):
        raise ValueError(
            f"softcap, alibi_slopes: claimed for softmax and sigmoid kernels, got {v.kernel!r}"
        )
    if not isinstance(v.key_padding, bool):
        raise TypeError(f"key_padding: expected a bool, got {v.key_padding!r}")
    if not isinstance(v.score_bias, bool):
        raise TypeError(f"score_bias: expected a bool, got {v.score_bias!r}")
    if v.score_bias and v.kernel_family not in ("softmax", "sigmoid", "unknown"):
        raise ValueError(f"score_bias: claimed for softmax and sigmoid kernels, got {v.kernel!r}")
    if not isinstance(v.qk_norm, bool):
        raise TypeError(f"qk_norm: expected a bool, got {v.qk_norm!r}")
    if v.qk_norm and v.kernel_family not in ("softmax", "sigmoid", "unknown"):
        raise ValueError(f"qk_norm: claimed for softmax and sigmoid kernels, got {v.kernel!r}")


def _positive(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def has_structure(v) -> bool:
    """The variant claims something the plain oracle (``verify.exact.oracle``) cannot state: a
    window, a softcap, ALiBi, a decay, the sigmoid kernel (its checks use the modern reference
    and error model), or a FlexAttention score_mod or mask_mod (checked by ``flex-score-mod``).
    Grouped kv heads alone do not count: the battery calls with G = H."""
    return (
        v.window is not None
        or v.softcap is not None
        or v.alibi_slopes is not None
        or v.decay is not None
        or v.kernel_family == "sigmoid"
        or v.qk_norm
        or getattr(v, "score_mod", None) is not None
        or getattr(v, "mask_mod", None) is not None
    )


def position_dependent(v) -> bool:
    """The weights depend on positions, not only on the scores: a window, ALiBi or a decay
    (key-permutation equivariance does not hold)."""
    from verify.spec.flex import has_flex

    return v.window is not None or v.alibi_slopes is not None or v.decay is not None or has_flex(v)


def fixed_heads(v) -> int | None:
    """The head count per-head claims fix (explicit ALiBi slopes or decays), else None."""
    for value in (v.alibi_slopes, v.decay):
        if isinstance(value, tuple):
            return len(value)
    return None


def slopes_for(v, heads: int) -> list[float] | None:
    """The ALiBi slopes of a call with ``heads`` query heads (the reference slopes when claimed
    as ``'reference'``), or None."""
    if v.alibi_slopes is None:
        return None
    if v.alibi_slopes == REFERENCE_SLOPES:
        from derivations.decay import alibi_slopes

        return alibi_slopes(heads)
    return [float(m) for m in v.alibi_slopes]


def reference_kwargs(v, heads: int, *, enable_gqa: bool = False) -> dict[str, Any]:
    """The structural keywords of ``structured_reference`` for a call with ``heads`` query
    heads: window, softcap, alibi_slopes, decay, sigmoid_bias, enable_gqa."""
    kw: dict[str, Any] = {"enable_gqa": enable_gqa}
    if v.window is not None:
        kw["window"] = tuple(v.window)
    if v.softcap is not None:
        kw["softcap"] = float(v.softcap)
    if (slopes := slopes_for(v, heads)) is not None:
        kw["alibi_slopes"] = slopes
    if v.decay is not None:
        kw["decay"] = [float(g) for g in v.decay]
    if v.kernel_family == "sigmoid":
        kw["sigmoid_bias"] = float(v.sigmoid_bias)
    if v.qk_norm:
        kw["qk_norm"] = True
    return kw


def describe(v) -> list[str]:
    """One phrase per structural claim (for summaries and cards)."""
    out = []
    if v.kv_heads is not None:
        out.append(f"{v.kv_heads} kv head(s), query head h -> kv head h // (H / G)")
    if v.window is not None:
        out.append(f"window {tuple(v.window)} (FlashAttention convention, bottom-right)")
    if v.softcap is not None:
        out.append(f"softcap C = {v.softcap:g}")
    if v.alibi_slopes is not None:
        out.append(
            "ALiBi, reference slopes"
            if v.alibi_slopes == REFERENCE_SLOPES
            else f"ALiBi slopes {list(v.alibi_slopes)}"
        )
    if v.decay is not None:
        out.append(f"decay gamma = {list(v.decay)}")
    if v.kernel_family == "sigmoid":
        out.append(f"sigmoid bias b = {v.sigmoid_bias:g}")
    if v.key_padding:
        out.append("key_padding_mask (B, S), True = keep")
    if v.qk_norm:
        out.append("q and k L2-normalized (cosine attention, QK-norm)")
    if v.score_bias:
        out.append("attn_bias (an additive score bias)")
    from verify.spec.flex import describe as flex_describe

    return out + flex_describe(v)
