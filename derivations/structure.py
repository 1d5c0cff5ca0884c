"""D15. Windows and grouped key/value heads as structure: visibility patterns and head maps.

Windows follow FlashAttention's ``window_size=(left, right)``: positions are aligned bottom-right
(t' = t + S - T for T queries and S keys), key s is visible from query t iff
t' - left <= s <= t' + right, and -1 means unbounded on that side. ``causal=True`` is right = 0
(so a window is also how causal T != S is written); Hugging Face's ``sliding_window=W`` is
(W - 1, 0) (transformers 5.23.0, the version ``constraints.txt`` pins: ``masking_utils``,
``sliding_window_overlay`` keeps kv_idx > q_idx - W, and'ed with ``causal_mask_function``,
kv_idx <= q_idx, in ``sliding_window_causal_mask_function``). Grouped key/value heads (GQA):
query head h of H uses key/value head h // (H / G) of G, the ``repeat_interleave`` map of SDPA's
``enable_gqa``.

Results, each closed by a check in ``derive()``:
- the number of visible keys has the closed form max(0, hi - lo + 1) with
  lo = max(0, t' - left), hi = min(S - 1, t' + right) (enumeration over small T, S, windows);
- causal with T = S is s <= t; bottom-right alignment makes the last query see the last key;
- a causal window (L, 0) is a finite-history RNN: the windowed prefix sum obeys
  W_t = W_{t-1} + f(t) - f(t - L - 1) (all t), so a Taylor-N state with the leaving token
  subtracted computes windowed Taylor-N attention (exact instances);
- GQA equals multi-head attention on keys/values expanded by ``repeat_interleave``; the tiled
  ``repeat`` map h -> h mod G agrees with it only for G in {1, H}.

Numeric exports (plain Python): ``window_visible``, ``visible_count``, ``kv_head``,
``hf_sliding_window``.
"""

from __future__ import annotations

from derivations import feature_maps as fm
from derivations import recurrent as rc
from derivations._record import Derivation
from derivations._validate import check_int

#: enumeration ranges of the window claims
MAX_LEN = 6
WINDOW_SIDES = (-1, 0, 1, 2, 3)
#: head counts of the GQA claims
MAX_HEADS = 16


def _check_window(left, right) -> None:
    check_int("left", left)
    check_int("right", right)
    for name, v in (("left", left), ("right", right)):
        if v < -1:
            raise ValueError(f"{name}: expected an int >= -1 (-1 = unbounded), got {v!r}")


def _check_positions(t, queries, keys) -> None:
    for name, v in (("t", t), ("queries", queries), ("keys", keys)):
        check_int(name, v)
    if queries < 1 or keys < 1:
        raise ValueError(f"queries, keys: expected ints >= 1, got {queries!r}, {keys!r}")
    if not 0 <= t < queries:
        raise ValueError(f"t: expected 0 <= t < queries = {queries}, got {t!r}")


def window_visible(t: int, s: int, queries: int, keys: int, left: int, right: int) -> bool:
    """True iff key s is visible from query t under the window (left, right) (D15).

    Bottom-right alignment t' = t + S - T; visible iff t' - left <= s <= t' + right, each side
    unbounded when it is -1 (FlashAttention's ``window_size``).

    Raises:
        TypeError: an argument is not an int.
        ValueError: ``t`` or ``s`` out of range, ``left``/``right`` < -1.
    """
    _check_positions(t, queries, keys)
    _check_window(left, right)
    check_int("s", s)
    if not 0 <= s < keys:
        raise ValueError(f"s: expected 0 <= s < keys = {keys}, got {s!r}")
    tp = t + keys - queries
    return (left < 0 or s >= tp - left) and (right < 0 or s <= tp + right)


def visible_count(t: int, queries: int, keys: int, left: int, right: int) -> int:
    """Number of keys visible from query t under the window (left, right) (D15 closed form).

    Raises:
        TypeError / ValueError: as :func:`window_visible`.
    """
    _check_positions(t, queries, keys)
    _check_window(left, right)
    tp = t + keys - queries
    lo = 0 if left < 0 else max(0, tp - left)
    hi = keys - 1 if right < 0 else min(keys - 1, tp + right)
    return max(0, hi - lo + 1)


