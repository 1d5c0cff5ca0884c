"""Adapters that declare real third-party attention implementations as checked variants.

Each entry of :data:`ADAPTERS` is an import spec ``"verify.adapters.<module>:<factory>"`` of a
zero-argument factory returning an :class:`~verify.spec.variant.AttentionVariant`; pass it to
``attn-theory check`` or :func:`verify.check`. :func:`verify.adapters.cards.build_cards`
regenerates the committed report cards (``reports/variants/<name>.md|json``).

Importing this package is cheap: the third-party packages (fla-core, performer-pytorch) are
imported by the factories, which raise ImportError when a package is missing.
"""

from __future__ import annotations

#: card name -> import spec of the variant's factory
ADAPTERS: dict[str, str] = {
    "torch-sdpa": "verify.adapters.sdpa:sdpa_variant",
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
    "performer-FastAttention-noncausal": "verify.adapters.performer:noncausal_variant",
    "performer-FastAttention-causal": "verify.adapters.performer:causal_variant",
}

#: the package each adapter module needs (for skip messages)
REQUIRES: dict[str, str] = {
    "sdpa": "torch",
    "fla": "fla-core (with triton)",
    "performer": "performer-pytorch",
}

__all__ = ["ADAPTERS", "REQUIRES"]
