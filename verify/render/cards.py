"""Report cards of the third-party adapters: ``reports/variants/<name>.md`` and ``.json``.

:func:`build_cards` is one loop over :data:`verify.adapters.CARDS`: for each adapter it runs
:func:`verify.engine.check.check` (profile ``ci``, float64 and float32, plus bfloat16 where the
adapter claims it), the black-box probes (``verify.probes``) for the input restrictions and what
the variant computes, and the adapter module's ``card_facts`` (SDPA's conventions, fla's
restrictions and feature-map kernels, performer's error as the feature count grows); this module
words those facts and writes each card through :mod:`verify.render.card`. The output holds no
timings, and every number comes from seeded, derandomized runs, so a rerun in the same environment
gives the same bytes.

Command: ``python -m verify.render.cards [REPORT_DIR] [--quick] [--only NAME ...]``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

from verify.adapters import ADAPTERS, CARDS, card_facts, module_of
from verify.adapters.card_settings import (
    CARD_EXAMPLES,
    CARD_TIMEOUT,
    PROFILE,
    QUICK_EXAMPLES,
    QUICK_SELECT,
    SEED,
    SLOW_FIRST,
    card_dtypes,
)
from verify.render import card
from verify.render import markdown as md
from verify.render.card import fmt, short
from verify.render.check import to_json
from verify.spec import faults
from verify.spec.variant import CLAIM_FIELDS

__all__ = ["ADAPTERS", "build_cards", "main"]

DEFAULT_DIR = Path("reports") / "variants"
COMMAND = "python -m verify.render.cards"
#: the claims compared with the probes' suggestions: the claim fields but the name, the layout,
#: the devices and the exp library, which the probes do not settle, and the dtypes (the probes'
#: dtypes are those the forward runs in, not those whose accuracy is claimed)
COMPARED_CLAIMS = tuple(
    f for f in CLAIM_FIELDS if f not in ("name", "layout", "dtypes", "devices", "exp_library")
)


def build_cards(
    report_dir: str | Path = DEFAULT_DIR,
    *,
    quick: bool = False,
    names: Iterable[str] | None = None,
    isolate: bool = True,
    jobs: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> list:
    """Check every adapter and write its report card; returns the check results in order.

    Args:
        report_dir: directory of the cards (created if missing).
        quick: a small run for tests (``QUICK_SELECT``, ``QUICK_EXAMPLES`` examples, float64,
            smaller measurements); the cards say so.
        names: a subset of :data:`ADAPTERS` (default :data:`verify.adapters.CARDS`, those with
            a committed card).
        isolate: each card in a fresh process (``jobs`` of them at a time, spawned; its checks
            in that process, the cards under one watchdog of ``CARD_TIMEOUT`` per card), so no
            card's state reaches another and a card's bytes do not depend on which cards ran
            before it (False: every card in this process, one after another, as tests do; the
            results are the same).
        jobs: cards built at a time when ``isolate`` (default the CPU count).
        progress: called with one line per finished card (in the order they finish).

    Returns:
        the JSON documents of the cards (``verify.render.check.to_json`` of each check result plus
        the ``adapter`` entry), in the order of ``names``; adapters whose package is missing are
        left out, and so are their cards.

    Raises:
        KeyError: an unknown adapter name.
        ValueError: ``jobs`` below 1.
        RuntimeError: cards not finished within the watchdog's time (their processes killed).

    Run it under ``if __name__ == "__main__":`` in scripts: the checks spawn workers.
    """
    import os

    chosen = list(CARDS) if names is None else list(names)
    for n in chosen:
        if n not in ADAPTERS:
            raise KeyError(f"names: unknown adapter {n!r}; known: {sorted(ADAPTERS)}")
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs: expected a positive number of processes, got {jobs}")
    report_dir = Path(report_dir)
    cpus = os.cpu_count() or 1
    if not isolate:
        outcomes = {n: build_card(n, report_dir, quick=quick, isolate=False) for n in chosen}
        for n in chosen:
            _say(progress, n, outcomes[n])
        return [d for d in outcomes.values() if isinstance(d, dict)]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures import TimeoutError as FuturesTimeout

    n_jobs = max(1, min(jobs or cpus, len(chosen)))
    outcomes = {}
    # one card per fresh process (max_tasks_per_child=1), its checks run in that process (no
    # worker start-up, which re-imports each library per battery); the pool's watchdog stops
    # a card that hangs: CARD_TIMEOUT per card, the cards sharing ``n_jobs`` processes
    limit = CARD_TIMEOUT * max(1, -(-len(chosen) // n_jobs))
    pool = ProcessPoolExecutor(n_jobs, mp_context=mp.get_context("spawn"), max_tasks_per_child=1)
    try:
        order = [n for n in SLOW_FIRST if n in chosen] + [n for n in chosen if n not in SLOW_FIRST]
        futures = {
            pool.submit(build_card, n, report_dir, quick=quick, isolate=False): n for n in order
        }
        for fut in as_completed(futures, timeout=limit):
            outcomes[futures[fut]] = fut.result()
            _say(progress, futures[fut], outcomes[futures[fut]])
    except FuturesTimeout:
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.kill()  # the hung card's process: the pool cannot stop it otherwise
        late = [n for n in chosen if n not in outcomes]
        raise RuntimeError(f"cards not finished within {limit:.0f} s: {late}") from None
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return [outcomes[n] for n in chosen if isinstance(outcomes[n], dict)]


def _say(progress, name: str, outcome) -> None:
    if not progress:
        return
    if isinstance(outcome, dict):
        c = outcome["counts"]
        progress(f"{name}: {c['pass']} pass, {c['fail']} fail, {c['skip']} skip")
    else:
        progress(f"{name}: skipped ({outcome})")


def build_card(
    name: str,
    report_dir: str | Path,
    *,
    quick: bool = False,
    isolate: bool = True,
    workers: int | None = None,
) -> dict | str:
    """Check adapter ``name`` (``verify.adapters.ADAPTERS``) and write its card into
    ``report_dir``; returns the card's JSON document, or the reason it was skipped (a str:
    the adapter's package is not installed).

    Args:
        isolate, workers: the check's (``verify.engine.check.check``).

    Raises:
        TargetError: the adapter cannot be built for another reason than a missing package.
    """
    import torch

    from verify.engine.check import check
    from verify.spec.target import TargetError, as_variant

    spec = ADAPTERS[name]
    try:
        variant = as_variant(spec)
    except TargetError as exc:
        if isinstance(exc.__cause__, ImportError):
            return str(exc)
        raise
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # fixed thread count: the same roundings on every run
    try:
        result = check(
            spec,
            dtypes=card_dtypes(variant, quick=quick),
            profile=PROFILE,
            seed=SEED,
            select=list(QUICK_SELECT) if quick else None,
            max_examples=QUICK_EXAMPLES if quick else CARD_EXAMPLES,
            isolate=isolate,
            workers=workers,
            timeout=CARD_TIMEOUT,
        )
        doc = to_json(result)
        if doc["probe"]:
            doc["probe"].pop("runtime_s", None)  # a timing: never in a card
        sections, extra = _card(name, variant, doc, quick=quick, isolate=isolate)
        _write(name, doc, sections, extra, Path(report_dir))
    finally:
        torch.set_num_threads(threads)
    return doc


class _Card(NamedTuple):
    """What an adapter's own card sections are written from."""

    name: str
    doc: dict  # the check's JSON document
    probe: dict  # the probe report's JSON
    facts: dict  # the adapter module's card_facts
    quick: bool


