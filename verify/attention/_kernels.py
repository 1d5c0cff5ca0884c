"""Resolved kernels for the feature forms: name parsing, scale convention, features, weights.

A ``FeatureKernel`` is built once per call (or once per streaming state) from a feature-map name
(``identity``, ``elu1``, ``relu``, ``taylor:N``, ``favor``) or a callable, and knows
- which scale convention applies (exp-type: sqrt(c) on q and k; element-wise and callables:
  c on q only, before the map; the API contract, README),
- the feature block sizes (one block per Taylor order, one block otherwise),
- how to build features from accumulation-dtype tensors, and the T x S weight matrix of the
  parallel form (Taylor: kappa_N on the scores).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from derivations.feature_maps import taylor_coefficients
from verify.attention import feature_maps as fm
from verify.attention._validate import accumulation_dtype, check_bool, check_choice, check_int
from verify.spec.kernel import taylor_order
from verify.spec.vocabulary import BASES, FEATURE_MAPS

#: the element-wise maps of ``verify.spec.vocabulary.ELEMENTWISE_MAPS``, in torch
ELEMENTWISE = {"identity": lambda x: x, "elu1": lambda x: F.elu(x) + 1.0, "relu": F.relu}


def taylor_kernel(x: torch.Tensor, order: int) -> torch.Tensor:
    """kappa_N(x) = sum_{n<=N} x^n / n! by Horner's rule (D1, D4).

    Coefficients 1/n! from ``derivations.feature_maps.taylor_coefficients`` (rounded once to
    float64). Forward error of Horner: |fl(p) - p| <= gamma_{2N} kappa_N(|x|) (Higham 2002,
    eq. (5.3)). Shape and dtype of ``x``.
    """
    coeffs = [float(a) for a in taylor_coefficients(order)]
    if order == 0:
        return torch.full_like(x, coeffs[0])
    p = torch.add(x.new_tensor(coeffs[-2]), x, alpha=coeffs[-1])  # a_{N-1} + a_N x
    for a in reversed(coeffs[:-2]):
        p = torch.addcmul(x.new_tensor(a), p, x)  # a_n + p x
    return p


@dataclass(frozen=True)
class FeatureKernel:
    """A resolved feature map (see module docstring); the kernel claim itself is a
    ``verify.spec.kernel.Kernel``."""

    name: str
    exp_type: bool
    order: int | None = None
    basis: str | None = None
    projection: torch.Tensor | None = None
    fn: Callable[[torch.Tensor], torch.Tensor] | None = None

    def block_sizes(self, d: int) -> tuple[int, ...] | None:
        """Feature block sizes (per order for Taylor); None for callables (known after a call)."""
        if self.order is not None:
            return fm.taylor_block_sizes(self.order, d, self.basis)
        if self.name == "favor":
            return (self.projection.shape[0],)
        if self.name in ELEMENTWISE:
            return (d,)
        return None

    def features(self, x: torch.Tensor, c: float, *, query: bool) -> torch.Tensor:
        """phi of accumulation-dtype x (..., d) -> (..., m), scale convention applied once."""
        if self.order is not None:
            return fm.rows_to_cols(lambda t: self.features_t(t, c, query=query), x)
        if self.name == "favor":
            return fm.favor(x, self.projection.to(x.dtype), c)
        if query and c != 1.0:
            x = c * x
        if self.fn is not None:
            return _checked_callable_output(self.fn, x)
        return ELEMENTWISE[self.name](x)

    def features_t(self, xt: torch.Tensor, c: float, *, query: bool) -> torch.Tensor:
        """Column layout: xt (..., d, L) -> (..., m, L)."""
        if self.order is not None:
            return torch.cat(fm.taylor_blocks_t(xt, self.order, c, self.basis), -2)
        return self.features(xt.transpose(-1, -2), c, query=query).transpose(-1, -2)

    def blocks_t(self, xt: torch.Tensor, c: float, *, query: bool):
        """Column layout: (unweighted features (..., m, L), factors (m,) | None).

        phi = features * factors[:, None]; the chunked form applies the factors to the (small)
        chunk states instead of to every token.
        """
        if self.order is None:
            return self.features_t(xt, c, query=query), None
        mono = fm.taylor_monomials_t(xt, self.order, self.basis, concatenated=True)
        return mono, fm.taylor_weights(self.order, xt.shape[-2], self.basis, c, xt.dtype, xt.device)

    def parallel_weights(self, qa, ka, c, vis):
        """Unmasked T x S weights kappa(q_t, k_s); masked entries are dropped by the caller."""
        if self.order is not None:
            x = c * (qa @ ka.transpose(-1, -2))
            if vis is not None:
                x = torch.where(vis, x, 0.0)  # no overflow of kappa at masked entries
            return taylor_kernel(x, self.order)
        fq = self.features(qa, c, query=True)
        fk = self.features(ka, c, query=False)
        return fq @ fk.transpose(-1, -2)

    def pair(self, qa, ka, c):
        """Within-chunk weights from the scores (Taylor only): (qa, ka, s -> kappa_N(c s))."""
        if self.order is None:
            return None
        order = self.order
        return qa, ka, lambda s: taylor_kernel(c * s, order)


def _checked_callable_output(fn, x: torch.Tensor) -> torch.Tensor:
    out = fn(x)
    if not isinstance(out, torch.Tensor):
        raise TypeError(
            f"feature_map: the callable must return a torch.Tensor, got {type(out).__name__}"
        )
    if out.dim() != x.dim() or out.shape[:-1] != x.shape[:-1] or out.shape[-1] < 1:
        raise ValueError(
            f"feature_map: the callable must map (..., d) -> (..., m >= 1) keeping the leading "
            f"axes; input {tuple(x.shape)}, output {tuple(out.shape)}"
        )
    if out.dtype != x.dtype or out.device != x.device:
        raise TypeError(
            f"feature_map: the callable must keep dtype and device ({x.dtype}, {x.device}), "
            f"got ({out.dtype}, {out.device})"
        )
    return out


def resolve_kernel(
    spec: object,
    *,
    name: str,
    d: int,
    device: torch.device,
    dtype: torch.dtype,
    basis: str = "symmetric",
    projection: torch.Tensor | None = None,
    num_features: int | None = None,
    orthogonal: bool = True,
    generator: torch.Generator | None = None,
    feature_budget: int = fm.FEATURE_BUDGET,
    need_features: bool = True,
) -> FeatureKernel:
    """Parse a feature-map spec (argument ``name`` in messages) into a ``FeatureKernel``.

    FAVOR+ takes ``projection`` (m, d) or draws one with ``favor_projection(d, num_features
    (default d), orthogonal=..., generator=...)``; an explicit ``generator`` is required then.
    FAVOR-only keywords given with another map are rejected. ``need_features`` False skips the
    Taylor feature budget (parallel form: kappa_N on the scores, no features built).
    """
    favor_kw = projection is not None or num_features is not None or generator is not None
    if callable(spec) and not isinstance(spec, str):
        kernel = FeatureKernel(name="callable", exp_type=False, fn=spec)
    elif not isinstance(spec, str):
        raise TypeError(
            f"{name}: expected one of {FEATURE_MAPS} or a callable, got {type(spec).__name__}"
        )
    elif spec in ELEMENTWISE:
        kernel = FeatureKernel(name=spec, exp_type=False)
    elif spec.startswith("taylor"):
        order = taylor_order(spec)
        if order is None:
            raise ValueError(f"{name}: expected 'taylor:N' with an integer N >= 0, got {spec!r}")
        check_choice("basis", basis, BASES)
        if need_features:
            fm.check_feature_budget(order, d, basis, feature_budget)
        kernel = FeatureKernel(name=f"taylor:{order}", exp_type=True, order=order, basis=basis)
    elif spec == "favor":
        check_bool("orthogonal", orthogonal)
        acc_dtype = accumulation_dtype(dtype)
        if projection is not None:
            if isinstance(projection, torch.Tensor) and projection.dtype not in (dtype, acc_dtype):
                raise TypeError(
                    f"projection: expected dtype {dtype} (or {acc_dtype}), got {projection.dtype}"
                )
            fm.check_projection(projection, d, getattr(projection, "dtype", None), device)
        else:
            if generator is None:
                raise ValueError(
                    f"{name}: 'favor' needs projection= (from favor_projection) or an explicit "
                    "generator= (torch.Generator) to draw one"
                )
            m = d if num_features is None else check_int("num_features", num_features, 1)
            projection = fm.favor_projection(
                d, m, orthogonal=orthogonal, generator=generator, dtype=acc_dtype, device=device
            )
        kernel = FeatureKernel(name="favor", exp_type=True, projection=projection.to(acc_dtype))
        return kernel
    else:
        raise ValueError(f"{name}: expected one of {FEATURE_MAPS} or a callable, got {spec!r}")
    if favor_kw:
        raise ValueError(
            f"projection/num_features/generator: only used with {name}='favor', got {name}={spec!r}"
        )
    return kernel
