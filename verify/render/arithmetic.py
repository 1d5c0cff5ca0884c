"""``reports/arithmetic.md`` / ``.json``: the bounds of D16's transforms and D17's kernel
arithmetic on emulated kernels (``verify.arithmetic_table``), with the defaults per device and
dtype."""

from __future__ import annotations

from pathlib import Path

from verify.render import markdown as md


def build() -> dict:
    """The JSON document: the measured table and the defaults it is read against."""
    import torch

    from derivations.kernel_arithmetic import DEVICE_DEFAULTS, describe
    from verify.arithmetic_table import measure
    from verify.exact.errors import default_precision
    from verify.spec.vocabulary import DTYPES

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a fixed thread count: the same roundings on every run
    try:
        table = measure()
    finally:
        torch.set_num_threads(threads)
    return {
        "title": "Kernel arithmetics against their bounds (D16, D17)",
        "defaults": {
            "arithmetic": {dev: describe(a) for dev, a in DEVICE_DEFAULTS.items()},
            "precision": {dt: default_precision(dt) for dt in DTYPES},
        },
        **table,
    }


def render(doc: dict) -> str:
    """The Markdown page from the JSON document."""
    z = doc["sizes"]
    out = [
        f"# {doc['title']}",
        "",
        "Emulations of real kernels' arithmetic (`verify/attention/flash.py`: FlashAttention-2's "
        "forward as its sources state it, with the cap by tanh.approx at its cited worst error, "
        "key-indexed ALiBi, exp2 of a scaled exponent, per-block rescaling, a reciprocal "
        "normalization, split-KV by log-sum-exp; `verify/attention/lowprec.py`: eager and "
        "rounded-weights code) against the float64 reference on the same rounded inputs, "
        "within the bound of the declared precision model and arithmetic "
        "(`verify.exact.errors.attention_error_bound`, the reference's own bound included). "
        f"Inputs: B = 1, H = {z['H']}, T = {z['T']} queries, S = {z['S']} keys (past the 64-key "
        f"block, a last partial block), d = d_v = {z['d']}, N(0, 1) times {doc['scale']}, seeds "
        f"{', '.join(map(str, doc['seeds']))}; non-causal.",
        "",
        "## Defaults",
        "",
        md.table(
            ["device", "arithmetic of a kernel that declares none"],
            sorted(doc["defaults"]["arithmetic"].items()),
        ),
        "",
        "The preset `flash-attention-2` is the CUDA default above (`derivations/"
        "kernel_arithmetic.py`, D17); `+split:P` adds P key splits combined by log-sum-exp.",
        "",
        md.table(
            ["dtype", "precision model of a softmax kernel that declares none"],
            sorted(doc["defaults"]["precision"].items()),
        ),
        "",
        "## Observed/bound",
        "",
        "Median and maximum over the seeds under the declared model and arithmetic; the maximum "
        "under the default model and the CPU arithmetic; each defect's smallest ratio (every "
        "one must exceed 1).",
        "",
    ]
    rows = []
    for r in doc["rows"]:
        faults = ", ".join(f"{f} {x:.3g}" for f, x in r["faults"].items()) or "-"
        rows.append([r["kernel"], r["dtype"], r["model"], r["arithmetic"],
                     f"{r['median_ratio']:.3g}", f"{r['max_ratio']:.3g}",
                     f"{r['default_model']}: {r['default_max_ratio']:.3g}", faults])  # fmt: skip
    out.append(
        md.table(
            ["kernel", "dtype", "model", "arithmetic", "median", "max", "default", "defects"],
            rows,
        )
    )
    out += [
        "",
        "A row whose default ratio exceeds 1 is a correct kernel that the default would fail: "
        "its arithmetic (FlashAttention-2's tanh.approx under a softcap) lies outside the CPU's, "
        "so it must be declared (`--arithmetic flash-attention-2`, the `arithmetic` argument).",
        "",
    ]
    return "\n".join(out)


def write(stage: Path) -> dict:
    """Write ``arithmetic.md`` and ``arithmetic.json`` under ``stage``; returns the document."""
    doc = md.json_safe(build())
    stage = Path(stage)
    md.write_json(stage / "arithmetic.json", doc)
    md.write_text(stage / "arithmetic.md", render(doc))
    return doc
