"""What a failure's reproducer calls after the variant: the suite's reference for the variant's
claims on the same inputs, and the difference against the derived bound.

A reproducer (``attn-theory check`` prints one per failure) rebuilds the counterexample's
tensors, calls the variant, then::

    ref = reference(variant, q, k, v, causal=causal)
    print(ref.difference(o))

``reference`` is the claimed kernel evaluated exactly (the mpmath oracle, ``verify.exact.oracle``)
with the element-wise bound the checks state for the claimed computation (D10, the claimed or
probed precision model, the declared eps, scale and compute dtype: ``verify.exact.errors``),
the same pair the properties compare the variant with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Reference:
    """The exact output (rounded once to float64) and its bound, float64 tensors shaped like
    the output, and how the bound was composed."""

    exact: Any
    bound: Any
    description: str
    _result: Any = None
    _eb: Any = None
    #: why there is no reference (``exact`` and ``bound`` are None then)
    missing: str = ""

    def difference(self, o) -> str:
        """``|o - reference|`` against the bound: the largest difference, the worst element
        (largest difference/bound) with its difference, bound and ratio, and how many elements
        exceed their bound."""
        import torch

        from verify.exact.errors import compare

        if self.exact is None:
            return f"no reference to compare with: {self.missing}"
        err = (o.detach().cpu().to(torch.float64) - self.exact).abs()
        over = int((~(err <= self.bound)).sum())
        obs = compare(o, self._eb, self._result, what="|o - reference|")
        verdict = "within the bound" if obs.ratio <= 1 else "EXCEEDS the bound"
        return (
            f"max |o - reference| = {float(err.max()) if err.numel() else 0.0:.3e}; worst "
            f"element {obs.where}: {obs.observed:.3e} vs bound {obs.bound:.3e} (ratio "
            f"{obs.ratio:.3g}, {verdict}); {over} of {err.numel()} elements over their bound"
        )


def reference(
    variant,
    q,
    k,
    v,
    *,
    causal: bool,
    attn_mask=None,
    denominator: str = "sum",
) -> Reference:
    """The suite's reference for ``variant``'s claims on canonical ``(B, H, T, d)`` inputs.

    Without a reference for these claims (kernel unknown, FAVOR+ without a projection) or
    for inputs outside the error model, ``exact`` and ``bound`` are None and ``missing`` says
    why.
    """
    import torch

    from verify.properties.support.base import RunContext
    from verify.properties.support.common import exact_and_bound
    from verify.spec.results import NotApplicable
    from verify.strategies import AttentionInputs, Shape

    B, H, T, d = (int(n) for n in q.shape)
    S, d_v = int(k.shape[-2]), int(v.shape[-1])
    x = AttentionInputs(
        q=q,
        k=k,
        v=v,
        causal=bool(causal),
        scale=None,
        radius=None,
        shape=Shape(B=B, H=H, T=T, S=S, d=d, d_v=d_v),
        attn_mask=attn_mask,
    )
    ctx = RunContext(
        dtype=str(q.dtype).removeprefix("torch."),
        device=str(q.device.type),
        compute_dtype=getattr(variant, "compute_dtype", None),
    )
    try:
        result, eb = exact_and_bound(variant, x, ctx, denominator=denominator)
    except NotApplicable as exc:
        return Reference(None, None, "", missing=str(exc))
    return Reference(
        exact=torch.from_numpy(np.asarray(result.float64, dtype=np.float64)),
        bound=torch.from_numpy(np.asarray(eb.bound, dtype=np.float64)),
        description=eb.description,
        _result=result,
        _eb=eb,
    )
