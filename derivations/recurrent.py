"""D2. Softmax attention is an RNN: parallel == recurrent == chunked.

o_t = N_t / D_t with N_t = sum_{s<=t} kappa(x_ts) v_s, D_t = sum_{s<=t} kappa(x_ts), and, for the
Taylor kernel kappa_N, the hidden state S_t^(n) = S_{t-1}^(n) + k~_t^(tensor n) v_t^T (numerator),
z_t^(n) = z_{t-1}^(n) + k~_t^(tensor n) (denominator), read out as
N_t = sum_n (1/n!) <q~_t^(tensor n), S_t^(n)>. The chunked form computes the part of the sum
inside a chunk in parallel and reads the state from *before* the chunk.

Numeric export (plain Python): ``chunk_bounds``. The record compares the three forms as exact
polynomials in symbolic q, k, v (numerator and denominator separately).
"""

from __future__ import annotations

from derivations import feature_maps as fm
from derivations._latex import tex
from derivations._record import Derivation, pick
from derivations._validate import check_choice, check_dim, check_int, check_order

#: instances of the exact identity: T <= 3, d <= 2, N <= 3, and a chunk size not dividing T
LENGTH = 3
DIMS = (1, 2)
ORDERS = (0, 1, 2, 3)
VALUE_DIM = 2
CHUNK_SIZES = (1, 2, 3, 4)
CHUNK_STATES = ("before", "current")
#: the recurrent form of kernel attention and the elu+1 map (cited in D2 and D3)
KATHAROPOULOS = (
    "A. Katharopoulos, A. Vyas, N. Pappas, F. Fleuret, 'Transformers are RNNs: Fast "
    "Autoregressive Transformers with Linear Attention', ICML 2020 (arXiv:2006.16236), "
    "Sec. 3.2 (linearized attention; phi(x) = elu(x) + 1, eq. 7), Sec. 3.3-3.4 (causal masking, "
    "the recurrent form)"
)


def chunk_bounds(length: int, chunk_size: int) -> list[tuple[int, int]]:
    """Half-open 0-based token ranges [(0, C), (C, 2C), ..., (kC, T)] of the chunked form.

    The last chunk is shorter when ``chunk_size`` does not divide ``length`` (never padded:
    padding it is a known chunked-form bug); ``length == 0`` gives ``[]``.

    Raises:
        TypeError: an argument is not an int.
        ValueError: ``length < 0`` or ``chunk_size < 1``.
    """
    check_int("length", length)  # both types first, then both ranges
    check_int("chunk_size", chunk_size)
    check_order("length", length)
    check_dim("chunk_size", chunk_size)
    return [(a, min(a + chunk_size, length)) for a in range(0, length, chunk_size)]


# -- the three forms, as exact polynomials ----------------------------------------------------
# Entries live in the polynomial ring QQ[r, q, k, v] with r = sqrt(c) (so c = r^2 and the
# features of q~ = r q are polynomials too); ring arithmetic keeps the check well under a second.


def _prod(factors, one):
    out = one
    for x in factors:
        out = out * x
    return out


def _features(x, order, basis, f, one):
    """[(readout weight, monomial of x)] over all orders <= ``order``: state coordinates."""
    import itertools

    from sympy import QQ

    out = []
    for n in range(order + 1):
        if basis == "tensor":
            w = QQ.convert(fm.to_sympy(f["taylor_coefficient"](n)))
            for idx in itertools.product(range(len(x)), repeat=n):
                out.append((w, _prod([x[i] for i in idx], one)))
        else:  # symmetric: (1/n!) <q^n, S^n> = sum_alpha (1/alpha!) q^alpha S_alpha
            for alpha in f["multi_indices"](n, len(x)):
                w = QQ.convert(fm.to_sympy(f["monomial_weight"](alpha)))
                out.append((w, _prod([xi**ai for xi, ai in zip(x, alpha)], one)))
    return out


def _kappa(x, coeffs, one):
    return sum((cn * x**n for n, cn in enumerate(coeffs)), 0 * one)


def _dot(a, b, one):
    return sum((x * y for x, y in zip(a, b)), 0 * one)


