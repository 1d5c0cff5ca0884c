"""Black-box probes: what an attention callable computes, read from its forward alone (issue 5).

``probe(variant)`` calls ``variant.forward`` (through ``verify.properties.support.calls.call``, so an
exception, NaN/inf, a wrong shape or dtype is recorded as a reason, never raised) on inputs built
to expose one property at a time, and returns a :class:`ProbeReport`:

* input restrictions: which sequence lengths T in ``SCAN_LENGTHS`` work (e.g. "T must be a
  multiple of 16"), whether T != S is accepted, the causal alignment for T < S (FAULTS 7:
  T = 1, S = 2 is top-left when query 0 sees key 0 only, bottom-right when it sees both), dtypes;
* causality: does ``causal=True`` change the output, does ``causal=False`` see the future, does
  perturbing future tokens change past outputs, prefix invariance f(x)[:t] == f(x[:t]) (FAULTS 9);
* the attention matrix, read with V = identity (o_ts = w_ts for any kernel attention), checked to
  be linear in V; normalization (v = 1 gives 1; key duplication tells a numerator-only variant,
  whose row sums double, from one with an offset eps in its denominator, D/(D + eps));
* whether the weights depend on q.k only: q' = q H / d and k' = k H with H a Sylvester Hadamard
  matrix (H H^T = d I) have exactly the same q.k; the inputs lie on a dyadic grid, so q', k' are
  exact in floating point and any difference is a property of the variant, not of rounding;
* kernel identification (DESIGN.md, "Variant checking"): the measured weights are compared with
  each member of a finite family (exp, kappa_N for N <= ``MAX_TAYLOR_ORDER``, kernel linear
  attention with the identity, elu+1 and relu maps) at each scale convention (1/sqrt(d), 1/d,
  d^-1/4, 1), at d = 4 and again at d = 2 and 8 (the conventions differ with d). Scores reach
  |c q.k| >= 4 for every convention, where kappa_8 and exp differ by far more than rounding.
  Normalized weights are compared as ratios w_s/w_ref = kappa(x_s)/kappa(x_ref), which no row
  normalization (sum, sum + eps, count) changes; numerator-only weights directly. The tolerance
  is the D10 bound of the candidate (``verify.errors.attention_error_bound``, numerator only,
  the largest cited CPU exp error since the library is unknown) carried through the ratio
  (:func:`ratio_bound`). Else, positive weights that are not a function of q.k and lie closer to
  exp than to any element-wise map are reported FAVOR-like (random features: a noisy exp), and
  otherwise "none of the known kernels" with a least-squares polynomial fit of kappa(x)/kappa(0);
* positivity, rank (numpy's rule: singular values above sigma_max max(T, S) eps), injectivity
  (D9: q and 2q give the same weights for a positively homogeneous map; shift invariance of exp
  along K u = 1; distinct rows), batch and head independence, determinism, dtype behaviour.

Structural comparisons (two evaluations with the same exact value) use the sum of the two D10
bounds; as no bound exists for an unknown computation, each is the largest bound of the known
positive kernels (``STRUCTURAL_KERNELS``, scale 1, normalized and numerator-only) on the same
inputs -- a stated proxy, far below the effects probed (differences of order 1e-3 to 1).

``describe(report)`` says in one line what the variant computes; ``suggested_claims(report)``
gives the ``AttentionVariant`` claims the checker can merge.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from verify.spec.kernel import parse as parse_kernel
from verify.spec.kernel import taylor_order
from verify.spec.results import VariantError
from verify.spec.visibility import visible

#: score scale conventions c(d) told apart by varying d
CONVENTIONS: dict[str, Callable[[int], float]] = {
    "1/sqrt(d)": lambda d: d**-0.5,
    "1/d": lambda d: 1.0 / d,
    "d^-1/4": lambda d: d**-0.25,
    "1": lambda d: 1.0,
}
MAX_TAYLOR_ORDER = 8
#: the kernel family of DESIGN.md: exp, kappa_0..kappa_8, identity (kappa(x) = x), elu+1, relu
FAMILY = (
    ("softmax",)
    + tuple(f"taylor:{n}" for n in range(MAX_TAYLOR_ORDER + 1))
    + ("linear:identity", "linear:elu1", "linear:relu")
)
ELEMENTWISE = ("linear:elu1", "linear:relu")
#: candidates re-tested at float32 accuracy when none fits the output precision's bound
FALLBACK_CANDIDATES = 5
#: lengths tried by the restriction scan (fla's chunked forms need multiples of 256)
SCAN_LENGTHS = (1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 32, 64, 128, 256, 257)
IDENT_DIMS = (4, 2, 8)
N_KEYS = 12  # keys read by kernel identification (key 0 is the zero vector: kappa(q.0) = kappa(0))
STRUCT_LEN = 8
DIM = 4  # a power of two: the Hadamard rotation of the q.k-only test
GRID = 32  # inputs are multiples of 1/GRID with few bits: exact in float64/32, bfloat16, float16
#: exp and kappa_8 dominate the other positive kernels' bounds (kappa_N(|x| + e) and the
#: roundings grow with N; elu+1 features carry O(u |x|) errors)
STRUCTURAL_KERNELS = ("softmax", f"taylor:{8}")
#: the largest cited exp error per device (the library of a black box is unknown)
BLACK_BOX_EXP = {"cpu": "cpu-torch-exp_u20", "cuda": "cuda-expf"}
PROBE_DTYPES = ("float64", "float32", "bfloat16", "float16")


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
        lengths: ``tested`` {T: "ok" | reason} (T == S), ``mode`` (the causal flag used),
            ``multiple`` (T must be a multiple of it, or None), ``smallest_failing``, ``rule``.
        calls: {"causal=False" | "causal=True": "ok" | reason} at the working length.
        causal_support: ``yes`` | ``no`` | ``both`` (claims vocabulary) or None (unusable).
        causal: Checks ``noncausal_sees_future``, ``causal_masks_future``,
            ``future_perturbation_changes_past``, ``prefix_invariant``, ``flag_ignored``.
        cross: ``noncausal`` {"T,S": "ok" | reason}, ``causal`` {"T,S": pattern | reason},
            ``alignment`` (top-left | bottom-right | None) and a ``detail``.
        deterministic, linear_in_v, qk_only: Checks.
        normalization: ``kind`` (sum | sum+eps | none | count | other), ``row_sum`` Check
            (v = 1 gives 1), ``duplication`` (last-row sums r1, r2 with every key twice),
            ``eps`` / ``eps_interval`` (eps/kappa(0) for sum+eps).
        kernel: ``verdict`` (consistent | favor-like | none | not run), ``kernel`` (a claims
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
        output_precision: the coarsest dtype whose numbers contain every output of a call
            with full-precision values (the precision the bounds use).
        notes: probes that could not run, with the reason.
        runtime_s: wall time of the probe.
    """

    variant: str
    dtype: str
    device: str
    seed: int
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
    output_precision: str = ""
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


# -- the bounds ------------------------------------------------------------------------------
def ratio_bound(
    W: np.ndarray,
    b: np.ndarray,
    ref: int,
    u: float,
    eta: float = 0.0,
    measured_ref: float | None = None,
) -> np.ndarray:
    """Bound on |w_hat_s/w_hat_ref - W_s/W_ref| for one row of a normalized variant (derived).

    Hypotheses: the variant computes a_s = N_hat_s / D_hat (1 + delta_s) with one computed
    row divisor D_hat (sum, sum + eps or count normalization alike) and |N_hat_s - W_s| <= b_s
    (the numerator-only D10 bound, which includes the float64 reference's own error). Then
    N_hat_s/N_hat_ref - R_s = [(N_hat_s - W_s) - R_s (N_hat_ref - W_ref)] / N_hat_ref with
    |N_hat_ref| >= |W_ref| - b_ref, and the remaining factors -- the variant's two divisions,
    the float64 division forming the measured ratio and the one forming R_s -- are
    (1 + theta), |theta| <= gamma_4 (Higham Lemma 3.1):

        |a_s/a_ref - R_s| <= beta_s = (b_s + |R_s| b_ref)/(|W_ref| - b_ref) (1 + gamma_4)
                                      + gamma_4 |R_s|.

    An output in the subnormal range adds an absolute error |eta_s| <= eta (Higham eq. 2.8;
    ``underflow_abs_error`` of the output dtype): w_hat_s = a_s + eta_s, and
    w_hat_s/w_hat_ref - a_s/a_ref = (eta_s - (a_s/a_ref) eta_ref)/w_hat_ref, at most
    eta (1 + |R_s| + beta_s)/|w_hat_ref| with the measured reference weight.

    Args:
        W: (S,) exact candidate kernel values of the row; b: (S,) their numerator bounds;
        ref: the reference key; u: unit roundoff of the variant's dtype; eta: the output's
        subnormal absolute error; measured_ref: w_hat_ref (needed when eta > 0).

    Returns:
        (S,) bounds; all ``inf`` when |W_ref| <= b_ref (the reference carries no information)
        or the measured reference weight is 0.
    """
    from derivations import rounding as d10

    margin = abs(W[ref]) - b[ref]
    if not margin > 0:
        return np.full(W.shape, math.inf)
    g = d10.gamma(4, u)
    R = np.abs(W / W[ref])
    beta = (b + R * b[ref]) / margin * (1.0 + g) + g * R
    if eta > 0:
        if not measured_ref:
            return np.full(W.shape, math.inf)
        beta = beta + eta * (1.0 + R + beta) / abs(measured_ref)
    return beta


