"""Hypothesis profiles ``ci``, ``dev`` and ``thorough``, chosen by ``ATTN_THEORY_PROFILE``.

``ci`` is derandomized with no example database and bounded example counts, so a run is
reproducible and fits the CI time budget (README); ``dev`` explores with a local database;
``thorough`` runs many more examples. Tests load the profile in ``tests/conftest.py``; the CLI
loads the one given by ``--profile``.
"""

from __future__ import annotations

import contextlib
import os

ENV_VAR = "ATTN_THEORY_PROFILE"
PROFILES = ("ci", "dev", "thorough")
DEFAULT = "ci"

_registered = False


def register() -> None:
    """Register the three profiles with hypothesis (idempotent)."""
    global _registered
    if _registered:
        return
    from hypothesis import HealthCheck, settings

    common = dict(
        deadline=None,  # timing is measured in benchmarks, never asserted in tests
        # long declared sequence lengths (e.g. a chunk size of 256) make large minimal examples
        # and inputs outside a property's range (outside the D10 model, say) are rejected, not
        # errors: a property that finds too few applicable inputs says so (``run_property``)
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
            HealthCheck.filter_too_much,
        ],
    )
    settings.register_profile(
        "ci", max_examples=25, derandomize=True, database=None, print_blob=True, **common
    )
    settings.register_profile("dev", max_examples=100, print_blob=True, **common)
    settings.register_profile("thorough", max_examples=1000, print_blob=True, **common)
    _registered = True


def selected(name: str | None = None) -> str:
    """The profile name: ``name`` if given, else ``$ATTN_THEORY_PROFILE``, else ``ci``.

    Raises:
        ValueError: the name is not one of ``ci``, ``dev``, ``thorough``.
    """
    chosen = name if name is not None else os.environ.get(ENV_VAR, DEFAULT)
    if chosen not in PROFILES:
        raise ValueError(f"profile: expected one of {PROFILES}, got {chosen!r} (from {ENV_VAR})")
    return chosen


def load(name: str | None = None) -> str:
    """Register the profiles and load the selected one; returns its name.

    For ``ci`` also pins hypothesis' pool of "local constants": hypothesis mixes literals
    from every imported module under the working directory into its draws, so which of the
    suite's modules a worker process happened to import before would change the examples of
    a derandomized run. With the pool pinned to its (empty) initial value the draws depend
    only on the strategy, in any process.
    """
    from hypothesis import settings

    register()
    chosen = selected(name)
    settings.load_profile(chosen)
    if chosen == "ci":
        _pin_local_constants()
    return chosen


def _pin_local_constants() -> None:
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - a hypothesis without the mechanism
        return
    if hasattr(providers, "_get_local_constants") and hasattr(providers, "_local_constants"):
        initial = providers._local_constants
        providers._get_local_constants = lambda: initial


@contextlib.contextmanager
def without_shrinking(name: str | None = None):
    """Within the block, the selected profile (``name`` or :func:`selected`) without hypothesis'
    shrink phase: a failing property reports its first failing example at once. The profile
    is loaded again on exit."""
    from hypothesis import Phase, settings

    chosen = selected(name)
    register()
    settings.register_profile(
        f"{chosen}-no-shrink",
        parent=settings.get_profile(chosen),
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
    )
    settings.load_profile(f"{chosen}-no-shrink")
    try:
        yield
    finally:
        load(chosen)