def _parallel(q, k, v, r, exp_coeffs, one):
    """Masked parallel form; kappa_N from sympy's series of exp (independent reference)."""
    rows = []
    for t in range(len(q)):
        num = [0 * one] * len(v[0])
        for s in range(t + 1):
            w = _kappa(r * r * _dot(q[t], k[s], one), exp_coeffs, one)
            num = [acc + w * vj for acc, vj in zip(num, v[s])]
        rows.append(num)
    return rows


def _readout(qf, state):
    return [sum(w * m * st[j] for (w, m), st in zip(qf, state)) for j in range(len(state[0]))]


def _recurrent(q, k, v, order, r, basis, f, one):
    """State per token: S_t = S_{t-1} + phi(k~_t) v_t^T, then read out with q~_t."""
    state = None
    rows = []
    for t in range(len(q)):
        kf = _features([r * x for x in k[t]], order, basis, f, one)
        if state is None:
            state = [[0 * one] * len(v[t]) for _ in kf]
        state = [[sj + m * vj for sj, vj in zip(st, v[t])] for st, (_, m) in zip(state, kf)]
        rows.append(_readout(_features([r * x for x in q[t]], order, basis, f, one), state))
    return rows


def _chunked(q, k, v, order, r, basis, chunk, f, one):
    """Parallel inside each chunk (kappa from the exported coefficients) + state before it."""
    from sympy import QQ

    coeffs = [QQ.convert(fm.to_sympy(f["taylor_coefficient"](n))) for n in range(order + 1)]
    n_feat = len(_features([r * x for x in k[0]], order, basis, f, one))
    state = [[0 * one] * len(v[0]) for _ in range(n_feat)]
    rows = []
    for a, b in f["chunk_bounds"](len(q), chunk):
        new = [list(st) for st in state]
        for s in range(a, b):
            kf = _features([r * x for x in k[s]], order, basis, f, one)
            new = [[sj + m * vj for sj, vj in zip(st, v[s])] for st, (_, m) in zip(new, kf)]
        read = state if f["chunk_state"] == "before" else new
        for t in range(a, b):
            out = _readout(_features([r * x for x in q[t]], order, basis, f, one), read)
            for s in range(a, t + 1):
                w = _kappa(r * r * _dot(q[t], k[s], one), coeffs, one)
                out = [o + w * vj for o, vj in zip(out, v[s])]
            rows.append(out)
        state = new
    return rows


def _same(rows_a, rows_b) -> bool:
    """Exact equality of two lists of rows of ring elements (polynomial identity)."""
    if len(rows_a) != len(rows_b):
        return False
    return all(
        len(ra) == len(rb) and all(x - y == 0 for x, y in zip(ra, rb))
        for ra, rb in zip(rows_a, rows_b)
    )


def _ring(length, d, d_v):
    """QQ[r, q.., k.., v..]: r = sqrt(c); returns (r, q, k, v, one)."""
    from sympy import QQ
    from sympy.polys.rings import ring

    names = ["r"]
    names += [f"q{t}_{i}" for t in range(1, length + 1) for i in range(1, d + 1)]
    names += [f"k{t}_{i}" for t in range(1, length + 1) for i in range(1, d + 1)]
    names += [f"v{t}_{j}" for t in range(1, length + 1) for j in range(1, d_v + 1)]
    ring_, *gens = ring(",".join(names), QQ)
    r, rest = gens[0], gens[1:]
    q = [rest[t * d : (t + 1) * d] for t in range(length)]
    rest = rest[length * d :]
    k = [rest[t * d : (t + 1) * d] for t in range(length)]
    rest = rest[length * d :]
    v = [rest[t * d_v : (t + 1) * d_v] for t in range(length)]
    return r, q, k, v, ring_.one


# -- the record, one function per claim group ----------------------------------------------------
def _syms():
    """Symbols shared by the D2 statement and proofs (equal symbols compare equal)."""
    import sympy

    t, s_, n, big_n = sympy.symbols("t s n N", integer=True, nonnegative=True)
    return {
        "t": t,
        "s": s_,
        "n": n,
        "N": big_n,
        "a": sympy.Symbol("a", integer=True, positive=True),
        "I": sympy.Symbol("I", integer=True),
        "M": sympy.Symbol("M", integer=True, positive=True),
        "f": sympy.Function("f"),
    }


