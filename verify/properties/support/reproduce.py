"""A failure's reproducer: the code ``attn-theory check`` prints under each failure, and what
that code calls.

:func:`code` composes it from the example's snippet (which rebuilds the tensors, ``q, k, v``,
``attn_mask``, ``causal`` and ``scale``, with the property's choices as ``# name = value``
comment lines): it builds the variant with the claims checked, calls it the way the failing
run did (the code path of a ``path`` or ``form`` choice, k and v with the claimed G kv heads,
the ``key_padding_mask`` or ``attn_bias`` the property passed) and prints the output, the
reference and the difference against the bound::

    ref = reference(variant, q, k, v, causal=causal)
    print(ref.difference(o))

then re-runs the failing property's own check on the rebuilt example (:func:`recheck`), which
prints each of its observations against its bound: the statement that failed. A property of
another path (the state API, a decode path, the packed function, the feature map, a BlockMask)
calls that path instead, with the choices the example drew, and prints its output against the
reference (``verify.properties.support.reproduce_paths``).

:func:`reference` is the claimed kernel evaluated exactly (the mpmath oracle,
``verify.exact.oracle``; past ``common.LONG_PAIRS`` pairs the float64 reference with its own
bound, D10 recipe 6) with the element-wise bound the checks state for the claimed computation
(D10, the claimed or probed precision model, the declared eps, scale and compute dtype:
``verify.exact.errors``), the same pair the properties compare the variant with.
"""

from __future__ import annotations

import ast
import re
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
        if tuple(o.shape) != tuple(self.exact.shape):
            return (
                f"o has shape {tuple(o.shape)}, the reference {tuple(self.exact.shape)}: the "
                "variant returns the wrong shape (EXCEEDS any bound)"
            )
        err = (o.detach().cpu().to(torch.float64) - self.exact).abs()
        over = int((~(err <= self.bound)).sum())
        if self._eb is not None:
            obs = compare(o, self._eb, self._result, what="|o - reference|")
            where, observed, bound, ratio = obs.where, obs.observed, obs.bound, obs.ratio
        else:  # a bound without an error model's record: the worst element by ratio
            with np.errstate(divide="ignore", invalid="ignore"):
                r = np.where(self.bound.numpy() > 0, (err / self.bound).numpy(), np.inf)
            r = np.where(err.numpy() == 0, 0.0, r)
            i = np.unravel_index(int(np.argmax(r)), r.shape) if r.size else ()
            where = str(tuple(int(j) for j in i))
            observed, bound = (float(err[i]), float(self.bound[i])) if r.size else (0.0, 0.0)
            ratio = float(r[i]) if r.size else 0.0
        verdict = "within the bound" if ratio <= 1 else "EXCEEDS the bound"
        return (
            f"max |o - reference| = {float(err.max()) if err.numel() else 0.0:.3e}; worst "
            f"element {where}: {observed:.3e} vs bound {bound:.3e} (ratio "
            f"{ratio:.3g}, {verdict}); {over} of {err.numel()} elements over their bound"
        )

    @classmethod
    def of(cls, exact, eb) -> Reference:
        """The reference of a float64 array ``exact`` with the error bound ``eb`` stated for it
        (a ``verify.exact.errors.ErrorBound``: a property's own reference, e.g. flex's)."""
        import torch

        arr = np.asarray(exact, dtype=np.float64)
        return cls(torch.from_numpy(arr), torch.from_numpy(np.asarray(eb.bound, dtype=np.float64)),
                   eb.description, _result=arr, _eb=eb)  # fmt: skip


