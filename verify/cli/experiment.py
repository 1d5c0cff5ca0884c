"""``attn-theory experiment recall``: train one tiny model per attention form on multi-query
associative recall (``verify.experiments``), then write ``reports/experiments.md`` / ``.json``
and the figure (``verify.render.experiments``), swapped in with ``staged_write``."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from verify.cli.options import positive_int, seed
from verify.experiments import DEFAULT_SEEDS, QUICK_FORMS, quick_config


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment", choices=["recall"], help="which experiment (recall: MQAR)")
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke test: a few steps, seed 0, forms {', '.join(QUICK_FORMS)}",
    )
    p.add_argument(
        "--seeds",
        nargs="+",
        type=seed,
        default=None,
        help=f"seeds (default {' '.join(map(str, DEFAULT_SEEDS))}; --quick: 0)",
    )
    p.add_argument("--steps", type=positive_int, default=None, help="training steps per run")
    p.add_argument(
        "--forms",
        default=None,
        help="comma-separated attention forms (default: all; see the report for the names)",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        default=2,
        help="worker processes, one torch thread each; results do not depend on it (default 2)",
    )
    p.add_argument("--report-dir", default="reports", help="output directory (default: reports)")
    p.add_argument("--quiet", action="store_true", help="no per-run progress lines")


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from verify.experiments import payload, recall
    from verify.render import experiments as report
    from verify.render.staging import staged_write

    builtin = recall.builtin_forms()
    if args.forms is not None:
        names = [n.strip() for n in args.forms.split(",") if n.strip()]
    else:
        names = list(QUICK_FORMS if args.quick else recall.FORM_NAMES)
    unknown = [n for n in names if n not in builtin]
    if unknown or not names:
        print(
            f"--forms: expected names from {', '.join(recall.FORM_NAMES)}, got {args.forms!r}",
            file=sys.stderr,
        )
        return 2
    seeds = (
        list(args.seeds) if args.seeds is not None else ([0] if args.quick else list(DEFAULT_SEEDS))
    )
    if len(set(seeds)) != len(seeds):
        print(f"--seeds: expected distinct seeds, got {seeds}", file=sys.stderr)
        return 2
    cfg = quick_config() if args.quick else recall.ExperimentConfig()
    if args.steps is not None:
        cfg = replace(cfg, train=replace(cfg.train, steps=args.steps))
    forms = [builtin[n] for n in names]

    def progress(r: recall.RunResult) -> None:
        if args.quiet:
            return
        what = (
            f"diverged at step {r.diverged_step}: {r.reason}"
            if r.diverged
            else (f"accuracy {r.accuracy:.4f}")
        )
        print(f"  {r.form:<20s} seed {r.seed}: {what}  ({r.seconds:.1f} s)", flush=True)

    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    t0 = time.perf_counter()
    results = recall.run_experiment(cfg, forms, seeds, workers=args.workers, progress=progress)
    total = time.perf_counter() - t0
    load = None if load0 is None else (load0, os.getloadavg()[0])
    command = "attn-theory experiment recall" + (" --quick" if args.quick else "")
    if args.steps is not None:
        command += f" --steps {args.steps}"
    if args.seeds is not None:
        command += " --seeds " + " ".join(map(str, seeds))
    if args.forms is not None:
        command += " --forms " + ",".join(names)
    doc = payload.payload(
        cfg, forms, seeds, results, quick=args.quick, workers=args.workers,
        total_seconds=total, command=command, load_average=load,
    )  # fmt: skip
    owned = set(report.OWNED)
    staged_write(Path(args.report_dir), lambda rel: rel in owned, lambda st: report.write(st, doc))
    if not args.quiet:
        print(doc["ordering_line"])
        for c in doc["claims"]:
            print(f"  [{c['verdict']}] {c['claim']}")
        print(f"wrote {args.report_dir}/experiments.md in {total:.1f} s")
    return 0
