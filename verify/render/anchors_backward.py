"""The backward table of ``anchors.md`` / ``anchors.json`` (key ``backward``): other projects'
gradient tolerance rules (``verify.anchors_backward``, each ported from its source) and this
suite's derived gradient bounds (``verify.exact.gradient_bounds``, the bound of
``verify.testing.assert_attention_grads_close``) judging the same dq, dk, dv.

For every input configuration and dtype the table runs correct backward kernels
(FlashAttention-2's backward emulated by ``verify.attention.flash_backward``, plain autograd
through ``verify.attention.softmax_attention``, torch SDPA's CPU backward) and faulty ones (the
emulation with one of its seven named defects), computes once the references the rules need
(float64 gradients; the same-precision references of FlashAttention's, PyTorch's and
FlexAttention's tests) and records, per rule and kernel, each gradient's threshold, statistic,
ratio and decision. The summary counts false alarms (a correct kernel judged failing) and
misses (a faulty kernel judged passing).

Determinism: fixed generator seeds, one torch thread while computing, no timings; numbers kept to
3 significant digits. Measured numbers are named ``bound``, ``observed``, ``max_ratio``,
``*_ratio`` and ``measured_*`` (``verify.render.compare``); decisions and counts are exact.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from verify.render import markdown as md

SEED = 20250
DTYPES = ("float32", "bfloat16", "float16")
QUICK_DTYPES = ("bfloat16",)
#: query heads and kv heads of every input (grouped: the kv head's dK, dV sum two query heads)
HEADS, KV_HEADS = 2, 1
#: (id, T = S, d, causal, softcap); seed SEED + index. T = S = 272: a last partial key block
#: of 16 (blocks of 64). The cap of 2 puts scores of size 1 on tanh's curved range.
CONFIGS = (
    ("bwd-d64", 272, 64, False, None),
    ("bwd-d64-causal", 272, 64, True, None),
    ("bwd-d64-softcap", 272, 64, False, 2.0),
)
QUICK_CONFIGS = ("bwd-d64-causal",)
CORRECT = ("flash", "autograd", "sdpa")
OURS, OURS_DECLARED = "ours", "ours_declared"
#: what the FlashAttention-2 emulation declares under ``ours_declared``
DECLARED = {"precision": "online:64", "arithmetic": "flash-attention-2"}
SHORT = {
    "flash_attn_grads": "FlashAttention 3x",
    "flash_attn3_hopper_grads": "FlashAttention-3",
    "pytorch_get_tolerances_grads": "PyTorch get_tolerances",
    "pytorch_check_out_and_grad_grads": "PyTorch check_out_and_grad",
    "flex_attention_grads": "FlexAttention 1.1x mean",
    "xformers_backward": "xformers atol/rtol",
    OURS: "ours (D10, default)",
    OURS_DECLARED: "ours, declared model",
}
KERNEL_TEXT = {
    "flash": "`flash_backward.flash_attention_trainable` (FlashAttention-2's backward emulated: P "
    "recomputed from the log-sum-exp, Delta from the stored output, P and dS rounded to the "
    "input type, float32 accumulation)",
    "autograd": "autograd through `verify.attention.softmax_attention` (float32 compute for "
    "bfloat16/float16, one rounding of the output)",
    "sdpa": "`torch.nn.functional.scaled_dot_product_attention` and its CPU backward "
    "(`enable_gqa=True`); not in the softcap configuration (no cap)",
}


def _r(x: float | None) -> float | None:
    """3 significant digits (inf and nan kept)."""
    if x is None or not math.isfinite(x) or x == 0:
        return x
    return float(f"{x:.3g}")


def _fmt(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, str):  # json_safe's "inf" / "nan"
        return "∞" if x == "inf" else x
    return "∞" if math.isinf(x) else f"{x:.3g}"


def _faults() -> tuple[str, ...]:
    from verify.attention.flash_backward import BACKWARD_FAULTS

    return BACKWARD_FAULTS


def fault_applies(fault: str, causal: bool, softcap, S: int) -> bool:
    """Whether a defect of ``flash_backward`` changes anything on a configuration (a no-op
    defect is not run): hidden keys, a cap, grouped kv heads, a last partial block."""
    from verify.attention.flash_backward import BLOCK

    return {
        "mask-dropped": causal,
        "softcap-no-dtanh": softcap is not None,
        "gqa-first-head": KV_HEADS < HEADS,
        "dv-last-block-dropped": S % BLOCK != 0,
    }.get(fault, True)


def kernels(causal: bool, softcap, S: int) -> list[tuple[str, bool]]:
    """(kernel name, correct) run on a configuration."""
    correct = [(k, True) for k in CORRECT if not (k == "sdpa" and softcap is not None)]
    return correct + [
        (f"flash+{f}", False) for f in _faults() if fault_applies(f, causal, softcap, S)
    ]


def rule_names() -> list[str]:
    """The rules of the table: every ``verify.anchors_backward.RULES`` entry, then ours."""
    from verify.anchors_backward import RULES

    return list(RULES) + [OURS, OURS_DECLARED]


# ------------------------------------------------------------------------------------------------
# Inputs, kernels, references, decisions
# ------------------------------------------------------------------------------------------------


def _inputs(index: int, T: int, d: int, dtype: str):
    import torch

    g = torch.Generator().manual_seed(SEED + index)
    shapes = ((1, HEADS, T, d), (1, KV_HEADS, T, d), (1, KV_HEADS, T, d), (1, HEADS, T, d))
    return [torch.randn(s, generator=g).to(getattr(torch, dtype)) for s in shapes]


def run_kernel(name: str, q, k, v, g, *, causal: bool, softcap) -> dict:
    """{"dq", "dk", "dv"} of kernel ``name`` (``flash``, ``autograd``, ``sdpa``,
    ``flash+FAULT``) for upstream gradient ``g``."""
    import torch
    import torch.nn.functional as F

    from verify.attention import softmax_attention
    from verify.attention.flash_backward import flash_attention_trainable

    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    if name == "sdpa":
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=True)
    elif name == "autograd":
        out = softmax_attention(*leaves, causal=causal, softcap=softcap, enable_gqa=True)
    else:
        fault = name.removeprefix("flash").removeprefix("+")
        out = flash_attention_trainable(
            *leaves, causal=causal, softcap=softcap, faults=(fault,) if fault else ()
        )
    return dict(zip(("dq", "dk", "dv"), torch.autograd.grad(out, leaves, g)))


def _ours(grads: dict, ref64: dict, bounds: dict) -> dict:
    """Our decision, as ``assert_attention_grads_close``: every element within its bound."""
    import numpy as np

    tensors = {}
    for t, got in grads.items():
        err = (got.detach().double() - ref64[t]).abs().numpy()
        b = bounds[t]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(b > 0, err / b, np.where(err == 0, 0.0, np.inf))
        ratio = np.where(np.isnan(err), np.inf, ratio)
        tensors[t] = {
            "passed": not bool((ratio > 1.0).any()),
            "observed": math.nan if np.isnan(err).all() else float(np.nanmax(err)),
            "bound": float(b.max()),
            "max_ratio": float(ratio.max()),
        }
    return {
        "passed": all(r["passed"] for r in tensors.values()),
        "max_ratio": max(r["max_ratio"] for r in tensors.values()),
        "tensors": tensors,
    }


class _Case:
    """One (configuration, dtype): inputs, references, our bounds."""

    def __init__(self, index: int, T: int, d: int, causal: bool, softcap, dtype: str) -> None:
        import torch

        from verify import anchors_backward as ab
        from verify.exact import gradient_bounds as gb
        from verify.testing import DEVICE_EXP_LIBRARY

        self.q, self.k, self.v, self.g = _inputs(index, T, d, dtype)
        self.causal, self.softcap, self.dt = causal, softcap, getattr(torch, dtype)
        qkvg = (self.q, self.k, self.v, self.g)
        kw = dict(causal=causal, softcap=softcap)
        ref = gb.reference_gradients(*qkvg, enable_gqa=True, **kw)[1:]
        self.ref64 = {t: torch.from_numpy(x) for t, x in zip(ab.TENSORS, ref)}
        self.ref_lp = {}
        for name, fn in ab.REFERENCES.items():
            if name == "math_sdpa" and softcap is not None:
                fn = ab.plain_reference_grads  # SDPA has no cap (RULES: differences)
            self.ref_lp[name] = dict(zip(ab.TENSORS, fn(*qkvg, **kw)))
        common = dict(
            dtype=dtype, exp_library=DEVICE_EXP_LIBRARY["cpu"], device="cpu", enable_gqa=True, **kw
        )
        self.bound = gb.gradient_bounds(*qkvg, **common)
        self.bound_declared = gb.gradient_bounds(*qkvg, **DECLARED, **common)

    def judge(self, kernel: str, grads: dict) -> dict[str, dict]:
        from verify import anchors_backward as ab

        res = {}
        for name, rule in ab.RULES.items():
            lp = None if rule["reference"] is None else self.ref_lp[rule["reference"]]
            res[name] = ab.decide(
                name, grads, ref64=self.ref64, ref_lp=lp, dtype=self.dt, softcap=self.softcap
            )
        res[OURS] = _ours(grads, self.ref64, self.bound)
        flash = kernel == "flash" or kernel.startswith("flash+")
        res[OURS_DECLARED] = _ours(grads, self.ref64, self.bound_declared if flash else self.bound)
        return {name: _rounded(r) for name, r in res.items()}


def _rounded(r: dict) -> dict:
    return {
        "passed": bool(r["passed"]),
        "max_ratio": _r(r["max_ratio"]),
        "tensors": {
            t: {k: (bool(x) if k == "passed" else _r(x)) for k, x in v.items()}
            for t, v in r["tensors"].items()
        },
    }


def _thresholds(rules: dict[str, dict]) -> dict[str, dict]:
    """A correct flash run's per-tensor thresholds (``bound``, ``measured_*``): they do not
    depend on the kernel (ours, declared: the bound of the flash kernel's declared model)."""
    return {
        name: {
            t: {k: x for k, x in v.items() if k == "bound" or k.startswith("measured")}
            for t, v in r["tensors"].items()
        }
        for name, r in rules.items()
    }


# ------------------------------------------------------------------------------------------------
# The document
# ------------------------------------------------------------------------------------------------


def _counts(runs: list[dict], name: str) -> dict:
    correct = [r for r in runs if r["correct"]]
    faulty = [r for r in runs if not r["correct"]]
    return {
        "false_alarms": sum(not r["rules"][name]["passed"] for r in correct),
        "correct_runs": len(correct),
        "misses": sum(r["rules"][name]["passed"] for r in faulty),
        "faulty_runs": len(faulty),
    }


def _summary(results: list[dict], names: list[str], dtypes) -> dict:
    runs = [run for case in results for run in case["runs"]]
    out = {}
    for name in names:
        alarms = [
            f"{r['kernel']} {c['config']} {c['dtype']}"
            for c in results
            for r in c["runs"]
            if r["correct"] and not r["rules"][name]["passed"]
        ]
        ratios = sorted(r["rules"][name]["max_ratio"] for r in runs if r["correct"])
        by_fault = {}
        for f in _faults():
            fr = [r for r in runs if r["kernel"] == f"flash+{f}"]
            by_fault[f] = {
                "caught": sum(not r["rules"][name]["passed"] for r in fr),
                "runs": len(fr),
                "min_ratio": min((r["rules"][name]["max_ratio"] for r in fr), default=None),
            }
        out[name] = {
            **_counts(runs, name),
            "measured_median_ratio": _r(statistics.median(ratios)) if ratios else None,
            "max_ratio": ratios[-1] if ratios else None,
            "by_dtype": {
                dt: _counts([r for c in results if c["dtype"] == dt for r in c["runs"]], name)
                for dt in dtypes
            },
            "by_fault": by_fault,
            "false_alarm_cases": alarms,
        }
    return out


def _sources() -> dict[str, dict]:
    from verify import anchors_backward as ab

    out = {
        name: {
            "source": dict(rule["source"]),
            "description": rule["description"],
            "differences": rule["differences"],
            "reference": rule["reference"],
        }
        for name, rule in ab.RULES.items()
    }
    here = {"repo": "this repository", "path": "verify/exact/gradient_bounds.py"}
    out[OURS] = {
        "source": here,
        "description": "every element of dq, dk, dv within its derived bound (gradient_bounds "
        "with no precision declared: the envelope model for bfloat16/float16, two-level for "
        "float32; the CPU arithmetic), against the float64 gradients of the same rounded "
        "inputs; the decision of verify.testing.assert_attention_grads_close.",
        "differences": None,
        "reference": None,
    }
    out[OURS_DECLARED] = {
        "source": here,
        "description": "as ours, with the FlashAttention-2 emulation (correct and faulty) "
        f"judged under precision={DECLARED['precision']!r}, "
        f"arithmetic={DECLARED['arithmetic']!r}; the other kernels as ours.",
        "differences": None,
        "reference": None,
    }
    return out


def build(quick: bool = False, progress=None) -> dict:
    """Run every (configuration, dtype, kernel, rule); the ``backward`` JSON document."""
    import torch

    names = rule_names()
    configs = [c for c in CONFIGS if not quick or c[0] in QUICK_CONFIGS]
    dtypes = QUICK_DTYPES if quick else DTYPES
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a fixed thread count: the same roundings on every run
    results = []
    try:
        for dtype in dtypes:
            for cid, T, d, causal, softcap in configs:
                if progress:
                    progress(f"anchors backward: {cid} {dtype}")
                index = next(i for i, c in enumerate(CONFIGS) if c[0] == cid)
                case = _Case(index, T, d, causal, softcap, dtype)
                runs = []
                for kname, correct in kernels(causal, softcap, T):
                    grads = run_kernel(
                        kname, case.q, case.k, case.v, case.g, causal=causal, softcap=softcap
                    )
                    runs.append(
                        {"kernel": kname, "correct": correct, "rules": case.judge(kname, grads)}
                    )
                results.append(
                    {
                        "config": cid,
                        "dtype": dtype,
                        "thresholds": _thresholds(runs[0]["rules"]),
                        "runs": runs,
                    }
                )
    finally:
        torch.set_num_threads(threads)
    return {
        "title": "Backward: other projects' gradient rules and ours on the same gradients",
        "seed": SEED,
        "heads": HEADS,
        "kv_heads": KV_HEADS,
        "configs": [
            {
                "id": c[0],
                "T": c[1],
                "S": c[1],
                "d": c[2],
                "causal": c[3],
                "softcap": c[4],
                "seed": SEED + i,
            }
            for i, c in enumerate(CONFIGS)
            if c in configs
        ],
        "dtypes": list(dtypes),
        "kernels": {"correct": list(CORRECT), "faults": list(_faults())},
        "declared": dict(DECLARED),
        "rules": _sources(),
        "summary": _summary(results, names, dtypes),
        "results": results,
    }


# ------------------------------------------------------------------------------------------------
# The section of the page
# ------------------------------------------------------------------------------------------------


def _config_text(c: dict) -> str:
    cap = f", softcap {c['softcap']:g}" if c["softcap"] is not None else ""
    causal = "causal" if c["causal"] else "non-causal"
    return f"`{c['id']}`: T = S = {c['T']}, d = {c['d']}, {causal}{cap} (seed {c['seed']})"


def _source_line(name: str, info: dict) -> str:
    s = info["source"]
    if name in (OURS, OURS_DECLARED):
        return f"- **{SHORT[name]}** (`{s['path']}`): {info['description']}"
    extra = "".join(
        f" {label}: {s[key]}."
        for key, label in (("also", "Also"), ("line_numbers", "Lines"), ("upstream", "Fork"))
        if s.get(key)
    )
    return (
        f"- **{SHORT[name]}** (`{name}`): `{s['repo']}` `{s['path']}` at commit `{s['commit']}`, "
        f"{s['lines']}.{extra} Rule: {info['description']} Here: {info['differences']}"
    )


def _cell(r: dict) -> str:
    worst = max(r["tensors"], key=lambda t: _num(r["tensors"][t]["max_ratio"]))
    return f"{_fmt(r['max_ratio'])} {'✓' if r['passed'] else '✗'} {worst}"


def _num(x) -> float:
    return math.inf if x == "inf" else (math.nan if x == "nan" else float(x))


def render(doc: dict) -> list[str]:
    """The Markdown section (lines) from the ``backward`` JSON document."""
    names, summ = list(doc["summary"]), doc["summary"]
    faults = doc["kernels"]["faults"]
    out = [
        f"## {doc['title']}",
        "",
        "The same gradients dq, dk, dv judged by the gradient rules of other projects' test "
        "suites and by this suite's derived backward bound. Every rule judges each gradient "
        "and fails a kernel when one of the three fails; a cell shows the largest "
        "observed/threshold ratio of the three, the decision and the tensor of that ratio. "
        "Each rule is ported from its source in `verify/anchors_backward.py`.",
        "",
        "### Backward rules",
        "",
        *(_source_line(n, doc["rules"][n]) for n in names),
        "",
        "### Backward inputs and kernels",
        "",
        f"B = 1, {doc['heads']} query heads on {doc['kv_heads']} kv head (grouped); q, k, v and "
        "the upstream gradient drawn from N(0, 1) in float32 with `torch.Generator()."
        f"manual_seed({doc['seed']} + configuration index)` and rounded to the dtype "
        f"({', '.join(doc['dtypes'])}); the same draws for every dtype and kernel.",
        "",
        *(f"- {_config_text(c)}" for c in doc["configs"]),
        "",
        "Correct kernels:",
        "",
        *(f"- `{k}`: {KERNEL_TEXT[k]}" for k in doc["kernels"]["correct"]),
        "",
        "Faulty kernels (`flash+DEFECT`: the emulation with one defect of "
        "`flash_backward.BACKWARD_FAULTS`, run where it changes something: `mask-dropped` "
        "causal only, `softcap-no-dtanh` with the cap only): "
        + ", ".join(f"`{f}`" for f in faults)
        + ".",
        "",
        "References: g64 = `gradient_bounds.reference_gradients` (float64, same rounded inputs); "
        "FlashAttention's rules take the same-dtype `attention_ref(upcast=False, "
        "reorder_ops=True)` gradients, PyTorch's the math SDPA's in the dtype (the plain "
        "reference with the cap), FlexAttention's its eager path restated; xformers' none.",
        "",
        "### Backward summary",
        "",
        md.table(
            [
                "rule",
                "false alarms / correct runs",
                "misses / faulty runs",
                "median observed/threshold (correct)",
                "max observed/threshold (correct)",
            ],
            [
                [
                    SHORT[n],
                    f"{s['false_alarms']} / {s['correct_runs']}",
                    f"{s['misses']} / {s['faulty_runs']}",
                    _fmt(s["measured_median_ratio"]),
                    _fmt(s["max_ratio"]),
                ]
                for n, s in summ.items()
            ],
        ),
        "",
        "By dtype (false alarms / correct runs; misses / faulty runs):",
        "",
        md.table(
            ["rule", *doc["dtypes"]],
            [
                [SHORT[n]]
                + [
                    f"{c['false_alarms']}/{c['correct_runs']}; {c['misses']}/{c['faulty_runs']}"
                    for c in s["by_dtype"].values()
                ]
                for n, s in summ.items()
            ],
        ),
        "",
        "Defects caught (caught / runs, smallest observed/threshold among the runs):",
        "",
        md.table(
            ["defect", *(SHORT[n] for n in names)],
            [
                [f"`{f}`"]
                + [
                    f"{summ[n]['by_fault'][f]['caught']} / "
                    f"{summ[n]['by_fault'][f]['runs']} "
                    f"({_fmt(summ[n]['by_fault'][f]['min_ratio'])})"
                    for n in names
                ]
                for f in faults
            ],
        ),
        "",
        *(
            f"- {SHORT[n]}: false alarms on "
            + (", ".join(summ[n]["false_alarm_cases"]) or "none")
            + "."
            for n in names
        ),
        "",
        "Notes:",
        "",
        *_notes(doc),
        "",
    ]
    return out + _thresholds_md(doc, names) + _details_md(doc, names)


def _missed(doc: dict, name: str) -> str:
    """The defects a rule let pass, with their (caught / runs)."""
    s = doc["summary"][name]["by_fault"]
    out = [f"`{f}` ({c['caught']}/{c['runs']})" for f, c in s.items() if c["caught"] < c["runs"]]
    return ", ".join(out) or "none"


def _notes(doc: dict) -> list[str]:
    """Reading aids; every number and list comes from the document."""
    capped = [
        (run["rules"]["flash_attn_grads"]["max_ratio"], case["dtype"])
        for case in doc["results"]
        for run in case["runs"]
        if run["kernel"] == "flash" and case["dtype"] == "float32"
        and any(c["id"] == case["config"] and c["softcap"] for c in doc["configs"])
    ]  # fmt: skip
    out = [
        "- FlashAttention's and FlashAttention-3's differences are taken in the kernel dtype, "
        "so their thresholds are whole ulps of the largest gradient: 3x a reference error of "
        "one ulp allows 3 ulps, whatever the tensor's other elements do.",
        "- PyTorch get_tolerances: rtol is the largest relative deviation of the math "
        "reference over the whole tensor; a gradient element near 0 makes it large and isclose "
        "then admits large errors everywhere. Defects it let pass: "
        + _missed(doc, "pytorch_get_tolerances_grads")
        + ".",
        "- xformers: absolute tolerances (0.9 in bfloat16) far above these gradients' rounding "
        "errors; defects it let pass: " + _missed(doc, "xformers_backward") + ".",
        "- FlexAttention compares mean errors with 1.1x the eager path's, which computes in "
        "float32 and rounds few times: a correct kernel with other roundings can exceed it (its "
        "false alarms above).",
        "- ours (default) let pass: "
        + _missed(doc, OURS)
        + "; ours with the declared model: "
        + _missed(doc, OURS_DECLARED)
        + ". Without a declared model bfloat16/float16 are judged under the envelope, whose "
        "eager member rounds scores and weights to the input type: under a cap its bound is "
        "loose next to the declared online:64 / flash-attention-2 model's.",
    ]
    if capped:
        out.append(
            "- The emulation computes the cap's tanh with tanh.approx's relative error 2^-11 "
            "(`verify.attention.flash.TANH_APPROX_F32_REL`, FlashAttention-2's cutlass::fast_tanh"
            "); in float32 the same-precision references do not have it, so the rules scaled by "
            f"a reference error flag the correct kernel (FlashAttention 3x: {_fmt(capped[0][0])} "
            "x its threshold; FlashAttention-3 adds 3e-4 with a cap) while our bound contains it. "
            "FlashAttention's tests run no float32."
        )
    return out


def _thresholds_md(doc: dict, names: list[str]) -> list[str]:
    rows = []
    for case in doc["results"]:
        t = case["thresholds"]
        cells = [", ".join(_fmt(t[n][x]["bound"]) for x in ("dq", "dk", "dv")) for n in names]
        rows.append([f"`{case['config']}`", case["dtype"], *cells])
    return [
        "### Backward thresholds",
        "",
        "Per configuration and dtype, dq, dk, dv (PyTorch get_tolerances and xformers: the "
        "atol; ours: the largest elementwise bound; ours, declared: the flash kernel's):",
        "",
        md.table(["config", "dtype", *(SHORT[n] for n in names)], rows),
        "",
    ]


def _details_md(doc: dict, names: list[str]) -> list[str]:
    out = []
    for dtype in doc["dtypes"]:
        rows = [
            [
                run["kernel"] if run["correct"] else f"*{run['kernel']}*",
                f"`{case['config']}`",
                *(_cell(run["rules"][n]) for n in names),
            ]
            for case in doc["results"]
            if case["dtype"] == dtype
            for run in case["runs"]
        ]
        out += [
            f"### Backward, {dtype}",
            "",
            "largest observed/threshold, decision (✓ pass, ✗ fail) and its tensor:",
            "",
            md.table(["kernel", "config", *(SHORT[n] for n in names)], rows),
            "",
        ]
    return out
