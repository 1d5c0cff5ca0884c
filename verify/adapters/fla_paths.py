"""flash-linear-attention (fla-core 0.6) naive references on the decode and packed paths
(``verify.spec.decode``; D20).

Two of fla's pure-torch references take fla's varlen ``cu_seqlens`` and a decode state, so the
checker can drive them through the decode protocol and the packed (FlashAttention varlen)
layout. Both use fla's layout (B, T, H, d) (claimed ``layout="BTHD"``).

* ``naive_recurrent_gated_delta_product(q, k, v, g, beta, scale, cu_seqlens, initial_state,
  output_final_state, num_householder)`` (fla.ops.gated_delta_product.naive) with g = 0 (no
  decay), ``num_householder=1`` and a constant beta = :data:`BETA`: the delta rule
  S_t = S_{t-1} + beta (v_t - S_{t-1}^T k_t) k_t^T, o_t = S_t^T (c q_t), a kernel no claim names
  (``kernel="unknown"``, ``normalized=False``: no division by a kernel sum), causal only. The
  glue L2-normalizes k (``F.normalize``, as fla's own examples of the chunked kernel do; with
  |k| = 1 and beta in (0, 2) each update is non-expansive) and passes fla's scale
  convention c = d^-1/2. Its outputs are float32 numbers whatever its input (declared
  ``compute_dtype="float32"``: it casts q, k, v and beta to float32 and writes the outputs into
  a float32 buffer; g is not cast, so a float64 g = 0 carries the state in float64:
  :func:`float64_dtypes`). Decode: ``initial_state`` / ``output_final_state`` (the state
  S (B, H, d, d_v)); ``cache_seqlens``: the rows' first tokens packed with
  ``cu_seqlens`` (one varlen call, a final state per row). Packed: ``cu_seqlens`` (batch 1,
  fla's varlen convention); the slack rows after ``cu_seqlens[-1]`` are not passed (fla's
  reference returns only the documents' rows) and come back as zeros.
* ``naive_attn_decoding(q, k, v, scale, cu_seqlens, window_size)`` (fla.ops.attn.naive): one
  query per sequence attending the last ``window_size`` keys of its sequence in a packed
  (varlen) KV cache. The decode path appends each token to its row's cache and calls it once
  per token (rows at their own lengths: ``cu_seqlens`` of the cache), so prefill and steps of
  any size are sequences of released decode calls; ``cache_seqlens`` rows append only their
  first tokens. The forward is fla's ``naive_parallel_attn(q, k, v, window_size=W,
  causal=True)`` (same module): window (W - 1, 0), grouped kv heads (query head h reads kv
  head h // (H / G): claimed ``kv_heads`` = :data:`KV_HEADS`), T = S only, default scale
  d^-1/2, input-dtype softmax.

Cards: ``fla-naive_recurrent_gated_delta_product`` (decode, packed) and
``fla-naive_attn_decoding-window`` (decode across the window's wraparound).
"""

from __future__ import annotations

from typing import Any

from verify.adapters.fla import _import
from verify.spec.variant import AttentionVariant

#: card name -> import spec of the variant's zero-argument factory
VARIANTS: dict[str, str] = {
    "fla-naive_recurrent_gated_delta_product": "verify.adapters.fla_paths:delta_product_variant",
    "fla-naive_attn_decoding-window": "verify.adapters.fla_paths:attn_decoding_variant",
}
#: the delta rule's constant beta (fla's layers compute it as a sigmoid, in (0, 1))
BETA = 0.5
#: the window of ``naive_attn_decoding`` / ``naive_parallel_attn``: the last W keys
WINDOW = 3
#: the kv-head count the attention card claims (GQA checks draw G = 2)
KV_HEADS = 2


def _delta():
    return _import("fla.ops.gated_delta_product.naive")


def _attn():
    return _import("fla.ops.attn.naive")


