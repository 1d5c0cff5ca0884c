"""The metadata block every generated report carries (no timestamps, no run times)."""

from __future__ import annotations


def markdown_block(meta: dict) -> str:
    """Render ``meta`` as a collapsed Markdown block."""
    lines = ["<details><summary>Environment</summary>", ""]
    for k, v in meta.items():
        if isinstance(v, dict):
            v = ", ".join(f"{a} {b}" for a, b in v.items())
        lines.append(f"- {k}: {v}")
    lines += ["", "</details>"]
    return "\n".join(lines)