def kv_head(h: int, heads: int, kv_heads: int) -> int:
    """Key/value head used by query head h: h // (H / G) (GQA, ``repeat_interleave``) (D15).

    Raises:
        TypeError: an argument is not an int.
        ValueError: G does not divide H, or h is out of range.
    """
    for name, v in (("h", h), ("heads", heads), ("kv_heads", kv_heads)):
        check_int(name, v)
    if heads < 1 or kv_heads < 1 or heads % kv_heads:
        raise ValueError(
            f"kv_heads: expected a divisor of heads = {heads} (>= 1), got {kv_heads!r}"
        )
    if not 0 <= h < heads:
        raise ValueError(f"h: expected 0 <= h < heads = {heads}, got {h!r}")
    return h // (heads // kv_heads)


def hf_sliding_window(width: int) -> tuple[int, int]:
    """The (left, right) window of Hugging Face's ``sliding_window=W``: (W - 1, 0) (D15).

    As of transformers 5.23.0 (pinned in ``constraints.txt``): ``masking_utils``'s
    ``sliding_window_causal_mask_function`` keeps kv_idx > q_idx - W and kv_idx <= q_idx, W keys
    including the query's own position (q_idx the absolute position, so bottom-right aligned).
    The bidirectional overlay of the same module keeps |q_idx - kv_idx| <= W instead: (W, W).

    Raises:
        TypeError / ValueError: ``width`` not an int >= 1.
    """
    check_int("width", width)
    if width < 1:
        raise ValueError(f"width: expected an int >= 1, got {width!r}")
    return width - 1, 0


COUNT = "visible_count = number of visible keys (closed form)"
HF_WINDOW = (
    "Hugging Face's causal sliding_window = W keeps the keys q - W < s <= q: the window (W - 1, 0)"
)
HISTORY = "W_t - W_{t-1} = f(t) - f(t - L - 1) (all t, L >= 0)"
GQA = "kv_head = the repeat_interleave map; repeat (tile) agrees only for G in {1, H}"


def _statement(rec) -> None:
    from derivations._latex import tex

    rec.statement["window"] = tex(
        r"s \text{ visible from } t \iff t' - \ell \le s \le t' + \rho,\quad t' = t + S - T,"
        r"\quad \ell, \rho \in \{-1\} \cup \mathbb{N}\ (-1\text{: unbounded}) \qquad "
        r"(T \text{ queries } 0 \le t < T,\ S \text{ keys } 0 \le s < S)",
        claim=COUNT,
    )
    rec.statement["count"] = tex(
        r"\#\{s\} = \max\bigl(0,\ \min(S-1,\, t'+\rho) - \max(0,\, t'-\ell) + 1\bigr)",
        claim=COUNT,
    )
    rec.statement["finite_history"] = tex(
        r"W_t = \sum_{s=t-L}^{t} f(s) = W_{t-1} + f(t) - f(t-L-1) \qquad "
        r"(L \ge 0,\ \text{every integer } t;\ f(s) = 0 \text{ before the first token})",
        claim=HISTORY,
    )
    rec.statement["gqa"] = tex(
        r"g(h) = \left\lfloor h \,/\, (H/G) \right\rfloor \qquad "
        r"(G \text{ key/value heads dividing } H \text{ query heads},\ 0 \le h < H)",
        claim=GQA,
    )


def _claim_count(rec, f) -> None:
    def check():
        for queries in range(1, MAX_LEN + 1):
            for keys in range(1, MAX_LEN + 1):
                for left in WINDOW_SIDES:
                    for right in WINDOW_SIDES:
                        for t in range(queries):
                            seen = sum(
                                window_visible(t, s, queries, keys, left, right)
                                for s in range(keys)
                            )
                            if seen != f["visible_count"](t, queries, keys, left, right):
                                return False
        return True

    rec.step(
        r"Count: the visible keys of query $t$ are the integers of "
        r"$[\max(0, t' - \ell), \min(S - 1, t' + \rho)]$ (a side of $-1$ drops its bound), so "
        r"their number is the length of that interval, or 0 when it is empty (a window can leave "
        r"a row with no key).",
    )
    rec.verify(
        COUNT,
        check,
        f"T, S in 1..{MAX_LEN}, left, right in {WINDOW_SIDES}, every query",
    )