def _statement(rec) -> None:
    import sympy

    t, s_, n, big_n = pick(_syms(), "t", "s", "n", "N")
    kap = sympy.Function("kappa_N")
    x, v, o = sympy.IndexedBase("x"), sympy.IndexedBase("v"), sympy.IndexedBase("o")
    # Tensor powers and the state contraction have no sympy object: hand-written templates
    # (derivations._latex) with the sympy parts as slots, each naming the claim that proves it.
    readout = "recurrent readout = parallel form (all T, d, N), z^(0)_t = t"
    rec.statement["output"] = tex(
        r"@o \qquad (x_{t, s} = c\, q_t \cdot k_s,\ c > 0;\ "
        r"\textstyle\sum_{s \le t} \kappa_N(x_{t, s}) \ne 0\text{, always for even } N)",
        claim=readout,
        o=sympy.Eq(
            o[t],
            sympy.Sum(kap(x[t, s_]) * v[s_], (s_, 1, t)) / sympy.Sum(kap(x[t, s_]), (s_, 1, t)),
        ),
    )
    rec.statement["state_update"] = tex(
        r"S^{(n)}_t = S^{(n)}_{t-1} + \tilde{k}_t^{\otimes n} v_t^{T}, \qquad S^{(n)}_0 = 0"
        r" \qquad (\tilde{k}_t = \sqrt{c}\, k_t)",
        claim="the state recursion unrolls to the causal prefix sum (all t)",
    )
    rec.statement["normalizer_update"] = tex(
        r"z^{(n)}_t = z^{(n)}_{t-1} + \tilde{k}_t^{\otimes n}, \qquad z^{(n)}_0 = 0",
        claim="the state recursion unrolls to the causal prefix sum (all t)",
    )
    rec.statement["readout"] = tex(
        r"o_t = \frac{N_t}{D_t}, \quad N_t = \sum_{n=0}^{N} \frac{1}{n!}"
        r" \big(\tilde{q}_t^{\otimes n}\big)^{T} S^{(n)}_t, \quad"
        r" D_t = \sum_{n=0}^{N} \frac{1}{n!} \big(\tilde{q}_t^{\otimes n}\big)^{T} z^{(n)}_t"
        r" \qquad (\tilde{q}_t = \sqrt{c}\, q_t,\ D_t \ne 0)",
        claim=readout,
    )


def _claim_prefix_sum(rec) -> None:
    """The state recursion S_t = S_{t-1} + f(t), S_0 = 0 unrolls to the causal prefix sum."""
    import sympy
    from sympy.series.limitseq import difference_delta

    t, s_, g = pick(_syms(), "t", "s", "f")
    rec.step(
        r"Unrolling: $S_t = \sum_{s \le t} f(s)$ with $f(s) = \tilde{k}_s^{\otimes n} v_s^T$ "
        r"satisfies $S_t - S_{t-1} = f(t)$ and $S_0 = 0$ (empty sum); the recursion has one "
        r"solution, so the recurrent state is the causal prefix sum. The mask is implicit: only "
        r"$s \le t$ has entered the state.",
        sympy.Eq(
            sympy.Sum(g(s_), (s_, 1, t + 1)) - sympy.Sum(g(s_), (s_, 1, t)),
            g(t + 1),
            evaluate=False,
        ),
    )
    rec.prove(
        "the state recursion unrolls to the causal prefix sum (all t)",
        lambda: (
            difference_delta(sympy.Sum(g(s_), (s_, 1, t)), t) == g(t + 1)
            and sympy.Sum(g(s_), (s_, 1, 0)).doit() == 0
        ),
        "symbolic t, undefined f: difference_delta of the prefix sum is f(t+1)",
    )


