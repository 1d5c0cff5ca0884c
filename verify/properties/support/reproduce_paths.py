"""The reproducer lines of the properties that call something other than ``forward``, or on
an example that is not one set of attention inputs (``verify.properties.support.reproduce``
composes them into the code ``attn-theory check`` prints under a failure).

A property of a code path is reproduced by calling *that* path as the property did, with the
choices the example drew (its ``# name = value`` lines), and printing its output against the
suite's reference (:func:`~verify.properties.support.reproduce.reference`, the claimed kernel
in exact arithmetic with the D10 bound of each element); the forward, which agrees with the
reference there, would send a reader the wrong way:

- ``state-step``, ``state-split-resume`` (D2): the state API's prefill and step
  (``support.calls``), every split as the property checks;
- ``decode-*`` (D20): ``decode.prefill`` and ``decode.step`` through the property's own calls
  (``verify.properties.decode_paths``: ``run_chunks``, ``ragged_run`` with the drawn
  ``cache_seqlens``, capacity, poison and step sizes); a row decoded at its own length against
  the reference of that row alone;
- ``packed-*`` (D20): ``variant.packed`` with the drawn ``cu_seqlens``, each document against
  the reference of the document alone, and (isolation) the other documents' rows after the
  change;
- ``softmax-shift-invariance`` (D6): the call with every key shifted by the drawn ``u``
  against the same reference;
- ``kernel-identity`` (D1): phi(q).phi(k) against kappa_N(c q.k) (:func:`kernel_identity_terms`);
- ``flex-block-mask``: the token visibility of the declared BlockMask against mask_mod's;
- ``flex-score-mod`` and any attention inputs of a variant with flex claims: the reference is
  softmax on the declared score_mod (``verify.properties.flex_checks``, the property's own).

Each function returns source lines (strings); the generated code imports the property groups
it calls, this module imports none (the floor stands below the groups).
"""

from __future__ import annotations

import re
import textwrap
from string import Template
from typing import Any

#: properties whose reproducer calls the state API, a decode path or the packed function
PATHS = (
    "state-step",
    "state-split-resume",
    "decode-steps",
    "decode-resume",
    "decode-multi-token",
    "decode-batch-rows",
    "decode-capacity",
    "decode-unused-slots",
    "decode-window",
    "packed-documents",
    "packed-isolation",
)
#: properties whose example is not attention inputs rebuilt by ``example_of``
OWN_EXAMPLES = ("packed-documents", "packed-isolation", "kernel-identity", "flex-block-mask")
#: how the shift-invariance example states its key shift
SHIFT_LINE = re.compile(r"^# shift u = (.+) \(added to every key\)$", flags=re.M)


def _code(text: str, **values: Any) -> list[str]:
    """``text`` dedented, each ``$name`` replaced by ``repr(values[name])``, as lines."""
    out = Template(textwrap.dedent(text).strip("\n")).substitute(
        {k: repr(v) for k, v in values.items()}
    )
    return out.split("\n")


def _reference(comment: str = "") -> list[str]:
    """The reference of the example's (causal) inputs, printed."""
    tail = f"  # {comment}" if comment else ""
    return [
        f"ref = reference(variant, q, k, v, causal=causal){tail}",
        "print('reference =', ref.exact)",
    ]


# ----------------------------------------------------------------------------- examples


