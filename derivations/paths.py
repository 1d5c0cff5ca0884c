"""D20. Every path a model runs: the KV cache as a state, rolling windows, packed documents.

A model runs one attention along several paths: the parallel forward, decode token by token
(or several tokens at once) over a cache, and documents packed into one sequence. Results
recorded here, each with checks and wrong statements that make a check fail:

* The KV cache is a state of D2's infinite RNN: every order-n state S_t^(n) = sum_{s<=t}
  phi_n(k_s) v_s^T (and z_t^(n)) is a function of the cache {(k_s, v_s)}_{s<=t}, appending a
  token is the recurrence, and the readout sum_n phi_n(q).S^(n) / sum_n phi_n(q).z^(n) is the
  softmax row because sum_n x^n / n! = e^x (D1; proved with sympy). Its size t (d + d_v) grows
  with t, while D5's order-N state is fixed; the infinite RNN needs every order, and for every
  t an order N exists whose truncated state is already larger than the cache (verified on
  instances with D5's counts): the cache is the finite state of the untruncated RNN.
* A rolling buffer of W = left + 1 slots (the token at position p in slot p mod W) holds, at
  step t, exactly the keys D15's window (left, 0) shows a single query aligned bottom-right
  over the t + 1 keys so far -- at every position, the buffer's wraparound included
  (verified on instances). A buffer of ``left`` slots, a top-left aligned single query, and a
  single-token decode that drops the window each break it.
* Packed documents (FlashAttention's cu_seqlens) are attention under a block-diagonal
  visibility: row i sees row j iff both lie in the same document (and j <= i when causal).
  For any kernel, each document's outputs then equal the document computed alone, and their
  derivatives with respect to another document's q, k, v are exactly zero (verified with sympy
  on symbolic instances, documents of length 0 and 1 included); a visibility that ignores the
  boundaries fails both.

Numeric exports (plain Python): ``rolling_slots``, ``rolling_positions``,
``decode_visible``, ``wraparound_lengths``, ``document_of``, ``packed_visible``.
"""

from __future__ import annotations

from derivations._latex import tex
from derivations._record import Derivation
from derivations._validate import check_int

#: window sizes and steps of the rolling-buffer instances
ROLLING_LEFTS = tuple(range(0, 7))
ROLLING_STEPS = 40
#: the document layouts of the packed instances (lengths; 0: an empty document)
PACKED_LAYOUTS = ((2, 1), (1, 2), (0, 2, 1), (1, 0, 1), (3,), (1, 1, 1))
#: the cache-versus-state instances: head dimensions and lengths
SIZE_DIMS = (1, 2, 8, 64, 128)
SIZE_LENGTHS = (1, 10, 1_000, 100_000)

CACHE_STATE = "the KV cache is a state of D2's infinite RNN: its readout is the softmax row"
CACHE_SIZE = "for every t some order N has a truncated state (D5) larger than the cache"
ROLLING = "a rolling buffer of left + 1 slots holds exactly D15's window of a decode step"
PACKED = "block-diagonal visibility: each document equals itself alone, zero cross-gradient"


# -- numeric exports --------------------------------------------------------------------------
def rolling_slots(left: int) -> int:
    """W = left + 1: the slots of a rolling buffer for FlashAttention's window (left, 0) (D20).

    Raises:
        TypeError, ValueError: ``left`` not an int >= 0 (an unbounded window has no buffer).
    """
    return check_int("left", left, 0) + 1


def rolling_positions(t: int, slots: int) -> frozenset[int]:
    """The positions a rolling buffer of ``slots`` slots holds after the token at position t
    is written (slot p mod W holds the latest p <= t with that residue; never-written slots
    hold nothing) (D20).

    Raises:
        TypeError, ValueError: ``t`` not an int >= 0, ``slots`` not an int >= 1.
    """
    t = check_int("t", t, 0)
    w = check_int("slots", slots, 1)
    held = (t - ((t - j) % w) for j in range(w))
    return frozenset(p for p in held if p >= 0)


def decode_visible(t: int, left: int) -> frozenset[int]:
    """The keys a single decode query at position t sees under the window (left, 0): D15's
    bottom-right alignment of one query over the t + 1 keys so far, max(0, t - left) .. t
    (D20).

    Raises:
        TypeError, ValueError: ``t`` not an int >= 0, ``left`` not an int >= 0.
    """
    t = check_int("t", t, 0)
    left = check_int("left", left, 0)
    return frozenset(range(max(0, t - left), t + 1))


def wraparound_lengths(left: int) -> tuple[int, int]:
    """(W + 1, 2 W + 2) with W = left + 1: the sequence lengths from the first write past the
    buffer to its second wrap, which ``decode-window`` draws (D20)."""
    w = rolling_slots(left)
    return w + 1, 2 * w + 2


