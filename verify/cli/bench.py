"""``attn-theory bench``: measure (``verify.bench.collect``), then write the two report files
(``verify.render.benchmarks``) with ``verify.render.staging.staged_write``."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from verify.bench.collect import collect
from verify.bench.config import FULL, QUICK
from verify.cli.options import positive_int


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: T in {QUICK.lengths}, {QUICK.repeats} repeats (the test's setting)",
    )
    p.add_argument(
        "--repeats",
        type=positive_int,
        default=None,
        help=f"timed repeats (default {FULL.repeats})",
    )
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (default 1)")
    p.add_argument("--report-dir", default="reports", help="output directory (default: reports)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args: argparse.Namespace) -> int:
    import torch

    from verify.render import benchmarks as report
    from verify.render.staging import staged_write

    cfg = QUICK if args.quick else FULL
    if args.repeats is not None:
        cfg = replace(cfg, repeats=args.repeats)
    if args.threads is not None:
        cfg = replace(cfg, threads=args.threads)

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, flush=True)

    before = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        doc = collect(cfg, log)
    except RuntimeError as err:
        print(f"bench: {err}", file=sys.stderr)
        return 1
    finally:
        torch.set_num_threads(before)
    if args.repeats is not None:
        doc["command"] += f" --repeats {args.repeats}"
    if args.threads is not None:
        doc["command"] += f" --threads {args.threads}"
    owned = set(report.OWNED)
    staged_write(Path(args.report_dir), lambda rel: rel in owned, lambda st: report.write(st, doc))
    log(f"wrote {args.report_dir}/benchmarks.md ({doc['runtime_s']} s)")
    for g in doc["goals"]:
        log(f"  [{ {True: 'met', False: 'MISSED', None: 'n/a'}[g['met']]}] {g['goal']}: "
            f"{g['measured']}")  # fmt: skip
    return 0
