"""Which precision model a black-box softmax kernel follows in bfloat16/float16 (D10 models).

The kernel is called twice on random inputs of the dtype (B = 1, H = 2, d = d_v = 16): T = 16
queries over S = 2048 keys (skipped for a kernel that takes causal calls only), then T = S = 512,
causal when it takes causal calls (rows with few keys, where the models differ most); a call the
kernel refuses is skipped. Each call's outputs are compared bit for bit with the faithful
emulations of
``verify.attention.lowprec``: ``two-level`` (the exact result rounded once), ``fused``,
``online:B`` for B in :data:`ONLINE_BLOCKS` below S, ``rounded-weights`` and ``eager``, each
with the variant's claimed softcap, ALiBi slopes and window applied as its arithmetic does.
Different models round different intermediates, so they agree with each other on only part of
the outputs (SDPA's CPU kernel in bfloat16, torch 2.13: 82 % bit-match with online:512, 66 %
fused, 59 % two-level, 36 % eager). The model with the largest fraction is named; ties go to
the earlier model in :data:`CANDIDATE_ORDER` (the tighter bound). A model is named only when
every call agrees on it and its bound contains every output of both calls (``_name_model``);
otherwise the checker keeps the envelope. Accumulation in the input
type is never inferred: it is declared (``precision="input-accumulation:..."``), since a match
would not prove the bound's hypotheses.
"""

from __future__ import annotations

import math
from typing import Any

from derivations.precision_models import FP32_SCORES

ONLINE_BLOCKS = (32, 64, 128, 256, 512, 1024)
CANDIDATE_ORDER = ("two-level", "fused", "online", "rounded-weights", "eager")
#: a model is named only when at least this fraction of outputs bit-match it (else the default)
MIN_MATCH = 0.5


def _candidates(q, k, v, *, causal: bool, scale, structure=None) -> dict[str, Any]:
    """Each model's emulated output on (q, k, v), with the variant's claimed ``structure``
    (softcap, ALiBi slopes, window) applied as that model's arithmetic does."""
    import torch

    from verify.attention import lowprec
    from verify.exact.errors import float64_reference

    st = dict(structure or {})
    dt = q.dtype
    ref = float64_reference("softmax", q, k, v, causal=causal, scale=scale, **st)
    out = {"two-level": torch.from_numpy(ref).to(dt)}
    out["fused"] = lowprec.fused_attention(q, k, v, causal=causal, scale=scale, **st)
    for b in ONLINE_BLOCKS:
        if b < k.shape[-2]:
            out[f"online:{b}"] = lowprec.fused_attention(q, k, v, causal=causal, scale=scale,
                                                         block=b, **st)  # fmt: skip
    out["rounded-weights"] = lowprec.rounded_weights_attention(
        q, k, v, causal=causal, scale=scale, **st
    )
    out["eager"] = lowprec.eager_attention(q, k, v, causal=causal, scale=scale, **st)
    return out


def _own_bound_ratio(variant, model, o, q, k, v, *, causal, scale, dtype, device, structure):
    """Greatest |o - float64 reference| / the bound of ``model`` on one probe call (the
    variant's declared exp library and arithmetic, the device's otherwise)."""
    import numpy as np

    from verify.exact.errors import attention_error_bound, float64_reference
    from verify.properties.support.observe import ratios

    st = dict(structure or {})
    ref = float64_reference("softmax", q, k, v, causal=causal, scale=scale, **st)
    eb = attention_error_bound(
        "softmax", q, k, v, dtype=dtype, exact=None, causal=causal, scale=scale,
        device="cuda" if str(device).startswith("cuda") else "cpu",
        exp_library=variant.exp_library, arithmetic=variant.arithmetic, precision=model, **st,
    )  # fmt: skip
    r = ratios(np.abs(o.double().numpy() - ref), np.asarray(eb.bound))
    return float(np.nan_to_num(r, nan=np.inf).max()) if r.size else 0.0


def _structure(variant, heads: int) -> dict[str, Any] | None:
    """The structural claims the emulations reproduce (softcap, ALiBi, window), or None when the
    variant claims one they do not (QK-norm, a score bias, sigmoid or a decay)."""
    from verify.spec.structure import reference_kwargs

    kw = reference_kwargs(variant, heads)
    kw.pop("enable_gqa", None)
    if set(kw) - {"softcap", "alibi_slopes", "window"} or variant.score_bias:
        return None
    return kw


