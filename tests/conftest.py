"""Shared test configuration: the hypothesis profile (``$ATTN_THEORY_PROFILE``, default ``ci``),
tests marked ``slow`` skipped under ``ci``, one torch thread per process (the suite runs under
``pytest -n auto``), TF32 off."""

from __future__ import annotations

import pytest

from verify import profiles

PROFILE = profiles.load()


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` (the long-shape repeats of ci-sized tests) run outside the ``ci``
    profile only: ``ATTN_THEORY_PROFILE=dev python -m pytest -m slow`` runs them."""
    if PROFILE != "ci":
        return
    skip = pytest.mark.skip(reason="slow: runs outside the ci profile (ATTN_THEORY_PROFILE=dev)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _torch_settings():
    import torch

    torch.set_num_threads(1)
    if hasattr(torch.backends, "cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
    if hasattr(torch.backends, "cudnn"):
        torch.backends.cudnn.allow_tf32 = False
    yield


@pytest.fixture
def no_shrink():
    """Hypothesis without the shrink phase for one test: a failing faulty twin reports its first
    failing example at once (each shrink candidate re-draws inputs and re-runs the mpmath
    oracle, which would take minutes per twin)."""
    with profiles.without_shrinking():
        yield
