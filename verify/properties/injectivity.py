"""Injectivity and rank properties: D9 checked on a variant's own weights.

- ``softmax-injectivity``: softmax weights tell two queries apart when rank [K, 1] = d + 1, and
  coincide along the collision direction otherwise.
- ``homogeneous-map-collision``: normalized linear attention with a positively homogeneous map
  gives q and alpha q the same weights.
- ``linear-attention-rank``: a kernel with m features gives a non-causal attention matrix of
  rank <= m; a causal mask raises it to T.
- ``exp-kernel-full-rank``: sorted distinct scalar queries and keys give a strictly totally
  positive exp kernel and a certified full-rank softmax weight matrix.

Query pairs and matrices are built from drawn values rounded to the run's dtype (keys, queries
and identity values); rounding bounds come from ``verify.exact.errors`` (D10) through
``support.common.exact_and_bound``, certificates from ``derivations.related``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.claims import (
    constructed_applies,
    homogeneous_weights_applies,
    softmax_weights_applies,
)
from verify.properties.support.common import Example, exact_and_bound, tensor_snippet
from verify.properties.support.defined import all_undefined, any_undefined
from verify.properties.support.inputs import (
    elements,
    identity_values,
    inputs_with_radius,
    interval,
    make_inputs,
    rounded,
    weight_inputs,
)
from verify.properties.support.observe import (
    DPS,
    certified_change,
    elementwise,
    mp_diff,
    np64,
)
from verify.properties.support.paths import call_mode, sum_mode
from verify.spec.results import NoStatement, NotApplicable, Observation


# ----------------------------------------------------------------------------- D9 injectivity
@dataclass
class QueryPairExample:
    """Keys K (S x d), a query q and a direction for the second query."""

    keys: list[list[float]]
    q: list[float]
    direction: list[float]
    t: float

    def __repr__(self) -> str:
        return (
            f"QueryPairExample(keys={self.keys!r}, q={self.q!r}, direction={self.direction!r}, "
            f"t={self.t!r})"
        )

    def snippet(self) -> str:
        return tensor_snippet(
            {"k": [[self.keys]], "q": [[[self.q]]]},
            f"second query: q + t * direction, direction = {self.direction!r}, t = {self.t!r}",
        )


def _pair_examples(variant, ctx):
    from hypothesis import strategies as st

    from verify.strategies import sizes

    @st.composite
    def draw(d):
        dim = d(sizes(1, 3))
        S = d(sizes(1, 6))
        el = elements(ctx.torch_dtype)
        vec = st.lists(el, min_size=dim, max_size=dim)
        keys = d(st.lists(vec, min_size=S, max_size=S))
        q = d(vec)
        direction = d(st.lists(interval(-1.0, 1.0), min_size=dim, max_size=dim))
        t = d(interval(0.25, 2.0))
        keys = rounded(keys, ctx)
        q = rounded(q, ctx)
        return QueryPairExample(keys, q, direction, t)

    return draw()


def _pair_inputs(ex: QueryPairExample, q2: list[float], ctx):
    return weight_inputs([[[ex.q, q2]]], [[ex.keys]], ctx, case="query pair")


def _injectivity_check(variant, ex: QueryPairExample, ctx) -> list[Observation]:
    from derivations.related import softmax_collision_direction

    collision = softmax_collision_direction(ex.keys)
    if collision is None:  # rank [K, 1] = d + 1: q -> softmax(K q) is injective
        q2 = [a + ex.t * b for a, b in zip(ex.q, ex.direction)]
        kind = "injective keys"
    else:  # q + t u with K u = c 1 gives the same weights (D6)
        u, _ = collision
        norm = max(abs(float(a)) for a in u)
        q2 = [a + ex.t * float(b) / norm for a, b in zip(ex.q, u)]
        kind = "collision direction u (rank [K, 1] <= d)"
    x = _pair_inputs(ex, q2, ctx)
    ref, eb = exact_and_bound(variant, x, ctx, denominator="sum")
    w = np64(call_mode(variant, x, "sum"))[0, 0]
    measured = np.abs(w[1] - w[0])
    exact = mp_diff(ref.exact[0, 0, 1], ref.exact[0, 0, 0])
    rounding = eb.bound[0, 0, 0] + eb.bound[0, 0, 1]
    if collision is None:
        # the key whose exact weight changes most (mpmath: the same on every machine), not the
        # one most above twice the bound: certified_change holds for any exact change
        # (measured >= exact - bound) and certifies it when exact > 2 bound, so no draw is
        # rejected by the bound's last bits (a rejected draw changes every later draw)
        if not (exact > 0).any():
            raise NotApplicable("the two queries' exact weights are equal (q' = q, or S = 1)")
        finite = np.isfinite(rounding)
        if not finite.any():
            raise NoStatement("no weight has a finite rounding bound")
        j = int(np.argmax(np.where(finite, exact, -1.0)))
        o = certified_change(float(measured[j]), float(exact[j]), float(rounding[j]), kind)
        o.where = f"key {j}"
        if not exact[j] > 2 * rounding[j]:
            o.detail += "; exact <= 2 bound: no change certified on this example"
        return [o]
    # the second query is q + t u rounded: its exact weights differ from q's by ``exact``
    return [elementwise(measured, rounding + exact, f"{kind}: |w(q') - w(q)|")]


SOFTMAX_INJECTIVITY = declare(
    "softmax-injectivity", softmax_weights_applies, _pair_examples, _injectivity_check
)


def _collision_examples(variant, ctx):
    from hypothesis import strategies as st

    return st.builds(
        lambda x, a: Example(x, {"alpha": a}),
        inputs_with_radius(variant, ctx, None, cases=("positive", "random"), max_len=6),
        st.sampled_from((0.25, 0.5, 2.0, 4.0)),
    )


def _collision_check(variant, ex: Example, ctx) -> Observation:
    x0 = identity_values(ex.inputs)
    a = ex.choices["alpha"]
    if all_undefined(variant, x0, "sum"):  # exactly, from the inputs (alpha q: the same rows)
        raise NotApplicable("every row's kernel sum vanishes exactly: the weights are undefined")
    x1 = make_inputs(a * x0.q, x0.k, x0.v, causal=x0.causal, case="alpha q")  # exact scaling
    ref0, eb0 = exact_and_bound(variant, x0, ctx, denominator="sum")
    ref1, eb1 = exact_and_bound(variant, x1, ctx, denominator="sum")
    bound = eb0.bound + eb1.bound  # the exact weights are identical (D9)
    finite = np.isfinite(bound).all()
    w0 = np64(call_mode(variant, x0, "sum", allow_nonfinite=not finite))
    w1 = np64(call_mode(variant, x1, "sum", allow_nonfinite=not finite))
    return elementwise(np.abs(w1 - w0), bound, f"|w(alpha q) - w(q)| (alpha = {a})")


HOMOGENEOUS_MAP_COLLISION = declare(
    "homogeneous-map-collision", homogeneous_weights_applies, _collision_examples, _collision_check
)


# ----------------------------------------------------------------------------- D9 rank
def _feature_dim(variant, d: int) -> int | None:
    from derivations.feature_maps import feature_count

    n = variant.order
    if n is not None and variant.exp_type:
        return feature_count(n, d, "symmetric")
    if variant.linear_map in ("identity", "relu", "elu1"):
        return d
    if variant.linear_map == "favor" and variant.projection is not None:
        import torch

        return int(variant.projection(d, torch.float64, "cpu").shape[0])
    return None


def _identity_values(variant) -> str | None:
    """The weight matrices are read with one-hot values (d_v = S at d = 1): outside a d_v == d
    restriction, decided once rather than on every draw."""
    if variant.dv_equals_d:
        return "reads the weights with one-hot values (d_v = S, d = 1): outside d_v == d"
    return None


def _rank_applies(variant, ctx) -> str | None:
    if why := _identity_values(variant):
        return why
    m = _feature_dim(variant, 1)
    if m is None:
        return "needs a kernel with a known finite feature dimension (linear maps, taylor:N)"
    if m >= 10:
        return f"feature dimension {m} >= 10 at d = 1: the rank bound says nothing at T <= 10"
    if _rank_mode(variant) is None:
        return "neither the normalized nor the unnormalized matrix is available"
    return constructed_applies(variant, ctx)


def _rank_mode(variant) -> str | None:
    """``sum`` (row scaling keeps the rank) or ``none``."""
    mode = sum_mode(variant)
    if mode is None and (not variant.denominators or "none" in variant.denominators):
        mode = "none"
    return mode


def _rank_examples(variant, ctx):
    from hypothesis import strategies as st

    from verify.strategies import sizes

    @st.composite
    def draw(d):
        dim = d(sizes(1, 2))
        m = _feature_dim(variant, dim)
        if m is None or m + 1 > 10:
            dim = 1
            m = _feature_dim(variant, 1)
        T = d(sizes(m + 1, 10))
        el = elements(ctx.torch_dtype, 1.5)
        if variant.linear_map == "relu":  # keep relu(q).relu(k) away from 0
            el = interval(0.25, 1.5)
        q = d(st.lists(st.lists(el, min_size=dim, max_size=dim), min_size=T, max_size=T))
        k = d(st.lists(st.lists(el, min_size=dim, max_size=dim), min_size=T, max_size=T))
        w = d(st.lists(interval(0.25, 1.0), min_size=dim, max_size=dim))  # positive: relu-safe
        choices = {"q": rounded(q, ctx), "k": rounded(k, ctx), "w": rounded(w, ctx), "m": m}
        return Example(None, choices)

    return draw()


def _singular_values(mat) -> list:
    import mpmath

    with mpmath.workdps(DPS):
        return sorted(mpmath.svd_r(mpmath.matrix(mat), compute_uv=False), reverse=True)


def _rank_check(variant, ex: Example, ctx) -> list[Observation]:
    import mpmath

    ch = ex.choices
    m = ch["m"]
    mode = _rank_mode(variant)
    T = len(ch["q"])
    x = weight_inputs([[ch["q"]]], [[ch["k"]]], ctx, case="rank")
    if any_undefined(variant, x, mode):  # exactly, from the inputs
        raise NotApplicable("a kernel sum vanishes exactly: the weight matrix is undefined")
    ref, eb = exact_and_bound(variant, x, ctx, denominator=mode)
    finite = np.isfinite(eb.bound)
    if not finite.all():  # a float decision (the bound's majorants): no draw rejected on it
        raise NoStatement("a denominator may vanish: the weight matrix has no finite bound")
    A_hat = np64(call_mode(variant, x, mode))[0, 0]
    frob = float(np.sqrt(np.sum(eb.bound[0, 0] ** 2)))  # ||A_hat - A||_2 <= ||.||_F
    with mpmath.workdps(DPS):
        sv_exact = _singular_values([[ref.exact[0, 0, i, j] for j in range(T)] for i in range(T)])
        sv_hat = _singular_values(A_hat.tolist())
        prec = mpmath.mpf(10) ** (10 - DPS) * sv_exact[0]
        obs = [
            Observation(
                float(sv_exact[m]),
                float(prec),
                "derived",
                where="exact matrix",
                detail=f"sigma_{m + 1} of the exact {T}x{T} matrix (rank <= m = {m}); mpmath "
                f"SVD at {DPS} digits, allowance 1e{10 - DPS} sigma_1",
            ),
            Observation(
                float(sv_hat[m]),
                frob,
                "derived",
                where="variant matrix",
                detail=f"sigma_{m + 1}(A_hat) <= ||A_hat - A||_F (Weyl, rank A <= m = {m})",
            ),
        ]
    if variant.supports_causal(True):
        causal = _causal_rank(variant, ch["w"], T, mode, ctx)
        if causal is not None:
            obs.append(causal)
    return obs


def _causal_rank(variant, w: list[float], T: int, mode: str, ctx) -> Observation | None:
    """All tokens equal: the non-causal matrix has rank 1, the causal one rank T (D9); None
    where the bound of the equal-token matrix is not finite (a float decision: the other
    observations of the example stand, no draw is rejected on it)."""
    import mpmath

    tokens = [[[w] * T]]
    x = weight_inputs(tokens, tokens, ctx, causal=True, case="equal tokens")
    if any_undefined(variant, x, mode):  # exactly, from the inputs
        raise NotApplicable("a kernel sum vanishes exactly on the equal-token input")
    ref, eb = exact_and_bound(variant, x, ctx, denominator=mode)
    if not np.isfinite(eb.bound).all():
        return None
    A_hat = np64(call_mode(variant, x, mode))[0, 0]
    frob = float(np.sqrt(np.sum(eb.bound[0, 0] ** 2)))
    with mpmath.workdps(DPS):
        sv_exact = _singular_values([[ref.exact[0, 0, i, j] for j in range(T)] for i in range(T)])
        sv_hat = _singular_values(A_hat.tolist())
    low = float(sv_exact[T - 1])
    if not low > 0:  # mpmath: the same on every machine
        raise NotApplicable("sigma_T of the exact causal matrix is 0")
    # sound for any sigma_T (Weyl: |sigma_T(A_hat) - sigma_T(A)| <= frob); certifies rank T
    # when low > 2 frob, a float decision that rejects no draw
    o = certified_change(
        float(sv_hat[T - 1]), low, frob, f"causal mask raises the rank to T = {T}: sigma_T"
    )
    o.where = "causal equal-token matrix"
    if not low > 2 * frob:
        o.detail += "; sigma_T <= 2 bound: rank T not certified on this example"
    return o


LINEAR_ATTENTION_RANK = declare("linear-attention-rank", _rank_applies, _rank_examples, _rank_check)


def _full_rank_examples(variant, ctx):
    from hypothesis import strategies as st

    from verify.strategies import sizes

    @st.composite
    def draw(d):
        n = d(sizes(2, 5))
        q0, k0 = d(interval(-2.0, 0.0)), d(interval(-2.0, 0.0))
        q = [q0]
        k = [k0]
        for _ in range(n - 1):
            q.append(q[-1] + d(interval(0.25, 1.0)))
            k.append(k[-1] + d(interval(0.25, 1.0)))
        return Example(
            None,
            {"q": rounded(q, ctx), "k": rounded(k, ctx)},
        )

    return draw()


def _full_rank_check(variant, ex: Example, ctx) -> list[Observation]:
    import mpmath

    from derivations.related import exp_kernel_strictly_totally_positive

    q, k = ex.choices["q"], ex.choices["k"]
    n = len(q)
    c = variant.score_scale(1)
    certified = exp_kernel_strictly_totally_positive([c * a for a in q], k)
    obs = [
        Observation(
            0.0 if certified else 1.0,
            0.0,
            "exact",
            where="certificate",
            detail=f"exp(c q_i k_j) strictly totally positive (interval certificate, n = {n}): "
            f"{certified}",
        )
    ]
    x = weight_inputs(
        np.asarray(q)[None, None, :, None],
        np.asarray(k)[None, None, :, None],
        ctx,
        case="sorted scalars",
    )
    ref, eb = exact_and_bound(variant, x, ctx, denominator="sum")
    A_hat = np64(call_mode(variant, x, "sum"))[0, 0]
    frob = float(np.sqrt(np.sum(eb.bound[0, 0] ** 2)))
    with mpmath.workdps(DPS):
        sv_exact = _singular_values([[ref.exact[0, 0, i, j] for j in range(n)] for i in range(n)])
        sv_hat = _singular_values(A_hat.tolist())
    low = float(sv_exact[-1])
    if not low > 0:  # mpmath: the same on every machine
        raise NotApplicable("sigma_min of the exact weight matrix is 0")
    # sound for any sigma_min (Weyl); certifies full rank when low > 2 frob (ill-conditioned
    # otherwise), a float decision that rejects no draw
    o = certified_change(float(sv_hat[-1]), low, frob, f"full rank {n}: sigma_min")
    o.where = "softmax weight matrix"
    if not low > 2 * frob:
        o.detail += "; sigma_min <= 2 bound (ill-conditioned): full rank not certified here"
    obs.append(o)
    return obs


def _full_rank_applies(variant, ctx) -> str | None:
    return softmax_weights_applies(variant, ctx) or _identity_values(variant)


EXP_KERNEL_FULL_RANK = declare(
    "exp-kernel-full-rank", _full_rank_applies, _full_rank_examples, _full_rank_check
)


PROPERTIES = (
    SOFTMAX_INJECTIVITY,
    HOMOGENEOUS_MAP_COLLISION,
    LINEAR_ATTENTION_RANK,
    EXP_KERNEL_FULL_RANK,
)
