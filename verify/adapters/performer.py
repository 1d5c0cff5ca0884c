"""performer-pytorch 1.1.4 ``FastAttention`` (FAVOR+, Choromanski et al. 2021) as checked variants.

``FastAttention(dim_heads, nb_features, causal=...)`` draws its random directions at
construction (orthogonal blocks with chi-distributed row norms, ``ortho_scaling=0``) and fixes
causality in the constructor, so there is one factory per causality. The adapter builds one
module per head dimension d (the battery varies d), seeding torch's generator with
``PERFORMER_SEED + d`` inside ``torch.random.fork_rng`` (the global generator is left alone),
and exposes the module's ``projection_matrix`` through the ``projection`` claim: the oracle then
evaluates the FAVOR+ estimate with exactly these directions (D9), so
``oracle-agreement`` compares performer with the estimator it implements, not with softmax.

What performer computes on top of FAVOR+ (read from ``softmax_kernel`` and the attention
functions; the checks decide whether it matters):

* features phi(x) = m^-1/2 (exp(w.x~ - |x~|^2/2 - M) + 1e-4) with x~ = d^-1/4 x; M is the
  row's largest w.x~ for queries and the largest over *all* tokens and features for keys; the
  e^-M factor cancels in the normalized output, the 1e-4 does not;
* causal mode (``causal_linear_attention_noncuda``, CPU) divides by q.(k_cumsum + 1e-6);
* the orthogonal blocks come from ``torch.linalg.qr`` without the sign(diag(R)) correction, so
  the directions are not Haar distributed (:func:`orthogonal_sign_bias`) and the FAVOR+
  estimate is biased.

``nb_features`` is fixed at :data:`NB_FEATURES` for the battery (performer's default
int(d ln d) is 0 at d = 1 and 1 at d = 2). :func:`feature_count_experiment` measures the error
against exact softmax as nb_features grows (the card's "error shrinking" section).

:data:`VARIANTS` names the variants' cards; :func:`card_facts` measures what each card shows.
"""

from __future__ import annotations

import contextlib
import io
import math
import warnings
from typing import Any

from verify.spec.variant import AttentionVariant

#: card name -> import spec of the variant's zero-argument factory
VARIANTS: dict[str, str] = {
    "performer-FastAttention-noncausal": "verify.adapters.performer:noncausal_variant",
    "performer-FastAttention-causal": "verify.adapters.performer:causal_variant",
}

NB_FEATURES = 16
PERFORMER_SEED = 20210301
#: the constant performer adds to every feature (softmax_kernel's default eps)
FEATURE_EPS = 1e-4

_MODULES: dict[tuple[int, int, bool, int], object] = {}


def _performer():
    """Import performer_pytorch (its distutils/amp deprecation warnings silenced).

    Raises:
        ImportError: performer-pytorch is not installed.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        import performer_pytorch.performer_pytorch as pp
    return pp


def fast_attention(
    d: int, *, causal: bool, nb_features: int = NB_FEATURES, seed: int | None = None
):
    """The (cached) ``FastAttention(d, nb_features, causal=causal)`` built under a fixed seed.

    Args:
        d: head dimension (>= 1). causal: performer's constructor flag.
        nb_features: m random features (>= 1). seed: torch seed for the directions (default
            ``PERFORMER_SEED + d``).

    Returns:
        a ``performer_pytorch.FastAttention`` in eval mode on the CPU.

    Raises:
        ValueError: d or nb_features < 1. ImportError: performer-pytorch missing.
    """
    import torch

    if not isinstance(d, int) or d < 1:
        raise ValueError(f"d: expected an int >= 1, got {d!r}")
    if not isinstance(nb_features, int) or nb_features < 1:
        raise ValueError(f"nb_features: expected an int >= 1, got {nb_features!r}")
    seed = PERFORMER_SEED + d if seed is None else seed
    key = (d, nb_features, bool(causal), seed)
    mod = _MODULES.get(key)
    if mod is None:
        pp = _performer()
        with torch.random.fork_rng(devices=[]), contextlib.redirect_stdout(io.StringIO()):
            torch.manual_seed(seed)  # causal construction prints a CUDA notice: swallowed
            mod = pp.FastAttention(d, nb_features=nb_features, causal=causal).eval()
        _MODULES[key] = mod
    return mod


def projection_for(causal: bool, nb_features: int = NB_FEATURES):
    """``projection(d, dtype, device) -> (m, d)``: the directions the variant's module uses."""

    def projection(d, dtype, device):
        mod = fast_attention(int(d), causal=causal, nb_features=nb_features)
        return mod.projection_matrix.detach().to(dtype=dtype, device=device)

    return projection