# -- the gated delta product (delta rule) ------------------------------------------------------
def delta_inputs(q, k, v):
    """The glue of the delta-rule card: (q, L2-normalized k, v, g = 0, beta = BETA) in fla's
    (B, T, H, .) layout."""
    import torch.nn.functional as F

    B, T, H = q.shape[:3]
    g = q.new_zeros(B, T, H)
    beta = q.new_full((B, T, H), BETA)
    return q, F.normalize(k, dim=-1), v, g, beta


def delta_product(q, k, v, *, fn=None, **kw):
    """``naive_recurrent_gated_delta_product`` on the card's glue (:func:`delta_inputs`), scale
    d^-1/2, ``num_householder=1``; ``fn`` replaces the fla function (faulty twins), ``kw`` are
    its other keywords. Returns (o in q's dtype, the state (N, H, d, d_v) in the dtype of g,
    the input's: :func:`float64_dtypes`)."""
    fn = fn or _delta().naive_recurrent_gated_delta_product
    q, k, v, g, beta = delta_inputs(q, k, v)
    return fn(q, k, v, g, beta, q.shape[-1] ** -0.5, num_householder=1, **kw)


def delta_forward(q, k, v, *, causal: bool):
    """The delta rule over the whole sequence: q, k (B, T, H, d), v (B, T, H, d_v) ->
    (B, T, H, d_v). Causal only.

    Raises:
        ValueError: ``causal=False``.
    """
    if not causal:
        raise ValueError("causal: the delta rule is a causal recurrence, got causal=False")
    return delta_product(q, k, v)[0]


class DeltaProductDecode:
    """Decode through ``initial_state`` / ``output_final_state``: the state is fla's S
    (B, H, d, d_v) (None before the first token).

    Args:
        fn: the fla function (default ``naive_recurrent_gated_delta_product``); faulty twins
            pass another with its signature.
    """

    def __init__(self, fn=None) -> None:
        self.fn = fn

    def prefill(self, q, k, v, state=None, cache_seqlens=None):
        """n >= 0 tokens resumed from ``state``; with ``cache_seqlens`` (no state) row b holds
        its first cache_seqlens[b] tokens, packed into one varlen call. Returns (o (B, n, H,
        d_v), state)."""
        import torch

        if cache_seqlens is None:
            return self.step(state, q, k, v)
        lens = [int(n) for n in cache_seqlens.tolist()]
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
        rows = [torch.cat([x[b : b + 1, :m] for b, m in enumerate(lens)], 1) for x in (q, k, v)]
        o_rows, state = delta_product(*rows, fn=self.fn, cu_seqlens=cu, output_final_state=True)
        o = q.new_zeros(*q.shape[:-1], v.shape[-1])
        for b, (a, m) in enumerate(zip(cu.tolist(), lens)):
            o[b, :m] = o_rows[0, a : a + m]
        return o, state

    def step(self, state, q_new, k_new, v_new):
        """n >= 0 new tokens of every row from ``state``: (o (B, n, H, d_v), state)."""
        return delta_product(
            q_new, k_new, v_new, fn=self.fn, initial_state=state, output_final_state=True
        )


def delta_packed(q, k, v, cu_seqlens, *, causal: bool, fn=None):
    """fla's varlen call: q, k (total, H, d), v (total, H, d_v), ``cu_seqlens`` int32 (B + 1,)
    -> (total, H, d_v); the slack rows after ``cu_seqlens[-1]`` are zeros.

    Raises:
        ValueError: ``causal=False``.
    """
    if not causal:
        raise ValueError("causal: the delta rule is a causal recurrence, got causal=False")
    end = int(cu_seqlens[-1])
    o, _ = delta_product(*(x[None, :end] for x in (q, k, v)), fn=fn, cu_seqlens=cu_seqlens)
    import torch

    return torch.cat([o[0], q.new_zeros(q.shape[0] - end, *o.shape[2:])], 0)


