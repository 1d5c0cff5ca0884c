"""The D10 record: the floating-point error model (stated precision).

The numeric bounds live in ``derivations.rounding``, the claims in ``rounding_claims``;
``derive()`` calls them in order. Run with ``python -m derivations.rounding_record``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from derivations import precision_claims, precision_models
from derivations import rounding as d10
from derivations import rounding_claims as claims
from derivations._record import Derivation, main_for


def derive(
    *,
    gamma_fn: Callable[[Any, Any], Any] | None = None,
    unit_roundoffs: Mapping[str, Any] | None = None,
    always_exact_products: tuple[tuple[str, str], ...] | None = None,
    dropped_assumptions: tuple[str, ...] = (),
) -> Derivation:
    """Build the D10 record.

    Keyword overrides inject a *wrong* statement so tests can show the record then fails:
        gamma_fn: (n, u) -> claimed gamma_n (e.g. ``lambda n, u: n*u``, no denominator).
        unit_roundoffs: claimed u per dtype name (e.g. ``{"bfloat16": 2**-11}``).
        always_exact_products: (input, accumulation) dtype pairs claimed to multiply exactly
            for every input (e.g. adding ``("bfloat16", "float32")``, which can underflow or
            overflow).
        dropped_assumptions: names of ``rounding_claims.ASSUMPTIONS`` claimed unnecessary (e.g.
            ``("gradual underflow",)``: the model claimed to hold under flush-to-zero).

    Raises:
        ValueError: an unknown name in ``dropped_assumptions``.
    """
    gam = gamma_fn or (lambda nn, uu: nn * uu / (1 - nn * uu))
    rec = Derivation("D10", "Floating-point error model (stated precision)")
    claims.claim_assumptions(rec, dropped_assumptions)
    claims.claim_unit_roundoff(rec, unit_roundoffs)
    claims.claim_gamma_lemma(rec, gam)
    # elementary operations
    claims.claim_exp_bound(rec)
    claims.claim_library_ulps(rec)
    claims.claim_ratio(rec)
    # kernel attention output
    claims.claim_output_identity(rec)
    claims.claim_weighted_sum(rec)
    claims.claim_taylor_weights(rec)
    claims.claim_two_level(
        rec,
        claims.ALWAYS_EXACT_PRODUCTS if always_exact_products is None else always_exact_products,
    )
    # precision models of real low-precision kernels (derivations.precision_models)
    precision_claims.claim_precision_models(rec)
    # instance check on a toy format
    claims.claim_toy_format(rec)
    rec.exports = list(d10.EXPORTS) + list(precision_models.EXPORTS)
    return rec


if __name__ == "__main__":
    main_for(derive)
