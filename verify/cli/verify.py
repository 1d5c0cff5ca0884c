"""``attn-theory verify``: run the property catalogue on the built-in implementations.

Runs every (variant, property, dtype) combination -- float64 and float32 for every property,
bf16/fp16 for the properties that state a low-precision model -- with hypothesis under the
chosen profile, in worker processes (``verify.engine``), and prints one row per property:
examples run, max observed/bound, pass/fail/skip counts. The same results feed
``reports/verification.md`` (``attn-theory report``).
"""

from __future__ import annotations

import argparse
import sys
import textwrap


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default=None, help="hypothesis profile: ci, dev, thorough")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--variant", action="append", default=None, help="only these built-in variants")
    p.add_argument(
        "--select", action="append", default=None, metavar="PROPERTY", help="only these properties"
    )
    p.add_argument("--dtype", action="append", default=None, help="only these dtypes")
    p.add_argument("--max-examples", type=int, default=None, help="examples per property")
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: CPU count)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args: argparse.Namespace) -> int:
    from verify import profiles
    from verify.render.markdown import table

    profile = profiles.selected(args.profile)
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print("device: cuda requested but torch.cuda.is_available() is False", file=sys.stderr)
            return 2
    from verify.engine import catalogue
    from verify.properties.support.base import SHRINK_DRAWS

    try:
        jobs = catalogue.plan(
            args.variant,
            dtypes=tuple(args.dtype) if args.dtype else catalogue.ALL_DTYPES,
            select=args.select,
        )
    except (KeyError, ValueError) as exc:
        print(exc.args[0], file=sys.stderr)
        return 2

    def progress(i, n, job, r):
        if args.quiet:
            return
        ratio = "" if r.max_ratio is None else f" max obs/bound {r.max_ratio:.3g}"
        print(
            f"[{i}/{n}] {job.label:16s} {job.dtype:8s} {r.property_id:28s} {r.status}{ratio}",
            file=sys.stderr,
        )
        if r.status in ("fail", "error"):  # what failed and on what: a rerun need not find it
            print(f"    {r.reason}", file=sys.stderr)
            if r.counterexample:
                print(textwrap.indent(str(r.counterexample), "    "), file=sys.stderr)

    results = catalogue.run(
        jobs,
        device=args.device,
        max_examples=args.max_examples,
        seed=args.seed,
        profile=profile,
        workers=args.jobs,
        progress=progress,
        shrink_draws=SHRINK_DRAWS,
    )
    rows = catalogue.summarize(results)
    print(
        table(
            [
                "property",
                "derivation",
                "examples",
                "max obs/bound",
                "pass",
                "fail",
                "skip",
                "error",
            ],
            [
                [
                    r["property"],
                    r["derivation"],
                    r["examples"],
                    "" if r["max_ratio"] is None else f"{r['max_ratio']:.3g}",
                    r["pass"],
                    r["fail"],
                    r["skip"],
                    r["error"],
                ]
                for r in rows
            ],
        )
    )
    bad = [r for r in rows if r["fail"] or r["error"]]
    for r in bad:
        print(f"FAILED {r['property']}: {', '.join(r['failing'])}", file=sys.stderr)
    return 1 if bad else 0
