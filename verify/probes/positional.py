"""Probes of the structural claims (D12-D15) in a black box: the window a variant applies, the
kv-head map it uses on grouped calls, a cap on the weights' dependence on the score, and a bias
linear in the distance |t' - s| (ALiBi).

Each measurement is read off outputs built so the answer is exact:

* visibility and bias: q = k = 0 makes every score equal, so with V = I row t of the output is
  the weight distribution over the keys query t sees; a window shows as the visible set, a bias
  -m |t' - s| as log w_ts falling linearly in the distance;
* kv heads: with G = H/2 kv heads whose values are the constants g + 1, a normalized output of
  query head h is (the index of the kv head it reads) + 1;
* a cap: one query, two keys with scores x and 0 (d = 1): log(w_1 / w_0), less its value at
  x = 0 (a positional bias between the two keys), is log kappa(x) - log kappa(0): x for exp and
  C tanh(x / C) under a softcap C.

The findings are suggested as claims only where the evidence is exact (a FlashAttention window
that reproduces the measured pattern, the repeat_interleave map, a cap fitting C tanh(x / C) to
1e-6, slopes fitting a linear bias to 1e-6); anything else is reported as seen.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from verify.probes.runner import Runner
from verify.spec.results import VariantError

#: heads of the visibility/bias probe (ALiBi's reference slopes differ per head)
HEADS = 4
#: scores of the cap probe (log-spaced; exp's weights stay in float64's range up to e^-128)
CAP_SCORES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
#: the elements of q and k of the visibility probe's second try (module code)
VISIBILITY_FILL = 0.5
#: relative agreement a fit must reach to be suggested as a claim
FIT_TOLERANCE = 1e-6


def window_of(vis: list[list[int]], S: int) -> tuple[int, int] | None:
    """The FlashAttention window ``(left, right)`` (bottom-right aligned, -1 unbounded) whose
    pattern is exactly ``vis`` (T rows of visible key indices over S keys), the smallest such
    pair; None when no window gives it (e.g. bucketed local attention). ``(-1, -1)``: every key
    is visible from every query."""
    T = len(vis)
    for left in range(-1, S + T):
        for right in range(-1, S + T):
            if all(
                row
                == [
                    s
                    for s in range(S)
                    if (left < 0 or s >= t + S - T - left) and (right < 0 or s <= t + S - T + right)
                ]
                for t, row in enumerate(vis)
            ):
                return left, right
    return None


def probe_positional(run: Runner, report, T: int, causal: bool) -> None:
    """Fill ``report.positional`` with ``window``, ``bias``, ``kv_heads`` and ``cap``."""
    out: dict[str, Any] = {}
    out["window"], out["bias"] = _window_and_bias(run, T, causal)
    out["kv_heads"] = _kv_heads(run, causal)
    if report.normalization.get("kind") == "sum":
        out["cap"] = _cap(run)
    report.positional = out


def _window_and_bias(run: Runner, T: int, causal: bool):
    import torch

    from derivations.decay import alibi_slopes

    d = 2
    # q = k = 0: every score 0, equal weights on the visible keys for any kernel of q.k; where
    # no key gets a weight there (kappa(0) = 0, or a delta rule's state a zero key leaves at
    # zero) the same with every element VISIBILITY_FILL (every score equal again)
    for fill in (0.0, VISIBILITY_FILL):
        for H in (HEADS, 1):
            q = torch.full((1, H, T, d), fill, dtype=torch.float64)
            try:
                W = run.weights(q, q.clone(), causal, T)[0]  # (H, T, S = T)
                break
            except VariantError as exc:
                err = str(exc)
        else:
            return {"error": err}, {"error": err}
        Wf = np.where(np.isfinite(W), W, 0.0)
        vis = [[s for s in range(T) if Wf[0, t, s] > 0] for t in range(T)]
        if any(vis):
            break
    if not any(vis):
        why = f"no key has a positive weight with q = k = 0 or {VISIBILITY_FILL}: not read"
        return {"causal": causal, "T": T, "detail": why}, {"detail": why}
    win = window_of(vis, T)
    plain = (-1, 0) if causal else (-1, -1)
    window = {
        "causal": causal,
        "T": T,
        **({"q_k_fill": fill} if fill else {}),
        "pattern": "".join(
            "".join("1" if s in row else "0" for s in range(T)) + "|" for row in vis
        ),
        "window": list(win) if win is not None else None,
        "plain": win == plain,
        "same_for_every_head": all(
            bool(((Wf[h] > 0) == (Wf[0] > 0)).all()) for h in range(W.shape[0])
        ),
    }
    if fill:  # equal nonzero keys: a recurrence's weights change with t - s for its own reasons
        return window, {"detail": f"not read: the weights at q = k = {fill} are the kernel's"}
    # a bias linear in the distance: log w_ts = a_t - m |t' - s| on the visible keys
    slopes, residual = [], 0.0
    for h in range(W.shape[0]):
        xs, ys, rows = [], [], []
        for t, row in enumerate(vis):
            if len(row) < 2:
                continue
            logw = np.log(Wf[h, t, row])
            dist = np.abs(np.asarray(row) - t)
            xs.append(dist - dist.mean())
            ys.append(logw - logw.mean())
            rows.append(t)
        if not xs:
            return window, {"detail": "no row with two visible keys"}
        x, y = np.concatenate(xs), np.concatenate(ys)
        m = float(-(x @ y) / (x @ x)) if (x @ x) > 0 else 0.0
        slopes.append(m)
        residual = max(residual, float(np.max(np.abs(y + m * x))))
    uniform = all(abs(m) < FIT_TOLERANCE for m in slopes) and residual < FIT_TOLERANCE
    bias: dict[str, Any] = {"slopes": slopes, "max_residual": residual, "linear": False}
    if not uniform and residual < FIT_TOLERANCE:
        bias["linear"] = True
        ref = alibi_slopes(W.shape[0])
        bias["reference_slopes"] = all(abs(m - r) <= FIT_TOLERANCE * r for m, r in zip(slopes, ref))
    bias["uniform"] = uniform
    return window, bias


def _kv_heads(run: Runner, causal: bool) -> dict[str, Any]:
    import torch

    H, G, d = 4, 2, 2
    q = run.rand(1, H, 3, d)
    k = run.rand(1, G, 3, d)
    v = torch.arange(1, G + 1, dtype=torch.float64).view(1, G, 1, 1).expand(1, G, 3, d)
    try:
        o = run.out(q, k, v.contiguous(), causal)
    except VariantError as exc:
        return {"accepts": False, "detail": str(exc)[:200]}
    got = [int(round(float(x))) - 1 for x in o[0, :, -1, 0]]
    if got == [h // (H // G) for h in range(H)]:
        conv = "repeat_interleave"
    elif got == [h % G for h in range(H)]:
        conv = "repeat"
    else:
        conv = "other"
    return {"accepts": True, "kv_head_of_query_head": got, "convention": conv, "H": H, "G": G}


def _cap(run: Runner) -> dict[str, Any]:
    import torch

    ratios = []
    for x in (0.0, *CAP_SCORES):  # x = 0: the offset of a positional bias between the keys
        q = torch.tensor([[[[x]]]], dtype=torch.float64)
        k = torch.tensor([[[[0.0], [1.0]]]], dtype=torch.float64)
        try:
            W = run.weights(q, k, False, 2)[0, 0, 0]  # (2,)
        except VariantError as exc:
            return {"detail": str(exc)[:200]}
        if not (np.isfinite(W).all() and W[0] > 0 and W[1] > 0):
            return {"detail": f"weights {W.tolist()} at score {x}"}
        ratios.append(float(math.log(W[1] / W[0])))
    xs = np.asarray(CAP_SCORES)
    L = np.asarray(ratios[1:]) - ratios[0]
    out: dict[str, Any] = {"scores": list(CAP_SCORES), "log_weight_ratio": L.tolist()}
    if np.allclose(L, xs, rtol=FIT_TOLERANCE, atol=0):
        out["kind"] = "exp (no cap)"
        return out
    C = float(L[-1])
    with np.errstate(divide="ignore", invalid="ignore"):  # L = 0: no fit (residual nan)
        for _ in range(60):  # fixed point of C = L(x_max) / tanh(x_max / C)
            C = float(L[-1] / math.tanh(xs[-1] / C))
        fit = C * np.tanh(xs / C)
        out["max_relative_residual"] = float(np.max(np.abs(fit - L) / np.abs(L)))
    out["C"] = C
    flat = L[-1] - L[-2] < 1e-3 * abs(L[-1])  # no growth from x_max / 2 to x_max
    out["kind"] = (
        "softcap C tanh(s / C)"
        if out["max_relative_residual"] < FIT_TOLERANCE
        else "saturating, not C tanh(s / C)"
        if flat
        else "not exp (no cap)"
    )
    return out


def suggested(positional: dict[str, Any]) -> dict[str, Any]:
    """Claims from the positional probes where the evidence is exact: ``window``,
    ``kv_heads``, ``softcap``, ``alibi_slopes``."""
    claims: dict[str, Any] = {}
    win = positional.get("window", {})
    if win.get("window") is not None and not win.get("plain") and win.get("same_for_every_head"):
        claims["window"] = tuple(win["window"])
    kv = positional.get("kv_heads", {})
    if kv.get("accepts") and kv.get("G"):
        # a variant that takes fewer kv heads claims grouped-query attention, whose one
        # grouping (HF's repeat_kv, SDPA's enable_gqa, FlashAttention) reads kv head
        # h // (H / G): claimed whatever grouping the probe saw, so head-groups checks it (a
        # tiled ``repeat`` fails there instead of passing unchecked)
        claims["kv_heads"] = kv["G"]
    cap = positional.get("cap", {})
    if cap.get("kind") == "softcap C tanh(s / C)":
        claims["softcap"] = round(cap["C"], 6)
    bias = positional.get("bias", {})
    if bias.get("linear") and bias.get("reference_slopes"):
        claims["alibi_slopes"] = "reference"  # other slopes are reported, not claimed
    return claims
