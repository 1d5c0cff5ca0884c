"""``attn-theory derive``: run D1-D20 and write ``derivations.md``/``.json`` and their figures."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from verify.render.derivations import build, owned_paths


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--report-dir", default="reports", help="output directory (default: reports)")
    p.add_argument("--quiet", action="store_true", help="print only failures")
    p.add_argument(
        "--jobs", type=int, default=None, help="processes deriving at once (default: CPU count)"
    )


def run(args: argparse.Namespace) -> int:
    from verify.render.staging import staged_write

    t0 = time.perf_counter()
    records = []
    owned = owned_paths()

    def writer(stage: Path) -> None:
        records.extend(build(stage, quiet=args.quiet, jobs=args.jobs))

    staged_write(Path(args.report_dir), lambda rel: rel in owned, writer)
    failed = [r.id for r in records if r.status.value == "failed"]
    if not args.quiet:
        print(f"wrote {args.report_dir}/derivations.md in {time.perf_counter() - t0:.1f} s")
    if failed:
        print(f"failed derivations: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
