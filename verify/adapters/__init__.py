"""Adapters that declare real third-party attention implementations as checked variants.

Each adapter module (:mod:`~verify.adapters.sdpa`, :mod:`~verify.adapters.fla`,
:mod:`~verify.adapters.performer`, :mod:`~verify.adapters.mha`, :mod:`~verify.adapters.hf`,
:mod:`~verify.adapters.xtransformers`, :mod:`~verify.adapters.local_attention`,
:mod:`~verify.adapters.taylor_series`, and on the decode, packed and FlexAttention paths
:mod:`~verify.adapters.hf_cache`, :mod:`~verify.adapters.fla_paths`,
:mod:`~verify.adapters.flex`) exports

* ``VARIANTS``: card name -> import spec ``"verify.adapters.<module>:<factory>"`` of a
  zero-argument factory returning an :class:`~verify.spec.variant.AttentionVariant` (pass it to
  ``attn-theory check`` or :func:`verify.check`);
* ``card_facts(name, *, quick, isolate)``: what that variant's report card shows besides the
  battery (measured conventions, restrictions, findings), as JSON values.

:data:`ADAPTERS` is their union and :func:`card_facts` dispatches by name;
``verify.render.cards.build_cards`` regenerates the committed report cards
(``reports/variants/<name>.md|json``) from them.

Importing this package is cheap: the third-party packages (fla-core, performer-pytorch,
transformers, x-transformers, local-attention, taylor-series-linear-attention) are imported by
the factories or on the first forward call (the factories raise ImportError when a package is
missing). :mod:`~verify.adapters.measure` holds the black-box measurements the modern adapters'
cards share.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from verify.adapters import (
    fla,
    fla_paths,
    flex,
    hf,
    hf_cache,
    local_attention,
    mha,
    performer,
    sdpa,
    taylor_series,
    xtransformers,
)

#: adapter module name -> module, in card order
MODULES: dict[str, ModuleType] = {
    "sdpa": sdpa,
    "fla": fla,
    "performer": performer,
    "mha": mha,
    "hf": hf,
    "xtransformers": xtransformers,
    "local_attention": local_attention,
    "taylor_series": taylor_series,
    "hf_cache": hf_cache,
    "fla_paths": fla_paths,
    "flex": flex,
}

#: card name -> import spec of the variant's factory
ADAPTERS: dict[str, str] = {
    name: spec for module in MODULES.values() for name, spec in module.VARIANTS.items()
}

#: adapters checked by ``attn-theory check`` and the tests but without a committed card: what
#: their card would show is on another card (the report's time budget, 12 minutes, pays for
#: the others), name -> the card that shows it
NO_CARD: dict[str, str] = {
    "hf-eager-gqa": "hf-sdpa-gqa (GQA) and hf-eager-sliding-window (eager, GQA and a window)",
    "hf-sdpa-sliding-window": "hf-eager-sliding-window (the same mask utilities and GQA)",
    "local-attention-LocalAttention-causal-exact": (
        "local-attention-LocalAttention-exact (exact windows) and hf-eager-sliding-window "
        "(a causal window)"
    ),
}

#: the adapters with a committed report card (``reports/variants``), in card order
CARDS: tuple[str, ...] = tuple(name for name in ADAPTERS if name not in NO_CARD)

#: the package each adapter module needs (for skip messages)
REQUIRES: dict[str, str] = {
    "sdpa": "torch",
    "fla": "fla-core (with triton)",
    "performer": "performer-pytorch",
    "mha": "torch",
    "hf": "transformers",
    "xtransformers": "x-transformers",
    "local_attention": "local-attention",
    "taylor_series": "taylor-series-linear-attention",
    "hf_cache": "transformers",
    "fla_paths": "fla-core (with triton)",
    "flex": "torch >= 2.5 (torch.nn.attention.flex_attention)",
}


def module_of(name: str) -> str:
    """The adapter module (a key of :data:`MODULES`) declaring the card ``name``.

    Raises:
        KeyError: an unknown card name.
    """
    for key, module in MODULES.items():
        if name in module.VARIANTS:
            return key
    raise KeyError(f"name: unknown adapter {name!r}; known: {sorted(ADAPTERS)}")


def card_facts(name: str, *, quick: bool = False, isolate: bool = True) -> dict[str, Any]:
    """The facts the card ``name`` shows besides the battery (its module's ``card_facts``).

    Raises:
        KeyError: an unknown card name. ImportError: the adapter's package is missing.
    """
    return MODULES[module_of(name)].card_facts(name, quick=quick, isolate=isolate)


__all__ = ["ADAPTERS", "CARDS", "MODULES", "NO_CARD", "REQUIRES", "card_facts", "module_of"]
