"""flash-linear-attention (fla-core 0.6) pure-torch references as checked variants.

The CPU-runnable parts of fla are its ``naive`` references and its feature-map modules (the fused
forms are Triton kernels). Each factory returns an :class:`~verify.spec.variant.AttentionVariant`
whose claims state what the function computes; the checker then says whether it does.

* ``naive_parallel_based`` (fla.ops.based.naive): causal only, ``kappa_2(q.k/sqrt(d))`` =
  1 + x + x^2/2 (Based, Arora et al. 2024; D1), normalized by the kernel sum + 1e-6
  (declared ``eps=1e-6``); builds its causal mask from T alone, so T != S is not supported.
* ``naive_chunk_based(q, k, v, chunk_size=256)``: the same kernel in chunked form; T must be a
  multiple of ``chunk_size`` (declared ``length_multiple``; the probes find it and the smallest
  failing T) and the denominator is also + 1e-6. The battery runs it with ``chunk_size=2``
  (:data:`CHECK_CHUNK`): at fla's default 256 the only length the catalogue may draw
  (T <= 10, a multiple of 256) is T = 256, a single chunk (the cross-chunk state is never
  used) on which the mpmath oracle needs more than a minute per example. The default is probed
  for its restriction (:func:`chunk_based_default_variant`).
* ``naive_recurrent_linear_attn`` (fla.ops.linear_attn.naive): (B, T, H, d) layout, causal,
  identity feature map, ``normalize`` on (denominator q.k_cumsum + 1e-10) or off (numerator);
  it casts q, k, v to float32 and back, so float64 inputs get float32 accuracy: declared
  ``compute_dtype="float32"`` (the probes find it; the card measures it). fla multiplies q by
  ``scale`` (default d^-1/2) before the map; the claims vocabulary has no d-dependent factor
  for element-wise maps, so the adapter passes ``scale=1.0`` (the function's own argument) and
  the card measures the default.
* ``TaylorFeatureMap`` (fla.modules.feature_map): [1, x/d^(1/4), x_i^2/(sqrt(2d)),
  x_i x_j/sqrt(d) (i < j)]: phi(q).phi(k) = kappa_2(q.k/sqrt(d)) (claimed ``linear:taylor:2``,
  ``feature_scale="sqrt"``), checked as kernel linear attention with this feature map.
* ``RebasedFeatureMap(normalize=False)``: [x_i^2/sqrt(d), x_i x_j sqrt(2/d) (i < j)] with the
  learnable gamma = 1, beta = 0 at initialization: phi(q).phi(k) = (q.k)^2/d, the square kernel,
  which is not in the claims vocabulary (``kernel="unknown"``: the probes identify it). With the
  default ``normalize=True`` it calls fla's Triton layer norm, which fails on CPU.

The feature-map variants' forward is plain torch kernel linear attention
(:func:`feature_attention`), so any defect the battery finds in them is the map's.

:data:`VARIANTS` names the variants' cards; :func:`card_facts` measures what each card shows.
"""

from __future__ import annotations

import warnings
from functools import cache
from typing import Any

from verify.adapters.card_settings import SEED
from verify.spec.variant import AttentionVariant
from verify.spec.visibility import visible

#: card name -> import spec of the variant's zero-argument factory
VARIANTS: dict[str, str] = {
    "fla-naive_parallel_based": "verify.adapters.fla:parallel_based_variant",
    "fla-naive_chunk_based": "verify.adapters.fla:chunk_based_variant",
    "fla-naive_recurrent_linear_attn-normalize": (
        "verify.adapters.fla:recurrent_linear_normalized_variant"
    ),
    "fla-naive_recurrent_linear_attn-no_normalize": (
        "verify.adapters.fla:recurrent_linear_unnormalized_variant"
    ),
    "fla-TaylorFeatureMap": "verify.adapters.fla:taylor_feature_map_variant",
    "fla-RebasedFeatureMap": "verify.adapters.fla:rebased_feature_map_variant",
}
#: random (q, k) pairs of :func:`feature_map_kernels` on a card (and on a quick card)
KERNEL_PAIRS = 2000
QUICK_KERNEL_PAIRS = 200