def _claim_alignment(rec) -> None:
    def check():
        for n in range(1, MAX_LEN + 1):  # causal, T = S: s <= t
            for t in range(n):
                if [window_visible(t, s, n, n, -1, 0) for s in range(n)] != [
                    s <= t for s in range(n)
                ]:
                    return False
        for queries in range(1, MAX_LEN + 1):  # the last query sees the last key (right >= 0)
            for keys in range(1, MAX_LEN + 1):
                for left in WINDOW_SIDES:
                    for right in (0, 1, 2):
                        if not window_visible(queries - 1, keys - 1, queries, keys, left, right):
                            return False
        return True

    rec.verify(
        "causal = window (-1, 0) is s <= t for T = S; the last query sees the last key",
        check,
        f"T, S in 1..{MAX_LEN}; every left, right in (0, 1, 2)",
    )


def _claim_finite_history(rec, f) -> None:
    import sympy

    t = sympy.Symbol("t", integer=True)
    s_ = sympy.Symbol("s", integer=True)
    big_l = sympy.Symbol("L", integer=True, nonnegative=True)
    g = sympy.Function("f")
    lag = f["leaving_lag"]
    win = sympy.Sum(g(s_), (s_, t - big_l, t))
    rec.step(
        r"Finite history: the windowed sum over $s = t - L, \dots, t$ gains $f(t)$ and loses "
        r"the token $f(t - L - 1)$ that leaves the window, so a recurrent state that adds "
        r"$\phi(k_t) v_t^T$ and subtracts $\phi(k_{t-L-1}) v_{t-L-1}^T$ computes causal windowed "
        r"attention for any kernel with features (it must keep the last $L + 1$ keys and "
        r"values).",
        sympy.Eq(win - win.subs(t, t - 1), g(t) - g(t - big_l - 1), evaluate=False),
    )

    def proof():
        inner = sympy.Sum(g(s_), (s_, t - big_l, t - 1))  # the keys both windows share
        prev = win.subs(t, t - 1)
        new = sympy.Sum(g(s_), (s_, t, t))
        gone = sympy.Sum(g(s_), (s_, t - big_l - 1, t - big_l - 1))
        return (
            sympy.simplify(inner + new - win) == 0
            and sympy.simplify(gone + inner - prev) == 0
            and sympy.simplify(new.doit() - gone.doit() - (g(t) - g(t - big_l - lag))) == 0
        )

    rec.prove(
        HISTORY,
        proof,
        "symbolic t, L; both windows split into the shared keys t-L..t-1 plus one end term",
    )

    def instances():
        from sympy import QQ

        length, d, d_v = 4, 2, 1
        r, q, k, v, one = rc._ring(length, d, d_v)
        for order in (1, 2):
            tt = sympy.Dummy("t")
            ser = sympy.series(sympy.exp(tt), tt, 0, order + 1).removeO()
            coeffs = [QQ.convert(ser.coeff(tt, n)) for n in range(order + 1)]
            for big in (0, 1, 2):
                state = None
                for t_i in range(length):
                    kf = rc._features([r * x for x in k[t_i]], order, "symmetric", f, one)
                    if state is None:
                        state = [[0 * one] * d_v for _ in kf]
                    state = [
                        [sj + m * vj for sj, vj in zip(st, v[t_i])] for st, (_, m) in zip(state, kf)
                    ]
                    old = t_i - big - f["leaving_lag"]
                    if old >= 0:
                        kl = rc._features([r * x for x in k[old]], order, "symmetric", f, one)
                        state = [
                            [sj - m * vj for sj, vj in zip(st, v[old])]
                            for st, (_, m) in zip(state, kl)
                        ]
                    got = rc._readout(
                        rc._features([r * x for x in q[t_i]], order, "symmetric", f, one), state
                    )
                    want = [0 * one] * d_v
                    for s_i in range(max(0, t_i - big), t_i + 1):
                        w = rc._kappa(r * r * rc._dot(q[t_i], k[s_i], one), coeffs, one)
                        want = [a + w * vj for a, vj in zip(want, v[s_i])]
                    if not rc._same([got], [want]):
                        return False
        return True

    rec.verify(
        "windowed Taylor-N: add the new token, subtract the leaving one == windowed parallel",
        instances,
        "T = 4, d = 2, N in {1, 2}, L in {0, 1, 2}, symmetric basis, symbolic q, k, v, c",
    )


