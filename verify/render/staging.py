"""Stage a report directory in a temporary sibling and swap it in as a whole.

An interrupted or failing run leaves the previous reports intact (README, "Reports"): the new
set is built next to the old one, files that the running command does not own are copied over
unchanged, and only a complete set replaces the old directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def staged_write(
    report_dir: Path,
    owns: Callable[[str], bool],
    writer: Callable[[Path], None],
) -> None:
    """Build ``report_dir`` anew in a staging directory, then swap it in.

    Args:
        report_dir: the directory to (re)write.
        owns: ``owns(relative_posix_path)`` is True for files the caller regenerates; those are
            not copied from the old directory (so stale owned files disappear).
        writer: ``writer(stage)`` writes the owned files under ``stage``.

    If ``writer`` raises (or the process dies), ``report_dir`` is untouched and the staging
    directory is removed (or left as a hidden ``.<name>.staging-*`` sibling after a kill).
    """
    report_dir = Path(report_dir).resolve()
    parent = report_dir.parent
    parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{report_dir.name}.staging-", dir=parent))
    os.chmod(stage, 0o755)  # mkdtemp makes it private; the report directory is not
    try:
        if report_dir.is_dir():
            for src in sorted(report_dir.rglob("*")):
                rel = src.relative_to(report_dir).as_posix()
                if src.is_file() and not owns(rel):
                    dst = stage / rel
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, dst)
        writer(stage)
        backup = parent / f".{report_dir.name}.old-{os.getpid()}"
        if report_dir.exists():
            os.replace(report_dir, backup)
        os.replace(stage, report_dir)
        if backup.exists():
            shutil.rmtree(backup)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