def _claim_readout(rec) -> None:
    """Reading the state out with q~ gives the parallel form (exchange of two finite sums)."""
    import sympy
    from sympy.simplify.simplify import factor_sum

    t, s_, big_i, m_sym = pick(_syms(), "t", "s", "I", "M")
    qf, kf, vf = sympy.Function("Q"), sympy.Function("K"), sympy.Function("V")
    rec.step(
        r"Readout: $\langle \tilde{q}^{\otimes n}, \sum_s \tilde{k}_s^{\otimes n} v_s \rangle "
        r"= \sum_s \langle \tilde{q}^{\otimes n}, \tilde{k}_s^{\otimes n} \rangle v_s$ "
        r"(exchange of two finite sums over the $M = d^n$ tensor coordinates $I$ and the tokens "
        r"$s$); with $\langle \tilde{q}^{\otimes n}, \tilde{k}^{\otimes n} \rangle = "
        r"(c\, q \cdot k)^n$ (D1, proved) and the weights $1 / n!$ the readout is "
        r"$\sum_s \kappa_N(x_{t,s}) v_s$, the parallel form. Order 0: $z_t^{(0)} = "
        r"\sum_{s \le t} 1 = t$.",
        sympy.Eq(
            sympy.Sum(qf(big_i) * sympy.Sum(kf(big_i, s_) * vf(s_), (s_, 1, t)), (big_i, 1, m_sym)),
            sympy.Sum(vf(s_) * sympy.Sum(qf(big_i) * kf(big_i, s_), (big_i, 1, m_sym)), (s_, 1, t)),
        ),
    )

    def exchange():
        flat = sympy.Sum(qf(big_i) * kf(big_i, s_) * vf(s_), (s_, 1, t), (big_i, 1, m_sym))
        lhs_inner = factor_sum(sympy.Sum(qf(big_i) * kf(big_i, s_) * vf(s_), (s_, 1, t)))
        swapped = flat.reorder((0, 1))
        rhs_inner = factor_sum(sympy.Sum(*((swapped.function,) + (swapped.limits[0],))))
        return (
            lhs_inner == qf(big_i) * sympy.Sum(kf(big_i, s_) * vf(s_), (s_, 1, t))
            and swapped.limits == ((big_i, 1, m_sym), (s_, 1, t))
            and rhs_inner == vf(s_) * sympy.Sum(qf(big_i) * kf(big_i, s_), (big_i, 1, m_sym))
            and sympy.Sum(1, (s_, 1, t)).doit() == t
        )

    rec.prove(
        "recurrent readout = parallel form (all T, d, N), z^(0)_t = t",
        exchange,
        "symbolic t, M; sympy factor_sum + Sum.reorder; uses D1's tensor-power identity",
    )


def _claim_chunk_split(rec) -> None:
    """The state before a chunk plus the intra-chunk sum is the causal prefix sum."""
    import sympy

    t, s_, a_, g = pick(_syms(), "t", "s", "a", "f")
    rec.step(
        r"Chunked: for a chunk $[a, b)$ and $a \le t < b$, the state before the chunk holds "
        r"$s \le a - 1$ and the intra-chunk parallel part $s = a, \dots, t$; the two ranges are "
        "adjacent, so their sum is the causal prefix sum for every chunk size, including a last "
        r"chunk shorter than the others. Reading the state after the chunk counts "
        r"$s = a, \dots, b - 1$ twice.",
        sympy.Eq(
            sympy.Sum(g(s_), (s_, 1, a_ - 1)) + sympy.Sum(g(s_), (s_, a_, t)),
            sympy.Sum(g(s_), (s_, 1, t)),
        ),
    )
    rec.prove(
        "state before the chunk + intra-chunk sum = causal prefix sum (all a <= t)",
        lambda: (
            sympy.simplify(
                sympy.Sum(g(s_), (s_, 1, a_ - 1))
                + sympy.Sum(g(s_), (s_, a_, t))
                - sympy.Sum(g(s_), (s_, 1, t))
            )
            == 0
        ),
        "symbolic a, t; sympy merges the adjacent ranges",
    )


def _claim_chunk_partition(rec, f) -> None:
    """The exported ``chunk_bounds`` partitions the tokens into chunks of the requested size."""

    def chunk_partition():
        for length in range(0, 8):
            for size in range(1, 9):
                bounds = f["chunk_bounds"](length, size)
                covered = [i for lo, hi in bounds for i in range(lo, hi)]
                if covered != list(range(length)):
                    return False
                if any(not (0 < hi - lo <= size) for lo, hi in bounds):
                    return False
                if any(hi - lo != size for lo, hi in bounds[:-1]):
                    return False
        return True

    rec.verify(
        "chunk_bounds partitions 0..T-1 into chunks of size C (last one shorter)",
        chunk_partition,
        "T = 0..7, C = 1..8",
    )


