"""Black-box probes: what an attention callable computes, read from its forward alone.

``probe(variant)`` calls ``variant.forward`` (through ``verify.properties.support.calls.call``,
so an exception, NaN/inf, a wrong shape or dtype is recorded as a reason, never raised) on inputs
built to expose one property at a time, and returns a :class:`ProbeReport`:

* input restrictions (:mod:`~verify.probes.restrictions`): which sequence lengths T in
  ``SCAN_LENGTHS`` work (e.g. "T must be a multiple of 16"), which head dimensions (e.g. even
  d only), whether d_v != d and T != S are accepted, the
  causal alignment for T < S (fault class 7: T = 1, S = 2 is top-left when query 0 sees key 0
  only, bottom-right when it sees both), dtypes;
* causality (:mod:`~verify.probes.structure`): does ``causal=True`` change the output, does
  ``causal=False`` see the future, does perturbing future tokens change past outputs, prefix
  invariance f(x)[:t] == f(x[:t]) (fault class 9);
* the attention matrix, read with V = identity (o_ts = w_ts for any kernel attention), checked to
  be linear in V; normalization (v = 1 gives 1; key duplication tells a numerator-only variant,
  whose row sums double, from one with an offset eps in its denominator, D/(D + eps));
* whether the weights depend on q.k only: q' = q H / d and k' = k H with H a Sylvester Hadamard
  matrix (H H^T = d I) have exactly the same q.k; the inputs lie on a dyadic grid, so q', k' are
  exact in floating point and any difference is a property of the variant, not of rounding;
* kernel identification (:mod:`~verify.probes.identify`): the measured weights are compared with
  each member of a finite family (exp, kappa_N for N <= ``MAX_TAYLOR_ORDER`` (D1), kernel linear
  attention with the identity, elu+1 and relu maps (D3)) at each scale convention (1/sqrt(d),
  1/d, d^-1/4, 1), at d = 4 and again at d = 2 and 8 (the conventions differ with d). Scores
  reach |c q.k| >= 4 for every convention, where kappa_8 and exp differ by far more than
  rounding. Normalized weights are compared as ratios w_s/w_ref = kappa(x_s)/kappa(x_ref), which
  no row normalization (sum, sum + eps, count) changes; numerator-only weights directly. The
  tolerance is the D10 bound of the candidate (``verify.exact.errors.attention_error_bound``,
  numerator only, the largest cited CPU exp error since the library is unknown) carried through
  the ratio (:func:`ratio_bound`). Else (:mod:`~verify.probes.fits`), positive weights that are
  not a function of q.k and lie closer to exp than to any element-wise map are reported
  FAVOR-like (random features: a noisy exp, D9), and otherwise "none of the known kernels" with
  a least-squares polynomial fit of kappa(x)/kappa(0);
* positivity, rank (numpy's rule: singular values above sigma_max max(T, S) eps), injectivity
  (D9: q and 2q give the same weights for a positively homogeneous map; shift invariance of exp
  along K u = 1; distinct rows), batch and head independence, determinism, dtype behaviour.

Structural comparisons (two evaluations with the same exact value) use the sum of the two D10
bounds; as no bound exists for an unknown computation, each is the largest bound of the known
positive kernels (``STRUCTURAL_KERNELS``, scale 1, normalized and numerator-only) on the same
inputs -- a stated proxy, far below the effects probed (differences of order 1e-3 to 1).

* the denominator's eps convention with the kernel known (:mod:`~verify.probes.conventions`):
  none, N/(D + eps) or a floor N/max(D, eps), on rows whose kernel sums span many orders of
  magnitude, each hypothesis held to its D10 bound.

With ``identify=False`` (what the checker runs when a kernel is claimed) only the cheap probes
run: the restrictions (lengths, head dimensions, T != S, d_v == d, dtypes), the compute dtype,
causality, the causal alignment and its empty rows, linearity in v, the normalization and the
eps convention of the claimed kernel; the kernel, the scale, the positional structure and the
rest are the claim's, and the battery checks them.

``suggested_claims(report)`` gives the ``AttentionVariant`` claims the checker can merge; the
sentence saying what the variant computes is worded by ``verify.render.probes.describe``.
"""

from __future__ import annotations

import time
from typing import Any

