"""local-attention ``LocalAttention`` as a user adapts it: windows of 2 (so T <= 10 spans several),
``autopad=True`` (any length), the default look-around (one window back; one forward when not
causal). Checked with ``--kernel unknown`` (windowed: kernel-free structural properties)."""

from __future__ import annotations

WINDOW = 2


def _local(causal, **kwargs):
    from local_attention import LocalAttention

    return LocalAttention(window_size=WINDOW, causal=causal, autopad=True, **kwargs)


def local_attention(q, k, v, *, causal):
    return _local(causal)(q, k, v)


def local_attention_exact(q, k, v, *, causal):
    """``exact_windowsize=True``: each query sees exactly the window_size * look_backward
    previous keys (the option issue #5 is about)."""
    return _local(causal, exact_windowsize=True)(q, k, v)