#: fla's default chunk size of naive_chunk_based (its signature's default)
CHUNK_SIZE = 256
#: the chunk size the battery uses: T in {2, 4, ..., 10} spans up to five chunks
CHECK_CHUNK = 2
#: the constants fla adds to its denominators (read from the sources, declared as ``eps``)
BASED_EPS = 1e-6
LINEAR_ATTN_EPS = 1e-10
#: what both Based references compute: causal kappa_2(q.k/sqrt(d)), kernel sum + 1e-6
_BASED_CLAIMS: dict[str, Any] = dict(
    kernel="taylor:2", causal="yes", normalized=True, eps=BASED_EPS
)


def _import(module: str):
    """Import an fla module with its CPU warning ("Triton is not supported ...") silenced.

    Raises:
        ImportError: fla-core (or triton, which fla imports) is not installed.
    """
    import importlib

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Triton is not supported.*")
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=ImportWarning)
        return importlib.import_module(module)


def _based():
    return _import("fla.ops.based.naive")


def _linear():
    return _import("fla.ops.linear_attn.naive")


def _feature_maps():
    return _import("fla.modules.feature_map")


def _require_causal(name: str, causal: bool) -> None:
    if not causal:
        raise ValueError(f"causal: {name} is causal only, got causal=False")


# -- forwards ---------------------------------------------------------------------------------
def parallel_based_forward(q, k, v, *, causal: bool):
    """fla ``naive_parallel_based(q, k, v)`` (default scale d^-1/2, ``use_norm=True``).

    q, k: (B, H, T, d); v: (B, H, T, d_v); returns (B, H, T, d_v). Causal only.

    Raises:
        ValueError: ``causal=False``.
    """
    _require_causal("naive_parallel_based", causal)
    return _based().naive_parallel_based(q, k, v)


def chunk_based_forward(q, k, v, *, causal: bool, chunk_size: int = CHUNK_SIZE):
    """fla ``naive_chunk_based(q, k, v, chunk_size)``.

    q, k: (B, H, T, d); v: (B, H, T, d_v), T a multiple of ``chunk_size``; returns
    (B, H, T, d_v).

    Raises:
        ValueError: ``causal=False``; whatever fla raises for other T (einops' rearrange).
    """
    _require_causal("naive_chunk_based", causal)
    return _based().naive_chunk_based(q, k, v, chunk_size=chunk_size)


def recurrent_linear_forward(q, k, v, *, causal: bool, normalize: bool, scale: float | None = 1.0):
    """fla ``naive_recurrent_linear_attn(q, k, v, scale=scale, normalize=normalize)[0]``.

    q, k: (B, T, H, d); v: (B, T, H, d_v); returns (B, T, H, d_v) in q's dtype (computed in
    float32). ``scale=None`` is fla's default d^-1/2.

    Raises:
        ValueError: ``causal=False``.
    """
    _require_causal("naive_recurrent_linear_attn", causal)
    out, _ = _linear().naive_recurrent_linear_attn(q, k, v, scale=scale, normalize=normalize)
    return out


@cache
def _taylor_map(d: int):
    return _feature_maps().TaylorFeatureMap(d)


@cache
def _rebased_map(d: int, normalize: bool = False):
    return _feature_maps().RebasedFeatureMap(d, normalize=normalize)


