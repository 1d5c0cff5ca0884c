"""Form agreement and the streaming state API (D2; fault classes 1, 2, 3, 7).

- ``forms-agree``: ``forward`` and every entry of ``variant.forms`` (parallel, recurrent,
  chunked with C = 1, C not dividing T, C > T for the built-ins) compute the same exact value;
  the bound is the sum of their two D10 bounds, the form kind parsed from the form's name.
- ``state-step``: prefill(x[:T-1]) then step(x[T-1]) equals the causal forward at every row
  (the last row of a causal pass is one decode step over the same keys).
- ``state-split-resume``: for every split s, concat(prefill(x[:s]), prefill(x[s:], state))
  equals the causal forward, and prefill(x) in one go too.

For the project's own :class:`~verify.attention.state.AttentionState` the states are compared
as well: the token count and the visible-key count exactly, the numerator
S = sum_s phi(k_s) v_s^T and the denominator z = sum_s phi(k_s) elementwise within twice the
D10 bound of one such sum (``derivations.rounding.weighted_sum_relative_bound`` with the
feature error of the kernel, relative to a majorant of sum_s |phi_m(k_s)| |v_sj|). A
third-party state is opaque: outputs only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.calls import call, prefill, step
from verify.properties.support.claims import oracle_applies
from verify.properties.support.common import MAX_LEN, Example, error_bound, exact_and_bound
from verify.properties.support.inputs import plain_inputs, restrict, shaped_inputs
from verify.properties.support.observe import array_observation, diff, np64
from verify.properties.support.paths import (
    FormView,
    call_kwargs,
    convention_mode,
    form_kind,
    mode_st,
    modes,
)
from verify.spec.kernel import taylor_order
from verify.spec.results import Observation

# --------------------------------------------------------------------------- states (D10)


def _is_project_state(*states) -> bool:
    from verify.attention.state import AttentionState

    return all(isinstance(s, AttentionState) for s in states)


def _state_majorants(state, k: np.ndarray, v: np.ndarray, exp_ulps: float):
    """(A_num (B, H, m, d_v), A_den (B, H, m), e_phi, u, X_num, X_den) with A_num >= sum_s
    |phi_m(k_s)||v_sj| and A_den >= sum_s |phi_m(k_s)|, and X the absolute feature error's
    sums (elu+1: sum over k_s <= 0 of a'|v_s|, a' = D10's absolute part; 0 for the other
    maps); None for kernels whose features are not modelled.

    Taylor blocks (both bases): |phi_alpha(k~)| = |k~^alpha| / sqrt(alpha!) <= max_i|k~_i|^n and
    |k~^{(x)n}|/sqrt(n!) <= max_i|k~_i|^n for order n, k~ = sqrt(c) k (D1); identity and relu:
    |phi_i(k)| <= |k_i|; elu1: elu(k_i) + 1 <= max(k_i, 0) + 1 (and its absolute error);
    FAVOR+: exp(w_m . k~ - |k~|^2/2)/sqrt(M) <= exp(max_m sum_i |w_mi k~_i| - |k~|^2/2)/sqrt(M).
    Float64 evaluations are inflated by their own rounding bound.
    """
    from derivations import rounding as d10

    u = d10.unit_roundoff(str(state.accumulation_dtype).removeprefix("torch."))
    u64 = d10.unit_roundoff("float64")
    B, H, T, d = k.shape
    kern = state.kernel
    ak = np.abs(k)
    N = taylor_order(kern)
    if N is not None:
        kt = math.sqrt(state.scale) * ak.max(axis=-1)  # (B, H, T)
        per_block = [kt**n * (1 + d10.gamma(n + 3, u64)) for n in range(N + 1)]
        a = np.concatenate(
            [
                np.repeat(p[..., None], size, axis=-1)
                for p, size in zip(per_block, state.block_sizes)
            ],
            axis=-1,
        )  # (B, H, T, m)
        e_phi = d10.taylor_feature_relative_error(N, u)
    elif kern in ("identity", "relu"):
        a, e_phi = ak, 0.0
    elif kern == "elu1":
        e_phi = d10.elu1_feature_relative_error(float(ak.max(initial=0.0)), u, exp_ulps)
        if e_phi >= 1.0:
            return None
        # phi(k) <= max(k, 0) + 1 (one float64 addition); the cancelling elu(k) + 1 of k <= 0
        # has an absolute error a' = a / (1 - e_phi) besides (D10, verify.exact.error_terms):
        # phi' = phi + alpha/(1 + t) carries the relative model, |phi' - phi| <= a'
        a_abs = d10.elu1_feature_absolute_error(u, exp_ulps) / (1.0 - e_phi)
        extra = np.where(k <= 0, a_abs, 0.0) * (1 + d10.gamma(1, u64))
        a = (np.maximum(k, 0.0) + 1.0) * (1 + d10.gamma(1, u64)) + extra
    elif kern == "favor" and state.projection is not None:
        P = np.abs(state.projection.detach().cpu().double().numpy())  # (M, d)
        kt = math.sqrt(state.scale) * ak
        proj = (kt @ P.T).max(axis=-1)  # (B, H, T)
        sq = (kt * kt).sum(-1)
        expo = proj - sq / 2 + d10.gamma(d + 4, u64) * (proj + sq / 2)
        M = P.shape[0]
        # float64 exp (<= 1 ulp), sqrt and division: within gamma_6 of the exact quotient
        per = np.exp(expo) / math.sqrt(M) * (1 + d10.gamma(6, u64))
        a = np.repeat(per[..., None], M, axis=-1)
        e_phi = d10.favor_feature_relative_error(
            float(proj.max(initial=0.0)), float(sq.max(initial=0.0)), d, u, exp_ulps
        )
    else:
        return None
    A_num = np.einsum("bhtm,bhtj->bhmj", a, np.abs(v)) * (1 + d10.gamma(T + 1, u64))
    A_den = a.sum(axis=2) * (1 + d10.gamma(T, u64))
    if kern != "elu1":
        return A_num, A_den, e_phi, u, 0.0, 0.0
    X_num = np.einsum("bhtm,bhtj->bhmj", extra, np.abs(v)) * (1 + d10.gamma(T + 1, u64))
    X_den = extra.sum(axis=2) * (1 + d10.gamma(T, u64))
    return A_num, A_den, e_phi, u, X_num, X_den


def state_observations(s1, s2, x, variant, ctx, what: str) -> list[Observation]:
    """Compare two project states that absorbed the same T tokens of ``x`` (outputs only for
    third-party states: returns [])."""
    import torch

    from derivations import rounding as d10
    from verify.exact import errors

    if not _is_project_state(s1, s2):
        return []
    obs = []
    same_tokens = s1.tokens == s2.tokens
    obs.append(
        Observation(
            0.0 if same_tokens else 1.0,
            0.0,
            "exact",
            "",
            f"{what}: tokens {s1.tokens} vs {s2.tokens}",
        )
    )
    c1, c2 = s1.count.detach().cpu(), s2.count.detach().cpu()
    same = c1.shape == c2.shape and bool(torch.equal(c1, c2))
    obs.append(
        Observation(
            0.0 if same else 1.0,
            0.0,
            "exact",
            "",
            f"{what}: visible-key counts {c1.tolist()} vs {c2.tolist()}",
        )
    )
    dev = "cuda" if str(ctx.device).startswith("cuda") else "cpu"
    lib = variant.exp_library or errors.DEFAULT_EXP_LIBRARY[dev]
    maj = _state_majorants(s1, np64(x.k), np64(x.v), d10.LIBRARY_EXP_ULPS[lib].value)
    if maj is None:
        return obs
    A_num, A_den, e_phi, u, X_num, X_den = maj
    T = x.shape.T
    # one product and at most T - 1 additions per term in any summation order, plus at most one
    # join per chunk or segment boundary (<= T): n_terms = 2T
    rel_num = d10.weighted_sum_relative_bound(2 * T, e_phi, u, True)
    rel_den = d10.weighted_sum_relative_bound(2 * T, e_phi, u, False)
    # each state is within rel A of the exact state of phi' (features with the absolute part
    # of their error moved out), and phi' within X of phi: 2 (rel A + X) between two states
    terms = (("numerator", rel_num, A_num, X_num), ("denominator", rel_den, A_den, X_den))
    for name, rel, A, X in terms:
        a, b = np64(getattr(s1, name)), np64(getattr(s2, name))
        if a.shape != b.shape or a.shape != A.shape:
            obs.append(
                Observation(
                    1.0,
                    0.0,
                    "exact",
                    "",
                    f"{what}: {name} shapes {a.shape} vs {b.shape} (expected {A.shape})",
                )
            )
            continue
        bound = 2.0 * (rel * A + X)
        obs.append(array_observation(diff(a, b), bound, what=f"{what}: state {name}"))
    return obs


# --------------------------------------------------------------------------- forms agree


def _forms_applies(variant, ctx):
    if not variant.forms:
        return "the variant exposes no alternative forms (forms={})"
    return oracle_applies(variant, ctx)


def _forms_examples(variant, ctx):
    from hypothesis import strategies as st

    base = plain_inputs(variant, ctx, T=(1, 12))

    @st.composite
    def draw(draw_):
        x = draw_(base)
        return Example(x, {"denominator": draw_(mode_st(variant, x))})

    return draw()


def _forms_check(variant, ex: Example, ctx):
    x, mode = ex.inputs, ex.choices["denominator"]
    ref, eb_fwd = exact_and_bound(variant, x, ctx, denominator=mode, form="any")
    kinds = {form_kind(f) for f in variant.forms}
    ebs = {k: error_bound(variant, x, ctx, ref, denominator=mode, form=k) for k in kinds}
    kw = call_kwargs(variant, mode)
    o = np64(call(variant, x.q, x.k, x.v, causal=x.causal, allow_nonfinite=True, **kw))
    obs = []
    for name in sorted(variant.forms):
        bound = eb_fwd.bound + ebs[form_kind(name)].bound
        of = call(
            FormView(variant, name), x.q, x.k, x.v, causal=x.causal, allow_nonfinite=True, **kw
        )
        obs.append(
            array_observation(
                diff(o, np64(of)), bound, what=f"forward vs {name} ({mode}, causal={x.causal})"
            )
        )
    return obs


FORMS_AGREE = declare("forms-agree", _forms_applies, _forms_examples, _forms_check)


# --------------------------------------------------------------------------- state API


def _state_applies(variant, ctx):
    if variant.state_api is None:
        return "the variant has no state API (state_api=None)"
    if why := oracle_applies(variant, ctx, causal=True):
        return why
    if not modes(variant, (convention_mode(variant),)):
        return "the claimed normalization is not among the claimed denominator modes"
    return None


def _state_examples(variant, ctx):
    return shaped_inputs(variant, ctx, causal=True, T=(2, MAX_LEN))


def _step_examples(variant, ctx):
    return _state_examples(variant, ctx).map(lambda x: Example(x, {}))


def _forward_and_bound(variant, x, ctx):
    """The causal forward output and twice its D10 bound (two computations, form unknown)."""
    mode = convention_mode(variant)
    ref, eb = exact_and_bound(variant, x, ctx, denominator=mode, form="any")
    kw = call_kwargs(variant, mode)
    finite = bool(np.isfinite(eb.bound).all())
    o = call(variant, x.q, x.k, x.v, causal=True, allow_nonfinite=not finite, **kw)
    return np64(o), 2.0 * eb.bound, not finite


def _step_check(variant, ex: Example, ctx):
    import torch

    x = ex.inputs
    T = x.shape.T
    o_full, bound, nonfinite = _forward_and_bound(variant, x, ctx)
    px = restrict(x, length=T - 1)
    o_pre, st = prefill(variant, px.q, px.k, px.v, allow_nonfinite=nonfinite)
    q_t, k_t, v_t = (t[:, :, T - 1] for t in (x.q, x.k, x.v))
    o_last, st2 = step(variant, st, q_t, k_t, v_t, allow_nonfinite=nonfinite)
    o_stream = torch.cat([o_pre, o_last[:, :, None]], 2)
    obs = [
        array_observation(
            diff(o_full, np64(o_stream)),
            bound,
            what=f"causal forward vs prefill({T - 1} tokens) + step (T = {T})",
        )
    ]
    if _is_project_state(st2):
        _, st_one = prefill(variant, x.q, x.k, x.v, allow_nonfinite=nonfinite)
        obs += state_observations(
            st2, st_one, x, variant, ctx, f"prefill({T - 1}) + step vs prefill({T})"
        )
    return obs


STATE_STEP = declare("state-step", _state_applies, _step_examples, _step_check)


def _split_check(variant, ex: Example, ctx):
    import torch

    x = ex.inputs
    T = x.shape.T
    o_full, bound, nonfinite = _forward_and_bound(variant, x, ctx)
    o_one, st_one = prefill(variant, x.q, x.k, x.v, allow_nonfinite=nonfinite)
    obs = [
        array_observation(
            diff(o_full, np64(o_one)), bound, what=f"causal forward vs prefill in one go (T = {T})"
        )
    ]
    for s in range(1, T):
        o_a, st_a = prefill(
            variant, x.q[:, :, :s], x.k[:, :, :s], x.v[:, :, :s], allow_nonfinite=nonfinite
        )
        o_b, st_b = prefill(
            variant, x.q[:, :, s:], x.k[:, :, s:], x.v[:, :, s:], st_a, allow_nonfinite=nonfinite
        )
        o_split = torch.cat([o_a, o_b], 2)
        obs.append(
            array_observation(
                diff(o_full, np64(o_split)),
                bound,
                what=f"causal forward vs prefill split at s = {s} and resumed (T = {T})",
            )
        )
        obs += state_observations(
            st_b, st_one, x, variant, ctx, f"split at s = {s} vs prefill in one go"
        )
    return obs


STATE_SPLIT_RESUME = declare("state-split-resume", _state_applies, _step_examples, _split_check)

PROPERTIES: tuple[Any, ...] = (FORMS_AGREE, STATE_STEP, STATE_SPLIT_RESUME)
