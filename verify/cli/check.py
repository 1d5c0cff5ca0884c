"""``attn-theory check pkg.module:object``: the property battery on any attention variant.

Prints a short summary (``verify.render.check.summary_text``): what the variant computes, what
ran, the failures grouped by root cause with one minimal counterexample each, the runs the
checker's limits left inconclusive, the skips by reason and the next step; ``--verbose`` adds
every property and dtype. A terminal shows a progress bar (tqdm) on stderr once the battery
runs for more than :data:`PROGRESS_DELAY` seconds (nothing otherwise: stdout holds only the
summary, or only the JSON with ``--json -``); warnings of libraries are captured and counted,
never printed.

Exit codes (:data:`EXIT_CODES`): 0 at least one property ran and none failed; 1 a property
failed; 2 usage or import error (the message names the problem and says what was expected and
found; before any work: a bad or contradictory option, a target the checker cannot call); 3 no
property applicable; 4 an internal error of the checker and no failure; 5 a run inconclusive
(the checker's limits ran out: the time limit, a loaded machine) and no failure nor internal
error. Precedence: 1 over 4 over 5 over 0 over 3.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from verify.cli.options import add_claim_options, claims_from, positive_int, seed
from verify.spec.vocabulary import DTYPES

#: what each exit code means (the command's help says it; ``verify.engine.check`` defines them)
EXIT_CODES = (
    "exit codes: 0 a property ran and none failed; 1 a property failed (the variant's); "
    "2 usage or import error (before any work: a bad or contradictory option, a target the "
    "checker cannot call); 3 no property applicable; 4 an internal error of the checker, no "
    "failure; 5 inconclusive: the checker's limits (--timeout, --max-examples, a loaded "
    "machine) stopped a run before a verdict, no failure nor internal error. Precedence: 1, "
    "4, 5, 0, 3."
)
#: seconds a battery runs before its progress bar appears on a terminal
PROGRESS_DELAY = 3.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXIT_CODES
    p.add_argument(
        "target",
        help="pkg.module:object (an AttentionVariant, f(q, k, v, *, causal), "
        "or a zero-argument factory returning either)",
    )
    add_claim_options(p.add_argument_group("claims").add_argument)
    r = p.add_argument_group("run")
    r.add_argument("--device", default="cpu")
    r.add_argument(
        "--dtype",
        action="append",
        choices=DTYPES,
        help="dtypes to run (repeatable; default float64 and float32)",
    )
    r.add_argument("--profile", choices=("ci", "dev", "thorough"), default=None)
    r.add_argument("--seed", type=seed, default=0)
    r.add_argument("--max-examples", type=positive_int, default=None)
    r.add_argument("--select", nargs="+", action="extend", metavar="PROPERTY", default=None)
    r.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds per property (default 120): past them a run stops with what it has (a "
        "failure found, else inconclusive: exit code 5)",
    )
    r.add_argument("--json", metavar="PATH", help="write the JSON result ('-' for stdout only)")
    r.add_argument("--report-dir", metavar="DIR", help="write the report card here")
    r.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print every property and dtype, and every failure's counterexample and "
        "reproducer",
    )


def _json_dir(path: str | None) -> str | None:
    if path is None or path == "-":
        return None
    return str(Path(path).resolve().parent)


def _unwritable(directory: Path) -> str | None:
    """Why files cannot be written into ``directory`` (created if missing), or None: checked
    before the battery runs, so a bad output option costs nothing."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory):
            pass
    except OSError as exc:
        return f"cannot write there ({exc.strerror or exc})"
    return None


class _Progress:
    """Progress on stderr while the battery runs: a tqdm bar (runs done, the failures so far),
    shown on a terminal only and only once the battery has run :data:`PROGRESS_DELAY` seconds,
    erased at the end; nothing when ``stream`` is not a terminal."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.bar = None
        self.done = self.failed = 0

    def start(self, total: int) -> None:
        """Called by ``verify.engine.check`` with the number of runs planned."""
        try:
            from tqdm import tqdm
        except ImportError:  # pragma: no cover - tqdm is a dependency
            return
        self.bar = tqdm(
            total=total,
            file=self.stream,
            delay=PROGRESS_DELAY,
            unit="run",
            leave=False,
            disable=None,  # off unless the stream is a terminal
            dynamic_ncols=True,
        )

    def __call__(self, r) -> None:
        self.done += 1
        self.failed += r.status == "fail"
        if self.bar is not None:
            self.bar.set_postfix_str(f"{self.failed} failed, last {r.property_id}", refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _usage(msg: str) -> int:
    print(f"attn-theory check: error: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from verify.engine import check as engine
    from verify.engine.preflight import spec_problem
    from verify.render import card
    from verify.render import check as text
    from verify.render.markdown import dumps
    from verify.spec.target import TargetError

    out = sys.stderr if args.json == "-" else sys.stdout
    for option, path in (("--report-dir", args.report_dir), ("--json", _json_dir(args.json))):
        if path is not None and (why := _unwritable(Path(path))):
            return _usage(f"{option} {path}: {why}")
    if args.timeout is not None and not args.timeout > 0:
        return _usage(f"--timeout: expected seconds > 0, got {args.timeout}")
    if why := spec_problem(args.target):
        return _usage(why)
    try:
        claims = claims_from(lambda dest: getattr(args, dest))
    except ValueError as exc:  # contradictory options
        return _usage(str(exc))
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            return _usage("--device cuda: torch.cuda.is_available() is False")
    progress = _Progress(sys.stderr)
    try:
        print(f"checking {args.target} ...", file=sys.stderr)
        result = engine.check(
            args.target,
            dtypes=tuple(args.dtype) if args.dtype else None,
            device=args.device,
            select=args.select,
            max_examples=args.max_examples,
            seed=args.seed,
            profile=args.profile,
            timeout=args.timeout or engine.DEFAULT_TIMEOUT,
            progress=progress,
            **claims,
        )
    except (TargetError, ValueError, TypeError) as exc:
        if args.json:  # the JSON a script waits for says what stopped the check
            doc = dumps({"target": args.target, "exit_code": 2, "usage_error": str(exc)})
            _write_json(args.json, doc)
        return _usage(str(exc))
    finally:
        progress.close()
    print(text.summary_text(result, verbose=args.verbose), file=out)
    if args.report_dir:
        md_path, _ = card.write(result, args.report_dir)
        print(f"report card: {md_path}", file=out)
    if args.json:
        _write_json(args.json, dumps(text.to_json(result)))
    return result.exit_code


def _write_json(where: str, doc: str) -> None:
    """``doc`` to stdout (``-``) or to the file ``where``."""
    if where == "-":
        print(doc)
    else:
        with open(where, "w") as fh:
            fh.write(doc + "\n")