def _claim_forms_agree(rec, f) -> None:
    """Exact instances: the three forms as polynomials in QQ[r, q, k, v], both bases."""
    import sympy

    rec.step(
        r"Instances: symbolic $q_t$, $k_t$ ($d$ entries), $v_t$ ($d_v = 2$ entries) and "
        r"$r = \sqrt{c}$ (scale $c = r^2 > 0$), in the polynomial ring "
        r"$\mathbb{Q}[r, q, k, v]$. The numerator rows $N_t$ and the denominator rows $D_t$ "
        r"($v = 1$) of each form are compared as polynomials (form minus parallel is 0). The "
        r"parallel $\kappa_N$ comes from sympy's series of $\exp$; the recurrent and chunked "
        "forms use the exported coefficients (tensor basis) or monomial weights (symmetric "
        "basis).",
    )
    tt = sympy.Dummy("t")
    exp_series = sympy.series(sympy.exp(tt), tt, 0, max(ORDERS) + 1).removeO()

    def forms_agree(basis):
        from sympy import QQ

        def check():
            for d in DIMS:
                r, q, k, v, one = _ring(LENGTH, d, VALUE_DIM)
                ones = [[one] for _ in range(LENGTH)]
                for order in ORDERS:
                    ref_coeffs = [QQ.convert(exp_series.coeff(tt, n)) for n in range(order + 1)]
                    for vals in (v, ones):  # numerator, then denominator
                        ref = _parallel(q, k, vals, r, ref_coeffs, one)
                        if not _same(_recurrent(q, k, vals, order, r, basis, f, one), ref):
                            return False
                        for chunk in CHUNK_SIZES:
                            rows = _chunked(q, k, vals, order, r, basis, chunk, f, one)
                            if not _same(rows, ref):
                                return False
            return True

        return check

    detail = (
        f"T = {LENGTH} (rows t = 1, 2, 3 are the T = 1, 2, 3 instances by causality), "
        f"d in {DIMS}, N in {ORDERS}, d_v = {VALUE_DIM}, chunk sizes {CHUNK_SIZES} "
        "(2 does not divide 3; 4 > T); numerator and denominator separately"
    )
    for basis in ("tensor", "symmetric"):
        rec.verify(f"parallel == recurrent == chunked ({basis} basis)", forms_agree(basis), detail)


def derive(**wrong) -> Derivation:
    """Build the D2 record: parallel == recurrent == chunked for Taylor-N attention.

    Keyword overrides (wrong-statement tests): ``taylor_coefficient``, ``multi_indices``,
    ``monomial_weight``, ``chunk_bounds`` (callables replacing the export of that name) and
    ``chunk_state`` (``"before"``, right, or ``"current"``: the cross-chunk term reads the state
    *after* the current chunk, which counts the chunk's own tokens twice).

    Raises:
        TypeError: an unknown override name.
        ValueError: ``chunk_state`` not in ``CHUNK_STATES``.
    """
    f = fm.resolve_overrides(
        wrong,
        {
            "taylor_coefficient": fm.taylor_coefficient,
            "multi_indices": fm.multi_indices,
            "monomial_weight": fm.monomial_weight,
            "chunk_bounds": chunk_bounds,
            "chunk_state": "before",
        },
    )
    check_choice("chunk_state", f["chunk_state"], CHUNK_STATES)
    rec = Derivation("D2", "Softmax attention is an RNN: parallel, recurrent and chunked forms")
    rec.cite(
        "kernel attention phi(q_t).phi(k_s) is an RNN: S_t = S_{t-1} + phi(k_t) v_t^T, "
        "z_t = z_{t-1} + phi(k_t), o_t = phi(q_t)^T S_t / phi(q_t)^T z_t (causal)",
        KATHAROPOULOS,
        "the recurrent form of kernel (linear) attention is theirs; its application to every "
        "order of the exp series with the D1 feature maps, the chunked form and the exact "
        "instance checks are this project's",
    )
    rec.cite(
        "softmax attention as an infinite sum of linear RNNs through the Taylor series of exp",
        "Mongaras & Larson 2025, 'On the Expressiveness of Softmax Attention: A Recurrent "
        "Neural Network Perspective', arXiv 2507.23632",
        "the view; the order-by-order states, the readout and the checks below are this project's",
    )
    _statement(rec)
    # -- general proof
    _claim_prefix_sum(rec)
    _claim_readout(rec)
    _claim_chunk_split(rec)
    _claim_chunk_partition(rec, f)
    # -- exact instances
    _claim_forms_agree(rec, f)
    rec.exports = ["chunk_bounds"]
    return rec


if __name__ == "__main__":
    from derivations._record import main_for

    main_for(derive)