def document_of(i: int, cu_seqlens) -> int | None:
    """The document holding packed row ``i`` (cu_seqlens[b] <= i < cu_seqlens[b + 1]), or None
    for a slack row at or past cu_seqlens[-1] (D20).

    Raises:
        TypeError, ValueError: ``i`` not an int >= 0; ``cu_seqlens`` not a non-decreasing
            sequence of ints starting at 0.
    """
    i = check_int("i", i, 0)
    cu = [check_int("cu_seqlens", c, 0) for c in cu_seqlens]
    if not cu or cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])):
        raise ValueError(f"cu_seqlens: expected non-decreasing ints from 0, got {cu_seqlens!r}")
    for b in range(len(cu) - 1):
        if cu[b] <= i < cu[b + 1]:
            return b
    return None


def packed_visible(i: int, j: int, cu_seqlens, causal: bool) -> bool:
    """Row i sees row j in a packed call: the same document (neither a slack row), and j <= i
    when ``causal`` (D20: the block-diagonal visibility).

    Raises:
        TypeError, ValueError: bad rows or ``cu_seqlens`` (:func:`document_of`).
    """
    a, b = document_of(i, cu_seqlens), document_of(j, cu_seqlens)
    return a is not None and a == b and (not causal or j <= i)


# -- claims -----------------------------------------------------------------------------------
def _claim_cache_state(rec) -> None:
    import sympy

    x = sympy.Symbol("x", real=True)
    n = sympy.Symbol("n", integer=True, nonnegative=True)
    rec.step(
        r"The order-$n$ states of D2 are sums over the cached tokens, so the cache determines "
        r"them and appending $(k_t, v_t)$ is their recurrence: $S_t^{(n)} = S_{t-1}^{(n)} + "
        r"\phi_n(k_t) v_t^\top$. Summed over every order, the readout's weights are "
        r"$\sum_n \phi_n(q)\cdot\phi_n(k) = \sum_n (c\,q\cdot k)^n / n! = e^{c\,q\cdot k}$ (D1).",
    )
    rec.prove(
        CACHE_STATE,
        lambda: (
            sympy.simplify(sympy.summation(x**n / sympy.factorial(n), (n, 0, sympy.oo)))
            == sympy.exp(x)
        ),
        "sympy: sum_{n>=0} x^n / n! = exp(x); each order's state is a sum over the cache",
    )


def _claim_cache_size(rec, f) -> None:
    from derivations import state_size as d5

    def check():
        for d in SIZE_DIMS:
            for t in SIZE_LENGTHS:
                cache = f["cache_numbers"](t, d, d)
                if cache != t * (2 * d):
                    return False
                N = 0
                while d5.symmetric_state_numbers(N, d, d) <= cache:
                    N += 1
                    if N > 10**6:
                        return False
        return True

    rec.step(
        r"Sizes: the cache of $t$ tokens holds $t(d + d_v)$ numbers (D5); the order-$N$ state "
        r"$\binom{N+d}{N}(d_v + 1)$ grows without bound in $N$, so the untruncated RNN has no "
        r"finite state of that form, and the cache is its finite state at each $t$.",
    )
    rec.verify(
        CACHE_SIZE,
        check,
        f"d = d_v in {SIZE_DIMS}, t in {SIZE_LENGTHS}: the smallest such N found with D5's "
        "symmetric_state_numbers, the cache size t (d + d_v)",
    )


def _claim_rolling(rec, f) -> None:

    def check():
        for left in ROLLING_LEFTS:
            slots = f["slots"](left)
            for t in range(ROLLING_STEPS):
                held = rolling_positions(t, slots)
                d15 = {s for s in range(t + 1) if f["visible"](0, s, 1, t + 1, left, 0)}
                if held != d15 or held != decode_visible(t, left):
                    return False
        return True

    rec.step(
        r"Rolling buffer: slot $j$ holds $p_j = t - ((t - j) \bmod W)$, the latest position "
        r"$\le t$ with residue $j$; the $W$ values $p_j$ are the integers $t - W + 1, \dots, t$, "
        r"those $\ge 0$ written. With $W = \ell + 1$ they are D15's window of one query aligned "
        r"bottom-right over the $t + 1$ keys so far ($t' = 0 + (t + 1) - 1 = t$).",
    )
    rec.verify(
        ROLLING,
        check,
        f"left in {ROLLING_LEFTS}, every step t < {ROLLING_STEPS} (the wraparound at t = W, "
        "2W, ... included), against derivations.structure.window_visible",
    )


def _packed_outputs(lengths, causal: bool, visible, weight):
    """Symbolic outputs of a packed call (one head, d = d_v = 1) and of each document alone:
    (packed rows, alone rows, the symbols of each row)."""
    import sympy

    total = sum(lengths)
    cu = [0]
    for m in lengths:
        cu.append(cu[-1] + m)
    q = sympy.symbols(f"q0:{total}", real=True)
    k = sympy.symbols(f"k0:{total}", real=True)
    v = sympy.symbols(f"v0:{total}", real=True)

    def row(i, keys):
        w = [weight(q[i] * k[j]) for j in keys]
        return sum(wj * v[j] for wj, j in zip(w, keys)) / sum(w)

    packed = [row(i, [j for j in range(total) if visible(i, j, cu, causal)]) for i in range(total)]
    alone = []
    for b in range(len(lengths)):
        for i in range(cu[b], cu[b + 1]):
            keys = [j for j in range(cu[b], cu[b + 1]) if (not causal or j <= i)]
            alone.append(row(i, keys))
    return packed, alone, cu, (q, k, v)


