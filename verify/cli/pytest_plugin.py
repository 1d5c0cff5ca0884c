"""pytest plugin: ``pytest --attn-variant pkg.module:object`` checks a variant, one pytest item
per property of the catalogue.

Registered through the ``pytest11`` entry point; it only adds the ``--attn-*`` options until
``--attn-variant`` is given. Then the variant's module file is collected like a test file (it is
added to the collection arguments unless an argument already names it or a folder above it):
the file holds one collector per variant object, the collector one item per property, so the
node ids read ``myattn.py::attention::causality`` and can be passed back to pytest.
Deselection (``-k``, ``--deselect``, ``-m``, node ids, ``--attn-select``) happens before
anything runs; the first item of a variant to run checks the properties still selected for that
variant in one engine call (one probe, one pool of worker processes, shared by the items), and
each item reports its own rows. Under pytest-xdist a worker checks the item it is given.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest

#: per config: the variant specs given, by their module file
_FILES = pytest.StashKey[dict]()
#: per config: the module files this plugin added to the collection arguments
_ADDED = pytest.StashKey[set]()


def pytest_addoption(parser) -> None:
    from verify.cli.options import add_claim_options
    from verify.spec.vocabulary import DEVICES, DTYPES

    group = parser.getgroup("attn-theory", "attention variant checks (attn-theory)")
    group.addoption(
        "--attn-variant",
        action="append",
        default=[],
        metavar="PKG.MODULE:OBJECT",
        help="check this attention variant (repeatable); its module file is collected",
    )
    add_claim_options(group.addoption, prefix="attn-")
    group.addoption("--attn-dtype", default=None, choices=DTYPES, help="dtype to run")
    group.addoption("--attn-device", default=None, choices=DEVICES, help="device to run")
    group.addoption(
        "--attn-select",
        action="append",
        default=[],
        metavar="PROPERTY",
        help="only these properties (repeatable)",
    )
    group.addoption("--attn-max-examples", default=None, type=int, help="examples per property")
    group.addoption("--attn-seed", default=0, type=int, help="seed")


def module_file(spec: str) -> Path:
    """The source file of the module of ``spec`` (``pkg.module:object``), found without
    importing the module itself (its parent packages are imported); the current directory is
    importable, as for the checks.

    Raises:
        pytest.UsageError: a malformed spec, or a module that is not a file.
    """
    modname, sep, obj = spec.partition(":")
    if not sep or not modname or not obj:
        raise pytest.UsageError(f"--attn-variant {spec!r}: expected PKG.MODULE:OBJECT")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(modname)
    except (ImportError, ValueError) as exc:
        raise pytest.UsageError(f"--attn-variant {spec!r}: {exc}") from exc
    if found is None or not found.has_location or not found.origin:
        raise pytest.UsageError(
            f"--attn-variant {spec!r}: module {modname!r} "
            + ("not found" if found is None else "is not a file (the items live in its file)")
        )
    return Path(found.origin).resolve()


def _variant_files(config) -> dict[Path, list[str]]:
    """``{module file: [spec, ...]}`` of the ``--attn-variant`` specs, in order, once each."""
    if _FILES not in config.stash:
        files: dict[Path, list[str]] = {}
        for spec in dict.fromkeys(config.getoption("--attn-variant")):
            files.setdefault(module_file(spec), []).append(spec)
        config.stash[_FILES] = files
    return config.stash[_FILES]


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session) -> None:
    """Add each variant's module file to the collection arguments unless an argument names it
    (a node id in it, or the file) or a folder above it."""
    config = session.config
    files = _variant_files(config)
    if not files:
        return
    _check_select(config)
    base = config.invocation_params.dir
    given = [(base / a.split("::")[0]).resolve() for a in config.args]
    added = config.stash.setdefault(_ADDED, set())
    for path in files:
        if not any(p == path or p in path.parents for p in given):
            config.args.append(str(path))
            added.add(path)


def _check_select(config) -> None:
    from verify.properties import catalogue

    known = {p.id for p in catalogue()}
    unknown = [s for s in config.getoption("--attn-select") if s not in known]
    if unknown:
        raise pytest.UsageError(
            f"--attn-select: unknown propert{'y' if len(unknown) == 1 else 'ies'} "
            f"{', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )


def _is_test_file(path: Path, config) -> bool:
    """Whether ``path`` matches the ``python_files`` globs (as pytest matches them: the file
    name, or the whole path for a glob with a folder in it)."""
    return path.suffix == ".py" and any(
        fnmatch.fnmatch(str(path) if "/" in pat or os.sep in pat else path.name, pat)
        or ("/" in pat and fnmatch.fnmatch(str(path), "*/" + pat.lstrip("/")))
        for pat in config.getini("python_files")
    )


def _replaces_module(path: Path, config) -> bool:
    """Whether the variant file stands in for the python plugin's Module of ``path``: unless
    ``path`` is a test file the user's arguments collect (then both are collected)."""
    return not _is_test_file(path, config) or path in config.stash.get(_ADDED, set())


