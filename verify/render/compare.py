"""``attn-theory report --check``: compare a fresh run with the committed reports.

Rules (README, "Reports"):

- every owned file must exist on both sides (a missing or an extra owned file is stale);
- JSON twins are compared field by field after dropping the environment blocks (versions,
  CPU capability: they describe the machine, not the results) and the free-text ``detail``
  fields (they quote measured numbers);
- statements, statuses, verdicts, counterexamples and their reproducers, example counts,
  declared claims and exported numbers must be *equal*: every string, bool and integer, every
  number of the derivation and claim reports, every number under a card's ``claims`` block;
- measured numbers depend on the CPU's rounding (vector width, FMA, library ulps), so they may
  differ across machines within the stated factor ``RATIO_FACTOR``
  (``verify.properties.support.base.MACHINE_RATIO_FACTOR``). They are the numbers under the
  measured keys (``max_ratio``, ``ratios``, ``vs_reference``, ``observed``, ``bound``, errors,
  ``measured_*``, ``*_ratio``) anywhere, and every other float of the measured reports
  (verification, anchors, kernel arithmetics and the cards: probe fits, adapters' measured
  conventions). An
  observed/bound ratio agrees when within the factor or when both are at most
  ``1 / RATIO_FACTOR`` (far below the bound: rounding noise, which one machine may make
  exactly 0); another measured number when within the factor or both at most ``RATIO_FLOOR``
  in magnitude; signs and non-finite values must match;
- ``loose`` (every ratio below ``verify.spec.results.LOOSE``) is read off the measured ratios:
  it may differ where the cell's ``max_ratio`` lies on the two sides of ``LOOSE`` and the two
  ratios agree by the rule above;
- the reasons of failing and skipped runs and the probes' descriptions quote measured numbers
  (observed, bound, the worst element, units of roundoff): compared with every number masked,
  so their words must be equal;
- Markdown and PNG files are rendered from the JSON, so only their presence is checked.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from verify.properties.support.base import MACHINE_RATIO_FACTOR
from verify.spec.results import LOOSE

RATIO_FACTOR = MACHINE_RATIO_FACTOR
#: measured numbers (not ratios) this small in magnitude on both sides agree: rounding noise
RATIO_FLOOR = 1e-6
#: observed/bound ratios at most this on both sides agree (far below the bound)
RATIO_NOISE = 1.0 / RATIO_FACTOR
RATIO_KEYS = {"max_ratio", "ratios", "vs_reference"}
MEASURED_KEYS = RATIO_KEYS | {"observed", "bound", "error", "max_error", "mean_error"}
#: machine descriptions, and free-text details that quote measured numbers
IGNORED_KEYS = {"environment", "versions", "metadata", "detail", "runtime_s"}
#: free text quoting measured numbers: compared with the numbers masked
MASKED_TEXT_KEYS = {"reason", "probe_description"}
#: reports whose floats are all measured (except under a declared ``claims`` block)
MEASURED_FILES = ("verification.json", "anchors.json", "arithmetic.json")
MEASURED_DIRS = ("variants/",)
_NUMBER = re.compile(r"(?<![A-Za-z_\d.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|\b(?:inf|nan)\b")


def _owned_files(root: Path, owns) -> set[str]:
    if not root.is_dir():
        return set()
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and owns(p.relative_to(root).as_posix())
    }


def _is_ratio(key: str) -> bool:
    return key in RATIO_KEYS or key.endswith("_ratio")


def _is_measured(key: str) -> bool:
    return key in MEASURED_KEYS or key.startswith("measured") or _is_ratio(key)


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _close(a, b, *, ratio: bool = False) -> bool:
    """Two measured values agree: equal, or finite with one sign and within ``RATIO_FACTOR``,
    or both small (ratios: at most ``RATIO_NOISE``; other values: ``RATIO_FLOOR``)."""
    if a is None or b is None:
        return a is b
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    floor = RATIO_NOISE if ratio else RATIO_FLOOR
    if abs(a) <= floor and abs(b) <= floor:
        return True
    if a == 0 or b == 0 or (a > 0) != (b > 0):
        return a == b
    return max(a / b, b / a) <= RATIO_FACTOR


def mask_numbers(text: str) -> str:
    """``text`` with every number replaced by ``#`` (identifiers such as float32 or D10 kept)."""
    return _NUMBER.sub("#", text)


