"""Before any work: the target's spec, its call signatures, and one tiny call.

The battery calls ``forward(q, k, v, causal=...)`` and, by the claims, the keywords
:func:`call_keywords` lists (``attn_mask`` when ``supports_mask``, ``key_padding_mask`` under
``key_padding``, ``attn_bias`` under ``score_bias``, ``denominator`` when ``denominators`` are
declared); every entry of ``forms`` the same way; a state API as ``prefill(q, k, v)``,
``prefill(q, k, v, state=...)`` and ``step(state, q_t, k_t, v_t)`` (``verify.spec.variant.
StateAPI``). A callable that cannot take such a call is a usage error, told before anything runs
(:func:`signature_problems`, with ``inspect.signature``; ``**kwargs`` and ``*args`` accept
anything), with the expected and the found signature: a function with SDPA's spelling
``f(q, k, v, *, is_causal=False)`` would otherwise run the whole battery on calls it rejects.

Then ONE tiny call (:func:`tiny_call`: B = H = 1, T = S = 2, d = d_v = 2 unless the claims
restrict the shapes, float32 or the first dtype asked for) runs in a worker under the watchdog
(``verify.engine.pool``): a call the convention does not fit (a ``TypeError``, an output that is
not a tensor of the input's shape) is a usage error; a call that never returns is the variant's
failure (``hung on a 2-token call``), so a later watchdog timeout is the checker's own limit
(``inconclusive``); anything else (an exception of an input restriction, NaN, a wrong dtype) is
the battery's to judge.
"""

from __future__ import annotations

import difflib
import inspect
import time
from typing import Any

#: the claim that adds each keyword of a forward call (variant field, keyword, how to claim it)
CLAIM_KEYWORDS = (
    ("supports_mask", "attn_mask", "supports_mask=True"),
    ("key_padding", "key_padding_mask", "--key-padding"),
    ("score_bias", "attn_bias", "--score-bias"),
    ("denominators", "denominator", "denominators=..."),
)
#: the tiny call's sizes (before the claims' restrictions round them up)
TINY = dict(B=1, H=1, T=2, S=2, d=2, d_v=2)


def spec_problem(spec: str) -> str | None:
    """Why ``spec`` is no ``pkg.module:object`` a user meant, with the fix, or None: a module
    named by its file (``x.py:fn``: drop ``.py``) or by a path (``dir/x:fn``: run from ``dir``
    or name the package)."""
    module, sep, obj = spec.partition(":")
    if not sep:
        return None
    fixed = module[:-3] if module.endswith(".py") else module
    if "/" in fixed or "\\" in fixed:
        parts = fixed.replace("\\", "/").split("/")
        return (
            f"target {spec!r}: a module is named by its import path, not a file path: run from "
            f"{'/'.join(parts[:-1]) or '.'} and check {parts[-1]}:{obj}, or check "
            f"{'.'.join(p for p in parts if p not in ('', '.'))}:{obj} from the folder above "
            "the package"
        )
    if fixed != module:
        return f"target {spec!r}: drop .py: {fixed}:{obj} (a module name, as for python -m)"
    return None


def call_keywords(variant) -> tuple[str, ...]:
    """The keywords the battery passes to ``forward`` (and to each form): ``causal``, then one
    per claim that adds a keyword (:data:`CLAIM_KEYWORDS`)."""
    return ("causal",) + tuple(kw for name, kw, _ in CLAIM_KEYWORDS if getattr(variant, name))


def _expected(variant, positional: str) -> str:
    extra = [f"{kw} (claimed by {how})" for name, kw, how in CLAIM_KEYWORDS
             if getattr(variant, name)]  # fmt: skip
    return f"({positional}, *, causal" + "".join(f", {e}" for e in extra) + ")"