def identify_precision(variant, *, dtype: str, device: str = "cpu", seed: int = 0) -> dict:
    """Bit-match the variant's outputs against each emulated model (module docstring).

    Args:
        variant: an ``AttentionVariant`` claiming (or found to compute) softmax; its scale
            claim is used; ``causal=False`` is called when supported.
        dtype: ``bfloat16`` or ``float16``. device: where the tensors live.

    Returns:
        JSON values: ``dtype``, ``shape`` (T, S), ``causal``, ``matches`` {model: fraction of
        outputs bit-equal}, ``model`` (the named spec, or None with ``reason``), ``next`` (the
        runner-up and its fraction).

    Raises:
        ValueError: ``dtype`` is not bfloat16/float16.
    """
    import torch

    from verify.properties.support.calls import call
    from verify.spec.results import VariantError

    if dtype not in ("bfloat16", "float16"):
        raise ValueError(f"dtype: expected bfloat16 or float16, got {dtype!r}")
    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(seed)
    from verify.spec.structure import fixed_heads

    causal_only = not variant.supports_causal(False)
    causal_ok = variant.supports_causal(True)
    # (T, S, causal): many keys per row (a kernel taking causal calls or self-attention only gets
    # T = S only), then rows with few keys (causal when the kernel takes it), where the models'
    # roundings differ most; a refused causal call is retried non-causal
    square_only = causal_only or variant.self_attention_only
    shapes = (() if square_only else ((16, 2048, False),)) + ((512, 512, causal_ok),)
    if causal_ok and not causal_only:
        shapes += ((512, 512, False),)
    scale = None if variant.scale == "default" else float(variant.scale)
    heads = fixed_heads(variant) or 2
    structure = _structure(variant, heads)
    if structure is None:
        return {"dtype": dtype, "model": None,
                "reason": "a structural claim the emulated models do not reproduce"}  # fmt: skip
    last, calls, refused = "no call succeeded", [], []
    for T, S, causal in shapes:
        if not causal and T == S and any(c["shape"] == [T, S] for c in calls):
            break  # the causal T = S call ran: the non-causal one is only its fallback
        q = torch.randn(1, heads, T, 16, generator=gen).to(dt)
        k, v = (torch.randn(1, heads, S, 16, generator=gen).to(dt) for _ in range(2))
        try:
            o = call(variant, q.to(device), k.to(device), v.to(device), causal=causal,
                     restricted=False).cpu()  # fmt: skip
        except VariantError as exc:
            last = str(exc)
            refused.append(f"{'causal' if causal else 'non-causal'} {T}x{S}: {exc}"[:200])
            continue
        cands = _candidates(q, k, v, causal=causal, scale=scale, structure=structure)
        matches = {name: float((c == o).double().mean()) for name, c in cands.items()}
        rank = sorted(
            matches,
            key=lambda n: (-matches[n], CANDIDATE_ORDER.index(n.split(":")[0]), n),
        )
        calls.append({"shape": [T, S], "causal": causal, "matches": matches, "rank": rank,
                      "inputs": (o, q, k, v)})  # fmt: skip
    if not calls:
        return {"dtype": dtype, "model": None, "reason": f"the variant could not be called: {last}"}
    first = calls[0]
    res = {
        "dtype": dtype,
        "shape": first["shape"],
        "causal": first["causal"],
        "matches": {n: round(f, 4) for n, f in first["matches"].items()},
        "next": [first["rank"][1], round(first["matches"][first["rank"][1]], 4)]
        if len(first["rank"]) > 1
        else None,
        "calls": [
            {"shape": c["shape"], "causal": c["causal"], "best": c["rank"][0],
             "match": round(c["matches"][c["rank"][0]], 4)}
            for c in calls
        ],
        "refused_calls": refused,
    }  # fmt: skip
    named = _name_model(variant, calls, dtype=dtype, device=device, scale=scale,
                        structure=structure)  # fmt: skip
    below = named.pop("below_min_match", False)
    res.update(named)
    if res["model"] is None and below:
        res["scores"] = score_resolution(variant, dtype=dtype, device=device)
    if not structure:  # the finding's inputs and bound are plain softmax
        res["tied_maxima"] = tied_maxima_finding(
            variant, dtype=dtype, model=res["model"] or "envelope", device=device, seed=seed
        )
    return res


