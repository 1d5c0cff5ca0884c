"""The code paths and denominator modes a variant exposes, and the keyword arguments of a call.

A path is ``forward`` or one entry of ``variant.forms``; its D10 form kind is parsed from its
name. A mode is one of the claimed ``denominators`` (or the ``normalized`` convention when the
variant declares none); the mode is passed to the call only when the variant declares
``denominators``.
"""

from __future__ import annotations

from typing import Any

from verify.properties.support.calls import call
from verify.properties.support.common import Example
from verify.spec.results import NoStatement, NotApplicable

FORWARD = "forward"


class FormView:
    """One of ``variant.forms`` presented with the variant's layout, for ``calls.call``; every
    other attribute is the variant's (its claims: ``calls.unrepresentable`` reads the kernel
    and the scale)."""

    def __init__(self, variant, form: str) -> None:
        self._variant = variant
        self.forward = variant.forms[form]
        self.layout = variant.layout

    def __getattr__(self, name: str):
        if name == "_variant":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self._variant, name)


def path_names(variant) -> tuple[str, ...]:
    """``forward`` and every entry of ``variant.forms`` (sorted): the code paths to check."""
    return (FORWARD, *sorted(variant.forms))


def with_path(variant, inputs):
    """Examples of ``inputs`` (a strategy), each with a drawn ``path`` among
    :func:`path_names`."""
    from hypothesis import strategies as st

    @st.composite
    def draw(draw_):
        x = draw_(inputs)
        return Example(x, {"path": draw_(st.sampled_from(path_names(variant)))})

    return draw()


def with_path_and_mode(variant, inputs, own=None, allowed: tuple[str, ...] | None = None):
    """Examples of ``inputs`` (a strategy): the property's own choices ``own(draw, x) -> dict``
    drawn first (none when ``own`` is None), then a ``path`` among :func:`path_names` and a
    ``denominator`` among the modes that apply to the drawn inputs (:func:`mode_st` within
    ``allowed``). The own choices whose names start with ``_`` (data the check reads, such as
    replacement values) come last in the example's choices."""
    from hypothesis import strategies as st

    @st.composite
    def draw(draw_):
        x = draw_(inputs)
        mine = own(draw_, x) if own is not None else {}
        choices = {k: v for k, v in mine.items() if not k.startswith("_")}
        choices["path"] = draw_(st.sampled_from(path_names(variant)))
        choices["denominator"] = draw_(mode_st(variant, x, allowed))
        choices.update((k, v) for k, v in mine.items() if k.startswith("_"))
        return Example(x, choices)

    return draw()


def with_mode_and_form(variant, inputs):
    """Examples of ``inputs`` (a strategy), each with a drawn ``denominator`` among :func:`modes`
    and then a drawn ``form`` among :func:`path_names`."""
    from hypothesis import strategies as st

    return st.builds(
        lambda x, mode, form: Example(x, {"denominator": mode, "form": form}),
        inputs,
        st.sampled_from(modes(variant)),
        st.sampled_from(path_names(variant)),
    )


def path_callable(variant, name: str):
    """``variant`` itself for ``forward``, else a :class:`FormView` of ``variant.forms[name]``."""
    return variant if name == FORWARD else FormView(variant, name)


def form_kind(name: str) -> str:
    """The D10 form kind of a path: ``parallel``/``recurrent``/``chunked`` from the form's name
    (its first ``/``-separated word), ``any`` (the worst of them) for ``forward`` or others."""
    head = name.split("/", 1)[0].split(":", 1)[0]
    return head if head in ("parallel", "recurrent", "chunked") else "any"


def modes(variant, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """Denominator modes to draw: the claimed ``denominators`` (or the ``normalized``
    convention), intersected with ``allowed``."""
    claimed = tuple(variant.denominators) or (("sum",) if variant.normalized else ("none",))
    if allowed is None:
        return claimed
    return tuple(m for m in claimed if m in allowed)


def normalized_modes(variant) -> tuple[str, ...]:
    """The claimed modes that divide by the kernel sum (``sum``)."""
    return modes(variant, ("sum",))


def convention_mode(variant) -> str:
    """The variant's own convention: ``sum`` when normalized, else ``none``."""
    return "sum" if variant.normalized else "none"


def sum_mode(variant) -> str | None:
    """``"sum"`` when the variant can divide by the kernel sum (its normalized output)."""
    if variant.denominators:
        return "sum" if "sum" in variant.denominators else None
    return "sum" if variant.normalized else None


def mode_st(variant, x, allowed: tuple[str, ...] | None = None):
    """Strategy of the claimed modes (within ``allowed``) that apply to inputs ``x``:
    layernorm needs d_v >= 2 (D7); rejects the example when none does."""
    from hypothesis import assume
    from hypothesis import strategies as st

    ok = [m for m in modes(variant, allowed) if not (m == "layernorm" and x.shape.d_v < 2)]
    assume(ok)
    return st.sampled_from(ok)


def require_mode(mode: str, d_v: int) -> None:
    """NotApplicable for layernorm with d_v < 2 (D7: the statistic of one value is 0)."""
    if mode == "layernorm" and d_v < 2:
        raise NotApplicable("layernorm needs d_v >= 2 (D7)")


def call_kwargs(variant, mode: str, attn_mask=None) -> dict[str, Any]:
    """The keyword arguments of a call in ``mode`` (passed when the variant declares
    ``denominators``) with ``attn_mask`` (when given)."""
    kw: dict[str, Any] = {}
    if variant.denominators:
        kw["denominator"] = mode
    if attn_mask is not None:
        kw["attn_mask"] = attn_mask
    return kw


def call_mode(variant, x, mode: str | None, *, allow_nonfinite: bool = False):
    """The variant's ``forward`` on inputs ``x`` (with its mask) in denominator ``mode`` (None:
    no mode passed), through ``calls.call``."""
    kw = call_kwargs(variant, mode, x.attn_mask)
    if mode is None:
        kw.pop("denominator", None)
    return call(variant, x.q, x.k, x.v, causal=x.causal, allow_nonfinite=allow_nonfinite, **kw)


def bounded_call(variant, path: str, mode: str, x, bound, *, device: str | None = None):
    """The output of ``path`` (:func:`path_callable`) on inputs ``x`` (with their mask) in
    ``mode``, NaN/inf allowed only where ``bound`` (the stated bound of each output element)
    makes no statement; on ``device`` (the inputs and the mask moved there) when given.

    Raises:
        NotApplicable: every row's exact output is undefined (a vanishing kernel sum or norm,
            decided exactly from the inputs: ``support.defined``).
        NoStatement: no element of ``bound`` is finite otherwise (a denominator may vanish:
            decided by the computed bound, so the draw is kept, ``support.observe``).
    """
    import numpy as np

    from verify.properties.support.defined import all_undefined

    if all_undefined(variant, x, mode):
        raise NotApplicable(f"every row's exact {mode} output is undefined (D7): no statement")
    finite = np.isfinite(bound)
    if not finite.any():
        raise NoStatement("every row's denominator may vanish (odd kernel): no statement")
    kw = call_kwargs(variant, mode, x.attn_mask)
    q, k, v = x.q, x.k, x.v
    if device is not None:
        q, k, v = q.to(device), k.to(device), v.to(device)
        if "attn_mask" in kw:
            kw["attn_mask"] = kw["attn_mask"].to(device)
    fn = path_callable(variant, path)
    return call(fn, q, k, v, causal=x.causal, allow_nonfinite=not finite.all(), **kw)