def performer_forward(
    q, k, v, *, causal: bool, module_causal: bool, nb_features: int = NB_FEATURES
):
    """``FastAttention(d, nb_features, causal=module_causal)(q, k, v)``.

    q, k: (B, H, T|S, d); v: (B, H, S, d_v); returns (B, H, T, d_v) in q's dtype.

    Raises:
        ValueError: ``causal`` differs from the module's fixed causality.
    """
    if bool(causal) != module_causal:
        raise ValueError(
            f"causal: this FastAttention is built with causal={module_causal}, got causal={causal}"
        )
    mod = fast_attention(q.shape[-1], causal=module_causal, nb_features=nb_features)
    if mod.projection_matrix.device != q.device:
        mod.to(q.device)
    return mod(q, k, v)


def performer_features(x, *, nb_features: int = NB_FEATURES):
    """performer's FAVOR+ features of (..., d) inputs with directions drawn afresh per call.

    The directions come from performer's own sampler ``gaussian_orthogonal_random_matrix(m, d)``
    (orthogonal blocks, chi row norms) under torch's global generator, as
    ``FastAttention.redraw_projection_matrix`` draws them; the features are performer's
    ``softmax_kernel(x, is_query=True)`` = m^-1/2 (exp(w.x~ - |x~|^2/2 - M) + 1e-4), x~ = d^-1/4 x,
    M = max_i w_i.x~, multiplied back by e^M (the row factor cancels in the attention output,
    the 1e-4 does not): m^-1/2 (exp(w.x~ - |x~|^2/2) + 1e-4 e^M). Returns (..., m) of x's dtype.
    Used by the FAVOR+ statistics properties (unbiasedness, variance; D9).
    """
    import torch

    pp = _performer()
    d = x.shape[-1]
    proj = pp.gaussian_orthogonal_random_matrix(nb_features, d, scaling=0).to(x.device)
    flat = x.reshape(1, 1, -1, d)
    phi = pp.softmax_kernel(flat, projection_matrix=proj, is_query=True)
    dash = torch.einsum("...id,jd->...ij", flat * d**-0.25, proj.type_as(x))
    phi = phi * torch.exp(dash.amax(dim=-1, keepdim=True))
    return phi.reshape(*x.shape[:-1], phi.shape[-1])


def _forward_noncausal(q, k, v, *, causal: bool):
    return performer_forward(q, k, v, causal=causal, module_causal=False)


def _forward_causal(q, k, v, *, causal: bool):
    return performer_forward(q, k, v, causal=causal, module_causal=True)


def _variant(causal: bool) -> AttentionVariant:
    _performer()
    tag = "causal" if causal else "noncausal"
    return AttentionVariant(
        name=f"performer-FastAttention-{tag}",
        forward=_forward_causal if causal else _forward_noncausal,
        kernel="linear:favor",
        causal="yes" if causal else "no",
        normalized=True,
        feature_map=performer_features,
        projection=projection_for(causal),
        description=f"performer_pytorch.FastAttention(d, nb_features={NB_FEATURES}, "
        f"causal={causal}) (performer-pytorch 1.1.4; directions seeded per d)",
    )


def noncausal_variant() -> AttentionVariant:
    """``FastAttention(d, NB_FEATURES, causal=False)`` claimed as the FAVOR+ estimate with its
    directions."""
    return _variant(False)


def causal_variant() -> AttentionVariant:
    """``FastAttention(d, NB_FEATURES, causal=True)`` (performer's CPU prefix-sum form)."""
    return _variant(True)


# -- the feature-count experiment ---------------------------------------------------------------
FEATURE_COUNTS = (16, 64, 256, 1024)
EXPERIMENT_SEEDS = 8
#: the experiment on a quick card (tests)
QUICK_FEATURE_COUNTS = (16, 64)
QUICK_SEEDS = 2