def _same_arithmetic(a: str, b: str, S: int) -> bool:
    """Whether models ``a`` and ``b`` compute alike on S keys: ``fused`` is ``online:B`` for
    any B >= S (one block)."""

    def canon(name: str) -> str:
        if name == "fused" or (name.startswith("online:") and int(name.split(":")[1]) >= S):
            return "one-block"
        return name

    return canon(a) == canon(b)


def _name_model(variant, calls, *, dtype, device, scale, structure) -> dict:
    """The model the probe's calls agree on, or None with the reason.

    A bit-match fraction ranks the models but proves none: over thousands of keys most results
    round to the same value whatever the arithmetic, so a kernel that follows none of the models
    (FlashAttention-2 with its keys split and combined by log-sum-exp; PyTorch's flash backend on
    an H200) can bit-match the tightest model on most outputs and exceed its bound elsewhere. A
    model is named only when it (1) bit-matches at least MIN_MATCH of the outputs of every call,
    (2) is the best match of every call (up to models that compute alike on that call's keys),
    and (3) its bound contains every output of every call."""
    best = [c["rank"][0] for c in calls]
    for c, b in zip(calls, best):
        if c["matches"][b] < MIN_MATCH:
            return {"model": None, "below_min_match": True,
                    "reason": f"no model reaches {MIN_MATCH:.0%} bit-equal outputs"
                    f" ({'x'.join(map(str, c['shape']))} call: best {b} "
                    f"{c['matches'][b]:.0%})"}  # fmt: skip
    model = best[0]
    for c, b in zip(calls[1:], best[1:]):
        if not _same_arithmetic(model, b, c["shape"][1]):
            said = "; ".join(
                f"{'causal' if x['causal'] else 'non-causal'} {x['shape'][0]}x{x['shape'][1]}: "
                f"{y} ({x['matches'][y]:.0%})"
                for x, y in zip(calls, best)
            )
            return {"model": None, "reason": f"the probe's calls name different models ({said}):"
                    " no model reproduces the kernel"}  # fmt: skip
    ratios = []
    try:
        for c in calls:
            o, q, k, v = c["inputs"]
            ratios.append(_own_bound_ratio(variant, model, o, q, k, v, causal=c["causal"],
                                           scale=scale, dtype=dtype, device=device,
                                           structure=structure))  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the checker's limit: no model, the envelope
        return {"model": None, "reason": f"the closest model, {model}: its bound on the probe "
                f"could not be evaluated ({type(exc).__name__}: {exc})"[:300]}  # fmt: skip
    out = {"own_bound_ratio": round(max(ratios), 4)}
    if max(ratios) > 1.0:
        out.update(model=None, reason=f"the closest model, {model}, is refuted by its own bound "
                   f"on the probe's outputs (ratio {max(ratios):.3g}): no model reproduces the "
                   "kernel")  # fmt: skip
    else:
        out["model"] = model
    return out


#: rows, keys, tied keys, head and value dimension of the tied-maxima finding
TIED_ROWS, TIED_KEYS, TIED_COUNT, TIED_DIM, TIED_VALUE_DIM = 512, 256, 8, 16, 4
TIED_ALPHA = 1e-6