def reference(
    variant,
    q,
    k,
    v,
    *,
    causal: bool,
    attn_mask=None,
    denominator: str = "sum",
    key_padding_mask=None,
    attn_bias=None,
    path: str = "forward",
    device: str | None = None,
) -> Reference:
    """The suite's reference for ``variant``'s claims on canonical ``(B, H, T, d)`` inputs.

    k and v may have fewer heads than q (the claimed G kv heads); ``key_padding_mask`` (B, S),
    True = keep, is applied as the attn_mask (B, 1, 1, S); ``attn_bias`` (broadcastable to
    (B, H, T, S)) is added to the scaled scores (``common.biased_reference``); ``path`` (a
    code path of ``verify.properties.support.paths``) selects the form kind of the bound;
    ``device`` (default: the inputs') the device whose arithmetic the bound models. Without
    a reference for these claims (kernel unknown, FAVOR+ without a projection) or for inputs
    outside the error model, ``exact`` and ``bound`` are None and ``missing`` says why.
    """
    import torch

    from verify.properties.support.base import RunContext
    from verify.properties.support.common import biased_reference, exact_and_bound
    from verify.properties.support.paths import form_kind
    from verify.spec.results import NotApplicable
    from verify.strategies import AttentionInputs, Shape

    B, H, T, d = (int(n) for n in q.shape)
    S, d_v = int(k.shape[-2]), int(v.shape[-1])
    if key_padding_mask is not None:
        keep = key_padding_mask.to(torch.bool)[:, None, None, :]
        attn_mask = keep if attn_mask is None else attn_mask & keep
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
        device=device or str(q.device.type),
        compute_dtype=getattr(variant, "compute_dtype", None),
    )
    form = form_kind(path)
    try:
        if attn_bias is not None:
            result, eb = biased_reference(variant, x, ctx, attn_bias, denominator=denominator,
                                          form=form)  # fmt: skip
        else:
            result, eb = exact_and_bound(variant, x, ctx, denominator=denominator, form=form)
    except NotApplicable as exc:
        return Reference(None, None, "", missing=str(exc))
    return Reference(
        exact=torch.from_numpy(np.asarray(result.float64, dtype=np.float64)),
        bound=torch.from_numpy(np.asarray(eb.bound, dtype=np.float64)),
        description=eb.description,
        _result=result,
        _eb=eb,
    )


# ----------------------------------------------------------------------------- re-check


def example_of(q, k=None, v=None, *, causal: bool = False, attn_mask=None, scale=None,
               choices=None):  # fmt: skip
    """The example a property drew, rebuilt from its tensors and choices: an ``Example`` of
    attention inputs (a ``GradExample`` when the choices hold the upstream gradient's
    ``g_seed``). With ``q`` a list of ``(q, k, v, attn_mask, causal, scale)`` tuples (and no
    k, v), an example of several inputs (``.items``)."""
    import dataclasses
    from types import SimpleNamespace

    from verify.properties.support.common import Example
    from verify.properties.support.grads import GradExample
    from verify.properties.support.inputs import make_inputs

    def one(q, k, v, attn_mask, causal, scale):
        x = make_inputs(q, k, v, causal=causal, attn_mask=attn_mask)
        return dataclasses.replace(x, scale=scale)

    choices = {c: _array(v_) if c.startswith("_") else v_ for c, v_ in (choices or {}).items()}
    x = SimpleNamespace(items=[one(*t) for t in q]) if k is None else one(
        q, k, v, attn_mask, causal, scale)  # fmt: skip
    return (GradExample if "g_seed" in choices else Example)(x, choices)


def example_with(inputs, choices=None):
    """An example of a property whose inputs are not one set of attention inputs (the packed
    rows by name, None for a BlockMask's sizes): ``inputs`` with ``choices`` (data choices as
    float64 arrays, as :func:`example_of` has them)."""
    from verify.properties.support.common import Example

    return Example(inputs, {c: _array(v) if c.startswith("_") else v
                            for c, v in (choices or {}).items()})  # fmt: skip


def _array(value):
    """Choices that hold data (``_``-named: replacement values, biases) as float64 arrays, the
    way the properties drew them; others as they are."""
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], (list, tuple)):
        try:
            return np.asarray(value, dtype=np.float64)
        except (ValueError, TypeError):
            return type(value)(_array(v) for v in value)
    return value


def recheck(prop, variant, example, *, dtype: str | None = None, device: str = "cpu") -> bool:
    """Run property ``prop``'s check (a ``verify.properties`` entry, e.g.
    ``verify.properties.get("head-groups")``) on ``example`` and print each observation
    against its bound ('> bound' where it fails); True when one fails.

    ``dtype`` defaults to the dtype of the example's tensors."""
    from verify.properties.support import observe
    from verify.properties.support.base import RunContext
    from verify.spec.results import NotApplicable, VariantError

    if dtype is None:
        inner = getattr(example, "inputs", None)
        dtype = str(getattr(inner, "dtype", None) or getattr(example, "dtype", "float64"))
        dtype = dtype.removeprefix("torch.")
    ctx = RunContext(dtype=dtype, device=device, compute_dtype=variant.compute_dtype)
    try:
        result = prop.check(variant, example, ctx)
    except NotApplicable as exc:
        print(f"{prop.id}: not applicable to this example ({exc})")
        return False
    except VariantError as exc:
        print(f"{prop.id}: FAILS: {exc}")
        return True
    except (AttributeError, KeyError, TypeError) as exc:  # an example of another kind
        print(f"{prop.id}: this example cannot be re-checked here ({type(exc).__name__}: {exc})")
        return False
    rows = result if isinstance(result, list) else [result]
    for o in rows:
        rel = "> bound" if o.ratio > 1 else "<= bound"
        where = f" at {o.where}" if o.where else ""
        print(f"{prop.id}: observed {o.observed:.3e} {rel} {o.bound:.3e} (ratio {o.ratio:.3g})"
              f"{where}; {o.detail}")  # fmt: skip
    return observe.worst(result).ratio > 1