def feature_count_experiment(
    feature_counts: tuple[int, ...] = FEATURE_COUNTS,
    *,
    seeds: int = EXPERIMENT_SEEDS,
    batch: int = 2,
    heads: int = 2,
    length: int = 32,
    d: int = 16,
    input_std: float = 0.5,
    data_seed: int = 0,
) -> dict:
    """Error of non-causal ``FastAttention`` against exact softmax as nb_features m grows.

    Inputs: q, k, v ~ N(0, input_std^2) of shape (batch, heads, length, d) in float64, drawn once
    from ``data_seed``; for each m, ``seeds`` modules with seeds ``PERFORMER_SEED + 1000 m + s``.
    Per run: the relative RMS error ||o_perf - o_softmax||_F / ||o_softmax||_F (exact softmax in
    float64: its rounding, ~1e-16, is far below the estimator's error), the same for the
    FAVOR+ estimate with the same directions (``verify.attention.linear_attention``,
    ``feature_map="favor"``), which isolates what performer adds (eps = 1e-4 per feature), and
    for FAVOR+ with Haar-distributed orthogonal blocks (``verify.attention.favor_projection``),
    which isolates performer's sampler (:func:`orthogonal_sign_bias`).

    D9 (``derivations.related.favor_kernel_variance``): for m i.i.d. positive features the
    kernel estimate of exp(x.y) has relative standard deviation sqrt(expm1(|x+y|^2)/m); the
    error therefore shrinks like m^-1/2 (orthogonal directions lower the constant, not the rate
    for m >> d). The fitted slope of log(mean error) against log(m) is compared with -1/2, and
    the D9 relative standard deviation at the inputs' median |x+y|^2 is reported per m.

    Returns:
        dict with ``rows`` (m, mean and std of the error over seeds, FAVOR+ error, performer
        minus FAVOR+, Haar-FAVOR+ error, D9 prediction), ``slope`` and ``haar_slope`` (least
        squares on log-log), ``settings``.

    Raises:
        ValueError: fewer than two feature counts, or a count < 1, or seeds < 1.
    """
    import numpy as np
    import torch

    from derivations.related import favor_kernel_variance
    from verify.attention import linear_attention, softmax_attention

    if len(feature_counts) < 2:
        raise ValueError(f"feature_counts: expected at least two counts, got {feature_counts!r}")
    if any((not isinstance(m, int)) or m < 1 for m in feature_counts):
        raise ValueError(f"feature_counts: expected ints >= 1, got {feature_counts!r}")
    if not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds: expected an int >= 1, got {seeds!r}")
    gen = torch.Generator().manual_seed(data_seed)
    shape = (batch, heads, length, d)
    q, k, v = (torch.randn(shape, generator=gen, dtype=torch.float64) * input_std for _ in range(3))
    exact = softmax_attention(q, k, v)
    norm = exact.norm()
    # D9 at the inputs: x = d^-1/4 q, y = d^-1/4 k, median |x + y|^2 over all pairs
    c = d**-0.5
    sums = ((q.unsqueeze(-2) + k.unsqueeze(-3)) ** 2).sum(-1) * c
    median_sq = float(sums.median())
    from verify.attention import favor_projection

    rows = []
    for m in feature_counts:
        errs, favor_errs, gaps, haar_errs = [], [], [], []
        for s in range(seeds):
            mod = fast_attention(d, causal=False, nb_features=m, seed=PERFORMER_SEED + 1000 * m + s)
            with torch.no_grad():
                out = mod(q, k, v)
                ref = linear_attention(
                    q,
                    k,
                    v,
                    feature_map="favor",
                    projection=mod.projection_matrix.to(torch.float64),
                )
                # the same estimator with Haar-distributed orthogonal blocks (sign-corrected QR)
                gen = torch.Generator().manual_seed(PERFORMER_SEED + 1000 * m + s)
                haar = favor_projection(d, m, orthogonal=True, generator=gen, dtype=torch.float64)
                ref_haar = linear_attention(q, k, v, feature_map="favor", projection=haar)
            haar_errs.append(float((ref_haar - exact).norm() / norm))
            errs.append(float((out - exact).norm() / norm))
            favor_errs.append(float((ref - exact).norm() / norm))
            gaps.append(float((out - ref).norm() / norm))
        # relative std of one kernel estimate at x.y = 0 (the D9 formula divided by e^{x.y})
        predicted = math.sqrt(favor_kernel_variance(0.0, median_sq, m))
        rows.append(
            {
                "m": m,
                "mean_error": float(np.mean(errs)),
                "std_error": float(np.std(errs, ddof=1)) if seeds > 1 else 0.0,
                "favor_mean_error": float(np.mean(favor_errs)),
                "performer_minus_favor": float(np.mean(gaps)),
                "haar_favor_mean_error": float(np.mean(haar_errs)),
                "d9_kernel_relative_std": predicted,
            }
        )
    logm = np.log([r["m"] for r in rows])
    loge = np.log([r["mean_error"] for r in rows])
    slope, intercept = np.polyfit(logm, loge, 1)
    haar_slope = np.polyfit(logm, np.log([r["haar_favor_mean_error"] for r in rows]), 1)[0]
    return {
        "rows": rows,
        "slope": float(slope),
        "intercept": float(intercept),
        "haar_slope": float(haar_slope),
        "reference_slope": -0.5,
        "settings": {
            "batch": batch,
            "heads": heads,
            "length": length,
            "d": d,
            "input_std": input_std,
            "seeds": seeds,
            "data_seed": data_seed,
            "median_x_plus_y_sq": median_sq,
        },
    }


