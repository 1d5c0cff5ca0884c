"""The D4 record: truncation error and positivity of the Taylor kernel.

The numeric functions live in ``derivations.truncation``; the claims in ``truncation_claims`` and
the checks of the exports against sympy in ``truncation_checks``. ``derive()`` calls them in
order. Run with ``python -m derivations.truncation_record``.
"""

from __future__ import annotations

from derivations import feature_maps as fm
from derivations import truncation as d4
from derivations import truncation_checks as checks
from derivations import truncation_claims as claims
from derivations._record import Derivation, main_for


def derive(**wrong) -> Derivation:
    """Build the D4 record (see the module docstring for the statements).

    Keyword overrides (wrong-statement tests): ``taylor_coefficient`` (builds the kappa_N
    polynomial the instance checks use) and any name in ``EXPORTS`` (e.g. a
    ``remainder_bound`` without its e^{max(x,0)} factor).

    Raises:
        TypeError: an unknown override name.
    """
    f = fm.resolve_overrides(
        wrong,
        {"taylor_coefficient": fm.taylor_coefficient, **{n: getattr(d4, n) for n in d4.EXPORTS}},
    )
    rec = Derivation("D4", "Truncation error and positivity of the Taylor kernel")
    claims.statement(rec)
    # general lemmas (symbolic N)
    claims.claim_kappa_series(rec, f)
    claims.claim_derivative(rec)
    claims.claim_last_term(rec)
    claims.claim_relative_error_derivative(rec, f)
    claims.claim_monotone(rec)
    claims.claim_remainder(rec)
    claims.claim_delta_limit(rec)
    claims.claim_dominant_term(rec)
    # the stated numbers, computed with sympy
    claims.claim_stated_deltas(rec)
    claims.claim_stated_first_below(rec)
    # output perturbation bound
    claims.claim_split_bound(rec)
    claims.claim_supremum(rec)
    claims.claim_thresholds(rec)
    # positivity
    claims.claim_positivity(rec)
    claims.claim_root_counts(rec, f)
    claims.claim_signed_weights(rec, f)
    # the exports against the sympy expressions
    checks.check_kappa(rec, f)
    checks.check_remainder_bound(rec, f)
    checks.check_relative_error(rec, f)
    checks.check_delta(rec, f)
    checks.check_output_error_bound(rec, f)
    checks.check_informative_radius(rec, f)
    checks.check_first_order_below(rec, f)
    checks.check_dominant_order(rec, f)
    checks.check_real_root_count(rec, f)
    rec.exports = list(d4.EXPORTS)
    checks.tables(rec)
    return rec


if __name__ == "__main__":
    main_for(derive)
