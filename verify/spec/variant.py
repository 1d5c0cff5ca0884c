"""The attention-variant spec (OpInfo-like).

An :class:`AttentionVariant` declares an attention implementation once -- its forward function,
layout and the claims it makes (kernel, causality, normalization, eps, scale, dtypes, devices) --
and the generic property battery (``verify.properties``) decides from those claims which checks
apply. The project's own implementations are registered in ``verify.builtins``.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from verify.spec import kernel as _kernel
from verify.spec import structure as _structure
from verify.spec.vocabulary import (
    ALIGNMENTS,
    CAUSAL_SUPPORT,
    DENOMINATORS,
    DEVICES,
    DTYPES,
    EMPTY_ROW_CONVENTIONS,
    EPS_MODES,
    FEATURE_SCALES,
    LAYOUTS,
)
from verify.spec.vocabulary import one_of as _one_of


@dataclass(frozen=True)
class Tolerance:
    """A per-dtype override of the derived bound: ``factor`` times it, with a stated reason."""

    factor: float
    reason: str

    def __post_init__(self) -> None:
        if not (
            isinstance(self.factor, (int, float)) and self.factor > 0 and math.isfinite(self.factor)
        ):
            raise ValueError(f"factor: expected a positive finite number, got {self.factor!r}")
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise ValueError("reason: a tolerance override must state its reason")


@dataclass(frozen=True)
class StateAPI:
    """Streaming interface of a variant, in the variant's layout.

    ``prefill(q, k, v, state=None) -> (o, state)`` processes a segment, resuming ``state`` when
    given; ``step(state, q_t, k_t, v_t) -> (o_t, state)`` decodes one token (``q_t`` without the
    sequence axis). Both are causal by definition.
    """

    prefill: Callable[..., tuple[Any, Any]]
    step: Callable[..., tuple[Any, Any]]


@dataclass(frozen=True)
class AttentionVariant:
    """Declared attention implementation and its claims.

    Args:
        name: short identifier (used in report file names after sanitizing).
        forward: ``forward(q, k, v, *, causal) -> o``. Tensors in ``layout``: for ``BHTD``
            q ``(B, H, T, d)``, k ``(B, H, S, d)``, v ``(B, H, S, d_v)``, o ``(B, H, T, d_v)``;
            ``BTHD`` swaps the head and sequence axes. The output dtype must be the input dtype.
        layout: ``"BHTD"`` or ``"BTHD"``.
        kernel: ``"softmax"``, ``"taylor:N"`` (kappa_N of D1), ``"linear:MAP"`` with MAP
            one of identity, elu1, relu, favor, taylor:N, ``"sigmoid"`` (D14), or
            ``"unknown"`` (the checker then
            identifies it with probes).
        causal: which ``causal`` values ``forward`` supports: ``"yes"``, ``"no"`` or ``"both"``.
        causal_alignment: for causal calls with T != S, ``"top-left"`` (SDPA) or
            ``"bottom-right"`` (FlashAttention >= 2.1); ``None`` means T != S is not supported
            when causal.
        normalized: divides by the kernel sum (True) or returns the numerator (False).
        eps: a constant in the variant's ``sum`` denominator (declared convention, e.g. 1e-6),
            entering as ``eps_mode`` says.
        scale: ``"default"`` (1/sqrt(d) for exp-type kernels, 1 for element-wise maps, whatever d
            a check uses) or a float.
        dtypes, devices: what the variant supports.
        feature_map: optional ``phi(x) -> features`` ``(..., d) -> (..., m)``, for kernel checks.
        feature_scale: what ``feature_map`` absorbs: ``"sqrt"`` means phi(q).phi(k) is meant to
            equal kappa(c q.k) with c the default scale; ``"none"`` means kappa(q.k).
        state_api: optional :class:`StateAPI`.
        forms: optional alternative forward functions that must agree with ``forward`` (e.g.
            ``{"recurrent": f, "chunked": g}``).
        supports_mask: ``forward`` accepts ``attn_mask=`` (bool, True = keep, (B, H, T, S)).
        denominators: D7 modes ``forward`` accepts through ``denominator=`` (the checks then
            cover each); empty means the claimed ``normalized`` convention only.
        projection: for ``linear:favor`` variants, ``projection(d, dtype, device) -> (m, d)``
            returning the random directions the variant uses (enables exact oracle checks).
        exp_library: key of ``derivations.rounding.LIBRARY_EXP_ULPS`` naming the exp the
            variant uses (a cited constant, e.g. ``cpu-torch-exp_u20`` for fused CPU kernels);
            None = the device default.
        length_multiple: sequence lengths must be a multiple of this (a restriction).
        min_length: sequence lengths (T and S) must be at least this (a restriction: kernels
            that need a whole block, a split or a minimum tile).
        head_dim_multiple: the head dimension d must be a multiple of this (a restriction, e.g.
            2 for code that splits d in halves).
        dv_equals_d: the value dimension must equal the head dimension (a restriction).
        self_attention_only: the query and key lengths must be equal, T == S (a restriction).
        compute_dtype: the dtype the variant computes in when its input is wider (e.g.
            ``"float32"`` for a float64 call computed in float32): every bound, forward and
            gradient, uses it. None: the input dtype (two-level for bf16/fp16).
        precision: the precision model of bf16/fp16 calls
            (``derivations.precision_models.parse_precision``: ``two-level``, ``fused``,
            ``online:B``, ``eager``, ``input-accumulation:SCHEME``); softmax kernels only. None:
            the probes identify it when a low-precision dtype is checked (``envelope``, the
            largest of the fused, eager and online:16 bounds, when they cannot); other kernels
            use ``two-level``.
        arithmetic: the kernel's arithmetic (D17, ``derivations.kernel_arithmetic``): a preset
            name, ``cpu`` or ``flash-attention-2`` (optionally ``+split:P``), or a
            ``KernelArithmetic``; softmax kernels, every dtype. None: the device's default (the
            CPU's D10 model; on CUDA FlashAttention-2's arithmetic).
        empty_rows: what a row with no visible key returns, one of ``EMPTY_ROW_CONVENTIONS``
            (``zeros``, ``nan``, ``uniform``, ``other``); None: not declared (found by the probes
            and reported, never failed).
        tolerances: per-dtype :class:`Tolerance` overrides (each with its reason).
        description: one line for the report card.
        kv_heads: grouped key/value heads (GQA, D15): ``forward`` also takes k, v with G heads,
            G dividing H, query head h using kv head h // (H / G) (``repeat_interleave``, SDPA's
            ``enable_gqa``); the claim's G is the kv-head count the GQA checks draw (the other
            properties call with G = H). None: k, v have H heads.
        window: ``(left, right)`` sliding window, FlashAttention's ``window_size`` (D15):
            bottom-right aligned, key s visible from query t iff t' - left <= s <= t' + right
            with t' = t + S - T, -1 unbounded; a causal call has right = 0 (Hugging Face's
            ``sliding_window=W`` is ``(W - 1, 0)``).
        softcap: C of the logit softcap C tanh(s / C) on the scaled scores (D13).
        alibi_slopes: per-head ALiBi slopes m_h (bias -m_h |t' - s|, FlashAttention's order:
            softcap, bias, mask; D12), a tuple fixing H, or ``"reference"`` (the ALiBi paper's
            slopes for whatever H a check draws).
        decay: per-head decay gamma_h in (0, 1] of a causal Taylor or linear RNN (D12: key s of
            query t weighted by gamma_h^(t - s)); fixes H.
        sigmoid_bias: b of ``kernel="sigmoid"``: unnormalized sigma(c q.k + b) (D14).
        key_padding: ``forward`` accepts ``key_padding_mask=`` (B, S) bool, True = keep (SDPA's
            convention; an adapter flips code that uses the opposite).
        qk_norm: q and k are L2-normalized before the score, c q~.k~ with q~ = q / max(|q|,
            1e-12) (``F.normalize``'s rule) and c the scale (cosine attention's temperature,
            QK-norm; D16 bounds the computed score).
        score_bias: ``forward`` accepts ``attn_bias=``, a float tensor broadcastable to
            (B, H, T, S) added to the scaled (and softcapped) scores before ALiBi and the mask
            (SDPA's float ``attn_mask``, T5-style relative biases); checked by ``score-bias``.
        feature_map_spec: ``"pkg.module:object"`` of the variant's feature map phi, imported into
            ``feature_map`` (the command line's ``--feature-map``); with the kernel unclaimed it
            claims ``linear:phi``: kappa(q, k) = phi(c q) . phi(k) (c the scale, default 1), the
            features as phi computes them in the run's dtype taken as exact, everything after
            them checked against the exact reference and D10's bound of linear attention with
            the identity map on those features.
        eps_mode: how ``eps`` enters the ``sum`` denominator: ``"add"`` N/(D + eps), or
            ``"floor"`` N/max(D, eps) (a denominator clamped at eps, ``D.clamp(min=eps)``; the
            max is exact, so the floor changes the denominator's value, not its D10 error).
            ``"floor"`` needs eps > 0 and no denominator mode other than ``sum``/``none``.
        decode: the variant's decode path, a :class:`verify.spec.decode.DecodeAPI` or an object
            with ``prefill(q, k, v, state=None) -> (o, state)`` and ``step(state, q_new, k_new,
            v_new) -> (o_new, state)`` (``verify.spec.decode``: the protocol, per-row
            ``cache_seqlens``, ``capacity``); checked against the causal ``forward`` by the
            kernel-free decode properties (``verify.properties.decode_paths``, D20).
        decode_spec: ``"pkg.mod:obj"`` or ``"pkg.mod"`` of the decode path, imported into
            ``decode`` (the command line's ``--decode``).
        packed: ``packed(q, k, v, cu_seqlens, *, causal) -> o`` in FlashAttention's varlen
            layout (``verify.spec.decode``), checked against ``forward`` on each document
            (``verify.properties.packed``, D20).
        packed_spec: ``"pkg.mod:fn"`` of ``packed`` (the command line's ``--packed``).
        score_mod: FlexAttention's ``score_mod(score, b, h, q_idx, kv_idx) -> score`` the forward
            applies to its scaled scores (``verify.spec.flex``; softmax kernel, claimed alone
            among the score transforms); checked by ``flex-score-mod`` against the exact
            reference of the user's own function, with D16's error propagated through it
            (monotone on each score's error interval, ``score_mod_roundings`` roundings).
        score_mod_spec, mask_mod_spec, block_mask_spec: ``"pkg.mod:fn"`` of ``score_mod``,
            ``mask_mod``, ``block_mask`` (the command line's ``--score-mod``, ``--mask-mod``,
            ``--block-mask``).
        score_mod_roundings: roundings of the score_mod's own arithmetic (K u each, relative to
            the larger of the score and its image; default 2).
        mask_mod: FlexAttention's ``mask_mod(b, h, q_idx, kv_idx) -> bool`` (True = visible),
            applied with the causal flag's visibility.
        block_mask: ``block_mask(B, H, T, S) -> BlockMask`` the forward uses (torch's), checked
            by ``flex-block-mask`` against ``mask_mod``.
        differentiable: ``forward`` (and ``packed``) support autograd. False (code without a
            backward, e.g. eager FlexAttention on CPU): every gradient property skips with this
            reason, and ``packed-isolation`` checks its forward statement only and says so.

    Which fields were declared (passed to the constructor or given as claims by
    :meth:`with_claims`) is kept in :attr:`declared`: the checker never replaces a declared
    field with what the probes suggest.

    Raises:
        ValueError: an unknown layout, kernel, causal, alignment, dtype, or a bad eps/scale.
    """

    name: str
    forward: Callable[..., Any]
    layout: str = "BHTD"
    kernel: str = "unknown"
    causal: str = "both"
    causal_alignment: str | None = None
    normalized: bool = True
    eps: float = 0.0
    scale: float | str = "default"
    dtypes: tuple[str, ...] = ("float64", "float32")
    devices: tuple[str, ...] = ("cpu",)
    feature_map: Callable[[Any], Any] | None = None
    feature_scale: str = "sqrt"
    state_api: StateAPI | None = None
    forms: dict[str, Callable[..., Any]] = field(default_factory=dict)
    supports_mask: bool = False
    denominators: tuple[str, ...] = ()
    projection: Callable[..., Any] | None = None
    exp_library: str | None = None
    length_multiple: int = 1
    min_length: int = 1
    dv_equals_d: bool = False
    self_attention_only: bool = False
    compute_dtype: str | None = None
    precision: str | None = None
    arithmetic: Any = None
    empty_rows: str | None = None
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    description: str = ""
    kv_heads: int | None = None
    window: tuple[int, int] | None = None
    softcap: float | None = None
    alibi_slopes: tuple[float, ...] | str | None = None
    decay: tuple[float, ...] | None = None
    sigmoid_bias: float = 0.0
    key_padding: bool = False
    feature_map_spec: str | None = None
    qk_norm: bool = False
    score_bias: bool = False
    eps_mode: str = "add"
    head_dim_multiple: int = 1
    decode: Any = None
    decode_spec: str | None = None
    packed: Callable[..., Any] | None = None
    packed_spec: str | None = None
    score_mod: Callable[..., Any] | None = None
    score_mod_spec: str | None = None
    score_mod_roundings: int = 2
    mask_mod: Callable[..., Any] | None = None
    mask_mod_spec: str | None = None
    block_mask: Callable[..., Any] | None = None
    block_mask_spec: str | None = None
    differentiable: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name: expected a non-empty str, got {self.name!r}")
        if not callable(self.forward):
            raise TypeError(f"forward: expected a callable, got {type(self.forward).__name__}")
        _one_of("layout", self.layout, LAYOUTS)
        if self.kernel == "exp" or not isinstance(self.kernel, str):
            raise ValueError(f"kernel: expected a kernel claim string, got {self.kernel!r}")
        _kernel.parse(self.kernel)
        _one_of("causal", self.causal, CAUSAL_SUPPORT)
        if self.causal_alignment is not None:
            _one_of("causal_alignment", self.causal_alignment, ALIGNMENTS)
        if not isinstance(self.normalized, bool):
            raise TypeError(f"normalized: expected a bool, got {self.normalized!r}")
        if not (isinstance(self.eps, (int, float)) and self.eps >= 0 and math.isfinite(self.eps)):
            raise ValueError(f"eps: expected a finite number >= 0, got {self.eps!r}")
        _one_of("eps_mode", self.eps_mode, EPS_MODES)
        if self.eps_mode == "floor" and not self.eps > 0:
            raise ValueError(f"eps_mode: 'floor' (max(D, eps)) needs eps > 0, got eps {self.eps!r}")
        if self.eps_mode == "floor" and set(self.denominators) - {"sum", "none"}:
            raise ValueError(
                "eps_mode: 'floor' is defined for the sum denominator, got denominators "
                f"{self.denominators!r}"
            )
        if self.scale != "default" and not (
            isinstance(self.scale, (int, float)) and self.scale > 0 and math.isfinite(self.scale)
        ):
            raise ValueError(f"scale: expected 'default' or a positive float, got {self.scale!r}")
        for dt in self.dtypes:
            _one_of("dtypes", dt, DTYPES)
        for dev in self.devices:
            if dev not in DEVICES:
                raise ValueError(f"devices: expected entries 'cpu' or 'cuda', got {dev!r}")
        _one_of("feature_scale", self.feature_scale, FEATURE_SCALES)
        for name in ("length_multiple", "head_dim_multiple", "min_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        for mode in self.denominators:
            _one_of("denominators", mode, DENOMINATORS)
        for flag in ("dv_equals_d", "self_attention_only", "differentiable"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag}: expected a bool, got {getattr(self, flag)!r}")
        if self.compute_dtype is not None:
            _one_of("compute_dtype", self.compute_dtype, DTYPES)
        if self.precision is not None:
            from derivations.precision_models import parse_precision

            model = parse_precision(self.precision)
            if model.name != "two-level" and self.parsed_kernel.family not in (
                "softmax",
                "unknown",
            ):
                raise ValueError(
                    f"precision: {self.precision!r} describes softmax kernels, but the kernel "
                    f"claim is {self.kernel!r} (use two-level)"
                )
        if self.arithmetic is not None:
            from derivations.kernel_arithmetic import parse_arithmetic

            parse_arithmetic(self.arithmetic)
        if self.empty_rows is not None:
            _one_of("empty_rows", self.empty_rows, EMPTY_ROW_CONVENTIONS)
        if self.exp_library is not None:
            from derivations.rounding import LIBRARY_EXP_ULPS

            _one_of("exp_library", self.exp_library, tuple(LIBRARY_EXP_ULPS))
        for dt, tol in self.tolerances.items():
            _one_of("tolerances", dt, DTYPES)
            if not isinstance(tol, Tolerance):
                raise TypeError(f"tolerances[{dt!r}]: expected a Tolerance(factor, reason)")
        _structure.check_claims(self)
        if self.feature_map_spec is not None:
            from verify.spec.imports import TargetError, load_spec

            try:
                phi = load_spec(self.feature_map_spec)
            except TargetError as exc:
                raise ValueError(str(exc).replace("target:", "feature_map_spec:", 1)) from None
            if not callable(phi):
                raise TypeError(f"feature_map_spec: {self.feature_map_spec!r} is not callable")
            object.__setattr__(self, "feature_map", phi)
            if self.kernel == "unknown":
                object.__setattr__(self, "kernel", "linear:phi")
        self._load_paths()
        self._load_flex()
        if self.linear_map == "phi" and self.feature_map is None:
            raise ValueError(
                "kernel: 'linear:phi' needs the variant's feature_map (or --feature-map)"
            )

    def _load_paths(self) -> None:
        """Import ``decode_spec``/``packed_spec`` and coerce ``decode`` (verify.spec.decode)."""
        from verify.spec import decode as _decode

        if self.decode_spec is not None:
            object.__setattr__(self, "decode", _decode.load_decode(self.decode_spec))
        elif self.decode is not None:
            object.__setattr__(self, "decode", _decode.as_decode(self.decode))
        if self.packed_spec is not None:
            object.__setattr__(self, "packed", _decode.load_packed(self.packed_spec))
        if self.packed is not None and not callable(self.packed):
            raise TypeError(f"packed: expected a callable, got {type(self.packed).__name__}")

    def _load_flex(self) -> None:
        """Import the flex specs, validate the claims (``verify.spec.flex``); a flex claim with
        the kernel unclaimed claims softmax."""
        from verify.spec import flex

        for name in ("score_mod", "mask_mod", "block_mask"):
            spec = getattr(self, f"{name}_spec")
            if spec is not None:
                object.__setattr__(self, name, flex.load_mod(spec, f"{name}_spec"))
        if flex.has_flex(self) and self.kernel == "unknown":
            object.__setattr__(self, "kernel", "softmax")
        flex.check_claims(self)

    # -- derived views of the claims ----------------------------------------------------------
    @property
    def parsed_kernel(self) -> _kernel.Kernel:
        """The kernel claim as a :class:`verify.spec.kernel.Kernel`."""
        return _kernel.parse(self.kernel)

    @property
    def kernel_family(self) -> str:
        """``softmax``, ``taylor``, ``linear`` or ``unknown``."""
        return self.parsed_kernel.family

    @property
    def order(self) -> int | None:
        """Truncation order N for ``taylor:N`` and ``linear:taylor:N``; None otherwise."""
        return self.parsed_kernel.order

    @property
    def linear_map(self) -> str | None:
        """The feature-map name for ``linear:MAP`` kernels."""
        return self.parsed_kernel.map

    @property
    def exp_type(self) -> bool:
        """Kernels of the exp family (scores scaled by c, default 1/sqrt(d))."""
        return self.parsed_kernel.exp_type

    def score_scale(self, d: int) -> float:
        """The scale c the variant claims to use at head dimension ``d``."""
        if self.scale != "default":
            return float(self.scale)
        return self.parsed_kernel.default_scale(d)

    @property
    def positive_kernel(self) -> bool | None:
        """True when the claimed kernel is positive (exp, even kappa_N, elu1, favor); False for
        signed kernels (odd kappa_N, identity; relu is non-negative but can vanish); None when
        unknown."""
        return self.parsed_kernel.positive

    def supports_causal(self, causal: bool) -> bool:
        return self.causal == "both" or (self.causal == "yes") == causal

    @property
    def declared(self) -> frozenset[str]:
        """The fields declared for this variant: passed to its constructor, or given as claims
        (:meth:`with_claims`, ``verify.spec.target.apply_claims``). A declared ``feature_map_spec``
        declares the kernel it implies. The checker's probes fill only undeclared fields."""
        names = getattr(self, "_declared", None)
        if names is None:  # built without the constructor (e.g. copied): everything counts
            names = frozenset(f.name for f in fields(self))
        if (
            self.feature_map_spec is not None
            or self.score_mod is not None
            or self.mask_mod is not None
        ):
            names = names | {"kernel"}
        return names

    def with_claims(self, **claims: Any) -> AttentionVariant:
        """A copy with some claims replaced (validated again); they join :attr:`declared`."""
        out = replace(self, **claims)
        object.__setattr__(out, "_declared", self.declared | frozenset(claims))
        return out

    def with_found(self, **found: Any) -> AttentionVariant:
        """A copy with what the probes found on the fields not declared (declared ones keep
        their values); the found values do not become declared."""
        given = {k: v for k, v in found.items() if k not in self.declared}
        if not given:
            return self
        out = replace(self, **given)
        object.__setattr__(out, "_declared", self.declared)
        return out


def _record_declared(cls):
    """Wrap the dataclass constructor so each instance records which fields it was given."""
    init = cls.__init__
    names = [f.name for f in fields(cls) if f.init]

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        object.__setattr__(self, "_declared", frozenset((*names[: len(args)], *kwargs)))

    cls.__init__ = __init__
    return cls


_record_declared(AttentionVariant)


def sanitize_name(name: str) -> str:
    """A file-name-safe version of a variant name (letters, digits, ``-``, ``_``, ``.``)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")
    return safe[:80] or "variant"


#: the claim fields a spawned worker re-applies to the variant it rebuilds from its import spec
CLAIM_FIELDS = (
    "name",
    "layout",
    "kernel",
    "causal",
    "causal_alignment",
    "normalized",
    "eps",
    "scale",
    "dtypes",
    "devices",
    "length_multiple",
    "min_length",
    "dv_equals_d",
    "self_attention_only",
    "compute_dtype",
    "precision",
    "arithmetic",
    "empty_rows",
    "exp_library",
    "kv_heads",
    "window",
    "softcap",
    "alibi_slopes",
    "decay",
    "sigmoid_bias",
    "key_padding",
    "feature_map_spec",
    "qk_norm",
    "score_bias",
    "eps_mode",
    "head_dim_multiple",
    "decode_spec",
    "packed_spec",
    "score_mod_spec",
    "score_mod_roundings",
    "mask_mod_spec",
    "block_mask_spec",
    "differentiable",
)


def claim_fields(v: AttentionVariant) -> dict[str, Any]:
    """The picklable claim fields of ``v`` (:data:`CLAIM_FIELDS`)."""
    return {name: getattr(v, name) for name in CLAIM_FIELDS}


def claims_json(v: AttentionVariant) -> dict[str, Any]:
    """The declared claims as plain JSON values."""
    return {
        "kernel": v.kernel,
        "layout": v.layout,
        "causal": v.causal,
        "causal_alignment": v.causal_alignment,
        "normalized": v.normalized,
        "eps": v.eps,
        "eps_mode": v.eps_mode,
        "scale": v.scale,
        "dtypes": list(v.dtypes),
        "devices": list(v.devices),
        "feature_map": v.feature_map is not None,
        "state_api": v.state_api is not None,
        "forms": sorted(v.forms),
        "supports_mask": v.supports_mask,
        "denominators": list(v.denominators),
        "length_multiple": v.length_multiple,
        "min_length": v.min_length,
        "head_dim_multiple": v.head_dim_multiple,
        "dv_equals_d": v.dv_equals_d,
        "self_attention_only": v.self_attention_only,
        "compute_dtype": v.compute_dtype,
        "precision": v.precision,
        "arithmetic": v.arithmetic
        if v.arithmetic is None or isinstance(v.arithmetic, str)
        else v.arithmetic.name,
        "empty_rows": v.empty_rows,
        "exp_library": v.exp_library,
        "kv_heads": v.kv_heads,
        "window": list(v.window) if v.window is not None else None,
        "softcap": v.softcap,
        "alibi_slopes": (
            list(v.alibi_slopes) if isinstance(v.alibi_slopes, tuple) else v.alibi_slopes
        ),
        "decay": list(v.decay) if v.decay is not None else None,
        "sigmoid_bias": v.sigmoid_bias,
        "key_padding": v.key_padding,
        "feature_map_spec": v.feature_map_spec,
        "qk_norm": v.qk_norm,
        "score_bias": v.score_bias,
        "decode": v.decode_spec or (v.decode is not None),
        "packed": v.packed_spec or (v.packed is not None),
        "score_mod": v.score_mod_spec or (v.score_mod is not None),
        "score_mod_roundings": v.score_mod_roundings,
        "mask_mod": v.mask_mod_spec or (v.mask_mod is not None),
        "block_mask": v.block_mask_spec or (v.block_mask is not None),
        "differentiable": v.differentiable,
        "tolerances": {
            k: {"factor": t.factor, "reason": t.reason} for k, t in v.tolerances.items()
        },
    }