def _card(name: str, variant, doc, *, quick: bool, isolate: bool) -> tuple[list[str], dict]:
    """The card's sections after the declared conventions, and its JSON ``adapter`` entry."""
    from verify import probes
    from verify.render.probes import probe_json

    rep = probes.probe(variant, dtype="float64", seed=SEED)
    probe = probe_json(rep)
    probe.pop("runtime_s", None)
    suggested = probes.suggested_claims(rep)
    extra: dict[str, Any] = {
        "spec": ADAPTERS[name],
        "quick": quick,
        "probe_description": probe["description"],
        "probe_suggested_claims": suggested,
        "lengths": probe.get("lengths", {}),
        "cross": probe.get("cross", {}),
    }
    facts = card_facts(name, quick=quick, isolate=isolate)
    module = module_of(name)
    causes, note = _FAILURE_CAUSES.get(module, ({}, ""))
    out = [_findings(doc, probe["description"], quick)]
    notes = card.reading(doc, probe, causes=causes, causes_note=note)
    if notes:
        out.append(notes)
    out.append(card.claims_vs_probes(doc["claims"], suggested, COMPARED_CLAIMS))
    out.append(card.restrictions("Input restrictions (black-box probes, float64)", probe))
    c = _Card(name, doc, probe, facts, quick)
    if module in _SECTIONS:
        out += [section(c) for fact, section in _SECTIONS[module] if fact in facts]
    elif facts:
        out.append(_measured_facts(c))
    extra.update(facts)
    return out, extra


