"""The parts of README.md generated from the code, so that the README says what the tool takes.

* between ``<!-- claim-options:start -->`` and ``<!-- claim-options:end -->`` (section "Checking
  your own attention variant"): the claim options of ``attn-theory check``, the table of
  ``verify.cli.options.markdown`` built from ``CLAIM_OPTIONS``;
* between ``<!-- plugin-options:start -->`` and ``<!-- plugin-options:end -->`` (the pytest
  plugin's section): every option the plugin registers (``verify.cli.pytest_plugin.
  pytest_addoption``), the claim options with their ``attn-`` prefix first;
* the number of properties of the catalogue (``verify/properties/catalogue.json``) wherever the
  README states it: "ran R of N properties" in the example summary, "(N with today's catalogue".

``python -m verify.cli.readme`` exits 1 when README.md differs from :func:`generated` (saying
where), ``--write`` rewrites it; ``tests/test_check_usage.py`` fails on any difference.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path

#: the README of the repository this module belongs to
README = Path(__file__).resolve().parents[2] / "README.md"
#: the marked blocks: name -> the function generating its content
BLOCKS = ("claim-options", "plugin-options")
#: where the README states the catalogue's size: (pattern, the group holding the number)
COUNTS = (
    (re.compile(r"(ran \d+ of )(\d+)( properties)"), 2),
    (re.compile(r"(\()(\d+)( with today's catalogue)"), 2),
)


def catalogue_size() -> int:
    """The number of properties in ``verify/properties/catalogue.json``."""
    import json
    from importlib.resources import files

    return len(json.loads(files("verify.properties").joinpath("catalogue.json").read_text()))


def plugin_options() -> list[tuple[str, str]]:
    """(option, help) of every option ``verify.cli.pytest_plugin`` registers, in its order."""
    from verify.cli.pytest_plugin import pytest_addoption

    seen: list[tuple[str, str]] = []

    class _Group:
        def addoption(self, *names, **kw):
            seen.append((" / ".join(names), kw.get("help", "")))

    class _Parser:
        def getgroup(self, *args, **kw):
            return _Group()

    pytest_addoption(_Parser())
    return seen


def block(name: str) -> str:
    """The generated content of the marked block ``name`` (:data:`BLOCKS`)."""
    from verify.cli.options import CLAIM_OPTIONS, markdown, spellings

    if name == "claim-options":
        return markdown()
    if name == "plugin-options":
        claims = {s.split(" ")[0] for opt in CLAIM_OPTIONS for s in spellings(opt, "attn-")}
        rest = [(o, h) for o, h in plugin_options() if o not in claims]
        names = [f"`{s}`" for opt in CLAIM_OPTIONS for s in spellings(opt, "attn-")]
        head = "Claim options (those of `attn-theory check`, prefixed): " + ", ".join(names) + "."
        out = textwrap.wrap(head, width=100, break_long_words=False, break_on_hyphens=False)
        out.append("")
        out.append("Run options of the plugin:")
        out.append("")
        out += [f"- `{o}`: {h}" for o, h in rest]
        return "\n".join(out) + "\n"
    raise KeyError(f"name: expected one of {BLOCKS}, got {name!r}")


def generated(text: str) -> str:
    """``text`` (the README) with every marked block and stated catalogue size regenerated.

    Raises:
        ValueError: a marker of :data:`BLOCKS` is missing or out of order.
    """
    for name in BLOCKS:
        start, end = f"<!-- {name}:start -->\n", f"<!-- {name}:end -->"
        i, j = text.find(start), text.find(end)
        if i < 0 or j < i:
            raise ValueError(f"README: the markers {start.strip()} ... {end} are missing")
        text = text[: i + len(start)] + block(name) + text[j:]
    n = str(catalogue_size())
    for pattern, _ in COUNTS:
        text = pattern.sub(lambda m: m.group(1) + n + m.group(3), text)
    return text


def differences(text: str) -> list[str]:
    """The lines of ``text`` that :func:`generated` changes (a unified diff, [] when none)."""
    import difflib

    new = generated(text)
    return list(
        difflib.unified_diff(
            text.splitlines(), new.splitlines(), "README.md", "generated", lineterm="", n=0
        )
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m verify.cli.readme [--write]``: 1 (with the diff) when README.md is stale."""
    p = argparse.ArgumentParser(prog="python -m verify.cli.readme", description=__doc__)
    p.add_argument("--write", action="store_true", help="rewrite README.md's generated parts")
    p.add_argument("--path", type=Path, default=README, help="the README (default: the repo's)")
    args = p.parse_args(argv)
    text = args.path.read_text(encoding="utf-8")
    if args.write:
        args.path.write_text(generated(text), encoding="utf-8")
        return 0
    diff = differences(text)
    print("\n".join(diff) if diff else "README.md is up to date", file=sys.stderr)
    return 1 if diff else 0


if __name__ == "__main__":  # pragma: no cover - the command line
    raise SystemExit(main())