def _claim_gqa(rec, f) -> None:
    def check():
        for heads in range(1, MAX_HEADS + 1):
            for kv in (g for g in range(1, heads + 1) if heads % g == 0):
                rep = heads // kv
                # repeat_interleave(rep) on the head axis: position h holds kv head h // rep
                interleaved = [g for g in range(kv) for _ in range(rep)]
                tiled = [g for _ in range(rep) for g in range(kv)]  # repeat / tile
                mapped = [f["kv_head"](h, heads, kv) for h in range(heads)]
                if mapped != interleaved:
                    return False
                if (tiled == interleaved) != (kv in (1, heads)):
                    return False
        return True

    rec.step(
        r"GQA: expanding $G$ key/value heads to $H$ with repeat_interleave($H/G$) places kv head "
        r"$\lfloor h / (H/G) \rfloor$ at head $h$, so GQA is multi-head attention on the "
        r"expanded keys and values; the tiled expansion (repeat) places $h \bmod G$ there, a "
        r"different map unless $G = 1$ or $G = H$.",
    )
    rec.verify(
        GQA,
        check,
        f"H in 1..{MAX_HEADS}, every divisor G",
    )


def derive(**wrong) -> Derivation:
    """Build the D15 record: windows and GQA as checked structure.

    Keyword overrides (wrong-statement tests): ``visible_count`` and ``kv_head`` (callables
    replacing the exports), ``leaving_lag`` (1 right; 0 subtracts the token one step early,
    a window one key too narrow).

    Raises:
        TypeError: an unknown override name.
    """
    f = fm.resolve_overrides(
        wrong,
        {
            "visible_count": visible_count,
            "kv_head": kv_head,
            "leaving_lag": 1,
            "taylor_coefficient": fm.taylor_coefficient,
            "multi_indices": fm.multi_indices,
            "monomial_weight": fm.monomial_weight,
        },
    )
    rec = Derivation("D15", "Windows and grouped key/value heads as structure")
    rec.cite(
        "sliding-window (local) attention: each query sees a fixed band of keys",
        "Beltagy, Peters & Cohan, 'Longformer: The Long-Document Transformer', "
        "arXiv:2004.05150, 2020; the (left, right) convention with bottom-right alignment: "
        "FlashAttention-2's window_size (Dao, arXiv:2307.08691, and its flash_attn_func "
        "documentation)",
        "the forms; the closed-form count and the finite-history RNN below are this project's",
    )
    rec.cite(
        HF_WINDOW,
        "Hugging Face transformers 5.23.0 (the version constraints.txt pins), "
        "src/transformers/masking_utils.py: sliding_window_overlay (kv_idx > q_idx - "
        "sliding_window) and'ed with causal_mask_function (kv_idx <= q_idx) in "
        "sliding_window_causal_mask_function, used by create_sliding_window_causal_mask",
        "the convention as of that version (its bidirectional overlay keeps |q_idx - kv_idx| <= "
        "W, i.e. (W, W)); hf_sliding_window and the checks against transformers in "
        "tests/test_derivations_d15.py are this project's",
    )
    rec.cite(
        "grouped-query attention: G key/value heads shared by groups of H/G query heads",
        "Ainslie et al., 'GQA: Training Generalized Multi-Query Transformer Models from "
        "Multi-Head Checkpoints', EMNLP 2023 (arXiv:2305.13245)",
        "the form; the head map and its comparison with the tiled map below are this project's",
    )
    _statement(rec)
    _claim_count(rec, f)
    _claim_alignment(rec)
    _claim_finite_history(rec, f)
    _claim_gqa(rec, f)
    rec.exports = ["window_visible", "visible_count", "kv_head", "hf_sliding_window"]
    return rec


if __name__ == "__main__":
    from derivations._record import main_for

    main_for(derive)