# ----------------------------------------------------------------------------- the code


def choices_of(snippet: str) -> dict[str, Any]:
    """The property's choices an example's snippet states as ``# name = value`` comment lines
    (values Python literals or numpy array reprs, which become nested lists; other comments
    and values that do not parse are left out)."""
    out: dict[str, Any] = {}
    for m in re.finditer(r"^# (\w+) = (.+)$", snippet, flags=re.M):
        try:
            out[m.group(1)] = _value(m.group(2).strip())
        except (ValueError, SyntaxError, TypeError, NameError):
            continue
    return out


def _value(text: str):
    """A literal, or a numpy array's repr (``array([...])``, nested in tuples or lists) as
    nested lists: no name but ``array`` is known while evaluating it."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pass
    if "..." in text:  # a summarized array: not its values
        raise ValueError(text)
    tree = ast.parse(text, mode="eval")
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    if not names <= {"array", "float64", "float32", "inf", "nan"}:
        raise NameError(sorted(names))
    space = {
        "__builtins__": {},
        "array": lambda a, dtype=None: np.asarray(a).tolist(),
        **dict.fromkeys(("float64", "float32")),
        "inf": float("inf"),
        "nan": float("nan"),
    }
    return eval(compile(tree, "<choice>", "eval"), space)  # noqa: S307 - names checked above


#: heads of a rounding-bias example compared element by element with the reference
SHOWN_HEADS = 8
#: the marker of an example holding several attention inputs (each section rebuilds one)
SEVERAL = "# --- input "


def code(
    spec: str,
    variant,
    inputs_snippet: str,
    *,
    claims: dict | None = None,
    property_id: str | None = None,
    dtype: str | None = None,
    device: str = "cpu",
) -> str:
    """The reproducer of a failure of ``property_id`` (module docstring): ``inputs_snippet``
    (the example's snippet), the lines that build the variant from ``spec`` with ``claims``
    (the claims beyond its import spec) and rebuild the example, the reference (when the
    example is attention inputs and the claims have one), the call of the path that failed as
    the failing run did with its output against the reference (``forward``, or the path of
    ``verify.properties.support.reproduce_paths``), then the property re-checked on the
    example."""
    from verify.properties.support import reproduce_paths as paths

    claims = claims or {}
    if claims:
        imports = "apply_claims, as_variant"
        build = f"apply_claims(as_variant({spec!r}), {claims!r})"
    else:
        imports, build = "as_variant", f"as_variant({spec!r})"
    several = SEVERAL in inputs_snippet
    attention = "attn_mask = " in inputs_snippet
    choices = choices_of(inputs_snippet)
    rebuilt = re.search(r"^example = ", inputs_snippet, flags=re.M) is not None
    own = paths.example_lines(property_id, choices, inputs_snippet) if not rebuilt else None
    lines = [_collected(inputs_snippet) if several else inputs_snippet.rstrip()]
    lines += ["", f"from verify.spec.target import {imports}", "",
              f"variant = {build}  # {spec} with the claims checked"]  # fmt: skip
    if own is not None:
        lines += ["", *own]
    elif attention and property_id and not rebuilt:
        call = (
            "items, " if several else "q, k, v, causal=causal, attn_mask=attn_mask, scale=scale, "
        )
        lines += [
            "",
            "from verify.properties.support.reproduce import example_of",
            "",
            f"example = example_of({call}choices={choices!r})",
        ]
    body = paths.lines(property_id, variant, choices, dtype) if property_id else None
    if body is not None:
        body = ["", "from verify.properties.support.reproduce import reference", *body]
    elif attention:
        body = _forward_lines(variant, inputs_snippet, choices, property_id, several, dtype)
    else:
        body = []
    if several:  # each input in turn
        body = ["", "for x in items:", "    q, k, v, attn_mask, causal, scale = x",
                *("    " + line if line else "" for line in body)]  # fmt: skip
    lines += body
    if property_id and (attention or rebuilt or own is not None):
        where = "" if device == "cpu" else f", device={device!r}"
        lines += [
            "",
            f"# the failing statement ({property_id}) re-checked on this example: each "
            "observation against its bound",
            "from verify.properties import get",
            "from verify.properties.support.reproduce import recheck",
            "",
            f"recheck(get({property_id!r}), variant, example, dtype={dtype!r}{where})",
        ]
    return "\n".join(lines) + "\n"


def _collected(inputs_snippet: str) -> str:
    """A snippet of several inputs with each section's tensors collected in ``items``."""
    keep = "items.append((q, k, v, attn_mask, causal, scale))"
    parts = inputs_snippet.rstrip().split(SEVERAL)
    out = ["items = []  # (q, k, v, attn_mask, causal, scale) of each input", parts[0].rstrip()]
    out += [f"{SEVERAL}{p.rstrip()}\n{keep}\n" for p in parts[1:]]
    return "\n".join(x for x in out if x)


def _has_mask(inputs_snippet: str) -> bool:
    """Whether the snippet's (first) assignment of ``attn_mask`` gives it a value other than
    None (``attn_mask = ...`` or a tuple assignment such as ``q, k, v, attn_mask = ...``)."""
    m = re.search(r"^([\w, ]*\battn_mask) = (.+)$", inputs_snippet, flags=re.M)
    if m is None:
        return False
    names = [n.strip() for n in m.group(1).split(",")]
    values = [x.strip() for x in m.group(2).split(",")]
    value = values[names.index("attn_mask")] if len(names) == len(values) else m.group(2)
    return value.strip() != "None"


def _call_kwargs(variant, inputs_snippet: str, choices: dict[str, Any]) -> str:
    kwargs = "causal=causal"
    if _has_mask(inputs_snippet):
        kwargs += ", attn_mask=attn_mask"
    if "denominator" in choices and variant.denominators:
        kwargs += f", denominator={choices['denominator']!r}"
    if "keep" in choices:
        kwargs += ", key_padding_mask=key_padding_mask"
    if "_bias" in choices:
        kwargs += ", attn_bias=attn_bias"
    return kwargs


def _forward_lines(variant, inputs_snippet: str, choices, property_id, several, dtype) -> list:
    """The lines of a property called through ``forward`` (or a drawn form): the inputs as the
    failing run passed them, the reference, the call and its output against the reference,
    and the calls the property adds (every form, the shifted keys, the CUDA call)."""
    from verify.properties.support import reproduce_paths as paths
    from verify.spec import flex

    out = _prep_lines(variant, choices, property_id)
    kwargs = _call_kwargs(variant, inputs_snippet, choices)
    path = choices.get("path") or choices.get("form") or "forward"
    target = "variant.forward" if path == "forward" else f"variant.forms[{path!r}]"
    call = _call_expr(variant, target, kwargs)
    flexed = flex.has_flex(variant) and not several
    known = variant.parsed_kernel.known or flexed
    if flexed:
        out += ["", *paths.flex_reference_lines(dtype)]
    elif known:
        out += _reference_lines(variant, inputs_snippet, choices, property_id)
    shown = ["print('o =', o)", *(["print(ref.difference(o))"] if known else [])]
    if property_id == "accepts-inputs":  # the failure may be the call raising
        said = re.sub(r"[^\w/:=.-]", "", path)
        out += ["", "try:", f"    o = {call}", "except Exception as exc:  # an input of its domain",
                f"    print(f'{said}: FAILS: raised {{type(exc).__name__}}: {{exc}} (an input of "
                "its domain)')", "else:", *("    " + x for x in shown)]  # fmt: skip
    else:
        out += ["", f"o = {call}", *shown]
    if not known:
        return out
    out += _forms_lines(variant, choices, kwargs)
    if property_id == "softmax-shift-invariance" and paths.SHIFT_LINE.search(inputs_snippet):
        ref_kw = _reference_kwargs(variant, inputs_snippet, choices, property_id)
        out += paths.shift_lines(_call_expr(variant, target, kwargs, k="k + u"), ref_kw)
    if property_id == "device-agreement":
        dev = {n: f"{n}.to('cuda')" for n in ("q", "k", "v")}
        cuda_kw = re.sub(r"=(attn_mask|key_padding_mask|attn_bias)\b", r"=\1.to('cuda')", kwargs)
        ref_kw = _reference_kwargs(variant, inputs_snippet, choices, property_id)
        out += [
            "",
            "# the same call on CUDA, against the reference with the CUDA arithmetic's bound",
            f"ref_cuda = reference(variant, q, k, v, {ref_kw}, device='cuda')",
            f"o_cuda = {_call_expr(variant, target, cuda_kw, **dev)}",
            "print('o (cuda) =', o_cuda)",
            "print(ref_cuda.difference(o_cuda))",
        ]
    return out


def _prep_lines(variant, choices: dict[str, Any], property_id) -> list:
    """The inputs as the failing run passed them: the causal flag causal-alignment uses, k and
    v with the claimed G kv heads, the key padding mask and the score bias drawn."""
    out = [""]
    if property_id == "causal-alignment":
        out.append("causal = True  # causal-alignment calls with causal=True (T != S)")
    if "kv_heads" in choices:  # the call with G kv heads: every (H / G)-th head of k and v
        out += [
            f"G = {int(choices['kv_heads'])}  # the claimed kv heads",
            "k, v = k[:, :: q.shape[1] // G].contiguous(), v[:, :: q.shape[1] // G].contiguous()",
        ]
    if "keep" in choices:
        out.append(f"key_padding_mask = torch.tensor({choices['keep']!r}, dtype=torch.bool)")
    if "_bias" in choices:
        out.append(f"attn_bias = torch.tensor({choices['_bias']!r}, dtype=torch.float64).to(q)")
    if property_id == "rounding-bias":  # hundreds of independent heads
        out += [
            f"# the first {SHOWN_HEADS} heads against the reference (the oracle of every head "
            "takes minutes); the statement,",
            "# the mean signed error over every head, is re-checked below on all of them",
            f"q, k, v = q[:, :{SHOWN_HEADS}], k[:, :{SHOWN_HEADS}], v[:, :{SHOWN_HEADS}]",
        ]
    return out


def _call_expr(variant, target: str, kwargs: str, q: str = "q", k: str = "k", v: str = "v"):
    """The call of ``target`` on canonical q, k, v (transposed for a BTHD variant)."""
    if variant.layout == "BTHD":  # the variant takes (B, T, H, d): q, k, v here are (B, H, T, d)
        return f"{target}(*(t.transpose(1, 2) for t in ({q}, {k}, {v})), {kwargs}).transpose(1, 2)"
    return f"{target}({q}, {k}, {v}, {kwargs})"


def _forms_lines(variant, choices: dict[str, Any], kwargs: str) -> list[str]:
    """Every alternative form against the reference, when the example drew no code path (a
    property comparing the forms): the form that fails shows."""
    if not variant.forms or "path" in choices or "form" in choices or variant.layout != "BHTD":
        return []
    return [
        "for name, form in variant.forms.items():  # every alternative form of the variant",
        f"    print(name, ref.difference(form(q, k, v, {kwargs})))",
    ]


def _reference_kwargs(variant, inputs_snippet: str, choices: dict[str, Any], property_id) -> str:
    ref_kw = "causal=causal"
    if _has_mask(inputs_snippet):
        ref_kw += ", attn_mask=attn_mask"
    if property_id == "causal-alignment":  # the declared alignment's mask, as the check has it
        ref_kw = "causal=False, attn_mask=aligned"
    if "denominator" in choices:
        ref_kw += f", denominator={choices['denominator']!r}"
    if "keep" in choices:
        ref_kw += ", key_padding_mask=key_padding_mask"
    if "_bias" in choices:
        ref_kw += ", attn_bias=attn_bias"
    path = choices.get("path") or choices.get("form") or "forward"
    if path != "forward":
        ref_kw += f", path={path!r}"
    return ref_kw


def _reference_lines(variant, inputs_snippet: str, choices: dict[str, Any], property_id) -> list:
    aligned = []
    if property_id == "causal-alignment":  # the declared alignment's mask, as the check has it
        aligned = [
            "from verify.spec.visibility import visible",
            "",
            "aligned = visible(q.shape[-2], k.shape[-2], causal=True, "
            f"alignment={variant.causal_alignment!r}, numpy=False)[None, None]",
        ]
    ref_kw = _reference_kwargs(variant, inputs_snippet, choices, property_id)
    return [
        "",
        f"# the suite's reference: the claimed kernel ({variant.kernel}) in exact arithmetic "
        "on the same inputs,",
        "# with the derived bound of each output element (what the checks compare with)",
        "from verify.properties.support.reproduce import reference",
        *aligned,
        "",
        f"ref = reference(variant, q, k, v, {ref_kw})",
        "print('reference =', ref.exact)",
    ]