def _quiet(fn, x):
    """fn(x) without torch.utils.checkpoint's use_reentrant warnings (fla's maps checkpoint)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*use_reentrant.*")
        warnings.filterwarnings("ignore", message=".*None of the inputs have requires_grad.*")
        return fn(x)


def taylor_features(x):
    """fla ``TaylorFeatureMap(d)(x)``: (..., d) -> (..., 1 + d + d(d+1)/2)."""
    return _quiet(_taylor_map(x.shape[-1]), x)


def rebased_features(x):
    """fla ``RebasedFeatureMap(d, normalize=False)(x)`` at its initial gamma = 1, beta = 0:
    (..., d) -> (..., d(d+1)/2)."""
    return _quiet(_rebased_map(x.shape[-1]), x)


def feature_attention(q, k, v, *, causal: bool, feature_map):
    """Normalized kernel linear attention with a feature map, in plain torch (D3).

    o_t = sum_s w_ts v_s / sum_s w_ts with w_ts = phi(q_t).phi(k_s), s <= t when causal (T == S).
    q: (B, H, T, d), k: (B, H, S, d), v: (B, H, S, d_v); returns (B, H, T, d_v).

    Raises:
        ValueError: causal with T != S (alignment undefined).
    """

    t, s = q.shape[-2], k.shape[-2]
    if causal and t != s:
        raise ValueError(f"causal: needs T == S, got T = {t}, S = {s}")
    w = feature_map(q) @ feature_map(k).transpose(-2, -1)
    if causal:
        w = w.masked_fill(~visible(t, s, causal=True, device=q.device), 0.0)
    return (w @ v) / w.sum(-1, keepdim=True)


def _taylor_map_forward(q, k, v, *, causal: bool):
    return feature_attention(q, k, v, causal=causal, feature_map=taylor_features)


def _rebased_map_forward(q, k, v, *, causal: bool):
    return feature_attention(q, k, v, causal=causal, feature_map=rebased_features)


def _recurrent_normalized(q, k, v, *, causal: bool):
    return recurrent_linear_forward(q, k, v, causal=causal, normalize=True)


def _recurrent_unnormalized(q, k, v, *, causal: bool):
    return recurrent_linear_forward(q, k, v, causal=causal, normalize=False)


# -- variants (zero-argument factories for ``attn-theory check``) ------------------------------
def parallel_based_variant() -> AttentionVariant:
    """``naive_parallel_based``: causal kappa_2 attention, denominator + 1e-6."""
    _based()  # fail early (ImportError) when fla is missing
    return AttentionVariant(
        name="fla-naive_parallel_based",
        forward=parallel_based_forward,
        **_BASED_CLAIMS,
        description="fla.ops.based.naive.naive_parallel_based (fla-core 0.6)",
    )


def chunk_based_variant(chunk_size: int = CHECK_CHUNK) -> AttentionVariant:
    """``naive_chunk_based(chunk_size=2)``: causal kappa_2 attention, denominator + 1e-6, T a
    multiple of the chunk size (see the module docstring for why not 256)."""
    from functools import partial

    _based()
    return AttentionVariant(
        name="fla-naive_chunk_based",
        forward=partial(chunk_based_forward, chunk_size=chunk_size),
        **_BASED_CLAIMS,
        length_multiple=chunk_size,
        description=f"fla.ops.based.naive.naive_chunk_based(chunk_size={chunk_size}) "
        "(fla-core 0.6)",
    )


def chunk_based_default_variant() -> AttentionVariant:
    """``naive_chunk_based`` with fla's default chunk (256), T restricted to multiples of 256."""
    return chunk_based_variant(CHUNK_SIZE).with_claims(name="fla-naive_chunk_based-chunk256")


def _recurrent_variant(normalize: bool) -> AttentionVariant:
    _linear()
    tag = "normalize" if normalize else "no_normalize"
    return AttentionVariant(
        name=f"fla-naive_recurrent_linear_attn-{tag}",
        forward=_recurrent_normalized if normalize else _recurrent_unnormalized,
        layout="BTHD",
        kernel="linear:identity",
        causal="yes",
        normalized=normalize,
        eps=LINEAR_ATTN_EPS if normalize else 0.0,
        dtypes=("float64", "float32", "bfloat16"),
        compute_dtype="float32",  # it casts q, k, v to float32 (the probes find it too)
        description="fla.ops.linear_attn.naive.naive_recurrent_linear_attn("
        f"normalize={normalize}, scale=1.0) (fla-core 0.6)",
    )


def recurrent_linear_normalized_variant() -> AttentionVariant:
    """``naive_recurrent_linear_attn(normalize=True, scale=1.0)``: identity-map linear attention
    divided by q.k_cumsum + 1e-10."""
    return _recurrent_variant(True)


def recurrent_linear_unnormalized_variant() -> AttentionVariant:
    """``naive_recurrent_linear_attn(normalize=False, scale=1.0)``: the numerator only."""
    return _recurrent_variant(False)


def _feature_map_variant(cls: str, args: str, forward, features, kernel: str) -> AttentionVariant:
    """fla's feature map ``cls(args)`` in normalized kernel linear attention
    (:func:`feature_attention` as ``forward``), causal or not; ``features`` is the map."""
    _feature_maps()
    return AttentionVariant(
        name=f"fla-{cls}",
        forward=forward,
        kernel=kernel,
        causal="both",
        normalized=True,
        feature_map=features,
        feature_scale="sqrt",
        description=f"fla.modules.feature_map.{cls}({args}) in normalized kernel linear "
        "attention (plain torch glue)",
    )


