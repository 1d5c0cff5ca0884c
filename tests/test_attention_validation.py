"""Every bad input is rejected with ValueError/TypeError naming the argument (API contract)."""

from __future__ import annotations

import pytest
import torch

from verify.attention import (
    apply_denominator,
    favor_features,
    favor_projection,
    init_state,
    linear_attention,
    prefill,
    softmax_attention,
    step,
    symmetric_monomial_features,
    taylor_attention,
    taylor_features,
)

F64 = torch.float64


def t(*shape, dtype=F64, device="cpu"):
    return torch.zeros(*shape, dtype=dtype, device=device)


QKV = (t(2, 2, 3, 4), t(2, 2, 3, 4), t(2, 2, 3, 5))

FUNCS = {
    "softmax": lambda q, k, v, **kw: softmax_attention(q, k, v, **kw),
    "taylor": lambda q, k, v, **kw: taylor_attention(q, k, v, order=2, **kw),
    "taylor_chunked": lambda q, k, v, **kw: taylor_attention(
        q, k, v, order=2, form="chunked", **kw
    ),
    "linear": lambda q, k, v, **kw: linear_attention(q, k, v, feature_map="elu1", **kw),
    "linear_recurrent": lambda q, k, v, **kw: linear_attention(
        q, k, v, feature_map="elu1", form="recurrent", **kw
    ),
}
STREAM = {"prefill": lambda q, k, v, **kw: prefill(q, k, v, kernel="taylor:2", **kw)}


def replace(i, x):
    qkv = list(QKV)
    qkv[i] = x
    return qkv


BAD_QKV = [
    ("q not a tensor", replace(0, [[0.0]]), TypeError, "q: expected a torch.Tensor"),
    ("k not a tensor", replace(1, 1.0), TypeError, "k: expected a torch.Tensor"),
    ("v not a tensor", replace(2, None), TypeError, "v: expected a torch.Tensor"),
    ("q ndim", replace(0, t(2, 3, 4)), ValueError, "q: expected 4 dimensions"),
    ("v ndim", replace(2, t(1, 2, 2, 3, 5)), ValueError, "v: expected 4 dimensions"),
    (
        "int dtype",
        replace(0, t(2, 2, 3, 4, dtype=torch.int64)),
        TypeError,
        "q: expected a floating",
    ),
    (
        "bool dtype",
        replace(1, t(2, 2, 3, 4, dtype=torch.bool)),
        TypeError,
        "k: expected a floating",
    ),
    (
        "complex dtype",
        replace(2, t(2, 2, 3, 5, dtype=torch.complex64)),
        TypeError,
        "v: expected a floating",
    ),  # noqa: E501
    (
        "mixed dtypes",
        replace(1, t(2, 2, 3, 4, dtype=torch.float32)),
        TypeError,
        "k: expected the dtype of q",
    ),  # noqa: E501
    (
        "mixed dtype v",
        replace(2, t(2, 2, 3, 5, dtype=torch.bfloat16)),
        TypeError,
        "v: expected the dtype",
    ),  # noqa: E501
    ("device", replace(1, t(2, 2, 3, 4, device="meta")), ValueError, "k: expected the device of q"),
    ("batch", replace(1, t(3, 2, 3, 4)), ValueError, "k: expected batch size 2"),
    ("heads", replace(2, t(2, 1, 3, 5)), ValueError, "v: expected 2 heads"),
    ("length", replace(2, t(2, 2, 4, 5)), ValueError, "v: expected sequence length 3"),
    ("dim", replace(1, t(2, 2, 3, 3)), ValueError, "k: expected head dimension d = 4"),
    (
        "T = 0",
        [t(2, 2, 0, 4), t(2, 2, 3, 4), t(2, 2, 3, 5)],
        ValueError,
        "q: expected query length",
    ),
    ("S = 0", [t(2, 2, 3, 4), t(2, 2, 0, 4), t(2, 2, 0, 5)], ValueError, "k: expected key length"),
    ("d = 0", [t(2, 2, 3, 0), t(2, 2, 3, 0), t(2, 2, 3, 5)], ValueError, "q: expected head dim"),
    ("d_v = 0", replace(2, t(2, 2, 3, 0)), ValueError, "v: expected value dimension"),
]