def example_lines(property_id: str | None, choices: dict[str, Any], snippet: str) -> list | None:
    """The lines that rebuild ``example`` (the object the property's check takes) for the
    properties of :data:`OWN_EXAMPLES` and shift invariance; None: the default
    (``reproduce.example_of`` on the snippet's attention inputs)."""
    if property_id in ("packed-documents", "packed-isolation"):
        return _code(
            """
            from verify.properties.support.reproduce import example_with

            example = example_with({'q': q, 'k': k, 'v': v}, $choices)
            """,
            choices=choices,
        )
    if property_id == "flex-block-mask":
        return _code(
            """
            from verify.properties.support.reproduce import example_with

            example = example_with(None, $choices)
            """,
            choices=choices,
        )
    if property_id == "kernel-identity":
        return [
            "from verify.properties.kernel import PairsExample",
            "",
            "example = PairsExample(q.tolist(), k.tolist())  # the (query, key) pairs",
        ]
    if property_id == "softmax-shift-invariance" and (m := SHIFT_LINE.search(snippet)):
        return _code(
            """
            from verify.properties.shift import ShiftExample
            from verify.properties.support.reproduce import example_of

            u = torch.tensor($u, dtype=torch.float64).to(k)  # the key shift the example drew
            example = ShiftExample(
                example_of(q, k, v, causal=causal, attn_mask=attn_mask, scale=scale).inputs,
                [u.double().numpy()],
            )
            """,
            u=_literal(m.group(1)),
        )
    return None


def _literal(text: str):
    import ast

    return ast.literal_eval(text)


# ----------------------------------------------------------------------------- the calls


def lines(property_id: str, variant, choices: dict[str, Any], dtype: str | None) -> list | None:
    """The lines that compute the reference and call the path ``property_id`` failed on,
    printing its output against the reference; None for a property called through
    ``forward`` (``reproduce.code`` then writes the forward's call)."""
    if property_id == "state-step":
        return _state_step()
    if property_id == "state-split-resume":
        return _state_split()
    if property_id in ("decode-steps", "decode-resume"):
        return _decode_every_split(property_id)
    if property_id in ("decode-multi-token", "decode-window"):
        return _decode_chunks(choices)
    if property_id == "decode-capacity":
        return _decode_capacity(variant, choices)
    if property_id in ("decode-batch-rows", "decode-unused-slots"):
        return _decode_rows(property_id, variant, choices)
    if property_id in ("packed-documents", "packed-isolation"):
        return _packed(property_id, choices)
    if property_id == "kernel-identity":
        return _kernel_identity(dtype)
    if property_id == "flex-block-mask":
        return _block_mask(choices)
    return None


def _state_step() -> list[str]:
    return [
        "",
        "# the path that failed (state-step): the state API's prefill of the first T - 1 "
        "tokens, then one step",
        "# with the last token; its rows against the reference of the causal forward",
        "from verify.properties.support.calls import prefill, step",
        "",
        *_reference(),
        *_code(
            """
            T = q.shape[-2]
            head = (q[:, :, : T - 1], k[:, :, : T - 1], v[:, :, : T - 1])
            o_pre, state = prefill(variant, *head, allow_nonfinite=True)
            last = (q[:, :, T - 1], k[:, :, T - 1], v[:, :, T - 1])
            o_last, state = step(variant, state, *last, allow_nonfinite=True)
            o = torch.cat([o_pre, o_last[:, :, None]], 2)
            print('o =', o)
            print(f'prefill({T - 1} tokens) + step:', ref.difference(o))
            """
        ),
    ]


def _state_split() -> list[str]:
    return [
        "",
        "# the path that failed (state-split-resume): the state API's prefill in one go, and "
        "split at every s",
        "# and resumed with the state; each against the reference of the causal forward",
        "from verify.properties.support.calls import prefill",
        "",
        *_reference(),
        *_code(
            """
            T = q.shape[-2]
            o, _ = prefill(variant, q, k, v, allow_nonfinite=True)
            print(f'prefill in one go (T = {T}):', ref.difference(o))
            for s in range(1, T):
                head = (q[:, :, :s], k[:, :, :s], v[:, :, :s])
                o_a, st = prefill(variant, *head, allow_nonfinite=True)
                tail = (q[:, :, s:], k[:, :, s:], v[:, :, s:])
                o_b, _ = prefill(variant, *tail, st, allow_nonfinite=True)
                o = torch.cat([o_a, o_b], 2)
                print(f'prefill split at s = {s} and resumed:', ref.difference(o))
            """
        ),
    ]


