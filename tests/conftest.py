"""Shared test configuration: the hypothesis profile (``$ATTN_THEORY_PROFILE``, default ``ci``),
one torch thread per process (the suite runs under ``pytest -n auto``), TF32 off."""

from __future__ import annotations

import pytest

from verify import profiles

profiles.load()


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