def orthogonal_sign_bias(d: int = 3, draws: int = 2000, seed: int = 0) -> dict:
    """How performer's orthogonal blocks are distributed: the fraction of draws in which row i of
    ``orthogonal_matrix_chunk(d)`` has a negative i-th coordinate (Haar: 1/2 for every i).

    performer takes Q from ``torch.linalg.qr`` of a Gaussian matrix without multiplying its
    columns by sign(diag(R)); Householder QR then fixes those signs, so the directions are not
    Haar distributed (the first direction of every block has a negative first coordinate) and
    E[phi(q).phi(k)] = exp(c q.k) (D9) fails. Correct sampling: Mezzadri, "How to
    generate random matrices from the classical compact groups", Notices AMS 54 (2007).

    Returns:
        {"d": d, "draws": draws, "negative_diagonal_fraction": [f_0, ..., f_{d-1}]}.

    Raises:
        ValueError: d < 1 or draws < 1.
    """
    import torch

    if not isinstance(d, int) or d < 1:
        raise ValueError(f"d: expected an int >= 1, got {d!r}")
    if not isinstance(draws, int) or draws < 1:
        raise ValueError(f"draws: expected an int >= 1, got {draws!r}")
    pp = _performer()
    neg = torch.zeros(d, dtype=torch.float64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in range(draws):
            neg += (torch.diagonal(pp.orthogonal_matrix_chunk(d)) < 0).double()
    return {"d": d, "draws": draws, "negative_diagonal_fraction": (neg / draws).tolist()}


def causal_leak_evidence(seed: int = 0) -> list[dict]:
    """Why causal ``FastAttention`` lets a later key change earlier outputs (fault class 9).

    performer stabilizes key features by M = the largest w.k~ over *all* tokens and features,
    so a later key rescales every earlier key feature by e^-M'; that cancels in the normalized
    output only if nothing else is added. This runs performer's own pipeline (``softmax_kernel``
    and ``causal_linear_attention_noncuda``, float64, T = 4, d = 3, the adapter's directions)
    with its feature constant (1e-4) and denominator constant (1e-6) on and off, changes key 3
    to (5, 5, 5) and reports the largest change of outputs 0..2.

    Returns:
        [{"feature_eps": e1, "denominator_eps": e2, "max_change_of_earlier_outputs": x}, ...]
        (the first row is performer's default).
    """
    import torch

    pp = _performer()
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 1, 4, 3, generator=gen, dtype=torch.float64) for _ in range(3))
    proj = fast_attention(3, causal=True).projection_matrix.to(torch.float64)
    k2 = k.clone()
    k2[..., 3, :] = 5.0

    def run(keys, eps, deps):
        fq = pp.softmax_kernel(q, projection_matrix=proj, is_query=True, eps=eps)
        fk = pp.softmax_kernel(keys, projection_matrix=proj, is_query=False, eps=eps)
        return pp.causal_linear_attention_noncuda(fq, fk, v, eps=deps)

    out = []
    with torch.no_grad():
        for eps, deps in ((FEATURE_EPS, 1e-6), (0.0, 1e-6), (FEATURE_EPS, 0.0), (0.0, 0.0)):
            change = (run(k, eps, deps) - run(k2, eps, deps))[..., :3, :].abs().max()
            out.append(
                {
                    "feature_eps": eps,
                    "denominator_eps": deps,
                    "max_change_of_earlier_outputs": float(change),
                }
            )
    return out


# -- the cards' facts ---------------------------------------------------------------------------
def card_facts(name: str, *, quick: bool = False, isolate: bool = True) -> dict[str, Any]:
    """What a performer card shows besides the battery (JSON values, in card order).

    Returns:
        ``orthogonal_sign_bias`` (:func:`orthogonal_sign_bias`); for the causal variant
        ``causal_leak`` (:func:`causal_leak_evidence`); for the non-causal one
        ``feature_count_experiment`` (:func:`feature_count_experiment`, with
        :data:`QUICK_FEATURE_COUNTS` and :data:`QUICK_SEEDS` when ``quick``). ``isolate`` is
        unused (no check runs here).

    Raises:
        KeyError: ``name`` is not in :data:`VARIANTS`.
    """
    if name not in VARIANTS:
        raise KeyError(f"name: expected one of {sorted(VARIANTS)}, got {name!r}")
    facts: dict[str, Any] = {"orthogonal_sign_bias": orthogonal_sign_bias()}
    if name.endswith("-causal"):
        facts["causal_leak"] = causal_leak_evidence()
    if name.endswith("-noncausal"):
        facts["feature_count_experiment"] = feature_count_experiment(
            QUICK_FEATURE_COUNTS if quick else FEATURE_COUNTS,
            seeds=QUICK_SEEDS if quick else EXPERIMENT_SEEDS,
        )
    return facts