def taylor_feature_map_variant() -> AttentionVariant:
    """``TaylorFeatureMap`` as normalized kernel linear attention, claimed kappa_2(q.k/sqrt(d))."""
    return _feature_map_variant(
        "TaylorFeatureMap", "d", _taylor_map_forward, taylor_features, "linear:taylor:2"
    )


def rebased_feature_map_variant() -> AttentionVariant:
    """``RebasedFeatureMap(normalize=False)`` as normalized kernel linear attention; the kernel
    is left ``unknown`` for the probes to identify."""
    return _feature_map_variant(
        "RebasedFeatureMap", "d, normalize=False", _rebased_map_forward, rebased_features, "unknown"
    )


# -- findings measured for the report cards -----------------------------------------------------
def recurrent_float64_finding(seed: int = 0) -> dict:
    """What ``naive_recurrent_linear_attn`` does with float64 inputs (normalize on and off).

    Returns {mode: {"max_abs_diff_vs_float32_call": x, "outputs_are_float32_numbers": bool}}:
    the float64 call against the float32 call on the same (float32-representable) inputs; 0 and
    True mean the float64 result is the float32 computation, widened.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 6, 2, 3, generator=gen).float() for _ in range(3))
    out = {}
    for normalize in (True, False):
        o64 = recurrent_linear_forward(
            q.double(), k.double(), v.double(), causal=True, normalize=normalize
        )
        o32 = recurrent_linear_forward(q, k, v, causal=True, normalize=normalize)
        out["normalize" if normalize else "no_normalize"] = {
            "max_abs_diff_vs_float32_call": float((o64 - o32.double()).abs().max()),
            "outputs_are_float32_numbers": bool(torch.equal(o64.float().double(), o64)),
        }
    return out


def recurrent_default_scale_ratio(dims: tuple[int, ...] = (1, 2, 4), seed: int = 0) -> dict:
    """Output with fla's default scale over the output with ``scale=1`` (normalize off), per d:
    the default multiplies q by d^-1/2. Returns {d: {"ratio": r, "d^-1/2": d**-0.5}}."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = {}
    for d in dims:
        q, k, v = (torch.randn(1, 4, 1, d, generator=gen, dtype=torch.float64) for _ in range(3))
        o_def = recurrent_linear_forward(q, k, v, causal=True, normalize=False, scale=None)
        o_one = recurrent_linear_forward(q, k, v, causal=True, normalize=False, scale=1.0)
        ratio = (o_def / o_one).flatten()
        out[str(d)] = {"ratio": float(ratio.median()), "d^-1/2": d**-0.5}
    return out


