"""What the probes found: :class:`Check` (one comparison) and :class:`ProbeReport` (every probe's
findings), serializable to plain JSON."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass
@dataclass
class Check:
    """One comparison: ``result`` (None when it could not run), the observed quantity, the bound
    it was judged against, and a reason or detail."""

    result: bool | None
    observed: float | None = None
    bound: float | None = None
    detail: str = ""


@dataclass
class ProbeReport:
    """What the probes found (all fields JSON-serializable through :meth:`to_json`).

    Attributes:
        variant, dtype, device, seed: what was probed and how.
        scope: ``full`` (the kernel identified, every probe) or ``conventions`` (a kernel was
            claimed: the restrictions, the compute dtype, causality, the alignment and the
            normalization and eps convention only; the kernel fields stay "not run").
        lengths: ``tested`` {T: "ok" | reason} (T == S), ``mode`` (the causal flag used),
            ``multiple`` (T must be a multiple of it, or None), ``smallest_failing``, ``rule``.
        calls: {"causal=False" | "causal=True": "ok" | reason} at the working length.
        causal_support: ``yes`` | ``no`` | ``both`` (claims vocabulary) or None (unusable).
        causal: Checks ``noncausal_sees_future``, ``causal_masks_future``,
            ``future_perturbation_changes_past``, ``prefix_invariant``, ``flag_ignored``.
        cross: ``noncausal`` {"T,S": "ok" | reason}, ``causal`` {"T,S": pattern | reason},
            ``alignment`` (top-left | bottom-right | None) and a ``detail``.
        deterministic, linear_in_v, qk_only: Checks.
        normalization: ``kind`` (sum | sum+eps | sum+floor | none | count | other |
            unsettled: D/(D + eps) and a count both fit the row sums), ``row_sum`` Check
            (v = 1 gives 1), ``duplication`` (last-row sums r1, r2 with every key twice),
            ``eps`` / ``eps_interval`` (eps/kappa(0) for sum+eps); with the kernel known,
            ``eps_mode`` (add | floor) and ``eps`` held to the D10 bound on every probed row,
            and ``convention`` (the hypotheses tried, their worst observed/bound, a detail)
            (``verify.probes.conventions``).
        kernel: ``verdict`` (consistent | none | not run; with none, ``resembles`` names the
        family a ranking puts first without a fit, e.g. FAVOR-like), ``kernel`` (a claims
            kernel string), ``scale`` (a convention name, ``fitted`` or ``any``), ``scale_by_d``
            {d: c}, ``precision`` (the dtype whose D10 bound the weights meet), ``max_ratio``
            (observed/bound of the match over d = 2, 4, 8), ``candidates`` {"kernel (scale)":
            observed/bound at d = 4, in the output precision} for every family member,
            ``closest`` (the best three), ``detail``.
        fit: least-squares polynomial of kappa(x)/kappa(0): ``coefficients``,
            ``taylor_coefficients`` (1/n!), ``score_scale``, ``rms_relative_residual``.
        positivity: ``min_weight`` over the probed weights, ``positive`` (all > 0).
        rank: ``noncausal`` / ``causal`` ranks of a T x S attention matrix, ``tolerance``,
            ``rule``.
        injectivity: Checks ``homogeneous`` (q and 2q same weights), ``shift_invariant``,
            ``distinct_rows``, and ``summary``.
        independence: Checks ``batch``, ``head``, ``single_call``.
        dtypes: {dtype: "ok" | reason}.
        head_dims: {d: "ok" | reason} of the head-dimension scan (d_v = d).
        restrictions: the closed list of input restrictions found (``dv_equals_d``,
            ``self_attention_only``: True when only that shape works; ``head_dim_multiple``:
            the m whose multiples are exactly the head dimensions that work; ``compute_dtype``: a
            coarser dtype the outputs of float64 calls fall in) and the ``empty_rows``
            convention seen on rows without keys; absent keys were not found.
        output_precision: the coarsest dtype whose numbers contain every output of a call
            with full-precision values (the precision the bounds use).
        positional: the structural probes (``verify.probes.positional``): ``window`` (the
            visible pattern at q = k = 0, or at q = k = ``q_k_fill`` where no key has a weight
            at 0, and the FlashAttention window reproducing it, or None),
            ``bias`` (slopes of a bias linear in |t' - s| per head, their residual, whether
            they are ALiBi's reference slopes), ``kv_heads`` (the kv head each query head reads
            on a grouped call, its convention), ``cap`` (log(w_1/w_0) against the score x, a
            softcap C fitted to C tanh(x / C)).
        notes: probes that could not run, with the reason.
        runtime_s: wall time of the probe.
        description: one sentence saying what the variant computes; :func:`verify.probes.probe`
            leaves it empty, ``verify.render.probes.describe`` words it.
    """

    variant: str
    dtype: str
    device: str
    seed: int
    scope: str = "full"
    lengths: dict[str, Any] = field(default_factory=dict)
    calls: dict[str, str] = field(default_factory=dict)
    causal_support: str | None = None
    causal: dict[str, Check] = field(default_factory=dict)
    cross: dict[str, Any] = field(default_factory=dict)
    deterministic: Check = field(default_factory=lambda: Check(None))
    linear_in_v: Check = field(default_factory=lambda: Check(None))
    normalization: dict[str, Any] = field(default_factory=dict)
    qk_only: Check = field(default_factory=lambda: Check(None))
    kernel: dict[str, Any] = field(default_factory=lambda: {"verdict": "not run"})
    fit: dict[str, Any] = field(default_factory=dict)
    positivity: dict[str, Any] = field(default_factory=dict)
    rank: dict[str, Any] = field(default_factory=dict)
    injectivity: dict[str, Any] = field(default_factory=dict)
    independence: dict[str, Check] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    head_dims: dict[str, str] = field(default_factory=dict)
    output_precision: str = ""
    restrictions: dict[str, Any] = field(default_factory=dict)
    positional: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    runtime_s: float = 0.0
    description: str = ""

    def to_json(self) -> dict[str, Any]:
        """A dict of plain JSON types (non-finite floats as the strings "inf", "-inf", "nan")."""
        return _plain(asdict(self))


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        f = float(x)
        return f if math.isfinite(f) else str(f)
    return x
