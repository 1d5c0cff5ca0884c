"""``anchors.md`` / ``anchors.json``: other projects' tolerance rules (``verify.anchors``, each
re-implemented from its source) and this suite's derived bound (``verify.testing``) judging the
same attention outputs.

For every input configuration and dtype the page runs correct kernels (PyTorch's SDPA, the
``fused`` and ``eager`` emulations of ``verify.attention.lowprec``) and faulty ones (the fused
emulation with one fault), computes once the references the rules need (float64, and the
same-precision plain PyTorch reference of FlashAttention's tests) and records, per rule, its
threshold, the statistic it compares with it, their ratio and its decision. The summary counts
false alarms (a correct kernel judged failing) and misses (a faulty kernel judged passing).

The gradients get their own table (key ``backward``, the page's backward section):
``verify.render.anchors_backward``.

Determinism: fixed generator seeds, one torch thread while computing, no timings; numbers are
kept to 3 significant digits in both files. The JSON names measured quantities ``bound``
(a rule's threshold), ``observed``, ``max_ratio`` and ``measured_*`` so ``report --check``
tolerates other CPUs' roundings while the decisions and counts must be equal.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from verify.render import anchors_backward
from verify.render import markdown as md
from verify.render.metadata import markdown_block

OURS = "ours"
#: ours with the precision model each kernel declares (the eager kernel: ``eager``)
OURS_DECLARED = "ours_declared"
SEED = 20240
DTYPES = ("float32", "bfloat16", "float16")
QUICK_DTYPES = ("bfloat16",)
#: (id, T, S, d, mask): mask "none", "causal" (is_causal, top-left, T == S) or "mask" (causal as
#: a bool attn_mask, bottom-right: query row t sees keys s <= S - T + t). Seed: SEED + index.
CONFIGS = (
    ("short-d64", 512, 512, 64, "none"),
    ("short-d64-causal", 512, 512, 64, "causal"),
    ("short-d128", 512, 512, 128, "none"),
    ("long-d64-causal", 128, 8192, 64, "mask"),
)
QUICK_CONFIGS = ("short-d64", "short-d64-causal")
CORRECT = ("sdpa", "fused", "eager")
FAULTS = ("scale-missing", "mask-shifted", "scores-rounded", "p-truncated")
#: column headings of the page
SHORT = {
    "pytorch_get_tolerances": "PyTorch get_tolerances",
    "pytorch_check_out_and_grad": "PyTorch check_out_and_grad",
    "flash_attn": "FlashAttention 2x",
    "flash_attn3_hopper": "FlashAttention-3",
    "fla_assert_close": "fla assert_close",
    "hipdnn_sdpa_fwd": "hipDNN SDPA fwd",
    OURS: "ours (D10)",
    OURS_DECLARED: "ours, declared model",
}
KERNEL_TEXT = {
    "sdpa": "`torch.nn.functional.scaled_dot_product_attention` (CPU)",
    "fused": "`lowprec.fused_attention` (one key block; P rounded to the input type, float32 "
    "accumulation: FlashAttention's arithmetic)",
    "eager": "`lowprec.eager_attention` (separate operations in the input type)",
}
FAULT_TEXT = {
    "scale-missing": "no 1/sqrt(d)",
    "mask-shifted": "the causal mask shifted by one key (each query row also sees the next key); "
    "causal configurations only",
    "scores-rounded": "scores rounded to the input type before the exp; not float32 (a no-op)",
    "p-truncated": "P rounded toward zero instead of to nearest; not float32 (a no-op)",
}
STATISTIC = {
    "pytorch_get_tolerances": "elementwise isclose: ratio = max |out - ref| / (atol + rtol |ref|) "
    "with ref = ref64 in the dtype; observed = max |out - ref|; threshold = atol (rtol beside "
    "it under Thresholds)",
    "pytorch_check_out_and_grad": "observed = max |ref64 - out|; threshold = max(1e-5, 5 max "
    "|ref64 - ref_lp|) (default fudge 5)",
    "flash_attn": "observed = max |out - ref64.to(dtype)|; threshold = 2 max |ref_lp - "
    "ref64.to(dtype)| (test_flash_attn_output)",
    "flash_attn3_hopper": "observed = max |out - ref64.to(dtype)|; threshold = 2 max |ref_lp - "
    "ref| + 2 max |ref + 0.3 - 0.3 - ref|",
    "fla_assert_close": "observed = rms(ref - out) / (rms(ref) + 1e-8) with ref = "
    "ref64.to(dtype); threshold = the ratio 0.005 (any max |ref - out| <= 1e-6 passes)",
    "hipdnn_sdpa_fwd": "observed = max |out - ref64.to(dtype)|; threshold = the a-priori "
    "tolerance from the tensors' ranges, d and S (float32 compute)",
    OURS: "elementwise: ratio = max |out - ref64| / bound with the derived bound of "
    "`verify.testing.attention_tolerance` (precision=None); observed = max |out - ref64|; "
    "threshold = the largest bound",
    OURS_DECLARED: "as ours, but each kernel under the bound of its own arithmetic "
    "(`precision='eager'` for the eager kernel, `'fused'` for the others); threshold = the "
    "largest of those bounds",
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
    if math.isinf(x):
        return "∞"
    return f"{x:.3g}"


def _ratio(observed: float, bound: float) -> float:
    if math.isnan(observed):
        return math.inf
    if bound > 0:
        return observed / bound
    return 0.0 if observed == 0 else math.inf


def _fault_applies(fault: str, mask: str, dtype: str) -> bool:
    if fault == "mask-shifted":
        return mask != "none"
    if fault in ("scores-rounded", "p-truncated"):
        return dtype != "float32"
    return True


def kernels(mask: str, dtype: str) -> list[tuple[str, bool]]:
    """(kernel name, correct) run for a configuration's mask kind and a dtype."""
    return [(k, True) for k in CORRECT] + [
        (f"fused+{f}", False) for f in FAULTS if _fault_applies(f, mask, dtype)
    ]