def pytest_collect_file(file_path: Path, parent):
    """A variant's module file, where the python plugin does not build it instead."""
    files = _variant_files(parent.config)
    if not files or (path := file_path.resolve()) not in files:
        return None
    python_builds = file_path.suffix == ".py" and (
        parent.session.isinitpath(file_path) or _is_test_file(path, parent.config)
    )
    if python_builds and _replaces_module(path, parent.config):
        return None  # pytest_pycollect_makemodule below returns it instead of a Module
    return VariantFile.build(parent, file_path)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path: Path, parent):
    """A variant's module file is not a test module: its node is the variant file (a test file
    holding a variant, collected by the user's arguments, keeps its Module beside it)."""
    files = _variant_files(parent.config)
    if files and (path := module_path.resolve()) in files and _replaces_module(path, parent.config):
        return VariantFile.build(parent, module_path)
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A skipped property is reported at the property (its variant's definition line), with
    the property id in the reason, not at the line of this plugin that raised the skip."""
    report = yield
    if isinstance(item, PropertyItem) and report.skipped and isinstance(report.longrepr, tuple):
        path, line, _ = item.reportinfo()
        report.longrepr = (os.fspath(path), line + 1, report.longrepr[2])
    return report


class VariantFile(pytest.File):
    """A module holding one or more variants given by ``--attn-variant``."""

    @classmethod
    def build(cls, parent, path: Path) -> VariantFile:
        """The node of ``path``; outside the rootdir its node id is the path relative to the
        rootdir (pytest's own would be empty for a file given as an argument there)."""
        rel = os.path.relpath(path, parent.config.rootpath).replace(os.sep, "/")
        nodeid = rel if rel.startswith("..") else None
        return cls.from_parent(parent, path=path, nodeid=nodeid)

    def collect(self):
        for spec in _variant_files(self.config)[self.path.resolve()]:
            obj = spec.partition(":")[2]
            yield VariantCollector.from_parent(self, name=obj, spec=spec)


class VariantCollector(pytest.Collector):
    """One variant (``pkg.module:object``): one :class:`PropertyItem` per property of the
    catalogue (those named by ``--attn-select`` when given). Holds the rows of the properties
    already checked."""

    def __init__(self, *, spec: str, **kw) -> None:
        super().__init__(**kw)
        self.spec = spec
        self.ran: dict[str, Any] = {}  # property id -> its rows, or the exception of its run
        self.notes: list[str] = []
        self.line = _definition_line(self.path, spec.partition(":")[2])

    def collect(self):
        from verify.properties import catalogue

        select = self.config.getoption("--attn-select")
        for prop in catalogue():
            if not select or prop.id in select:
                yield PropertyItem.from_parent(self, name=prop.id, property_id=prop.id)

    def reportinfo(self):
        return self.path, self.line, self.spec

    def rows_of(self, item: PropertyItem) -> list:
        """The result rows of ``item``'s property: on the first call for a property, every
        property of this variant still selected in the session and not yet run is checked in
        one engine call (under xdist, the item's own property)."""
        if item.property_id not in self.ran:
            if hasattr(self.config, "workerinput"):  # an xdist worker: items come one by one
                todo = [item.property_id]
            else:
                todo = list(
                    dict.fromkeys(
                        it.property_id
                        for it in self.session.items
                        if isinstance(it, PropertyItem)
                        and it.parent is self
                        and it.property_id not in self.ran
                    )
                )
                if item.property_id not in todo:
                    todo.append(item.property_id)
            try:
                result = self._check(todo)
            except Exception as exc:  # noqa: BLE001 - every item of the run reports it
                self.ran.update(dict.fromkeys(todo, exc))
            else:
                self.notes = list(result.notes)
                for pid in todo:
                    self.ran[pid] = [r for r in result.results if r.property_id == pid]
        got = self.ran[item.property_id]
        if isinstance(got, Exception):
            raise got
        return got

    def _check(self, select: list[str]):
        from verify.cli.options import claims_from
        from verify.engine import check as engine

        opt = self.config.getoption
        dtype = opt("--attn-dtype")
        return engine.check(
            self.spec,
            dtypes=(dtype,) if dtype else None,
            device=opt("--attn-device") or "cpu",
            select=select,
            max_examples=opt("--attn-max-examples"),
            seed=opt("--attn-seed"),
            **claims_from(opt, prefix="attn-"),
        )


class PropertyItem(pytest.Item):
    """One property of the catalogue on one variant (every dtype run)."""

    def __init__(self, *, property_id: str, **kw) -> None:
        super().__init__(**kw)
        self.property_id = property_id

    @property
    def spec(self) -> str:
        return self.parent.spec

    def runtest(self) -> None:
        rows = self.parent.rows_of(self)
        if self.parent.notes:
            self.add_report_section("call", "attn-theory", "\n".join(self.parent.notes))
        bad = [r for r in rows if r.status == "fail"]
        if bad:
            raise PropertyFailed(bad)
        erred = [r for r in rows if r.status == "error"]
        if erred:  # the checker's own fault: never reported as the variant's failure
            pytest.skip(
                f"{self.property_id}: internal error of attn-theory (not the variant's): "
                f"{erred[0].reason}"
            )
        stopped = [r for r in rows if r.status == "inconclusive"]
        if stopped:  # the checker's limits ran out: no verdict, never the variant's failure
            pytest.skip(
                f"{self.property_id}: inconclusive (not the variant's): {stopped[0].reason}"
            )
        if not rows:
            pytest.skip(f"{self.property_id}: no run applies to the dtypes checked")
        if all(r.status == "skip" for r in rows):
            reasons: dict[str, list[str]] = {}
            for r in rows:
                reasons.setdefault(r.reason or "not applicable", []).append(r.dtype)
            pytest.skip(
                f"{self.property_id}: "
                + "; ".join(f"{why} ({', '.join(dts)})" for why, dts in reasons.items())
            )

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, PropertyFailed):
            from verify.render.check import failure_text

            return "\n".join(
                f"[{r.dtype}] {r.statement}\n{failure_text(r)}" for r in excinfo.value.rows
            )
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, self.parent.line, f"{self.spec}::{self.property_id}"


class PropertyFailed(Exception):
    """The failing rows of one property."""

    def __init__(self, rows) -> None:
        super().__init__(f"{len(rows)} failing run(s)")
        self.rows = rows


def _definition_line(path: Path, obj: str) -> int:
    """0-based line of the top-level definition or assignment of ``obj``'s first name in
    ``path`` (0 when the file is not Python source or does not define it at top level)."""
    name = obj.split(".")[0]
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return 0
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                return node.lineno - 1
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return node.lineno - 1
    return 0