def delta_product_variant() -> AttentionVariant:
    """``naive_recurrent_gated_delta_product`` (g = 0, one Householder step, beta = 0.5, unit
    keys): kernel unknown, unnormalized, causal, float32 outputs; decode and packed paths.

    Raises:
        ImportError: fla-core (or triton) is not installed.
    """
    _delta()
    return AttentionVariant(
        name="fla-naive_recurrent_gated_delta_product",
        forward=delta_forward,
        layout="BTHD",
        kernel="unknown",
        causal="yes",
        normalized=False,
        compute_dtype="float32",
        decode=DeltaProductDecode(),
        packed=delta_packed,
        description="fla.ops.gated_delta_product.naive.naive_recurrent_gated_delta_product "
        f"(g=0, num_householder=1, beta={BETA}, L2-normalized k) (fla-core 0.6)",
    )


# -- softmax decoding over a varlen KV cache ----------------------------------------------------
def attn_forward(q, k, v, *, causal: bool, window: int | None = WINDOW):
    """fla ``naive_parallel_attn(q, k, v, window_size=window, causal=True)[0]``: q (B, T, H, d),
    k (B, T, G, d), v (B, T, G, d_v) -> (B, T, H, d_v). Causal only, T = S.

    Raises:
        ValueError: ``causal=False``; whatever fla raises (G not dividing H).
    """
    if not causal:
        raise ValueError("causal: the windowed card is causal only, got causal=False")
    return _attn().naive_parallel_attn(q, k, v, window_size=window, causal=True)[0]


class AttnDecode:
    """Softmax decode over a varlen KV cache with ``naive_attn_decoding``: the state is
    {"k", "v": per-row lists of (1, L_b, G, .) tensors}; each token is appended to its row and
    decoded by one released call over every row (``cu_seqlens`` of the cache).

    Args:
        window: ``window_size`` of the calls (None: every key).
    """

    def __init__(self, window: int | None = WINDOW) -> None:
        self.window = window

    def window_for(self, n: int) -> int | None:
        """The ``window_size`` of the calls of a segment of n tokens (faulty twins override)."""
        return self.window

    def decode(self, state, rows, q, k, v, window):
        """Append token (q, k, v) (B, 1, ., .) of the ``rows`` listed, one call: (B, 1, H, d_v),
        zeros for rows not listed."""
        import torch

        for b in rows:
            state["k"][b] = torch.cat([state["k"][b], k[b : b + 1]], 1)
            state["v"][b] = torch.cat([state["v"][b], v[b : b + 1]], 1)
        lens = [t.shape[1] for t in state["k"]]
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
        o = _attn().naive_attn_decoding(
            q.transpose(0, 1),
            torch.cat(state["k"], 1),
            torch.cat(state["v"], 1),
            cu_seqlens=cu,
            window_size=window,
        )[0]
        keep = torch.zeros(q.shape[0], dtype=torch.bool)
        keep[list(rows)] = True
        return torch.where(keep[:, None, None], o, torch.zeros((), dtype=o.dtype))[:, None]

    def _run(self, state, q, k, v, lens):
        import torch

        n = q.shape[1]
        window = self.window_for(n)
        outs = [
            self.decode(
                state,
                [b for b, m in enumerate(lens) if t < m],
                *(x[:, t : t + 1] for x in (q, k, v)),
                window,
            )  # fmt: skip
            for t in range(n)
        ]
        o = torch.cat(outs, 1) if outs else q.new_zeros(*q.shape[:-1], v.shape[-1])
        return o, state

    def prefill(self, q, k, v, state=None, cache_seqlens=None):
        """n >= 0 tokens appended to ``state`` (empty when None); with ``cache_seqlens`` row b
        appends its first cache_seqlens[b] tokens. Returns (o (B, n, H, d_v), state)."""
        B = q.shape[0]
        if state is None:
            state = {
                "k": [k.new_zeros(1, 0, *k.shape[2:]) for _ in range(B)],
                "v": [v.new_zeros(1, 0, *v.shape[2:]) for _ in range(B)],
            }
        lens = [q.shape[1]] * B if cache_seqlens is None else [int(m) for m in cache_seqlens]
        return self._run(state, q, k, v, lens)

    def step(self, state, q_new, k_new, v_new):
        """n >= 1 new tokens of every row: (o (B, n, H, d_v), state)."""
        return self._run(state, q_new, k_new, v_new, [q_new.shape[1]] * q_new.shape[0])


