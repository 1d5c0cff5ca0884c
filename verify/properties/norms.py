"""Norm properties: D7 checked on a variant's own outputs (claims: ``sum`` and one of
``l2``/``rms``/``layernorm`` among the ``denominators``).

- ``norm-identities``: Norm(N_t) = Norm(o_t) without eps (sign(D_t) for signed kernels); with
  eps the gap equals the exact eps gap of ``derivations.norms``, within the rounding bounds
  (``verify.exact.errors``, D10) and the normalization sensitivity of ``derivations.norms``.
"""

from __future__ import annotations

import math

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.claims import dtype_reason, projection_reason
from verify.properties.support.common import Example, exact_and_bound, radius_strategy
from verify.properties.support.inputs import inputs_with_radius
from verify.properties.support.observe import DPS, EXPORT_ROUNDINGS, U64, np64
from verify.properties.support.paths import call_mode, require_mode
from verify.spec.results import NotApplicable, Observation

NORM_MODES = ("l2", "rms", "layernorm")


def _norm_applies(variant, ctx) -> str | None:
    modes = [m for m in NORM_MODES if m in variant.denominators]
    if "sum" not in variant.denominators or not modes:
        return "needs denominator modes 'sum' and one of l2/rms/layernorm (D7)"
    return projection_reason(variant, "no exact reference") or dtype_reason(variant, ctx)


def _norm_examples(variant, ctx):
    from hypothesis import strategies as st

    modes = [m for m in NORM_MODES if m in variant.denominators]
    return st.builds(
        lambda x, mode: Example(x, {"denominator": mode}),
        inputs_with_radius(variant, ctx, radius_strategy(variant, ctx)),
        st.sampled_from(modes),
    )


def _mp_norm(kind: str, y: list):
    """Norm(y) and its statistic in mpmath (no eps): l2, rms, layernorm (population var)."""
    import mpmath

    n = len(y)
    if kind == "layernorm":
        mu = mpmath.fsum(y) / n
        y = [t - mu for t in y]
    s = mpmath.sqrt(mpmath.fsum(t * t for t in y) / (1 if kind == "l2" else n))
    if s == 0:
        return None, s
    return [t / s for t in y], s


def _norm_check(variant, ex: Example, ctx) -> list[Observation]:
    import mpmath
    import torch

    from derivations import norms as d7
    from derivations import rounding as d10
    from verify.attention import l2_normalize, layer_normalize, rms_normalize

    x = ex.inputs
    mode = ex.choices["denominator"]
    d_v = x.v.shape[-1]
    require_mode(mode, d_v)
    eps = float(variant.eps)
    ref_m, eb_m = exact_and_bound(variant, x, ctx, denominator=mode)
    ref_s, eb_s = exact_and_bound(variant, x, ctx, denominator="sum")
    y = np64(call_mode(variant, x, mode, allow_nonfinite=True))
    o_hat = call_mode(variant, x, "sum", allow_nonfinite=True)
    norm_fn = {"l2": l2_normalize, "rms": rms_normalize, "layernorm": layer_normalize}[mode]
    n_hat = np64(norm_fn(o_hat.detach().to(torch.float64)))
    obs: list[Observation] = []
    gaps = []
    with mpmath.workdps(DPS):
        for idx in np.ndindex(ref_s.count.shape):
            if ref_s.count[idx] == 0:
                continue
            D = ref_s.denominator[idx]
            if D == 0 or D + eps == 0:
                continue
            N_t = list(ref_s.numerator[idx])
            o_t = [t / D for t in N_t]
            target, stat = _mp_norm(mode, o_t)  # Norm(o_t) (exact)
            if stat == 0:
                continue
            sigma = 1 if D + eps > 0 else -1  # Norm(o_hat) = sign(D + eps) Norm(N)
            sign_d = 1 if D > 0 else -1  # Norm(N) = sign(D) Norm(o)
            if eps == 0:
                gap = 0.0
            elif mode == "l2":
                gap = d7.l2_eps_gap(eps, float(abs(D)), float(stat))
            elif mode == "rms":
                gap = d7.rms_eps_gap(eps, float(abs(D)), float(stat), d_v)
            else:
                gap = d7.layernorm_eps_gap(eps, float(abs(D)), float(stat), d_v)
            gaps.append(gap)
            # exact D7 check: ||Norm_eps(N) - sign(D) Norm(o)|| equals the exported gap
            exact_gap = mpmath.sqrt(
                mpmath.fsum((a - sign_d * b) ** 2 for a, b in zip(ref_m.exact[idx], target))
            )
            obs.append(
                Observation(
                    abs(float(exact_gap) - gap),
                    EXPORT_ROUNDINGS * U64 * max(gap, 0.0) + 2.0 ** -(3 * DPS),
                    "derived",
                    where=str(idx),
                    detail=f"exact ||Norm_eps(N) - Norm(o)|| = {float(exact_gap):.6e} vs "
                    f"derivations.norms gap {gap:.6e} (eps = {eps})",
                )
            )
            # the variant: ||y - sigma' Norm(o_hat)|| = gap within both computations' bounds
            e1 = float(np.sqrt(np.sum(eb_m.bound[idx] ** 2)))
            o_s = [float(t) for t in ref_s.exact[idx]]
            if mode == "layernorm":
                mu = sum(o_s) / d_v
                vec_norm = math.sqrt(sum((t - mu) ** 2 for t in o_s))
                ratio = abs(mu) * math.sqrt(d_v) / vec_norm if vec_norm > 0 else math.inf
            else:
                vec_norm = math.sqrt(sum(t * t for t in o_s))
                ratio = None
            vec_norm *= 1 - 4 * U64  # a lower bound on the exact norm (float64 evaluation)
            err_s = float(np.sqrt(np.sum(eb_s.bound[idx] ** 2)))
            sens = d7.normalization_sensitivity(mode, err_s, vec_norm, d_v, 0.0)
            rnd = (
                d10.normalization_rounding_bound(mode, d_v, U64, ratio)
                if math.isfinite(ratio or 0.0)
                else math.inf
            )
            bound = e1 + sens + rnd + EXPORT_ROUNDINGS * U64 * gap
            if not math.isfinite(bound):
                continue
            measured = float(np.sqrt(np.sum((y[idx] - sigma * n_hat[idx]) ** 2)))
            obs.append(
                Observation(
                    abs(measured - gap),
                    bound,
                    "derived",
                    where=str(idx),
                    detail=f"||{mode}(N_t) - {mode}(o_t)||_2 measured {measured:.6e}, D7 "
                    f"gap {gap:.6e} (eps = {eps}); bound: mode {e1:.2e} + sensitivity "
                    f"{sens:.2e} + rounding {rnd:.2e}",
                )
            )
    if not obs:  # every row failed an exact (mpmath) test above: the same on every machine
        raise NotApplicable("no row with a visible key, a nonzero D and a positive statistic")
    return obs


NORM_IDENTITIES = declare("norm-identities", _norm_applies, _norm_examples, _norm_check)


PROPERTIES = (NORM_IDENTITIES,)
