"""performer-pytorch ``FastAttention`` as a user adapts it: one module per (head dimension,
causality), built once under a fixed seed (the random features are drawn at construction) with
16 features (the default int(d ln d) is 0 at d = 1). The zoo checks it with ``--kernel unknown``:
FAVOR+ estimates softmax, so only the kernel-free properties apply."""

from __future__ import annotations

import contextlib
import io
import warnings

NB_FEATURES = 16
SEED = 20210301
_MODULES: dict = {}


def _module(d: int, causal: bool):
    import torch

    key = (d, causal)
    if key not in _MODULES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from performer_pytorch import FastAttention
        # causal construction prints a notice on CPU (no fast_transformers CUDA kernel)
        with torch.random.fork_rng(devices=[]), contextlib.redirect_stdout(io.StringIO()):
            torch.manual_seed(SEED + d)
            _MODULES[key] = FastAttention(d, nb_features=NB_FEATURES, causal=causal).eval()
    return _MODULES[key]


def fast_attention(q, k, v, *, causal):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _module(q.shape[-1], causal)(q, k, v)
