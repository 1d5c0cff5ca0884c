"""Calling the variant on exact inputs, and the bounds the probes judge the outputs by.

:class:`Runner` calls ``variant.forward`` through ``verify.properties.support.calls.call`` (an
exception, NaN/inf, a wrong shape or dtype becomes a :class:`~verify.spec.results.VariantError`
carrying the reason) on float64-built tensors on a dyadic grid, cast exactly to the probe dtype;
it reads the attention matrix with V = identity. :func:`structural_bound` is the stated proxy
bound of one evaluation of an unidentified kernel; :func:`ratio_bound` carries a candidate's D10
bound through the ratio of two weights of a row.
"""

from __future__ import annotations

import math

import numpy as np

from verify.exact.errors import BLACK_BOX_EXP_LIBRARY
from verify.probes.report import Check
from verify.spec.results import VariantError

STRUCT_LEN = 8
DIM = 4  # a power of two: the Hadamard rotation of the q.k-only test
GRID = 32  # inputs are multiples of 1/GRID with few bits: exact in float64/32, bfloat16, float16
#: exp and kappa_8 dominate the other positive kernels' bounds (kappa_N(|x| + e) and the
#: roundings grow with N; elu+1 features carry O(u |x|) errors)
STRUCTURAL_KERNELS = ("softmax", f"taylor:{8}")
#: the largest cited exp error per device (the library of a black box is unknown)
BLACK_BOX_EXP = BLACK_BOX_EXP_LIBRARY
PROBE_DTYPES = ("float64", "float32", "bfloat16", "float16")


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


def structural_bound(
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
def grid(x):
    return (x * GRID).round() / GRID


def hadamard(d: int) -> np.ndarray:
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return h


def to_numpy(t) -> np.ndarray:
    return t.detach().to("cpu").double().numpy()


class Runner:
    """Calls the variant on canonical float64-built tensors cast to the probe dtype."""

    def __init__(self, variant, dtype: str, device: str, seed: int):
        import torch

        self.variant = variant
        self.dtype = dtype
        #: the precision the outputs are computed in (``probe_precision``): bounds use it
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
        return self.exact(grid(x))

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
            restricted=False,  # the probes look for the restrictions
        )
        return to_numpy(o)

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
        return structural_bound(
            q, k, v, mask=mask, dtype=self.bound_dtype, device=self.device, denominators=self.dens
        )


def same(a: np.ndarray, b: np.ndarray, bound: np.ndarray, what: str) -> Check:
    """|a - b| <= bound elementwise (bound = the two evaluations' summed bounds)."""
    diff = np.abs(a - b)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, diff / bound, np.where(diff == 0, 0.0, np.inf))
    i = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    ok = bool(ratio[i] <= 1.0)
    return Check(ok, float(diff[i]), float(bound[i]), f"{what}: max |difference| at {i[-2:]}")


def pos_inputs(run: Runner, T: int, d: int = DIM):
    q = run.rand(1, 1, T, d, lo=0.125, hi=1.0)
    k = run.rand(1, 1, T, d, lo=0.125, hi=1.0)
    k[..., 0, :] = 0.0  # key 0: kappa(q . 0) = kappa(0)
    return q, k


def value_identity(S: int, n: int):
    import torch

    e = torch.zeros(1, 1, S, n, dtype=torch.float64)
    e[0, 0, :n] = torch.eye(n, dtype=torch.float64)
    return e


def shortest_in(lo: float, hi: float) -> float:
    """The number with the fewest significant decimal digits in [lo, hi] (lo <= hi)."""
    mid = 0.5 * (lo + hi)
    for digits in range(1, 18):
        x = float(f"{mid:.{digits}g}")
        if lo <= x <= hi:
            return x
    return mid