from verify.probes.conventions import known_kernel, probe_denominator
from verify.probes.fits import constant_scale
from verify.probes.identify import identify as _identify
from verify.probes.kernels import CONVENTIONS, FAMILY, MAX_TAYLOR_ORDER, kernel_values
from verify.probes.positional import probe_positional
from verify.probes.positional import suggested as positional_claims
from verify.probes.report import Check, ProbeReport
from verify.probes.restrictions import (
    SCAN_LENGTHS,
    length_at_least,
    probe_cross,
    probe_dtypes,
    probe_head_dims,
    probe_precision,
    probe_value_dim,
    scan_lengths,
)
from verify.probes.runner import (
    BLACK_BOX_EXP,
    PROBE_DTYPES,
    STRUCT_LEN,
    STRUCTURAL_KERNELS,
    Runner,
    ratio_bound,
)
from verify.probes.structure import (
    probe_causal,
    probe_determinism,
    probe_independence,
    probe_injectivity,
    probe_linear_in_v,
    probe_normalization,
    probe_qk_only,
    probe_rank,
)
from verify.spec.kernel import parse as parse_kernel
from verify.spec.results import VariantError

__all__ = [
    "CONVENTIONS",
    "FAMILY",
    "MAX_TAYLOR_ORDER",
    "PROBE_DTYPES",
    "SCAN_LENGTHS",
    "STRUCTURAL_KERNELS",
    "Check",
    "ProbeReport",
    "constant_scale",
    "kernel_values",
    "probe",
    "ratio_bound",
    "suggested_claims",
    "CONVENTION_CLAIMS",
]


def probe(
    variant,
    *,
    dtype: str = "float64",
    device: str = "cpu",
    seed: int = 0,
    identify: bool = True,
) -> ProbeReport:
    """Probe ``variant.forward`` as a black box and report what it computes.

    Args:
        variant: a :class:`verify.spec.variant.AttentionVariant`; ``forward`` and ``layout`` are
            used (tensors (B, H, T, d) are converted by
            ``verify.properties.support.calls.call``), and with ``identify`` False its kernel
            claim (kernel, scale, normalized, structural claims, exp library) for the eps
            convention; no other claim is read.
        dtype: probe dtype name (``float64`` default; ``float32``, ``bfloat16``, ``float16``).
        device: ``cpu`` or ``cuda``.
        seed: seed of the random inputs (the probe is deterministic given it).
        identify: run the kernel identification and the structural probes (True, claims
            ignored), or only the cheap probes of the restrictions and conventions, with the
            variant's kernel claim (False; the report's ``scope`` is ``conventions``; what the
            checker runs when a kernel is claimed).

    Returns:
        :class:`ProbeReport`; a variant that raises, returns NaN or wrong shapes gives a report
        whose fields carry the reasons (never an exception). Its ``description`` is left
        empty: the sentence is ``verify.render.probes.describe(report)``.

    Raises:
        TypeError: ``variant`` is not an AttentionVariant.
        ValueError: unknown ``dtype`` or ``device``.
    """
    from verify.spec.variant import AttentionVariant

    if not isinstance(variant, AttentionVariant):
        raise TypeError(f"variant: expected an AttentionVariant, got {type(variant).__name__}")
    if dtype not in PROBE_DTYPES:
        raise ValueError(f"dtype: expected one of {PROBE_DTYPES}, got {dtype!r}")
    if device not in BLACK_BOX_EXP:
        raise ValueError(f"device: expected one of {tuple(BLACK_BOX_EXP)}, got {device!r}")
    start = time.perf_counter()
    report = ProbeReport(variant=variant.name, dtype=dtype, device=device, seed=seed)
    report.scope = "full" if identify else "conventions"
    run = Runner(variant, dtype, device, seed)
    scan_lengths(run, report)
    T8 = length_at_least(report, STRUCT_LEN)
    if T8 is None:
        report.notes.append(f"no usable length: {report.lengths['rule']}")
        return _finish(report, start)
    probe_precision(run, report, T8)
    mode = probe_causal(run, report, T8)
    if mode is None:
        report.notes.append("neither causal=False nor causal=True gives usable attention")
        return _finish(report, start)
    causal = mode == "c"

    def denominator() -> None:
        kernel, scale, why = known_kernel(variant if not identify else _unclaimed(variant), report)
        if kernel is None:
            report.normalization.setdefault("convention", {"detail": f"not probed: {why}"})
            return
        probe_denominator(run, report, kernel, scale, causal)

    if not identify:
        steps = (
            ("cross", lambda: probe_cross(run, report)),
            ("value_dim", lambda: probe_value_dim(run, report, T8, causal)),
            ("head_dims", lambda: probe_head_dims(run, report, T8, causal)),
            ("linear_in_v", lambda: probe_linear_in_v(run, report, T8, causal)),
            ("normalization", lambda: probe_normalization(run, report, T8, causal)),
            ("denominator", denominator),
            ("dtypes", lambda: probe_dtypes(run, report, T8, causal)),
        )
        return _run_steps(report, steps, start)
    steps = (
        ("cross", lambda: probe_cross(run, report)),
        ("value_dim", lambda: probe_value_dim(run, report, T8, causal)),
        ("head_dims", lambda: probe_head_dims(run, report, T8, causal)),
        ("determinism", lambda: probe_determinism(run, report, T8, causal)),
        ("linear_in_v", lambda: probe_linear_in_v(run, report, T8, causal)),
        ("normalization", lambda: probe_normalization(run, report, T8, causal)),
        ("qk_only", lambda: probe_qk_only(run, report, T8, causal, variant.window)),
        (
            "kernel",
            lambda: _identify(
                run, report, lambda n: length_at_least(report, n), causal, variant.window
            ),
        ),  # fmt: skip
        ("denominator", denominator),
        ("injectivity", lambda: probe_injectivity(run, report, T8, causal)),
        ("rank", lambda: probe_rank(run, report, T8, _modes(report))),
        ("independence", lambda: probe_independence(run, report, T8, causal)),
        ("dtypes", lambda: probe_dtypes(run, report, T8, causal)),
        ("positional", lambda: probe_positional(run, report, T8, _window_mode(report, causal))),
        (
            "windowed kernel",
            lambda: _identify_in_window(run, report, T8, causal, variant, denominator),
        ),
    )
    return _run_steps(report, steps, start)


