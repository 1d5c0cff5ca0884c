"""pytest plugin: ``pytest --attn-variant pkg.module:object`` runs the property battery on a
variant, one pytest test per property (DESIGN.md, "Variant checking").

Registered through the ``pytest11`` entry point. Importing it costs nothing: it only adds the
``--attn-*`` options; torch, hypothesis and the catalogue load when ``--attn-variant`` is given.
"""

from __future__ import annotations


def pytest_addoption(parser) -> None:
    group = parser.getgroup("attn-theory", "attention variant checks (attn-theory)")
    group.addoption(
        "--attn-variant",
        action="append",
        default=[],
        metavar="PKG.MODULE:OBJECT",
        help="check this attention variant (repeatable)",
    )
    group.addoption(
        "--attn-kernel", default=None, help="claimed kernel: softmax|taylor:N|linear:MAP|unknown"
    )
    group.addoption("--attn-layout", default=None, choices=("BHTD", "BTHD"), help="tensor layout")
    group.addoption(
        "--attn-causal", default=None, choices=("yes", "no", "both"), help="causal support"
    )
    group.addoption(
        "--attn-alignment",
        default=None,
        choices=("top-left", "bottom-right"),
        help="causal alignment for T != S",
    )
    group.addoption(
        "--attn-normalized", default=None, choices=("yes", "no"), help="divides by the kernel sum"
    )
    group.addoption("--attn-scale", default=None, help="'default' (1/sqrt(d)) or a number")
    group.addoption("--attn-eps", default=None, type=float, help="declared denominator eps")
    group.addoption(
        "--attn-dtype", default=None, help="dtype to run (float64, float32, bfloat16, float16)"
    )
    group.addoption("--attn-device", default=None, help="device to run (cpu, cuda)")
    group.addoption(
        "--attn-select",
        action="append",
        default=[],
        metavar="PROPERTY",
        help="only these properties",
    )
    group.addoption("--attn-max-examples", default=None, type=int, help="examples per property")
    group.addoption("--attn-seed", default=0, type=int, help="seed")
