"""``attn-theory experiment recall``: train one tiny model per attention form, set-up and seed on
multi-query associative recall (``verify.experiments``), test the orderings and the papers'
claims across seeds, then write ``experiments.md`` / ``.json`` and the figures
(``verify.render.experiments``), swapped in with ``staged_write``.

The full run writes to ``reports/`` (the committed results ``attn-theory report`` reads);
``--quick`` writes to a fresh scratch directory unless ``--out`` names one, and prints no
verdicts."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from verify.cli.options import positive_int, seed
from verify.experiments import DEFAULT_SEEDS, QUICK_FORMS, QUICK_SEEDS

#: when the verdict rules were fixed, as the report states it (``rules_fixed`` of the document)
RULES_BEFORE = "fixed before the runs: the code that trained them computed these verdicts"
RULES_AFTER = (
    "applied after the runs, to the saved runs, by `attn-theory experiment recall --from-runs`"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment", choices=["recall"], help="which experiment (recall: MQAR)")
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke test: 60 steps, seeds {' '.join(map(str, QUICK_SEEDS))}, forms "
        f"{', '.join(QUICK_FORMS)}; writes to a scratch directory (unless --out) and prints no "
        "verdicts",
    )
    p.add_argument(
        "--seeds",
        nargs="+",
        type=seed,
        default=None,
        help=f"seeds (default {' '.join(map(str, DEFAULT_SEEDS))}; --quick: "
        f"{' '.join(map(str, QUICK_SEEDS))})",
    )
    p.add_argument(
        "--max-steps",
        type=positive_int,
        default=None,
        help="step cap per run (default 700; the plateau criterion usually stops earlier)",
    )
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
    p.add_argument(
        "--out",
        "--report-dir",
        dest="out",
        default=None,
        help="output directory (default: reports for the full run, a new scratch directory for "
        "--quick)",
    )
    p.add_argument(
        "--from-runs",
        default=None,
        metavar="FILE",
        help="no training: recompute the statistics, orderings and verdicts from the runs of an "
        "experiments.json (or of the runs log a run writes, one JSON line per run; there only "
        "the seeds with every run are kept) and rewrite the report",
    )
    p.add_argument(
        "--note",
        default=None,
        help="with --from-runs: the report's note, replacing the saved one (say what changed "
        "after the runs and why; it is printed at the top of experiments.md)",
    )
    p.add_argument(
        "--wall-seconds",
        type=float,
        default=None,
        help="with --from-runs on a runs log: the wall time the runs took (for the report)",
    )
    p.add_argument("--quiet", action="store_true", help="no per-run progress lines")


def run(args: argparse.Namespace) -> int:
    from verify.experiments import default_setups, payload, quick_setups, recall

    if args.from_runs is not None:
        return _from_runs(args)
    builtin = recall.builtin_forms()
    names = None
    if args.forms is not None:
        names = [n.strip() for n in args.forms.split(",") if n.strip()]
        unknown = [n for n in names if n not in builtin]
        if unknown or not names:
            print(
                f"--forms: expected names from {', '.join(recall.FORM_NAMES)}, got {args.forms!r}",
                file=sys.stderr,
            )
            return 2
    seeds = (
        list(args.seeds)
        if args.seeds is not None
        else list(QUICK_SEEDS if args.quick else DEFAULT_SEEDS)
    )
    if len(set(seeds)) != len(seeds):
        print(f"--seeds: expected distinct seeds, got {seeds}", file=sys.stderr)
        return 2
    setups = quick_setups(names) if args.quick else default_setups(names)
    if args.max_steps is not None:
        setups = [
            replace(
                s,
                config=replace(
                    s.config,
                    train=replace(
                        s.config.train,
                        max_steps=args.max_steps,
                        min_steps=min(s.config.train.min_steps, args.max_steps),
                    ),
                ),
            )
            for s in setups
        ]
    out = args.out
    if out is None:
        out = tempfile.mkdtemp(prefix="attn-theory-experiment-") if args.quick else "reports"

    def progress(r: recall.RunResult) -> None:
        if args.quiet:
            return
        if r.diverged:
            what = f"diverged at step {r.diverged_step}: {r.cause}" + (
                " [missing eps: excluded]" if r.missing_eps else ""
            )
        else:
            what = f"accuracy {r.accuracy:.4f} ({r.stop} at {r.steps} steps)"
        print(
            f"  {r.setup:<9s} {r.form:<19s} seed {r.seed}: {what}  ({r.seconds:.1f} s)", flush=True
        )

    log = Path(tempfile.gettempdir()) / f"attn-theory-experiment-runs-{os.getpid()}.jsonl"
    if not args.quiet:
        print(f"runs log (one JSON line per finished run): {log}", flush=True)

    def record(r: recall.RunResult) -> None:
        with log.open("a") as fh:
            fh.write(json.dumps(payload.run_record(r)) + "\n")
        progress(r)

    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    t0 = time.perf_counter()
    results = recall.run_experiment(setups, seeds, workers=args.workers, progress=record)
    total = time.perf_counter() - t0
    load = None if load0 is None else (load0, os.getloadavg()[0])
    command = "attn-theory experiment recall" + (" --quick" if args.quick else "")
    if args.max_steps is not None:
        command += f" --max-steps {args.max_steps}"
    if args.seeds is not None:
        command += " --seeds " + " ".join(map(str, seeds))
    if names is not None:
        command += " --forms " + ",".join(names)
    doc = payload.payload(
        setups, seeds, results, quick=args.quick, workers=args.workers,
        total_seconds=total, command=command, load_average=load,
    )  # fmt: skip
    doc["rules_fixed"] = RULES_BEFORE
    _write(out, doc)
    log.unlink(missing_ok=True)
    if not args.quiet:
        _print(doc)
        print(f"wrote {out}/experiments.md in {total:.1f} s")
    return 0


def _write(out, doc: dict) -> None:
    from verify.render import experiments as report
    from verify.render.staging import staged_write

    owned = set(report.OWNED)
    staged_write(Path(out), lambda rel: rel in owned, lambda st: report.write(st, doc))


def _print(doc: dict) -> None:
    if doc["quick"]:
        print("quick smoke run: no orderings tested, no verdicts")
        return
    for o in doc["orderings"]:
        print(f"{o['setup']}: {o['line']}")
    for c in doc["claims"]:
        qualifier = f"; {c['qualifier'].split(':')[0]}" if c.get("qualifier") else ""
        print(f"  [{c['verdict']}{qualifier}] {c['id']}: {c['claim']}")


def _from_runs(args: argparse.Namespace) -> int:
    """``--from-runs``: rewrite the report from saved runs (see the option's help)."""
    from verify.experiments import default_setups, payload

    path = Path(args.from_runs)
    try:
        text = path.read_text()
        if path.suffix == ".jsonl":
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
            results = payload.runs_from_json(rows)
            present = {(r.setup, r.form) for r in results}
            setups = []
            for s in default_setups():
                forms = tuple(f for f in s.forms if (s.name, f.name) in present)
                if forms:
                    setups.append(replace(s, forms=forms))
            pairs = {(st.name, f.name) for st in setups for f in st.forms}
            seeds = sorted(
                s for s in {r.seed for r in results}
                if {(r.setup, r.form) for r in results if r.seed == s} == pairs
            )  # fmt: skip
            dropped = sorted({r.seed for r in results} - set(seeds))
            if dropped and not args.quiet:
                print(f"seeds with missing runs left out: {dropped}")
            results = [r for r in results if r.seed in seeds]
            wall = args.wall_seconds
            if wall is None:
                wall = sum(r.seconds for r in results) / args.workers
            doc = payload.payload(
                setups, seeds, results, quick=False, workers=args.workers,
                total_seconds=wall, command="attn-theory experiment recall",
            )  # fmt: skip
            planned = len(DEFAULT_SEEDS)
            if dropped or len(seeds) < planned:
                doc["note"] = (
                    f"The run was stopped before it finished: {len(seeds)} of the planned "
                    f"{planned} seeds have every run and are reported"
                    + (f" (seeds with missing runs left out: {dropped})" if dropped else "")
                    + "; the statistics below are those of these seeds. The runs of a seed took "
                    f"{sum(r.cpu_seconds for r in results) / max(len(seeds), 1):.0f} CPU-s on "
                    f"average, so the planned {planned} seeds need about "
                    f"{sum(r.cpu_seconds for r in results) / max(len(seeds), 1) * planned / 60:.0f}"
                    " CPU-minutes"
                )
        else:
            saved = json.loads(text)
            doc = payload.recompute(saved)
            # the runs' environment, not this process's (the report describes where they ran)
            doc["environment"] = saved.get("environment", doc["environment"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"--from-runs: cannot read runs from {path}: {exc}", file=sys.stderr)
        return 2
    if args.note is not None:
        doc["note"] = args.note
    doc["rules_fixed"] = RULES_AFTER + (
        "; the note at the top says which rules changed after results had been seen"
        if doc.get("note")
        else ""
    )
    out = args.out or "reports"
    _write(out, doc)
    if not args.quiet:
        _print(doc)
        print(f"wrote {out}/experiments.md (recomputed from {path}, no training)")
    return 0
