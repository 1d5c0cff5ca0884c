"""Small Markdown helpers shared by the report writers (GitHub-flavoured, with LaTeX)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


def cell(x: Any) -> str:
    """Format one table cell: floats with 4 significant digits, pipes escaped."""
    if isinstance(x, float):
        s = f"{x:.4g}"
    else:
        s = str(x)
    return s.replace("|", "\\|").replace("\n", " ")


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub Markdown table."""
    lines = ["| " + " | ".join(cell(h) for h in header) + " |"]
    lines.append("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        lines.append("| " + " | ".join(cell(x) for x in r) + " |")
    return "\n".join(lines)


def display_math(latex: str) -> str:
    """A display-math block that GitHub renders as written: a ```` ```math ```` fence.

    GitHub also renders ``$$ ... $$``, but runs Markdown over it first: ``\\{``, ``\\,``,
    ``\\;``, ``\\\\`` lose their backslash and ``*...*`` becomes emphasis. A ``math`` fence
    reaches the renderer verbatim.
    """
    return "```math\n" + latex.strip() + "\n```"


def inline_math(latex: str) -> str:
    return f"${latex.strip()}$"


def json_safe(obj: Any) -> Any:
    """``obj`` with non-finite floats as the strings "inf", "-inf", "nan" (strict JSON)."""
    if isinstance(obj, float):
        if obj != obj:
            return "nan"
        if obj in (float("inf"), float("-inf")):
            return "inf" if obj > 0 else "-inf"
        return obj
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    """Deterministic strict JSON text: key order as given, 2-space indent."""
    return json.dumps(json_safe(obj), indent=2, ensure_ascii=False, allow_nan=False)


def write_json(path: Path, obj: Any) -> None:
    """Deterministic JSON file (``dumps``) with a trailing newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(obj) + "\n")


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n")