def feature_map_kernels(pairs: int = 2000, seed: int = 0) -> dict:
    """Measured kernels of the two fla feature maps (float64, d = 1..4, |q_i|, |k_i| <= 2).

    For each map, the largest |phi(q).phi(k) - kappa(x)| / kappa_abs over random pairs, for the
    candidates kappa_2(x) = 1 + x + x^2/2 and x^2 with x = q.k/sqrt(d), where kappa_abs is the
    same kernel at sum_i |q_i k_i|/sqrt(d) (the scale of the rounding, ~1e-16 when it matches);
    plus the feature count m(d).
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    maps = {"TaylorFeatureMap": taylor_features, "RebasedFeatureMap": rebased_features}
    cands = {
        "kappa_2(x) = 1 + x + x^2/2": lambda x: 1 + x + x * x / 2,
        "x^2": lambda x: x * x,
    }
    out = {}
    for name, fmap in maps.items():
        worst = dict.fromkeys(cands, 0.0)
        counts = {}
        for d in (1, 2, 3, 4):
            q = (torch.rand(pairs, d, generator=gen, dtype=torch.float64) * 4 - 2).requires_grad_(
                False
            )
            k = torch.rand(pairs, d, generator=gen, dtype=torch.float64) * 4 - 2
            with torch.no_grad():
                pq, pk = fmap(q), fmap(k)
            counts[str(d)] = int(pq.shape[-1])
            dots = (pq * pk).sum(-1)
            x = (q * k).sum(-1) / d**0.5
            xa = (q * k).abs().sum(-1) / d**0.5
            for cname, kern in cands.items():
                rel = ((dots - kern(x)).abs() / kern(xa)).max()
                worst[cname] = max(worst[cname], float(rel))
        out[name] = {"max_relative_deviation": worst, "features_by_d": counts}
    return out


def rebased_default_on_cpu() -> str:
    """What ``RebasedFeatureMap(d)`` (default ``normalize=True``) does on a CPU tensor."""
    import torch

    try:
        _feature_maps().RebasedFeatureMap(4)(torch.randn(2, 4))
    except Exception as exc:  # noqa: BLE001 - the finding is the message
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"raises {type(exc).__name__}: {msg[:200]}"
    return "works"


def feature_map_gradient_finding() -> dict:
    """How gradients flow through fla's feature maps (float64, d = 3).

    fla wraps the outer product of both maps in ``fla.utils.checkpoint``, i.e.
    ``torch.utils.checkpoint.checkpoint`` without ``use_reentrant`` (reentrant by default in
    torch 2.13). Returns {map: {"backward()": result, "torch.autograd.grad": result}} with
    "works" or the exception raised.
    """
    import torch

    out = {}
    maps = (("TaylorFeatureMap", taylor_features), ("RebasedFeatureMap", rebased_features))
    for name, fmap in maps:
        res = {}
        for how in ("backward()", "torch.autograd.grad"):
            x = torch.tensor([[0.5, -1.0, 0.25]], dtype=torch.float64, requires_grad=True)
            try:
                y = fmap(x).sum()
                if how == "backward()":
                    y.backward()
                else:
                    torch.autograd.grad(y, x)
                res[how] = "works"
            except Exception as exc:  # noqa: BLE001 - the finding is the message
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                res[how] = f"raises {type(exc).__name__}: {first.split('. ')[0].rstrip('.')}"
        out[name] = res
    return out


# -- the cards' facts ---------------------------------------------------------------------------
def card_facts(name: str, *, quick: bool = False, isolate: bool = True) -> dict[str, Any]:
    """What an fla card shows besides the battery (JSON values, in card order).

    Returns:
        ``fla-naive_chunk_based``: ``default_chunk_lengths``, the black-box length scan of
        :func:`chunk_based_default_variant` (``verify.probes``, float64, the card seed).
        ``fla-naive_recurrent_linear_attn-*``: ``float64_inputs``
        (:func:`recurrent_float64_finding`) and ``default_scale``
        (:func:`recurrent_default_scale_ratio`).
        ``fla-TaylorFeatureMap`` and ``fla-RebasedFeatureMap``: ``feature_map_kernels``
        (:func:`feature_map_kernels`, :data:`QUICK_KERNEL_PAIRS` pairs when ``quick``), for
        Rebased ``default_normalize_on_cpu`` (:func:`rebased_default_on_cpu`), and the map's
        ``gradients`` (:func:`feature_map_gradient_finding`).
        ``fla-naive_parallel_based``: nothing. ``isolate`` is unused (no check runs here).

    Raises:
        KeyError: ``name`` is not in :data:`VARIANTS`.
    """
    if name not in VARIANTS:
        raise KeyError(f"name: expected one of {sorted(VARIANTS)}, got {name!r}")
    facts: dict[str, Any] = {}
    if name == "fla-naive_chunk_based":
        from verify import probes

        rep = probes.probe(chunk_based_default_variant(), dtype="float64", seed=SEED)
        facts["default_chunk_lengths"] = rep.to_json().get("lengths", {})
    if name.startswith("fla-naive_recurrent_linear_attn"):
        facts["float64_inputs"] = recurrent_float64_finding()
        facts["default_scale"] = recurrent_default_scale_ratio()
    if name in ("fla-TaylorFeatureMap", "fla-RebasedFeatureMap"):
        facts["feature_map_kernels"] = feature_map_kernels(
            pairs=QUICK_KERNEL_PAIRS if quick else KERNEL_PAIRS
        )
        mine = name.removeprefix("fla-")
        if mine == "RebasedFeatureMap":
            facts["default_normalize_on_cpu"] = rebased_default_on_cpu().rstrip(".")
        facts["gradients"] = feature_map_gradient_finding()[mine]
    return facts