@pytest.mark.parametrize("fname", list(FUNCS) + list(STREAM))
@pytest.mark.parametrize("case", BAD_QKV, ids=[c[0] for c in BAD_QKV])
def test_bad_qkv(fname, case):
    _, args, exc, match = case
    f = {**FUNCS, **STREAM}[fname]
    with pytest.raises(exc, match=match):
        f(*args)


BAD_KW = [
    ("causal not bool", dict(causal=1), TypeError, "causal: expected a bool"),
    ("scale bool", dict(scale=True), TypeError, "scale: expected a real number"),
    ("scale tensor", dict(scale=torch.tensor(0.5)), TypeError, "scale: expected a real number"),
    ("scale nan", dict(scale=float("nan")), ValueError, "scale: expected a finite number"),
    (
        "mask float",
        dict(attn_mask=torch.zeros(3, 3)),
        TypeError,
        "attn_mask: expected dtype torch.bool",
    ),  # noqa: E501
    ("mask not tensor", dict(attn_mask=[[True]]), TypeError, "attn_mask: expected a bool"),
    (
        "mask shape",
        dict(attn_mask=torch.ones(2, 3, dtype=torch.bool)),
        ValueError,
        "attn_mask: expected a shape broadcastable",
    ),  # noqa: E501
    (
        "mask ndim",
        dict(attn_mask=torch.ones(1, 1, 1, 3, 3, dtype=torch.bool)),
        ValueError,
        "attn_mask: expected a shape",
    ),  # noqa: E501
    (
        "mask device",
        dict(attn_mask=torch.ones(3, 3, dtype=torch.bool, device="meta")),
        ValueError,
        "attn_mask: expected the device",
    ),  # noqa: E501
    ("denominator", dict(denominator="softmax"), ValueError, "denominator: expected one of"),
    ("denominator type", dict(denominator=None), TypeError, "denominator: expected one of"),
    ("eps negative", dict(eps=-1e-6), ValueError, "eps: expected a number >= 0"),
    ("eps str", dict(eps="1e-6"), TypeError, "eps: expected a real number"),
]


@pytest.mark.parametrize("fname", list(FUNCS))
@pytest.mark.parametrize("case", BAD_KW, ids=[c[0] for c in BAD_KW])
def test_bad_keywords(fname, case):
    _, kw, exc, match = case
    with pytest.raises(exc, match=match):
        FUNCS[fname](*QKV, **kw)


@pytest.mark.parametrize("fname", list(FUNCS))
def test_causal_with_t_not_s(fname):
    q, k, v = t(1, 1, 2, 3), t(1, 1, 4, 3), t(1, 1, 4, 2)
    with pytest.raises(ValueError, match="causal: requires query length T == key length S"):
        FUNCS[fname](q, k, v, causal=True)


@pytest.mark.parametrize("fname", list(FUNCS))
def test_layernorm_needs_two_value_dims(fname):
    q, k, v = t(1, 1, 2, 3), t(1, 1, 2, 3), t(1, 1, 2, 1)
    with pytest.raises(ValueError, match="denominator: 'layernorm' needs value dimension d_v >= 2"):
        FUNCS[fname](q, k, v, denominator="layernorm")


@pytest.mark.parametrize("fname", ["taylor", "taylor_chunked"])
def test_negative_scale_for_exp_type(fname):
    with pytest.raises(ValueError, match="scale: expected a number >= 0"):
        FUNCS[fname](*QKV, scale=-0.5)
    with pytest.raises(ValueError, match="scale: expected a number >= 0"):
        softmax_attention(*QKV, scale=-1.0)


@pytest.mark.parametrize(
    "order,exc",
    [
        (-1, ValueError),
        (1.5, TypeError),
        (True, TypeError),
        ("2", TypeError),
        (None, TypeError),
    ],
)
def test_bad_order(order, exc):
    with pytest.raises(exc, match="order: expected an int >= 0"):
        taylor_attention(*QKV, order=order)
    with pytest.raises(exc, match="order: expected an int >= 0"):
        taylor_features(QKV[0], order)


