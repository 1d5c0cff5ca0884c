"""``attn-theory report``: the main job -- regenerate every report in ``reports/``.

Runs the derivations (every D-record), the property catalogue on the built-in implementations, the
checks of the registered third-party variants and the seed-claims table, and writes
``index.md``, ``derivations.*``, ``verification.*``, ``variants/*``, ``claims.*`` and the
figures. ``benchmarks.*`` and ``experiments.*`` belong to their own commands and are only
summarized here from their committed JSON. The whole set is staged and swapped in
(``verify.render.staging``); ``--check`` regenerates into a temporary directory and compares
with the committed reports (``verify.render.compare``).

Determinism: derandomized hypothesis (the ``ci`` profile), no example database, no
shrink-time budget (shrinking is then deterministic), one torch thread per worker, no
timestamps or run times; versions, CPU capability and the seed go in metadata blocks.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from verify.render.figures import DERIVATION_FIGURES, FIG_DIR

#: examples per (variant, property, dtype) in the verification matrix of the report
REPORT_EXAMPLES = 10
QUICK_EXAMPLES = 2
QUICK_VARIANTS = ("softmax", "taylor-2")
REPORT_FIGURES = ("ratio_distribution.png", "error_vs_radius.png")
OWNED_FILES = {
    "index.md",
    "derivations.md",
    "derivations.json",
    "verification.md",
    "verification.json",
    "claims.md",
    "claims.json",
    "faults.md",
    "anchors.md",
    "anchors.json",
    "arithmetic.md",
    "arithmetic.json",
}


def owns(rel: str) -> bool:
    """True for the files ``report`` regenerates (relative POSIX paths in the report dir)."""
    if rel in OWNED_FILES or rel.startswith("variants/"):
        return True
    if rel.startswith(f"{FIG_DIR}/"):
        name = rel.split("/", 1)[1]
        return name in DERIVATION_FIGURES or name in REPORT_FIGURES
    return False


class Progress:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.t0 = time.perf_counter()

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            print(f"[{time.perf_counter() - self.t0:6.1f} s] {msg}", file=sys.stderr, flush=True)


def build(
    stage: Path,
    *,
    quick: bool = False,
    device: str = "cpu",
    jobs: int | None = None,
    progress=None,
    source_dir: Path | None = None,
) -> dict:
    """Write every owned report file under ``stage``; returns a summary dict.

    ``source_dir`` is where the committed ``benchmarks.json`` / ``experiments.json`` are read
    from (default: ``stage``, which holds the copies staged_write carried over).
    """
    from verify import profiles

    progress = progress or (lambda msg: None)
    source_dir = Path(source_dir or stage)
    profiles.load("ci")

    from verify.render.derivations import build as build_derivations

    progress("derivations")
    records = build_derivations(stage, quiet=True, jobs=jobs)

    progress("verification catalogue on the built-in implementations")
    from verify.render import verification

    ver = verification.build(
        stage,
        variants=QUICK_VARIANTS if quick else None,
        max_examples=QUICK_EXAMPLES if quick else REPORT_EXAMPLES,
        device=device,
        jobs=jobs,
        progress=progress,
    )

    from verify.render import claims as claims_mod
    from verify.render.cards import build_cards

    progress("third-party variants")
    # a quick run checks in this process (no worker start-up per card): smoke-sized, as tests do
    from verify.adapters.card_settings import QUICK_CARDS

    cards = build_cards(stage / "variants", quick=quick, isolate=not quick, jobs=jobs,
                        names=QUICK_CARDS if quick else None, progress=progress)  # fmt: skip

    from verify.render import faults

    progress("fault classes")
    faults.write(stage, Path(__file__).resolve().parents[2])

    from verify.render import anchors

    progress("anchors' tolerance rules")
    anchors.write(stage, quick=quick)

    from verify.render import arithmetic

    progress("kernel arithmetics")
    arithmetic.write(stage)

    progress("seed-paper claims")
    claims = claims_mod.build(stage, records=records, verification=ver, source_dir=source_dir)

    progress("figures and index")
    from verify.render import index

    index.build(
        stage,
        records=records,
        verification=ver,
        cards=cards,
        claims=claims,
        source_dir=source_dir,
        quick=quick,
    )
    return {"records": records, "verification": ver, "cards": cards, "claims": claims}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--check",
        action="store_true",
        help="regenerate into a temporary directory and compare with the committed "
        "reports (exit 1 on any change of statement, status, verdict, "
        "counterexample, example count or exported number, or a measured ratio "
        "beyond the stated machine factor: verify.render.compare)",
    )
    p.add_argument("--quick", action="store_true", help="smoke-sized run (tests)")
    p.add_argument("--quiet", action="store_true", help="no progress lines (CI)")
    p.add_argument("--device", default="cpu", help="cpu, or cuda to add GPU columns")
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default CPU count)")
    p.add_argument("--report-dir", default="reports", help="report directory (default reports)")


def run(args: argparse.Namespace) -> int:
    from verify.render.staging import staged_write

    report_dir = Path(args.report_dir)
    progress = Progress(args.quiet)
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print("--device cuda: torch.cuda.is_available() is False", file=sys.stderr)
            return 2
    if args.check:
        if args.quick:
            print(
                "--check compares a full run with the committed reports; drop --quick",
                file=sys.stderr,
            )
            return 2
        from verify.render.compare import compare_dirs

        with tempfile.TemporaryDirectory(prefix="attn-theory-check-") as tmp:
            build(
                Path(tmp),
                device=args.device,
                jobs=args.jobs,
                progress=progress,
                source_dir=report_dir,
            )
            problems = compare_dirs(Path(tmp), report_dir, owns)
        if problems:
            print("reports are stale (run `attn-theory report` and commit):", file=sys.stderr)
            for p in problems:
                print(f"  - {p}", file=sys.stderr)
            return 1
        progress("reports are current")
        return 0
    summary: dict = {}

    def writer(stage: Path) -> None:
        summary.update(
            build(stage, quick=args.quick, device=args.device, jobs=args.jobs, progress=progress)
        )

    staged_write(report_dir, owns, writer)
    progress(f"wrote {report_dir}")
    failed = [r.id for r in summary.get("records", []) if r.status.value == "failed"]
    return 1 if failed else 0


def load_json(path: Path) -> dict | None:
    """A committed JSON report, or None if absent/unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
