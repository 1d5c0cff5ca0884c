"""What a failure's reproducer will show, and what a low-precision failure can be blamed on,
measured where the failure is found.

- :func:`reference_ratio`: the variant's output against the reference on the counterexample's
  attention inputs, as a multiple of the bound (the failure grouping shows a run whose
  reproducer shows it: ``verify.engine.groups``). The reproducer itself calls
  ``verify.properties.support.reproduce.reference``.
- :func:`precision_sweep` and :func:`precision_verdict`: a bf16/fp16 softmax output off the
  float64 result measured against the bound of every precision model (D10,
  ``derivations.precision_models``), and the sentence the failure states. A precision claim
  is named only when its own bound contains the observed error on the failing example *and*
  the same inputs in float32 stay within the float32 bound: an error that does not shrink with
  the unit roundoff is no rounding. A failure beyond every model is called a defect.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: largest number of scores (B H T S) whose reference :func:`reference_ratio` computes (the
#: mpmath oracle: minimal counterexamples are far below it)
RATIO_SCORES = 256

#: the precision models a bf16/fp16 softmax failure is measured against: the float32-
#: accumulating models a probe can name, the online softmax at the block sizes of real
#: kernels, the envelopes, and sums in the input type (``derivations.precision_models``)
SWEEP_MODELS = (
    "fused",
    "online:16",
    "online:32",
    "online:64",
    "online:128",
    "rounded-weights",
    "eager",
    "envelope",
    "envelope:fp32-scores",
    "input-accumulation:recursive",
    "input-accumulation:pairwise",
    "input-accumulation:blocked:16",
    "input-accumulation:blocked:32",
    "input-accumulation:blocked:64",
    "input-accumulation:blocked:128",
)
#: how a failure's reason names a precision claim whose bound contains its error (read by the
#: hint of ``verify.render.check``)
SUGGESTS = "--precision {model} states it"
#: how a failure's reason says that no precision model contains its error
DEFECT = "beyond every precision model"


def reference_ratio(variant, example, ctx) -> float | None:
    """max |o - reference| / bound of the variant's forward on the attention inputs of
    ``example`` (its own denominator mode, else the variant's convention): what its reproducer
    shows; None when there is none to show (no attention inputs, more than
    :data:`RATIO_SCORES` scores, no reference for the claims, the variant raising)."""
    from verify.properties.support.calls import call
    from verify.properties.support.common import exact_and_bound
    from verify.properties.support.paths import call_kwargs, convention_mode
    from verify.strategies import AttentionInputs

    x = getattr(example, "inputs", example)
    if not isinstance(x, AttentionInputs):
        return None
    s = x.shape
    if s.B * s.H * s.T * s.S > RATIO_SCORES or not variant.parsed_kernel.known:
        return None
    mode = getattr(example, "choices", {}).get("denominator") or convention_mode(variant)
    try:
        from verify.exact.errors import compare

        result, eb = exact_and_bound(variant, x, ctx, denominator=mode)
        o = call(
            variant, x.q, x.k, x.v, causal=x.causal, allow_nonfinite=True,
            **call_kwargs(variant, mode, x.attn_mask),
        )  # fmt: skip
        return float(compare(o, eb, result).ratio)
    except Exception:  # noqa: BLE001 - a diagnosis only: nothing to show
        return None


def error_ratio(out: np.ndarray, ref: np.ndarray, bound: np.ndarray) -> float | None:
    """max |out - ref| / bound over the elements with a finite bound (inf where out is not
    finite or exceeds a zero bound); None when no element has a finite bound (the model states
    nothing there)."""
    err = np.abs(out - ref)
    finite = np.isfinite(bound)
    if not finite.any():
        return None
    if np.isnan(err[finite]).any():
        return float("inf")
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(bound > 0, err / bound, np.where(err == 0, 0.0, np.inf))
    r = np.where(finite, r, 0.0)
    return float(r.max()) if r.size else 0.0


def precision_sweep(
    kernel: str,
    q,
    k,
    v,
    out,
    ref,
    *,
    dtype: str,
    bound_kwargs: dict[str, Any],
    models=SWEEP_MODELS,
) -> list[tuple[str, float | None]]:
    """(model, max |out - ref| / bound) for each precision model of ``models`` (None: the
    model has no bound for these sizes, e.g. a recursive bf16 sum of more than 256 terms).

    Args:
        kernel: the claimed kernel (``softmax``; other kernels have no precision models).
        q, k, v: the inputs the variant received for the compared rows, (B, H, R, d),
            (B, H, S, d), (B, H, S, d_v) in ``dtype``.
        out: the variant's output on those rows, float64 numpy (B, H, R, d_v).
        ref: the float64 reference of those rows (``verify.exact.errors.float64_reference``).
        dtype: the input dtype (``bfloat16`` or ``float16``).
        bound_kwargs: the other keywords of ``verify.exact.errors.attention_error_bound``
            (mask, scale, denominator, device, arithmetic, ...), without ``precision``.

    Raises:
        ValueError: a model name ``derivations.precision_models.parse_precision`` rejects.
    """
    from derivations.precision_models import parse_precision
    from verify.exact import errors

    out_np = np.asarray(out, dtype=np.float64)
    ref_np = np.asarray(ref, dtype=np.float64)
    rows: list[tuple[str, float | None]] = []
    for model in models:
        parse_precision(model)
        kw = {**bound_kwargs, "precision": model}
        try:
            eb = errors.attention_error_bound(kernel, q, k, v, dtype=dtype, exact=None, **kw)
        except (ValueError, NotImplementedError):  # ModelNotApplicable: no bound here
            rows.append((model, None))
            continue
        rows.append((model, error_ratio(out_np, ref_np, np.asarray(eb.bound))))
    return rows


#: the models a probe finding rules out: scores kept at float32 resolution (the
#: ``envelope:fp32-scores`` fallback) contradict the eager model's input-type scores
RULED_OUT = {"envelope:fp32-scores": ("eager", "envelope")}


def precision_verdict(
    sweep: list[tuple[str, float | None]],
    float32_ratio: float | None,
    claimed: str | None = None,
) -> str:
    """The sentence a low-precision failure states about the precision models: the tightest
    model whose bound contains the error (the largest error/bound <= 1; named as a claim,
    :data:`SUGGESTS`) when the same inputs in float32 pass (``float32_ratio`` <= 1, None: not
    measured) and the ``claimed`` model's finding does not rule it out (:data:`RULED_OUT`),
    else that the error lies beyond every model (:data:`DEFECT`) or does not shrink with the
    unit roundoff."""
    shown = ", ".join(f"{m} {'n/a' if r is None else f'{r:.3g}'}" for m, r in sweep)
    out = RULED_OUT.get(claimed or "", ())
    inside = [m for m, r in sorted(sweep, key=lambda mr: -(mr[1] or 0.0))
              if r is not None and r <= 1.0 and m not in out]  # fmt: skip
    head = f"error / bound under each precision model on this example: {shown}"
    if float32_ratio is not None and float32_ratio > 1.0:
        return (
            f"{head}; the same inputs in float32 exceed the float32 bound too (ratio "
            f"{float32_ratio:.3g}): the error does not shrink with the unit roundoff, so no "
            f"precision claim explains it ({DEFECT}: a defect of the computation)"
        )
    if not inside:
        return f"{head}; {DEFECT}: a defect of the computation, not a rounding"
    return (
        f"{head}; within the bound of {', '.join(inside)} (the float32 run passes): "
        + SUGGESTS.format(model=inside[0])
        + " if the kernel computes that way"
    )


#: the softcap constants :func:`fitted_softcap` tries first (log-spaced, 0.25 to 4096), before
#: refining around the best; "no cap" is tried beside them
SOFTCAP_GRID = tuple(0.25 * 2.0 ** (i / 4) for i in range(57))


def fitted_softcap(variant, example, ctx) -> tuple[float | None, float] | None:
    """The softcap C that the variant's output on ``example`` fits, for a failure under a
    softcap claim: (C, max |o - reference_C| / bound_C), C = None meaning no cap, when some C
    (or none) puts the output within its own D16 bound and the claimed C does not; None
    otherwise (no softcap claimed, no attention inputs, more than :data:`RATIO_SCORES` scores,
    nothing fits). The search: :data:`SOFTCAP_GRID`, then a golden-section refinement of log C
    around the best grid point (the output is smooth in C)."""
    import math

    from verify.properties.support.calls import call
    from verify.properties.support.common import exact_and_bound
    from verify.properties.support.paths import call_kwargs, convention_mode
    from verify.strategies import AttentionInputs

    claimed = getattr(variant, "softcap", None)
    x = getattr(example, "inputs", example)
    if claimed is None or not isinstance(x, AttentionInputs):
        return None
    s = x.shape
    if s.B * s.H * s.T * s.S > RATIO_SCORES:
        return None
    mode = getattr(example, "choices", {}).get("denominator") or convention_mode(variant)
    try:
        from verify.exact.errors import compare

        o = call(
            variant, x.q, x.k, x.v, causal=x.causal, allow_nonfinite=True,
            **call_kwargs(variant, mode, x.attn_mask),
        )  # fmt: skip

        def ratio(c: float | None) -> float:
            ref, eb = exact_and_bound(variant.with_claims(softcap=c), x, ctx, denominator=mode)
            return float(compare(o, eb, ref).ratio)

        if ratio(claimed) <= 1.0:
            return None
        tried = {None: ratio(None)} | {c: ratio(c) for c in SOFTCAP_GRID}
        best = min(tried, key=lambda c: tried[c])
        if best is not None:  # golden section on log C between the grid neighbours
            step = 2.0**0.25
            lo, hi = math.log(best / step), math.log(best * step)
            g = (math.sqrt(5) - 1) / 2
            for _ in range(80):  # to a relative 1e-16 of C: a float64 bound is that tight
                a, b = hi - g * (hi - lo), lo + g * (hi - lo)
                if ratio(math.exp(a)) < ratio(math.exp(b)):
                    hi = b
                else:
                    lo = a
            c = math.exp((lo + hi) / 2)
            if (r := ratio(c)) < tried[best]:
                best, tried[best] = c, r
            if tried[best] <= 1.0:  # the simplest C the outputs fit equally (bf16: a range)
                best = _simplest_fit(ratio, best)
                tried[best] = ratio(best)
        return (best, tried[best]) if tried[best] <= 1.0 else None
    except Exception:  # noqa: BLE001 - a diagnosis only
        return None


def _simplest_fit(ratio, best: float) -> float:
    """The number with the fewest significant digits in the interval of C around ``best``
    where ``ratio(C) <= 1`` (its edges bisected on log C), nearest ``best``: in bf16 a range of
    caps fits the outputs equally, and C = 50 is what a person wrote, not 51.3877."""
    import math

    def edge(direction: int) -> float:
        inside, step = math.log(best), 0.25 * math.log(2.0)
        outside = inside + direction * step
        while ratio(math.exp(outside)) <= 1.0 and abs(outside - math.log(best)) < 4.0:
            inside, outside = outside, outside + direction * step
        for _ in range(40):
            mid = (inside + outside) / 2
            inside, outside = (mid, outside) if ratio(math.exp(mid)) <= 1.0 else (inside, mid)
        return math.exp(inside)

    lo, hi = edge(-1), edge(+1)
    for digits in range(1, 17):
        unit = 10.0 ** (math.floor(math.log10(hi)) - digits + 1)
        first, last = math.ceil(lo / unit), math.floor(hi / unit)
        if first <= last:
            c = min(range(first, last + 1), key=lambda m: abs(m * unit - best)) * unit
            c = float(f"{c:.{digits}g}")
            if lo <= c <= hi and ratio(c) <= 1.0:
                return c
    return best


#: properties whose failure states which keys the stepped token reads (:func:`step_key_fit`)
STEP_FITTED = frozenset({"state-step", "decode-steps"})
#: how the reason says it (read by the hint of ``verify.render.check``)
STEP_FIT_SAYS = "the stepped token reads"


def _stepped_output(variant, x, property_id: str):
    """The last token's output after prefill of the first T - 1 tokens and one step, canonical
    (B, H, 1, d_v), through the state API (state-step) or the decode path (decode-steps)."""
    T = x.shape.T
    first = [t[:, :, : T - 1] for t in (x.q, x.k, x.v)]
    last = [t[:, :, T - 1 : T] for t in (x.q, x.k, x.v)]
    if property_id == "state-step":
        from verify.properties.support.calls import prefill, step

        _, st = prefill(variant, *first, allow_nonfinite=True)
        o, _ = step(variant, st, *(t[:, :, 0] for t in last), allow_nonfinite=True)
        return o[:, :, None]
    from verify.properties.support.decode_calls import prefill as decode_prefill
    from verify.properties.support.decode_calls import step as decode_step

    _, st = decode_prefill(variant, *first)  # T = 1: the empty cache
    return decode_step(variant, st, *last)[0]


def step_key_fit(variant, example, ctx, property_id: str) -> str | None:
    """Which of its T causal keys the stepped token's output reads, for a failure of
    ``property_id`` (:data:`STEP_FITTED`): the output of prefill(T - 1) + one step is compared
    with the claimed kernel over each candidate key set of the last query, within that
    reference's own D10 bound: every key (then None: the defect is elsewhere), every key but
    its own (the step reads the cache before appending), the last W < T keys (the cache
    dropped its oldest entries), the first W < T keys (the cache stopped storing new ones).
    The sentence for the first set that fits; None when none does or there is nothing to
    compare (no attention inputs, T < 2 (T < 1 on a decode path), more than
    :data:`RATIO_SCORES` scores, no reference for the claims, the path raising)."""
    import dataclasses

    import torch

    from verify.exact.errors import compare
    from verify.properties.support.common import exact_and_bound
    from verify.properties.support.paths import convention_mode
    from verify.strategies import AttentionInputs

    x = getattr(example, "inputs", example)
    if not isinstance(x, AttentionInputs) or not variant.parsed_kernel.known:
        return None
    B, H, T = x.shape.B, x.shape.H, x.shape.T
    shortest = 1 if property_id == "decode-steps" else 2  # the decode protocol's empty prefill
    if T < shortest or B * H * T * T > RATIO_SCORES:
        return None
    try:
        o = _stepped_output(variant, x, property_id).detach().cpu().to(torch.float64)

        mode = convention_mode(variant)

        def fits(keys: list[int]) -> bool:
            mask = torch.zeros(1, 1, 1, T, dtype=torch.bool)
            mask[..., keys] = True
            shape = dataclasses.replace(x.shape, T=1)
            xi = dataclasses.replace(x, q=x.q[:, :, T - 1 :], causal=False, attn_mask=mask,
                                     shape=shape)  # fmt: skip
            result, eb = exact_and_bound(variant, xi, ctx, denominator=mode)
            return float(compare(o, eb, result).ratio) <= 1.0

        if fits(list(range(T))):
            return None
        cands = [(list(range(T - 1)), "every key but its own: the step attends over the cache "
                  "before appending its own key and value (append first)")]  # fmt: skip
        for w in range(T - 1, 0, -1):
            cands.append((list(range(T - w, T)), (
                f"only the last {w} of its {T} keys: the cache dropped its oldest {T - w} "
                f"(a buffer of {w} slots overwritten or rolled); keep every entry, or, if a "
                f"window of {w} keys is meant, the forward must apply it too (--window "
                f"{w - 1},0 claims it for both)")))  # fmt: skip
            cands.append((list(range(w)), (
                f"only the first {w} of its {T} keys: the cache stopped storing new keys "
                f"after {w} (its own dropped too): append every new key and value")))  # fmt: skip
        for keys, said in cands:
            if fits(keys):
                return f"{STEP_FIT_SAYS} {said}"
        return None
    except Exception:  # noqa: BLE001 - a diagnosis only
        return None
