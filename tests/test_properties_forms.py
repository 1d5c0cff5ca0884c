"""Form agreement and state API properties (verify.properties.forms): pass on the built-in
variants, fail on faulty twins (fault classes 1, 2, 3) with a counterexample, skip where they do not
apply."""

from __future__ import annotations

import dataclasses
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from property_asserts import checks

from verify import builtins as variants
from verify.attention import state as st
from verify.properties import forms as P
from verify.properties.support.base import RunContext
from verify.properties.support.observe import worst
from verify.spec.variant import AttentionVariant, StateAPI

BUILTINS = ("taylor-2", "taylor-3", "linear-elu1")
DTYPES = ("float64", "float32")
EXAMPLES = 4
_checks = checks(EXAMPLES)
run, assert_fails = _checks.run, _checks.assert_fails


# ----------------------------------------------------------------------------- twins


def _elu1(x):
    return F.elu(x) + 1.0


def _chunked_elu1(q, k, v, *, causal, chunk_size, reads_current=False):
    """elu1 linear attention, chunked: tril(A_c) v_c + phi(q_c) S_(c), S_(c) the state before
    chunk c; ``reads_current`` is fault class 1 (the state after chunk c is read instead)."""
    fq, fk = _elu1(q), _elu1(k)
    va = torch.cat([v, torch.ones_like(v[..., :1])], -1)
    if not causal:
        out = fq @ (fk.transpose(-1, -2) @ va)
    else:
        state = torch.zeros(*q.shape[:2], fq.shape[-1], va.shape[-1], dtype=q.dtype)
        outs = []
        for lo in range(0, q.shape[2], chunk_size):
            sl = slice(lo, lo + chunk_size)
            A = (fq[:, :, sl] @ fk[:, :, sl].transpose(-1, -2)).tril()
            kv = fk[:, :, sl].transpose(-1, -2) @ va[:, :, sl]
            read = state + kv if reads_current else state
            outs.append(A @ va[:, :, sl] + fq[:, :, sl] @ read)
            state = state + kv
        out = torch.cat(outs, 2)
    return out[..., :-1] / out[..., -1:]


def _parallel_elu1(q, k, v, *, causal):
    A = _elu1(q) @ _elu1(k).transpose(-1, -2)
    if causal:
        A = A.tril()
    return (A @ v) / A.sum(-1, keepdim=True)


def chunked_twin(bad_chunk: int | None):
    forms = {
        f"chunked/C={c}": partial(_chunked_elu1, chunk_size=c, reads_current=c == bad_chunk)
        for c in (1, 3, 64)
    }
    return AttentionVariant(
        name="elu1-chunked", forward=_parallel_elu1, kernel="linear:elu1", forms=forms
    )


def _state_twin(prefill, step=st.step, name="taylor-2"):
    return variants.get(name).with_claims(state_api=StateAPI(prefill=prefill, step=step))


def _padded_prefill(q, k, v, state=None):
    """Fault class 2: the segment is zero-padded to the chunk size and the padding enters the state
    (phi(0) = [1, 0, ...] for Taylor features)."""
    T = q.shape[2]
    extra = (-T) % 64

    def pad(x):
        return F.pad(x, (0, 0, 0, extra))

    o, s = st.prefill(
        pad(q), pad(k), pad(v), kernel="taylor:2", state=state, form="chunked", chunk_size=64
    )
    return o[:, :, :T], s


def _forgetful_prefill(q, k, v, state=None):
    """Fault class 3: resuming restarts the denominator (only the numerator is carried)."""
    if state is not None:
        state = dataclasses.replace(state, denominator=torch.zeros_like(state.denominator))
    return st.prefill(q, k, v, kernel="taylor:2", state=state)


def _count_restarting_prefill(q, k, v, state=None):
    """Resuming restarts the visible-key count: 'sum' outputs are still right, the state not."""
    if state is not None:
        state = dataclasses.replace(state, count=torch.zeros_like(state.count))
    return st.prefill(q, k, v, kernel="taylor:2", state=state)


class _Opaque:
    """A third-party state object: the properties must treat it as opaque."""

    def __init__(self, inner):
        self._inner = inner


def _opaque_prefill(q, k, v, state=None):
    o, s = st.prefill(q, k, v, kernel="taylor:2", state=None if state is None else state._inner)
    return o, _Opaque(s)


def _opaque_step(state, q_t, k_t, v_t):
    o, s = st.step(state._inner, q_t, k_t, v_t)
    return o, _Opaque(s)


# ----------------------------------------------------------------------------- built-ins


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BUILTINS)
@pytest.mark.parametrize("prop", P.PROPERTIES, ids=lambda p: p.id)
def test_passes_on_builtins(prop, name, dtype):
    res = run(prop, variants.get(name), dtype)
    assert res.status == "pass", res.reason
    assert res.examples >= 1
    assert res.max_ratio is not None and res.max_ratio <= 1.0


@pytest.mark.parametrize("prop", P.PROPERTIES, ids=lambda p: p.id)
def test_bfloat16(prop):
    """bf16 inputs: fp32 accumulation and state, the two-level model (D10)."""
    res = run(prop, variants.get("taylor-2"), "bfloat16", n=4)
    assert res.status == "pass", res.reason


def test_skips_with_reasons():
    sm = variants.get("softmax")
    expect = [
        (P.FORMS_AGREE, sm, "no alternative forms"),
        (P.STATE_STEP, sm, "no state API"),
        (P.STATE_SPLIT_RESUME, sm, "no state API"),
        (P.STATE_STEP, variants.get("taylor-2").with_claims(causal="no"), "causal=True"),
        (P.FORMS_AGREE, chunked_twin(None).with_claims(kernel="unknown"), "kernel unknown"),
    ]
    for prop, variant, fragment in expect:
        res = run(prop, variant)
        assert res.status == "skip", (prop.id, variant.name, res.status, res.reason)
        assert fragment in res.reason, (prop.id, res.reason)