def _identify_in_window(run, report: ProbeReport, T: int, causal: bool, variant, denominator):
    """Reads the kernel again inside the window the positional probe found exactly, when the
    first reads (every key of the row) named none and no window was claimed: outside a window
    the weights are zero, not the kernel's; the denominator's convention is then probed with
    the kernel found (``denominator``, the probe's step)."""
    found = positional_claims(report.positional).get("window")
    if variant.window is not None or found is None or report.kernel.get("verdict") == "consistent":
        return
    if tuple(found) == (-1, -1):
        return
    first = (dict(report.kernel), report.qk_only)
    probe_qk_only(run, report, T, causal, found)
    _identify(run, report, lambda n: length_at_least(report, n), causal, tuple(found))
    if report.kernel.get("verdict") == "consistent":
        report.notes.append(f"kernel read inside the window {tuple(found)} the probes found")
        report.normalization.pop("convention", None)  # "not probed: kernel not identified"
        denominator()
    else:
        report.kernel, report.qk_only = first


def _run_steps(report: ProbeReport, steps, start: float) -> ProbeReport:
    for name, fn in steps:
        try:
            fn()
        except VariantError as exc:  # a probe that hit a misbehaving call records the reason
            report.notes.append(f"{name}: {exc}")
    return _finish(report, start)


def _unclaimed(variant):
    """``variant`` as the identification sees it: no kernel claim (the probes' own)."""
    from verify.spec.variant import AttentionVariant

    return AttentionVariant(name=variant.name, forward=variant.forward, layout=variant.layout)


def _window_mode(report: ProbeReport, causal: bool) -> bool:
    """The causal flag the window probe uses: non-causal where supported (both sides of a
    window show), else causal."""
    return False if report.causal_support in ("both", "no") else causal


def _modes(report: ProbeReport) -> tuple[bool, ...]:
    return {"both": (False, True), "yes": (True,), "no": (False,)}.get(
        report.causal_support or "", ()
    )


def _finish(report: ProbeReport, start: float) -> ProbeReport:
    report.runtime_s = time.perf_counter() - start
    return report


