"""Where the claimed computation is exactly undefined, decided from the inputs alone.

A row whose kernel sum vanishes (``sum`` without eps: N_t / 0), whose numerator vanishes
(``l2``, ``rms`` without eps: 0 / ||0||) or is constant over its channels (``layernorm``
without eps: a zero variance) has no exact output (D7), and no rounding bound states anything
there. The D10 model finds such rows through float64 majorants (a lower bound of |D_t| that is
not positive), a decision that may differ between machines in its last bits; the rows here are
decided in rational arithmetic from the floats the variant received, so a check that rejects an
example for them (``NotApplicable``) rejects the same draws on every machine (README
"Reports").

Kernels (the oracle's conventions, ``verify.exact.oracle``): kappa_N(c q.k) and the element-wise
maps identity (a q.k) and relu (relu(a q).relu(k)) are rational in the inputs; exp weights are
transcendental, but for distinct rational scores x_1..x_m the numbers e^{x_i} are linearly
independent over the algebraic numbers (Lindemann-Weierstrass), so sum_s e^{x_s} v_s = 0
exactly when the values of each group of equal scores sum to 0. Positive kernels (exp, even
kappa_N) never give a vanishing kernel sum.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

#: the largest B H T S (d + d_v) decided here (rational arithmetic in Python); larger examples
#: (the long ones) are left to the float decision
MAX_TERMS = 60_000
NORM_MODES = ("l2", "rms", "layernorm")


def undefined_rows(variant, x, mode: str) -> np.ndarray | None:
    """(B, H, T) bool: the rows with a visible key whose exact output is undefined in ``mode``.

    Args:
        variant: an ``AttentionVariant`` with a known kernel claim.
        x: ``AttentionInputs`` (q, k, v any float dtype; causal flag and mask).
        mode: the denominator mode of the call.

    Returns:
        The rows (all False where the mode divides by nothing that can vanish: ``none``,
        ``count``, an eps added to a norm), or None where it is not decided here: unknown,
        declared or FAVOR+/elu1 feature maps under a norm mode, structural claims (a window,
        ALiBi, a decay, a softcap, a score bias, grouped kv heads), or more than
        :data:`MAX_TERMS` terms.

    Source: D7 (the normalizations and where they are undefined), D1/D3 (the kernels).
    """
    from verify.spec.structure import has_structure

    kern = variant.parsed_kernel
    B, H, T, d = (int(n) for n in x.q.shape)
    S, d_v = int(x.k.shape[-2]), int(x.v.shape[-1])
    rows = np.zeros((B, H, T), dtype=bool)
    if mode not in ("sum", *NORM_MODES) or (mode in NORM_MODES and variant.eps):
        return rows
    if mode == "sum" and kern.positive:
        return rows  # exp, even kappa_N, elu1, FAVOR+: a positive kernel sum (eps >= 0)
    if (
        not kern.known
        or variant.eps  # D + eps = 0 or a floor max(D, eps): left to the float decision
        or has_structure(variant)
        or getattr(variant, "score_bias", None)
        or getattr(variant, "key_padding", None)
        or tuple(x.k.shape[:2]) != (B, H)
        or B * H * T * S * (d + d_v) > MAX_TERMS
    ):
        return None
    rational = kern.order is not None or kern.map in ("identity", "relu")
    if not rational and not (kern.family == "softmax" and mode in NORM_MODES):
        return None
    qf, kf, vf = (t.detach().cpu().double().numpy() for t in (x.q, x.k, x.v))
    vis = np.broadcast_to(x.visible(), (B, H, T, S))
    c = Fraction(variant.score_scale(d))
    for b, h, t in np.ndindex(B, H, T):
        keys = [s for s in range(S) if vis[b, h, t, s]]
        if not keys:
            continue  # an empty row is defined: zeros (the API's convention)
        q = [Fraction(float(a)) for a in qf[b, h, t]]
        scores = [_score(kern, c, q, kf[b, h, s]) for s in keys]
        if mode == "sum":
            rows[b, h, t] = sum(scores) == 0
            continue
        vals = [[Fraction(float(a)) for a in vf[b, h, s]] for s in keys]
        if mode == "layernorm":  # N_t constant over channels: N_tj - N_t0 = 0 for every j
            vals = [[a - row[0] for a in row] for row in vals]
        if rational:
            rows[b, h, t] = all(
                sum(w * row[j] for w, row in zip(scores, vals)) == 0 for j in range(d_v)
            )
        else:  # exp weights: each group of equal scores must cancel (Lindemann-Weierstrass)
            groups: dict[Fraction, list[Fraction]] = {}
            for x_s, row in zip(scores, vals):
                acc = groups.setdefault(x_s, [Fraction(0)] * d_v)
                groups[x_s] = [a + r for a, r in zip(acc, row)]
            rows[b, h, t] = all(a == 0 for acc in groups.values() for a in acc)
    return rows


def _score(kern, c: Fraction, q: list[Fraction], k_row) -> Fraction:
    """The exact kernel value (kappa_N, identity, relu) or, for exp, the exact score c q.k."""
    k = [Fraction(float(a)) for a in k_row]
    zero = Fraction(0)
    if kern.map == "relu":
        return sum((max(c * a, zero) * max(b, zero) for a, b in zip(q, k)), zero)
    xs = c * sum((a * b for a, b in zip(q, k)), zero)  # identity: a q.k; else the score
    if kern.map == "identity":
        return xs
    if kern.order is None:
        return xs  # exp: the score itself (grouped by the caller)
    return sum((xs**n / math.factorial(n) for n in range(kern.order + 1)), Fraction(0))


def all_undefined(variant, x, mode: str) -> bool:
    """Every row of ``x`` is exactly undefined in ``mode`` (:func:`undefined_rows`; False where
    not decided here, or where a row has no visible key: its zeros are stated)."""
    rows = undefined_rows(variant, x, mode)
    return rows is not None and bool(rows.all())


def any_undefined(variant, x, mode: str) -> bool:
    """Some row of ``x`` is exactly undefined in ``mode`` (:func:`undefined_rows`)."""
    rows = undefined_rows(variant, x, mode)
    return rows is not None and bool(rows.any())