def _decode_every_split(property_id: str) -> list[str]:
    head = [
        "",
        f"# the path that failed ({property_id}): the decode path at every split s, against "
        "the reference of the",
        "# causal forward (the calls of verify.properties.decode_paths)",
        "from verify.properties.decode_paths import prefill, run_chunks",
        "",
        *_reference(),
    ]
    if property_id == "decode-steps":
        return head + _code(
            """
            x, T = example.inputs, q.shape[-2]
            for s in range(T):  # decode.prefill(x[:s]), then T - s single-token decode.steps
                o = run_chunks(variant, x, s, [1] * (T - s))
                print(f'prefill({s}) + {T - s} single steps:', ref.difference(o))
            """
        )
    return head + _code(
        """
        T = q.shape[-2]
        for s in range(T):  # decode.prefill(x[:s]) resumed by decode.prefill(x[s:], state)
            o_a, state = prefill(variant, q[:, :, :s], k[:, :, :s], v[:, :, :s])
            o_b, _ = prefill(variant, q[:, :, s:], k[:, :, s:], v[:, :, s:], state)
            o = torch.cat([o_a, o_b], 2)
            print(f'prefill({s}) resumed with {T - s} tokens:', ref.difference(o))
        """
    )


def _decode_chunks(choices: dict[str, Any]) -> list[str]:
    return [
        "",
        "# the path that failed: decode.prefill of the first s tokens, then a decode.step of "
        "each drawn chunk",
        "# (and single-token steps), against the reference of the causal forward",
        "from verify.properties.decode_paths import run_chunks",
        "",
        *_reference(),
        *_code(
            """
            x, T = example.inputs, q.shape[-2]
            s, chunks = $s, $chunks  # the prefill length and the step sizes the example drew
            o = run_chunks(variant, x, s, chunks)
            print('o =', o)
            print(f'prefill({s}) + steps of {chunks} tokens:', ref.difference(o))
            o_1 = run_chunks(variant, x, s, [1] * (T - s))
            print(f'prefill({s}) + single steps:', ref.difference(o_1))
            """,
            s=choices.get("prefill", 0),
            chunks=list(choices.get("chunks", [])),
        ),
    ]


def _decode_capacity(variant, choices: dict[str, Any]) -> list[str]:
    values = dict(s=choices.get("prefill", 0), extra=choices.get("extra_slots", 0))
    if variant.decode is not None and variant.decode.capacity:
        call = _code(
            """
            o = run_chunks(variant, x, s, [1] * (T - s), capacity=T + extra)  # prefill(capacity=)
            """
        )
    else:
        call = _code(
            """
            # a cache_seqlens segment of T + extra slots, every row at position s (zeros unused)
            o = torch.cat(ragged_run(variant, x, [s] * q.shape[0], [1] * (T - s), extra=extra), 0)
            """
        )
    return [
        "",
        "# the path that failed (decode-capacity): decode.prefill of s tokens into a cache with "
        "unused slots,",
        "# then single-token steps, against the reference of the causal forward",
        "from verify.properties.decode_paths import ragged_run, run_chunks",
        "",
        *_reference(),
        *_code(
            """
            x, T = example.inputs, q.shape[-2]
            s, extra = $s, $extra  # the prefill length and the unused slots the example drew
            """,
            **values,
        ),
        *call,
        "print('o =', o)",
        "print(f'prefill({s}) + single steps, capacity {T + extra} for {T} tokens:', "
        "ref.difference(o))",
    ]


