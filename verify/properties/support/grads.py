"""The gradients of a variant and of the plain-torch reference, and the examples of the gradient
properties: inputs under the variant's claims (optionally masked, with a key hidden from every
query or a query row with no visible key), each with the seed of its upstream gradient."""

from __future__ import annotations

from typing import Any

import numpy as np

from verify.exact.reference import reference_attention
from verify.properties.support.calls import call
from verify.properties.support.common import (
    MIN_MAGNITUDE,
    Example,
    claim_kwargs,
    kernel_name,
    radius_strategy,
    shape_strategy,
)
from verify.properties.support.inputs import by_causal, poison_value
from verify.properties.support.paths import call_kwargs, path_callable
from verify.spec.results import NoStatement, NotApplicable, VariantError, VariantRaised

# ----------------------------------------------------------------------------- gradients


def backward_grads(out, inputs, g, *, retain_graph: bool = False) -> list:
    """The gradients of ``out`` against the leaf tensors ``inputs`` for the upstream gradient
    ``g``, taken the way training takes them: ``out.backward(g)`` and each leaf's ``.grad``
    (None where the output does not depend on it). Implementations that support only
    ``backward()`` (reentrant activation checkpointing refuses ``torch.autograd.grad``) are
    differentiated too. The leaves' ``.grad`` is cleared before and after."""
    for t in inputs:
        t.grad = None
    out.backward(g, retain_graph=retain_graph)
    grads = [t.grad for t in inputs]
    for t in inputs:
        t.grad = None
    return grads


def require_zero_rows(variant, x) -> None:
    """NotApplicable when ``x`` has query rows with no visible key and the variant does not
    declare the zeros convention for them (``empty_rows``): the reference's gradients (and
    the exact zeros of ``gradient_masks``) are those of zero rows, and what an undeclared row
    returns is a convention, reported by ``masks``, never failed here."""
    from verify.properties.support.common import claimed_visible

    if variant.empty_rows == "zeros" or (x.attn_mask is None and variant.window is None):
        return
    if (~claimed_visible(variant, x).any(axis=-1)).any():
        raise NotApplicable(
            "rows with no visible key: the zeros convention is not declared "
            f"(empty_rows={variant.empty_rows!r})"
        )


def grad_call(run, leaves, plain, form: str):
    """``run(*leaves)`` (inputs that require grad). A forward that raises only on such inputs
    (no backward, e.g. eager flex on CPU) fails the gradient property: VariantError, not the
    VariantRaised of an input outside the variant's domain (which ``run(*plain)`` without grad
    raises again)."""
    import torch

    try:
        return run(*leaves)
    except VariantRaised as exc:
        with torch.no_grad():
            run(*plain)
        raise VariantError(
            f"the forward ({form}) raised only on inputs that require grad: {exc} (no "
            "backward: --not-differentiable declares that)"
        ) from exc


def variant_gradients(variant, form: str, x, mode: str, g):
    """(output, dq, dk, dv) of the variant on canonical inputs, upstream gradient ``g``.

    Raises:
        VariantError: the forward or the backward raised, the output does not depend on the
            inputs through autograd, or a gradient is NaN/inf or of the wrong shape.
    """
    import torch

    require_zero_rows(variant, x)
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (x.q, x.k, x.v))
    kw = call_kwargs(variant, mode, x.attn_mask)
    fn = path_callable(variant, form)
    run = lambda *t: call(fn, *t, causal=x.causal, **kw)  # noqa: E731
    out = grad_call(run, (q, k, v), (x.q, x.k, x.v), form)
    try:
        grads = backward_grads(out, (q, k, v), g)
    except Exception as exc:
        raise VariantError(
            f"backward ({form}) raised {type(exc).__name__}: {exc} (is the forward differentiable?)"
        ) from exc
    result = []
    for name, t, gr in zip(("dq", "dk", "dv"), (q, k, v), grads):
        if gr is None:  # the output does not depend on this input at all
            gr = torch.zeros_like(t)
        if tuple(gr.shape) != tuple(t.shape):
            raise VariantError(f"{name} has shape {tuple(gr.shape)}, expected {tuple(t.shape)}")
        if not torch.isfinite(gr).all():
            bad = (~torch.isfinite(gr)).nonzero()[0].tolist()
            raise VariantError(f"{name} ({form}) has NaN/inf (first at index {bad})")
        result.append(gr)
    return (out.detach(), *result)


def reference_kwargs(variant, x, mode: str) -> dict[str, Any]:
    """:func:`reference_attention`'s keyword arguments for the variant's claims in ``mode``."""
    return dict(kernel=kernel_name(variant), **claim_kwargs(variant, x, denominator=mode))