# ------------------------------------------------------------------------------------------------
# Inputs, kernels, references
# ------------------------------------------------------------------------------------------------


def _inputs(index: int, T: int, S: int, d: int, mask: str, dtype: str):
    import torch

    g = torch.Generator().manual_seed(SEED + index)
    q, k, v = (torch.randn((1, 1, n, d), generator=g) for n in (T, S, S))
    dt = getattr(torch, dtype)
    attn_mask = None
    if mask == "mask":
        attn_mask = torch.arange(S)[None, :] <= (S - T + torch.arange(T))[:, None]
    return q.to(dt), k.to(dt), v.to(dt), attn_mask


def _run_kernel(name: str, q, k, v, mask: str, attn_mask):
    import torch.nn.functional as F

    from verify.attention import lowprec

    causal = mask == "causal"
    if name == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal)
    if name == "eager":
        return lowprec.eager_attention(q, k, v, causal=causal, attn_mask=attn_mask)
    fault = name.removeprefix("fused").removeprefix("+")
    if fault == "mask-shifted" and mask == "mask":
        # the same fault on a causal mask passed as attn_mask: each row sees one more key
        shifted = attn_mask | attn_mask.roll(1, -1)
        return lowprec.fused_attention(q, k, v, attn_mask=shifted)
    faults = (fault,) if fault else ()
    return lowprec.fused_attention(q, k, v, causal=causal, attn_mask=attn_mask, faults=faults)


def plain_reference(q, k, v, *, causal: bool = False, attn_mask=None):
    """The same-precision plain PyTorch reference (FlashAttention's ``out_pt``:
    ``attention_ref(upcast=False, reorder_ops=True)``): scores ``q @ (k / sqrt(d))^T`` in the
    input dtype, masked entries -inf, ``torch.softmax`` (result in the dtype), ``@ v``."""
    import torch

    from verify.spec.visibility import visible

    T, S, d = q.shape[-2], k.shape[-2], q.shape[-1]
    vis = visible(T, S, causal=causal, attn_mask=attn_mask, device=q.device)
    s = q @ (k / math.sqrt(d)).transpose(-1, -2)
    p = torch.softmax(s.masked_fill(~vis, -torch.inf), -1)
    return torch.nan_to_num(p, nan=0.0) @ v