def _measured_facts(c: _Card) -> str:
    """The adapter module's measured facts (package versions, conventions, findings) as nested
    bullets, for modules without sections of their own."""

    def lines(value, depth: int) -> list[str]:
        pad = "  " * depth
        if isinstance(value, dict):
            out = []
            for key, item in value.items():
                if isinstance(item, (dict, list)) and item:
                    out.append(f"{pad}- {key}:")
                    out += lines(item, depth + 1)
                else:
                    out.append(f"{pad}- {key}: {_plain(item)}")
            return out
        if isinstance(value, list):
            out = []
            for item in value:
                if isinstance(item, (dict, list)):
                    out += lines(item, depth)
                else:
                    out.append(f"{pad}- {_plain(item)}")
            return out
        return [f"{pad}- {_plain(value)}"]

    body = "\n".join(lines(c.facts, 0))
    return f"## Measured conventions and findings\n\n{body}\n"


def _plain(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _write(name: str, doc, sections: list[str], extra: dict, report_dir: Path) -> None:
    from verify.spec.variant import sanitize_name

    stem = sanitize_name(name)
    md.write_text(report_dir / f"{stem}.md", card.render(doc, extra_sections=sections))
    data = dict(doc)
    data["adapter"] = extra
    md.write_json(report_dir / f"{stem}.json", data)  # non-finite floats as "inf", "nan"


def _findings(doc, probe_description: str, quick: bool) -> str:
    lines = ["## What the suite finds", ""]
    if quick:
        lines += [
            f"*Quick run: properties {', '.join(QUICK_SELECT)} with {QUICK_EXAMPLES} examples "
            "in float64 only; the committed cards come from the full run.*",
            "",
        ]
    lines.append(f"- Black-box probes (claims ignored): {probe_description}.")
    lines += [f"- Found by the check's probes: {f}." for f in doc.get("findings", [])]
    lines.append(
        f"- Checked with `attn-theory check {doc['target']} --max-examples {CARD_EXAMPLES}` "
        f"(profile {PROFILE}, seed {SEED}); "
        f"this card: `{COMMAND}`."
    )
    by_prop: dict[str, list[str]] = {}
    for r in doc["results"]:
        if r["status"] in ("pass", "fail", "error"):
            ratio = "" if r.get("max_ratio") is None else f", max obs/bound {fmt(r['max_ratio'])}"
            by_prop.setdefault(r["property_id"], []).append(f"{r['dtype']} {r['status']}{ratio}")
    for pid in ("oracle-agreement", "edge-cases", "dtype-agreement"):
        if pid in by_prop:
            lines.append(f"- `{pid}` (error against the derived bound): {'; '.join(by_prop[pid])}.")
    failing = sorted({r["property_id"] for r in card.failed(doc)})
    if failing:
        lines.append(
            "- Failing properties (minimal inputs below): " + ", ".join(f"`{p}`" for p in failing)
        )
    else:
        lines.append("- No property fails.")
    return "\n".join(lines)


# -- SDPA ---------------------------------------------------------------------------------------
def _sdpa_section(c: _Card) -> str:
    import torch

    conv, ev = c.facts["conventions"], c.facts["bf16_weight_rounding"]
    lines = [
        f"## SDPA conventions measured (torch {torch.__version__})",
        "",
        f"- Causal T ≠ S, {faults.describe(7)}: T = 1, S = 2 gives weights ("
        f"{', '.join(fmt(w) for w in conv['alignment']['weights'])}): query 0 sees "
        f"{conv['alignment']['sees']}; declared `causal_alignment = top-left` and checked by "
        "`causal-alignment`.",
        f"- Row with no visible key, {faults.describe(8)}: "
        + ", ".join(f"{k}: {v}" for k, v in conv["empty_row"].items())
        + " (older torch returned NaN).",
        "- NaN held by a key masked from every query: the output row is "
        + ", ".join(f"{k}: {v}" for k, v in conv["nan_in_masked_key"].items())
        + " — NaN at masked positions propagates, a declared convention of "
        f"{faults.describe(8)} and not a theory violation; the `masks` property uses finite "
        "masked values.",
        "- `is_causal=True` together with `attn_mask` (documented as an error): "
        + "; ".join(f"{k}: {v}" for k, v in conv["causal_with_mask"].items())
        + ". The adapter passes `attn_mask & tril` with `is_causal=False` instead.",
        "",
    ]
    low = [
        r
        for r in c.doc["results"]
        if r["dtype"] in ("bfloat16", "float16") and r["status"] in ("fail", "error")
    ]
    pm = c.doc.get("precision_model") or {}
    found = pm.get("found") or []
    named = "; ".join(
        f"{f['dtype']}: {f['model']} ({f['matches'][f['model']]:.0%} of outputs bit-equal, next "
        f"{f['next'][0]} {f['next'][1]:.0%})"
        if f.get("model")
        else f"{f['dtype']}: none ({f.get('reason')})"
        for f in found
    )
    lines += [
        "### bfloat16/float16: the precision model",
        "",
        "For bfloat16/float16 the fused kernel stores exp(s − max) in the input type "
        "(`conditional_data_ptr(qk_data, qk_reduced_data)` in FlashAttentionKernel.cpp) and "
        "multiplies that by V, while the row sum is accumulated in float32, over key blocks "
        "with the online rescaling. Measured on one key block (bf16, B = H = 2, T = 16, "
        "S = 64, d = 16): SDPA's output equals, bit for bit, the exact softmax rounded once in "
        f"{ev['exact']['bitwise_equal_fraction']:.1%} of entries, and the same computation "
        "with the weights rounded to bf16 before P·V in "
        f"{ev['weights_rounded']['bitwise_equal_fraction']:.1%}.",
        "",
        (
            "The checker's precision probe (nothing declared) bit-matched the outputs against "
            "the emulated models of D10 (`derivations/precision_models.py`) and named "
            f"**{pm.get('model')}** — {named}; every low-precision bound of this card uses it."
        )
        if found
        else "The precision probe did not run (quick run).",
        "",
        (
            "Low-precision properties that fail under that model: "
            + ", ".join(f"`{r['property_id']}` ({fmt(r['max_ratio'])})" for r in low)
            + " — a disagreement with the model, shown, not tuned away."
        )
        if low
        else (
            "The low-precision properties did not run (quick run)."
            if c.quick
            else "No low-precision property fails under that model (bfloat16 and float16)."
        ),
        "",
    ]
    # the exp library: the declared 20-ulp exp against the 1-ulp (SLEEF u10) model
    lines += [
        "### Exp library",
        "",
        "Every CPU dtype runs `aten::_scaled_dot_product_flash_attention_for_cpu` "
        "(torch.profiler), whose `_exp_reduce_sum_fusion_kernel` calls `Vectorized::exp_u20()` "
        "(pytorch/pytorch, aten/src/ATen/native/cpu/FlashAttentionKernel.cpp): the card declares "
        "`exp_library = cpu-torch-exp_u20` (20 ulps as cited, 20.5 from the exact result, in "
        "`derivations.rounding.LIBRARY_EXP_ULPS`).",
    ]
    if "exp_library_comparison" in c.facts:
        declared = {(r["property_id"], r["dtype"]): r for r in c.doc["results"]}
        rows = []
        for r in c.facts["exp_library_comparison"]:
            d = declared.get((r["property_id"], r["dtype"]))
            rows.append(
                [
                    r["property_id"],
                    r["dtype"],
                    f"{d['status']} ({fmt(d['max_ratio'])})" if d else "",
                    f"{r['status']} ({fmt(r['max_ratio'])})",
                ]
            )
        lines += [
            "",
            "The same properties with the 1-ulp model (`exp_library = cpu-sleef-u10`), as "
            "status (max obs/bound):",
            "",
            md.table(["property", "dtype", "cpu-torch-exp_u20 (declared)", "cpu-sleef-u10"], rows),
            "",
            "The declared 20-ulp model is the one the source supports; a pass under the 1-ulp "
            "model only says these inputs did not expose the difference.",
        ]
    return "\n".join(lines)


# -- fla ----------------------------------------------------------------------------------------
def _chunk_size_section(c: _Card) -> str:
    from verify.adapters import fla

    lengths = c.facts["default_chunk_lengths"]
    return "\n".join(
        [
            f"## fla's default chunk size ({fla.CHUNK_SIZE})",
            "",
            f"The battery runs `naive_chunk_based(chunk_size={fla.CHECK_CHUNK})`: with "
            f"the default {fla.CHUNK_SIZE} the only length the catalogue may draw "
            f"(T ≤ 10, a multiple of {fla.CHUNK_SIZE}) is T = {fla.CHUNK_SIZE}, a single "
            "chunk (the cross-chunk state would never be used), on which the mpmath "
            "oracle takes more than the watchdog's minute per example. The probes on "
            f"the default: {lengths.get('rule')}; smallest failing T = "
            f"{lengths.get('smallest_failing')}; working T: "
            f"{lengths.get('passing')}.",
            "",
            md.table(["T", "result"], [[t, short(r)] for t, r in lengths["tested"].items()]),
        ]
    )


def _float64_section(c: _Card) -> str:
    f64, scale = c.facts["float64_inputs"], c.facts["default_scale"]
    rows = [
        [mode, fmt(v["max_abs_diff_vs_float32_call"]), v["outputs_are_float32_numbers"]]
        for mode, v in f64.items()
    ]
    f64_header = ["normalize", "max |o(float64) − o(float32)|", "float32 numbers"]
    srows = [[d, fmt(v["ratio"]), fmt(v["d^-1/2"])] for d, v in scale.items()]
    return "\n".join(
        [
            "## float64 inputs and fla's default scale",
            "",
            "`naive_recurrent_linear_attn` casts q, k, v to float32 and the result back "
            "to the input dtype, so a float64 call returns the float32 computation "
            '(the adapter declares `compute_dtype="float32"`, which the probes also find: '
            "float64 calls are judged against float32 bounds, and gradcheck, which needs "
            "float64 arithmetic, does not apply):",
            "",
            md.table(f64_header, rows),
            "",
            "fla multiplies q by `scale` (default d^-1/2). The claims have no "
            "d-dependent factor for element-wise maps, so the adapter passes "
            "`scale=1.0`; the default multiplies the unnormalized output by d^-1/2 "
            "(normalized: it cancels except against the 1e-10 in the denominator):",
            "",
            md.table(["d", "o(default) / o(scale=1)", "d^-1/2"], srows),
        ]
    )


def _feature_map_section(c: _Card) -> str:
    from derivations.feature_maps import feature_count, symmetric_block_size

    mine = c.name.removeprefix("fla-")
    k = c.facts["feature_map_kernels"][mine]
    rows = [[c, fmt(v)] for c, v in k["max_relative_deviation"].items()]
    if mine == "TaylorFeatureMap":  # orders 0, 1, 2 of the symmetric basis (D1)
        expected, rule = (lambda d: feature_count(2, d)), "1 + d + d(d+1)/2"
    else:  # the order-2 block only
        expected, rule = (lambda d: symmetric_block_size(2, d)), "d(d+1)/2"
    counts = ", ".join(
        f"d = {d}: {m} ({rule} = {expected(int(d))})" for d, m in k["features_by_d"].items()
    )
    text = [
        f"## The kernel {mine} realizes (float64, d = 1..4, inputs in [−2, 2])",
        "",
        "Largest |φ(q)·φ(k) − κ(x)| / κ(Σ|q_i k_i|/√d) with x = q·k/√d (≈ 1e-16 when the "
        "map realizes κ; ≈ 1 or more when it does not):",
        "",
        md.table(["candidate κ", "max relative deviation"], rows),
        "",
        f"Features per d: {counts}.",
    ]
    if "default_normalize_on_cpu" in c.facts:
        fit = c.probe.get("fit", {})
        fit_text = fit.get("detail") or ", ".join(fmt(c) for c in fit.get("coefficients", []))
        text += [
            "",
            "The square kernel (q·k)²/d is 2× the quadratic term of κ_2 at scale 1/√d; it is "
            "not in the claims vocabulary (softmax, κ_N, identity, elu+1, relu, FAVOR+), so "
            "the card keeps `kernel = unknown` and the properties that need a kernel's "
            f"oracle skip. The probes' polynomial fit of κ(x)/κ(0): {fit_text or 'none'}. "
            f"With its default `normalize=True` the map on a CPU tensor "
            f"{c.facts['default_normalize_on_cpu']}.",
        ]
    grads = c.facts["gradients"]
    text += [
        "",
        "Gradients: fla runs the maps' outer product under `fla.utils.checkpoint` "
        "(`torch.utils.checkpoint.checkpoint` without `use_reentrant`, reentrant in this "
        f"torch): `backward()` {grads['backward()']}; `torch.autograd.grad` "
        f"{grads['torch.autograd.grad']} — the gradient properties use `backward()`, as training "
        "does.",
    ]
    return "\n".join(text)


# -- performer ----------------------------------------------------------------------------------
#: the cause of each failure the battery reports, read from performer_pytorch.py and checked by
#: rerunning the properties on performer's own pipeline with both constants set to 0 (every one
#: then passes, except causality: see _PERFORMER_NOTE) and by the card's measurements
_PERFORMER_CAUSES = {
    "oracle-agreement": "the 1e-4 added to every feature (and, causal, the 1e-6 in the "
    "denominator)",
    "edge-cases": "the same constants",
    "weights-vs-reference": "the same constants (the weights stay positive; they are not the "
    "FAVOR+ weights)",
    "convex-combination": "the 1e-6 in the causal denominator: the weights sum to "
    "D/(D + 1e-6 Σφ(q)) < 1",
    "uniform-weights": "the 1e-6 in the causal denominator",
    "single-key": "the 1e-6 in the causal denominator: with one key the output is "
    "v D/(D + 1e-6 Σφ(q)), not v",
    "single-key-gradients": "the 1e-6 in the causal denominator: the one-key output depends on "
    "q and k, so dq, dk ≠ 0",
    "claimed-scale": "the constants: no scale convention fits once they are included",
    "causality": "the key stabilizer M is a maximum over all tokens, later ones included: a "
    "later key rescales every earlier key feature by e^-M, which cancels only without the "
    "constants (measured below)",
    "prefix-invariance": "the same key maximum over all tokens",
    "gradcheck": "M is `.detach()`ed, so the backward pass misses the 1e-4 term's dependence on M",
    "gradients-vs-reference": "the detached M and the constants",
    "dtype-agreement": "the constants (over 2048 tokens the key maximum grows and the "
    "constants weigh more)",
    "favor-kernel-unbiased": "performer's sampler (unsigned QR: directions not Haar "
    "distributed, see below)",
    "favor-orthogonal-variance": "performer's sampler",
}
_PERFORMER_NOTE = (
    "Checked: performer's own `softmax_kernel` and attention functions with both constants set "
    "to 0 pass oracle-agreement, edge-cases, weights-vs-reference, claimed-scale, gradcheck, "
    "gradients-vs-reference (and, causal, prefix-invariance, single-key, single-key-gradients, "
    "uniform-weights, convex-combination, dtype-agreement) in float64 and float32; causality "
    "still fails there, now with NaN: a huge later key underflows every earlier key feature "
    "(0/0) — the key maximum over all tokens is a defect of its own."
)


def _performer_section(c: _Card) -> str:
    bias = c.facts["orthogonal_sign_bias"]
    fracs = ", ".join(f"{f:.3f}" for f in bias["negative_diagonal_fraction"])
    text = [
        "## What performer computes on top of FAVOR+",
        "",
        "`softmax_kernel` returns m^-1/2 (exp(w·x̃ − |x̃|²/2 − M) + 1e-4), x̃ = d^-1/4 x, with M "
        "the row's largest w·x̃ for queries and the largest over all tokens and features for "
        "keys; e^-M cancels in the normalized output, the 1e-4 does not, so the output is not "
        "the FAVOR+ estimate with the same directions (the claimed `projection`), and for keys "
        "M depends on every token, later ones included. The causal CPU form divides by "
        "q·(k_cumsum + 1e-6). `M` is `.detach()`ed, so the backward pass misses the 1e-4 "
        "term's dependence on M. The battery compares with the exact FAVOR+ estimate and "
        "reports what these additions cost.",
        "",
        "### Its random directions are not Haar distributed",
        "",
        "`orthogonal_matrix_chunk` takes Q from `torch.linalg.qr` of a Gaussian matrix without "
        "multiplying its columns by sign(diag(R)) (Mezzadri, Notices AMS 54, 2007), so the "
        "Householder sign convention leaks into the directions. Measured over "
        f"{bias['draws']} blocks at d = {bias['d']}: the fraction with a negative i-th "
        f"coordinate in row i is ({fracs}) where Haar gives 1/2 each. The estimate "
        "E[φ(q)·φ(k)] = exp(c q·k) of D9 then fails (`favor-kernel-unbiased`, "
        "`favor-orthogonal-variance` sample the adapter's feature map, which draws with "
        "performer's sampler).",
    ]
    return "\n".join(text)


def _causal_leak_section(c: _Card) -> str:
    rows = [
        [
            fmt(r["feature_eps"]),
            fmt(r["denominator_eps"]),
            fmt(r["max_change_of_earlier_outputs"]),
        ]
        for r in c.facts["causal_leak"]
    ]
    return "\n".join(
        [
            "## Why later keys change earlier outputs",
            "",
            "performer's own pipeline (`softmax_kernel`, "
            "`causal_linear_attention_noncuda`; float64, T = 4, d = 3, the adapter's "
            "directions) with its constants on and off; key 3 is set to (5, 5, 5) and "
            "the largest change of outputs 0–2 is reported (0 up to rounding for a "
            "causal map):",
            "",
            md.table(["feature eps", "denominator eps", "max change, outputs 0–2"], rows),
        ]
    )


def _feature_count_section(c: _Card) -> str:
    exp = c.facts["feature_count_experiment"]
    st = exp["settings"]
    rows = [
        [
            r["m"],
            fmt(r["mean_error"]),
            fmt(r["std_error"]),
            fmt(r["favor_mean_error"]),
            fmt(r["performer_minus_favor"]),
            fmt(r["haar_favor_mean_error"]),
            fmt(r["d9_kernel_relative_std"]),
        ]
        for r in exp["rows"]
    ]
    header = [
        "m",
        "performer mean error",
        "std over seeds",
        "FAVOR+ mean error",
        "‖performer − FAVOR+‖ / ‖o‖",
        "FAVOR+, Haar blocks",
        "D9 kernel rel. std",
    ]
    return "\n".join(
        [
            "## Error against exact softmax as the number of features grows",
            "",
            f"q, k, v ~ N(0, {st['input_std']}²), B = {st['batch']}, H = {st['heads']}, "
            f"T = S = {st['length']}, d = {st['d']}, float64; {st['seeds']} seeds of "
            "`FastAttention(d, m)` per m. Error: ‖o − o_softmax‖_F / ‖o_softmax‖_F. "
            "FAVOR+: the project's estimate with the same directions; Haar blocks: the "
            "project's estimate with correctly sampled orthogonal directions; the last column "
            "is D9's relative standard deviation of one kernel estimate (m i.i.d. "
            f"features, x·y = 0, |x + y|² = {fmt(st['median_x_plus_y_sq'])}, the "
            "inputs' median), the m^-1/2 rate.",
            "",
            md.table(header, rows),
            "",
            f"Least-squares slope of log(mean error) on log(m): {exp['slope']:.3f} "
            f"(D9 rate: {exp['reference_slope']}); with Haar-distributed blocks "
            f"(`verify.attention.favor_projection`, same m and seeds): "
            f"{exp['haar_slope']:.3f}. The gap to FAVOR+ grows with m: "
            "the largest w·x̃ grows with the number of directions, so the constant 1e-4 "
            "weighs more against the stabilized exponentials.",
        ]
    )


#: adapter module -> its cards' own sections in card order, as (fact, section): a card whose
#: ``card_facts`` hold the fact gets the section ``section(card)``
_SECTIONS: dict[str, tuple[tuple[str, Callable[[_Card], str]], ...]] = {
    "sdpa": (("conventions", _sdpa_section),),
    "fla": (
        ("default_chunk_lengths", _chunk_size_section),
        ("float64_inputs", _float64_section),
        ("feature_map_kernels", _feature_map_section),
    ),
    "performer": (
        ("orthogonal_sign_bias", _performer_section),
        ("causal_leak", _causal_leak_section),
        ("feature_count_experiment", _feature_count_section),
    ),
}
#: adapter module -> (property id -> known cause of its failure, a closing note)
_FAILURE_CAUSES: dict[str, tuple[dict[str, str], str]] = {
    "performer": (_PERFORMER_CAUSES, _PERFORMER_NOTE),
}


# -- command ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """``python -m verify.render.cards [REPORT_DIR] [--quick] [--only NAME ...]``."""
    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    p.add_argument("report_dir", nargs="?", default=str(DEFAULT_DIR))
    p.add_argument("--quick", action="store_true", help="small run (tests)")
    p.add_argument("--only", nargs="+", choices=sorted(ADAPTERS), default=None)
    p.add_argument("--jobs", type=int, default=None, help="cards at a time (default CPU count)")
    args = p.parse_args(argv)
    results = build_cards(
        args.report_dir,
        quick=args.quick,
        names=args.only,
        jobs=args.jobs,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    return 0 if results else 3


if __name__ == "__main__":
    sys.exit(main())