@pytest.mark.parametrize(
    "chunk,exc",
    [(0, ValueError), (-3, ValueError), (2.0, TypeError), (True, TypeError), ("4", TypeError)],
)
def test_bad_chunk_size(chunk, exc):
    with pytest.raises(exc, match="chunk_size: expected an int >= 1"):
        taylor_attention(*QKV, order=2, form="chunked", chunk_size=chunk)
    with pytest.raises(exc, match="chunk_size: expected an int >= 1"):
        linear_attention(*QKV, feature_map="elu1", chunk_size=chunk)
    with pytest.raises(exc, match="chunk_size: expected an int >= 1"):
        prefill(*QKV, kernel="elu1", form="chunked", chunk_size=chunk)


def test_unknown_form_basis_feature_map():
    with pytest.raises(ValueError, match="form: expected one of"):
        taylor_attention(*QKV, order=2, form="scan")
    with pytest.raises(ValueError, match="form: expected one of"):
        linear_attention(*QKV, feature_map="elu1", form="Chunked")
    with pytest.raises(ValueError, match="form: expected one of"):
        prefill(*QKV, kernel="elu1", form="parallel")
    with pytest.raises(ValueError, match="basis: expected one of"):
        taylor_attention(*QKV, order=2, basis="monomial")
    with pytest.raises(ValueError, match="basis: expected one of"):
        taylor_features(QKV[0], 2, basis="full")
    for bad in ("softmax", "taylor", "taylor:-1", "taylor:x", "elu"):
        with pytest.raises(ValueError, match="feature_map: expected"):
            linear_attention(*QKV, feature_map=bad)
    with pytest.raises(TypeError, match="feature_map: expected"):
        linear_attention(*QKV, feature_map=3)
    with pytest.raises(ValueError, match="kernel: expected"):
        init_state(1, 1, 2, 2, kernel="exp")


def test_feature_budget():
    q = t(1, 1, 2, 64)
    for form in ("recurrent", "chunked"):
        with pytest.raises(
            ValueError,
            match=r"feature_budget: Taylor order=4, d=64, basis='tensor' "
            r"needs feature_count = 17043521",
        ):
            taylor_attention(q, q, q, order=4, basis="tensor", form=form)
    with pytest.raises(ValueError, match="feature_budget: Taylor order=3, d=64"):
        linear_attention(q, q, q, feature_map="taylor:3", form="chunked", feature_budget=1000)
    with pytest.raises(ValueError, match="feature_budget"):
        taylor_features(q, 4, basis="tensor")
    with pytest.raises(ValueError, match="feature_budget"):
        init_state(1, 1, 64, 4, kernel="taylor:4", basis="tensor")
    with pytest.raises(TypeError, match="feature_budget: expected an int"):
        taylor_attention(q, q, q, order=1, feature_budget=1e9)


def test_key_padding_only_for_state_forms():
    tril = torch.ones(3, 3, dtype=torch.bool).tril()
    for f in ("taylor_chunked", "linear_recurrent"):
        with pytest.raises(ValueError, match="attn_mask: form=.* supports only key-padding masks"):
            FUNCS[f](*QKV, attn_mask=tril)
    FUNCS["taylor_chunked"](*QKV, attn_mask=torch.ones(2, 1, 1, 3, dtype=torch.bool))


def test_favor_arguments():
    proj = favor_projection(4, 6, generator=torch.Generator(), dtype=F64)
    with pytest.raises(ValueError, match="feature_map: 'favor' needs projection="):
        linear_attention(*QKV, feature_map="favor")
    with pytest.raises(ValueError, match="projection: expected shape"):
        linear_attention(*QKV, feature_map="favor", projection=t(6, 3))
    with pytest.raises(TypeError, match="projection: expected dtype"):
        linear_attention(*QKV, feature_map="favor", projection=proj.half())
    with pytest.raises(TypeError, match="projection: expected a torch.Tensor"):
        linear_attention(*QKV, feature_map="favor", projection=[[1.0]])
    with pytest.raises(ValueError, match="projection: expected device"):
        linear_attention(*QKV, feature_map="favor", projection=proj.to("meta"))
    with pytest.raises(ValueError, match="projection/num_features/generator: only used with"):
        linear_attention(*QKV, feature_map="elu1", projection=proj)
    with pytest.raises(ValueError, match="num_features: expected an int >= 1"):
        linear_attention(*QKV, feature_map="favor", num_features=0, generator=torch.Generator())
    with pytest.raises(TypeError, match="orthogonal: expected a bool"):
        linear_attention(*QKV, feature_map="favor", orthogonal=1, generator=torch.Generator())
    with pytest.raises(TypeError, match="generator: expected a torch.Generator"):
        favor_projection(4, 2, generator=0)
    with pytest.raises(ValueError, match="d: expected an int >= 1"):
        favor_projection(0, 2)
    with pytest.raises(TypeError, match="dtype: expected one of"):
        favor_projection(2, 2, dtype=torch.int32)
    with pytest.raises(ValueError, match="projection: expected shape"):
        favor_features(t(3, 4), t(2, 3))
    with pytest.raises(TypeError, match="projection: expected dtype"):
        favor_features(t(3, 4), t(2, 4, dtype=torch.float32))