def tied_maxima_finding(variant, *, dtype: str, model: str, device: str = "cpu", seed: int = 0):
    """The data-dependent rounding bias reported for low-precision flash attention (H. Qiu,
    Q. Yao, arXiv 2510.04212): rows whose maximum score is attained by several keys (P holds
    several exact 1s) and values of one sign. Measures the mean signed error over independent
    rows as a fraction of ``model``'s max-error bound (``verify.exact.errors``), with its
    Hoeffding width (``derivations.precision_models.hoeffding_half_width``, alpha 1e-6). A
    finding, reported and never failed: round-to-nearest kernels may show it legitimately.

    Returns:
        JSON values: ``mean_of_bound``, ``width``, ``mean_error``, ``significant`` (bool), or
        ``reason`` when the variant could not be called.
    """
    import torch

    from derivations.precision_models import hoeffding_half_width
    from verify.exact import errors
    from verify.properties.support.calls import call
    from verify.spec.results import VariantError

    gen = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    k = 0.5 * torch.randn(1, 1, TIED_KEYS, TIED_DIM, generator=gen, dtype=f64)
    top = torch.randn(TIED_DIM, generator=gen, dtype=f64)
    top = 4 * top / top.norm()
    k[0, 0, :TIED_COUNT] = top  # identical keys: tied maxima
    q = top / 2 + 0.1 * torch.randn(1, 1, TIED_ROWS, TIED_DIM, generator=gen, dtype=f64)
    v = -(1 + torch.rand(1, 1, TIED_KEYS, TIED_VALUE_DIM, generator=gen, dtype=f64))
    if variant.dv_equals_d:
        v = -(1 + torch.rand(1, 1, TIED_KEYS, TIED_DIM, generator=gen, dtype=f64))
    dt = getattr(torch, dtype)
    q, k, v = (t.to(dt) for t in (q, k, v))
    causal = not variant.supports_causal(False)
    if causal or variant.self_attention_only:
        q = q[..., :TIED_KEYS, :]
    try:
        o = call(variant, q.to(device), k.to(device), v.to(device), causal=causal,
                 restricted=False).cpu()  # fmt: skip
    except VariantError as exc:
        return {"reason": str(exc)}
    scale = None if variant.scale == "default" else float(variant.scale)
    kw = dict(causal=causal, scale=scale)
    eb = errors.attention_error_bound(
        "softmax", q, k, v, dtype=dtype, exact=None, precision=model,
        exp_library=variant.exp_library or errors.BLACK_BOX_EXP_LIBRARY[device], device=device,
        **kw,
    )  # fmt: skip
    err = o.double().numpy() - errors.float64_reference("softmax", q, k, v, **kw)
    z = (err.sum(-1) / eb.bound.sum(-1)).reshape(-1)
    width = hoeffding_half_width(z.size, TIED_ALPHA)
    mean = float(z.mean())
    return {
        "mean_of_bound": round(mean, 4),
        "width": round(width, 4),
        "mean_error": float(f"{float(err.mean()):.3e}"),
        "significant": bool(abs(mean) > width),
    }


def fallback(found: list[dict]) -> str:
    """The model of a kernel no emulation reproduces: ``envelope:fp32-scores`` when every probed
    dtype showed scores kept at float32 resolution (:func:`score_resolution`), else
    ``envelope`` (an eager step possible)."""
    seen = [f.get("scores", {}).get("resolution") for f in found if not f.get("model")]
    if seen and all(r == "float32" for r in seen):
        return f"envelope:{FP32_SCORES}"
    return "envelope"


def combine(found: list[dict]) -> str | None:
    """One model for every low-precision dtype: the found models if they agree, else the one
    with the largest bound (eager > online > fused > two-level; online's smallest block); None
    (the fallback decides) when a dtype that was called names no model, since one model is
    applied to every dtype and that dtype's probe found none it can stand behind."""
    called = [f for f in found if not str(f.get("reason", "")).startswith("the variant could")]
    if any(not f.get("model") for f in called):
        return None
    models = [f["model"] for f in found if f.get("model")]
    if not models:
        return None

    def weight(spec: str) -> tuple[int, int]:
        name, _, block = spec.partition(":")
        return CANDIDATE_ORDER.index(name), -int(block or 0)

    return max(models, key=weight)


#: the leading score levels of :func:`score_resolution` (numbers of every low-precision dtype)
RESOLUTION_LEVELS = (32.0, 16.0)


