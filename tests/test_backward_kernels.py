"""FlashAttention-2-style backward kernels (``verify.attention.flash_backward``: a custom
autograd Function recomputing P from the saved log-sum-exp, Delta from the stored output, P and
dS rounded to the input type) against the derived backward bounds (``verify.exact.
gradient_bounds``: D10 backward with D16's transforms, D17's arithmetic, grouped kv heads):
the correct kernels pass in float32 and bf16 (float32 accumulation) through
``assert_attention_grads_close`` and ``attn-theory check``'s gradients-vs-reference; each
named backward defect fails. T = S = 200, causal (a last partial block of 64 keys); the slow
test repeats it at T = S = 1000, d = 64."""

from __future__ import annotations

import pytest
import torch

from derivations.decay import alibi_slopes
from verify.attention.flash_backward import BACKWARD_FAULTS, flash_attention_trainable
from verify.testing import assert_attention_grads_close

SOFTCAP = 20.0


def _structures(H):
    return {
        "plain": {},
        "softcap": {"softcap": SOFTCAP},
        "alibi": {"alibi_slopes": [float(m) for m in alibi_slopes(H)]},
        "window": {"window": (70, -1)},
    }


#: the defects each structure exposes (mask-dropped needs hidden keys: causal rows do)
EXPOSED = {
    "plain": ("delta-unnormalized", "mask-dropped", "dk-unscaled", "gqa-first-head",
              "lse-max-only", "dv-last-block-dropped", "delta-wrong-row"),
    "softcap": ("softcap-no-dtanh", "dk-unscaled"),
    "alibi": ("dk-unscaled", "lse-max-only"),
    "window": ("mask-dropped", "delta-unnormalized"),
}  # fmt: skip


def _inputs(dtype, T, S, d, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: (scale * torch.randn(*s, generator=g)).to(dtype)  # noqa: E731
    return mk(1, 2, T, d), mk(1, 1, S, d), mk(1, 1, S, d), mk(1, 2, T, d) / scale


def _grads(q, k, v, g, faults=(), **kw):
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    flash_attention_trainable(*leaves, causal=True, faults=faults, **kw).backward(g)
    return [t.grad for t in leaves]


def _judge(dtype, T, S, d) -> dict[str, list[str]]:
    """Asserts each structure's correct kernel within its bound and each exposed defect beyond
    it; returns the defects seen failing, by structure."""
    q, k, v, g = _inputs(dtype, T, S, d)
    caught: dict[str, list[str]] = {}
    prec = "online:64" if dtype == torch.bfloat16 else None
    for name, kw in _structures(2).items():
        claims = dict(causal=True, precision=prec, arithmetic="flash-attention-2",
                      enable_gqa=True, **kw)  # fmt: skip
        assert_attention_grads_close(*_grads(q, k, v, g, **kw), q, k, v, g, **claims)
        for fault in EXPOSED[name]:
            with pytest.raises(AssertionError, match="is not within its derived bound"):
                assert_attention_grads_close(*_grads(q, k, v, g, (fault,), **kw), q, k, v, g,
                                             **claims)  # fmt: skip
            caught.setdefault(name, []).append(fault)
    return caught


def test_defects_are_named_once_and_all_exposed():
    exposed = {f for fs in EXPOSED.values() for f in fs}
    assert exposed == set(BACKWARD_FAULTS) and len(set(BACKWARD_FAULTS)) == 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flash_backward_kernels_judged_right(dtype):
    caught = _judge(dtype, 200, 200, 32)
    assert caught == {name: list(faults) for name, faults in EXPOSED.items()}


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flash_backward_kernels_at_1024(dtype):
    caught = _judge(dtype, 1000, 1000, 64)
    assert caught == {name: list(faults) for name, faults in EXPOSED.items()}