def _structural_bound(
    q, k, v, *, mask, dtype: str, device: str, denominators=("sum", "none")
) -> np.ndarray:
    """Largest D10 bound of ``STRUCTURAL_KERNELS`` (scale 1; the given denominator modes) on
    these inputs: the stated proxy for one evaluation of an unidentified kernel."""
    from verify.exact import errors

    out = None
    for kern in STRUCTURAL_KERNELS:
        for den in denominators:
            eb = errors.attention_error_bound(
                kern,
                q,
                k,
                v,
                dtype=dtype,
                attn_mask=mask,
                scale=1.0,
                denominator=den,
                device=device,
                exp_library=BLACK_BOX_EXP[device],
            )
            out = eb.bound if out is None else np.maximum(out, eb.bound)
    return out


# -- inputs ----------------------------------------------------------------------------------
def _grid(x):
    return (x * GRID).round() / GRID


def _hadamard(d: int) -> np.ndarray:
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return h


def _np(t) -> np.ndarray:
    return t.detach().to("cpu").double().numpy()


class _Runner:
    """Calls the variant on canonical float64-built tensors cast to the probe dtype."""

    def __init__(self, variant, dtype: str, device: str, seed: int):
        import torch

        self.variant = variant
        self.dtype = dtype
        #: the precision the outputs are computed in (``_probe_precision``): bounds use it
        self.bound_dtype = dtype
        self.tdtype = getattr(torch, dtype)
        self.device = device
        self.gen = torch.Generator().manual_seed(seed)
        self.blocks = False  # True once V = identity must be read in blocks of width d
        #: probes pass causal = "the rows are masked"; a variant that masks with causal=False
        #: (flag ignored) and rejects causal=True is called with the flag that works
        self.flag_map: dict[bool, bool] = {}
        #: denominator modes of the structural bound: both until the normalization is known
        self.dens: tuple[str, ...] = ("sum", "none")

    def t(self, x):
        import torch

        if isinstance(x, np.ndarray):
            x = torch.from_numpy(x)
        return x.to(device=self.device, dtype=self.tdtype)

    def rand(self, *shape, lo=None, hi=None, std=1.0):
        import torch

        if lo is not None:
            x = lo + (hi - lo) * torch.rand(*shape, generator=self.gen, dtype=torch.float64)
        else:
            x = std * torch.randn(*shape, generator=self.gen, dtype=torch.float64)
        return self.exact(_grid(x))

    def exact(self, x):
        """x rounded to the probe dtype, held in float64 (what the variant receives, exactly)."""
        return x.to(self.tdtype).double()

    def out(self, q, k, v, causal: bool, allow_nonfinite: bool = False) -> np.ndarray:
        from verify.properties.support.calls import call

        flag = self.flag_map.get(causal, causal)
        o = call(
            self.variant,
            self.t(q),
            self.t(k),
            self.t(v),
            causal=flag,
            allow_nonfinite=allow_nonfinite,
        )
        return _np(o)

    def weights(self, q, k, causal: bool, ncols: int, allow_nonfinite: bool = False):
        """The attention matrix's first ``ncols`` columns, (B, H, T, ncols) float64 numpy, read
        with V = I (in blocks of width d when the variant needs d_v = d)."""
        nf = allow_nonfinite
        import torch

        B, H, S, d = k.shape
        eye = torch.zeros(S, ncols, dtype=torch.float64)
        eye[:ncols, :ncols] = torch.eye(ncols, dtype=torch.float64)
        if not self.blocks:
            try:
                return self.out(q, k, eye.expand(B, H, S, ncols), causal, nf)
            except VariantError:
                self.blocks = True
                try:
                    return self.weights(q, k, causal, ncols, nf)
                except VariantError:
                    self.blocks = False
                    raise
        cols = []
        for j in range(0, ncols, d):
            blk = torch.zeros(S, d, dtype=torch.float64)
            w = min(d, ncols - j)
            blk[:, :w] = eye[:, j : j + w]
            cols.append(self.out(q, k, blk.expand(B, H, S, d), causal, nf)[..., :w])
        return np.concatenate(cols, axis=-1)

    def bound(self, q, k, v, causal: bool, stop: int, start: int = 0) -> np.ndarray:
        """Structural bound (B, H, stop - start, d_v) for the query rows [start, stop)."""
        import torch

        mask = None
        if causal:  # row t sees keys <= t: only keys < stop matter, as an explicit mask
            q, k, v = q[..., start:stop, :], k[..., :stop, :], v[..., :stop, :]
            t = torch.arange(start, stop)[:, None]
            mask = torch.arange(stop)[None, :] <= t
        else:
            q = q[..., start:stop, :]
        return _structural_bound(
            q, k, v, mask=mask, dtype=self.bound_dtype, device=self.device, denominators=self.dens
        )


def _same(a: np.ndarray, b: np.ndarray, bound: np.ndarray, what: str) -> Check:
    """|a - b| <= bound elementwise (bound = the two evaluations' summed bounds)."""
    diff = np.abs(a - b)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, diff / bound, np.where(diff == 0, 0.0, np.inf))
    i = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    ok = bool(ratio[i] <= 1.0)
    return Check(ok, float(diff[i]), float(bound[i]), f"{what}: max |difference| at {i[-2:]}")


# -- lengths ---------------------------------------------------------------------------------
def _scan_lengths(run: _Runner, report: ProbeReport) -> None:
    lengths = list(SCAN_LENGTHS)
    for mode in (False, True):
        tested: dict[int, str] = {}
        for T in lengths:  # positive q, k: no kernel of the family has a vanishing denominator
            q, k = (run.rand(1, 1, T, DIM, lo=0.125, hi=1.0) for _ in range(2))
            v = run.rand(1, 1, T, DIM)
            try:
                run.out(q, k, v, mode)
                tested[T] = "ok"
            except VariantError as exc:
                tested[T] = str(exc)
        if any(r == "ok" for r in tested.values()):
            break
    passing = sorted(T for T, r in tested.items() if r == "ok")
    failing = sorted(T for T, r in tested.items() if r != "ok")
    multiple = None
    if passing:
        m = 0
        for T in passing:
            m = math.gcd(m, T)
        if m >= 64 and 2 * passing[-1] not in tested:  # confirm a large multiple once more
            T2 = 2 * passing[-1]
            q, k = (run.rand(1, 1, T2, DIM, lo=0.125, hi=1.0) for _ in range(2))
            v = run.rand(1, 1, T2, DIM)
            try:
                run.out(q, k, v, mode)
                tested[T2] = "ok"
                passing.append(T2)
            except VariantError as exc:
                tested[T2] = str(exc)
                failing.append(T2)
        if all((T % m == 0) == (T in passing) for T in tested):
            multiple = m
            rule = "any T" if m == 1 else f"T must be a multiple of {m}"
        elif passing == sorted(tested)[: len(passing)]:
            rule = f"T <= {passing[-1]} (fails from T = {failing[0]})"
        else:
            rule = f"irregular: works for T in {passing}"
    else:
        first = min(tested)
        rule = f"no tested length works (T = {first}: {tested[first]})"
    report.lengths = {
        "tested": {str(T): tested[T] for T in sorted(tested)},
        "mode": f"causal={mode}",
        "multiple": multiple,
        "smallest_failing": failing[0] if failing else None,
        "rule": rule,
        "passing": passing,
    }


