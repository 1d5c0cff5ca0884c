"""D19: the backward pass of the recurrent and chunked forms is a reverse-time RNN.

- the record (``derivations.reverse_rnn``) verifies, and its wrong statements (reverse state not
  accumulated, off by one step, the query reading the state before its own key) fail;
- the implementation (``verify.attention.reverse``) returns the forward of the autograd path bit
  for bit, and its gradients are within the D19 bound (``verify.attention.reverse_bound``: D10's
  feature-form coefficient with the reverse sums' term counts, plus the reference's own bound)
  of float64 autograd of the parallel form, on hypothesis-drawn inputs in float64 and float32;
  the bound is not vacuous (largest observed/bound > 1e-3), and the faulty twins exceed it;
- it stores O(T/C) states (counted with ``saved_tensors_hooks``), autograd O(T).
"""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import derivations
from derivations import reverse_rnn as d19
from derivations._record import Status
from verify.attention import _kernels, _scan, reverse
from verify.attention.linear import linear_attention
from verify.attention.reverse_bound import gradient_bound
from verify.attention.structure import decay_powers
from verify.attention.taylor import taylor_attention
from verify.spec.visibility import visible
from verify.strategies import attention_inputs, shapes

#: a bound is "not vacuous" when some example comes within this factor of it
NOT_VACUOUS = 1e-3


# ------------------------------------------------------------------------------ the record
def test_record_verifies_with_general_steps_proved(derived):
    rec = derived("D19")
    assert rec.id == "D19" and rec.status is Status.VERIFIED
    status = {c.name: c.status for c in rec.claims}
    for name in (
        "quotient rule: dL = g . dN + h dD with g = dO / D, h = -(dO . o) / D",
        "the reverse recursion unrolls to the decayed suffix sum (all t, T)",
        "gradient of the causal triangle sum at s = column sum over t >= s (all T, s)",
    ):
        assert status[name] is Status.PROVED, name
    instances = [n for n in status if n.startswith("exact instances")]
    assert len(instances) == 4 and all(status[n] is Status.VERIFIED for n in instances)
    assert all(hasattr(d19, name) for name in rec.exports)


def test_record_is_registered_in_order():
    ids = list(derivations.MODULES)
    assert derivations.MODULES["D19"] == "reverse_rnn"
    assert ids.index("D19") == ids.index("D17") + 1 + ("D18" in ids)
    assert derivations.module("D19") is d19


@pytest.mark.parametrize(
    "wrong",
    [
        {"reverse_state": "not-accumulated"},
        {"reverse_state": "off-by-one"},
        {"query_state": "before"},
    ],
)
def test_wrong_reverse_recurrences_fail_the_instances(wrong):
    rec = d19.derive(**wrong)
    assert rec.status is Status.FAILED
    failed = {c.name for c in rec.claims if c.status is Status.FAILED}
    assert failed == {
        f"exact instances: token-level reverse RNN == gradient of the parallel form ({b} basis)"
        for b in ("symmetric", "tensor")
    }


def test_record_rejects_unknown_overrides():
    with pytest.raises(TypeError, match="reverse_states"):
        d19.derive(reverse_states="accumulated")
    with pytest.raises(ValueError, match="reverse_state"):
        d19.derive(reverse_state="sideways")


