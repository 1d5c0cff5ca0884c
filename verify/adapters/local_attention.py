"""local-attention 1.11 ``LocalAttention`` (lucidrains) as checked variants.

``LocalAttention(window_size=W, causal, look_backward=lb, look_forward=lf, autopad=True,
exact_windowsize, use_rotary_pos_emb=False)`` splits the sequence into buckets of W positions
(zero-padding it to a multiple of W with ``autopad``) and lets the queries of bucket b attend to
the keys of buckets b - lb .. b + lf, with the causal mask s <= t when ``causal``; scores are
``q.k * d^-1/2`` (``scale`` default), softmax in the input dtype, masked entries filled with
-finfo.max. It is self-attention only: q, k and v are bucketed alike (T = S). ``mask=`` is a
(B, n) key padding mask, True = keep. Measured (:func:`measure_conventions`):

* ``exact_windowsize=True`` additionally masks keys more than W lb behind (and, non-causal, W lf
  ahead of) the query. Since those keys lie inside the bucket range, the visible set is exactly
  the FlashAttention window (W lb, 0) causal and (W lb, W lf) non-causal: declared ``window``;
* ``exact_windowsize=False`` (the default) is **not** a sliding window: query t sees key s iff
  floor(s / W) >= floor(t / W) - lb (and s <= t causal), so how far back a query sees depends on
  its place in its bucket (W lb to W lb + W - 1 keys). No ``(left, right)`` gives this pattern
  (``measure.window_of`` finds none), and with ``window=None`` the softmax claim would state full
  causal attention, which is false once T > W (lb + 1): the bucketed card claims
  ``kernel="unknown"`` (the probes then describe it; positions matter, so no position-free claim
  is made) and its card shows the measured pattern;
* **autopad and non-causal**: the zero-padded positions are keys too. They are masked only when a
  key padding ``mask`` is passed (autopad pads it with False); without one, a query whose window
  reaches the padding gives those zero keys weight exp(0 - max) and their zero values, so its
  output loses mass (row weights over the real keys sum to less than 1) whenever T is not a
  multiple of W. The non-causal card declares what the library means to compute (window
  (W lb, W lf)), so the battery shows this defect; the card measures the lost mass;
* a row with no visible key (every key padded) is the uniform average over the bucket's
  look-around slots, which include the look-around padding whose values are -1: neither zeros
  nor the mean of v (``empty_rows`` is not claimed).

Cards (W = :data:`WINDOW_SIZE`, lb = lf = 1): ``local-attention-LocalAttention-causal-exact``
(window (2, 0)), ``local-attention-LocalAttention-exact`` (non-causal, window (2, 2)),
``local-attention-LocalAttention-causal`` (bucketed, kernel unknown).

:data:`VARIANTS` names the cards; :func:`card_facts` measures what each card shows.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from verify.spec.variant import AttentionVariant

#: card name -> import spec of the variant's zero-argument factory
VARIANTS: dict[str, str] = {
    "local-attention-LocalAttention-causal-exact": (
        "verify.adapters.local_attention:causal_exact_variant"
    ),
    "local-attention-LocalAttention-exact": "verify.adapters.local_attention:exact_variant",
    "local-attention-LocalAttention-causal": "verify.adapters.local_attention:causal_variant",
}
#: bucket size W and look-around of every card
WINDOW_SIZE = 2
LOOK_BACKWARD = 1
LOOK_FORWARD = 1
PACKAGE = "local-attention"

#: card name -> (causal, exact_windowsize)
CONFIGS: dict[str, tuple[bool, bool]] = {
    "local-attention-LocalAttention-causal-exact": (True, True),
    "local-attention-LocalAttention-exact": (False, True),
    "local-attention-LocalAttention-causal": (True, False),
}

_MODULES: dict[tuple, Any] = {}


def _require() -> None:
    if importlib.util.find_spec("local_attention") is None:
        raise ImportError(f"{PACKAGE} is not installed (pip install '.[adapters]')")


def local_attention_module(causal: bool, exact: bool, window_size: int = WINDOW_SIZE):
    """The (cached) ``LocalAttention(window_size, causal=causal, look_backward=1,
    look_forward=0 if causal else 1, autopad=True, exact_windowsize=exact,
    use_rotary_pos_emb=False)``.

    Raises:
        ImportError: local-attention is not installed.
    """
    key = (bool(causal), bool(exact), window_size)
    mod = _MODULES.get(key)
    if mod is None:
        from local_attention import LocalAttention

        mod = LocalAttention(
            window_size=window_size,
            causal=causal,
            look_backward=LOOK_BACKWARD,
            look_forward=0 if causal else LOOK_FORWARD,
            autopad=True,
            exact_windowsize=exact,
            use_rotary_pos_emb=False,
        ).eval()
        _MODULES[key] = mod
    return mod


def local_forward(
    q, k, v, *, causal: bool, key_padding_mask=None, module_causal: bool, exact: bool
):
    """``LocalAttention(...)(q, k, v, mask=key_padding_mask)``.

    Args:
        q, k: (B, H, T, d); v: (B, H, T, d_v) (self-attention: S = T); any float dtype.
        causal: must equal the module's ``module_causal`` (fixed at construction).
        key_padding_mask: optional bool (B, T), True = keep (LocalAttention's ``mask``).
        exact: the module's ``exact_windowsize``.

    Returns:
        (B, H, T, d_v) in q's dtype.

    Raises:
        ValueError: ``causal`` differs from the module's; S != T.
        ImportError: local-attention is not installed.
    """
    if bool(causal) != module_causal:
        raise ValueError(
            f"causal: this LocalAttention is built with causal={module_causal}, got {causal}"
        )
    if k.shape[-2] != q.shape[-2]:
        raise ValueError(
            f"k: LocalAttention is self-attention only, got T={q.shape[-2]}, S={k.shape[-2]}"
        )
    mod = local_attention_module(module_causal, exact)
    return mod(q, k, v, mask=key_padding_mask)


def _forward_for(name: str):
    module_causal, exact = CONFIGS[name]

    def forward(q, k, v, *, causal: bool, key_padding_mask=None):
        return local_forward(
            q,
            k,
            v,
            causal=causal,
            key_padding_mask=key_padding_mask,
            module_causal=module_causal,
            exact=exact,
        )

    forward.__name__ = "local_forward_" + name.rsplit("LocalAttention-", 1)[1].replace("-", "_")
    forward.__doc__ = f":func:`local_forward` of the card {name!r}."
    return forward


def declared_window(causal: bool) -> tuple[int, int]:
    """The FlashAttention window of ``exact_windowsize=True``: (W lb, 0) or (W lb, W lf)."""
    return WINDOW_SIZE * LOOK_BACKWARD, 0 if causal else WINDOW_SIZE * LOOK_FORWARD


def _variant(name: str, **claims: Any) -> AttentionVariant:
    _require()
    causal, exact = CONFIGS[name]
    return AttentionVariant(
        name=name,
        forward=_forward_for(name),
        layout="BHTD",
        causal="yes" if causal else "no",
        normalized=True,
        key_padding=True,
        self_attention_only=True,
        dtypes=("float64", "float32", "bfloat16"),
        description=f"local_attention.LocalAttention(window_size={WINDOW_SIZE}, causal={causal}, "
        f"look_backward={LOOK_BACKWARD}, look_forward={0 if causal else LOOK_FORWARD}, "
        f"autopad=True, exact_windowsize={exact}, use_rotary_pos_emb=False)",
        **claims,
    )


def causal_exact_variant() -> AttentionVariant:
    """Causal ``exact_windowsize=True``: softmax over the window (W lb, 0) = (2, 0).

    Raises:
        ImportError: local-attention is not installed.
    """
    return _variant(
        "local-attention-LocalAttention-causal-exact",
        kernel="softmax",
        window=declared_window(True),
    )


def exact_variant() -> AttentionVariant:
    """Non-causal ``exact_windowsize=True``: softmax over the window (W lb, W lf) = (2, 2) -- what
    the module means to compute; at T not a multiple of W the autopadded zero keys take weight.

    Raises:
        ImportError: local-attention is not installed.
    """
    return _variant(
        "local-attention-LocalAttention-exact",
        kernel="softmax",
        window=declared_window(False),
    )


def causal_variant() -> AttentionVariant:
    """Causal bucketed (default ``exact_windowsize=False``): not a sliding window, claimed
    ``kernel="unknown"`` (see the module docstring).

    Raises:
        ImportError: local-attention is not installed.
    """
    return _variant("local-attention-LocalAttention-causal", kernel="unknown")


# -- conventions measured for the cards ---------------------------------------------------------
def _version() -> str:
    from importlib.metadata import version

    return version(PACKAGE)


def bucket_rule(T: int, *, causal: bool) -> list[list[int]]:
    """The keys the bucketed rule gives (floor(s/W) in floor(t/W) - lb .. floor(t/W) + lf, and
    s <= t when causal), for comparison with the measured pattern."""
    W, lf = WINDOW_SIZE, 0 if causal else LOOK_FORWARD
    return [
        [
            s
            for s in range(T)
            if t // W - LOOK_BACKWARD <= s // W <= t // W + lf and (not causal or s <= t)
        ]
        for t in range(T)
    ]


def real_key_mass(name: str, T: int) -> list[float]:
    """Per query, the total weight on the T real keys (q = k = 0, v = 1, float64): 1 unless
    padded positions take weight."""
    import torch

    q = torch.zeros(1, 1, T, 2, dtype=torch.float64)
    v = torch.ones(1, 1, T, 1, dtype=torch.float64)
    causal = CONFIGS[name][0]
    out = _forward_for(name)(q, q.clone(), v, causal=causal)
    return [float(x) for x in out[0, 0, :, 0]]


def measure_conventions(name: str, T: int = 7) -> dict[str, Any]:
    """What the card's ``LocalAttention`` computes, measured (float64).

    Returns a dict of JSON values:
        ``visible_keys``: ``measure.visible_keys`` at T = S = ``T`` (odd: autopad is used);
        ``window``: the FlashAttention window of that pattern, or None when none matches;
        ``bucket_rule_matches``: the pattern equals :func:`bucket_rule`;
        ``real_key_mass``: :func:`real_key_mass` at ``T`` (1.0 everywhere unless the autopad
        keys take weight) and ``with_all_true_key_mask`` (the same with a key padding mask of
        ones, which masks the padding);
        ``reference_max_abs_diff``: {"T=6", "T=7"}: random inputs against the reference softmax
        with the declared window (exact cards only);
        ``empty_row``: what a row whose keys are all padded returns (``measure.row_kind``).
    """
    import torch

    from verify.adapters import measure
    from verify.attention import softmax_attention

    causal, exact = CONFIGS[name]
    fwd = _forward_for(name)
    vis = measure.visible_keys(fwd, T, T, causal=causal)
    win = measure.window_of(vis, T)
    out: dict[str, Any] = {
        "visible_keys": vis,
        "window": list(win) if win is not None else None,
        "bucket_rule_matches": vis == bucket_rule(T, causal=causal),
        "real_key_mass": real_key_mass(name, T),
    }
    q = torch.zeros(1, 1, T, 2, dtype=torch.float64)
    ones = torch.ones(1, T, dtype=torch.bool)
    v1 = torch.ones(1, 1, T, 1, dtype=torch.float64)
    o = fwd(q, q.clone(), v1, causal=causal, key_padding_mask=ones)
    out["with_all_true_key_mask"] = [float(x) for x in o[0, 0, :, 0]]
    gen = torch.Generator().manual_seed(0)
    if exact:
        diffs = {}
        for n in (6, 7):
            x = [torch.randn(2, 2, n, 3, generator=gen, dtype=torch.float64) for _ in range(3)]
            ref = softmax_attention(*x, causal=causal, window=declared_window(causal))
            diffs[f"T={n}"] = float((fwd(*x, causal=causal) - ref).abs().max())
        out["reference_max_abs_diff"] = diffs
    x = [torch.randn(1, 1, 4, 3, generator=gen, dtype=torch.float64) for _ in range(3)]
    o = fwd(*x, causal=causal, key_padding_mask=torch.zeros(1, 4, dtype=torch.bool))
    kind = measure.row_kind(o[0, 0, 0], x[2][0, 0])
    # query 0 (bucket 0): W lb look-around slots before the sequence hold the value -1, then
    # the real keys of buckets 0 .. lf
    lf = 0 if causal else LOOK_FORWARD
    real = x[2][0, 0, : WINDOW_SIZE * (1 + lf)]
    pads = WINDOW_SIZE * LOOK_BACKWARD
    slots = (real.sum(0) - pads) / (pads + real.shape[0])
    if torch.allclose(o[0, 0, 0], slots, atol=1e-12):
        kind = "uniform over the look-around slots (padding slots hold the value -1)"
    out["empty_row"] = kind
    return out


def card_facts(name: str, *, quick: bool = False, isolate: bool = True) -> dict[str, Any]:
    """What a local-attention card shows besides the battery (JSON values, in card order).

    Returns:
        ``package`` ({"local-attention": version}), ``configuration`` (window_size,
        look_backward, look_forward, causal, exact_windowsize) and ``conventions``
        (:func:`measure_conventions`). ``quick`` and ``isolate`` are unused.

    Raises:
        KeyError: ``name`` is not in :data:`VARIANTS`. ImportError: local-attention missing.
    """
    if name not in VARIANTS:
        raise KeyError(f"name: expected one of {sorted(VARIANTS)}, got {name!r}")
    _require()
    causal, exact = CONFIGS[name]
    return {
        "package": {PACKAGE: _version()},
        "configuration": {
            "window_size": WINDOW_SIZE,
            "look_backward": LOOK_BACKWARD,
            "look_forward": 0 if causal else LOOK_FORWARD,
            "causal": causal,
            "exact_windowsize": exact,
            "autopad": True,
        },
        "conventions": measure_conventions(name),
    }


__all__ = [
    "CONFIGS",
    "VARIANTS",
    "WINDOW_SIZE",
    "bucket_rule",
    "card_facts",
    "causal_exact_variant",
    "causal_variant",
    "declared_window",
    "exact_variant",
    "local_attention_module",
    "local_forward",
    "measure_conventions",
    "real_key_mass",
]
