"""LaTeX for the derivation report: the project's printer and hand-written templates.

Why not ``sympy.latex`` of whatever the record holds: a statement such as "LayerNorm of N_t" or
"z_j in [0, a] for all j" has no sympy object, and wrapping its text in a ``Symbol`` makes sympy
read the name as a symbol with subscripts (``L2(N_{t) i}``, ``z_{j in [0, a] for all j}``) --
output that parses, so no renderer complains, and says something else. Two rules follow:

* a sympy object the code really computes with (an expression, an equation, a bound) is printed
  by :func:`latex`, sympy's printer with the project's notation (``\\kappa_N(x)``, ``\\hat N``,
  ``e_{\\mathrm{div}}``): the text is generated from the object, so it cannot drift from it;
* everything else -- conditions, quantifiers, operators sympy has no object for (tensor powers,
  inner products, norms), prose -- is a :class:`Tex`: hand-written LaTeX whose mathematical parts
  are *slots* filled by :func:`latex` from the objects the record's checks use, and which names
  the claim that proves it. ``tests/test_derivations_latex.py`` checks that every slot is printed
  from its object, that every named claim exists and is not failed, and that a template with a
  full ``expr`` prints as that object does.

Imports sympy lazily.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

#: symbol / function name -> LaTeX, for names sympy's default splitting would set wrong
#: (multi-letter subscripts as words, hats, operator names).
NOTATION: dict[str, str] = {
    "kappa_N": r"\kappa_N",
    "kappa_1": r"\kappa_1",
    "kappa_{N-1}": r"\kappa_{N-1}",
    "g_N": "g_N",
    "delta_N": r"\delta_N",
    "Nhat": r"\hat{N}",
    "Dhat": r"\hat{D}",
    "e_div": r"e_{\mathrm{div}}",
    "e_N": "e_N",
    "e_D": "e_D",
    "e_w": "e_w",
    "u_in": r"u_{\mathrm{in}}",
    "u_acc": r"u_{\mathrm{acc}}",
    "u_low": r"u_{\mathrm{low}}",
    "eta_low": r"\eta_{\mathrm{low}}",
    "n_b": "n_b",
    "ulps": r"k_{\mathrm{ulp}}",
    "gamma_S": r"\gamma_S",
    "gamma_{n-1}": r"\gamma_{n-1}",
    "Delta_lin": r"\Delta_{\mathrm{lin}}",
    "z_max": r"z_{\max}",
    "z_star": r"z_{i^*}",
    "S_tensor": r"S_{\mathrm{tensor}}",
    "KV": r"\mathrm{KV}",
    "w_masked": r"w_{\mathrm{masked}}",
    "n_v": "n_v",
    "epsilon": r"\varepsilon",
    "dN_1": r"\delta N_1",
    "dN_2": r"\delta N_2",
    "dD_1": r"\delta D_1",
    "dD_2": r"\delta D_2",
    "d_1": r"\delta_1",
    "d_2": r"\delta_2",
}

#: a slot in a template: ``@name`` (``@`` is not LaTeX)
SLOT = re.compile(r"@([A-Za-z_][A-Za-z0-9_]*)")


def _printer_class():
    from sympy.core.function import AppliedUndef
    from sympy.printing.latex import LatexPrinter

    class ProjectLatexPrinter(LatexPrinter):
        """sympy's printer with :data:`NOTATION` and ``f(x)`` for undefined functions."""

        def _print_Symbol(self, expr, style="plain"):
            if expr.name in NOTATION:
                return NOTATION[expr.name]
            return super()._print_Symbol(expr, style=style)

        def _print_Indexed(self, expr):
            base = self._print(expr.base.label)
            return f"{base}_{{{', '.join(self._print(i) for i in expr.indices)}}}"

        def _print_Function(self, expr, exp=None):
            if isinstance(expr, AppliedUndef):
                name = expr.func.__name__
                head = NOTATION.get(name) or self._deal_with_super_sub(name)
                if len(name) > 1 and name.isalpha() and not head.startswith("\\"):
                    head = rf"\operatorname{{{name}}}"  # relu, softmax: upright operator names
                args = ", ".join(self._print(a) for a in expr.args)
                out = rf"{head}\left({args}\right)"
                return f"{out}^{{{exp}}}" if exp is not None else out
            return super()._print_Function(expr, exp)

    return ProjectLatexPrinter


_PRINTER = None


def latex(expr: Any) -> str:
    """The project's LaTeX for a sympy object (a ``Tex`` gives its own, a ``str`` is LaTeX)."""
    global _PRINTER
    if isinstance(expr, Tex):
        return expr.latex()
    if isinstance(expr, str):
        return expr
    if _PRINTER is None:
        _PRINTER = _printer_class()()
    return _PRINTER.doprint(expr)


@dataclass
class Tex:
    """A hand-written LaTeX formula tied to the objects the record checks.

    Attributes:
        template: LaTeX; ``@name`` marks a slot filled with ``latex(slots[name])``.
        slots: slot name -> sympy object (the object the record's check uses).
        claim: name of the record's claim that establishes the formula (conditions included);
            the report test requires it to exist and not to have failed.
        expr: optionally, the full sympy object the formula states; then the filled template
            must print as ``latex(expr)`` does (up to spacing and grouping, see the test).
    """

    template: str
    slots: dict[str, Any] = field(default_factory=dict)
    claim: str | None = None
    expr: Any = None

    def latex(self) -> str:
        """The template with every slot printed from its object."""
        names = SLOT.findall(self.template)
        missing = [n for n in names if n not in self.slots]
        if missing:
            raise KeyError(f"Tex slots without an object: {missing} in {self.template!r}")
        return SLOT.sub(lambda m: "{" + latex(self.slots[m.group(1)]) + "}", self.template)

    def __str__(self) -> str:  # plain-text rendering (``describe``)
        return self.latex()


def tex(template: str, claim: str | None = None, expr: Any = None, **slots: Any) -> Tex:
    """Shorthand: ``tex(r"\\kappa_{2m}(x) > 0", claim="...", bound=expr)``."""
    return Tex(template, dict(slots), claim, expr)