def test_checkpoint_count():
    assert [d19.checkpoint_count(T, 4) for T in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    with pytest.raises(ValueError, match="chunk_size"):
        d19.checkpoint_count(4, 0)
    with pytest.raises(TypeError, match="length"):
        d19.checkpoint_count(4.0, 2)


# ------------------------------------------------------------------------------ helpers
def _kernel(fmap, d, dtype, basis="symmetric"):
    return _kernels.resolve_kernel(
        fmap, name="feature_map", d=d, device=torch.device("cpu"), dtype=dtype, basis=basis
    )


def _parallel_grads(fmap, q, k, va, ga, c, causal, decay):
    """float64 autograd of the parallel form sum_s w_ts va_s (the reference)."""
    q, k, va = (x.detach().double().requires_grad_(True) for x in (q, k, va))
    T, S = q.shape[-2], k.shape[-2]
    vis = visible(T, S, causal=True, device=q.device) if causal else None
    w = _kernel(fmap, q.shape[-1], torch.float64).parallel_weights(q, k, c, vis)
    if decay is not None:
        lags = torch.arange(T)[:, None] - torch.arange(S)
        w = w * decay_powers(torch.tensor(decay, dtype=torch.float64), lags, torch.float64)
    if vis is not None:
        w = torch.where(vis, w, 0.0)
    return torch.autograd.grad(w @ va, (q, k, va), ga.double())


def _ratios(got, ref, bounds):
    """max |got - ref| / bound per gradient (0/0 = 0: an exactly zero bound must be met)."""
    out = []
    for g, r, b in zip(got, ref, bounds):
        err = (g.double() - r).abs()
        assert torch.isfinite(err).all()
        ratio = torch.where(err == 0, torch.zeros_like(err), err / b)
        out.append(float(ratio.max()) if ratio.numel() else 0.0)
    return out


def _dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


def _function_case(fmap, q, k, v, ga, *, c, causal, form, chunk, decay, basis, fault=None):
    """Gradients of ``reverse_scan`` and their observed/bound against the parallel form."""
    va = torch.cat([v, torch.ones_like(v[..., :1])], -1)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, va)]
    gam = None if decay is None else torch.tensor(decay, dtype=q.dtype)
    out = reverse.reverse_scan(
        _kernel(fmap, q.shape[-1], q.dtype, basis), c, *leaves, causal=causal, form=form,
        chunk_size=chunk, decay=gam, fault=fault,
    )  # fmt: skip
    got = torch.autograd.grad(out, leaves, ga)
    ref = _parallel_grads(fmap, q, k, va, ga, c, causal, decay)
    bounds = gradient_bound(
        fmap, q, k, va, ga, scale=c, causal=causal, dtype=_dtype_name(q.dtype), basis=basis,
        decay=decay,
    )  # fmt: skip
    return _ratios(got, ref, bounds)


# ------------------------------------------------------------------------------ forward
@pytest.mark.parametrize("form", ["recurrent", "chunked"])
@pytest.mark.parametrize("causal,decay", [(True, None), (True, [0.9, 0.5]), (False, None)])
@pytest.mark.parametrize("fmap", ["taylor:2", "elu1", "relu"])
def test_forward_is_the_autograd_forward_bit_for_bit(form, causal, decay, fmap):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 21, 3, generator=g, requires_grad=True) for _ in range(3))
    outs = [
        linear_attention(
            q,
            k,
            v,
            feature_map=fmap,
            causal=causal,
            decay=decay,
            form=form,
            chunk_size=4,
            backward=bw,
        )  # fmt: skip
        for bw in ("reverse", "autograd")
    ]
    assert outs[0].grad_fn is not None  # relu: 0/0 = nan where no feature is positive
    torch.testing.assert_close(outs[0], outs[1], rtol=0.0, atol=0.0, equal_nan=True)


# ------------------------------------------------------------------------------ gradients
FUNCTION_CASES = ("random", "zeros", "equal_keys", "positive")


def _draws(dtype, cases, causal):
    return dict(
        inputs=attention_inputs(
            shapes(queries=(1, 12), dim=(1, 3), value_dim=(1, 3), causal=causal),
            dtype=dtype,
            causal=causal,
            radius=2.0,
            cases=cases,
            min_magnitude=2.0**-20,
        ),
        fmap=st.sampled_from(["taylor:1", "taylor:2", "taylor:3", "identity", "relu"]),
        form=st.sampled_from(["recurrent", "chunked"]),
        basis=st.sampled_from(["symmetric", "tensor"]),
        chunk=st.integers(1, 6),
        decayed=st.booleans(),
        normalized=st.booleans(),
        seed=st.integers(0, 2**16),
    )


