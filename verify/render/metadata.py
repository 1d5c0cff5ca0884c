"""The metadata block every generated report carries (no timestamps, no run times)."""

from __future__ import annotations

import platform
from importlib import metadata as _md

_PACKAGES = ("attn-theory", "sympy", "mpmath", "numpy", "torch", "hypothesis", "matplotlib")


def versions(extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Installed versions of the packages the reports depend on (``"absent"`` if missing)."""
    out = {"python": platform.python_version()}
    for name in _PACKAGES + extra:
        try:
            out[name] = _md.version(name)
        except _md.PackageNotFoundError:
            out[name] = "absent"
    return out


def environment(*, profile: str | None = None, seed: int | None = None, torch_info: bool = True):
    """Versions, machine, torch CPU capability and thread count, profile and seed."""
    out: dict[str, object] = {"versions": versions(), "machine": platform.machine()}
    if torch_info:
        import torch

        out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        out["torch_threads"] = torch.get_num_threads()
    if profile is not None:
        out["hypothesis_profile"] = profile
    if seed is not None:
        out["seed"] = seed
    return out


def markdown_block(meta: dict) -> str:
    """Render ``meta`` as a collapsed Markdown block."""
    lines = ["<details><summary>Environment</summary>", ""]
    for k, v in meta.items():
        if isinstance(v, dict):
            v = ", ".join(f"{a} {b}" for a, b in v.items())
        lines.append(f"- {k}: {v}")
    lines += ["", "</details>"]
    return "\n".join(lines)