def test_callable_feature_map_output_checked():
    with pytest.raises(ValueError, match="feature_map: the callable must map"):
        linear_attention(*QKV, feature_map=lambda x: x[..., 0])
    with pytest.raises(TypeError, match="feature_map: the callable must return a torch.Tensor"):
        linear_attention(*QKV, feature_map=lambda x: 1.0)
    with pytest.raises(TypeError, match="feature_map: the callable must keep dtype"):
        linear_attention(*QKV, feature_map=lambda x: x.float())


def test_feature_function_inputs():
    with pytest.raises(TypeError, match="x: expected a torch.Tensor"):
        taylor_features([1.0], 2)
    with pytest.raises(TypeError, match="x: expected a floating dtype"):
        taylor_features(torch.zeros(3, dtype=torch.int32), 2)
    with pytest.raises(ValueError, match="x: expected a last axis of size d >= 1"):
        symmetric_monomial_features(torch.zeros(3, 0), 2)
    with pytest.raises(ValueError, match="n: expected an int >= 0"):
        symmetric_monomial_features(torch.zeros(3), -1)
    with pytest.raises(ValueError, match="mode: expected one of"):
        apply_denominator(t(2, 3), t(2), t(2), mode="max")


def test_state_api_inputs():
    st = init_state(2, 2, 4, 5, kernel="taylor:2", dtype=F64)
    q, k, v = t(2, 2, 4), t(2, 2, 4), t(2, 2, 5)
    with pytest.raises(TypeError, match="state: expected an AttentionState"):
        step({}, q, k, v)
    with pytest.raises(ValueError, match="q_t: expected 3 dimensions"):
        step(st, t(2, 2, 1, 4), k, v)
    with pytest.raises(TypeError, match="k_t: expected a torch.Tensor"):
        step(st, q, None, v)
    with pytest.raises(ValueError, match="v_t: expected batch size 2"):
        step(st, q, k, t(3, 2, 5))
    with pytest.raises(ValueError, match="q: expected .batch, heads, d, d_v."):
        step(st, t(2, 2, 3), t(2, 2, 3), v)
    with pytest.raises(TypeError, match="q: expected the state's dtype torch.float64"):
        step(st, q.float(), k.float(), v.float())
    with pytest.raises(ValueError, match="q: expected the state's device"):
        step(st, q.to("meta"), k.to("meta"), v.to("meta"))
    with pytest.raises(TypeError, match="k_t: expected the dtype of q"):
        step(st, q, k.float(), v)
    with pytest.raises(ValueError, match="k: prefill expects one key per query token"):
        prefill(t(2, 2, 3, 4), t(2, 2, 4, 4), t(2, 2, 4, 5), kernel="taylor:2")
    with pytest.raises(ValueError, match="batch: expected an int >= 1"):
        init_state(0, 1, 2, 2, kernel="elu1")
    with pytest.raises(TypeError, match="d_v: expected an int"):
        init_state(1, 1, 2, 2.0, kernel="elu1")
    with pytest.raises(TypeError, match="dtype: expected one of"):
        init_state(1, 1, 2, 2, kernel="elu1", dtype=torch.int64)
    with pytest.raises(TypeError, match="device: expected a torch.device or str"):
        init_state(1, 1, 2, 2, kernel="elu1", device=0)
    with pytest.raises(ValueError, match="kernel: 'favor' needs projection="):
        init_state(1, 1, 2, 2, kernel="favor")
    with pytest.raises(ValueError, match="n: expected a block index < 3"):
        st.numerator_block(3)