def _cotangent(q, k, v, causal, fmap, c, normalized, seed, decay):
    """ga = [g; h]: random, or the normalized form's g = dO / D, h = -(dO . o) / D computed in
    float64 from the parallel form (then cast to the dtype)."""
    gen = torch.Generator().manual_seed(seed)
    B, H, T, d_v = q.shape[0], q.shape[1], q.shape[2], v.shape[-1]
    dO = torch.randn(B, H, T, d_v, generator=gen, dtype=torch.float64)
    if not normalized:
        return torch.cat([dO, torch.randn(B, H, T, 1, generator=gen, dtype=torch.float64)], -1)
    ones = torch.ones_like(v[..., :1])
    va = torch.cat([v, ones], -1).double()
    with torch.no_grad():
        vis = visible(T, k.shape[-2], causal=True, device=q.device) if causal else None
        w = _kernel(fmap, q.shape[-1], torch.float64).parallel_weights(
            q.double(), k.double(), c, vis
        )
        if decay is not None:
            lags = torch.arange(T)[:, None] - torch.arange(k.shape[-2])
            w = w * decay_powers(torch.tensor(decay, dtype=torch.float64), lags, torch.float64)
        if vis is not None:
            w = torch.where(vis, w, 0.0)
        nd = w @ va
    D = nd[..., -1:]
    D = torch.where(D == 0, torch.ones_like(D), D)
    o = nd[..., :-1] / D
    return torch.cat([dO / D, -(dO * o).sum(-1, keepdim=True) / D], -1)


def _check_function(inputs, fmap, form, basis, chunk, decayed, normalized, seed, seen):
    q, k, v = inputs.q, inputs.k, inputs.v
    causal = inputs.causal
    exp_type = fmap.startswith("taylor")
    c = inputs.scale if inputs.scale is not None else (q.shape[-1] ** -0.5 if exp_type else 1.0)
    decay = [0.9, 0.6][: q.shape[1]] if decayed and causal else None
    ga = _cotangent(q, k, v, causal, fmap, c, normalized, seed, decay).to(q.dtype)
    ratios = _function_case(
        fmap, q, k, v, ga, c=c, causal=causal, form=form, chunk=chunk, decay=decay, basis=basis
    )
    seen.append(max(ratios))
    assert max(ratios) <= 1.0, (fmap, form, ratios)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_function_gradients_within_the_d19_bound_and_not_vacuous(dtype, causal):
    """dq, dk, dva of ``reverse_scan`` (normalized or random cotangents, decayed or not) against
    float64 autograd of the parallel form: observed/bound <= 1 on every drawn example, and some
    example within a factor 1e-3 of the bound."""
    seen = []

    @given(**_draws(dtype, FUNCTION_CASES, causal))
    def run(inputs, fmap, form, basis, chunk, decayed, normalized, seed):
        _check_function(inputs, fmap, form, basis, chunk, decayed, normalized, seed, seen)

    run()
    assert max(seen) > NOT_VACUOUS, max(seen)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_public_unnormalized_gradients_within_the_d19_bound(dtype, causal):
    """End to end: taylor_attention / linear_attention (denominator='none': ga = [dO; 0]) in
    the recurrent and chunked forms with backward='reverse' against float64 autograd of the
    parallel form, large norms included (the forms rebalance q, k by a power of two)."""
    seen = []

    @given(**_draws(dtype, FUNCTION_CASES + ("large_norm",), causal))
    def run(inputs, fmap, form, basis, chunk, decayed, normalized, seed):
        q, k, v, causal = inputs.q, inputs.k, inputs.v, inputs.causal
        exp_type = fmap.startswith("taylor")
        c = inputs.scale if inputs.scale is not None else (q.shape[-1] ** -0.5 if exp_type else 1.0)
        decay = [0.9, 0.6][: q.shape[1]] if decayed and causal else None
        kw = dict(causal=causal, scale=c, denominator="none", decay=decay)
        leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
        if exp_type:
            out = taylor_attention(
                *leaves, order=int(fmap[7:]), form=form, basis=basis, chunk_size=chunk, **kw
            )
        else:
            out = linear_attention(*leaves, feature_map=fmap, form=form, chunk_size=chunk, **kw)
        dO = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)
        got = torch.autograd.grad(out, leaves, dO, allow_unused=True)
        got = [torch.zeros_like(x) if g is None else g for g, x in zip(got, leaves)]
        va = torch.cat([v, torch.ones_like(v[..., :1])], -1)
        ga = torch.cat([dO, torch.zeros_like(dO[..., :1])], -1)
        ref = _parallel_grads(fmap, q, k, va, ga, c, causal, decay)
        bq, bk, bva = gradient_bound(
            fmap, q, k, va, ga, scale=c, causal=causal, dtype=_dtype_name(dtype), basis=basis,
            decay=decay,
        )  # fmt: skip
        ratios = _ratios(got, [ref[0], ref[1], ref[2][..., :-1]], [bq, bk, bva[..., :-1]])
        seen.append(max(ratios))
        assert max(ratios) <= 1.0, (fmap, form, inputs.case, ratios)

    run()
    assert max(seen) > NOT_VACUOUS, max(seen)


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
@pytest.mark.parametrize("fault", ["not-accumulated", "off-by-one"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_faulty_twins_exceed_the_bound(form, fault, dtype):
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(1, 2, 12, 3, generator=g, dtype=dtype) for _ in range(3))
    ga = torch.randn(1, 2, 12, 4, generator=g, dtype=dtype)
    kw = dict(c=3**-0.5, causal=True, form=form, chunk=4, decay=None, basis="symmetric")
    right = _function_case("taylor:2", q, k, v, ga, **kw)
    wrong = _function_case("taylor:2", q, k, v, ga, fault=fault, **kw)
    assert max(right) <= 1.0 < max(wrong), (right, wrong)


def test_multi_segment_chunked_backward_within_the_bound(monkeypatch):
    """Small cache groups and backward batches: several stored states, the reverse state
    carried across them, each group's chunks in several batches."""
    monkeypatch.setattr(_scan, "GROUP_ELEMENTS", 64)
    monkeypatch.setattr(reverse, "BACKWARD_ELEMENTS", 16)
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 2, 23, 2, generator=g, dtype=torch.float32) for _ in range(3))
    ga = torch.randn(2, 2, 23, 3, generator=g, dtype=torch.float32)
    for decay in (None, [0.8, 0.95]):
        ratios = _function_case(
            "taylor:2", q, k, v, ga, c=0.5, causal=True, form="chunked", chunk=3, decay=decay,
            basis="tensor",
        )  # fmt: skip
        assert max(ratios) <= 1.0, ratios


