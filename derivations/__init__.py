"""Symbolic derivations D1-D21 (sympy; no torch), rendered into ``reports/derivations.md``.

Each topic module exposes ``derive() -> Derivation`` and plain numeric functions that ``verify/``
imports (coefficients, bounds, sizes). Importing this package does no sympy work. The two largest
records are split: numeric exports in ``truncation`` / ``rounding``, claims in
``truncation_claims``, ``truncation_checks`` / ``rounding_claims``, and ``derive()`` in
``truncation_record`` / ``rounding_record``; D17's lemmas are in ``kernel_arithmetic``, its record
in ``kernel_arithmetic_record``. The argument validators shared by the numeric functions live in
``_validate``.

Run one derivation with ``python -m derivations.<module>``; all of them with
``attn-theory derive``.
"""

from __future__ import annotations

import importlib

#: derivation id -> module name (in the order D1 ... D21)
MODULES: dict[str, str] = {
    "D1": "feature_maps",
    "D2": "recurrent",
    "D3": "linear",
    "D4": "truncation_record",
    "D5": "state_size",
    "D6": "shift",
    "D7": "norms",
    "D8": "separation",
    "D9": "related",
    "D10": "rounding_record",
    "D11": "leaks",
    "D12": "decay",
    "D13": "softcap",
    "D14": "sigmoid",
    "D15": "structure",
    "D16": "transform_rounding",
    "D17": "kernel_arithmetic_record",
    "D19": "reverse_rnn",
    "D20": "paths",
    "D21": "gradient_identities",
}


def module(derivation_id: str):
    """Import and return the module implementing ``derivation_id`` (e.g. ``"D4"``).

    Raises:
        KeyError: unknown id (the message lists the known ones).
    """
    if derivation_id not in MODULES:
        raise KeyError(f"derivation_id: expected one of {list(MODULES)}, got {derivation_id!r}")
    return importlib.import_module(f"derivations.{MODULES[derivation_id]}")


def derive_all():
    """Run every derivation in order; returns a list of ``Derivation`` records."""
    return [module(i).derive() for i in MODULES]
