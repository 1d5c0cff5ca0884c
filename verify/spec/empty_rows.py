"""What a row with no visible key returns, told from its outputs: the empty-row conventions of
``verify.spec.vocabulary.EMPTY_ROW_CONVENTIONS`` (``zeros``, ``nan``, ``uniform``, ``other``).

One classifier for the probes (``verify.probes.conventions.probe_empty_rows``, which reads the
convention in each dtype) and the properties that judge a declared or found convention
(``verify.properties.masks``), with ``uniform`` held to the D10 bound of the run's dtype.
"""

from __future__ import annotations

import numpy as np


def empty_row_kinds(rows: np.ndarray, v: np.ndarray, dtype: str, compute: str | None) -> list[str]:
    """Every convention ``rows`` fit, in the order ``nan``, ``zeros``, ``uniform`` (values
    0 fit both zeros and uniform); [] for ``other``. ``rows`` (n, d_v) are outputs of rows
    without a visible key, ``v`` their values: (S, d_v) for all of them, or (n, S, d_v) one
    set per row. ``uniform`` is the mean of the values within the D10 bound of an S-term
    weighted sum computed in ``dtype`` (or the coarser ``compute`` dtype): |o - mean| <=
    gamma_{S+2}(u) mean_s |v_s| (S products by the rounded weight 1/S, S - 1 additions, the
    rounding of 1/S and of the output; Higham Lemma 3.1, ``derivations.rounding.gamma``)."""
    from derivations.rounding import gamma, unit_roundoff

    out = []
    if rows.size and np.isnan(rows).all():
        out.append("nan")
    if np.array_equal(rows, np.zeros_like(rows)):
        out.append("zeros")
    u = max(unit_roundoff(dtype), unit_roundoff(compute) if compute else 0.0)
    S = v.shape[-2]
    mean, scale = v.mean(-2), np.abs(v).mean(-2)
    if np.isfinite(rows).all() and (np.abs(rows - mean) <= gamma(S + 2, u) * scale).all():
        out.append("uniform")
    return out


def empty_row_kind(rows: np.ndarray, v: np.ndarray, dtype: str, compute: str | None) -> str:
    """``nan``, ``zeros``, ``uniform`` or ``other``: the first of :func:`empty_row_kinds`."""
    kinds = empty_row_kinds(rows, v, dtype, compute)
    return kinds[0] if kinds else "other"