# ------------------------------------------------------------------------------ memory
def _saved(fn, state_shape):
    """(elements of every saved tensor, elements of the saved state-shaped ones)."""
    total, states = [0], [0]

    def pack(t):
        total[0] += t.numel()
        if tuple(t.shape[-2:]) == state_shape:
            states[0] += t.numel()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total[0], states[0]


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_reverse_scan_saves_inputs_and_chunk_states_only(form):
    """reverse_scan keeps q, k, va and at most checkpoint_count(T, C) states; autograd through
    the token loop keeps one state per token."""
    B, H, T, d, d_v, C = 1, 2, 256, 4, 2, 16
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(B, H, T, d, generator=g, requires_grad=True) for _ in range(2))
    va = torch.randn(B, H, T, d_v + 1, generator=g, requires_grad=True)
    kern = _kernel("taylor:2", d, torch.float32)
    m = sum(kern.block_sizes(d))
    budget_states = d19.checkpoint_count(T, C) * B * H * m * (d_v + 1)
    budget = q.numel() + k.numel() + va.numel() + budget_states
    total, states = _saved(
        lambda: reverse.reverse_scan(kern, 0.5, q, k, va, causal=True, form=form, chunk_size=C),
        (m, d_v + 1),
    )
    assert total <= budget and states <= budget_states, (total, budget, states)
    if form == "recurrent":
        _, auto_states = _saved(
            lambda: _scan.scan(kern, 0.5, q, k, va, None, causal=True, form=form, chunk_size=C),
            (m, d_v + 1),
        )
        assert auto_states >= T * B * H * m * (d_v + 1) > budget_states


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_public_forms_save_o_t_over_c_states(form):
    """Through taylor_attention: the state-shaped tensors saved for backward are at most
    checkpoint_count(T, C) states with backward='reverse', at every length."""
    d, d_v, C = 3, 2, 8
    m = sum(_kernel("taylor:2", d, torch.float32).block_sizes(d))
    for T in (64, 256):
        g = torch.Generator().manual_seed(T)
        q, k = (torch.randn(1, 1, T, d, generator=g, requires_grad=True) for _ in range(2))
        v = torch.randn(1, 1, T, d_v, generator=g, requires_grad=True)
        call = functools.partial(
            taylor_attention, q, k, v, order=2, causal=True, form=form, chunk_size=C
        )
        _, states = _saved(call, (m, d_v + 1))
        assert states <= d19.checkpoint_count(T, C) * m * (d_v + 1), (T, states)
        if form == "recurrent":
            _, auto = _saved(functools.partial(call, backward="autograd"), (m, d_v + 1))
            assert auto >= T * m * (d_v + 1)


