"""``faults.md``: the catalogue of fault classes (``verify.spec.faults``), with the properties
that catch each class and the faulty variants of the test suite that prove it."""

from __future__ import annotations

import re
from pathlib import Path

from verify.render import markdown as md

FAULTY_VARIANTS = "tests/faulty_variants.py"
_NAME = re.compile(r"^((fault|twin)(\d\d)_\w+)\s*=", re.M)


def _variants(source_dir: Path) -> dict[int, dict[str, list[str]]]:
    """{class: {"fault": [names], "twin": [names]}} from the test suite's module, read as text
    (the report never imports the tests); empty when the file is absent (an installed copy)."""
    path = Path(source_dir) / FAULTY_VARIANTS
    out: dict[int, dict[str, list[str]]] = {}
    if path.is_file():
        for name, kind, num in _NAME.findall(path.read_text()):
            out.setdefault(int(num), {"fault": [], "twin": []})[kind].append(name)
    return out


def render(source_dir: Path) -> str:
    """The Markdown page."""
    from verify.properties import catalogue
    from verify.spec.faults import FAULTS

    props = catalogue()
    variants = _variants(source_dir)
    lines = [
        "# Fault classes",
        "",
        "Kinds of defect that have shipped in public attention implementations, as the checker "
        "must catch them (`verify/spec/faults.py`). For each class: what goes wrong, the "
        "smallest known trigger, what a correct implementation does, the properties that fail "
        f"on it, and the deliberately faulty variants in `{FAULTY_VARIANTS}` that prove the "
        "properties catch it while their correct twins pass (`tests/test_faults.py`, "
        "`tests/test_check_cli.py`).",
        "",
        md.table(
            ["class", "title", "caught by"],
            [
                [
                    f"[{f.id}](#fault-class-{f.id})",
                    f.title,
                    ", ".join(f"`{p.id}`" for p in props if f.id in p.faults),
                ]
                for f in FAULTS.values()
            ],
        ),
        "",
    ]
    for f in FAULTS.values():
        found = variants.get(f.id, {"fault": [], "twin": []})
        lines += [
            f"## Fault class {f.id}",
            "",
            f"**{f.title[0].upper()}{f.title[1:]}.** {f.defect[0].upper()}{f.defect[1:]}.",
            "",
            f"- Trigger: {f.trigger}.",
            f"- Expected: {f.expected}.",
            "- Caught by: "
            + (", ".join(f"`{p.id}` ({p.derivation})" for p in props if f.id in p.faults) or "—")
            + ".",
            "- Faulty variants: "
            + (", ".join(f"`{n}`" for n in found["fault"]) or "—")
            + "; correct twins: "
            + (", ".join(f"`{n}`" for n in found["twin"]) or "built-in variants")
            + ".",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


def write(stage: Path, source_dir: Path) -> None:
    """Write ``faults.md`` under ``stage``."""
    md.write_text(Path(stage) / "faults.md", render(source_dir).rstrip("\n"))