def suggested_claims(report: ProbeReport) -> dict[str, Any]:
    """Claims for ``AttentionVariant.with_claims`` from what the probes found.

    Keys (only those the probes settled): ``kernel`` ("softmax", "taylor:N", "linear:MAP" or
    "unknown"), ``causal_alignment``, ``normalized``, ``eps`` and ``eps_mode`` (the convention
    held to its D10 bound with the kernel known; without it, eps/kappa(0) of ``sum+eps``),
    ``scale`` ("default" when the identified convention is the default for the kernel type --
    1/sqrt(d) for exp-type, 1 for element-wise maps -- or a constant fitted float),
    ``length_multiple`` and the restrictions ``dv_equals_d``, ``self_attention_only``,
    ``head_dim_multiple``, ``compute_dtype``, ``empty_rows``, and the structural claims the
    positional probes settle exactly (``window``, ``kv_heads``, ``softcap``, ALiBi's reference
    ``alibi_slopes``). Never
    ``causal`` or ``dtypes``: a call that fails is the variant's failure, not a claim.

    A report of scope ``conventions`` (a claimed kernel) gives only :data:`CONVENTION_CLAIMS`:
    the restrictions, the compute dtype, the alignment, the empty rows and a verified eps
    convention; the kernel, its normalization and scale are the claim's.
    """
    if getattr(report, "scope", "full") == "conventions":
        return _convention_claims(report)
    claims: dict[str, Any] = {}
    kern = report.kernel
    verdict = kern.get("verdict")
    known = verdict == "consistent"
    claims["kernel"] = kern.get("kernel", "unknown") if known else "unknown"
    # which causal values the variant supports is never taken from the probes: a causal call
    # that raises or returns NaN is a failure (accepts-inputs), not a claim of causal="no"
    if report.cross.get("alignment"):
        claims["causal_alignment"] = report.cross["alignment"]
    norm = report.normalization.get("kind")
    if norm == "sum+eps" and _eps_refuted(report, claims["kernel"]):
        norm = "other"  # no single eps explains the rows: no D/(D + eps), no normalization
    if norm in ("sum", "sum+eps", "sum+floor"):
        claims["normalized"] = True
    elif norm == "none":
        claims["normalized"] = False
    if norm == "sum+eps" and isinstance(report.normalization.get("eps"), float):
        claims["eps"] = report.normalization["eps"]
    claims.update(_eps_convention(report))
    scale = kern.get("scale")
    name = claims["kernel"]
    exp_type = parse_kernel(name).exp_type
    if known:
        default = "1/sqrt(d)" if exp_type else "1"
        if scale in ("any", default):
            claims["scale"] = "default"
        elif scale == "fitted" and constant_scale(kern) is not None:
            claims["scale"] = constant_scale(kern)
        elif scale == "1":
            claims["scale"] = 1.0
    if report.lengths.get("multiple"):
        claims["length_multiple"] = int(report.lengths["multiple"])
    if report.lengths.get("min_length"):
        claims["min_length"] = int(report.lengths["min_length"])
    # the closed list of restrictions (found, not failed); the dtypes a variant raises on are
    # not one: asked for, they fail accepts-inputs
    for name in RESTRICTIONS:
        if report.restrictions.get(name) is not None:
            claims[name] = report.restrictions[name]
    claims.update(positional_claims(report.positional))
    if claims["kernel"] == "unknown" and "softcap" in claims and norm == "sum":
        # the cap probe's exact fit: log(w_1 / w_0) = C tanh(x / C), i.e. kappa(x) =
        # exp(C tanh(x / C)) on normalized rows: softmax under a softcap (D16), which the
        # kernel fit on raw scores cannot name
        claims["kernel"] = "softmax"
    return claims


#: the restrictions and conventions ``ProbeReport.restrictions`` may hold, as claims
RESTRICTIONS = (
    "dv_equals_d",
    "self_attention_only",
    "head_dim_multiple",
    "compute_dtype",
    "empty_rows",
)
#: what a report of scope ``conventions`` may suggest (a claimed kernel keeps the rest)
CONVENTION_CLAIMS = (
    "causal_alignment",
    "length_multiple",
    "min_length",
    "head_dim_multiple",
    "dv_equals_d",
    "self_attention_only",
    "compute_dtype",
    "empty_rows",
    "eps",
    "eps_mode",
)


def _eps_refuted(report: ProbeReport, kernel: str) -> bool:
    """The rows needed different values of eps/kappa(q_t, 0) (``eps_consistent`` False,
    ``verify.probes.structure``) and nothing refines that guess: the kernel is unknown, or
    exp-type (kappa(q, 0) = 1 for every row, so the rows must agree); a convention the
    conventions probe verified (``eps_mode``) stands."""
    n = report.normalization
    if n.get("eps_consistent") is not False or n.get("eps_mode"):
        return False
    return kernel == "unknown" or parse_kernel(kernel).exp_type


def _eps_convention(report: ProbeReport) -> dict[str, Any]:
    """``eps`` and ``eps_mode`` of a convention held to its D10 bound (``verify.probes.
    conventions``); {} when none was verified."""
    norm = report.normalization
    if norm.get("eps_mode") == "add" and norm.get("kind") == "sum":
        return {"eps": 0.0, "eps_mode": "add"}
    if norm.get("eps_mode") in ("add", "floor") and isinstance(norm.get("eps"), float):
        return {"eps": norm["eps"], "eps_mode": norm["eps_mode"]}
    return {}


def _convention_claims(report: ProbeReport) -> dict[str, Any]:
    claims: dict[str, Any] = {}
    if report.cross.get("alignment"):
        claims["causal_alignment"] = report.cross["alignment"]
    if report.lengths.get("multiple"):
        claims["length_multiple"] = int(report.lengths["multiple"])
    if report.lengths.get("min_length"):
        claims["min_length"] = int(report.lengths["min_length"])
    for name in RESTRICTIONS:
        if report.restrictions.get(name) is not None:
            claims[name] = report.restrictions[name]
    claims.update(_eps_convention(report))
    return claims
