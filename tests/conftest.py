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