def _decode_rows(property_id: str, variant, choices: dict[str, Any]) -> list[str]:
    ragged = property_id == "decode-unused-slots" or bool(
        variant.decode is not None and variant.decode.cache_seqlens
    )
    values = dict(lengths=list(choices.get("lengths", [])), chunks=list(choices.get("chunks", [])))
    fill = ""
    if property_id == "decode-unused-slots":
        values.update(poison=choices.get("poison", "nan"), extra=choices.get("extra_slots", 0))
        fill = ", fill=float(poison.replace('+', '')), extra=extra"
    out = [
        "",
        f"# the path that failed ({property_id}): every batch row decoded at its own position, "
        "against the",
        "# reference of that row alone at its own length (the calls of "
        "verify.properties.decode_paths)",
        "from verify.properties.decode_paths import ragged_run, run_chunks",
        "",
        "x = example.inputs",
        "".join(f"{k}, " for k in values).rstrip(", ")
        + " = "
        + ", ".join(repr(v) for v in values.values())
        + "  # the example's choices",
        "n = sum(chunks)  # tokens the steps append to every row",
    ]
    if ragged:
        out += [
            "# decode.prefill with cache_seqlens = torch.tensor(lengths) (row b holds its first "
            "lengths[b] tokens),",
            "# then a decode.step of each chunk appended to every row at its own position",
            f"outs = ragged_run(variant, x, lengths, chunks{fill})",
        ]
    else:
        out += [
            "# every row at position lengths[0]: decode.prefill of that many tokens, then the "
            "steps",
            "m = lengths[0]",
            "short = example_of(q[:, :, : m + n], k[:, :, : m + n], v[:, :, : m + n], "
            "causal=True).inputs",
            "o = run_chunks(variant, short, m, chunks)",
            "outs = [o[b : b + 1] for b in range(q.shape[0])]",
        ]
    out += _code(
        """
        for b, m in enumerate(lengths):  # row b alone at its own length lengths[b] + n
            alone = (q[b : b + 1, :, : m + n], k[b : b + 1, :, : m + n], v[b : b + 1, :, : m + n])
            ref = reference(variant, *alone, causal=True)
            print(f'row {b}: reference =', ref.exact)
            print(f'row {b} (lengths {lengths}, steps {chunks}):', ref.difference(outs[b]))
        """
    )
    return out


def _packed(property_id: str, choices: dict[str, Any]) -> list[str]:
    out = [
        "",
        f"# the path that failed ({property_id}): variant.packed on the rows (total, H, .) "
        "with the drawn",
        "# cu_seqlens, each document against the reference of the document alone",
        "from verify.properties.packed import call_packed",
        "from verify.properties.support.reproduce import reference",
        "",
        *_code(
            """
            causal, cu_seqlens = $causal, $cu  # the example's causal flag and documents
            cu = torch.tensor(cu_seqlens, dtype=torch.int32)
            o = call_packed(variant, q, k, v, cu, causal=causal)
            print('o =', o)
            docs = lambda t, lo, hi: t[lo:hi].transpose(0, 1)[None]  # noqa: E731 (1, H, n, .)
            for b in range(len(cu_seqlens) - 1):
                lo, hi = cu_seqlens[b], cu_seqlens[b + 1]
                if hi > lo:
                    ref = reference(variant, *(docs(t, lo, hi) for t in (q, k, v)), causal=causal)
                    print(f'document {b} (rows {lo}:{hi}): reference =', ref.exact)
                    print(f'document {b}:', ref.difference(docs(o, lo, hi)))
            """,
            causal=bool(choices.get("causal", False)),
            cu=list(choices.get("cu_seqlens", [0])),
        ),
    ]
    if property_id == "packed-isolation":
        out += _code(
            """
            # document i changed and the slack rows filled: the other documents' rows must stay
            # bit-identical (bound 0)
            i, fill = $i, float($fill.replace('+', ''))
            lo, hi, end = cu_seqlens[i], cu_seqlens[i + 1], cu_seqlens[-1]
            changed = [t.clone() for t in (q, k, v)]
            for t, new in zip(changed, example.choices['_new']):
                t[lo:hi] = torch.as_tensor(new, dtype=torch.float64).to(t.dtype)
                t[end:] = fill
            o_2 = call_packed(variant, *changed, cu, causal=causal)
            keep = torch.ones(o.shape[0], dtype=torch.bool)
            keep[lo:hi], keep[end:] = False, False
            moved = int((~(o_2[keep] == o[keep])).sum())
            print(f'after changing document {i}, the other rows: {moved} of {o[keep].numel()} '
                  'elements over their bound (0: bit-identical)')
            # the packed backward: the other documents' outputs (fixed weights) differentiated
            # at the changed document's rows and the slack must be exact zeros (bound 0)
            leaves = [t.detach().clone().requires_grad_(variant.differentiable) for t in (q, k, v)]
            o_g = call_packed(variant, *leaves, cu, causal=causal)
            if o_g.requires_grad:
                w = torch.arange(1, o_g.numel() + 1, dtype=o_g.dtype).reshape(o_g.shape) % 7 - 3
                grads = torch.autograd.grad((o_g * w)[keep].sum(), leaves, allow_unused=True)
                for name, g in zip('qkv', grads):
                    if g is not None:
                        nz = int((g[~keep] != 0).sum())
                        print(f'd(other documents)/d{name} at the changed rows: {nz} of '
                              f'{g[~keep].numel()} elements over their bound (0: exact zeros)')
            """,
            i=int(choices.get("changed", 0)),
            fill=str(choices.get("slack_fill", "nan")),
        )
    return out


