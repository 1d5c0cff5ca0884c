"""The error model: a stated, derived bound for every numeric comparison (D10).

Every bound here is composed from the functions that ``derivations.rounding`` (D10),
``derivations.norms`` (D7) and ``derivations.feature_maps`` (D1) export; nothing is retyped.
The recipe is the one in ``derivations/rounding.py``'s module docstring:

1. score error e_x = gamma_{d + r_c} c sum_i |q_i k_i| (r_c = 5 covers both scale conventions);
2. per-key weight error relative to a majorant W_s >= |w_s|: exp (shift by the row maximum,
   library exp ulps), kappa_N evaluated on scores (parallel form) or through features
   (recurrent/chunked forms: W_s = kappa_N(c sum_i |q_i||k_si|)); for a computation whose form
   is not known (a third-party variant) the larger of the two per key;
3. sums over keys -> num_rel, den_rel relative to A = sum_s W_s |v_sj|, B = sum_s W_s;
4. the output: ``kernel_attention_output_bound`` (conditioning-aware, so signed kernels are
   bounded relative to sum_s |kappa| |v| / |sum_s kappa|), or the D7 normalizations via
   ``normalization_sensitivity`` + ``normalization_rounding_bound``;
5. bf16/fp16 inputs: the fp32 accumulation bound, then ``low_precision_output_bound`` (two-level
   model, compared against the exact result on the *same rounded inputs*).

Majorants (A, B, |D| lower bound) are computed in float64 and inflated by their own float64
rounding bound, so they stay upper (lower) bounds. Comparisons are made in float64 space against
the mpmath oracle (``verify.exact.oracle``): |actual - exact| is measured exactly and rounded once,
or against :func:`float64_reference` (``exact=None``: recipe 6 adds the reference's own bound).

A bound is labelled ``derived``. :func:`compare` turns (actual, bound) into an
``Observation`` (observed error, bound, observed/bound, error in units of roundoff, where).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from derivations import kernel_arithmetic as ka
from derivations import precision_models as pm
from derivations import rounding as d10
from derivations import structure as d15
from verify.exact import error_terms, models
from verify.spec.kernel import parse as parse_kernel
from verify.spec.visibility import visible
from verify.spec.vocabulary import DENOMINATORS, EPS_MODES
from verify.spec.vocabulary import FORMS as FORM_NAMES

ACCUMULATION = {
    "float64": "float64",
    "float32": "float32",
    "bfloat16": "float32",
    "float16": "float32",
}
DEFAULT_EXP_LIBRARY = {"cpu": "cpu-sleef-u10", "cuda": "cuda-expf"}
#: the largest cited exp error per device: the assumption when a kernel's library is unknown
#: (black-box probes, ``verify.testing``)
BLACK_BOX_EXP_LIBRARY = {"cpu": "cpu-torch-exp_u20", "cuda": "cuda-expf"}
DEFAULT_DIV_LIBRARY = {"cpu": "ieee", "cuda": "ieee"}
_U64 = d10.unit_roundoff("float64")


@dataclass
class ErrorBound:
    """Elementwise bound on |computed - exact| for one attention computation.

    Attributes:
        bound: (B, H, T, d_v) float64, the stated bound per output element.
        exact_float64: (B, H, T, d_v) the exact output rounded once to float64 (or None).
        dtype: computation dtype name; accumulation: the dtype sums run in.
        cond: largest B/|D| over rows (1 for positive kernels; inf if a denominator may vanish).
        description: how the bound was composed (for reports).
    """

    bound: np.ndarray
    exact_float64: np.ndarray | None
    dtype: str
    accumulation: str
    cond: float
    description: str
    kind: str = "derived"
    notes: list[str] = field(default_factory=list)
    #: the precision model of a bf16/fp16 softmax bound (None: two-level)
    model: str | None = None


def _np64(x: Any, name: str) -> np.ndarray:
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    arr = np.asarray(x, dtype=np.float64)
    return arr


def _parse_kernel(kernel: str) -> tuple[str, int | None, str | None]:
    """A kernel claim -> the error model's (family, order, map): ``exp``; ``taylor`` (kappa_N on
    the scores); ``taylor-features`` (kappa_N through its feature map); ``linear`` (a named map).

    Raises:
        ValueError: not a known kernel (``unknown`` has no error model).
    """
    if kernel == "sigmoid":
        return "sigmoid", None, None
    kern = parse_kernel(kernel)
    if kern.family == "softmax":
        return "exp", None, None
    if kern.family == "taylor":
        return "taylor", kern.order, None
    if kern.taylor_map:
        return "taylor-features", kern.order, None
    if kern.family == "linear":
        return "linear", None, kern.map
    raise ValueError(f"kernel: expected softmax, sigmoid, taylor:N or linear:MAP, got {kernel!r}")


#: headroom (in powers of two) kept above the smallest normal number for the products of a
#: term: Taylor coefficients 1/sqrt(alpha!) >= 2^-5 for N <= 6, the scale, sums of terms
UNDERFLOW_HEADROOM_BITS = 40
#: headroom (in powers of two) kept below the largest finite number for a feature monomial
#: (sums of up to C(N + d, N) of them times values)
OVERFLOW_HEADROOM_BITS = 40


def outside_model(
    kernel: str,
    q: Any,
    k: Any,
    v: Any,
    *,
    dtype: str,
    scale: float | None = None,
    denominator: str = "sum",
    projection: Any = None,
    form: str = "any",
) -> str | None:
    """Why the D10 model does not cover these inputs (or None when it does).

    The standard model (Higham eq. 2.4) assumes no underflow. A product term of the
    computation is a monomial of degree ``deg`` in the (scaled) entries of q, k, v: 3 for
    scores times values (q_i k_i v_j), 2N + 1 for kappa_N through features (q^alpha k^alpha
    v_j); the l2/rms/layernorm modes square the numerator (degree doubled). If every nonzero
    entry has magnitude >= L with L^deg >= tiny * 2^UNDERFLOW_HEADROOM_BITS (tiny = the smallest
    normal number of the accumulation dtype), no such term reaches the subnormal range.

    Taylor-N through features (a ``recurrent``/``chunked`` form, or ``any`` form that may be
    one, or a ``linear:taylor:N`` map): the degree-N monomials of each scaled q and k are
    factors of the terms too, and the model has no overflow: |x~|_max^N must stay a factor
    2^OVERFLOW_HEADROOM_BITS below the largest finite number (a query of 5.9e76 at N = 6 gave
    inf * 0 = NaN at a key of 0, where the exact output is finite).

    Returns:
        A reason string when some nonzero entry is below L, or a feature overflows, else None.
    """
    import torch

    family, order, fmap = _parse_kernel(kernel)
    acc = ACCUMULATION[dtype]
    tiny = float(torch.finfo(getattr(torch, acc)).tiny)
    deg = 2 * order + 1 if family in ("taylor", "taylor-features") and order else 3
    if denominator in ("l2", "rms", "layernorm"):
        deg *= 2
    level = (tiny * 2.0**UNDERFLOW_HEADROOM_BITS) ** (1.0 / deg)
    qn, kn, vn = _np64(q, "q"), _np64(k, "k"), _np64(v, "v")
    d = qn.shape[-1]
    exp_type = family in ("exp", "taylor", "taylor-features") or fmap == "favor"
    c = float(scale) if scale is not None else (1.0 / math.sqrt(d) if exp_type else 1.0)
    scaled = (math.sqrt(c) * qn, math.sqrt(c) * kn) if exp_type else (c * qn, kn)
    arrays = [("q", scaled[0]), ("k", scaled[1]), ("v", vn)]
    if fmap == "favor" and projection is not None:
        # the FAVOR+ features exp(w.x - |x|^2/2)/sqrt(m) are the factors of each term
        P = _np64(projection, "projection")
        for name, z in (("phi(q)", scaled[0]), ("phi(k)", scaled[1])):
            sq = np.sum(z * z, axis=-1, keepdims=True)
            with np.errstate(over="ignore", under="ignore"):
                arrays.append((name, np.exp(z @ P.T - sq / 2) / math.sqrt(P.shape[0])))
    feature_form = family == "taylor-features" or (family == "taylor" and form != "parallel")
    if order and feature_form:
        top = float(torch.finfo(getattr(torch, acc)).max) * 2.0**-OVERFLOW_HEADROOM_BITS
        for name, z in (("q", scaled[0]), ("k", scaled[1])):
            big = float(np.max(np.abs(z), initial=0.0))
            if big > 1 and order * math.log(big) > math.log(top):
                return (
                    f"the degree-{order} features of {name} reach {big:.3g}^{order}, past "
                    f"{top:.3g} in {acc}: the feature form overflows (outside the D10 model)"
                )
    for name, arr in arrays:
        # a FAVOR+ feature is positive: one that is 0 here underflowed float64 too
        nz = np.abs(arr) if name.startswith("phi") else np.abs(arr[arr != 0])
        if nz.size and float(nz.min()) < level:
            what = (
                "an entry (positive in exact arithmetic)"
                if name.startswith("phi")
                else ("a nonzero entry")
            )
            return (
                f"{name} has {what} {float(nz.min()):.3g} below {level:.3g}: degree-{deg} "
                f"products may underflow in {acc} (outside the D10 standard model)"
            )
    return None


def attention_error_bound(
    kernel: str,
    q: Any,
    k: Any,
    v: Any,
    *,
    dtype: str,
    exact: Any = None,
    causal: bool = False,
    attn_mask: Any = None,
    scale: float | None = None,
    denominator: str = "sum",
    eps: float = 0.0,
    projection: Any = None,
    form: str = "any",
    basis: str | None = None,
    device: str = "cpu",
    exp_library: str | None = None,
    div_library: str | None = None,
    precision: str | None = None,
    eps_mode: str = "add",
    arithmetic: Any = None,
    **structure: Any,
) -> ErrorBound:
    """Elementwise bound on |o_hat - o| for kernel attention computed in ``dtype``.

    Args:
        kernel: ``softmax``, ``taylor:N`` (kappa_N on scores or features), ``linear:MAP``
            (identity, elu1, relu, favor, taylor:N).
        q, k, v: the inputs the implementation received, (B, H, T, d), (B, H, S, d),
            (B, H, S, d_v), torch or numpy; bf16/fp16 tensors are cast up exactly.
        dtype: the implementation's input dtype name (bf16/fp16: fp32 accumulation, then the
            output rounded to the input dtype: the two-level model).
        exact: the exact output -- an ``OracleResult`` (``verify.exact.oracle``) or an array of the
            exact values rounded once to float64. If None, the comparison is meant against a
            float64 direct evaluation (:func:`float64_reference`): the bound then adds that
            reference's own float64 bound, the parallel form's (D10 recipe 6), and uses
            |o| <= sum_s W_s |v_s| / |D| instead of the exact |o|.
        causal, attn_mask, scale, denominator, eps, projection: as the implementation
            (the API conventions; scale None = 1/sqrt(d) for exp-type kernels, 1 otherwise).
        form: ``parallel``, ``recurrent``, ``chunked`` or ``any`` (the worst of them per key).
        basis: ``symmetric`` / ``tensor`` for Taylor feature forms; None = the larger.
        device: selects the cited library ulps (``cpu`` or ``cuda``).
        exp_library, div_library: keys of ``derivations.rounding.LIBRARY_EXP_ULPS`` /
            ``LIBRARY_DIV_ULPS`` overriding the device default (cited constants).
        precision: a precision model (``derivations.precision_models.parse_precision``:
            ``two-level``, ``fused``, ``online:B``, ``eager``, ``input-accumulation:SCHEME``)
            for bf16/fp16 inputs; None = ``two-level``. Models other than ``two-level``
            describe softmax kernels (sum denominator, no eps) and are the same as
            ``two-level`` for float32/float64 inputs (nothing is stored in a narrower type).
        arithmetic: the kernel's arithmetic (D17, ``derivations.kernel_arithmetic``): a
            ``KernelArithmetic``, a preset name (``cpu``, ``flash-attention-2``, optionally
            ``+split:P``) or None (the device's default); used by the softmax bounds (sum
            denominator, no eps), whatever the dtype.
        eps_mode: ``add`` (N/(D + eps)) or ``floor`` (N/max(D, eps), ``sum`` only: the exact max
            keeps the denominator's error bound, ``verify.exact.eps_floor``).
        structure: the modern keywords of ``verify.attention`` (D12-D16): ``window``,
            ``enable_gqa``, ``softcap``, ``alibi_slopes``, ``sigmoid_bias`` (kernel
            ``sigmoid``, denominator ``none``), ``qk_norm`` (q and k L2-normalized before the
            score, D16's normalized-score error), ``score_bias`` (an additive bias broadcastable
            to (B, H, T, S), added after the scale and the softcap, before ALiBi),
            ``score_map`` (``(x, e_x, u) -> (y, e_y)``, a declared score_mod applied last:
            ``verify.spec.flex.score_map``; softmax) and
            ``decay`` (causal ``taylor:N``: each weight gamma^(t-s) kappa_N carries the extra
            relative error gamma_{2(t-s)+2}(u) of its decay factor,
            :func:`verify.exact.error_terms.decayed`). Softcap and ALiBi change
            the scores and their error (D16) for ``softmax`` (under every precision model and
            arithmetic) and ``sigmoid`` (two-level model).

    Returns:
        :class:`ErrorBound` (``bound`` is 0 on rows with no visible key: zeros are required).

    Raises:
        ValueError, TypeError: unknown kernel/denominator/dtype/form/precision, bad shapes, a
            model other than two-level for a kernel it does not describe.
        ModelNotApplicable: (a ValueError) an input-type accumulation without a gamma here.
    """
    if dtype not in ACCUMULATION:
        raise ValueError(f"dtype: expected one of {tuple(ACCUMULATION)}, got {dtype!r}")
    setup = _setup(
        kernel,
        q,
        k,
        v,
        causal=causal,
        attn_mask=attn_mask,
        scale=scale,
        denominator=denominator,
        eps=eps,
        projection=projection,
        form=form,
        basis=basis,
        device=device,
        exp_library=exp_library,
        div_library=div_library,
        eps_mode=eps_mode,
        **structure,
    )
    acc = ACCUMULATION[dtype]
    vis = setup["vis"]
    o_abs = None
    if exact is not None:
        o_exact = np.asarray(getattr(exact, "float64", exact), dtype=np.float64)
        o_abs = np.abs(o_exact)
    else:
        o_exact = None
    model = stored_model(precision, kernel, denominator, eps, dtype)
    softmax_sum = setup["family"] == "exp" and denominator == "sum" and not eps
    if model is None and softmax_sum:  # one recipe for softmax: the two-level model there
        model = pm.PrecisionModel("two-level")
    arith = ka.parse_arithmetic(arithmetic, device)
    n_vis = vis.sum(-1)
    ref_bound = None  # the float64 reference's own bound, when it is needed (softmax models)
    if model is not None:
        if o_abs is None:  # |o| <= |float64 reference| + its own bound (tighter than A/D)
            ref_bound, _ = models.softmax_model_bound(
                {**setup, "form": "parallel"}, pm.PrecisionModel("two-level"), "float64",
                "float64", None, ka.KernelArithmetic(),
            )  # fmt: skip
            ref = float64_reference(kernel, q, k, v, causal=causal, attn_mask=attn_mask,
                                    scale=scale, **structure)  # fmt: skip
            o_abs = np.abs(ref) + ref_bound
        bound, how = models.softmax_model_bound(setup, model, dtype, acc, o_abs, arith)
        cond, desc = 1.0, how
    else:
        bound, cond, how = error_terms.core_bound(
            setup,
            u=d10.unit_roundoff(acc),
            eta_log2=d10.underflow_abs_error_log2(acc),
            o_abs=o_abs,
        )
        desc = how
    if model is None and dtype != acc:
        o_for_round = o_abs if o_abs is not None else error_terms.output_majorant(setup)
        bound = error_terms.vec(
            lambda b, oa: d10.low_precision_output_bound(b, oa, dtype), bound, o_for_round
        )
        desc += f"; two-level model: {acc} accumulation, output rounded to {dtype}"
    notes = []
    if exact is None:
        # the reference (:func:`float64_reference`) evaluates kappa on the scores: its own
        # bound is that of the parallel form, whatever form the implementation uses
        ref_setup = {**setup, "form": "parallel"}
        if setup["family"] == "taylor-features":
            ref_setup["family"] = "taylor"
        if ref_bound is not None:
            ref = ref_bound
        elif model is not None:  # softmax: the same recipe, vectorized (models.py)
            ref, _ = models.softmax_model_bound(
                ref_setup, pm.PrecisionModel("two-level"), "float64", "float64", None,
                ka.KernelArithmetic(),
            )  # fmt: skip
        else:
            ref, _, _ = error_terms.core_bound(
                ref_setup, u=_U64, eta_log2=d10.underflow_abs_error_log2("float64"), o_abs=None
            )
        bound = bound + ref
        notes.append("includes the float64 reference's own bound (D10 recipe 6)")
    # NaN (e.g. inf * 0 when unshifted exp weights overflow float64) means no statement: inf
    bound = np.where(np.isnan(bound), np.inf, bound)
    bound = np.where(n_vis[..., None] == 0, 0.0, bound)
    return ErrorBound(
        bound=bound,
        exact_float64=o_exact,
        dtype=dtype,
        accumulation=acc,
        cond=cond,
        description=desc,
        notes=notes,
        model=None if model is None or model.name == "two-level" else model.spec,
    )


FORMS = (*FORM_NAMES, "any")


def default_precision(dtype: str) -> str:
    """The precision model of a softmax kernel that declares none: ``envelope`` (the largest
    of the fused, eager and online:16 bounds: FlashAttention and SDPA store P in the input type
    before P.V, eager code rounds the scores and weights, online kernels rescale per block) for
    bfloat16/float16, ``two-level`` otherwise (nothing is stored narrower than the
    arithmetic)."""
    return "envelope" if dtype in ("bfloat16", "float16") else "two-level"


def stored_model(
    precision: str | None, kernel: str, denominator: str, eps: float, dtype: str
) -> pm.PrecisionModel | None:
    """The precision model that stores intermediates in ``dtype`` (None: the two-level model
    applies -- asked for, or float32/float64 inputs where nothing is stored narrower).

    Raises:
        ValueError: a bad spec, or a model other than two-level for a kernel or denominator it
            does not describe (softmax with the sum denominator and no eps).
    """
    if precision is None:
        return None
    model = pm.parse_precision(precision)
    if model.name == "two-level":
        return None
    if parse_kernel(kernel).family != "softmax" or denominator != "sum" or eps:
        raise ValueError(
            f"precision: {model.spec!r} describes softmax with the sum denominator and no eps, "
            f"got kernel {kernel!r}, denominator {denominator!r}, eps {eps!r}"
        )
    if ACCUMULATION[dtype] == dtype and model.name != "online":
        return None
    return model


def _setup(
    kernel: str,
    q: Any,
    k: Any,
    v: Any,
    *,
    causal: bool,
    attn_mask: Any,
    scale: float | None,
    denominator: str,
    eps: float,
    projection: Any,
    form: str,
    basis: str | None,
    device: str,
    exp_library: str | None,
    div_library: str | None,
    window: Any = None,
    enable_gqa: bool = False,
    softcap: float | None = None,
    alibi_slopes: Any = None,
    sigmoid_bias: float | None = None,
    decay: Any = None,
    qk_norm: bool = False,
    score_bias: Any = None,
    score_map: Any = None,
    eps_mode: str = "add",
) -> dict:
    """Validated float64 inputs and the choices every bound and the reference share."""
    family, order, fmap = _parse_kernel(kernel)
    if decay is not None and (family not in ("taylor", "taylor-features") or not causal):
        raise ValueError("decay: modelled for causal Taylor-N kernels (D12)")
    if (family == "sigmoid") != (sigmoid_bias is not None):
        raise ValueError("sigmoid_bias: given exactly when kernel='sigmoid' (D14)")
    if family == "sigmoid" and denominator != "none":
        raise ValueError(
            f"denominator: sigmoid attention is unnormalized ('none'), got {denominator!r}"
        )
    if (softcap is not None or alibi_slopes is not None) and family not in ("exp", "sigmoid"):
        raise ValueError("softcap, alibi_slopes: modelled for the softmax and sigmoid kernels")
    if denominator not in DENOMINATORS:
        raise ValueError(f"denominator: expected one of {DENOMINATORS}, got {denominator!r}")
    if eps_mode not in EPS_MODES or (eps_mode == "floor" and (denominator != "sum" or not eps > 0)):
        raise ValueError(
            f"eps_mode: expected one of {EPS_MODES} ('floor' with the sum denominator and "
            f"eps > 0), got {eps_mode!r} (denominator {denominator!r}, eps {eps!r})"
        )
    if form not in FORMS:
        raise ValueError(f"form: expected one of {FORMS}, got {form!r}")
    dev = "cuda" if str(device).startswith("cuda") else "cpu"
    exp_ulps = d10.LIBRARY_EXP_ULPS[exp_library or DEFAULT_EXP_LIBRARY[dev]].value
    div_ulps = d10.LIBRARY_DIV_ULPS[div_library or DEFAULT_DIV_LIBRARY[dev]].value
    qn, kn, vn = _np64(q, "q"), _np64(k, "k"), _np64(v, "v")
    for name, arr in (("q", qn), ("k", kn), ("v", vn)):
        if arr.ndim != 4:
            raise ValueError(f"{name}: expected a 4-d (B, H, T, d) array, got shape {arr.shape}")
    if enable_gqa and kn.shape[1] != qn.shape[1]:  # query head h reads kv head h // (H/G)
        idx = [d15.kv_head(h, qn.shape[1], kn.shape[1]) for h in range(qn.shape[1])]
        kn, vn = kn[:, idx], vn[:, idx]
    lead = np.broadcast_shapes(qn.shape[:2], kn.shape[:2], vn.shape[:2])
    T, S, d = qn.shape[-2], kn.shape[-2], qn.shape[-1]
    if window is not None:  # FlashAttention's window, with causal setting right = 0 (D15)
        left, right = window[0], 0 if causal else window[1]
        vis = visible(T, S, causal=False, attn_mask=attn_mask, lead=lead, numpy=True)
        t = np.arange(T)[:, None] + (S - T)
        s_ = np.arange(S)[None, :]
        vis = vis & ((left < 0) | (s_ >= t - left)) & ((right < 0) | (s_ <= t + right))
    else:
        vis = visible(T, S, causal=causal, attn_mask=attn_mask, lead=lead, numpy=True)
    transform = {}
    if softcap is not None:
        transform["softcap"] = float(softcap)
    if alibi_slopes is not None:
        transform["alibi"] = _np64(alibi_slopes, "alibi_slopes").reshape(-1)
    if sigmoid_bias is not None:
        transform["sigmoid_bias"] = float(sigmoid_bias)
    if decay is not None:
        transform["decay"] = _np64(decay, "decay").reshape(-1)
    if score_bias is not None:
        if family not in ("exp", "sigmoid"):
            raise ValueError("score_bias: modelled for the softmax and sigmoid kernels (D16)")
        transform["bias"] = _np64(score_bias, "score_bias")
    if score_map is not None:  # a declared score_mod's map and error rule (verify.spec.flex)
        if family != "exp":
            raise ValueError("score_map: modelled for the softmax kernel (D16's propagation)")
        transform["score_map"] = score_map
    if qk_norm:
        if family not in ("exp", "sigmoid"):
            raise ValueError("qk_norm: modelled for the softmax and sigmoid kernels (D16)")
        transform["qk_norm"] = True
    exp_type = family in ("exp", "sigmoid", "taylor", "taylor-features") or fmap == "favor"
    # exp weights are shifted by the row maximum unless the mode sees their absolute size
    # (eps is added to the unshifted denominator or norm, so eps needs it too)
    shifted = not eps and denominator in ("sum", "l2", "rms", "layernorm")
    return dict(
        family=family,
        order=order,
        fmap=fmap,
        q=qn,
        k=kn,
        v=vn,
        vis=vis,
        transform=transform or None,
        c=float(scale) if scale is not None else (1.0 / math.sqrt(d) if exp_type else 1.0),
        form=form,
        basis=basis,
        exp_ulps=exp_ulps,
        div_ulps=div_ulps,
        projection=None if projection is None else _np64(projection, "projection"),
        shifted=shifted,
        denominator=denominator,
        eps=float(eps),
        eps_floor=eps_mode == "floor",
    )


def float64_reference(
    kernel: str,
    q: Any,
    k: Any,
    v: Any,
    *,
    causal: bool = False,
    attn_mask: Any = None,
    scale: float | None = None,
    denominator: str = "sum",
    eps: float = 0.0,
    projection: Any = None,
    eps_mode: str = "add",
    **structure: Any,
) -> np.ndarray:
    """Kernel attention evaluated directly in float64 numpy: the reference of ``exact=None``.

    The weights are those the error model reasons about (``_terms``): exp shifted by the row
    maximum (unshifted for ``none``/``count`` and whenever ``eps`` > 0), kappa_N on the scores
    by Horner (also for ``linear:taylor:N``), phi(q).phi(k) for the other feature maps; masked
    weights exactly 0. Then N = w v, D = sum_s w and the D7 mode as ``verify.exact.oracle``
    defines it (sum: N/(D + eps), or N/max(D, eps) with ``eps_mode="floor"``; none: N; count:
    N/(n + eps); l2: N/sqrt(|N|^2 + eps); rms: N/sqrt(mean N^2 + eps); layernorm:
    (N - mean)/sqrt(mean (N - mean)^2 + eps)). Rows with no visible key are 0. Its own error is
    the float64 bound of the parallel form, which ``attention_error_bound(..., exact=None)`` adds
    (D10, recipe 6).

    Args:
        kernel, q, k, v, causal, attn_mask, scale, denominator, eps, projection, eps_mode,
            structure: as :func:`attention_error_bound`; q (B, H, T, d), k (B, H, S, d),
            v (B, H, S, d_v).

    Returns:
        (B, H, T, d_v) float64 array (inf/nan where the arithmetic gives them, e.g. a vanishing
        denominator of a signed kernel).

    Raises:
        ValueError, TypeError: as :func:`attention_error_bound`.
    """
    st = _setup(
        kernel, q, k, v, causal=causal, attn_mask=attn_mask, scale=scale,
        denominator=denominator, eps=eps, projection=projection, form="parallel", basis=None,
        device="cpu", exp_library=None, div_library=None, eps_mode=eps_mode, **structure,
    )  # fmt: skip
    family = "taylor" if st["family"] == "taylor-features" else st["family"]
    vis = st["vis"]
    w = error_terms.terms(
        family, st["order"], st["fmap"], st["q"], st["k"], vis, st["c"], _U64,
        form="parallel", basis=None, exp_ulps=st["exp_ulps"], projection=st["projection"],
        shifted=st["shifted"], transform=st["transform"],
    )[0]  # fmt: skip
    N = w @ st["v"]
    n = vis.sum(-1)[..., None]
    eps = st["eps"]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if denominator == "sum" and st["eps_floor"]:
            out = N / np.maximum(w.sum(-1)[..., None], eps)
        elif denominator == "sum":
            out = N / (w.sum(-1)[..., None] + eps)
        elif denominator == "count":
            out = N / (n + eps)
        elif denominator == "none":
            out = N
        else:
            y = N - N.mean(-1, keepdims=True) if denominator == "layernorm" else N
            power = np.sum(y * y, axis=-1, keepdims=True)
            if denominator != "l2":
                power = power / y.shape[-1]
            out = y / np.sqrt(power + eps)
    return np.where(n == 0, 0.0, out)


def roundoff_units(observed: float, reference_abs: float, dtype: str) -> float:
    """|observed| / (u max(|reference|, eta)): an error in units of roundoff u of ``dtype``
    relative to the reference, floored at the subnormal rounding error eta (D10:
    ``unit_roundoff``, ``underflow_abs_error_log2``; float64 eta = 2^-1075).

    Evaluated in rational arithmetic and rounded once, so no intermediate underflows: u eta, or
    u |reference| for a subnormal reference, is below the smallest float64 subnormal and would
    round to 0. A quotient past float64 is inf; NaN in either argument gives NaN; an infinite
    ``observed`` gives inf, an infinite reference (finite ``observed``) 0.

    Raises:
        TypeError, ValueError: ``dtype`` not a dtype name of ``derivations.rounding``.
    """
    from fractions import Fraction

    u = Fraction(d10.unit_roundoff(dtype))
    eta = Fraction(2) ** d10.underflow_abs_error_log2(dtype)
    obs, ref = abs(float(observed)), abs(float(reference_abs))
    if math.isnan(obs) or math.isnan(ref):
        return math.nan
    if math.isinf(obs):
        return math.inf
    if math.isinf(ref):
        return 0.0
    quotient = Fraction(obs) / (u * max(Fraction(ref), eta))
    try:
        return float(quotient)
    except OverflowError:
        return math.inf


def compare(actual: Any, eb: ErrorBound, exact: Any = None, *, what: str = "output"):
    """Observed |actual - exact| against ``eb.bound``, elementwise; the worst element decides.

    Args:
        actual: the computed tensor/array (any float dtype; cast up exactly).
        eb: the stated bound (computed *before* ``actual`` is looked at).
        exact: an ``OracleResult`` (measured exactly in mpmath and rounded once) or a float64
            reference array; default ``eb.exact_float64``.
        what: label for messages.

    Returns:
        ``verify.spec.results.Observation`` (observed, bound, kind, where, detail with the
        ratio in units of roundoff).
    """
    from verify.spec.results import Observation

    if exact is not None and hasattr(exact, "exact"):
        from verify.exact.oracle import abs_error

        err = abs_error(actual, exact)
        ref = np.asarray(exact.float64, dtype=np.float64)
    else:
        ref = np.asarray(eb.exact_float64 if exact is None else exact, dtype=np.float64)
        err = np.abs(_np64(actual, "actual") - ref)
    bound = eb.bound
    # elements with an infinite bound (a denominator that may vanish, an overflowing exp
    # bound) carry no statement and are excluded; everything else must satisfy err <= bound
    silent = ~np.isfinite(bound)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, err / bound, np.where(err == 0, 0.0, np.inf))
    ratio = np.where(np.isnan(err), np.inf, ratio)
    ratio = np.where(silent, -1.0, ratio)  # never chosen as the worst element
    if ratio.size == 0:
        return Observation(0.0, 0.0, "derived", "", f"{what}: empty")
    idx = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    obs, bnd = float(err[idx]), float(bound[idx])
    units = roundoff_units(obs, float(ref[idx]), eb.dtype)
    detail = (
        f"{what}: max error {obs:.3e} vs bound {bnd:.3e} at {tuple(int(i) for i in idx)} "
        f"({units:.3g} u of {eb.dtype} relative to |o|); cond {eb.cond:.3g}"
    )
    if eb.model:
        detail += f"; precision model {eb.model}"
    if silent.any():
        detail += f"; {int(silent.sum())} of {silent.size} elements without a finite bound"
    if silent.all():  # decided by the computed bound: a property runner rejects no draw on it
        from verify.spec.results import NoStatement

        raise NoStatement("no element has a finite bound (a denominator may vanish)")
    return Observation(obs, bnd, eb.kind, str(tuple(int(i) for i in idx)), detail)
