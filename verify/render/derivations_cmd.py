"""``attn-theory derive``: run D1-D10 and write ``derivations.md``/``.json`` and their figures."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from verify.render.figures import DERIVATION_FIGURES, FIG_DIR


def owned_paths() -> set[str]:
    """Paths (relative to the report directory) that ``derive`` regenerates."""
    return {"derivations.md", "derivations.json"} | {f"{FIG_DIR}/{n}" for n in DERIVATION_FIGURES}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--report-dir", default="reports", help="output directory (default: reports)")
    p.add_argument("--quiet", action="store_true", help="print only failures")


def build(stage: Path, *, quiet: bool = True):
    """Run every derivation and write its report files under ``stage``; returns the records."""
    import derivations
    from verify.render import derivations as render
    from verify.render.figures import write_derivation_figures

    records = []
    for did in derivations.MODULES:
        t0 = time.perf_counter()
        rec = derivations.module(did).derive()
        records.append(rec)
        if not quiet:
            took = time.perf_counter() - t0
            print(f"  {rec.id:4s} {rec.status.value:9s} {rec.title}  ({took:.1f} s)")
    figures = write_derivation_figures(stage)
    render.write(stage, records, figures)
    return records


def run(args: argparse.Namespace) -> int:
    from verify.render.staging import staged_write

    t0 = time.perf_counter()
    records = []
    owned = owned_paths()

    def writer(stage: Path) -> None:
        records.extend(build(stage, quiet=args.quiet))

    staged_write(Path(args.report_dir), lambda rel: rel in owned, writer)
    failed = [r.id for r in records if r.status.value == "failed"]
    if not args.quiet:
        print(f"wrote {args.report_dir}/derivations.md in {time.perf_counter() - t0:.1f} s")
    if failed:
        print(f"failed derivations: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