def _kernel_identity(dtype: str | None) -> list[str]:
    return [
        "",
        "# the path that failed (kernel-identity): the variant's feature map, phi(q).phi(k) of "
        "each pair, against",
        "# kappa_N(c q.k) in exact arithmetic with the property's D10 bound",
        "from verify.properties.support.reproduce import Reference",
        "from verify.properties.support.reproduce_paths import kernel_identity_terms",
        "",
        *_code(
            """
            q, k = q.to(getattr(torch, $dtype)), k.to(getattr(torch, $dtype))
            ref = Reference(*kernel_identity_terms(variant, q, k))
            print('reference =', ref.exact)
            o = (variant.feature_map(q) * variant.feature_map(k)).sum(-1)
            print('phi(q).phi(k) =', o)
            print(ref.difference(o))
            """,
            dtype=dtype or "float64",
        ),
    ]


def _block_mask(choices: dict[str, Any]) -> list[str]:
    sizes = tuple(int(choices.get(n, 1)) for n in "BHTS")
    return [
        "",
        "# the path that failed (flex-block-mask): the token visibility a block-sparse kernel "
        "computes from",
        "# the declared BlockMask against mask_mod's own (the reference; exact: bound 0)",
        "from verify.spec import flex",
        "",
        *_code(
            """
            B, H, T, S = $sizes
            ref = flex.mask_grid(variant.mask_mod, B, H, T, S)  # (B, H, T, S) bool
            print('reference = mask_mod shows', int(ref.sum()), 'of', ref.size, 'keys')
            bm = variant.block_mask(B, H, T, S)
            got = flex.block_mask_grid(bm, variant.mask_mod, B, H, T, S)
            print('the BlockMask shows', int(got.sum()), 'keys, BLOCK_SIZE', bm.BLOCK_SIZE)
            print(f'{int((got != ref).sum())} of {ref.size} elements over their bound (bound 0)')
            """,
            sizes=sizes,
        ),
    ]


def shift_lines(call: str, ref_kw: str) -> list[str]:
    """The call with every key shifted by ``u`` (``softmax-shift-invariance``, D6): ``call`` is
    the forward's call expression on ``q, k + u, v``, its output against the reference of the
    shifted inputs (``ref_kw``: the reference's keywords), whose exact values are the
    unshifted ones."""
    return [
        "",
        "# every key shifted by u: the exact softmax output does not move (D6); o(k + u) "
        "against the reference of",
        "# the shifted inputs (the same exact values, the bound of their own scores)",
        f"ref_shift = reference(variant, q, k + u, v, {ref_kw})",
        f"o_shift = {call}",
        "print('o(k + u) =', o_shift)",
        "print(ref_shift.difference(o_shift))",
    ]


