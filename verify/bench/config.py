"""What a benchmark run measures: the methods, the goals' thresholds and ``Config``.

Plain data, no torch: every other module of ``verify.bench`` (and ``verify.render.benchmarks``,
which lays the methods out as table columns) imports from here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

SCHEMA = "attn-theory/benchmarks/1"
METHODS = ("chunked", "recurrent", "parallel", "sdpa", "fla_naive_chunk_based")
METHOD_TEXT = {
    "chunked": "taylor_attention(form='chunked') -- Taylor-2, symmetric basis",
    "recurrent": "taylor_attention(form='recurrent') -- the per-token recurrence (token loop)",
    "parallel": "taylor_attention(form='parallel') -- kappa_2 on the T x T scores",
    "sdpa": "torch.nn.functional.scaled_dot_product_attention(is_causal=True) -- softmax",
    "fla_naive_chunk_based": "fla.ops.based.naive.naive_chunk_based -- pure-torch Taylor-2",
}
#: the backward table (``verify.bench.backward``): form/how the gradients are computed
BACKWARD_METHODS = (
    "recurrent/reverse",
    "recurrent/autograd",
    "chunked/reverse",
    "chunked/autograd",
    "fla_naive_chunk_based/autograd",
)
MATMUL_OPS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")
#: the linear-growth goal: fitted exponent of chunked time in T at most this (stated in advance:
#: 2^0.1 ~ 7 % more time per token at each doubling of T)
LINEAR_EXPONENT_MAX = 1.1
#: lengths from which the growth fit is judged: shorter calls are dominated by fixed overhead,
#: which flattens the slope and would flatter the result
GROWTH_FIT_MIN_T = 1024


@dataclass(frozen=True)
class Config:
    """What one run measures (``FULL`` by default, ``QUICK`` for ``--quick``)."""

    batch: int = 1
    heads: int = 4
    d: int = 16
    d_v: int = 16
    order: int = 2
    chunk_size: int = 64  # taylor_attention's default
    fla_chunk: int = 256  # naive_chunk_based's default
    lengths: tuple[int, ...] = (256, 1024, 2048, 4096, 8192, 16384)
    parallel_max_t: int = 4096
    goal_t: int = 4096
    sdpa_goal_t: int = 8192
    fla_goal_ratio: float = 1.5
    recurrent_goal_ratio: float = 20.0
    orders: tuple[int, ...] = (1, 2, 3, 4)
    orders_t: int = 1024
    decode_t: int = 1024
    decode_steps: int = 128
    matmul_n: int = 1024
    sanity_t: int = 256
    sanity_heads: int = 1
    repeats: int = 7
    threads: int = 1
    seed: int = 0
    quick: bool = False
    top_ops: int = 10
    profile_recurrent_t: int = 256  # per-token op counts do not depend on T
    profile_calls: int = 5
    chunk_sweep: tuple[int, ...] = (32, 64, 128, 256)
    backward_lengths: tuple[int, ...] = (4096, 16384)
    backward_heads: int = 1
    backward_repeats: int = 3
    backward_gate_t: int = 256


FULL = Config()
QUICK = replace(
    FULL,
    lengths=(256, 512),
    orders_t=64,
    decode_t=64,
    decode_steps=8,
    matmul_n=256,
    repeats=3,
    quick=True,
    profile_recurrent_t=64,
    profile_calls=3,
    backward_lengths=(256, 512),
    backward_repeats=2,
    backward_gate_t=64,
)
