"""The ``attn-theory`` command line.

Each sub-command lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; the module is imported only when its command is chosen, so
``attn-theory --help`` stays fast.

Exit codes follow each command's contract; 2 always means a usage error.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "derive": (
        "verify.cli.derive",
        "run the sympy derivations D1-D20 and write reports/derivations.md (+ JSON, figures)",
    ),
    "verify": (
        "verify.cli.verify",
        "run the property catalogue on the built-in implementations and print a table",
    ),
    "check": (
        "verify.cli.check",
        "check an attention variant (pkg.module:object) against the theory",
    ),
    "report": (
        "verify.cli.report",
        "the main job: regenerate every report in reports/ (or --check them)",
    ),
    "bench": (
        "verify.cli.bench",
        "time the attention forms side by side; writes reports/benchmarks.md (+ JSON)",
    ),
    "experiment": (
        "verify.cli.experiment",
        "train tiny models on synthetic tasks; writes reports/experiments.md (+ JSON)",
    ),
}


def _top_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="attn-theory",
        description=(
            "Theory-verification and property-testing suite for softmax attention and its "
            "recurrent and linear approximations."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n"
        + "\n".join(f"  {name:<11} {help_}" for name, (_, help_) in COMMANDS.items())
        + "\n\nRun 'attn-theory COMMAND --help' for a command's options.",
    )
    p.add_argument("command", nargs="?", help="one of: " + ", ".join(COMMANDS))
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        _top_parser().print_help()
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        _top_parser().error(f"command: expected one of {', '.join(COMMANDS)}, got {name!r}")
    module_name, help_ = COMMANDS[name]
    mod = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"attn-theory {name}", description=help_)
    mod.add_arguments(parser)
    args = parser.parse_args(rest)
    return int(mod.run(args) or 0)
