"""Derived tolerances for other projects' attention tests (D10 and its precision models).

Kernel test suites compare a kernel with a reference under rules with no derivation behind them
(a fudge factor times a reference's error, "at most twice the error of a same-precision
reference", an RMS ratio). These functions state the tolerance instead: the element-wise D10
bound of the kernel's arithmetic (``derivations.rounding``, ``derivations.precision_models``)
plus the float64 reference's own bound, against the float64 evaluation of exact attention on
the *same rounded inputs* (``verify.exact.errors.float64_reference``; no mpmath, so T = 8192
works: query rows are processed in chunks).

* :func:`attention_tolerance` -- the bound, a float64 tensor shaped like the output;
* :func:`assert_attention_close` -- raises ``AssertionError`` in the style of
  ``torch.testing.assert_close`` (mismatched count, greatest error as a multiple of the bound and
  in ulps of the dtype, where);
* :func:`assert_attention_grads_close` -- dq, dk, dv against derived backward bounds
  (``verify.exact.gradient_bounds``; softmax).

Conventions: tensors (B, H, T, d) / (B, H, S, d) / (B, H, S, d_v), any device and float dtype
(the inputs' dtype is the kernel's); ``causal`` masks are top-left aligned (SDPA's) unless
``alignment="bottom-right"``; ``attn_mask`` is boolean, True = keep, broadcastable to
(B, H, T, S); rows with no visible key must be zeros. ``precision=None`` is the ``envelope``
model for bfloat16/float16 softmax (the largest of the fused, eager and online:16 bounds: P
rounded to the input type before P.V as FlashAttention and SDPA do, scores and weights rounded
as eager code does, per-block rescaling) and ``two-level`` otherwise; a failure message names
each member's ratio, and declaring the kernel's own model (``precision="fused"``, ...) makes
the check tighter. The modern claims of ``verify.attention`` are keywords here too (D12-D17):
``window`` (FlashAttention's window_size, bottom-right), ``softcap``, ``alibi_slopes``,
``attn_bias`` (an additive float score bias, broadcastable to (B, H, T, S)), ``enable_gqa``
(k, v with G heads dividing H), ``qk_norm`` and ``arithmetic`` (``cpu``,
``flash-attention-2``, optionally ``+split:P``; default: the device's). The exp's error
follows the device: CPU ``cpu-torch-exp_u20`` (20 ulps as cited, 20.5 from the exact result:
the largest cited CPU exp, since a kernel's library is unknown), CUDA ``cuda-expf`` (2 ulps from
the correctly rounded result in the CUDA guide, 2.5 from the exact one); pass ``exp_library`` (a
key of ``derivations.rounding.LIBRARY_EXP_ULPS``) for another.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verify.exact import errors
from verify.exact.errors import BLACK_BOX_EXP_LIBRARY
from verify.spec.vocabulary import DTYPES

#: exp error assumed per device (keys of ``derivations.rounding.LIBRARY_EXP_ULPS``)
DEVICE_EXP_LIBRARY = BLACK_BOX_EXP_LIBRARY
#: query rows per chunk of the bound computation (memory ~ 15 rows x S float64 arrays)
ROWS_PER_CHUNK = 512


def _check_inputs(q, k, v, attn_mask) -> str:
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name}: expected a 4-d (B, H, T|S, d) tensor, got {tuple(t.shape)}")
        if str(t.dtype).removeprefix("torch.") not in DTYPES:
            raise TypeError(f"{name}: expected a float dtype in {DTYPES}, got {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v: expected one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.shape[-2] != v.shape[-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"k, v: expected k (B, H, S, d) with q's d and v (B, H, S, d_v), got q "
            f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if attn_mask is not None and (
        not isinstance(attn_mask, torch.Tensor) or attn_mask.dtype != torch.bool
    ):
        raise TypeError("attn_mask: expected a bool tensor (True = keep) or None")
    return str(q.dtype).removeprefix("torch.")


def _visible(q, k, causal, attn_mask, alignment, window=None):
    from verify.spec.visibility import visible

    B, H, T, S = q.shape[0], q.shape[1], q.shape[-2], k.shape[-2]
    mask = None if attn_mask is None else attn_mask.detach().cpu()
    if window is not None:  # FlashAttention's window: causal sets right = 0, bottom-right
        from verify.attention.structure import effective_window, window_mask

        vis = window_mask(T, S, effective_window(tuple(window), causal)).numpy()
        if mask is not None:
            vis = vis & np.broadcast_to(mask.numpy(), (B, H, T, S))
        return np.broadcast_to(vis, (B, H, T, S))
    vis = visible(T, S, causal=causal, attn_mask=mask, alignment=alignment, numpy=True)
    return np.broadcast_to(vis, (B, H, T, S))


def _modern(window, softcap, alibi_slopes, attn_bias, enable_gqa, qk_norm) -> dict[str, Any]:
    """The modern keywords of ``verify.exact.errors`` (the window enters through the mask)."""
    out: dict[str, Any] = {}
    if softcap is not None:
        out["softcap"] = softcap
    if alibi_slopes is not None:
        out["alibi_slopes"] = [float(m) for m in alibi_slopes]
    if attn_bias is not None:
        out["score_bias"] = attn_bias
    if enable_gqa:
        out["enable_gqa"] = True
    if qk_norm:
        out["qk_norm"] = True
    return out


def _chunks(T: int, rows: int):
    return [(a, min(a + rows, T)) for a in range(0, T, rows)]


def _reference_and_bound(q, k, v, *, causal, scale, attn_mask, kernel, precision, exp_library,
                         alignment, rows=ROWS_PER_CHUNK, window=None, softcap=None,
                         alibi_slopes=None, attn_bias=None, enable_gqa=False, qk_norm=False,
                         arithmetic=None):  # fmt: skip
    """(float64 reference, bound, description, dtype) as numpy arrays (B, H, T, d_v)."""
    import torch

    dtype = _check_inputs(q, k, v, attn_mask)
    dev = "cuda" if q.device.type == "cuda" else "cpu"
    lib = exp_library or DEVICE_EXP_LIBRARY[dev]
    if precision is None and kernel == "softmax":
        precision = errors.default_precision(dtype)
    vis = _visible(q, k, causal, attn_mask, alignment, window)
    modern = _modern(window, softcap, alibi_slopes, attn_bias, enable_gqa, qk_norm)
    if alibi_slopes is not None:
        rows = q.shape[-2]  # ALiBi's distances need every row's position: one chunk
    bias = None if attn_bias is None else torch.as_tensor(attn_bias).detach().cpu()
    refs, bounds, how = [], [], ""
    qc, kc, vc = (t.detach().cpu() for t in (q, k, v))
    for a, b in _chunks(q.shape[-2], rows):
        m = torch.from_numpy(np.array(vis[..., a:b, :]))
        kw = dict(causal=False, attn_mask=m, scale=scale, **modern)
        if bias is not None:
            kw["score_bias"] = bias.expand(*bias.shape[:-2], q.shape[-2], k.shape[-2])[..., a:b, :]
        common = dict(dtype=dtype, exact=None, device=dev, exp_library=lib,
                      arithmetic=arithmetic, **kw)  # fmt: skip
        eb = errors.attention_error_bound(kernel, qc[..., a:b, :], kc, vc, precision=precision,
                                          **common)  # fmt: skip
        refs.append(errors.float64_reference(kernel, qc[..., a:b, :], kc, vc, **kw))
        bounds.append(eb.bound)
        how = eb.description + "; " + "; ".join(eb.notes)
    model = precision or "two-level"
    desc = f"D10, precision model {model!r}, {dtype} inputs on {dev}, exp {lib}: {how}"
    return np.concatenate(refs, -2), np.concatenate(bounds, -2), desc, dtype


def attention_tolerance(
    q, k, v, *, causal: bool = False, scale: float | None = None, attn_mask: Any = None,
    kernel: str = "softmax", precision: str | None = None, exp_library: str | None = None,
    alignment: str | None = None, **modern: Any,
):  # fmt: skip
    """The element-wise bound on |o_kernel - o_exact| for attention of these inputs.

    Args:
        q (B, H, T, d), k (B, H, S, d), v (B, H, S, d_v): the kernel's inputs, one float dtype
            (the kernel's), any device.
        causal, scale (None = 1/sqrt(d) for exp kernels), attn_mask (bool, True = keep),
        alignment (causal T != S: "top-left" default, or "bottom-right"): as the kernel.
        kernel: ``softmax``, ``taylor:N`` or ``linear:MAP`` (D1, D3).
        precision: a D10 precision model (``derivations.precision_models.parse_precision``);
            None = module docstring.
        exp_library: the exp's cited error (module docstring for the default).
        modern: ``window``, ``softcap``, ``alibi_slopes``, ``attn_bias``, ``enable_gqa``,
            ``qk_norm``, ``arithmetic`` (module docstring).

    Returns:
        (B, H, T, d_v) float64 tensor on q's device: the bound, the float64 reference's own
        bound included (D10 recipe 6). ``inf`` where no statement is made.

    Raises:
        TypeError, ValueError: a bad tensor, dtype, shape, mask, kernel or precision (naming
            the argument). ``ModelNotApplicable`` (a ValueError): an input-type accumulation
            without a gamma at this length.
    """
    import torch

    _, bound, _, _ = _reference_and_bound(
        q, k, v, causal=causal, scale=scale, attn_mask=attn_mask, kernel=kernel,
        precision=precision, exp_library=exp_library, alignment=alignment,
        **_modern_kwargs(modern),
    )  # fmt: skip
    return torch.from_numpy(bound).to(q.device)


MODERN = ("window", "softcap", "alibi_slopes", "attn_bias", "enable_gqa", "qk_norm", "arithmetic")


def _modern_kwargs(modern: dict[str, Any]) -> dict[str, Any]:
    """``modern`` checked against :data:`MODERN` (a TypeError names an unknown keyword)."""
    bad = sorted(set(modern) - set(MODERN))
    if bad:
        raise TypeError(f"unexpected keyword(s) {bad}: expected arguments from {MODERN}")
    return modern


def _ulps(err: float, ref: float, dtype: str) -> float:
    from derivations.rounding import precision_bits, underflow_abs_error

    p = precision_bits(dtype)
    mag = max(abs(ref), 2 * underflow_abs_error(dtype) * 2 ** (p - 1))
    ulp = 2.0 ** (np.floor(np.log2(mag)) - (p - 1))
    return err / ulp


def _message(title: str, err, bound, ref, dtype: str, desc: str, name: str = "") -> str | None:
    """The torch.testing-style report, or None when every element is within its bound."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, err / bound, np.where(err == 0, 0.0, np.inf))
    ratio = np.where(np.isnan(err), np.inf, ratio)
    bad = ratio > 1.0
    if not bad.any():
        return None
    i = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    j = np.unravel_index(int(np.nanargmax(np.where(np.isnan(err), np.inf, err))), err.shape)
    idx, jdx = tuple(int(x) for x in i), tuple(int(x) for x in j)
    n, total = int(bad.sum()), bad.size
    label = f"{name} " if name else ""
    return (
        f"{title}\n\n"
        f"Mismatched {label}elements: {n} / {total} ({100 * n / total:.1f}%)\n"
        f"Greatest error relative to the bound: {float(ratio[i]):.3g}x at index {idx} "
        f"(error {float(err[i]):.3e}, up to {float(bound[i]):.3e} allowed; "
        f"{_ulps(float(err[i]), float(ref[i]), dtype):.3g} ulps of {dtype} at |exact| = "
        f"{abs(float(ref[i])):.4g})\n"
        f"Greatest absolute difference: {float(err[j]):.3e} at index {jdx} "
        f"(up to {float(bound[j]):.3e} allowed)\n"
        f"Bound: {desc}"
    )


def assert_attention_close(
    actual, q, k, v, *, causal: bool = False, scale: float | None = None, attn_mask: Any = None,
    kernel: str = "softmax", precision: str | None = None, exp_library: str | None = None,
    alignment: str | None = None, msg: str | None = None, **modern: Any,
) -> None:  # fmt: skip
    """Assert |actual - exact| <= the derived bound, element by element (module docstring).

    Args:
        actual: (B, H, T, d_v) the kernel's output for (q, k, v); any dtype and device.
        Others: as :func:`attention_tolerance`. msg: replaces the message's first line.

    Raises:
        AssertionError: some element is beyond its bound (or NaN): the message gives the
            mismatched count, the greatest error as a multiple of its bound and in ulps of the
            dtype with its index, the greatest absolute difference, and how the bound was made.
        TypeError, ValueError: bad arguments (as :func:`attention_tolerance`; ``actual`` of
            another shape).
    """
    import torch

    if not isinstance(actual, torch.Tensor):
        raise TypeError(f"actual: expected a torch.Tensor, got {type(actual).__name__}")
    want = (*q.shape[:-1], v.shape[-1])
    if tuple(actual.shape) != want:
        raise ValueError(f"actual: expected shape {want} (B, H, T, d_v), got {tuple(actual.shape)}")
    modern = _modern_kwargs(modern)
    kw = dict(causal=causal, scale=scale, attn_mask=attn_mask, kernel=kernel,
              exp_library=exp_library, alignment=alignment, **modern)  # fmt: skip
    ref, bound, desc, dtype = _reference_and_bound(q, k, v, precision=precision, **kw)
    err = np.abs(actual.detach().to("cpu", torch.float64).numpy() - ref)
    title = msg or "Attention outputs are not within the derived bound of the exact result!"
    text = _message(title, err, bound, ref, dtype, desc)
    if text:
        if kernel == "softmax" and (precision or errors.default_precision(dtype)) == "envelope":
            text += "\n" + _members(q, k, v, err, **kw)
        raise AssertionError(text)


def _members(q, k, v, err, **kw) -> str:
    """The envelope's members, each with its worst ratio: the model a kernel states (the
    ``precision`` argument) gives the tighter check."""
    from verify.exact.models import ENVELOPE

    parts = []
    for m in ENVELOPE:
        b = _reference_and_bound(q, k, v, precision=m.spec, **kw)[1]
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(b > 0, err / b, np.where(err == 0, 0.0, np.inf))
        parts.append(f"{m.spec} {float(np.nanmax(r)):.3g}x")
    return (
        "Envelope members (worst error / bound): " + ", ".join(parts) + "; declare the "
        "kernel's own model (precision=...) for the tighter check of that arithmetic"
    )


def assert_attention_grads_close(
    dq, dk, dv, q, k, v, grad_out, *, causal: bool = False, scale: float | None = None,
    attn_mask: Any = None, precision: str | None = None, exp_library: str | None = None,
    window=None, softcap: float | None = None, alibi_slopes=None, enable_gqa: bool = False,
    arithmetic=None,
) -> None:  # fmt: skip
    """Assert the gradients of softmax attention are within their derived bounds.

    Each of dq (B, H, T, d), dk (B, H, S, d), dv (B, H, S, d_v) is compared element by element
    with the exact gradient (float64, same rounded inputs and ``grad_out``) under the bound of
    ``verify.exact.gradient_bounds`` (kind: derived; FlashAttention-2's backward order, P and
    dS stored in the input type, float32 accumulation; the float64 reference's own bound
    included). Memory: a few (B, H, T, S) float64 arrays. The modern keywords ``window``,
    ``softcap``, ``alibi_slopes``, ``enable_gqa`` (k, v with G heads: dk, dv have G heads) and
    ``arithmetic`` are those of :func:`assert_attention_close` (D16, D17); the envelope
    default for bf16/fp16 is the largest of its members' backward bounds.

    Raises:
        AssertionError: in the style of :func:`assert_attention_close`, one block per tensor
            that fails, each saying its bound's kind.
        TypeError, ValueError: bad arguments (naming them).
    """
    import torch

    from verify.exact import gradient_bounds as gb

    dtype = _check_inputs(q, k, v, attn_mask)
    dev = "cuda" if q.device.type == "cuda" else "cpu"
    lib = exp_library or DEVICE_EXP_LIBRARY[dev]
    mask = None if attn_mask is None else attn_mask.detach().cpu()
    shapes = {"dq": q.shape, "dk": k.shape, "dv": v.shape, "grad_out": (*q.shape[:-1],
              v.shape[-1])}  # fmt: skip
    structure = {
        "window": window,
        "softcap": softcap,
        "enable_gqa": enable_gqa,
        "alibi_slopes": None if alibi_slopes is None else [float(m) for m in alibi_slopes],
    }
    structure = {key: val for key, val in structure.items() if val not in (None, False)}
    for name, t in (("dq", dq), ("dk", dk), ("dv", dv), ("grad_out", grad_out)):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(shapes[name]):
            raise ValueError(f"{name}: expected a tensor of shape {tuple(shapes[name])}")
    args = [t.detach().cpu() for t in (q, k, v, grad_out)]
    kw = dict(causal=causal, attn_mask=mask, scale=scale)
    bounds = gb.gradient_bounds(*args, dtype=dtype, precision=precision, exp_library=lib,
                                device=dev, arithmetic=arithmetic, **kw, **structure)  # fmt: skip
    ref = gb.reference_gradients(*args, **kw, **structure)[1:]
    model = precision or errors.default_precision(dtype)
    desc = (
        f"derived (D10 backward bounds, verify.exact.gradient_bounds), precision model "
        f"{model!r}, {dtype} inputs on {dev}, exp {lib}"
    )
    blocks = []
    for name, got, want in zip(gb.NAMES, (dq, dk, dv), ref):
        err = np.abs(got.detach().to("cpu", torch.float64).numpy() - want)
        text = _message(f"{name} is not within its derived bound!", err, bounds[name], want,
                        dtype, desc, name)  # fmt: skip
        if text:
            blocks.append(text)
    if blocks:
        raise AssertionError("\n\n".join(blocks))