def attn_decoding_variant() -> AttentionVariant:
    """``naive_parallel_attn(window_size=3)`` with ``naive_attn_decoding(window_size=3)`` as
    its decode path: window (2, 0), kv_heads = 2, causal, T = S.

    Raises:
        ImportError: fla-core (or triton) is not installed.
    """
    _attn()
    return AttentionVariant(
        name="fla-naive_attn_decoding-window",
        dtypes=("float64", "float32", "bfloat16"),
        forward=attn_forward,
        layout="BTHD",
        kernel="softmax",
        causal="yes",
        self_attention_only=True,
        kv_heads=KV_HEADS,
        window=(WINDOW - 1, 0),
        decode=AttnDecode(WINDOW),
        description=f"fla.ops.attn.naive naive_parallel_attn / naive_attn_decoding "
        f"(window_size={WINDOW}, cu_seqlens) (fla-core 0.6)",
    )


# -- what the cards show ------------------------------------------------------------------------
def float64_dtypes() -> dict[str, Any]:
    """What ``naive_recurrent_gated_delta_product`` computes in for float64 q, k, v, beta:
    the dtype of the state it returns with g = 0 given as float64 (the card's glue) and as
    float32, and whether the float64 call's outputs are float32 numbers. fla casts q, k, v and
    beta to float32 but not g: ``h * g.exp()`` promotes the state to g's dtype, while the
    outputs are written into a float32 buffer."""
    import torch

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, 1, 2, generator=gen, dtype=torch.float64) for _ in range(3))
    fn = _delta().naive_recurrent_gated_delta_product
    beta = q.new_full((1, 4, 1), BETA)
    out: dict[str, Any] = {}
    for name, dt in (("g float64", torch.float64), ("g float32", torch.float32)):
        g = torch.zeros(1, 4, 1, dtype=dt)
        o, h = fn(q, k, v, g, beta, 2**-0.5, output_final_state=True)
        out[f"state dtype ({name})"] = str(h.dtype).removeprefix("torch.")
        if dt == torch.float64:
            out["outputs_are_float32_numbers"] = bool(torch.equal(o.float().double(), o))
    return out


def card_facts(name: str, *, quick: bool = False, isolate: bool = True) -> dict[str, Any]:
    """What an fla path card shows besides the battery (JSON values).

    Returns:
        ``package`` ({"fla-core": version}); the delta-rule card also ``float64_inputs``
        (:func:`float64_dtypes`) and ``beta``; the attention card
        ``window_size``. ``quick`` and ``isolate`` are unused (no check runs here).

    Raises:
        KeyError: ``name`` is not in :data:`VARIANTS`. ImportError: fla-core is missing.
    """
    if name not in VARIANTS:
        raise KeyError(f"name: expected one of {sorted(VARIANTS)}, got {name!r}")
    from importlib.metadata import version

    facts: dict[str, Any] = {"package": {"fla-core": version("fla-core")}}
    if name == "fla-naive_recurrent_gated_delta_product":
        facts["float64_inputs"] = float64_dtypes()
        facts["beta"] = BETA
    else:
        _attn()
        facts["window_size"] = WINDOW
    return facts


__all__ = [
    "BETA",
    "KV_HEADS",
    "VARIANTS",
    "WINDOW",
    "AttnDecode",
    "DeltaProductDecode",
    "attn_decoding_variant",
    "attn_forward",
    "card_facts",
    "delta_forward",
    "delta_inputs",
    "delta_packed",
    "delta_product",
    "delta_product_variant",
    "float64_dtypes",
]