class _Case:
    """One (configuration, dtype): inputs, references and every rule's threshold."""

    def __init__(self, index: int, T: int, S: int, d: int, mask: str, dtype: str) -> None:
        import torch

        from verify.exact.errors import float64_reference
        from verify.testing import attention_tolerance

        self.q, self.k, self.v, self.attn_mask = _inputs(index, T, S, d, mask, dtype)
        self.mask, self.dt = mask, getattr(torch, dtype)
        kw = dict(causal=mask == "causal", attn_mask=self.attn_mask)
        qkv = (self.q, self.k, self.v)
        self.ref64 = torch.from_numpy(float64_reference("softmax", *qkv, **kw))
        self.bound = attention_tolerance(*qkv, **kw).numpy()
        self.bound_eager = attention_tolerance(*qkv, precision="eager", **kw).numpy()
        # every other kernel here is the fused arithmetic (the emulations, SDPA's CPU kernel)
        self.bound_fused = attention_tolerance(*qkv, precision="fused", **kw).numpy()
        self.lowprec = plain_reference(*qkv, **kw)
        self.common = dict(out_ref64=self.ref64, out_ref_lowprec=self.lowprec, dtype=self.dt)
        self.thr = {name: rule["function"](**self._kwargs(name)) for name, rule in _rules()}
        self.hip_tol = self.thr["hipdnn_sdpa_fwd"]["tolerance"]  # feeds hipDNN's decision

    def _kwargs(self, name: str) -> dict:
        from verify import anchors

        if name == "hipdnn_sdpa_fwd":
            return dict(anchors.hipdnn_ranges_from_tensors(self.q, self.k, self.v), dtype=self.dt)
        return dict(self.common)

    def thresholds(self) -> dict[str, dict]:
        """Per rule: ``bound`` (the threshold) and the rule's reference quantities."""
        t = self.thr
        out = {
            "pytorch_get_tolerances": {
                "bound": t["pytorch_get_tolerances"]["atol"],
                "measured_rtol": t["pytorch_get_tolerances"]["rtol"],
            },
            "pytorch_check_out_and_grad": {
                "bound": t["pytorch_check_out_and_grad"]["threshold"],
                "measured_ref_error": t["pytorch_check_out_and_grad"]["ref_error"],
            },
            "flash_attn": {
                "bound": t["flash_attn"]["threshold"],
                "measured_ref_error": t["flash_attn"]["ref_error"],
            },
            "flash_attn3_hopper": {
                "bound": t["flash_attn3_hopper"]["threshold"],
                "measured_ref_error": t["flash_attn3_hopper"]["ref_error"],
                "measured_fwd_atol": t["flash_attn3_hopper"]["fwd_atol"],
            },
            "fla_assert_close": {
                "bound": t["fla_assert_close"]["ratio"],
                "measured_ref_rms": t["fla_assert_close"]["ref_rms"],
            },
            "hipdnn_sdpa_fwd": {"bound": t["hipdnn_sdpa_fwd"]["tolerance"]},
            OURS: {
                "bound": float(self.bound.max()),
                "measured_min_bound": float(self.bound.min()),
            },
            OURS_DECLARED: {
                "bound": float(max(self.bound_eager.max(), self.bound_fused.max())),
                "measured_min_bound": float(min(self.bound_eager.min(), self.bound_fused.min())),
            },
        }
        return {name: {k: _r(x) for k, x in v.items()} for name, v in out.items()}

    def judge(self, kernel: str, out) -> dict[str, dict]:
        """Per rule: ``observed`` (the rule's statistic), ``max_ratio`` and ``passed``."""
        import torch

        from verify import anchors

        t, dt = self.thr, self.dt
        ref_dt = self.ref64.to(dt)
        res: dict[str, dict] = {}
        for name, rule in _rules():
            if name == "hipdnn_sdpa_fwd":
                passed = rule["passes"](out, out_ref64=self.ref64, dtype=dt, tolerance=self.hip_tol)
            else:
                passed = rule["passes"](out, **self.common)
            res[name] = {"passed": bool(passed)}
        # pytorch_get_tolerances: elementwise isclose
        pt = t["pytorch_get_tolerances"]
        e64 = ref_dt.double()
        diff = (out.double() - e64).abs()
        tol = pt["atol"] + pt["rtol"] * e64.abs()
        res["pytorch_get_tolerances"] |= {
            "observed": diff.max().item(),
            "max_ratio": _nan_max(diff / tol),
        }
        obs = (self.ref64 - out).abs().max().item()
        res["pytorch_check_out_and_grad"] |= {
            "observed": obs,
            "max_ratio": _ratio(obs, t["pytorch_check_out_and_grad"]["threshold"]),
        }
        obs = (out - ref_dt).abs().max().item()
        for name in ("flash_attn", "flash_attn3_hopper"):
            res[name] |= {"observed": obs, "max_ratio": _ratio(obs, t[name]["threshold"])}
        fla = anchors.decide_fla_assert_close(out, out_ref64=self.ref64, dtype=dt)
        res["fla_assert_close"] |= {
            "observed": fla["error_rate"],
            "max_ratio": _ratio(fla["error_rate"], t["fla_assert_close"]["ratio"]),
        }
        obs = (out.float() - ref_dt.float()).abs().max().item()
        res["hipdnn_sdpa_fwd"] |= {"observed": obs, "max_ratio": _ratio(obs, self.hip_tol)}
        err = np.abs(out.detach().to("cpu", torch.float64).numpy() - self.ref64.numpy())
        res[OURS] = _elementwise(err, self.bound)
        res[OURS_DECLARED] = _elementwise(
            err, self.bound_eager if kernel == "eager" else self.bound_fused
        )
        return {
            name: {
                "observed": _r(r["observed"]),
                "max_ratio": _r(r["max_ratio"]),
                "passed": r["passed"],
            }
            for name, r in res.items()
        }