def _bind_problem(fn, args: tuple, keywords: dict[str, Any]) -> tuple[str, str] | None:
    """(the found signature, why the call does not bind) or None (it binds, or the signature
    cannot be read: a C function, the tiny call decides)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        sig.bind(*args, **keywords)
    except TypeError as exc:
        names = [p.name for p in sig.parameters.values()]
        hints = []
        for kw in keywords:
            if kw not in names:
                near = difflib.get_close_matches(kw, names, n=1, cutoff=0.6)
                if near:
                    hints.append(f"it has {near[0]!r} where the checker passes {kw!r}")
        why = str(exc) + (f" ({'; '.join(hints)})" if hints else "")
        return f"{getattr(fn, '__name__', type(fn).__name__)}{sig}", why
    return None


def signature_problems(variant) -> list[str]:
    """One sentence per callable of ``variant`` whose signature cannot take the checker's calls
    (module docstring): what is expected, what was found and why; [] when every one fits."""
    kws = {k: None for k in call_keywords(variant)}
    out = []
    fns = [("forward", variant.forward)] + [(f"forms[{n!r}]", f) for n, f in variant.forms.items()]
    for what, fn in fns:
        if bad := _bind_problem(fn, ("q", "k", "v"), kws):
            found, why = bad
            out.append(
                f"{what}: expected a callable {what}{_expected(variant, 'q, k, v')}, found "
                f"{found}: {why}"
            )
            if "'causal'" in why and "is_causal" in found:  # SDPA's spelling
                name = getattr(fn, "__name__", "f")
                out[-1] += (
                    f"; wrap it: def attention(q, k, v, *, causal): return {name}(q, k, v, "
                    "is_causal=causal)"
                )
    api = variant.state_api
    if api is not None:
        calls = (
            ("state_api.prefill", api.prefill, ("q", "k", "v"), {}, "prefill(q, k, v)"),
            ("state_api.prefill", api.prefill, ("q", "k", "v"), {"state": None},
             "prefill(q, k, v, state=state)"),
            ("state_api.step", api.step, ("state", "q_t", "k_t", "v_t"), {},
             "step(state, q_t, k_t, v_t)"),
        )  # fmt: skip
        for what, fn, args, kw, want in calls:
            if bad := _bind_problem(fn, args, kw):
                out.append(f"{what}: expected a callable taking {want}, found {bad[0]}: {bad[1]}")
    return out


def tiny_sizes(variant) -> dict[str, int]:
    """:data:`TINY`, with H the head count per-head claims fix, d and d_v rounded up to the
    claimed head-dimension multiple, T = S raised to the claimed minimum length and rounded up
    to the claimed length multiple."""
    from verify.spec.structure import fixed_heads

    out = dict(TINY)
    out["H"] = fixed_heads(variant) or 1
    m, n = variant.head_dim_multiple, variant.length_multiple
    out["d"] = out["d_v"] = m * -(-TINY["d"] // m)
    shortest = max(TINY["T"], getattr(variant, "min_length", 1))
    out["T"] = out["S"] = n * -(-shortest // n)
    return out


def tiny_dtype(variant, dtypes: tuple[str, ...] | None) -> str:
    """The tiny call's dtype: the first dtype asked for, else float32 when the variant claims
    it, else its first claimed dtype."""
    if dtypes:
        return dtypes[0]
    return "float32" if "float32" in variant.dtypes else variant.dtypes[0]


def words(sizes: dict[str, int], dtype: str) -> str:
    """'B = H = 1, T = S = 2, d = d_v = 2, float32' (the tiny call's inputs, in words)."""
    z = sizes
    return (f"B = {z['B']}, H = {z['H']}, T = S = {z['T']}, d = d_v = {z['d']}, {dtype}").replace(
        "B = 1, H = 1", "B = H = 1"
    )


def tiny_call(variant, dtype: str, device: str = "cpu", seed: int = 0) -> dict[str, Any]:
    """ONE call of ``variant.forward`` on tiny inputs (:func:`tiny_sizes`, causal=True only for
    a variant claiming causal='yes').

    Returns:
        ``{"status": "ok" | "usage" | "note", "message": str, "seconds": float}``: ``usage``
        when the call raised a TypeError or returned no tensor of the expected shape (the
        message says what was expected and found); ``note`` when it raised anything else or
        returned another dtype (the battery judges that); ``ok`` otherwise.
    """
    import torch

    from verify.properties.support.calls import from_layout, to_layout

    z = tiny_sizes(variant)
    causal = variant.causal == "yes"
    gen = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)
    q, k, v = (
        torch.randn(z["B"], z["H"], z[t], z[n], generator=gen, dtype=torch.float64).to(device, dt)
        for t, n in (("T", "d"), ("S", "d"), ("S", "d_v"))
    )
    lay = variant.layout
    what = f"forward(q, k, v, causal={causal}) on {words(z, dtype)} ({lay})"
    args = (to_layout(q, lay), to_layout(k, lay), to_layout(v, lay))
    start = time.perf_counter()
    try:
        out = variant.forward(*args, causal=causal)
    except TypeError as exc:
        return _said("usage", f"{what} raised TypeError: {exc}", start)
    except Exception as exc:  # noqa: BLE001 - a restriction the probes find, or a defect
        return _said("note", f"{what} raised {type(exc).__name__}: {exc}", start)
    if isinstance(out, tuple) and out:  # (o, weights) or (o, state) APIs: o comes first
        out = out[0]
    expected = (z["B"], z["H"], z["T"], z["d_v"])
    if not isinstance(out, torch.Tensor):
        return _said(
            "usage",
            f"{what} returned {type(out).__name__}; expected a tensor of shape {expected} "
            "(or a tuple whose first element is one)",
            start,
        )
    shape = tuple(from_layout(out, lay).shape)
    if shape != expected:
        return _said(
            "usage",
            f"{what} returned shape {tuple(out.shape)}; expected {expected} in layout {lay}"
            + ("" if lay == "BTHD" else " (tensors (B, T, H, d) are claimed with --layout BTHD)"),
            start,
        )
    if out.dtype != q.dtype:
        return _said("note", f"{what} returned {out.dtype} for {q.dtype} inputs", start)
    if getattr(variant, "decode", None) is not None and (bad := tiny_decode(variant, q, k, v)):
        return _said("usage", bad, start)
    return _said("ok", f"{what} returned in {time.perf_counter() - start:.3g} s", start)


