"""Streaming state API: init_state, step, prefill (D2, D3; fault classes 2, 3, 7).

Tolerances: ``verify.errors`` (D10) through ``test_attention_bounds``.
"""

from __future__ import annotations

import pytest
import torch
from test_attention_bounds import U, assert_within, callable_map_bound, gamma, output_bound

from verify.attention import (
    AttentionState,
    elu1_features,
    favor_features,
    favor_projection,
    init_state,
    linear_attention,
    prefill,
    step,
    taylor_attention,
    taylor_features,
)

PROJ = favor_projection(3, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
KERNELS = [
    ("taylor:0", {}),
    ("taylor:1", {}),
    ("taylor:2", {}),
    ("taylor:2", dict(basis="tensor")),
    ("taylor:3", {}),
    ("elu1", {}),
    ("favor", dict(projection=PROJ)),
]
IDS = [f"{k}{'/' + '/'.join(e) if e else ''}" for k, e in KERNELS]


def qkv(B=2, H=2, T=6, d=3, dv=2, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: (0.7 * torch.randn(*s, generator=g, dtype=torch.float64)).to(dtype)  # noqa: E731
    return mk(B, H, T, d), mk(B, H, T, d), mk(B, H, T, dv)


def full(kernel, q, k, v, extra, **kw):
    return linear_attention(q, k, v, feature_map=kernel, causal=True,
                            **{a: b for a, b in extra.items() if a != "basis"}, **kw)  # fmt: skip


def model(kernel, q, k, v, dtype=torch.float64, **kw):
    return output_bound(kernel, q, k, v, dtype=dtype, causal=True,
                        projection=PROJ if kernel == "favor" else None, **kw)  # fmt: skip


def sl(x, a, b):
    return x[:, :, a:b]


def feature_magnitude(kernel, k, extra):
    """Float64 features whose absolute values bound |phi(k)| (monomials of |k| for Taylor)."""
    if kernel.startswith("taylor:"):
        return taylor_features(k.abs(), int(kernel[7:]), basis=extra.get("basis", "symmetric"))
    if kernel == "elu1":
        return elu1_features(k)  # positive
    return favor_features(k, extra["projection"])  # positive


def assert_states_close(a: AttentionState, b: AttentionState, kernel, k, v, extra, what):
    """Same T terms phi(k_s) v_s^T summed in different orders and groupings: the error is
    <= gamma_{T + 2N + 8} sum_s |phi(k_s)| |v_s| per entry (Higham eq. (3.4); 2N + 8 covers the
    feature products and the weights applied per token or per chunk)."""
    assert a.tokens == b.tokens and a.block_sizes == b.block_sizes
    assert torch.equal(a.count, b.count), what  # integers: exact
    phi = feature_magnitude(kernel, k, extra).abs()
    K = k.shape[2] + 2 * 3 + 8
    tol_num = 2 * gamma(K, U[torch.float64]) * (phi.transpose(-1, -2) @ v.abs())
    tol_den = 2 * gamma(K, U[torch.float64]) * phi.sum(2)
    assert ((a.numerator - b.numerator).abs() <= tol_num).all(), what
    assert ((a.denominator - b.denominator).abs() <= tol_den).all(), what


@pytest.mark.parametrize("kernel,extra", KERNELS, ids=IDS)
@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_prefill_then_step_equals_full(kernel, extra, form):
    """prefill(T-1) + step == full causal pass at T (fault classes 2 and 7)."""
    T = 5
    q, k, v = qkv(T=T, seed=1)
    ref, bound = model(kernel, q, k, v)
    o, st = prefill(sl(q, 0, T - 1), sl(k, 0, T - 1), sl(v, 0, T - 1), kernel=kernel, form=form,
                    chunk_size=64, **extra)  # fmt: skip
    o_t, st = step(st, q[:, :, -1], k[:, :, -1], v[:, :, -1])
    assert_within(torch.cat([o, o_t[:, :, None]], 2), ref, bound, f"{kernel} {form}")
    assert st.tokens == T and (st.count == T).all()
    _, whole = prefill(q, k, v, kernel=kernel, form="recurrent", **extra)
    assert_states_close(st, whole, kernel, k, v, extra, f"{kernel} {form}")
    # fault class 7: the last row of a causal pass equals one decode step over the same keys
    last = full(kernel, q, k, v, extra)[:, :, -1]
    assert_within(o_t, ref[:, :, -1], bound[:, :, -1], "decode row")
    assert_within(last, ref[:, :, -1], bound[:, :, -1], "full last row")


@pytest.mark.parametrize("kernel,extra", KERNELS, ids=IDS)
def test_split_and_resume_at_every_position(kernel, extra):
    """concat(f(x[:s]), f(x[s:], state)) == f(x) for every s; states equal (fault class 3)."""
    T = 7
    q, k, v = qkv(T=T, seed=2)
    ref, bound = model(kernel, q, k, v)
    _, whole = prefill(q, k, v, kernel=kernel, **extra)
    for s in range(1, T):
        for f1, f2, C in (("recurrent", "chunked", 3), ("chunked", "chunked", 2),
                          ("chunked", "recurrent", 5)):  # fmt: skip
            o1, st = prefill(sl(q, 0, s), sl(k, 0, s), sl(v, 0, s), kernel=kernel, form=f1,
                             chunk_size=C, **extra)  # fmt: skip
            o2, st = prefill(sl(q, s, T), sl(k, s, T), sl(v, s, T), kernel=kernel, state=st,
                             form=f2, chunk_size=C)  # fmt: skip
            assert_within(torch.cat([o1, o2], 2), ref, bound, f"{kernel} s={s} {f1}->{f2}")
            assert_states_close(st, whole, kernel, k, v, extra, f"s={s}")


def test_token_by_token_stream_equals_full():
    q, k, v = qkv(T=6, seed=3)
    for kernel, extra in KERNELS:
        st = init_state(2, 2, 3, 2, kernel=kernel, dtype=torch.float64, **extra)
        outs = []
        for t in range(6):
            o, st = step(st, q[:, :, t], k[:, :, t], v[:, :, t])
            outs.append(o)
        ref, bound = model(kernel, q, k, v)
        assert_within(torch.stack(outs, 2), ref, bound, kernel)


def test_faults2_padding_never_enters_the_state():
    """Taylor-2, T = 5, chunk 64: prefill(4) + step == full; final state == recurrent state."""
    q, k, v = qkv(B=1, H=1, T=5, d=4, dv=4, seed=4)
    _, ref_state = prefill(q, k, v, kernel="taylor:2", form="recurrent")
    o, st = prefill(sl(q, 0, 4), sl(k, 0, 4), sl(v, 0, 4), kernel="taylor:2", form="chunked")
    o_t, st = step(st, q[:, :, 4], k[:, :, 4], v[:, :, 4])
    assert_states_close(st, ref_state, "taylor:2", k, v, {}, "faults2")
    # order-0 block: numerator = sum of values, denominator = number of tokens (exact count)
    assert torch.equal(
        st.denominator_block(0)[..., 0], torch.full((1, 1), 5.0, dtype=torch.float64)
    )
    tol = gamma(5, U[torch.float64]) * v.abs().sum(2)
    assert ((st.numerator_block(0)[:, :, 0] - v.sum(2)).abs() <= tol).all()
    ref, bound = model("taylor:2", q, k, v)
    assert_within(torch.cat([o, o_t[:, :, None]], 2), ref, bound, "faults2")


def test_state_blocks_are_feature_sums_per_order():
    """Block n of the state is sum_s phi_n(k_s) v_s^T with phi_n the public order-n features."""
    q, k, v = qkv(T=4, d=3, dv=2, seed=5)
    for basis in ("symmetric", "tensor"):
        _, st = prefill(q, k, v, kernel="taylor:3", basis=basis)
        phi = taylor_features(k, 3, basis=basis)  # (B, H, T, m)
        lo = 0
        for n, size in enumerate(st.block_sizes):
            block = phi[..., lo : lo + size]
            lo += size
            want = block.transpose(-1, -2) @ v
            tol = gamma(4 + 12, U[torch.float64]) * (block.abs().transpose(-1, -2) @ v.abs())
            assert ((st.numerator_block(n) - want).abs() <= tol).all(), (basis, n)
            assert ((st.denominator_block(n) - block.sum(2)).abs()
                    <= gamma(16, U[torch.float64]) * block.abs().sum(2)).all()  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_keeps_a_float32_state(dtype):
    q, k, v = qkv(T=6, dtype=dtype, seed=6)
    o, st = prefill(sl(q, 0, 5), sl(k, 0, 5), sl(v, 0, 5), kernel="taylor:2", form="chunked")
    assert st.numerator.dtype == torch.float32 and st.denominator.dtype == torch.float32
    assert st.dtype == dtype and o.dtype == dtype
    o_t, st = step(st, q[:, :, 5], k[:, :, 5], v[:, :, 5])
    assert o_t.dtype == dtype
    ref, bound = model("taylor:2", q, k, v, dtype=dtype)  # two-level model
    out = torch.cat([o, o_t[:, :, None]], 2)
    assert_within(out, ref, bound, str(dtype))


def test_favor_state_carries_its_random_directions():
    q, k, v = qkv(T=5, seed=7)
    o1, st = prefill(sl(q, 0, 3), sl(k, 0, 3), sl(v, 0, 3), kernel="favor", num_features=6,
                     generator=torch.Generator().manual_seed(9))  # fmt: skip
    assert st.projection.shape == (6, 3)
    o2, st = prefill(sl(q, 3, 5), sl(k, 3, 5), sl(v, 3, 5), kernel="favor", state=st)
    full_pass = linear_attention(q, k, v, feature_map="favor", causal=True,
                                 projection=st.projection)  # fmt: skip
    ref, bound = output_bound("favor", q, k, v, dtype=torch.float64, causal=True,
                              projection=st.projection)  # fmt: skip
    assert_within(torch.cat([o1, o2], 2), ref, bound, "favor resume")
    assert_within(full_pass, ref, bound, "favor full pass")
    with pytest.raises(ValueError, match="num_features/generator"):
        prefill(q, k, v, kernel="favor", state=st, generator=torch.Generator())


def test_config_is_fixed_by_the_state():
    q, k, v = qkv(T=4, seed=8)
    _, st = prefill(q, k, v, kernel="taylor:2", scale=0.3, denominator="l2", eps=0.1)
    assert (st.scale, st.denominator_mode, st.eps) == (0.3, "l2", 0.1)
    # matching keywords are accepted, conflicting ones rejected
    prefill(q, k, v, kernel="taylor:2", state=st, scale=0.3, denominator="l2")
    with pytest.raises(ValueError, match="scale"):
        prefill(q, k, v, kernel="taylor:2", state=st, scale=0.5)
    with pytest.raises(ValueError, match="denominator"):
        prefill(q, k, v, kernel="taylor:2", state=st, denominator="sum")
    with pytest.raises(ValueError, match="kernel"):
        prefill(q, k, v, kernel="taylor:3", state=st)
    with pytest.raises(ValueError, match="basis"):
        prefill(q, k, v, kernel="taylor:2", state=st, basis="tensor")
    # the stored configuration is what step uses: equal to the full pass with the same keywords
    o, st2 = prefill(sl(q, 0, 3), sl(k, 0, 3), sl(v, 0, 3), kernel="taylor:2", scale=0.3,
                     denominator="l2", eps=0.1)  # fmt: skip
    o_t, _ = step(st2, q[:, :, 3], k[:, :, 3], v[:, :, 3])
    ref, bound = output_bound("taylor:2", q, k, v, dtype=torch.float64, causal=True, scale=0.3,
                              denominator="l2", eps=0.1)  # fmt: skip
    assert_within(torch.cat([o, o_t[:, :, None]], 2), ref, bound, "l2 stream")
    assert_within(taylor_attention(q, k, v, order=2, causal=True, scale=0.3, denominator="l2",
                                   eps=0.1), ref, bound, "l2 full")  # fmt: skip


def test_key_padding_mask_in_prefill():
    q, k, v = qkv(T=6, seed=9)
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[0, ..., 1] = mask[1, ..., 0] = False
    o, st = prefill(q, k, v, kernel="taylor:2", attn_mask=mask, form="chunked", chunk_size=4)
    ref, bound = output_bound("taylor:2", q, k, v, dtype=torch.float64, causal=True,
                              attn_mask=mask)  # fmt: skip
    assert_within(o, ref, bound, "masked prefill")
    assert st.tokens == 6 and st.count.tolist() == [[5.0, 5.0], [5.0, 5.0]]
    with pytest.raises(ValueError, match="attn_mask"):
        prefill(q, k, v, kernel="taylor:2", attn_mask=torch.ones(6, 6, dtype=torch.bool).tril())


def test_gradients_flow_through_a_stream():
    q, k, v = (x.requires_grad_() for x in qkv(B=1, H=1, T=3, d=2, dv=2, seed=10))

    def f(q, k, v):
        o, st = prefill(sl(q, 0, 2), sl(k, 0, 2), sl(v, 0, 2), kernel="taylor:2", form="chunked",
                        chunk_size=1)  # fmt: skip
        o_t, _ = step(st, q[:, :, 2], k[:, :, 2], v[:, :, 2])
        return torch.cat([o, o_t[:, :, None]], 2)

    assert torch.autograd.gradcheck(f, (q, k, v))


def test_callable_kernel_state():
    """A user feature map (x_i^2, 1) streamed: within ``callable_map_bound`` of the exact
    output (mpmath), feature error u: each feature is fl(x_i * x_i) or the exact 1 (scale 1)."""
    sq = lambda x: torch.cat([x * x, torch.ones_like(x[..., :1])], -1)  # noqa: E731
    q, k, v = qkv(T=4, seed=11)
    st = init_state(2, 2, 3, 2, kernel=sq, dtype=torch.float64)
    assert st.kernel == "callable" and st.block_sizes == (4,)
    o, st = prefill(sl(q, 0, 3), sl(k, 0, 3), sl(v, 0, 3), kernel=sq, state=st)
    o_t, st = step(st, q[:, :, 3], k[:, :, 3], v[:, :, 3])
    ref, bound = callable_map_bound(sq, lambda xs: [x * x for x in xs] + [1], U[torch.float64],
                                    q, k, v, dtype=torch.float64, causal=True)  # fmt: skip
    assert_within(torch.cat([o, o_t[:, :, None]], 2), ref, bound, "callable")
    with pytest.raises(ValueError, match="kernel"):
        prefill(q, k, v, kernel=lambda x: x, state=st)


def test_first_token_masked_gives_an_empty_row():
    q, k, v = (x.requires_grad_() for x in qkv(T=3, seed=12))
    mask = torch.tensor([False, True, True]).reshape(1, 1, 1, 3)
    o, st = prefill(q, k, v, kernel="taylor:3", attn_mask=mask)
    assert (o[:, :, 0] == 0).all() and torch.isfinite(o).all()
    assert all(torch.isfinite(g_).all() for g_ in torch.autograd.grad(o.sum(), (q, k, v)))
