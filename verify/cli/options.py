"""Command-line options shared by the commands and the pytest plugin: argument types, and the
claim options (``--kernel``, ``--causal`` ...) mapped to ``AttentionVariant`` claims once.

``attn-theory check`` spells a claim ``--kernel``; the pytest plugin spells it
``--attn-kernel``; both read it through :data:`CLAIM_OPTIONS` and :func:`claims_from`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verify.spec.vocabulary import (
    ALIGNMENTS,
    CAUSAL_SUPPORT,
    DTYPES,
    EMPTY_ROW_CONVENTIONS,
    LAYOUTS,
)


def _int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


#: argparse types: an integer >= 1 (counts), an integer >= 0 (seeds)
positive_int = _int_at_least(1, "an integer >= 1")
seed = _int_at_least(0, "an integer seed >= 0")


def scale(text: str) -> float | str:
    """argparse type: ``default`` or a number."""
    if text == "default":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'default' or a number, got {text!r}") from None


@dataclass(frozen=True)
class ClaimOption:
    """One claim on the command line: the ``AttentionVariant`` field, the option name (without
    dashes; the plugin prefixes ``attn-``), its type or choices, and its help."""

    field: str
    name: str
    help: str
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    #: a boolean claim: ``--NAME`` sets True, ``--OFF`` sets False
    off: str | None = None


def _precision(text: str) -> str:
    """argparse type of ``--precision``: a valid model spec (its error names the option)."""
    import argparse

    from derivations.precision_models import parse_precision

    try:
        return parse_precision(text).spec
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


CLAIM_OPTIONS = (
    ClaimOption("kernel", "kernel", "claimed kernel: softmax | taylor:N | linear:MAP | unknown"),
    ClaimOption("layout", "layout", "tensor layout", choices=LAYOUTS),
    ClaimOption(
        "causal",
        "causal",
        "which causal values the variant supports (default both)",
        choices=CAUSAL_SUPPORT,
    ),
    ClaimOption(
        "causal_alignment", "alignment", "causal alignment when T != S", choices=ALIGNMENTS
    ),
    ClaimOption("normalized", "normalized", "divides by the kernel sum", off="unnormalized"),
    ClaimOption(
        "scale", "scale", "'default' (1/sqrt(d) for whatever d a check uses) or a number", scale
    ),
    ClaimOption("eps", "eps", "constant the variant adds to its denominator", float),
    # the closed list of input restrictions (found by the probes when not stated)
    ClaimOption(
        "dv_equals_d",
        "dv-equals-d",
        "restriction: the value dimension must equal the head dimension",
        off="dv-free",
    ),
    ClaimOption(
        "self_attention_only",
        "self-attention-only",
        "restriction: the query and key lengths must be equal (T == S)",
        off="cross-attention",
    ),
    ClaimOption(
        "compute_dtype",
        "compute-dtype",
        "the dtype the variant computes in for wider inputs (e.g. float32 for float64 calls)",
        choices=DTYPES,
    ),
    ClaimOption(
        "precision",
        "precision",
        "precision model of bf16/fp16 softmax: two-level | fused | eager | online:B | "
        "input-accumulation:recursive|pairwise|blocked:B (default: found by the probes, else "
        "fused)",
        _precision,
    ),
    ClaimOption(
        "empty_rows",
        "empty-rows",
        "what a row with no visible key returns",
        choices=EMPTY_ROW_CONVENTIONS,
    ),
)


def add_claim_options(add: Callable[..., Any], prefix: str = "") -> None:
    """Declare every claim option with ``add`` (``ArgumentParser.add_argument`` or pytest's
    ``group.addoption``), named ``--{prefix}{name}``, default None (not claimed)."""
    for opt in CLAIM_OPTIONS:
        dest = _dest(prefix, opt)
        if opt.off:
            add(
                f"--{prefix}{opt.name}", action="store_true", default=None, dest=dest, help=opt.help
            )
            add(f"--{prefix}{opt.off}", action="store_false", dest=dest, help=f"not: {opt.help}")
            continue
        kw: dict[str, Any] = {"default": None, "help": opt.help, "dest": dest}
        if opt.choices:
            kw["choices"] = opt.choices
        if opt.type:
            kw["type"] = opt.type
        add(f"--{prefix}{opt.name}", **kw)


def claims_from(get: Callable[[str], Any], prefix: str = "") -> dict[str, Any]:
    """The claims given (None when absent) from ``get(dest)``: an ``argparse.Namespace``'s
    ``getattr`` or pytest's ``config.getoption``."""
    return {opt.field: get(_dest(prefix, opt)) for opt in CLAIM_OPTIONS}


def _dest(prefix: str, opt: ClaimOption) -> str:
    return prefix.replace("-", "_") + opt.field
