"""Packed sequences as a claim (D20): documents packed into one sequence in FlashAttention's
varlen layout (``verify.spec.decode``: q ``(total, H, d)``, ``cu_seqlens`` ``(B + 1,)``
int32), computed by the variant's ``packed`` function.

A packed call is attention under a block-diagonal visibility (D20): document b sees only rows
``cu_seqlens[b]:cu_seqlens[b + 1]``. So

- ``packed-documents``: each document's rows equal ``forward`` on that document alone, within
  the bound of two correct computations of the same rows (D11's kernel-free threshold on the
  weights the forward computes, or twice the claim's D10 bound, the larger;
  ``support.structure``), for documents of length 0 and 1, several documents with slack rows
  after the last one, and (long examples) boundaries off the 64/128 block grid;
- ``packed-isolation``: changing one document (and filling the slack rows with NaN, +inf or
  -inf) leaves every other document's outputs bit-identical, and the gradient of the other
  documents' outputs with respect to the changed document's (and the slack's) q, k, v is
  exactly zero. Exact, not within a rounding bound: the other documents' outputs are computed
  by the same operations on the same inputs in both calls, and a row of another document
  enters them only through weights that are exact zeros (D20's visibility) -- for a forward
  that is run-to-run deterministic, as every FlashAttention forward and torch fallback is.
  A variant that declares ``differentiable=False`` gets the forward statement only, and the
  observation says the gradient statement was not checked.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verify.properties.support.base import declare
from verify.properties.support.calls import call
from verify.properties.support.claims import structural_applies
from verify.properties.support.common import (
    LONG_BLOCK,
    MAX_DIM,
    MAX_HEADS,
    MAX_VALUE_DIM,
    Example,
    causal_choices,
)
from verify.properties.support.inputs import make_inputs, values
from verify.properties.support.observe import array_observation, diff, np64
from verify.properties.support.paths import call_kwargs, convention_mode
from verify.properties.support.structure import path_bound, path_dtype_gap
from verify.spec.results import NotApplicable, Observation, VariantError

#: what the slack rows hold in ``packed-isolation``
SLACK_FILLS = ("nan", "+inf", "-inf")
#: documents per example and the longest regular document
MAX_DOCS = 3
MAX_DOC_LEN = 6
MAX_SLACK = 3


# --------------------------------------------------------------------------- the call


def call_packed(variant, q, k, v, cu, *, causal: bool):
    """``variant.packed(q, k, v, cu_seqlens, causal=causal)`` on (total, H, .) tensors: the
    output (total, H, d_v), NaN/inf allowed (judged on the rows that carry a statement).

    Raises:
        VariantError: it raised, or returned a non-tensor, a wrong shape or dtype.
    """
    import torch

    try:
        o = variant.packed(q, k, v, cu, causal=causal)
    except Exception as exc:
        raise VariantError(f"packed raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(o, torch.Tensor):
        raise VariantError(f"packed returned {type(o).__name__}, expected a tensor")
    expected = (*q.shape[:-1], v.shape[-1])
    if tuple(o.shape) != expected:
        raise VariantError(f"packed output shape {tuple(o.shape)}, expected {expected}")
    if o.dtype != q.dtype:
        raise VariantError(f"packed output dtype {o.dtype}, expected the input dtype {q.dtype}")
    return o


def _doc(t, a: int, b: int):
    """Rows a:b of a (total, H, .) tensor as a canonical (1, H, b - a, .) one."""
    return t[a:b].transpose(0, 1)[None]


def _reference(variant, x, ctx):
    """``forward`` on one document and the bound of a second correct computation of its rows."""
    mode = convention_mode(variant)
    kw = call_kwargs(variant, mode)
    o = call(variant, x.q, x.k, x.v, causal=x.causal, allow_nonfinite=True, **kw)
    bound = path_bound(variant, x, ctx, kw, causal=x.causal, mode=mode, o=o)
    o = np64(o)
    if (~np.isfinite(o) & np.isfinite(bound)).any():
        raise VariantError("forward on a document alone: NaN/inf where the bound is finite")
    return o, bound


# --------------------------------------------------------------------------- examples


class PackedRows(dict):
    """q, k, v of every packed row by name, (total, H, .) tensors; :meth:`snippet` is the code
    that rebuilds them (the reproducer's inputs, ``support.reproduce``)."""

    def snippet(self) -> str:
        from verify.properties.support.common import tensor_snippet

        dtype = str(self["q"].dtype).removeprefix("torch.")
        rows = tensor_snippet({n: np64(self[n]).tolist() for n in "qkv"})
        return rows + f"q, k, v = (t.to(torch.{dtype}) for t in (q, k, v))  # (total, H, .)\n"


def _applies(variant, ctx):
    if variant.packed is None:
        return "the variant declares no packed function (--packed, AttentionVariant.packed)"
    return path_dtype_gap(variant, ctx) or structural_applies(variant, ctx)


def _packed_examples(variant, ctx, *, long: bool = False):
    """Examples: document lengths (0 and 1 included; ``long``: lengths past the block grid
    LONG_BLOCK j + r), slack rows, a causal flag, and q, k, v of every row."""
    import torch
    from hypothesis import assume
    from hypothesis import strategies as st

    from verify.strategies import sizes

    @st.composite
    def draw(draw_):
        causal = draw_(st.sampled_from(causal_choices(variant)))
        if long:
            n = draw_(st.integers(1, 2))
            lens = [
                LONG_BLOCK * draw_(st.integers(0, 2)) + draw_(st.integers(1, LONG_BLOCK - 1))
                for _ in range(n)
            ]
            lens.insert(draw_(st.integers(0, n)), draw_(st.integers(0, 1)))
        else:
            n = draw_(st.integers(1, MAX_DOCS))
            lens = [draw_(st.integers(0, MAX_DOC_LEN)) for _ in range(n)]
        assume(any(lens))
        slack = draw_(st.integers(0, MAX_SLACK))
        H = draw_(sizes(1, MAX_HEADS))
        d = draw_(sizes(variant.head_dim_multiple, max(MAX_DIM, variant.head_dim_multiple)))
        d = -(-d // variant.head_dim_multiple) * variant.head_dim_multiple
        dv = d if variant.dv_equals_d else draw_(sizes(1, MAX_VALUE_DIM))
        total = sum(lens) + slack
        arrs = [draw_(values((total, H, w), ctx.torch_dtype)) for w in (d, d, dv)]
        q, k, v = (torch.from_numpy(a).to(ctx.torch_dtype).to(ctx.device) for a in arrs)
        cu = [0]
        for m in lens:
            cu.append(cu[-1] + m)
        return Example(
            PackedRows(q=q, k=k, v=v),
            {"causal": causal, "lengths": lens, "slack": slack, "cu_seqlens": cu},
        )

    return draw()


def _cu_tensor(cu, device):
    import torch

    return torch.tensor(cu, dtype=torch.int32, device=device)


# --------------------------------------------------------------------------- documents


def _documents_check(variant, ex: Example, ctx):
    t, c = ex.inputs, ex.choices
    causal, cu = c["causal"], c["cu_seqlens"]
    o = call_packed(variant, t["q"], t["k"], t["v"], _cu_tensor(cu, ctx.device), causal=causal)
    obs = []
    for b in range(len(cu) - 1):
        lo, hi = cu[b], cu[b + 1]
        if hi == lo:
            continue
        x = make_inputs(*(_doc(t[n], lo, hi) for n in "qkv"), causal=causal)
        try:
            ref, bound = _reference(variant, x, ctx)
        except NotApplicable:
            continue
        got = np64(_doc(o, lo, hi))
        obs.append(
            array_observation(
                diff(got, ref),
                bound,
                what=f"document {b} (rows {lo}:{hi} of {c['lengths']} + {c['slack']} slack, "
                f"causal={causal}) vs forward on it alone",
            )
        )
    if not obs:
        raise NotApplicable("no document with a stated bound")
    return obs


PACKED_DOCUMENTS = declare(
    "packed-documents",
    _applies,
    _packed_examples,
    _documents_check,
    long_examples=lambda variant, ctx: _packed_examples(variant, ctx, long=True),
)


# --------------------------------------------------------------------------- isolation


def _isolation_examples(variant, ctx):
    from hypothesis import assume
    from hypothesis import strategies as st

    @st.composite
    def draw(draw_):
        ex = draw_(_packed_examples(variant, ctx))
        lens = ex.choices["lengths"]
        assume(sum(1 for m in lens if m) >= 2 or (any(lens) and ex.choices["slack"]))
        changed = draw_(st.integers(0, len(lens) - 1))
        t = ex.inputs
        new = [draw_(values((lens[changed], *x.shape[1:]), ctx.torch_dtype)) for x in t.values()]
        ex.choices.update(changed=changed, slack_fill=draw_(st.sampled_from(SLACK_FILLS)), _new=new)
        return ex

    return draw()


def _exact(a, b, what: str) -> Observation:
    """max |a - b| against 0 (kind exact): NaN anywhere counts as a difference."""
    d = diff(a, b)
    worst = float(np.nanmax(np.where(np.isnan(d), np.inf, d))) if d.size else 0.0
    return Observation(worst, 0.0, "exact", detail=f"{what}: max |difference| {worst:.3e}")


def _isolation_check(variant, ex: Example, ctx):
    import torch

    t, c = ex.inputs, ex.choices
    causal, cu, i = c["causal"], c["cu_seqlens"], c["changed"]
    cu_t = _cu_tensor(cu, ctx.device)
    lo, hi, end = cu[i], cu[i + 1], cu[-1]
    fill = float(c["slack_fill"].replace("+", ""))
    changed = [x.clone() for x in (t["q"], t["k"], t["v"])]
    for x, new in zip(changed, c["_new"]):
        x[lo:hi] = torch.from_numpy(np.ascontiguousarray(new)).to(x.dtype).to(x.device)
        x[end:] = fill
    keep = np.ones(cu[-1] + c["slack"], dtype=bool)
    keep[lo:hi] = False
    keep[end:] = False
    o1 = call_packed(variant, t["q"], t["k"], t["v"], cu_t, causal=causal)
    o2 = call_packed(variant, *changed, cu_t, causal=causal)
    what = f"documents other than {i} (lengths {c['lengths']}, slack {c['slack']}, causal={causal})"
    obs = [
        _exact(
            np64(o1)[keep],
            np64(o2)[keep],
            f"{what} after changing document {i} and filling the slack with {c['slack_fill']}",
        )
    ]
    if not variant.differentiable:  # no backward to call: the forward statement only
        obs[0].detail += "; the gradient statement not checked: the variant declares it is not "
        obs[0].detail += "differentiable"
        return obs
    obs += _gradient_isolation(variant, t, cu_t, causal, keep, what)
    return obs


def _gradient_isolation(variant, t, cu_t, causal: bool, keep, what: str) -> list[Observation]:
    """d(sum of the kept rows' outputs times fixed weights)/d(q, k, v) at the other rows: exact
    zeros. Empty when the packed function has no autograd path (its outputs need no grad)."""
    import torch

    leaves = [x.detach().clone().requires_grad_(True) for x in (t["q"], t["k"], t["v"])]
    o = call_packed(variant, *leaves, cu_t, causal=causal)
    if not o.requires_grad:
        return []
    mask = torch.from_numpy(keep).to(o.device)
    w = torch.arange(1, o.numel() + 1, dtype=o.dtype, device=o.device).reshape(o.shape) % 7 - 3
    loss = (o * w)[mask].sum()
    try:
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    except Exception as exc:
        raise VariantError(f"packed backward raised {type(exc).__name__}: {exc}") from exc
    out = []
    for name, g in zip("qkv", grads):
        if g is None:
            continue
        other = np64(g)[~keep]
        out.append(
            _exact(other, np.zeros_like(other), f"d(loss of {what})/d{name} at the other rows")
        )
    return out


PACKED_ISOLATION = declare("packed-isolation", _applies, _isolation_examples, _isolation_check)

PROPERTIES: tuple[Any, ...] = (PACKED_DOCUMENTS, PACKED_ISOLATION)