def reference_gradients(variant, x, mode: str, g, dtype):
    """(output, dq, dk, dv) of :func:`reference_attention` in ``dtype`` on the inputs cast up
    (or down) to it, on the CPU; ``g`` cast likewise. Returned as float64 tensors."""
    import torch

    kw = reference_kwargs(variant, x, mode)
    if kw.get("projection") is not None:
        kw["projection"] = kw["projection"].to(dtype)
    q, k, v = (t.detach().cpu().to(dtype).requires_grad_(True) for t in (x.q, x.k, x.v))
    if kw["attn_mask"] is not None:
        kw["attn_mask"] = kw["attn_mask"].cpu()
    out = reference_attention(q, k, v, **kw)
    grads = backward_grads(out, (q, k, v), g.detach().cpu().to(dtype))
    grads = [torch.zeros_like(t) if gr is None else gr for t, gr in zip((q, k, v), grads)]
    return tuple(t.detach().to(torch.float64) for t in (out, *grads))


def require_defined(variant, x, mode: str) -> None:
    """NotApplicable where the claimed computation is undefined on these inputs: a vanishing
    denominator (signed kernels) or norm (l2/rms/layernorm of a zero or constant N), decided
    exactly (``support.defined``); NoStatement where only the float64 reference output is not
    finite (a float decision, ``support.observe``)."""
    import torch

    from verify.spec.structure import has_structure
    from verify.spec.vocabulary import USER_MAP

    if variant.linear_map == USER_MAP:  # defined where every visible row's kernel sum is not 0
        from verify.properties.support.common import user_features

        fq, fk = (np.asarray(t.detach().cpu().double()) for t in user_features(variant, x))
        sums = np.where(x.visible(), np.einsum("bhtm,bhsm->bhts", fq, fk), 0.0).sum(-1)
        if mode in ("sum",) and (np.abs(sums) == 0).any():
            raise NotApplicable("the declared features' kernel sum vanishes on a row")
        return
    if has_structure(variant):  # positive weights: defined wherever a key is visible
        if variant.positive_kernel:
            return
        raise NotApplicable(f"a signed kernel ({variant.kernel}) under structural claims")
    from verify.properties.support.defined import any_undefined

    if any_undefined(variant, x, mode):  # decided exactly: the draw is rejected everywhere
        raise NotApplicable(f"the output is undefined here ({mode}: an exactly vanishing sum)")
    g = torch.zeros((*x.q.shape[:-1], x.v.shape[-1]), dtype=torch.float64)
    out = reference_gradients(variant, x, mode, g, torch.float64)[0]
    if not bool(torch.isfinite(out).all()):  # decided by floats: no draw rejected on it
        raise NoStatement(f"the output is undefined here ({mode}: a vanishing denominator or norm)")


def max_abs(t) -> float:
    """max |t| (0 for an empty tensor)."""
    return float(t.abs().max()) if t.numel() else 0.0


# ----------------------------------------------------------------------------- examples


def upstream_gradient(q, v, seed: int, dtype=None):
    """The upstream gradient g of an example with queries q (B, H, T, d) and values
    v (B, H, S, d_v): shape (B, H, T, d_v), elements uniform in [-1, 1] from
    ``torch.Generator().manual_seed(seed)`` in float64, rounded once to ``dtype`` (default the
    dtype of q), on the device of q."""
    import torch

    gen = torch.Generator().manual_seed(int(seed))
    shape = (*q.shape[:-1], v.shape[-1])
    g = torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1
    return g.to(dtype=dtype or q.dtype, device=q.device)


class GradExample(Example):
    """An example with the seed of its upstream gradient; the snippet rebuilds g too."""

    def snippet(self) -> str:
        return super().snippet() + (
            "from verify.properties.support.grads import upstream_gradient\n\n"
            f"g = upstream_gradient(q, v, {self.choices['g_seed']})  # the upstream gradient\n"
            "# grads: o.backward(g), then q.grad, k.grad, v.grad (q, k, v requiring grad)\n"
        )


def grad_inputs(variant, ctx, *, cases=("random",), masked: bool = False, **shape_kw):
    """Inputs under the variant's claims (causal support, length multiple, radius, dtype).

    One strategy per causal flag, built once (a strategy built inside a draw pays hypothesis'
    reflection cost on every draw and shrink step). ``masked``: ``masked_inputs`` (a drawn
    bool mask, keys hidden from every query poisoned with 1e10)."""
    from verify.strategies import attention_inputs, masked_inputs

    make = masked_inputs if masked else attention_inputs
    extra = {} if masked else {"cases": cases}
    return by_causal(
        variant,
        lambda is_causal: make(
            shape=shape_strategy(variant, causal=is_causal, **shape_kw),
            dtype=ctx.torch_dtype,
            device=ctx.device,
            causal=is_causal,
            radius=radius_strategy(variant, ctx),
            min_magnitude=MIN_MAGNITUDE,
            **extra,
        ),
    )