# ------------------------------------------------------------------------------ the API
def test_backward_keyword_is_validated():
    q = torch.randn(1, 1, 4, 2)
    with pytest.raises(ValueError, match="backward"):
        taylor_attention(q, q, q, order=2, form="recurrent", backward="reversed")
    with pytest.raises(TypeError, match="backward"):
        linear_attention(q, q, q, feature_map="relu", form="chunked", backward=1)


def test_double_backward_raises_instead_of_a_wrong_second_derivative():
    q = torch.randn(1, 1, 6, 2, dtype=torch.float64, requires_grad=True)
    out = taylor_attention(q, q, q, order=2, causal=True, form="chunked", chunk_size=4)
    (g,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        g.sum().backward()


def test_callable_feature_map_keeps_autograd_for_its_parameters():
    w = torch.tensor(1.5, requires_grad=True)
    q, k, v = (torch.randn(1, 1, 6, 2, requires_grad=True) for _ in range(3))
    out = linear_attention(
        q, k, v, feature_map=lambda x: torch.relu(w * x) + 1.0, causal=True, form="chunked",
        chunk_size=2,
    )  # fmt: skip
    (gw,) = torch.autograd.grad(out.square().sum(), (w,))
    assert torch.isfinite(gw) and gw != 0


# ------------------------------------------------------------------------------ the benchmark
def _tiny_bench():
    from dataclasses import replace

    from verify.bench.config import QUICK

    return replace(QUICK, backward_lengths=(64,), backward_repeats=1, backward_gate_t=32)


def test_bench_backward_section_measures_and_renders():
    """``attn-theory bench``'s backward table on a tiny config: the gate passes, every method
    has its row, the Markdown section renders (timings are never asserted)."""
    from verify.bench.backward import collect_backward
    from verify.bench.config import BACKWARD_METHODS
    from verify.render.benchmarks import _backward

    doc = collect_backward(_tiny_bench(), None, lambda msg: None)
    assert all(r["ok"] for r in doc["gate"]) and len(doc["gate"]) == 4
    assert [r["method"] for r in doc["rows"]] == [m for m in BACKWARD_METHODS if "fla" not in m]
    assert doc["skipped"] == {"64": {BACKWARD_METHODS[-1]: "flash-linear-attention not installed"}}
    assert all(r["saved_mib"] > 0 and r["step_s"]["median"] > 0 for r in doc["rows"])
    text = "\n".join(_backward(doc))
    assert "## Backward: the reverse-time RNN (D19) against autograd" in text
    assert "T = 64:" in text


def test_bench_backward_gate_stops_a_wrong_reverse_pass(monkeypatch):
    from verify.bench.backward import collect_backward

    monkeypatch.setattr(
        reverse, "reverse_scan", functools.partial(reverse.reverse_scan, fault="off-by-one")
    )
    with pytest.raises(RuntimeError, match="backward gate failed"):
        collect_backward(_tiny_bench(), None, lambda msg: None)