def _length_at_least(report: ProbeReport, n: int) -> int | None:
    m = report.lengths.get("multiple")
    if m:
        return -(-n // m) * m
    bigger = [T for T in report.lengths.get("passing", []) if T >= n]
    return bigger[0] if bigger else None


# -- precision -------------------------------------------------------------------------------
#: coarsest first: the first whose values contain every output is the computing precision
_COARSER = {
    "float64": ("bfloat16", "float16", "float32"),
    "float32": ("bfloat16", "float16"),
    "bfloat16": (),
    "float16": (),
}


def _probe_precision(run: _Runner, report: ProbeReport, T: int) -> None:
    """The precision the outputs are computed in: full-precision random values (q, k on the
    grid) mix into outputs that are generically representable only in the precision they
    were computed in; when every output is a number of a coarser dtype (an event of
    probability ~2^-29 per element for a genuine float64 result against float32), the
    structural and kernel bounds use that dtype (e.g. a variant computing in float32 and
    returning float64)."""
    import torch

    q, k = (run.rand(1, 1, T, DIM, lo=0.125, hi=1.0) for _ in range(2))
    v = run.exact(torch.randn(1, 1, T, DIM, generator=run.gen, dtype=torch.float64))
    o = None
    for flag in (False, True):
        try:
            o = run.out(q, k, v, flag)
            break
        except VariantError:
            continue
    report.output_precision = run.dtype
    if o is None:
        return
    for name in _COARSER[run.dtype]:
        coarse = torch.from_numpy(o).to(getattr(torch, name)).double().numpy()
        if np.array_equal(coarse, o):
            report.output_precision = name
            run.bound_dtype = name
            report.notes.append(f"every output is a {name} number: bounds use {name}")
            return


# -- causality -------------------------------------------------------------------------------
def _probe_causal(run: _Runner, report: ProbeReport, T: int) -> str | None:
    """Fill ``calls``, ``causal``, ``causal_support``; return the read mode ("nc"/"c")."""
    q, k = run.rand(1, 1, T, DIM, lo=0.125, hi=1.0), run.rand(1, 1, T, DIM, lo=0.125, hi=1.0)
    v = run.rand(1, 1, T, DIM)
    n = min(T, STRUCT_LEN)
    eye = _eye(T, n)
    mats, outs = {}, {}
    for causal in (False, True):
        key = f"causal={causal}"
        try:
            outs[causal] = run.out(q, k, v, causal)[..., :n, :]
            mats[causal] = run.weights(q, k, causal, n)[0, 0, :n]
            report.calls[key] = "ok"
        except VariantError as exc:
            report.calls[key] = str(exc)
    if not mats:
        return None
    upper = ~visible(n, n, causal=True)  # the future: s > t
    c = report.causal
    for causal, name in ((False, "noncausal_sees_future"), (True, "causal_masks_future")):
        if causal not in mats:
            continue
        bnd = run.bound(q, k, eye, causal, n)[0, 0]
        A = np.abs(mats[causal])
        sees = bool((A - bnd)[upper].max() > 0) if upper.any() else False
        c[name] = Check(
            sees if not causal else not sees,
            float(A[upper].max()) if upper.any() else 0.0,
            float(bnd[upper].max()) if upper.any() else 0.0,
            f"largest |w_ts|, s > t, with causal={causal}",
        )
    if True in mats:
        _future_and_prefix(run, report, q, k, v, outs[True], n)
    if len(outs) == 2:
        b = run.bound(q, k, v, False, n) + run.bound(q, k, v, True, n)
        c["flag_ignored"] = _same(outs[False], outs[True], b, "causal=False vs causal=True")
    sees = c.get("noncausal_sees_future")
    masks = c.get("causal_masks_future")
    nc_ok = sees is not None and sees.result
    c_ok = masks is not None and masks.result
    always_causal = sees is not None and not sees.result
    if nc_ok and c_ok:
        report.causal_support = "both"
    elif c_ok or always_causal:
        report.causal_support = "yes"
        if not c_ok:  # masks with causal=False and causal=True does not work: call with False
            run.flag_map[True] = False
    elif nc_ok:
        report.causal_support = "no"
    else:
        report.causal_support = None
    if report.causal_support in ("both", "no"):
        return "nc"
    return "c" if report.causal_support == "yes" else None


def _future_and_prefix(run: _Runner, report: ProbeReport, q, k, v, o, n: int) -> None:
    """FAULTS 9: perturbing tokens t0.. leaves outputs before t0 unchanged (causal=True);
    prefix invariance f(x)[:tp] == f(x[:tp]) on the last rows before tp."""
    import torch

    c = report.causal
    T = q.shape[-2]
    t0 = max(1, n // 2)
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    q2[..., t0:, :] = run.rand(1, 1, T - t0, DIM, lo=0.125, hi=1.0)
    k2[..., t0:, :] = run.rand(1, 1, T - t0, DIM, lo=0.125, hi=1.0)
    v2[..., t0:, :] = run.rand(1, 1, T - t0, DIM)
    try:
        o2 = run.out(q2, k2, v2, True)[..., :t0, :]
        b = run.bound(q, k, v, True, t0) + run.bound(q2, k2, v2, True, t0)
        chk = _same(o[..., :t0, :], o2, b, "outputs before t0")
        c["future_perturbation_changes_past"] = Check(
            not chk.result, chk.observed, chk.bound, f"tokens {t0}.. perturbed; {chk.detail}"
        )
    except VariantError as exc:
        c["future_perturbation_changes_past"] = Check(None, detail=str(exc))
    m = report.lengths.get("multiple") or 1
    tp = (T // 2) // m * m
    if tp < 1:  # no allowed length below T: a sequence twice as long, prefix T
        tp = T
        q = torch.cat([q, run.rand(1, 1, T, DIM, lo=0.125, hi=1.0)], -2)
        k = torch.cat([k, run.rand(1, 1, T, DIM, lo=0.125, hi=1.0)], -2)
        v = torch.cat([v, run.rand(1, 1, T, DIM)], -2)
    lo = max(0, tp - n)
    try:
        full = run.out(q, k, v, True)[..., lo:tp, :]
        pre = run.out(q[..., :tp, :], k[..., :tp, :], v[..., :tp, :], True)[..., lo:tp, :]
        b = run.bound(q, k, v, True, tp, lo)
        c["prefix_invariant"] = _same(full, pre, b + b, f"f(x)[{lo}:{tp}] vs f(x[:{tp}])")
    except VariantError as exc:
        c["prefix_invariant"] = Check(None, detail=str(exc))


# -- cross lengths and alignment -------------------------------------------------------------
def _probe_cross(run: _Runner, report: ProbeReport) -> None:
    m = report.lengths.get("multiple") or 1
    cross: dict[str, Any] = {"noncausal": {}, "causal": {}, "alignment": None, "detail": ""}
    if report.causal_support in ("both", "no"):
        for T, S in ((m, 2 * m), (2 * m, m)):
            q, k, v = run.rand(1, 1, T, DIM), run.rand(1, 1, S, DIM), run.rand(1, 1, S, DIM)
            try:
                run.out(q, k, v, False)
                cross["noncausal"][f"{T},{S}"] = "ok"
            except VariantError as exc:
                cross["noncausal"][f"{T},{S}"] = str(exc)
    if report.causal_support in ("both", "yes"):
        patterns = []
        for T, S in ((m, 2 * m), (2 * m, 4 * m)):
            q = run.rand(1, 1, T, DIM, lo=0.125, hi=1.0)
            k = run.rand(1, 1, S, DIM, lo=0.125, hi=1.0)
            try:
                A = run.weights(q, k, True, S)[0, 0]
            except VariantError as exc:
                cross["causal"][f"{T},{S}"] = str(exc)
                patterns.append(None)
                continue
            # a masked weight is exactly zero (DESIGN.md API contract); visible ones here are
            # positive for every positive kernel (positive inputs)
            vis = A != 0
            t_idx, s_idx = np.indices((T, S))
            names = [
                name
                for name, pat in (
                    ("top-left", s_idx <= t_idx),
                    ("bottom-right", s_idx <= t_idx + S - T),
                    ("no mask", np.ones((T, S), dtype=bool)),
                )
                if np.array_equal(vis, pat)
            ]
            pat = " = ".join(names) if names else "other pattern"
            cross["causal"][f"{T},{S}"] = pat
            patterns.append(names)
        ok = [p for p in patterns if p is not None]
        if len(ok) == len(patterns) and ok:
            common = set(ok[0]).intersection(*map(set, ok[1:])) if ok else set()
            common.discard("no mask")
            if len(common) == 1:
                cross["alignment"] = common.pop()
        raised = [p for p, r in cross["causal"].items() if r.startswith("forward")]
        if len(raised) == len(patterns):
            cross["detail"] = "causal with T != S is rejected (raises)"
        elif cross["alignment"] is None:
            cross["detail"] = (
                "causal with T != S: no consistent top-left/bottom-right alignment"
                + (f" (raises for T,S = {', '.join(raised)})" if raised else "")
            )
    report.cross = cross


# -- normalization and linearity -------------------------------------------------------------
def _pos_inputs(run: _Runner, T: int, d: int = DIM):
    q = run.rand(1, 1, T, d, lo=0.125, hi=1.0)
    k = run.rand(1, 1, T, d, lo=0.125, hi=1.0)
    k[..., 0, :] = 0.0  # key 0: kappa(q . 0) = kappa(0)
    return q, k


def _probe_normalization(run: _Runner, report: ProbeReport, T: int, causal: bool) -> None:
    """v = 1 gives 1 (sum); with every key twice a numerator-only variant's row sum doubles
    (none), a count-normalized one's stays, and D/(D + eps) turns into 2D/(2D + eps)."""
    import torch

    q, k = _pos_inputs(run, T)
    n = min(T, STRUCT_LEN)
    h = n // 2
    norm: dict[str, Any] = {"kind": None}
    report.normalization = norm
    if report.linear_in_v.result is False:
        norm.update(kind="other", detail="the output is not linear in v (e.g. a norm, D7)")
        return
    try:
        if causal:  # tokens h..2h-1 repeat 0..h-1: row 2h-1 sees row h-1's keys twice
            q[..., h : 2 * h, :], k[..., h : 2 * h, :] = q[..., :h, :], k[..., :h, :]
            ones = torch.ones(1, 1, T, DIM, dtype=torch.float64)
            r = run.out(q, k, ones, causal)[0, 0, :n, 0]
            b = run.bound(q, k, ones, causal, n)[0, 0, :, 0]
            r1, r2, b1, b2 = r[h - 1], r[2 * h - 1], b[h - 1], b[2 * h - 1]
        else:  # every query sees every key twice
            ones = torch.ones(1, 1, T, DIM, dtype=torch.float64)
            r = run.out(q, k, ones, causal)[0, 0, :n, 0]
            b = run.bound(q, k, ones, causal, n)[0, 0, :, 0]
            q2, k2 = torch.cat([q, q], -2), torch.cat([k, k], -2)
            ones2 = torch.ones(1, 1, 2 * T, DIM, dtype=torch.float64)
            r2 = run.out(q2, k2, ones2, causal)[0, 0, 0, 0]
            b2 = run.bound(q2, k2, ones2, causal, 1)[0, 0, 0, 0]
            r1, b1 = r[0], b[0]
        A = run.weights(q, k, causal, n)[0, 0, :n]
    except VariantError as exc:
        norm["detail"] = str(exc)
        return
    r1, r2, b1, b2 = float(r1), float(r2), float(b1), float(b2)
    dev = np.abs(r - 1.0)
    i = int(np.argmax(dev / b))
    norm["row_sum"] = Check(
        bool(np.all(dev <= b)), float(dev[i]), float(b[i]), f"|o - 1| with v = 1 (row {i})"
    )
    norm["duplication"] = {"r1": r1, "r2": r2, "bound_r1": b1, "bound_r2": b2}
    if norm["row_sum"].result:
        norm["kind"] = "sum"
        run.dens = ("sum",)
        return
    if abs(r2 - 2 * r1) <= b2 + 2 * b1:
        norm["kind"] = "none"
        run.dens = ("none",)
        return
    # D/(D + eps): 1/r1 - 1 = eps/D and 1/r2 - 1 = eps/(2D), each known to within
    # |d(1/r)| <= b/(r (r - b))
    if r1 > b1 and r2 > b2:
        a, bb = 1 / r1 - 1, 1 / r2 - 1
        da, db = b1 / (r1 * (r1 - b1)), b2 / (r2 * (r2 - b2))
        if a > da and abs(a - 2 * bb) <= da + 2 * db:
            norm["kind"] = "sum+eps"
            run.dens = ("sum",)
            _estimate_eps(run, norm, q, k, causal, r, b, A, n)
            return
    if abs(r2 - r1) <= b2 + b1:
        norm["kind"] = "count"
        return
    norm["kind"] = "other"
    norm["detail"] = "rows neither sum to 1, nor double with duplicated keys, nor D/(D+eps)"


def _estimate_eps(run: _Runner, norm: dict, q, k, causal: bool, r, b, A, n: int) -> None:
    """eps/kappa(0) = (1 - r_t)/w_t0 per row (key 0 is the zero vector, w_t0 =
    kappa(0)/(D_t + eps)), with |d eps| <= (b_r + eps b_w)/(w_t0 - b_w); the intervals of all
    rows are intersected and the shortest decimal inside reported."""
    T = q.shape[-2]
    bw = run.bound(q, k, _eye(T, n), causal, n)[0, 0, :, 0]
    w0 = A[:, 0]
    good = w0 > bw
    if not good.any():
        norm["detail"] = "kappa(0) = 0: eps not estimable from the zero key"
        return
    e = (1 - r[good]) / w0[good]
    de = (b[good] + e * bw[good]) / (w0[good] - bw[good])
    lo, hi = float(np.max(e - de)), float(np.min(e + de))
    norm["eps_interval"] = [lo, hi]
    norm["eps"] = _shortest_in(lo, hi) if lo <= hi else float(np.median(e))
    norm["detail"] = "eps relative to kappa(0) (eps itself when kappa(0) = 1)"


def _eye(S: int, n: int):
    import torch

    e = torch.zeros(1, 1, S, n, dtype=torch.float64)
    e[0, 0, :n] = torch.eye(n, dtype=torch.float64)
    return e


def _shortest_in(lo: float, hi: float) -> float:
    """The number with the fewest significant decimal digits in [lo, hi] (lo <= hi)."""
    mid = 0.5 * (lo + hi)
    for digits in range(1, 18):
        x = float(f"{mid:.{digits}g}")
        if lo <= x <= hi:
            return x
    return mid


def _probe_linear_in_v(run: _Runner, report: ProbeReport, T: int, causal: bool) -> None:
    q, k = _pos_inputs(run, T)
    n = min(T, STRUCT_LEN)
    v = run.rand(1, 1, T, DIM)
    v[..., n:, :] = 0.0
    try:
        o = run.out(q, k, v, causal)[0, 0, :n]
        A = run.weights(q, k, causal, n)[0, 0, :n]
    except VariantError as exc:
        report.linear_in_v = Check(None, detail=str(exc))
        return
    from derivations import rounding as d10

    vn = v[0, 0, :n].numpy()
    bo = run.bound(q, k, v, causal, n)[0, 0]
    bA = run.bound(q, k, _eye(T, n), causal, n)[0, 0]
    av = np.abs(A) @ np.abs(vn)
    b = bo + bA @ np.abs(vn) + d10.gamma(n, d10.unit_roundoff("float64")) * av
    report.linear_in_v = _same(o, A @ vn, b, "o(v) vs W v")


# -- q.k only, injectivity, rank, independence -----------------------------------------------
def _probe_qk_only(run: _Runner, report: ProbeReport, T: int, causal: bool) -> None:
    import torch

    n = min(T, STRUCT_LEN)
    q, k = _pos_inputs(run, T)
    H = torch.from_numpy(_hadamard(DIM))
    q2, k2 = q @ H / DIM, k @ H  # exact: dyadic entries, q2 . k2 = q H H^T k^T / d = q . k
    try:
        A = run.weights(q, k, causal, n)[0, 0, :n]
        A2 = run.weights(q2, k2, causal, n)[0, 0, :n]
    except VariantError as exc:
        report.qk_only = Check(None, detail=str(exc))
        return
    e = _eye(T, n)
    b = run.bound(q, k, e, causal, n) + run.bound(q2, k2, e, causal, n)
    chk = _same(A, A2, b[0, 0], "weights for (q, k) vs (q H/d, k H), same q.k")
    report.qk_only = chk


def _probe_injectivity(run: _Runner, report: ProbeReport, T: int, causal: bool) -> None:

    n = min(T, STRUCT_LEN)
    q, k = _pos_inputs(run, T)
    k[..., 0, :] = run.rand(DIM, lo=0.125, hi=1.0)
    inj: dict[str, Any] = {}
    e = _eye(T, n)
    try:
        A = run.weights(q, k, causal, n)[0, 0, :n]
        A2 = run.weights(2 * q, k, causal, n)[0, 0, :n]
        b = run.bound(q, k, e, causal, n) + run.bound(2 * q, k, e, causal, n)
        inj["homogeneous"] = _same(A, A2, b[0, 0], "weights for q vs 2q")
        # keys with k_1 = 1: q + e_1 adds 1 to every score of a row (K u = 1 with u = e_1)
        ks = k.clone()
        ks[..., 0] = 1.0
        qs = q.clone()
        qs[..., 0] += 1.0
        A3 = run.weights(q, ks, causal, n)[0, 0, :n]
        A4 = run.weights(qs, ks, causal, n)[0, 0, :n]
        b = run.bound(q, ks, e, causal, n) + run.bound(qs, ks, e, causal, n)
        inj["shift_invariant"] = _same(A3, A4, b[0, 0], "weights for q vs q + e_1, k_s1 = 1")
        # distinct queries against keys with rank [K, 1] = d + 1 (D9)
        from derivations.related import softmax_injective

        kk = k[0, 0].numpy()
        inj["rank_K1"] = int(np.linalg.matrix_rank(np.hstack([kk, np.ones((T, 1))])))
        inj["keys_injective_for_softmax"] = bool(softmax_injective(kk.tolist()))
        bA = run.bound(q, k, e, causal, n)[0, 0]
        rows = A if not causal else A[-1:]
        if causal:  # rows differ in what they see; compare full rows of the last query instead
            qd = q.clone()
            qd[..., -1, :] = run.rand(DIM, lo=0.125, hi=1.0)
            Ad = run.weights(qd, k, causal, n)[0, 0, :n]
            bd = run.bound(qd, k, e, causal, n)[0, 0]
            diff = np.abs(Ad[-1] - A[-1]) - (bd[-1] + bA[-1])
            distinct = bool(diff.max() > 0)
        else:
            diff = [
                (np.abs(rows[i] - rows[j]) - (bA[i] + bA[j])).max()
                for i in range(n)
                for j in range(i + 1, n)
            ]
            distinct = bool(min(diff) > 0) if diff else True
        inj["distinct_rows"] = Check(distinct, detail="distinct queries give distinct weight rows")
    except VariantError as exc:
        inj["detail"] = str(exc)
    hom = inj.get("homogeneous")
    sh = inj.get("shift_invariant")
    if hom is not None and hom.result:
        inj["summary"] = "not injective: q and 2q give the same weights (homogeneous map, D9)"
    elif sh is not None and sh.result:
        inj["summary"] = (
            "shift-invariant like exp: collisions exactly along K u = c 1, injective when "
            "rank [K, 1] = d + 1 (D9, D6)"
        )
    elif inj.get("distinct_rows") is not None and inj["distinct_rows"].result:
        inj["summary"] = "no collision found (distinct queries give distinct rows)"
    else:
        inj["summary"] = "collisions found or not probed"
    report.injectivity = inj


def _probe_rank(run: _Runner, report: ProbeReport, T: int, modes: tuple[bool, ...]) -> None:
    from derivations import rounding as d10

    n = min(T, STRUCT_LEN)
    q, k = run.rand(1, 1, T, 2), run.rand(1, 1, T, 2)
    eps = 2 * d10.unit_roundoff(run.bound_dtype)
    rk: dict[str, Any] = {
        "size": [n, n],
        "d": 2,
        "rule": "numpy matrix_rank: singular values > sigma_max * max(T, S) * eps, eps = 2u of "
        "the dtype (Golub and Van Loan, Matrix Computations, sec. 5.4.1)",
    }
    for causal in modes:
        try:  # signed maps may divide by zero on some rows (IEEE): those rows are dropped
            A = run.weights(q, k, causal, n, allow_nonfinite=True)[0, 0, :n]
        except VariantError as exc:
            rk["causal" if causal else "noncausal"] = str(exc)
            continue
        A = A[np.isfinite(A).all(axis=-1)]
        if not A.size:
            rk["causal" if causal else "noncausal"] = "no finite row"
            continue
        rk["rows_used" + ("_causal" if causal else "")] = int(A.shape[0])
        tol = float(np.linalg.svd(A, compute_uv=False)[0] * n * eps)
        rk["causal" if causal else "noncausal"] = int(np.linalg.matrix_rank(A, tol=tol))
        rk["tolerance"] = tol
    report.rank = rk


def _probe_independence(run: _Runner, report: ProbeReport, T: int, causal: bool) -> None:
    q, k, v = (run.rand(2, 2, T, DIM, lo=0.125, hi=1.0) for _ in range(3))
    n = min(T, STRUCT_LEN)
    ind: dict[str, Check] = {}
    try:
        o = run.out(q, k, v, causal)[..., :n, :]
        b = run.bound(q, k, v, causal, n)
        for name, sl in (
            ("batch", (slice(1, 2), slice(None))),
            ("head", (slice(None), slice(1, 2))),
        ):
            q2, k2, v2 = q.clone(), k.clone(), v.clone()
            for x in (q2, k2, v2):
                x[sl] = run.rand(*x[sl].shape, lo=0.125, hi=1.0)
            o2 = run.out(q2, k2, v2, causal)[..., :n, :]
            keep = (slice(0, 1), slice(None)) if name == "batch" else (slice(None), slice(0, 1))
            bb = b[keep] + run.bound(q2, k2, v2, causal, n)[keep]
            ind[name] = _same(o[keep], o2[keep], bb, f"{name} 0 when {name} 1 changes")
        o1 = run.out(q[:1, :1], k[:1, :1], v[:1, :1], causal)[..., :n, :]
        ind["single_call"] = _same(o[:1, :1], o1, 2 * b[:1, :1], "(0, 0) of B = H = 2 vs B = H = 1")
    except VariantError as exc:
        ind["detail"] = Check(None, detail=str(exc))
    report.independence = ind


def _probe_determinism(run: _Runner, report: ProbeReport, T: int, causal: bool) -> None:
    q, k = (run.rand(1, 1, T, DIM, lo=0.125, hi=1.0) for _ in range(2))
    v = run.rand(1, 1, T, DIM)
    try:
        a, b = run.out(q, k, v, causal), run.out(q, k, v, causal)
    except VariantError as exc:
        report.deterministic = Check(None, detail=str(exc))
        return
    diff = float(np.max(np.abs(a - b)))
    report.deterministic = Check(diff == 0.0, diff, 0.0, "two calls, same inputs (bitwise)")


def _probe_dtypes(run: _Runner, report: ProbeReport, T: int, causal: bool) -> None:
    import torch

    from verify.properties.support.calls import call

    q, k, v = (run.rand(1, 1, T, DIM, lo=0.125, hi=1.0) for _ in range(3))
    for name in PROBE_DTYPES:
        dt = getattr(torch, name)
        try:
            call(
                run.variant,
                q.to(run.device, dt),
                k.to(run.device, dt),
                v.to(run.device, dt),
                causal=run.flag_map.get(causal, causal),
            )
            report.dtypes[name] = "ok"
        except VariantError as exc:
            report.dtypes[name] = str(exc)


# -- kernel identification -------------------------------------------------------------------
def _kappa_taylor(n: int, x: np.ndarray) -> np.ndarray:
    from derivations.feature_maps import taylor_coefficient

    out = np.zeros_like(x)
    for j in range(n, -1, -1):  # Horner
        out = out * x + float(taylor_coefficient(j))
    return out


def _elu1(t: np.ndarray) -> np.ndarray:
    return np.where(t > 0, t + 1.0, np.exp(np.minimum(t, 0.0)))


def kernel_values(kernel: str, c: float, q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Unnormalized kernel matrix (T, S) in float64 for a member of ``FAMILY`` at scale c.

    exp-type (``softmax``, ``taylor:N``): kappa(c q.k); ``linear:identity``: c q.k; the
    element-wise maps: phi(c q) . phi(k) (THEORY.md D1, D3; DESIGN.md scale convention).

    Args:
        q: (T, d), k: (S, d) float64 arrays. c: the scale (> 0).

    Raises:
        ValueError: a kernel outside ``FAMILY``.
    """
    x = c * (q @ k.T)
    if kernel == "softmax":
        return np.exp(x)
    n = taylor_order(kernel)
    if n is not None:
        return _kappa_taylor(n, x)
    if kernel == "linear:identity":
        return x
    if kernel == "linear:relu":
        return np.maximum(c * q, 0.0) @ np.maximum(k, 0.0).T
    if kernel == "linear:elu1":
        return _elu1(c * q) @ _elu1(k).T
    raise ValueError(f"kernel: expected one of {FAMILY}, got {kernel!r}")


def _scale_free(kernel: str, normalized: bool) -> bool:
    """Kernels whose normalized weights do not depend on the scale."""
    return kernel == "taylor:0" or (normalized and kernel in ("linear:identity", "linear:relu"))


@dataclass
class _Ident:
    """Inputs and measured weights of one identification read at head dimension d."""

    d: int
    q: Any  # (1, 1, T, d) float64 torch
    k: Any
    v: Any  # V = identity on the first N_KEYS keys
    causal: bool
    A: np.ndarray  # (n, n) measured weights
    vis: np.ndarray  # (n, n) visible entries
    raw: np.ndarray  # (n, n) raw scores q.k


def _ident_inputs(run: _Runner, d: int, T: int):
    """Queries/keys with raw scores q.k spanning [-4d, 4d] and key 0 = 0 (score 0).

    Row 0's keys are placed at evenly spaced raw scores; other rows see random ones. With
    c in [1/d, 1], the scaled scores reach 4 (c = 1/d) to 4d (c = 1): |x| >= 2 everywhere, where
    kappa_N (N <= 8) and exp differ by far more than rounding (DESIGN.md).
    """
    import torch

    n = N_KEYS
    R = 4.0 * d
    rn = math.sqrt(R)
    q = torch.randn(n, d, generator=run.gen, dtype=torch.float64)
    q = rn * q / q.norm(dim=-1, keepdim=True)
    q0 = q[0]
    targets = torch.linspace(-R, R, n - 1, dtype=torch.float64)
    w = torch.randn(n - 1, d, generator=run.gen, dtype=torch.float64)
    w = w - (w @ q0)[:, None] * q0 / (q0 @ q0)
    w = 0.25 * rn * w / w.norm(dim=-1, keepdim=True).clamp_min(1e-3)
    k = torch.zeros(n, d, dtype=torch.float64)
    k[1:] = targets[:, None] * q0 / (q0 @ q0) + w
    q, k = run.exact(_grid(q)), run.exact(_grid(k))
    Q = torch.zeros(1, 1, T, d, dtype=torch.float64)
    K = torch.zeros(1, 1, T, d, dtype=torch.float64)
    Q[0, 0, :n], K[0, 0, :n] = q, k
    return Q, K


def _read_ident(run: _Runner, d: int, T: int, causal: bool, notes: list[str]) -> _Ident:
    q, k = _ident_inputs(run, d, T)
    n = N_KEYS
    A = run.weights(q, k, causal, n, allow_nonfinite=True)[0, 0, :n]
    vis = visible(n, n, causal=causal)
    bad = ~np.isfinite(A).all(axis=-1)
    if bad.any():  # e.g. 0/0 where a signed or vanishing kernel's denominator is zero (IEEE)
        notes.append(f"identification at d = {d}: rows {np.nonzero(bad)[0].tolist()} not finite")
        vis[bad] = False
        A = np.where(bad[:, None], 0.0, A)
    qq, kk = q[0, 0, :n].numpy(), k[0, 0, :n].numpy()
    return _Ident(d, q, k, _eye(T, n), causal, A, vis, qq @ kk.T)


def _numerator_bound(run: _Runner, ident: _Ident, kernel: str, c: float, dtype: str):
    """(n, n) D10 bound on the numerator kappa_hat(x_ts) of (kernel, c) for the read rows, or
    None when no bound exists (e.g. gamma_n undefined in a low precision)."""
    from verify.exact import errors

    n = N_KEYS
    k, v = ident.k, ident.v
    if ident.causal:  # rows < n see keys < n only
        k, v = k[..., :n, :], v[..., :n, :]
    try:
        return errors.attention_error_bound(
            kernel,
            ident.q[..., :n, :],
            k,
            v,
            dtype=dtype,
            causal=ident.causal,
            scale=c,
            denominator="none",
            device=run.device,
            exp_library=BLACK_BOX_EXP[run.device],
        ).bound[0, 0]
    except (ValueError, OverflowError):
        return None


def _candidate_ratio(
    run: _Runner,
    ident: _Ident,
    kernel: str,
    c: float,
    normalized: bool,
    bound_dtype: str,
    extra: np.ndarray | None = None,
    ref0: bool = False,
) -> tuple[float, str]:
    """max observed/bound of the measured weights against (kernel, c); inf when no bound
    exists. Normalized variants: ratios to a reference key per row (:func:`ratio_bound`);
    numerator-only variants: the weights themselves. ``extra`` adds an allowance per element
    (fitted scales); ``ref0`` uses key 0 as the reference of every row."""
    from derivations import rounding as d10

    n = N_KEYS
    b = _numerator_bound(run, ident, kernel, c, bound_dtype)
    if b is None:
        return math.inf, "no bound"
    W = kernel_values(kernel, c, ident.q[0, 0, :n].numpy(), ident.k[0, 0, :n].numpy())
    if extra is not None:
        b = b + extra
    A = ident.A
    worst, where = 0.0, ""
    u = d10.unit_roundoff(bound_dtype)
    eta = d10.underflow_abs_error(run.bound_dtype)  # subnormal outputs of that precision
    checked = 0
    for t in range(n):
        cols = np.nonzero(ident.vis[t])[0]
        if normalized:
            if len(cols) < 2:
                continue
            ref = 0 if ref0 else int(cols[np.argmax(np.abs(W[t, cols]))])
            if not np.any(W[t, cols]) and not np.any(b[t, cols]):
                return math.inf, f"row {t}: the candidate has no weight (0/0) but the row is finite"
            if A[t, ref] == 0:
                return math.inf, f"row {t}: measured reference weight is 0"
            j_ref = int(np.where(cols == ref)[0][0])
            beta = ratio_bound(W[t, cols], b[t, cols], j_ref, u, eta, A[t, ref])
            if not np.isfinite(beta).all():
                continue  # the reference's bound exceeds it: the row carries no information
            obs = np.abs(A[t, cols] / A[t, ref] - W[t, cols] / W[t, ref])
        else:
            beta, obs = b[t, cols], np.abs(A[t, cols] - W[t, cols])
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(beta > 0, obs / beta, np.where(obs == 0, 0.0, np.inf))
        checked += len(cols)
        j = int(np.argmax(r))
        if r[j] > worst or not where:
            worst, where = float(r[j]), f"row {t}, key {int(cols[j])}"
    if not checked:
        return math.inf, "no row carries information"
    return worst, where


def _identify(run: _Runner, report: ProbeReport, T_of: Callable[[int], int | None], causal: bool):
    kernel: dict[str, Any] = {"verdict": "none"}
    report.kernel = kernel
    if report.linear_in_v.result is False:  # e.g. a norm of the numerator (D7): no weights
        kernel.update(verdict="not run", detail="the output is not linear in v: no weights")
        return
    norm_kind = report.normalization.get("kind")
    normalized = norm_kind != "none"
    reads: dict[int, _Ident] = {}
    for d in IDENT_DIMS:
        T = T_of(N_KEYS)
        if T is None:
            kernel["verdict"] = "not run"
            kernel["detail"] = "no allowed length >= 12"
            return
        try:
            reads[d] = _read_ident(run, d, T, causal, report.notes)
        except VariantError as exc:
            report.notes.append(f"identification at d = {d}: {exc}")
    if 4 not in reads:
        kernel["verdict"] = "not run"
        kernel["detail"] = "the identification call failed at d = 4"
        return
    A = reads[4].A[reads[4].vis]
    report.positivity = {
        "min_weight": float(A.min()),
        "positive": bool(A.min() > 0),
        "nonnegative": bool(A.min() >= 0),
        "detail": "over the identification weights (scaled scores down to -4d c)",
    }
    precisions = [run.bound_dtype] + (["float32"] if run.bound_dtype == "float64" else [])
    results: list[tuple[float, str, str, str]] = []
    first: list[tuple[float, str, str, str]] = []  # the pass at the output precision
    pool = [
        (kern, conv)
        for kern in FAMILY
        for conv in (["any"] if _scale_free(kern, normalized) else list(CONVENTIONS))
    ]
    for prec in precisions:
        if results:  # the float32 fallback re-tests the closest candidates of the first pass
            pool = [(kern, conv) for _, kern, conv, _ in sorted(results)[:FALLBACK_CANDIDATES]]
        results = []
        for kern, conv in pool:
            c = 1.0 if conv == "any" else CONVENTIONS[conv](4)
            r, where = _candidate_ratio(run, reads[4], kern, c, normalized, prec)
            results.append((r, kern, conv, where))
        first = first or sorted(results)
        matches = [x for x in results if x[0] <= 1.0]
        # confirm at the other dimensions (the conventions differ with d)
        confirmed = []
        for r, kern, conv, where in matches:
            ratios = [r]
            for d in IDENT_DIMS[1:]:
                if d not in reads:
                    continue
                c = 1.0 if conv == "any" else CONVENTIONS[conv](d)
                ratios.append(_candidate_ratio(run, reads[d], kern, c, normalized, prec)[0])
            if max(ratios) <= 1.0:
                confirmed.append((max(ratios), kern, conv, where))
        if confirmed:
            best = min(confirmed)
            kernel.update(
                verdict="consistent",
                kernel=best[1],
                scale=best[2],
                precision=prec,
                max_ratio=best[0],
                scale_by_d={
                    str(d): (None if best[2] == "any" else CONVENTIONS[best[2]](d)) for d in reads
                },
                matches=[f"{k} (scale {c})" for _, k, c, _ in sorted(confirmed)],
                detail=f"D10 bound in {prec}, dims {sorted(reads)}, worst at {best[3]}",
            )
            break
    kernel["candidates"] = {f"{k} ({c})": r for r, k, c, _ in first}
    kernel["closest"] = [
        {"kernel": k, "scale": c, "ratio": r, "where": w} for r, k, c, w in first[:3]
    ]
    if kernel["verdict"] != "consistent":
        fitted = _fit_scale(run, reads, normalized)
        if fitted is not None:
            kernel.update(fitted)
    _poly_fit(report, reads[4])
    if kernel["verdict"] != "consistent":
        _favor_like(run, report, reads[4], normalized)


def _kappa_fn(kernel: str) -> tuple[Callable[[float], float], Callable[[float], float]]:
    """(kappa, a majorant of |kappa'| on [-|y|, |y|] as a function of |y|)."""
    if kernel == "softmax":
        return math.exp, math.exp
    from derivations import rounding as d10

    N = taylor_order(kernel)
    return (
        lambda y: float(_kappa_taylor(N, np.array(y))),
        lambda a: d10.taylor_weight_majorant(N - 1, a, 0.0),
    )


def _u(run: _Runner) -> float:
    from derivations import rounding as d10

    return d10.unit_roundoff(run.bound_dtype)


def _fit_scale(run: _Runner, reads: dict[int, _Ident], normalized: bool):
    """exp or kappa_N (N >= 1) at a scale fitted per d, when no convention fits."""
    for kern in ("softmax",) + tuple(f"taylor:{n}" for n in range(1, MAX_TAYLOR_ORDER + 1)):
        fit = _fit_one(run, reads, kern, normalized)
        if fit is not None:
            return fit
    return None


def _fit_one(run: _Runner, reads: dict[int, _Ident], kern: str, normalized: bool):
    """c is solved from row 0's key f of largest raw score x_f (kappa is increasing on
    [0, oo)); the measured ratio's own bound beta_f gives an interval [c_lo, c_hi], and each
    key is then allowed |x_s| dc max|kappa'| on top of its bound (mean value theorem,
    dc = max(c - c_lo, c_hi - c)), against key 0 (kappa(0) = 1 at every scale)."""
    from derivations import rounding as d10

    kap, dmaj = _kappa_fn(kern)
    scales: dict[str, float] = {}
    intervals: dict[str, list[float]] = {}
    worst = 0.0
    for d, ident in reads.items():
        x = ident.raw[0]
        f = int(np.argmax(x))
        if not (x[f] > 0 and ident.A[0, 0] != 0):
            return None
        Rf = ident.A[0, f] / ident.A[0, 0] if normalized else ident.A[0, f]
        if not Rf > 1:
            return None
        c = _invert(kap, Rf) / x[f]
        b = _numerator_bound(run, ident, kern, c, run.bound_dtype)
        if b is None:
            return None
        q, k = ident.q[0, 0, :N_KEYS].numpy(), ident.k[0, 0, :N_KEYS].numpy()
        W = kernel_values(kern, c, q, k)
        eta = d10.underflow_abs_error(run.bound_dtype)
        beta = ratio_bound(W[0], b[0], 0, _u(run), eta, ident.A[0, 0])[f] if normalized else b[0, f]
        if not np.isfinite(beta):
            return None
        lo = _invert(kap, max(Rf - beta, 1.0)) / x[f]
        hi = _invert(kap, Rf + beta) / x[f]
        dc = max(c - lo, hi - c)
        absx = np.abs(ident.raw)
        extra = absx * dc * np.vectorize(dmaj)(absx * (c + dc))
        if normalized:  # the allowance enters the ratio to key 0 (kappa(0) = 1)
            extra = extra * (1 + d10.gamma(4, _u(run)))
        r, _ = _candidate_ratio(
            run, ident, kern, c, normalized, run.bound_dtype, extra=extra, ref0=True
        )
        if r > 1:
            return None
        worst = max(worst, r)
        scales[str(d)] = float(c)
        intervals[str(d)] = [float(lo), float(hi)]
    return dict(
        verdict="consistent",
        kernel=kern,
        scale="fitted",
        precision=run.bound_dtype,
        max_ratio=worst,
        scale_by_d=scales,
        scale_interval_by_d=intervals,
        detail="scale fitted per d (none of 1/sqrt(d), 1/d, d^-1/4, 1 fits)",
    )


def _invert(kap: Callable[[float], float], y: float) -> float:
    """The s >= 0 with kap(s) = y (kap increasing on [0, oo), kap(0) = 1 <= y)."""
    lo, hi = 0.0, 1.0
    while kap(hi) < y:
        hi *= 2.0
        if hi > 1e6:
            return hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if kap(mid) < y:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-17 * hi:
            break
    return 0.5 * (lo + hi)


def _poly_fit(report: ProbeReport, ident: _Ident) -> None:
    """Least-squares polynomial fit of kappa(x)/kappa(0) (relative residuals) at d = 4."""
    from derivations.feature_maps import taylor_coefficient

    kern = report.kernel
    conv = kern.get("scale")
    if conv in CONVENTIONS:
        c, how = CONVENTIONS[conv](ident.d), f"identified convention {conv}"
    elif conv == "fitted":
        c, how = kern["scale_by_d"][str(ident.d)], "fitted scale"
    else:
        c, how = ident.d**-0.5, "assumed 1/sqrt(d) (scale not identified)"
    A = ident.A
    rows = ident.vis[:, 0] & (A[:, 0] != 0)
    if not rows.any():
        report.fit = {"detail": "kappa(0) = 0: the zero key has no weight, no ratio to fit"}
        return
    R = A[rows] / A[rows][:, [0]]  # kappa(x)/kappa(0), normalized or not
    keep = ident.vis[rows] & (R != 0)
    xs = (c * ident.raw[rows])[keep]
    ys = R[keep]
    deg = int(min(MAX_TAYLOR_ORDER, len(np.unique(xs)) - 1))
    if deg < 1:
        report.fit = {"detail": "too few distinct scores"}
        return
    w = 1.0 / np.abs(ys)
    V = np.vander(xs, deg + 1, increasing=True)
    coef, *_ = np.linalg.lstsq(V * w[:, None], ys * w, rcond=None)
    resid = (V @ coef - ys) * w
    report.fit = {
        "degree": deg,
        "coefficients": [float(a) for a in coef],
        "taylor_coefficients": [float(taylor_coefficient(j)) for j in range(deg + 1)],
        "score_scale": c,
        "scale_source": how,
        "rms_relative_residual": float(np.sqrt(np.mean(resid**2))),
        "score_range": [float(xs.min()), float(xs.max())],
    }


FAVOR_LEN = 16
FAVOR_DIM = 8


def _favor_like(run: _Runner, report: ProbeReport, ident: _Ident, normalized: bool) -> None:
    """Rank exp against the other maps by their rms log-deviation on moderate inputs.

    Random features (FAVOR+) estimate exp without equalling it: the log-weights of a row are
    c x_ts plus noise. The slope c is fitted by least squares over all rows (each row centred:
    the normalization drops out), with its standard error; the other maps are scored at each
    convention. Positive weights that are not a function of q.k only and lie closer to exp than
    to every other map are reported FAVOR-like, with the convention nearest the fitted slope.
    A ranking, not a tolerance."""
    pos = report.positivity.get("positive")
    if not (pos and report.qk_only.result is False and normalized):
        return
    T = _length_at_least(report, FAVOR_LEN)
    if T is None:
        return
    n = min(T, FAVOR_LEN)
    d = FAVOR_DIM  # conventions a factor sqrt(8)^(1/2) ~ 1.7 apart: robust to the feature noise
    q, k = run.rand(1, 1, T, d, std=0.5), run.rand(1, 1, T, d, std=0.5)
    try:
        A = run.weights(q, k, ident.causal, n)[0, 0, :n]
    except VariantError:
        return
    vis = visible(n, n, causal=ident.causal)
    if not (A[vis] > 0).all():
        return
    qq, kk = q[0, 0, :n].numpy(), k[0, 0, :n].numpy()
    rows = [np.nonzero(vis[t])[0] for t in range(n)]
    rows = [(t, cols) for t, cols in enumerate(rows) if len(cols) >= 2]

    def centred(M):
        return np.concatenate([M[t, cols] - M[t, cols].mean() for t, cols in rows])

    z, x = centred(np.log(np.where(vis, A, 1.0))), centred(qq @ kk.T)
    slope = float(z @ x / (x @ x))
    resid = z - slope * x
    dof = max(len(z) - len(rows) - 1, 1)
    stderr = float(np.sqrt(resid @ resid / dof / (x @ x)))
    scores = {("softmax", "fitted"): float(np.sqrt(np.mean(resid**2)))}
    for kern in ("linear:identity",) + ELEMENTWISE:
        for conv, cf in CONVENTIONS.items():
            W = kernel_values(kern, cf(d), qq, kk)
            if not (W[vis] > 0).all():  # a log-deviation needs positive candidate weights
                continue
            dev = z - centred(np.log(np.where(vis, W, 1.0)))
            scores[(kern, conv)] = float(np.sqrt(np.mean(dev**2)))
    report.kernel["ranking"] = {f"{k} ({c})": s for (k, c), s in sorted(scores.items())}
    others = [s for (kk_, _), s in scores.items() if kk_ != "softmax"]
    if scores[("softmax", "fitted")] < min(others, default=math.inf):
        conv = min(CONVENTIONS, key=lambda c: abs(math.log(CONVENTIONS[c](d) / slope)))
        report.kernel.update(
            verdict="favor-like",
            kernel="linear:favor",
            scale=conv,
            fitted_scale=slope,
            fitted_scale_stderr=stderr,
            scatter=scores[("softmax", "fitted")],
            detail=f"positive, not a function of q.k only, closest to exp: log-weights slope "
            f"{slope:.3g} +- {stderr:.2g} at d = {d} (nearest convention {conv}), rms "
            f"log-deviation {scores[('softmax', 'fitted')]:.3g}; best other map "
            f"{min(others, default=math.inf):.3g}",
        )


# -- the entry point -------------------------------------------------------------------------
def probe(variant, *, dtype: str = "float64", device: str = "cpu", seed: int = 0) -> ProbeReport:
    """Probe ``variant.forward`` as a black box (claims ignored) and report what it computes.

    Args:
        variant: a :class:`verify.spec.variant.AttentionVariant`; only ``forward`` and ``layout``
            are used (tensors (B, H, T, d) are converted with ``_calls.call``).
        dtype: probe dtype name (``float64`` default; ``float32``, ``bfloat16``, ``float16``).
        device: ``cpu`` or ``cuda``.
        seed: seed of the random inputs (the probe is deterministic given it).

    Returns:
        :class:`ProbeReport`; a variant that raises, returns NaN or wrong shapes gives a report
        whose fields carry the reasons (never an exception).

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
    run = _Runner(variant, dtype, device, seed)
    _scan_lengths(run, report)
    T8 = _length_at_least(report, STRUCT_LEN)
    if T8 is None:
        report.notes.append(f"no usable length: {report.lengths['rule']}")
        return _finish(report, start)
    _probe_precision(run, report, T8)
    mode = _probe_causal(run, report, T8)
    if mode is None:
        report.notes.append("neither causal=False nor causal=True gives usable attention")
        return _finish(report, start)
    causal = mode == "c"
    steps = (
        ("cross", lambda: _probe_cross(run, report)),
        ("determinism", lambda: _probe_determinism(run, report, T8, causal)),
        ("linear_in_v", lambda: _probe_linear_in_v(run, report, T8, causal)),
        ("normalization", lambda: _probe_normalization(run, report, T8, causal)),
        ("qk_only", lambda: _probe_qk_only(run, report, T8, causal)),
        ("kernel", lambda: _identify(run, report, lambda n: _length_at_least(report, n), causal)),
        ("injectivity", lambda: _probe_injectivity(run, report, T8, causal)),
        ("rank", lambda: _probe_rank(run, report, T8, _modes(report))),
        ("independence", lambda: _probe_independence(run, report, T8, causal)),
        ("dtypes", lambda: _probe_dtypes(run, report, T8, causal)),
    )
    for name, fn in steps:
        try:
            fn()
        except VariantError as exc:  # a probe that hit a misbehaving call records the reason
            report.notes.append(f"{name}: {exc}")
    return _finish(report, start)


def _modes(report: ProbeReport) -> tuple[bool, ...]:
    return {"both": (False, True), "yes": (True,), "no": (False,)}.get(
        report.causal_support or "", ()
    )


def _finish(report: ProbeReport, start: float) -> ProbeReport:
    report.runtime_s = time.perf_counter() - start
    report.description = describe(report)
    return report


# -- words -----------------------------------------------------------------------------------
_SUP = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
_SCALE_WORDS = {"1/sqrt(d)": "1/√d", "1/d": "1/d", "d^-1/4": "d^−1/4", "1": "1"}


def taylor_formula(order: int) -> str:
    """'1 + x + x²/2' for kappa_2 (THEORY.md D1)."""
    terms = []
    for n in range(order + 1):
        if n == 0:
            terms.append("1")
        elif n == 1:
            terms.append("x")
        else:
            terms.append(f"x{str(n).translate(_SUP)}/{math.factorial(n)}")
    return " + ".join(terms)


def _kernel_words(report: ProbeReport) -> str:
    kern = report.kernel
    verdict = kern.get("verdict")
    name = kern.get("kernel", "")
    if verdict == "consistent":
        if name == "softmax":
            return "kernel attention, κ(x) = exp(x) (softmax)"
        n = taylor_order(name)
        if n is not None:
            return f"kernel attention, κ(x) = {taylor_formula(n)} (Taylor-{n} of exp)"
        if name == "linear:identity":
            return "linear attention with the identity feature map (κ(x) = x)"
        m = {"linear:elu1": "elu(x)+1", "linear:relu": "relu(x)"}[name]
        return (
            f"linear attention with an element-wise feature map {m} "
            "(weights do not depend on q·k only)"
        )
    if verdict == "favor-like":
        return (
            "FAVOR-like linear attention (positive random features: weights scattered around exp, "
            "not a function of q·k only)"
        )
    if verdict == "none":
        fit = report.fit.get("coefficients")
        shape = ""
        if fit:
            shape = "; fitted κ(x)/κ(0) ≈ " + " + ".join(
                f"{a:.3g}·x^{j}" if j else f"{a:.3g}" for j, a in enumerate(fit[:4])
            )
        if report.qk_only.result:
            return (
                "kernel attention with none of the known kernels "
                f"(weights depend on q·k only{shape})"
            )
        if report.qk_only.result is False:
            return "attention with none of the known kernels (weights do not depend on q·k only)"
        return f"attention with none of the known kernels{shape}"
    return "attention (kernel not identified)"


def describe(report: ProbeReport) -> str:
    """One sentence saying what the probed variant computes, e.g. "normalized kernel attention,
    κ(x) = 1 + x + x²/2 (Taylor-2 of exp), scale 1/√d, causal"."""
    if report.causal_support is None:
        tested = report.lengths.get("tested", {})
        if tested and not report.lengths.get("passing"):
            first = min(tested, key=int)
            return f"unusable: every tested length fails (T = {first}: {tested[first]})"
        reasons = [r for r in report.calls.values() if r != "ok"] or report.notes
        return f"unusable: {reasons[0] if reasons else 'no usable call'}"
    norm = report.normalization.get("kind")
    prefix = {
        "sum": "normalized ",
        "sum+eps": "normalized ",
        "none": "unnormalized ",
        "count": "count-normalized ",
        "other": "",
    }.get(norm, "")
    if report.linear_in_v.result is False:
        parts = ["attention whose output is not linear in v (e.g. a norm of the numerator, D7)"]
    else:
        parts = [prefix + _kernel_words(report)]
    if norm == "sum+eps" and "eps" in report.normalization:
        parts.append(f"denominator + {report.normalization['eps']:.3g}")
    if norm == "other" and report.linear_in_v.result is not False:
        parts.append("rows normalized by something other than the kernel sum")
    scale = report.kernel.get("scale")
    if report.kernel.get("verdict") in ("consistent", "favor-like") and scale not in (None, "any"):
        if scale == "fitted":
            const = _constant_scale(report.kernel)
            if const is not None:
                parts.append(f"scale {const:.6g} (fitted, the same at every d)")
            else:
                by_d = report.kernel["scale_by_d"].items()
                parts.append("scale " + ", ".join(f"{v:.4g} at d = {d}" for d, v in by_d))
        else:
            parts.append(f"scale {_SCALE_WORDS[scale]}")
    if report.kernel.get("precision") not in (None, report.dtype):
        parts.append(f"{report.kernel['precision']} accuracy")
    parts.append(
        {"both": "causal and non-causal", "yes": "causal", "no": "non-causal"}[
            report.causal_support
        ]
    )
    fi = report.causal.get("flag_ignored")
    if fi is not None and fi.result:
        parts.append("the causal flag is ignored")
    align = report.cross.get("alignment")
    if align:
        parts.append(f"causal T ≠ S aligned {align}")
    rule = report.lengths.get("rule", "")
    if rule and rule != "any T":
        parts.append(rule)
    return ", ".join(parts)


def _constant_scale(kernel: dict) -> float | None:
    """The shortest decimal in every fitted scale interval, when the intervals overlap."""
    ivs = list(kernel.get("scale_interval_by_d", {}).values())
    if not ivs:
        return None
    lo, hi = max(a for a, _ in ivs), min(b for _, b in ivs)
    return _shortest_in(lo, hi) if lo <= hi else None


def suggested_claims(report: ProbeReport) -> dict[str, Any]:
    """Claims for ``AttentionVariant.with_claims`` from what the probes found.

    Keys (only those the probes settled): ``kernel`` ("softmax", "taylor:N", "linear:MAP" or
    "unknown"), ``causal`` (yes/no/both), ``causal_alignment``, ``normalized``, ``eps``,
    ``scale`` ("default" when the identified convention is the default for the kernel type --
    1/sqrt(d) for exp-type, 1 for element-wise maps -- or a constant fitted float),
    ``length_multiple``, ``dtypes``.
    """
    claims: dict[str, Any] = {}
    kern = report.kernel
    verdict = kern.get("verdict")
    known = verdict in ("consistent", "favor-like")
    claims["kernel"] = kern.get("kernel", "unknown") if known else "unknown"
    if report.causal_support:
        claims["causal"] = report.causal_support
    if report.cross.get("alignment"):
        claims["causal_alignment"] = report.cross["alignment"]
    norm = report.normalization.get("kind")
    if norm in ("sum", "sum+eps"):
        claims["normalized"] = True
    elif norm == "none":
        claims["normalized"] = False
    if norm == "sum+eps" and isinstance(report.normalization.get("eps"), float):
        claims["eps"] = report.normalization["eps"]
    scale = kern.get("scale")
    name = claims["kernel"]
    exp_type = parse_kernel(name).exp_type
    if known:
        default = "1/sqrt(d)" if exp_type else "1"
        if scale in ("any", default):
            claims["scale"] = "default"
        elif scale == "fitted" and _constant_scale(kern) is not None:
            claims["scale"] = _constant_scale(kern)
        elif scale == "1":
            claims["scale"] = 1.0
    if report.lengths.get("multiple"):
        claims["length_multiple"] = int(report.lengths["multiple"])
    ok = tuple(dt for dt in PROBE_DTYPES if report.dtypes.get(dt) == "ok")
    if ok:
        claims["dtypes"] = ok
    return claims