def _force(x, force: str, b: int, h: int, j: int):
    """Hide one key (b, h, :, j) from every query and poison it (``dead_key``: k = p, v = -p,
    :func:`~verify.properties.support.inputs.poison_value`), or hide every
    key from one query row (b, h, j) (``empty_row``); indices wrapped into range."""
    from dataclasses import replace

    s = x.shape
    b, h = b % s.B, h % s.H
    mask = x.attn_mask.expand(s.B, s.H, s.T, s.S).clone()
    k, v = x.k.clone(), x.v.clone()
    if force == "empty_row":
        mask[b, h, j % s.T, :] = False
    else:
        j = j % s.S
        mask[b, h, :, j] = False
        p = poison_value(x.dtype)
        k[b, h, j] = p
        v[b, h, j] = -p
    return replace(x, k=k, v=v, attn_mask=mask)


def masked_strategy(variant, ctx, *, force: str | None = None):
    """``masked_inputs`` under the variant's claims; ``force`` adds one key hidden from every
    query (``"dead_key"``, poisoned like the others) or one query row with no visible key
    (``"empty_row"``)."""
    from hypothesis import strategies as st

    base = grad_inputs(variant, ctx, masked=True)
    if force is None:
        return base
    index = st.integers(0, 63)
    return st.builds(lambda x, b, h, j: _force(x, force, b, h, j), base, index, index, index)


def with_grad_output(inputs, **choices):
    """Examples: inputs, the given choices and the seed of the upstream gradient g."""
    from hypothesis import strategies as st

    names = tuple(choices)

    def build(x, seed, *values):
        return GradExample(x, {**dict(zip(names, values)), "g_seed": seed})

    return st.builds(build, inputs, st.integers(0, 2**31 - 1), *choices.values())


def upstream_of(ex: Example):
    """The upstream gradient of a :func:`with_grad_output` example."""
    return upstream_gradient(ex.inputs.q, ex.inputs.v, ex.choices["g_seed"])


#: long gradient examples: keys past 64 with a last partial block up to LONG_GRAD_BLOCKS
#: blocks, head dimensions up to 256, random, low-rank and near-duplicate keys (the regimes
#: where released backward kernels hid their bugs)
LONG_GRAD_BLOCKS = 4
LONG_GRAD_DIM = 256
#: numbers autograd may keep of a feature-form path's states on a long example (T states of
#: D5's size): 2^25 float64 numbers, 256 MiB; Taylor-3 at d = 100 would keep 2.7e9 (the dev
#: profile's worker was killed for memory at 22 GB)
LONG_GRAD_STATE_NUMBERS = 2**25


def long_grad_dim(variant, form: str) -> int:
    """The largest head dimension of a long gradient example on path ``form``.

    The parallel form and the maps with m = d features keep O(T S) or O(T d d_v) numbers:
    :data:`LONG_GRAD_DIM`. A recurrent or chunked form of Taylor-N keeps, for autograd, a
    state of D5's ``state_numbers(N, d, d_v)`` (tensor basis: the larger) per token: d is the
    largest with T_max times that within :data:`LONG_GRAD_STATE_NUMBERS` (at least 4).
    """
    from derivations.state_size import state_numbers
    from verify.properties.support.common import LONG_BLOCK, LONG_VALUE_DIM
    from verify.properties.support.paths import FORWARD

    order = variant.order
    if form == FORWARD or variant.kernel_family != "taylor" or not order or order < 2:
        return LONG_GRAD_DIM
    t_max = LONG_BLOCK * (LONG_GRAD_BLOCKS + 1)
    d = LONG_GRAD_DIM
    while d > 4 and t_max * state_numbers(order, d, LONG_VALUE_DIM, "tensor") > (
        LONG_GRAD_STATE_NUMBERS
    ):
        d -= 1
    return d


def long_grad_examples(variant, ctx):
    """``gradients-vs-reference``'s long examples: :func:`~verify.properties.support.common.
    long_inputs_strategy` with the key structures and :data:`LONG_GRAD_BLOCKS`, a drawn path
    and denominator; head dimensions up to :func:`long_grad_dim` of the drawn path."""
    from hypothesis import strategies as st

    from verify.properties.support.common import long_inputs_strategy
    from verify.properties.support.paths import modes, path_names
    from verify.seeded import KEY_STRUCTURES

    heads = None
    if variant.kv_heads is not None and variant.kernel_family == "softmax":
        heads = (2 * variant.kv_heads, 2 * variant.kv_heads)

    def inputs(max_dim):
        return long_inputs_strategy(
            variant, ctx, beyond_overflow=False, keys=KEY_STRUCTURES, blocks=LONG_GRAD_BLOCKS,
            max_dim=max_dim, heads=heads,
        )  # fmt: skip

    modes_st = st.sampled_from(modes(variant))
    forms = path_names(variant)
    dims = {form: long_grad_dim(variant, form) for form in forms}
    if set(dims.values()) == {LONG_GRAD_DIM}:
        return with_grad_output(inputs(LONG_GRAD_DIM), form=st.sampled_from(forms),
                                denominator=modes_st)  # fmt: skip
    # a form whose states grow with d draws its own (smaller) head dimensions
    per_form = {
        form: with_grad_output(inputs(dims[form]), form=st.just(form), denominator=modes_st)
        for form in forms
    }
    return st.sampled_from(forms).flatmap(per_form.__getitem__)
