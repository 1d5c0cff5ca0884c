"""``attn-theory report --check``: compare a fresh run with the committed reports.

Rules (README, "Reports"):

- every owned file must exist on both sides (a missing or an extra owned file is stale);
- JSON twins are compared field by field after dropping the environment blocks (versions,
  CPU capability: they describe the machine, not the results); statements, statuses, verdicts,
  counterexamples, example counts and exported numbers must be *equal*;
- measured error ratios (``max_ratio``, ``observed``, ``bound``, ``ratios`` and
  ``measured_*`` fields) depend on the CPU's rounding, so they may differ across machines
  within a factor of ``RATIO_FACTOR``, or both be below ``RATIO_FLOOR`` (ratios that small are
  rounding noise: the bound is then reported loose anyway);
- free-text ``detail`` fields quote measured numbers and are not compared;
- Markdown and PNG files are rendered from the JSON, so only their presence is checked.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

RATIO_FACTOR = 16.0
RATIO_FLOOR = 1e-6
MEASURED_KEYS = {"max_ratio", "observed", "bound", "ratios", "error", "max_error", "mean_error"}
#: machine descriptions, and free-text details that quote measured numbers
IGNORED_KEYS = {"environment", "versions", "metadata", "detail", "runtime_s"}


def _owned_files(root: Path, owns) -> set[str]:
    if not root.is_dir():
        return set()
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and owns(p.relative_to(root).as_posix())
    }


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    if abs(a) <= RATIO_FLOOR and abs(b) <= RATIO_FLOOR:
        return True
    if a == 0 or b == 0 or (a > 0) != (b > 0):
        return a == b
    return max(a / b, b / a) <= RATIO_FACTOR


def diff_json(new, old, path: str = "") -> list[str]:
    """Differences between two JSON values under the rules above (empty when they agree)."""
    out: list[str] = []
    key = path.rsplit(".", 1)[-1].split("[")[0]
    if key in MEASURED_KEYS or key.startswith("measured"):
        if isinstance(new, list) and isinstance(old, list):
            if len(new) != len(old):
                return [f"{path}: {len(old)} measured values became {len(new)}"]
            return [
                f"{path}[{i}]: {o!r} -> {n!r}"
                for i, (n, o) in enumerate(zip(new, old))
                if not _close(n, o)
            ]
        if isinstance(new, (int, float, type(None))) and isinstance(old, (int, float, type(None))):
            return [] if _close(new, old) else [f"{path}: {old!r} -> {new!r} (beyond the factor)"]
    if isinstance(new, dict) and isinstance(old, dict):
        for k in sorted(set(new) | set(old)):
            if k in IGNORED_KEYS:
                continue
            if k not in old:
                out.append(f"{path}.{k}: added")
            elif k not in new:
                out.append(f"{path}.{k}: removed")
            else:
                out.extend(diff_json(new[k], old[k], f"{path}.{k}"))
        return out
    if isinstance(new, list) and isinstance(old, list):
        if len(new) != len(old):
            return [f"{path}: {len(old)} entries became {len(new)}"]
        for i, (n, o) in enumerate(zip(new, old)):
            out.extend(diff_json(n, o, f"{path}[{i}]"))
        return out
    if new != old:
        short = lambda x: (repr(x)[:80] + "...") if len(repr(x)) > 80 else repr(x)  # noqa: E731
        out.append(f"{path}: {short(old)} -> {short(new)}")
    return out


def compare_dirs(new_dir: Path, old_dir: Path, owns) -> list[str]:
    """Problems that make the committed reports in ``old_dir`` stale (empty: current)."""
    new_files, old_files = _owned_files(new_dir, owns), _owned_files(old_dir, owns)
    problems = [f"{f}: missing from the committed reports" for f in sorted(new_files - old_files)]
    problems += [f"{f}: committed but no longer generated" for f in sorted(old_files - new_files)]
    for f in sorted(new_files & old_files):
        if not f.endswith(".json"):
            continue
        try:
            new = json.loads((new_dir / f).read_text())
            old = json.loads((old_dir / f).read_text())
        except ValueError as exc:
            problems.append(f"{f}: unreadable JSON ({exc})")
            continue
        diffs = diff_json(new, old)
        problems += [f"{f}{d}" for d in diffs[:20]]
        if len(diffs) > 20:
            problems.append(f"{f}: ... {len(diffs) - 20} more differences")
    return problems
