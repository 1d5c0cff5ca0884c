"""Applicability from a variant's claims: the reasons (a string) a property does not apply, or
None. Each group words the missing reference for what it compares; the tests are written once
here."""

from __future__ import annotations

from verify.properties.support.common import kernel_name
from verify.properties.support.paths import normalized_modes, sum_mode

#: maps whose linear attention is positively homogeneous (phi(alpha x) = alpha phi(x), D8, D9)
HOMOGENEOUS_MAPS = ("identity", "relu")

#: the properties that hold, with the same statement, under structural claims (a window, a
#: softcap, ALiBi, a decay, sigmoid weights: ``verify.spec.structure``): the structural ones
#: (kernel-free, D11), those whose reference is the modern one (``exact_and_bound``: outputs,
#: forms, states, dtypes) and the properties of the claims themselves. The others state facts
#: of the plain kernels (uniform weights at q = k = 0, peaks, shift invariance, the exact
#: kernel matrix ...) that the claims change, or compare with the plain reference on rows cut
#: out of their positions (``dtype-agreement``, ``device-agreement``), and skip with that
#: reason.
STRUCTURE_AWARE = (
    "accepts-inputs",
    "oracle-agreement",
    "edge-cases",
    "causality",
    "prefix-invariance",
    "batch-independence",
    "head-independence",
    "permutation-equivariance",
    "linearity-in-v",
    "determinism",
    "convex-combination",
    "masks",
    "causal-alignment",
    "causal-mismatch-rejected",
    "forms-agree",
    "state-step",
    "state-split-resume",
    "decode-steps",
    "decode-resume",
    "decode-multi-token",
    "decode-batch-rows",
    "decode-capacity",
    "decode-unused-slots",
    "decode-window",
    "packed-documents",
    "packed-isolation",
    "gradcheck",
    "gradients-vs-reference",
    "masked-key-gradients",
    "gradient-identities",
    "window-extent",
    "head-groups",
    "key-padding",
    "score-bias",
    "flex-score-mod",
    "flex-block-mask",
)


def structure_reason(variant, property_id: str) -> str | None:
    """Why ``property_id`` does not apply under the variant's structural claims, or None."""
    from verify.spec.structure import describe, has_structure, position_dependent
    from verify.spec.vocabulary import USER_MAP

    if variant.linear_map == USER_MAP and property_id not in STRUCTURE_AWARE:
        return (
            "a declared feature map (kernel linear:phi): the statement is about a named kernel "
            "or reads the exact weights, which only the output reference covers here"
        )
    if not has_structure(variant):
        return None
    claims = "; ".join(describe(variant))
    if property_id == "permutation-equivariance" and position_dependent(variant):
        return f"position-dependent claims ({claims}): keys are not exchangeable"
    if property_id in STRUCTURE_AWARE:
        return None
    return (
        f"structural claims ({claims}): a statement about the plain {variant.kernel} kernel "
        "that they change"
    )


def dtype_reason(variant, ctx) -> str | None:
    """The run's dtype is not among the claimed ``dtypes``."""
    if ctx.dtype not in variant.dtypes:
        return f"the variant does not claim {ctx.dtype}"
    return None


def reference_reason(variant, *, unknown: str, favor: str) -> str | None:
    """No exact reference for the claims: ``unknown`` (the whole reason) for an unknown kernel,
    ``FAVOR+ without a declared projection: {favor}`` for FAVOR+ without a projection."""
    if kernel_name(variant) is None:
        return unknown
    return projection_reason(variant, favor)


def projection_reason(variant, favor: str) -> str | None:
    """FAVOR+ without a declared projection: ``FAVOR+ without a declared projection: {favor}``."""
    if variant.linear_map == "favor" and variant.projection is None:
        return f"FAVOR+ without a declared projection: {favor}"
    return None


def structural_applies(variant, ctx, *, causal: bool | None = None) -> str | None:
    """Applicability of a structural property: the run's dtype, and (if given) support of the
    causal flag. No kernel is needed: the bound is kernel-free where the claim has no model
    (``verify.properties.support.structure``, D11)."""
    if why := dtype_reason(variant, ctx):
        return why
    if causal is not None and not variant.supports_causal(causal):
        return f"the variant does not support causal={causal}"
    return None


def oracle_applies(variant, ctx, *, causal: bool | None = None) -> str | None:
    """Common applicability: a known kernel (oracle and error model), then
    :func:`structural_applies`."""
    return reference_reason(
        variant,
        unknown="kernel unknown (kernel='unknown'): no exact reference or error model for a bound",
        favor="no exact reference for a bound",
    ) or structural_applies(variant, ctx, causal=causal)


def _normalized(why: str | None, variant, unnormalized: str) -> str | None:
    if why:
        return why
    return None if normalized_modes(variant) else unnormalized


def normalized_applies(variant, ctx, *, unnormalized: str) -> str | None:
    """:func:`oracle_applies`, and a claimed mode that divides by the kernel sum (none:
    ``unnormalized``, the whole reason)."""
    return _normalized(oracle_applies(variant, ctx), variant, unnormalized)


def normalized_structural_applies(variant, ctx, *, unnormalized: str) -> str | None:
    """:func:`structural_applies`, and a claimed mode that divides by the kernel sum."""
    return _normalized(structural_applies(variant, ctx), variant, unnormalized)


def positivity_reason(variant, *, unknown: str, what: str) -> str | None:
    """Kernel positivity unknown: ``unknown`` (the whole reason); a signed kernel:
    ``signed kernel ({kernel}): {what} does not apply``."""
    if variant.positive_kernel is None:
        return unknown
    if not variant.positive_kernel:
        return f"signed kernel ({variant.kernel}): {what} does not apply"
    return None


def constructed_applies(variant, ctx) -> str | None:
    """Constructed inputs (score rows, query pairs) are non-causal with free lengths."""
    if not variant.supports_causal(False):
        return "constructed score rows need non-causal calls"
    if variant.length_multiple != 1:
        return f"constructed inputs need free lengths (length_multiple = {variant.length_multiple})"
    return dtype_reason(variant, ctx)


def softmax_weights_applies(variant, ctx) -> str | None:
    """Statements about the softmax weights on constructed inputs (D8, D9)."""
    if variant.kernel_family != "softmax":
        return "a statement about softmax (kernel exp)"
    if sum_mode(variant) is None:
        return "unnormalized softmax: weights are not available"
    return constructed_applies(variant, ctx)


def homogeneous_weights_applies(variant, ctx) -> str | None:
    """Statements about normalized linear attention with a positively homogeneous map on
    constructed inputs (D8, D9)."""
    if variant.linear_map not in HOMOGENEOUS_MAPS:
        return "needs normalized linear attention with a positively homogeneous map " + str(
            HOMOGENEOUS_MAPS
        )
    if sum_mode(variant) is None:
        return "unnormalized linear attention: weights are not available"
    return constructed_applies(variant, ctx)
