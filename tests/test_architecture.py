"""The layout of the code: imports only point down the layers, property groups stand on their
support floor only, no import cycles, short modules, optional imports only of third-party
packages, and no reference to a file that is not in the repository.

Layers of ``verify/`` (lowest first; a module may import its own layer and the ones below):
spec (with environment and profiles) -> exact -> attention, strategies -> builtins ->
properties -> probes -> engine -> adapters, bench, experiments -> render -> cli -> the package's
``verify.check``. ``derivations`` knows nothing of ``verify``.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LAYERS = [
    ("verify.spec", "verify.environment", "verify.profiles"),
    ("verify.exact",),
    ("verify.attention", "verify.strategies"),
    ("verify.builtins",),
    ("verify.properties",),
    ("verify.probes",),
    ("verify.engine",),
    ("verify.adapters", "verify.bench", "verify.experiments"),
    ("verify.render",),
    ("verify.cli",),
]
MAX_LINES = {"verify": 800, "derivations": 1000}


def _modules() -> dict[str, Path]:
    out = {}
    for top in ("verify", "derivations"):
        for p in sorted((ROOT / top).rglob("*.py")):
            parts = p.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = p
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, ast.AST]]:
    """Project modules imported anywhere in ``path`` (``from pkg import sub`` -> pkg.sub)."""
    tree = ast.parse(path.read_text())
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node) for a in node.names if a.name in MODULES]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                if sub in MODULES:
                    out.append((sub, node))
                elif mod in MODULES:
                    out.append((mod, node))
    return out


GRAPH = {n: {m for m, _ in _imports(n, p) if m != n} for n, p in MODULES.items()}


def _layer(name: str) -> int | None:
    for i, prefixes in enumerate(LAYERS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return i
    return None


def test_imports_point_down_the_layers():
    bad = []
    for n, deps in GRAPH.items():
        if n.startswith("derivations"):
            bad += [f"{n} -> {d}" for d in deps if d.startswith("verify")]
            continue
        ln = _layer(n)
        if ln is None:  # the package itself (``verify.check``) sits on top
            continue
        bad += [f"{n} -> {d}" for d in deps if (_layer(d) or 0) > ln]
    assert not bad, "imports pointing up a layer:\n" + "\n".join(sorted(bad))


def test_property_groups_import_only_the_floor():
    groups = [n for n in GRAPH if n.startswith("verify.properties.")]
    bad = [
        f"{n} -> {d}"
        for n in groups
        if not n.startswith("verify.properties.support")
        for d in GRAPH[n]
        if d.startswith("verify.properties") and not d.startswith("verify.properties.support")
    ]
    floor = [n for n in groups if n.startswith("verify.properties.support")]
    bad += [
        f"{n} -> {d}"
        for n in floor
        for d in GRAPH[n]
        if d.startswith("verify.properties") and not d.startswith("verify.properties.support")
    ]
    assert not bad, "\n".join(sorted(bad))


def test_no_import_cycles():
    # a package's __init__ importing its own submodules is the package, not a cycle
    def deps(n):
        return {d for d in GRAPH[n] if not n.startswith(d + ".")}

    state: dict[str, int] = {}
    cycles = []

    def visit(n, stack):
        state[n] = 1
        for d in sorted(deps(n)):
            if state.get(d) == 1:
                cycles.append(" -> ".join(stack[stack.index(d) :] + [d]))
            elif d not in state:
                visit(d, stack + [d])
        state[n] = 2

    for n in sorted(GRAPH):
        if n not in state:
            visit(n, [n])
    assert not cycles, "\n".join(cycles)


@pytest.mark.parametrize("top", sorted(MAX_LINES))
def test_modules_are_short(top):
    long = {
        n: len(p.read_text().splitlines())
        for n, p in MODULES.items()
        if n.split(".")[0] == top and len(p.read_text().splitlines()) > MAX_LINES[top]
    }
    assert not long, f"modules over {MAX_LINES[top]} lines: {long}"


def test_optional_imports_are_third_party_only():
    bad = []
    for n, p in MODULES.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if not isinstance(node, ast.Try):
                continue
            caught = {
                getattr(h.type, "id", None) or getattr(h.type, "attr", None)
                for h in node.handlers
                if h.type is not None
            }
            if not caught & {"ImportError", "ModuleNotFoundError"}:
                continue
            for stmt in node.body:
                for sub in ast.walk(stmt):
                    mods = []
                    if isinstance(sub, ast.Import):
                        mods = [a.name for a in sub.names]
                    elif isinstance(sub, ast.ImportFrom) and not sub.level:
                        mods = [sub.module or ""]
                    bad += [
                        f"{n}:{sub.lineno} {m}"
                        for m in mods
                        if m.split(".")[0] in ("verify", "derivations")
                    ]
    assert not bad, "project modules imported under except ImportError:\n" + "\n".join(bad)


def test_no_reference_to_files_outside_the_repository():
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    pattern = re.compile(r"THEORY\.md|DESIGN\.md|FAULTS\.md|\bTHEORY_|FAULTS \d|THEORY's")
    hits = []
    for rel in tracked:
        if Path(rel).suffix not in (".py", ".md", ".json", ".toml", ".sh", ".txt", "") or rel == (
            "tests/test_architecture.py"
        ):
            continue
        path = ROOT / rel
        if not path.is_file():
            continue
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{rel}:{i}: {line.strip()[:120]}")
    assert not hits, "\n".join(hits[:40]) + (f"\n... {len(hits)} in all" if len(hits) > 40 else "")