def _claim_packed(rec, f) -> None:
    import sympy

    def check():
        for lengths in PACKED_LAYOUTS:
            for causal in (False, True):
                for weight in (sympy.exp, lambda s: 1 + s**2):  # softmax, a kernel no claim names
                    packed, alone, cu, syms = _packed_outputs(lengths, causal, f["packed"], weight)
                    if any(sympy.simplify(a - b) != 0 for a, b in zip(packed, alone)):
                        return False
                    for i, out in enumerate(packed):
                        for j in range(len(packed)):
                            if document_of(j, cu) == document_of(i, cu):
                                continue
                            if any(sympy.diff(out, s[j]) != 0 for s in syms):
                                return False
        return True

    rec.step(
        r"Packed documents: with $V(i, j) = [\mathrm{doc}(i) = \mathrm{doc}(j)]\,"
        r"[\text{causal} \Rightarrow j \le i]$ every term of row $i$'s sums lies in its own "
        r"document, so the row is the document's row alone and does not depend on another "
        r"document's $q, k, v$ at all (zero derivative), for any kernel $\kappa$.",
    )
    rec.verify(
        PACKED,
        check,
        f"document lengths {PACKED_LAYOUTS} (an empty document included), causal and not, "
        "kernels exp and 1 + s^2, symbolic q, k, v (d = d_v = 1): sympy simplify and diff",
    )


def derive(**wrong) -> Derivation:
    """Build the D20 record.

    Keyword overrides (wrong-statement tests): ``slots`` (the rolling buffer's size from left;
    right: left + 1), ``visible`` (D15's window_visible as the decode step calls it; wrong:
    a top-left single query, or the window dropped), ``packed`` (the packed visibility; wrong:
    boundaries ignored), ``cache_numbers`` (D5's cache size).

    Raises:
        TypeError: an unknown override name.
    """
    from derivations import state_size as d5
    from derivations.feature_maps import resolve_overrides
    from derivations.structure import window_visible

    f = resolve_overrides(
        wrong,
        {
            "slots": rolling_slots,
            "visible": window_visible,
            "packed": packed_visible,
            "cache_numbers": d5.kv_cache_numbers,
        },
    )
    rec = Derivation(
        "D20", "Decode, rolling windows and packed documents as paths of one attention"
    )
    rec.cite(
        "the KV cache of autoregressive decoding; FlashAttention's varlen (cu_seqlens) and "
        "flash_attn_with_kvcache (cache_seqlens, rolling window) conventions",
        "Pope et al., 'Efficiently Scaling Transformer Inference', MLSys 2023 "
        "(arXiv:2211.05102); Dao, 'FlashAttention-2', arXiv:2307.08691, and the flash_attn "
        "interface documentation (flash_attn_varlen_func, flash_attn_with_kvcache)",
        "the conventions; the cache as the state of D2's RNN, the rolling-buffer identity and "
        "the block-diagonal statement with their checks are this project's",
    )
    rec.statement["cache"] = tex(
        r"o_t = \frac{\sum_{s \le t} e^{c\,q_t\cdot k_s} v_s}{\sum_{s \le t} e^{c\,q_t\cdot k_s}}"
        r" = \frac{\sum_{n} \phi_n(q_t)^\top S^{(n)}_t}{\sum_n \phi_n(q_t)^\top z^{(n)}_t},\quad "
        r"S^{(n)}_t = \sum_{s\le t} \phi_n(k_s) v_s^\top",
        claim=CACHE_STATE,
    )
    rec.statement["rolling"] = tex(
        r"\{\, t - ((t - j) \bmod W) : 0 \le j < W \,\} \cap \mathbb{N} = "
        r"\{\max(0, t - \ell), \dots, t\},\quad W = \ell + 1",
        claim=ROLLING,
    )
    rec.statement["packed"] = tex(
        r"V(i, j) = [\mathrm{doc}(i) = \mathrm{doc}(j)]\,[\text{causal} \Rightarrow j \le i],"
        r"\quad \partial o_i / \partial (q, k, v)_j = 0 \text{ for } \mathrm{doc}(j) \ne "
        r"\mathrm{doc}(i)",
        claim=PACKED,
    )
    _claim_cache_state(rec)
    _claim_cache_size(rec, f)
    _claim_rolling(rec, f)
    _claim_packed(rec, f)
    rec.exports = [
        "rolling_slots",
        "rolling_positions",
        "decode_visible",
        "wraparound_lengths",
        "document_of",
        "packed_visible",
    ]
    return rec


if __name__ == "__main__":
    from derivations._record import main_for

    main_for(derive)
