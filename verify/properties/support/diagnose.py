"""What a failure's reproducer will show, measured where the failure is found: the variant's
output against the reference on the counterexample's attention inputs, as a multiple of the
bound (the failure grouping shows a run whose reproducer shows it: ``verify.engine.groups``).
The reproducer itself calls ``verify.properties.support.reproduce.reference``."""

from __future__ import annotations

#: largest number of scores (B H T S) whose reference :func:`reference_ratio` computes (the
#: mpmath oracle: minimal counterexamples are far below it)
RATIO_SCORES = 256


def reference_ratio(variant, example, ctx) -> float | None:
    """max |o - reference| / bound of the variant's forward on the attention inputs of
    ``example`` (its own denominator mode, else the variant's convention): what its reproducer
    shows; None when there is none to show (no attention inputs, more than
    :data:`RATIO_SCORES` scores, no reference for the claims, the variant raising)."""
    from verify.properties.support.calls import call
    from verify.properties.support.common import exact_and_bound
    from verify.properties.support.paths import call_kwargs, convention_mode
    from verify.strategies import AttentionInputs

    x = getattr(example, "inputs", example)
    if not isinstance(x, AttentionInputs):
        return None
    s = x.shape
    if s.B * s.H * s.T * s.S > RATIO_SCORES or not variant.parsed_kernel.known:
        return None
    mode = getattr(example, "choices", {}).get("denominator") or convention_mode(variant)
    try:
        from verify.exact.errors import compare

        result, eb = exact_and_bound(variant, x, ctx, denominator=mode)
        o = call(
            variant, x.q, x.k, x.v, causal=x.causal, allow_nonfinite=True,
            **call_kwargs(variant, mode, x.attn_mask),
        )  # fmt: skip
        return float(compare(o, eb, result).ratio)
    except Exception:  # noqa: BLE001 - a diagnosis only: nothing to show
        return None
