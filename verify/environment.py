"""The environment a measurement ran in: package versions, machine, torch CPU capability and
threads (recorded in every report's metadata block and in the benchmark and experiment JSON)."""

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