def _elementwise(err: np.ndarray, bound: np.ndarray) -> dict:
    """Our decision: every element within its bound (NaN fails), as ``verify.testing``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, err / bound, np.where(err == 0, 0.0, np.inf))
    ratio = np.where(np.isnan(err), np.inf, ratio)
    return {
        "passed": not bool((ratio > 1.0).any()),
        "observed": math.nan if np.isnan(err).all() else float(np.nanmax(err)),
        "max_ratio": float(ratio.max()),
    }


def _nan_max(x) -> float:
    import torch

    return math.inf if torch.isnan(x).any() else x.max().item()


def _rules():
    from verify import anchors

    return list(anchors.RULES.items())


def rule_names() -> list[str]:
    """The rules on the page: every ``verify.anchors.RULES`` entry, then ours."""
    return [n for n, _ in _rules()] + [OURS, OURS_DECLARED]


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
        for f in FAULTS:
            fr = [r for r in runs if r["kernel"] == f"fused+{f}"]
            caught = sum(not r["rules"][name]["passed"] for r in fr)
            by_fault[f] = {"caught": caught, "runs": len(fr)}
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


def _fla_zero(results: list[dict], dtypes) -> dict:
    """Per dtype: correct runs whose fla ratio is exactly 0, of all correct runs."""
    out = {}
    for dt in dtypes:
        runs = [r for c in results if c["dtype"] == dt for r in c["runs"] if r["correct"]]
        zero = sum(r["rules"]["fla_assert_close"]["observed"] == 0 for r in runs)
        out[dt] = {"count": zero, "of": len(runs)}
    return out


def _sources() -> dict[str, dict]:
    out = {
        name: {
            "source": dict(rule["source"]),
            "description": rule["description"],
            "statistic": STATISTIC[name],
        }
        for name, rule in _rules()
    }
    out[OURS] = {
        "source": {"repo": "this repository", "path": "verify/testing.py"},
        "description": "every |out - ref64| <= the element's derived D10 bound "
        "(attention_tolerance, precision=None: the envelope model for bfloat16/float16, the "
        "largest of the fused, eager and online:16 bounds; two-level for float32), ref64 the "
        "float64 reference on the same rounded inputs.",
        "statistic": STATISTIC[OURS],
    }
    out[OURS_DECLARED] = {
        "source": {"repo": "this repository", "path": "verify/testing.py"},
        "description": "as ours, with the precision model of the kernel's arithmetic: "
        "attention_tolerance(precision='eager') for the eager kernel, precision='fused' for "
        "the others (the fused emulations, SDPA's CPU kernel).",
        "statistic": STATISTIC[OURS_DECLARED],
    }
    return out


def build(quick: bool = False, progress=None) -> dict:
    """Run every (configuration, dtype, kernel, rule); the JSON document."""
    import torch

    from verify.environment import versions

    names = rule_names()
    configs = [c for c in CONFIGS if not quick or c[0] in QUICK_CONFIGS]
    dtypes = QUICK_DTYPES if quick else DTYPES
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a fixed thread count: the same roundings on every run
    results, zero_ref = [], []
    try:
        for dtype in dtypes:
            for cid, T, S, d, mask in configs:
                if progress:
                    progress(f"anchors: {cid} {dtype}")
                index = next(i for i, c in enumerate(CONFIGS) if c[0] == cid)
                case = _Case(index, T, S, d, mask, dtype)
                if case.thr["flash_attn"]["ref_error"] == 0:
                    zero_ref.append(f"{cid} {dtype}")
                runs = []
                for kname, correct in kernels(mask, dtype):
                    out = _run_kernel(kname, case.q, case.k, case.v, mask, case.attn_mask)
                    runs.append(
                        {"kernel": kname, "correct": correct, "rules": case.judge(kname, out)}
                    )
                results.append(
                    {"config": cid, "dtype": dtype, "thresholds": case.thresholds(), "runs": runs}
                )
    finally:
        torch.set_num_threads(threads)
    return {
        "title": "Anchors: other projects' tolerance rules and ours on the same outputs",
        "quick": quick,
        "seed": SEED,
        "configs": [
            {"id": c[0], "T": c[1], "S": c[2], "d": c[3], "mask": c[4], "seed": SEED + i}
            for i, c in enumerate(CONFIGS)
            if c in configs
        ],
        "dtypes": list(dtypes),
        "kernels": {"correct": list(CORRECT), "faults": list(FAULTS)},
        "rules": _sources(),
        "summary": _summary(results, names, dtypes),
        "flash_attn_zero_ref_error": {
            "count": len(zero_ref),
            "of": len(results),
            "cases": zero_ref,
        },
        "fla_zero_ratio": _fla_zero(results, dtypes),
        "results": results,
        "backward": anchors_backward.build(quick=quick, progress=progress),
        "versions": versions(),
    }


# ------------------------------------------------------------------------------------------------
# The page
# ------------------------------------------------------------------------------------------------


def _config_text(c: dict) -> str:
    mask = {
        "none": "non-causal",
        "causal": "causal (`is_causal`)",
        "mask": "causal as a bool `attn_mask` (row t sees keys s <= S - T + t)",
    }[c["mask"]]
    return f"`{c['id']}`: T = {c['T']} query rows, S = {c['S']} keys, d = {c['d']}, {mask}"


def _source_line(name: str, info: dict) -> str:
    s = info["source"]
    if name in (OURS, OURS_DECLARED):
        return f"- **{SHORT[name]}** (`{s['path']}`): {info['description']}"
    extra = f" Also: {s['also']}." if s.get("also") else ""
    fork = f" ({s['upstream']})" if s.get("upstream") else ""
    return (
        f"- **{SHORT[name]}** (`{name}`): `{s['repo']}` `{s['path']}` at commit `{s['commit']}`"
        f"{fork}, {s['lines']}.{extra} Rule: {info['description']}"
    )


def _cell(r: dict) -> str:
    return f"{_fmt(r['max_ratio'])} {'✓' if r['passed'] else '✗'}"


def render(doc: dict) -> str:
    """The Markdown page from the JSON document."""
    names = list(doc["summary"])
    summ = doc["summary"]
    zero = doc["flash_attn_zero_ref_error"]
    out = [
        f"# {doc['title']}",
        "",
        "The same attention outputs judged by the tolerance rules other projects' test suites "
        "use and by this suite's derived bound: for each input configuration and dtype, "
        "correct kernels and faulty ones run on identical inputs, and each rule gives its "
        "threshold, the statistic it compares with it, their ratio (observed/threshold) and its "
        "decision. A *false alarm* is a correct kernel judged failing, a *miss* a faulty kernel "
        "judged passing. Each rule is re-implemented from its source in `verify/anchors.py` "
        "(repository, path and commit below; the ports and their differences are documented "
        "there).",
        "",
        "## Rules",
        "",
    ]
    out += [_source_line(n, doc["rules"][n]) for n in names]
    out += ["", "What each column compares (ref64: float64 reference; ref_lp: the same-precision "
            "plain PyTorch reference):", ""]  # fmt: skip
    out += [f"- {SHORT[n]}: {doc['rules'][n]['statistic']}." for n in names]
    out += ["", "## Inputs and kernels", ""]
    out += [
        f"B = H = 1; q, k, v drawn from N(0, 1) in float32 with `torch.Generator().manual_seed"
        f"({doc['seed']} + configuration index)` and rounded to the dtype "
        f"({', '.join(doc['dtypes'])}); the same draws for every dtype.",
        "",
    ]
    out += [f"- {_config_text(c)} (seed {c['seed']})" for c in doc["configs"]]
    out += ["", "Correct kernels:", ""]
    out += [f"- `{k}`: {KERNEL_TEXT[k]}" for k in doc["kernels"]["correct"]]
    out += ["", "Faulty kernels (`fused+FAULT`: the fused emulation with one fault):", ""]
    out += [f"- `{f}`: {FAULT_TEXT[f]}" for f in doc["kernels"]["faults"]]
    out += [
        "",
        "References: ref64 = `verify.exact.errors.float64_reference` on the rounded inputs; "
        "ref_lp = scores `q @ (k / sqrt(d))^T` in the dtype, masked entries -inf, "
        "`torch.softmax`, `@ v` (FlashAttention's `attention_ref(upcast=False, "
        "reorder_ops=True)`; PyTorch's rules get the same). Computed with one torch thread.",
        "",
        "## Summary",
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
        "Faults caught (caught / runs):",
        "",
        md.table(
            ["fault", *(SHORT[n] for n in names)],
            [
                [f"`{f}`"]
                + [
                    f"{summ[n]['by_fault'][f]['caught']} / {summ[n]['by_fault'][f]['runs']}"
                    for n in names
                ]
                for f in doc["kernels"]["faults"]
            ],
        ),
        "",
        "Notes:",
        "",
        f"- FlashAttention 2x: when the same-precision reference equals the rounded float64 "
        f"reference (ref_error 0) the threshold is 0 and only a bit-identical output passes. "
        f"The reference error was 0 in {zero['count']} of {zero['of']} (configuration, dtype) "
        f"cases{': ' + ', '.join(zero['cases']) if zero['cases'] else ''}. FlashAttention-3's "
        "rule adds 2 max |ref + 0.3 - 0.3 - ref|, which stays positive.",
        "- fla: the ratio 0.005 is the one `tests/ops/test_attn.py` passes; the observed "
        "statistic is a relative RMS error, not a maximum, and its squares and mean are taken in "
        "the kernel dtype, so in float16 errors below about 2.4e-4 square to 0. Correct runs "
        "with a ratio of exactly 0: "
        + ", ".join(f"{dt} {z['count']} of {z['of']}" for dt, z in doc["fla_zero_ratio"].items())
        + ".",
        "- PyTorch get_tolerances: rtol is the largest relative deviation of ref_lp from ref64, "
        "large wherever an output element is near 0, so atol + rtol |ref| is loose there.",
        "- hipDNN: the ranges are the tensors' min and max (the hipDNN tests pass their "
        "initialization range) and the threshold does not look at any reference output.",
        "- PyTorch get_tolerances and ours are elementwise: their ratio is the largest "
        "elementwise ratio (error over the element's allowance), not observed/threshold.",
        *(
            f"- {SHORT[n]}: false alarms on "
            + (", ".join(summ[n]["false_alarm_cases"]) or "none")
            + "."
            for n in (OURS, OURS_DECLARED)
        ),
        "- ours uses `precision=None`, the envelope model for bfloat16/float16 (it contains the "
        "fused, eager and online arithmetics, so a kernel that declares none is never failed "
        "for its rounding, at the cost of tightness: a scores-rounded fused kernel is an eager "
        "step inside it); *ours, declared model* judges each kernel under its own arithmetic "
        "(`precision='fused'`, or `'eager'` for the eager kernel).",
        "- `p-truncated` (P rounded toward zero) stays inside every max-error rule here, ours "
        "included: its error is a fraction of an ulp of each output, but of one sign. The "
        "checker's `rounding-bias` property (a Hoeffding bound on the mean signed error over "
        "independent rows, fault class 13) is the check that fails it.",
        "",
    ]
    out += _thresholds_md(doc, names)
    out += _details_md(doc, names)
    if "backward" in doc:  # the gradient rules (verify/render/anchors_backward.py)
        out += anchors_backward.render(doc["backward"])
    out += [
        "Regenerate with `attn-theory report` (this page: `verify/render/anchors.py`, the "
        "backward section `verify/render/anchors_backward.py`; numbers to 3 significant digits; "
        "the JSON twin `anchors.json` holds the same numbers).",
        "",
        markdown_block({"versions": doc["versions"]}),
        "",
    ]
    return "\n".join(out)


def _thresholds_md(doc: dict, names: list[str]) -> list[str]:
    out = [
        "## Thresholds",
        "",
        "Per configuration and dtype (PyTorch get_tolerances: atol and rtol; fla: the ratio; "
        "ours: the largest elementwise bound):",
        "",
    ]
    rows = []
    for case in doc["results"]:
        t = case["thresholds"]
        row = [f"`{case['config']}`", case["dtype"]]
        for n in names:
            if n == "pytorch_get_tolerances":
                row.append(f"{_fmt(t[n]['bound'])}, {_fmt(t[n]['measured_rtol'])}")
            else:
                row.append(_fmt(t[n]["bound"]))
        rows.append(row)
    return out + [md.table(["config", "dtype", *(SHORT[n] for n in names)], rows), ""]


def _details_md(doc: dict, names: list[str]) -> list[str]:
    out = []
    for dtype in doc["dtypes"]:
        out += [
            f"## {dtype}",
            "",
            "observed/threshold and decision (✓ pass, ✗ fail) per kernel and configuration:",
            "",
        ]
        rows = []
        for case in doc["results"]:
            if case["dtype"] != dtype:
                continue
            for run in case["runs"]:
                label = run["kernel"] if run["correct"] else f"*{run['kernel']}*"
                rows.append(
                    [label, f"`{case['config']}`", *(_cell(run["rules"][n]) for n in names)]
                )
        out += [md.table(["kernel", "config", *(SHORT[n] for n in names)], rows), ""]
    return out


def write(stage: Path, quick: bool = False, progress=None) -> dict:
    """Write ``anchors.md`` and ``anchors.json`` under ``stage``; returns the document."""
    doc = md.json_safe(build(quick=quick, progress=progress))
    stage = Path(stage)
    md.write_json(stage / "anchors.json", doc)
    md.write_text(stage / "anchors.md", render(doc))
    return doc