def score_resolution(variant, *, dtype: str, device: str = "cpu") -> dict:
    """Whether a kernel keeps its scores at float32 resolution or rounds them to the input type
    (an eager step), read from its outputs alone.

    The last query row sees two keys at the same score L (a number of the dtype; the diagonal key
    and its left neighbour, visible under any causal pattern, window of left >= 1, distance 0 and
    1 for ALiBi), the others 2 lower; a second call moves the diagonal key's score by delta =
    7/16 of the dtype's spacing at L (a coordinate of one key, exact in float32 and below half
    the input type's spacing). A kernel that rounds its scores to the input type rounds L and
    L + delta to the same number (for any later cap or bias), so its output is bit for bit
    unchanged; one with float32 scores moves the leading weight (about 1/2) by about delta/4,
    several spacings of the output's dtype. The claimed softcap C sets L <= C (where the cap's
    slope is >= sech^2(1)); C below 16, a window narrower than 2, QK-norm or a failing call
    leave it undetermined.

    Returns:
        JSON values: ``resolution`` (``float32``, ``input`` or None) and ``detail``.
    """
    import torch

    from derivations.rounding import precision_bits
    from verify.properties.support.calls import call
    from verify.spec.results import VariantError

    cap = variant.softcap
    if variant.qk_norm or (cap is not None and cap < 16):
        return {"resolution": None, "detail": "scores bounded below 16 (QK-norm or the cap)"}
    if variant.window is not None and 0 <= variant.window[0] < 1:
        return {"resolution": None, "detail": "a window of left < 1"}
    dt = getattr(torch, dtype)
    heads = 2
    from verify.spec.structure import fixed_heads

    heads = fixed_heads(variant) or heads
    T, d = 4, 16
    d_v = d if variant.dv_equals_d else 2
    c = 1.0 / math.sqrt(d) if variant.scale == "default" else float(variant.scale)
    changed = []
    for level in RESOLUTION_LEVELS:
        if cap is not None and level > cap:
            continue
        spacing = level * 2.0 ** (1 - precision_bits(dtype))  # at L, a power of two
        delta = spacing * 7 / 16
        q = torch.zeros(1, heads, T, d, dtype=torch.float64)
        q[..., T - 1, 0] = 1.0 / c  # score = k[0] + k[1]
        q[..., T - 1, 1] = 1.0 / c
        k = torch.zeros(1, heads, T, d, dtype=torch.float64)
        k[..., :, 0] = level - 2.0
        k[..., T - 2 :, 0] = level
        v = torch.zeros(1, heads, T, d_v, dtype=torch.float64)
        v[..., T - 1, 0] = 1.0
        k2 = k.clone()
        k2[..., T - 1, 1] = delta
        causal = not variant.supports_causal(False)
        try:
            outs = [
                call(
                    variant,
                    q.to(dt).to(device),
                    kk.to(dt).to(device),
                    v.to(dt).to(device),
                    causal=causal,
                    restricted=False,
                ).cpu()  # fmt: skip
                for kk in (k, k2)
            ]
        except VariantError as exc:
            return {"resolution": None, "detail": f"the call failed: {exc}"}
        changed.append(not torch.equal(outs[0], outs[1]))
    if not changed:
        return {"resolution": None, "detail": "no score level below the claimed cap"}
    res = "float32" if any(changed) else "input"
    return {"resolution": res, "detail": f"levels {list(RESOLUTION_LEVELS)}: changed {changed}"}


def sentence(found: list[dict], chosen: str | None) -> str:
    """What the probe found, for notes and cards."""
    parts = []
    for f in found:
        if f.get("model"):
            nxt = f.get("next")
            tail = f", next {nxt[0]} {nxt[1]:.0%}" if nxt else ""
            parts.append(
                f"{f['dtype']}: {f['matches'][f['model']]:.0%} of outputs bit-match "
                f"{f['model']}{tail}"
            )
        else:
            parts.append(f"{f['dtype']}: {f.get('reason')}")
    if chosen:
        head = f"precision model {chosen}"
    else:
        fb = fallback(found)
        head = f"no precision model identified ({fb}: " + (
            "scores kept at float32 resolution; the largest of the fused, rounded-weights and "
            "online:16 bounds)"
            if fb != "envelope"
            else "the largest of the fused, eager and online:16 bounds)"
        )
    return f"{head} ({'; '.join(parts)})"


def finding_sentence(found: list[dict]) -> str | None:
    """The tied-maxima finding (:func:`tied_maxima_finding`) in words, or None."""
    tied = [(f["dtype"], f["tied_maxima"]) for f in found
            if "mean_of_bound" in f.get("tied_maxima", {})]  # fmt: skip
    if not tied:
        return None
    return (
        "finding (reported, not failed): rows with tied maximum scores and one-sign values "
        + ("(the bias reported by Qiu & Yao 2025 for low-precision flash attention): ")
        + ", ".join(
            f"{dt} mean signed error {t['mean_of_bound']:+.3f} of the max-error bound over "
            f"independent rows (Hoeffding width {t['width']:.3f}: "
            f"{'significant' if t['significant'] else 'not significant'})"
            for dt, t in tied
        )
    )