def _loose_follows_ratio(new: dict, old: dict) -> bool:
    """A changed ``loose`` flag that only follows the cell's measured ratio across ``LOOSE``."""
    a, b = new.get("max_ratio"), old.get("max_ratio")
    if not (_number(a) and _number(b)) or not _close(a, b, ratio=True):
        return False
    return (a < LOOSE) != (b < LOOSE)


def _diff_measured(new, old, path: str, ratio: bool) -> list[str] | None:
    """Differences of a measured value (a number or a list of numbers), or None when the
    values are not numbers (then compared as any other value)."""
    if isinstance(new, list) and isinstance(old, list):
        if not all(_number(x) or x is None for x in (*new, *old)):
            return None
        if len(new) != len(old):
            return [f"{path}: {len(old)} measured values became {len(new)}"]
        return [
            f"{path}[{i}]: {o!r} -> {n!r}"
            for i, (n, o) in enumerate(zip(new, old))
            if not _close(n, o, ratio=ratio)
        ]
    if (_number(new) or new is None) and (_number(old) or old is None):
        if _close(new, old, ratio=ratio):
            return []
        return [f"{path}: {old!r} -> {new!r} (beyond the factor)"]
    return None


def diff_json(new, old, path: str = "", *, measured: bool = False) -> list[str]:
    """Differences between two JSON values under the rules above (empty when they agree);
    ``measured``: the values come from a measured report, so its floats are measured."""
    out: list[str] = []
    key = path.rsplit(".", 1)[-1].split("[")[0]
    if _is_measured(key):
        found = _diff_measured(new, old, path, _is_ratio(key))
        if found is not None:
            return found
    if key in MASKED_TEXT_KEYS and isinstance(new, str) and isinstance(old, str):
        if mask_numbers(new) == mask_numbers(old):
            return []
        return [f"{path}: {old[:80]!r} -> {new[:80]!r}"]
    if isinstance(new, dict) and isinstance(old, dict):
        for k in sorted(set(new) | set(old)):
            if k in IGNORED_KEYS:
                continue
            if k not in old:
                out.append(f"{path}.{k}: added")
            elif k not in new:
                out.append(f"{path}.{k}: removed")
            elif k == "loose" and new[k] != old[k] and _loose_follows_ratio(new, old):
                continue
            else:
                inner = measured and k != "claims"  # declared claims are exact
                out.extend(diff_json(new[k], old[k], f"{path}.{k}", measured=inner))
        return out
    if isinstance(new, list) and isinstance(old, list):
        if len(new) != len(old):
            return [f"{path}: {len(old)} entries became {len(new)}"]
        for i, (n, o) in enumerate(zip(new, old)):
            out.extend(diff_json(n, o, f"{path}[{i}]", measured=measured))
        return out
    if measured and _number(new) and _number(old) and float in (type(new), type(old)):
        return [] if _close(new, old) else [f"{path}: {old!r} -> {new!r} (beyond the factor)"]
    if new != old:
        short = lambda x: (repr(x)[:80] + "...") if len(repr(x)) > 80 else repr(x)  # noqa: E731
        out.append(f"{path}: {short(old)} -> {short(new)}")
    return out


def measured_report(rel: str) -> bool:
    """Whether the floats of report file ``rel`` (relative POSIX path) are measurements."""
    return rel in MEASURED_FILES or rel.startswith(MEASURED_DIRS)


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
        diffs = diff_json(new, old, measured=measured_report(f))
        problems += [f"{f}{d}" for d in diffs[:20]]
        if len(diffs) > 20:
            problems.append(f"{f}: ... {len(diffs) - 20} more differences")
    return problems