def test_opaque_third_party_state_is_compared_by_outputs():
    twin = _state_twin(_opaque_prefill, _opaque_step)
    assert run(P.STATE_STEP, twin).status == "pass"
    assert run(P.STATE_SPLIT_RESUME, twin).status == "pass"


# ----------------------------------------------------------------------------- twins fail


def test_forms_agree_catches_a_chunk_reading_its_own_state(no_shrink):
    """Fault class 1: agree on the first chunk, diverge after; C = 1 and C > T stay correct."""
    assert run(P.FORMS_AGREE, chunked_twin(None)).status == "pass"
    assert_fails(run(P.FORMS_AGREE, chunked_twin(3), "float32"), "chunked/C=3")


def test_state_step_catches_padding_in_the_state(no_shrink):
    """Fault class 2: Taylor-2, chunk 64: prefill of T - 1 tokens + one step vs the forward."""
    twin = _state_twin(_padded_prefill)
    assert_fails(run(P.STATE_STEP, twin), "prefill(")
    assert_fails(run(P.STATE_SPLIT_RESUME, twin))


def test_split_resume_catches_a_restarted_denominator(no_shrink):
    """Fault class 3: any T >= 2 split at s = 1; the one-segment paths stay correct."""
    twin = _state_twin(_forgetful_prefill)
    assert_fails(run(P.STATE_SPLIT_RESUME, twin), "split at s = ")
    assert run(P.STATE_STEP, twin).status == "pass"


def test_split_resume_compares_project_states(no_shrink):
    """Outputs right ('sum' does not read the count), the resumed state's count wrong."""
    res = run(P.STATE_SPLIT_RESUME, _state_twin(_count_restarting_prefill))
    assert_fails(res, "visible-key counts")
    assert res.bound_kind == "exact"


def test_state_bounds_are_stated_for_each_kernel():
    """The state comparison has a finite, non-trivial bound for every built-in kernel."""
    import numpy as np

    from verify.properties.support.base import RunContext as Ctx
    from verify.properties.support.common import Example
    from verify.strategies import AttentionInputs, Shape

    g = torch.Generator().manual_seed(0)
    shape = Shape(B=1, H=2, T=5, S=5, d=3, d_v=2)
    q, k, v = (
        torch.rand(*s, generator=g, dtype=torch.float64) - 0.5 for s in (shape.q, shape.k, shape.v)
    )
    x = AttentionInputs(q=q, k=k, v=v, causal=True, scale=None, radius=None, shape=shape)
    for name in ("taylor-3", "linear-elu1", "linear-identity", "linear-favor"):
        variant = variants.get(name)
        obs = P._split_check(variant, Example(x, {}), Ctx())
        state_obs = [o for o in obs if "state numerator" in o.detail]
        assert len(state_obs) == 4, name  # s = 1..4
        assert all(np.isfinite(o.bound) and o.bound > 0 for o in state_obs), name
        assert all(o.ratio <= 1.0 for o in obs), name


# ----------------------------------------------------------------------------- fault-class triggers


def _inputs(T, *, d=2, d_v=2, dtype=torch.float64, seed=0):
    from verify.strategies import AttentionInputs, Shape

    g = torch.Generator().manual_seed(seed)
    shape = Shape(B=1, H=2, T=T, S=T, d=d, d_v=d_v)
    q, k, v = (
        (2 * torch.rand(*s, generator=g, dtype=torch.float64) - 1).to(dtype)
        for s in (shape.q, shape.k, shape.v)
    )
    return AttentionInputs(q=q, k=k, v=v, causal=True, scale=None, radius=None, shape=shape)


def test_faults_1_trigger_twelve_tokens_chunk_three():
    """T = 12, chunk 3, float32: agree on the first chunk, diverge after."""
    from verify.properties.support.common import Example

    ex = Example(_inputs(12, dtype=torch.float32), {"denominator": "sum"})
    ctx = RunContext(dtype="float32")
    obs = P.FORMS_AGREE.check(chunked_twin(3), ex, ctx)
    bad = {o.detail.split(" (")[0]: o.ratio for o in obs}
    assert bad["forward vs chunked/C=3"] > 1
    assert bad["forward vs chunked/C=1"] <= 1 and bad["forward vs chunked/C=64"] <= 1
    assert worst(P.FORMS_AGREE.check(chunked_twin(None), ex, ctx)).ratio <= 1


def test_faults_2_trigger_taylor2_five_tokens_chunk_64():
    """Taylor-2, T = 5, chunk 64: prefill of 4 tokens + one step against the forward."""
    from verify.properties.support.common import Example

    ex = Example(_inputs(5), {})
    assert worst(P.STATE_STEP.check(_state_twin(_padded_prefill), ex, RunContext())).ratio > 1
    assert worst(P.STATE_STEP.check(variants.get("taylor-2"), ex, RunContext())).ratio <= 1


def test_faults_3_trigger_split_at_one():
    """Any T >= 2 split at s = 1: the running key sum must be carried."""
    from verify.properties.support.common import Example

    ex = Example(_inputs(2), {})
    obs = P.STATE_SPLIT_RESUME.check(_state_twin(_forgetful_prefill), ex, RunContext())
    split = [o for o in obs if "split at s = 1" in o.detail and "state" not in o.detail]
    assert split and split[0].ratio > 1
