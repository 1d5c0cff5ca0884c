"""Every path a model runs (D20): decode over a KV cache or a recurrent state, checked against
the causal forward without a reference kernel.

A decode path (``verify.spec.decode``: ``prefill`` and ``step``) computes rows of the causal
forward again: the KV cache is the state of D2's infinite RNN (D20), so each decoded output
equals the forward's row at its position, whatever the kernel (the unknown one, a delta rule, a
softmax cache). Each property compares two computations of the same exact rows, and the bound
is what two correct computations may differ by: D11's kernel-free threshold on the weights the
forward computes (``support.structure.weights_bound``, read with one-hot values), or twice the
claimed kernel's D10 bound where it has one, the larger of the two (``path_bound``); in
bfloat16/float16 twice the claim's model alone (the path recomputes the weights, whose roundings
to the input type depend on the kernel: a path without a claimed kernel skips there, saying
so). Per-row references (a batch row at its own length) state the bound on that row's own
inputs.

Ids: ``decode-steps`` (prefill of every split, the empty cache included, then single-token
steps), ``decode-resume`` (prefill resumed after every split), ``decode-multi-token`` (steps of
several tokens: speculative decoding), ``decode-batch-rows`` (each batch row as that row alone,
rows at different cache positions when the path takes ``cache_seqlens``), ``decode-capacity``
(the cache's unused capacity), ``decode-unused-slots`` (unused slots holding NaN, +inf or
-inf), ``decode-window`` (a sliding-window decode across a rolling buffer's wraparound).
``decode-steps``, ``decode-resume``, ``decode-multi-token``, ``decode-batch-rows`` and
``decode-window`` also draw long sequences
(:func:`_long_sequences`: past a 64-key block, a last partial block), where a cache holds more
than one block of a blocked kernel when the path reads it.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.calls import call
from verify.properties.support.claims import structural_applies
from verify.properties.support.common import MAX_BATCH, MAX_LEN, Example
from verify.properties.support.decode_calls import prefill, step
from verify.properties.support.inputs import restrict, shaped_inputs
from verify.properties.support.observe import array_observation, diff, np64
from verify.properties.support.paths import call_kwargs, convention_mode
from verify.properties.support.structure import path_bound, path_dtype_gap
from verify.spec.results import VariantError

#: what the unused slots of a cache are filled with (``decode-unused-slots``)
POISONS = ("nan", "+inf", "-inf")
#: the largest window (left + 1 slots) whose wraparound ``decode-window`` reaches
MAX_WINDOW_SLOTS = 12
#: extra unused slots drawn by ``decode-capacity``
MAX_EXTRA_SLOTS = 6


# --------------------------------------------------------------------------- calling the path


def _cut(x, lo: int, hi: int):
    return x.q[:, :, lo:hi], x.k[:, :, lo:hi], x.v[:, :, lo:hi]


def run_chunks(variant, x, start: int, chunks, **kw):
    """prefill(x[:start]) then steps of the given sizes (summing to T - start): the outputs of
    every row, canonical (B, H, T, d_v)."""
    import torch

    o, state = prefill(variant, *_cut(x, 0, start), **kw)
    outs, at = [o], start
    for n in chunks:
        o, state = step(variant, state, *_cut(x, at, at + n))
        outs.append(o)
        at += n
    return torch.cat(outs, 2)


# --------------------------------------------------------------------------- the reference


def reference(variant, x, ctx):
    """The causal forward on ``x`` (float64 array) and the bound of another correct computation
    of its rows (module docstring): the larger of twice the claim's D10 bound and D11's
    kernel-free threshold on the forward's own weights.

    Raises:
        NotApplicable: neither bound exists (no model, and weights that cannot be read).
        VariantError: the forward returned NaN/inf where the bound is finite.
    """
    mode = convention_mode(variant)
    kw = call_kwargs(variant, mode)
    o = call(variant, x.q, x.k, x.v, causal=True, allow_nonfinite=True, **kw)
    bound = path_bound(variant, x, ctx, kw, causal=True, mode=mode, o=o)
    o = np64(o)
    if (~np.isfinite(o) & np.isfinite(bound)).any():
        raise VariantError("forward: output has NaN/inf where the bound is finite")
    return o, bound


def _compare(o, ref, bound, what: str):
    return array_observation(diff(np64(o), ref), bound, what=what)


# --------------------------------------------------------------------------- applicability


def _applies(variant, ctx, *, needs: tuple[str, ...] = ()):
    if variant.decode is None:
        return "the variant declares no decode path (--decode, AttentionVariant.decode)"
    if why := path_dtype_gap(variant, ctx) or structural_applies(variant, ctx, causal=True):
        return why
    if needs and not any(getattr(variant.decode, n) for n in needs):
        return "the decode path takes no " + " or ".join(needs) + " (verify.spec.decode)"
    return None


def _sequences(variant, ctx, **shape):
    return shaped_inputs(variant, ctx, causal=True, **{"T": (1, MAX_LEN), **shape})


def _partition(draw_, total: int, largest: int):
    """Sizes in [1, largest] summing to ``total``."""
    from hypothesis import strategies as st

    out = []
    while total:
        n = draw_(st.integers(1, min(largest, total)))
        out.append(n)
        total -= n
    return out


# --------------------------------------------------------------------------- steps and resume


def _plain_examples(variant, ctx):
    return _sequences(variant, ctx).map(lambda x: Example(x, {}))


def _long_sequences(variant, ctx, **shape):
    """Long causal sequences (seeded, past a 64-key block with a last partial block, up to
    :data:`LONG_DECODE_BLOCKS` blocks): the cache holds blocks of a blocked kernel when the
    decode path reads it. Scores within the claimed kernel's radius; without a claimed kernel,
    elements in [-2, 2] (an unknown recurrence that does not stay finite there makes no
    statement: :func:`_long_reference`)."""
    from verify.properties.support.common import (
        MIN_MAGNITUDE,
        long_shape_strategy,
        radius_strategy,
    )
    from verify.seeded import seeded_attention_inputs

    return seeded_attention_inputs(
        long_shape_strategy(variant, causal=True, **{"blocks": LONG_DECODE_BLOCKS, **shape}),
        dtype=ctx.torch_dtype,
        device=ctx.device,
        causal=True,
        radius=radius_strategy(variant, ctx),
        min_magnitude=MIN_MAGNITUDE,
    )


def _long_examples(variant, ctx):
    """:func:`_long_sequences` whose last 1 .. :data:`LONG_DECODE_STEPS` tokens are decoded
    one by one (``decode-steps``) or, with ``chunks``, in steps of several tokens
    (``decode-multi-token``); a ``resume`` split (``decode-resume``) resumes a prefill there."""
    from hypothesis import strategies as st

    seqs = _long_sequences(variant, ctx)

    @st.composite
    def draw(draw_):
        x = draw_(seqs)
        steps = draw_(st.integers(1, LONG_DECODE_STEPS))
        return Example(x, {"prefill": x.shape.T - steps})

    return draw()


def _long_multi_examples(variant, ctx):
    from hypothesis import strategies as st

    seqs = _long_sequences(variant, ctx)

    @st.composite
    def draw(draw_):
        x = draw_(seqs)
        tail = draw_(st.integers(2, 3 * LONG_DECODE_STEPS))
        chunks = _partition(draw_, tail, LONG_DECODE_STEPS)
        if max(chunks) < 2:  # at least one step of several tokens
            chunks = [2, *chunks[2:]]
        return Example(x, {"prefill": x.shape.T - tail, "chunks": chunks})

    return draw()


def _long_resume_examples(variant, ctx):
    from hypothesis import strategies as st

    seqs = _long_sequences(variant, ctx)

    @st.composite
    def draw(draw_):
        x = draw_(seqs)
        return Example(x, {"resume": draw_(st.integers(1, x.shape.T - 1))})

    return draw()


def _long_reference(variant, x, ctx, ex: Example):
    """:func:`reference`; on a long example of an unknown recurrence (a delta rule's state may
    grow without bound on such inputs) a forward that is not finite makes no statement about
    its decode path."""
    from verify.spec.results import NotApplicable

    try:
        return reference(variant, x, ctx)
    except VariantError as exc:
        if not ({"prefill", "resume"} & set(ex.choices)) or variant.parsed_kernel.known:
            raise
        raise NotApplicable(f"the forward on a long example: {exc}") from None


def _steps_check(variant, ex: Example, ctx):
    x = ex.inputs
    T = x.shape.T
    ref, bound = _long_reference(variant, x, ctx, ex)
    obs = []
    splits = [ex.choices["prefill"]] if "prefill" in ex.choices else range(T)
    for s in splits:
        o = run_chunks(variant, x, s, [1] * (T - s))
        obs.append(_compare(o, ref, bound, f"prefill({s} tokens) + {T - s} single steps"))
    return obs


#: long ``decode-steps`` examples: at most this many 64-key blocks, the last this many tokens
#: decoded one by one
LONG_DECODE_BLOCKS = 8
LONG_DECODE_STEPS = 8

DECODE_STEPS = declare(
    "decode-steps", _applies, _plain_examples, _steps_check, long_examples=_long_examples
)


def _resume_check(variant, ex: Example, ctx):
    import torch

    x = ex.inputs
    T = x.shape.T
    ref, bound = _long_reference(variant, x, ctx, ex)
    obs = []
    for s in [ex.choices["resume"]] if "resume" in ex.choices else range(T):
        o_a, state = prefill(variant, *_cut(x, 0, s))
        o_b, _ = prefill(variant, *_cut(x, s, T), state)
        o = torch.cat([o_a, o_b], 2)
        obs.append(_compare(o, ref, bound, f"prefill({s} tokens) resumed with {T - s} tokens"))
    return obs


DECODE_RESUME = declare(
    "decode-resume", _applies, _plain_examples, _resume_check, long_examples=_long_resume_examples
)


def _multi_examples(variant, ctx):
    from hypothesis import strategies as st

    @st.composite
    def draw(draw_):
        x = draw_(_sequences(variant, ctx, T=(2, MAX_LEN)))
        s = draw_(st.integers(0, x.shape.T - 2))
        chunks = _partition(draw_, x.shape.T - s, x.shape.T - s)
        if max(chunks) < 2:  # at least one step of several tokens
            chunks = [2, *chunks[2:]]
        return Example(x, {"prefill": s, "chunks": chunks})

    return draw()


def _multi_check(variant, ex: Example, ctx):
    x, s, chunks = ex.inputs, ex.choices["prefill"], ex.choices["chunks"]
    ref, bound = _long_reference(variant, x, ctx, ex)
    o = run_chunks(variant, x, s, chunks)
    o1 = run_chunks(variant, x, s, [1] * (x.shape.T - s))
    return [
        _compare(o, ref, bound, f"prefill({s}) + steps of {chunks} tokens"),
        _compare(o1, ref, bound, f"prefill({s}) + single steps"),
    ]


DECODE_MULTI_TOKEN = declare(
    "decode-multi-token",
    _applies,
    _multi_examples,
    _multi_check,
    long_examples=_long_multi_examples,
)


# --------------------------------------------------------------------------- per-row caches


def _row_examples(variant, ctx):
    from hypothesis import assume
    from hypothesis import strategies as st

    ragged = bool(variant.decode.cache_seqlens)

    @st.composite
    def draw(draw_):
        x = draw_(_sequences(variant, ctx, B=(2, MAX_BATCH), T=(2, MAX_LEN)))
        T = x.shape.T
        n = draw_(st.integers(1, T - 1))  # tokens the steps add to every row
        if ragged:
            lens = [draw_(st.integers(0, T - n)) for _ in range(x.shape.B)]
            assume(len(set(lens)) > 1)  # rows at different positions
        else:
            lens = [draw_(st.integers(0, T - n))] * x.shape.B
        chunks = _partition(draw_, n, n)
        return Example(x, {"lengths": lens, "chunks": chunks})

    return draw()


def _padded(x, lens, width: int, fill: float, extra: int = 0):
    """q, k, v of a prefill segment of ``width + extra`` positions: row b's first lens[b]
    tokens, ``fill`` in every other slot."""
    import torch

    out = []
    for t in (x.q, x.k, x.v):
        seg = torch.full((*t.shape[:2], width + extra, t.shape[-1]), fill, dtype=t.dtype)
        seg = seg.to(t.device)
        for b, n in enumerate(lens):
            seg[b, :, :n] = t[b, :, :n]
        out.append(seg)
    return out


def _gather(x, lens, offset: int, n: int):
    """Canonical (B, H, n, .) tokens lens[b] + offset ... + n - 1 of each row b."""
    import torch

    return [
        torch.stack([t[b, :, m + offset : m + offset + n] for b, m in enumerate(lens)])
        for t in (x.q, x.k, x.v)
    ]


def ragged_run(variant, x, lens, chunks, *, fill: float = 0.0, extra: int = 0):
    """Rows at their own positions: prefill with ``cache_seqlens = lens`` on a segment of
    max(lens) + sum(chunks) + ``extra`` slots (the cache's capacity; unused slots hold ``fill``),
    then steps of ``chunks`` tokens appended to every row at its own position. Returns per row b
    the canonical (1, H, lens[b] + n, d_v) outputs of its tokens."""
    import torch

    n = sum(chunks)
    width = max(lens) + n
    seqlens = torch.tensor(lens, dtype=torch.int32, device=x.q.device)
    o_pre, state = prefill(variant, *_padded(x, lens, width, fill, extra), cache_seqlens=seqlens)
    outs, at = [], 0
    for m in chunks:
        o, state = step(variant, state, *_gather(x, lens, at, m))
        outs.append(o)
        at += m
    steps = torch.cat(outs, 2)
    return [torch.cat([o_pre[b : b + 1, :, :m], steps[b : b + 1]], 2) for b, m in enumerate(lens)]


def _row_references(variant, x, ctx, lens, n: int):
    """Per row b: the forward of row b alone on its lens[b] + n tokens, and its bound."""
    return [
        reference(variant, restrict(x, batch=[b], length=m + n), ctx) for b, m in enumerate(lens)
    ]


def _row_check(variant, ex: Example, ctx):
    x, lens, chunks = ex.inputs, ex.choices["lengths"], ex.choices["chunks"]
    n = sum(chunks)
    refs = _row_references(variant, x, ctx, lens, n)
    if variant.decode.cache_seqlens:
        outs = ragged_run(variant, x, lens, chunks)
        how = f"cache_seqlens {lens}"
    else:
        short = restrict(x, length=lens[0] + n)
        o = run_chunks(variant, short, lens[0], chunks)
        outs = [o[b : b + 1] for b in range(x.shape.B)]
        how = f"every row at position {lens[0]}"
    return [
        _compare(o, ref, bound, f"batch row {b} ({how}, steps of {chunks}) vs row {b} alone")
        for b, (o, (ref, bound)) in enumerate(zip(outs, refs))
    ]


def _long_row_examples(variant, ctx):
    """Two long rows (past a 64-key block, a last partial block; :data:`LONG_ROW_BLOCKS`
    blocks at most) whose caches sit at different positions when the path takes per-row
    lengths, each row then stepped by 1 .. :data:`LONG_DECODE_STEPS` tokens."""
    from hypothesis import assume
    from hypothesis import strategies as st

    ragged = bool(variant.decode.cache_seqlens)
    seqs = _long_sequences(variant, ctx, blocks=LONG_ROW_BLOCKS, batch=(2, 2))

    @st.composite
    def draw(draw_):
        x = draw_(seqs)
        T = x.shape.T  # > 64
        n = draw_(st.integers(1, min(LONG_DECODE_STEPS, T - 64)))
        if ragged:  # row 0's cache past the first block, row 1's at any length in [0, T - n]
            lens = [draw_(st.integers(64, T - n)), draw_(st.integers(0, T - n))]
            assume(lens[0] != lens[1])
        else:
            lens = [T - n] * 2
        return Example(x, {"lengths": lens, "chunks": _partition(draw_, n, n)})

    return draw()


#: long ``decode-batch-rows`` examples: at most this many 64-key blocks (two rows, one
#: reference per row)
LONG_ROW_BLOCKS = 4

DECODE_BATCH_ROWS = declare(
    "decode-batch-rows", _applies, _row_examples, _row_check, long_examples=_long_row_examples
)


# --------------------------------------------------------------------------- unused cache slots


def _capacity_examples(variant, ctx):
    from hypothesis import strategies as st

    @st.composite
    def draw(draw_):
        x = draw_(_sequences(variant, ctx, T=(2, MAX_LEN)))
        s = draw_(st.integers(0, x.shape.T - 1))
        extra = draw_(st.integers(0, MAX_EXTRA_SLOTS))
        return Example(x, {"prefill": s, "extra_slots": extra})

    return draw()


def _capacity_check(variant, ex: Example, ctx):
    x, s, extra = ex.inputs, ex.choices["prefill"], ex.choices["extra_slots"]
    T = x.shape.T
    ref, bound = reference(variant, x, ctx)
    if variant.decode.capacity:
        o = run_chunks(variant, x, s, [1] * (T - s), capacity=T + extra)
        how = f"capacity {T + extra} for {T} tokens"
    else:
        rows = ragged_run(variant, x, [s] * x.shape.B, [1] * (T - s), extra=extra)
        import torch

        o = torch.cat(rows, 0)
        how = f"a cache_seqlens segment of {T + extra} slots for {T} tokens (zeros unused)"
    return _compare(o, ref, bound, f"prefill({s}) + single steps, {how}")


DECODE_CAPACITY = declare(
    "decode-capacity",
    functools.partial(_applies, needs=("capacity", "cache_seqlens")),
    _capacity_examples,
    _capacity_check,
)


def _slot_examples(variant, ctx):
    from hypothesis import strategies as st

    @st.composite
    def draw(draw_):
        x = draw_(_sequences(variant, ctx, T=(2, MAX_LEN)))
        T = x.shape.T
        n = draw_(st.integers(1, T - 1))
        lens = [draw_(st.integers(0, T - n)) for _ in range(x.shape.B)]
        return Example(
            x,
            {
                "lengths": lens,
                "chunks": _partition(draw_, n, n),
                "poison": draw_(st.sampled_from(POISONS)),
                "extra_slots": draw_(st.integers(0, 3)),
            },
        )

    return draw()


def _slot_check(variant, ex: Example, ctx):
    x, lens, chunks = ex.inputs, ex.choices["lengths"], ex.choices["chunks"]
    fill = float(ex.choices["poison"].replace("+", ""))
    refs = _row_references(variant, x, ctx, lens, sum(chunks))
    outs = ragged_run(variant, x, lens, chunks, fill=fill, extra=ex.choices["extra_slots"])
    what = f"unused slots holding {ex.choices['poison']} (cache_seqlens {lens}, steps {chunks})"
    return [
        _compare(o, ref, bound, f"row {b}, {what}")
        for b, (o, (ref, bound)) in enumerate(zip(outs, refs))
    ]


DECODE_UNUSED_SLOTS = declare(
    "decode-unused-slots",
    functools.partial(_applies, needs=("cache_seqlens",)),
    _slot_examples,
    _slot_check,
)


# --------------------------------------------------------------------------- rolling window


def _window_slots(variant) -> int | None:
    """W = left + 1 slots of a rolling buffer (D20) for a window claim with a bounded left
    edge."""
    from derivations.paths import rolling_slots

    if variant.window is None or variant.window[0] < 0:
        return None
    return rolling_slots(variant.window[0])


def _window_applies(variant, ctx):
    if why := _applies(variant, ctx):
        return why
    W = _window_slots(variant)
    if W is None:
        return "no window claim with a bounded left edge (--window LEFT,RIGHT, LEFT >= 0)"
    if W > MAX_WINDOW_SLOTS:
        return f"a window of {W} slots: its wraparound lies past the lengths drawn here"
    return None


def _window_examples(variant, ctx):
    from hypothesis import strategies as st

    from derivations.paths import wraparound_lengths

    lengths = wraparound_lengths(variant.window[0])  # past the buffer, to its second wrap

    @st.composite
    def draw(draw_):
        x = draw_(_sequences(variant, ctx, T=lengths))
        T = x.shape.T
        s = draw_(st.integers(0, T - 1))
        return Example(x, {"prefill": s, "chunks": _partition(draw_, T - s, 3)})

    return draw()


def _window_check(variant, ex: Example, ctx):
    x, s, chunks = ex.inputs, ex.choices["prefill"], ex.choices["chunks"]
    T, W = x.shape.T, _window_slots(variant)
    ref, bound = reference(variant, x, ctx)
    o1 = run_chunks(variant, x, s, [1] * (T - s))
    o = run_chunks(variant, x, s, chunks)
    what = f"window of {W} slots, T = {T} (wraps at {W})"
    return [
        _compare(o1, ref, bound, f"prefill({s}) + single steps, {what}"),
        _compare(o, ref, bound, f"prefill({s}) + steps of {chunks}, {what}"),
    ]


def _long_window_examples(variant, ctx):
    """A long sequence (past a 64-key block, a last partial block) through the rolling buffer:
    it wraps many times before the prefill ends, and the last 1 .. :data:`LONG_DECODE_STEPS`
    tokens are stepped one by one or in steps of up to 3."""
    from hypothesis import strategies as st

    seqs = _long_sequences(variant, ctx, blocks=LONG_ROW_BLOCKS)

    @st.composite
    def draw(draw_):
        x = draw_(seqs)
        T = x.shape.T
        tail = draw_(st.integers(1, LONG_DECODE_STEPS))
        return Example(x, {"prefill": T - tail, "chunks": _partition(draw_, tail, 3)})

    return draw()


DECODE_WINDOW = declare(
    "decode-window",
    _window_applies,
    _window_examples,
    _window_check,
    long_examples=_long_window_examples,
)


PROPERTIES: tuple[Any, ...] = (
    DECODE_STEPS,
    DECODE_RESUME,
    DECODE_MULTI_TOKEN,
    DECODE_BATCH_ROWS,
    DECODE_CAPACITY,
    DECODE_UNUSED_SLOTS,
    DECODE_WINDOW,
)