#: the wrapper told to a decode step written for one token without its sequence axis
_STEP_WRAPPER = (
    "wrap it: def step(state, q, k, v): outs = []; for t in range(q.shape[2]): "
    "(o, state) = my_step(state, q[:, :, t], k[:, :, t], v[:, :, t]); outs.append(o); "
    "return torch.stack(outs, 2), state"
)


def tiny_decode(variant, q, k, v) -> str | None:
    """The decode protocol's tiny call (``verify.spec.decode``): ``prefill`` of the first T - 1
    tokens, then ``step`` with the last one, every tensor with its sequence axis (canonical
    ``(B, H, n, d)`` inputs, passed in the variant's layout).

    Returns:
        None when both calls return (output, state) of the protocol's shapes, or when they fail
        in a way the battery judges; otherwise why the path does not follow the protocol, with
        the fix: a step that works only on tokens WITHOUT their sequence axis (tried once
        more that way, so the diagnosis is observed, not guessed) or returns its output without
        that axis.
    """
    from verify.properties.support.calls import to_layout
    from verify.properties.support.decode_calls import prefill, step
    from verify.spec.results import VariantError

    T = q.shape[2]
    cut = [(x[:, :, : T - 1], x[:, :, T - 1 :]) for x in (q, k, v)]
    try:
        _, state = prefill(variant, *(a for a, _ in cut))
    except VariantError:
        return None  # the battery judges a prefill that fails (decode-steps names it)
    try:
        step(variant, state, *(b for _, b in cut))
        return None
    except VariantError as exc:
        said = str(exc)
    try:  # the same token without its sequence axis
        _, state = prefill(variant, *(a for a, _ in cut))
        lay = variant.layout
        axis = 2 if lay == "BHTD" else 1
        res = variant.decode.step(state, *(to_layout(b, lay).squeeze(axis) for _, b in cut))
    except Exception:  # noqa: BLE001 - not a protocol mismatch: the battery judges it
        res = None
    protocol = (
        "the decode protocol passes new tokens with their sequence axis, q_new "
        + ("(B, H, n, d)" if variant.layout == "BHTD" else "(B, n, H, d)")
        + " with n >= 1 (n > 1: speculative decoding), and takes o_new back in that shape"
    )
    if isinstance(res, tuple) and len(res) == 2:
        return (
            f"decode.step of one token: {said}; it returns when the token is passed WITHOUT "
            f"its sequence axis: {protocol}; {_STEP_WRAPPER}"
        )
    try:  # an output without its sequence axis
        _, state = prefill(variant, *(a for a, _ in cut))
        o = variant.decode.step(state, *(to_layout(b, variant.layout) for _, b in cut))[0]
    except Exception:  # noqa: BLE001 - the battery judges it
        return None
    if getattr(o, "ndim", None) == 3:
        return f"decode.step of one token: {said}: {protocol}"
    return None


def _said(status: str, message: str, start: float) -> dict[str, Any]:
    return {"status": status, "message": message, "seconds": time.perf_counter() - start}