def flex_reference_lines(dtype: str | None) -> list[str]:
    """The reference of a variant with flex claims (softmax on the declared score_mod over the
    declared visibility: ``flex-score-mod``'s own, ``verify.properties.flex_checks``)."""
    return _code(
        """
        from verify.properties.flex_checks import flex_bound, flex_reference, flex_visible
        from verify.properties.support.base import RunContext
        from verify.properties.support.reproduce import Reference, example_of

        x = example_of(q, k, v, causal=causal, attn_mask=attn_mask).inputs
        c = variant.score_scale(q.shape[-1])
        exact, vis = flex_reference(q, k, v, scale=c, score_mod=variant.score_mod,
                                    visible=flex_visible(variant, x))
        ctx = RunContext(dtype=$dtype, compute_dtype=variant.compute_dtype)
        ref = Reference.of(exact, flex_bound(variant, x, ctx, exact, vis))
        print('reference =', ref.exact)
        """,
        dtype=dtype or str(None),
    )


# ----------------------------------------------------------------------------- kernel identity


def kernel_identity_terms(variant, q, k):
    """kappa_N(c q_i.k_i) of each (query, key) pair in exact arithmetic (rounded once to
    float64) and the bound kernel-identity states for phi(q_i).phi(k_i) (D10:
    ``feature_form_relative_bound`` with the Taylor feature error, relative to the majorant
    kappa_N(c sum |q||k|); ``verify.properties.kernel``).

    Args:
        q, k: (P, d) tensors of the run's dtype (P pairs).

    Returns:
        (exact, bound, description): float64 tensors of shape (P,) and how the bound is
        composed (the fields of ``reproduce.Reference``).

    Raises:
        ValueError: the variant claims no Taylor order (kernel-identity's kernels).
    """
    import mpmath
    import numpy as np
    import torch

    from derivations import rounding as d10
    from derivations.truncation import kappa
    from verify.exact import errors
    from verify.properties.support.observe import DPS

    N = variant.order
    if N is None:
        raise ValueError(f"variant: expected a claimed Taylor kernel, got {variant.kernel!r}")
    dtype = str(q.dtype).removeprefix("torch.")
    acc = errors.ACCUMULATION[dtype]
    u = d10.unit_roundoff(acc)
    e_phi = d10.taylor_feature_relative_error(N, u)
    if acc != dtype:  # features rounded once more to the input dtype (two-level model)
        e_phi = (1 + e_phi) * (1 + d10.unit_roundoff(dtype)) - 1
    m = int(variant.feature_map(q[:1]).shape[-1])
    rel = d10.feature_form_relative_bound(e_phi, m, 1, u, False)
    exact, bound = [], []
    with mpmath.workdps(DPS):
        d = q.shape[-1]
        if variant.feature_scale == "none":
            c = mpmath.mpf(1)
        elif variant.scale == "default":
            c = 1 / mpmath.sqrt(d) if variant.exp_type else mpmath.mpf(1)
        else:
            c = mpmath.mpf(float(variant.scale))
        for qi, ki in zip(q.double().tolist(), k.double().tolist()):
            x = c * mpmath.fsum(mpmath.mpf(a) * mpmath.mpf(b) for a, b in zip(qi, ki))
            xa = c * mpmath.fsum(abs(mpmath.mpf(a) * mpmath.mpf(b)) for a, b in zip(qi, ki))
            exact.append(float(kappa(N, x)))
            bound.append(float(rel * kappa(N, xa)))
    return (
        torch.from_numpy(np.asarray(exact, dtype=np.float64)),
        torch.from_numpy(np.asarray(bound, dtype=np.float64)),
        f"kappa_{N}(c q.k) exact; bound feature_form_relative_bound * kappa_{N}(c sum|q||k|) "
        f"(m = {m} features, {dtype})",
    )
