"""The same code on CUDA: outputs stay on the device, in the dtype, within the D10 bound.

Tolerances: ``verify.errors`` (D10) through ``test_attention_bounds.output_bound`` with
``device="cuda"`` (the cited CUDA exp ulps); bf16/fp16: the two-level model.
"""

from __future__ import annotations

import pytest
import torch
from test_attention_bounds import assert_within, output_bound

from verify.attention import (
    favor_projection,
    linear_attention,
    prefill,
    softmax_attention,
    step,
    taylor_attention,
    taylor_features,
)

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def qkv(dtype, T=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs = [0.7 * torch.randn(2, 2, T, 4, generator=g, dtype=torch.float64) for _ in range(3)]
    return [x.to(dtype) for x in xs]


@pytest.fixture(autouse=True)
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_every_form_on_cuda(dtype):
    q, k, v = qkv(dtype)
    qc, kc, vc = (x.cuda() for x in (q, k, v))
    cases = [("exp", lambda *a: softmax_attention(*a, causal=True), {})]
    for form in ("parallel", "recurrent", "chunked"):
        cases.append(
            (
                "taylor:2",
                lambda *a, f=form: taylor_attention(*a, order=2, causal=True, form=f, chunk_size=4),
                {},
            )
        )
        cases.append(
            (
                "elu1",
                lambda *a, f=form: linear_attention(*a, feature_map="elu1", causal=True, form=f),
                {},
            )
        )
    for kernel, f, _ in cases:
        out = f(qc, kc, vc)
        assert out.device.type == "cuda" and out.dtype == dtype
        ref, b = output_bound(kernel, q, k, v, dtype=dtype, causal=True, device="cuda")
        assert_within(out, ref, b, f"{kernel} {dtype}")


def test_favor_and_state_on_cuda():
    q, k, v = (x.cuda() for x in qkv(torch.float32, seed=1))
    g = torch.Generator(device="cuda").manual_seed(0)
    proj = favor_projection(4, 8, generator=g, device="cuda")
    assert proj.device.type == "cuda"
    a = linear_attention(q, k, v, feature_map="favor", projection=proj, causal=True)
    o, st = prefill(
        q[:, :, :8],
        k[:, :, :8],
        v[:, :, :8],
        kernel="favor",
        projection=proj,
        form="chunked",
        chunk_size=3,
    )
    o_t, st = step(st, q[:, :, 8], k[:, :, 8], v[:, :, 8])
    assert st.numerator.device.type == "cuda"
    ref, b = output_bound(
        "favor",
        q.cpu(),
        k.cpu(),
        v.cpu(),
        dtype=torch.float32,
        causal=True,
        projection=proj.cpu(),
        device="cuda",
    )
    assert_within(torch.cat([o, o_t[:, :, None]], 2), ref, b, "stream")
    assert_within(a, ref, b, "full")
    assert taylor_features(q, 2).device.type == "cuda"


def test_empty_rows_and_gradients_on_cuda():
    q, k, v = (x.cuda().requires_grad_() for x in qkv(torch.float64, T=4, seed=2))
    mask = torch.zeros(4, 4, dtype=torch.bool, device="cuda")
    for f in (
        lambda: softmax_attention(q, k, v, attn_mask=mask),
        lambda: taylor_attention(q, k, v, order=3, attn_mask=mask),
    ):
        out = f()
        assert (out == 0).all()
        assert all(torch.isfinite(g_).all() for g_ in torch.autograd.grad(out.sum(), (q, k, v)))
