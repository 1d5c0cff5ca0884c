"""The LaTeX of ``reports/derivations.md``: it renders, it says what the code proves.

1. Every math span (GitHub's forms: a ```` ```math ```` fence, ``$$...$$``, inline ``$...$``)
   renders with KaTeX (``throwOnError``, strict), in one node process for all spans. KaTeX is
   installed from ``tests/katex/package-lock.json`` into ``tests/katex/node_modules``
   (git-ignored) on first use; the test skips only when node or npm is missing.
2. Fragments a lossy sympy -> LaTeX conversion produced (a ``Symbol`` named after a formula,
   prose set as math) are absent, and generic smells of the same kind are found nowhere.
3. Every hand-written template (``derivations._latex.Tex``) is tied to its record: its slots are
   printed from sympy objects, the claim it names exists and did not fail, and a template that
   gives a full ``expr`` prints as that object does.
"""

from __future__ import annotations

import json
import pickle
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import derivations
from derivations._latex import NOTATION, SLOT, Tex, latex
from derivations._record import Status

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "reports" / "derivations.md"
KATEX_DIR = Path(__file__).resolve().parent / "katex"


# -- the math spans of a GitHub Markdown file ----------------------------------------------------
def math_spans(text: str) -> list[tuple[str, bool, int]]:
    """``(tex, display, line)`` for every math block and every inline ``$...$``.

    Math blocks are GitHub's two forms: a ```` ```math ```` fence and ``$$`` on lines of their
    own. Code spans and other fenced code are skipped (GitHub does not typeset math there).
    """
    spans: list[tuple[str, bool, int]] = []
    lines = text.split("\n")
    i, fenced = 0, False
    while i < len(lines):
        line = lines[i]
        if not fenced and line.strip() == "```math":
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            assert j < len(lines), f"unclosed math fence at line {i + 1}"
            spans.append(("\n".join(lines[i + 1 : j]), True, i + 1))
            i = j
        elif line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.strip() == "$$":
            j = i + 1
            while j < len(lines) and lines[j].strip() != "$$":
                j += 1
            assert j < len(lines), f"unclosed $$ block at line {i + 1}"
            spans.append(("\n".join(lines[i + 1 : j]), True, i + 1))
            i = j
        elif not fenced:
            for m in re.finditer(r"\$`([^`]+)`\$", line):  # GitHub's verbatim inline math
                spans.append((m.group(1), False, i + 1))
            prose = re.sub(r"`[^`]*`", "", re.sub(r"\$`[^`]+`\$", "", line))
            for m in re.finditer(r"(?<![\\$])\$(?!\$)([^$]+?)(?<![\\$])\$(?!\$)", prose):
                spans.append((m.group(1), False, i + 1))
        i += 1
    return spans


def _katex_ready() -> Path:
    """``tests/katex/render.js`` with KaTeX installed (``npm ci`` on first use).

    The install holds a lock file: under ``pytest -n auto`` two workers may get here at once.
    """
    import fcntl

    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed to render the math with KaTeX (not found on PATH)")
    with open(KATEX_DIR / "package-lock.json") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (KATEX_DIR / "node_modules" / "katex" / "package.json").exists():
                subprocess.run(
                    [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                    cwd=KATEX_DIR,
                    check=True,
                    timeout=300,
                )
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return KATEX_DIR / "render.js"


def katex_errors(spans: list[tuple[str, bool, int]]) -> list[str]:
    """KaTeX's error for each span that does not render (one node process for all spans)."""
    script = _katex_ready()
    payload = json.dumps([{"tex": t, "display": d} for t, d, _ in spans])
    proc = subprocess.run(
        [shutil.which("node"), str(script)],
        input=payload,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    errors = json.loads(proc.stdout)
    assert len(errors) == len(spans)
    return [f"line {ln}: {err}\n    {t!r}" for (t, _, ln), err in zip(spans, errors) if err]


@pytest.fixture(scope="module")
def report_text() -> str:
    return REPORT.read_text()


@pytest.fixture(scope="module")
def spans(report_text):
    found = math_spans(report_text)
    assert len(found) > 100  # statements and steps of D1-D11
    return found


# -- 1. a real TeX renderer -----------------------------------------------------------------------
def test_katex_renders_every_math_span(spans):
    errors = katex_errors(spans)
    assert not errors, f"{len(errors)} math spans do not render:\n" + "\n".join(errors)


def test_katex_check_can_fail():
    """The renderer check itself rejects broken LaTeX (else test 1 would prove nothing)."""
    bad = [(r"\frac{a}{b", True, 1), (r"x_{t) i}^{", False, 2), (r"\kappa_N", False, 3)]
    errors = katex_errors(bad)
    assert len(errors) == 2 and "line 1" in errors[0] and "line 2" in errors[1]


def test_math_spans_reader():
    text = "a $x_1$ and `$not math$` b\n\n$$\n\\frac{1}{2}\n$$\n\n```\n$$\n```\n"
    text += "\n```math\n\\lbrace x \\rbrace\n```\nso $`a_1 * b`$ and `code`\n"
    assert math_spans(text) == [
        ("x_1", False, 1),
        ("\\frac{1}{2}", True, 3),
        ("\\lbrace x \\rbrace", True, 11),
        ("a_1 * b", False, 14),
    ]


def test_display_math_is_fenced(report_text, spans):
    """Display math is a ```` ```math ```` fence: GitHub runs Markdown over ``$$`` blocks first
    (``\\{`` loses its backslash, ``\\,`` becomes a comma, ``*...*`` emphasis)."""
    assert "\n$$\n" not in report_text
    assert sum(display for _, display, _ in spans) == report_text.count("```math\n")


# -- 2. fragments of the lossy conversion ---------------------------------------------------------
#: fragments the old conversion printed (record, text)
FRAGMENTS = [
    ("D1", r"\Phi_{n(x)}"),
    ("D3", r"o_{t} = \phi(q^{T S T z}_{t) t / \phi(q t) t}"),
    ("D3", r"\phi(q^{T S T z}"),
    ("D4", r"\sum_{s |\hat w s - w s|}"),
    ("D7", r"L2(N_{t) i}"),
    ("D7", r"RMS(N_{t) i}"),
    ("D7", r"LN(N_{t) i}"),
    ("D7", r"\left\|{Layer}\right\|_{eps(N t) i}"),
    ("D7", r"eps(N t) i"),
    ("D8", r"z_{j in [0, a] for all j} \Rightarrow max_{i softmax(z) i}"),
    ("D8", r"z_{j in [0, a] for all j}"),
    ("D8", r"max_{i softmax(z) i}"),
    ("D8", r"smallest n (threshold 1/2)"),
    ("D8", "lin peak"),
    ("D8", "power peak"),
    ("D9", r"w_{s(alpha q)}"),
    ("D9", r"E[Z^{k]}"),
    ("D9", r"Var[phi(x).phi(y)]"),
    ("D10", r"|Nhat/Dhat"),
    ("D11", r"max|e_{1 - e 2|}"),
    ("D11", r"o_{1 - o 2}"),
]


@pytest.mark.parametrize(("rid", "fragment"), FRAGMENTS)
def test_fragment_absent(spans, rid, fragment):
    """The fragment is in no math span (prose may say "lin peak"; math may not)."""
    hits = [ln for t, _, ln in spans if fragment in t]
    assert not hits, f"{rid}: {fragment!r} is still in {REPORT.name}, lines {hits}"


def test_fragment_check_can_fail():
    old = "```math\no_{t} = \\phi(q^{T S T z}_{t) t / \\phi(q t) t}\n```\n"
    assert any(f in t for t, _, _ in math_spans(old) for _, f in FRAGMENTS)


def _strip_text(tex: str) -> str:
    """The math of a span without its ``\\text{...}``-like groups and command names."""
    tex = re.sub(
        r"\\(?:text|mathrm|operatorname|mathbb|mathcal|textbf|begin|end)\{[^{}]*\}", "", tex
    )
    return re.sub(r"\\[A-Za-z]+", "", tex)


def _groups(tex: str):
    """Contents of every ``_{...}`` / ``^{...}`` group (brace-matched)."""
    for m in re.finditer(r"[_^]\{", tex):
        depth, j = 1, m.end()
        while j < len(tex) and depth:
            depth += {"{": 1, "}": -1}.get(tex[j], 0)
            j += 1
        yield tex[m.end() : j - 1]


def _balanced(s: str) -> bool:
    stack, pairs = [], {")": "(", "]": "["}
    s = re.sub(r"\\(?:left|right|big|Big|bigl|bigr)[\[\]()]", "", s)
    for ch in s:
        if ch in "([":
            stack.append(ch)
        elif ch in ")]":
            if not stack or stack.pop() != pairs[ch]:
                return False
    return not stack


SHORT_WORDS = {"in", "or", "if", "is", "of", "to", "at", "by", "on", "as", "an", "be"}


def smells(tex: str) -> list[str]:
    """What in one math span looks like a string or prose pushed through sympy."""
    found = []
    if re.search(r"(?<!\\)kappa", tex):
        found.append("kappa without a backslash")
    for op in (">=", "<=", "!=", "=>"):
        if op in tex:
            found.append(f"ASCII operator {op!r}")
    if re.search(r"[ND]hat", tex):
        found.append("Nhat/Dhat spelt as a name")
    # runs of 3+ letters, or a two-letter English word (w_{ts}: two indices, not a word)
    words = [
        w
        for w in re.findall(r"(?<![A-Za-z])[A-Za-z]{2,}(?![A-Za-z])", _strip_text(tex))
        if len(w) > 2 or w in SHORT_WORDS
    ]
    if words:
        found.append(f"bare words as identifiers {sorted(set(words))}")
    for group in _groups(tex):
        if not _balanced(group):
            found.append(f"unbalanced sub/superscript {{{group}}}")
        # "s |w s|": a word, a space, then a bar -- a name with bars in it (e^{|x|} is fine)
        if re.search(r"[A-Za-z0-9] \|", group):
            found.append(f"bar inside a sub/superscript {{{group}}}")
        if re.search(r"[A-Za-z0-9] [A-Za-z]", _strip_text(group)) and "," not in group:
            if re.search(r"(?<![A-Za-z])[A-Za-z]{2,}", _strip_text(group)):
                found.append(f"words in a subscript {{{group}}}")
    return found


def test_smell_detector_catches_the_listed_fragments():
    """Each generic rule fires on the old output it is meant for (the test can fail)."""
    assert smells(r"o_{t} = \phi(q^{T S T z}_{t) t / \phi(q t) t}")
    assert smells(r"\sum_{s |\hat w s - w s|} \leq 1")
    assert smells(r"L2(N_{t) i} = 1")
    assert smells(r"z_{j in [0, a] for all j} \Rightarrow max_{i softmax(z) i}")
    assert smells(r"z_{i*} >= z_j + Delta (j != i*)")
    assert smells(r"w_{s(alpha q)} = w_{s(q)}")
    assert smells(r"E[Z^{k]} = 1")
    assert smells(r"[x^{N-1}](kappa_N(x+a) - kappa_N(x)) = 1")
    assert smells(r"|Nhat/Dhat (1+delta)/(N/D) - 1| \leq 1")
    assert smells(r"l > 2 T \Rightarrow flagged")
    assert not smells(r"\kappa_N(x) = \sum_{n=0}^{N} \frac{x^{n}}{n!}")
    assert not smells(r"\delta \in [0, 1),\ \text{so } \hat N \ge 0")
    assert not smells(r"\sum_{s} \gamma^{t-s} w_{ts} v_s - w_{tt} v_t")
    assert not smells(r"\gamma^{|t-s|} w_{ts} \in [e^{-|\tau|}, e^{|\tau|}]")


def test_no_smells_in_math(spans):
    bad = [f"line {ln}: {s}\n    {t!r}" for t, _, ln in spans for s in smells(t)]
    assert not bad, "\n".join(bad)


def test_d4_output_bound_states_its_condition(report_text):
    """D4's bound on sum |w^ - w| needs delta < 1 (the proof divides by 1 - delta + 2 a delta)."""
    block = report_text.split("**`output_bound`**", 1)[1].split("```", 2)[1]
    assert r"\delta < 1" in block and r"\lvert \hat{w}_s - w_s \rvert" in block


STEP_DISPLAY = re.compile(r"^(\d+)\. ([^\n]*)\n\n```math\n(.*?)\n```", re.M | re.S)
RELATION = re.compile(
    r"=|<|>|\\(?:le|ge|leq|geq|ne|neq|in|to|iff|approx|Rightarrow|implies|sim)(?![A-Za-z])"
)


def test_every_displayed_result_says_what_it_is(report_text):
    """A displayed formula in a step is a relation (it names what it is), after prose."""
    bad = []
    for m in STEP_DISPLAY.finditer(report_text):
        num, prose, tex = m.groups()
        if not RELATION.search(tex) or len(prose.split()) < 3:
            bad.append(f"step {num}: {tex!r}")
    assert not bad, "\n".join(bad)


# -- 3. templates tied to what the code proves ----------------------------------------------------
@pytest.fixture(scope="module")
def records(derived):
    return [derived(did) for did in derivations.MODULES]


def test_records_cross_processes_unchanged():
    """The check of every record's pickle round trip (``record_roundtrip.same_after_round_trip``)
    catches a statement that evaluates when rebuilt: D13's, as it was."""
    import sympy
    from record_roundtrip import same_after_round_trip

    rec = derivations.module("D20").derive()
    back = pickle.loads(pickle.dumps(rec))
    same_after_round_trip(rec, back)
    label = next(iter(rec.statement))
    rec.statement[label] = sympy.Eq(
        sympy.cosh(sympy.I * sympy.pi / 2, evaluate=False), sympy.Integer(0), evaluate=False
    )
    with pytest.raises(AssertionError, match="D20"):
        same_after_round_trip(rec, pickle.loads(pickle.dumps(rec)))


def _formulas(rec):
    for label, x in rec.statement.items():
        yield f"{rec.id} statement {label}", x
    for i, s in enumerate(rec.steps, 1):
        if s.expr is not None:
            yield f"{rec.id} step {i}", s.expr


def _normal(tex: str) -> str:
    """LaTeX up to spacing, ``\\left``/``\\right`` and braces around one token."""
    tex = re.sub(r"\\left|\\right|\\[,;!: ]|\\quad|\\qquad", "", tex)
    tex = re.sub(r"\s+", "", tex)
    prev = None
    while prev != tex:
        prev = tex
        tex = re.sub(r"\{(\\[A-Za-z]+|[A-Za-z0-9])\}", r"\1", tex)
    return tex


IDENTIFIER = re.compile(r"^[A-Za-z]+(_\{?[A-Za-z0-9*]+\}?)?\^?\*?$")


def test_every_formula_is_an_object_or_a_tied_template(records):
    """No formula is a bare string, and no sympy symbol is a formula in disguise."""
    import sympy

    bad = []
    for where, x in (f for r in records for f in _formulas(r)):
        objects = list(x.slots.values()) + [x.expr] if isinstance(x, Tex) else [x]
        if isinstance(x, str):
            bad.append(f"{where}: a LaTeX string, not an object or a Tex")
        for obj in objects:
            if obj is None:
                continue
            if not isinstance(obj, sympy.Basic):
                bad.append(f"{where}: slot {obj!r} is not a sympy object")
                continue
            # a Limit keeps its direction as the symbol "+" or "-": not a name
            names = {a.name for a in obj.atoms(sympy.Symbol)} - {"+", "-", "+-"} | {
                f.func.__name__ for f in obj.atoms(sympy.core.function.AppliedUndef)
            }
            for name in names:
                if name not in NOTATION and not IDENTIFIER.match(name):
                    bad.append(f"{where}: symbol named {name!r} (a formula in a name)")
    assert not bad, "\n".join(bad)


def test_templates_are_tied_to_claims_and_objects(records):
    bad, checked = [], 0
    for rec in records:
        claims = {c.name: c.status for c in rec.claims}
        for where, x in _formulas(rec):
            if not isinstance(x, Tex):
                continue
            checked += 1
            slots = set(SLOT.findall(x.template))
            if slots != set(x.slots):
                bad.append(f"{where}: slots {sorted(slots)} vs objects {sorted(x.slots)}")
            if x.claim is None and x.expr is None:
                bad.append(f"{where}: names neither the claim that proves it nor its object")
            if x.claim is not None:
                if x.claim not in claims:
                    bad.append(f"{where}: claim {x.claim!r} is not in {rec.id}'s claims")
                elif claims[x.claim] is Status.FAILED:
                    bad.append(f"{where}: claim {x.claim!r} failed")
            if x.expr is not None and _normal(x.latex()) != _normal(latex(x.expr)):
                bad.append(f"{where}: template {x.latex()!r} != object {latex(x.expr)!r}")
            for name, obj in x.slots.items():
                if "{" + latex(obj) + "}" not in x.latex():
                    bad.append(f"{where}: slot {name} not printed from its object")
    assert checked >= 20, checked
    assert not bad, "\n".join(bad)


def test_template_check_can_fail():
    """A template whose text drifts from its object is caught by the normal-form comparison."""
    import sympy

    x = sympy.Symbol("x")
    right = Tex(
        r"\kappa_1\left(x\right) = x + 1", expr=sympy.Eq(sympy.Function("kappa_1")(x), x + 1)
    )
    wrong = Tex(r"\kappa_1\left(x\right) = x - 1", expr=right.expr)
    assert _normal(right.latex()) == _normal(latex(right.expr))
    assert _normal(wrong.latex()) != _normal(latex(wrong.expr))


# -- 4. displays that say something; the title; conditions of the newest records ----------------
def _trivial_relations(tex: str) -> list[str]:
    """Adjacent sides of ``=`` that are the same formula (``0 = 0``, ``a = a``): a display that
    printed an object sympy had already evaluated, so it says nothing."""
    body = tex.split(r"\qquad", 1)[0]
    sides = [_normal(x) for x in re.split(r"(?<![<>!\\])=", body)]
    return [a for a, b in zip(sides, sides[1:]) if a and a == b]


def test_trivial_relation_detector_can_fail():
    assert _trivial_relations("0 = 0")
    assert _trivial_relations(r"\tanh^{2}{\left(u \right)} = \tanh^{2}{\left(u \right)}")
    assert not _trivial_relations(r"\cosh{\left(\frac{i \pi}{2} \right)} = 0")
    assert not _trivial_relations(r"a \le b \qquad (a = a)")


def test_no_display_is_a_trivial_identity(spans):
    bad = [f"line {ln}: {t!r}" for t, display, ln in spans if display and _trivial_relations(t)]
    assert not bad, "\n".join(bad)


def test_title_names_the_records(report_text, records):
    assert report_text.splitlines()[0] == f"# Derivations {records[0].id}–{records[-1].id}"


#: (record, statement label, what its conditions must mention)
NEW_CONDITIONS = [
    ("D12", "decay", r"m \in \mathbb{R}"),
    ("D12", "truncation", r"w_{ts} = \gamma^{\,t-s}\, e^{\,c\,q_t\cdot k_s}"),
    ("D12", "non_causal", r"\overrightarrow{N}_t = \sum_{s \le t}"),
    ("D13", "cap", "C > 0"),
    ("D13", "near_zero", "C > 0"),
    ("D13", "weights", r"S \ge 2"),
    ("D14", "row_sums", r"S \text{ keys in the row}"),
    ("D15", "window", r"0 \le s < S"),
    ("D15", "finite_history", r"L \ge 0"),
    ("D15", "gqa", r"\text{ key/value heads dividing }"),
    ("D16", "softcap", r"\lvert \hat x - x \rvert \le e_x"),
    ("D16", "alibi", r"m \ge 0"),
    ("D16", "sigmoid", r"r_{\exp} = 2 k u"),
]


@pytest.mark.parametrize(("rid", "label", "needle"), NEW_CONDITIONS)
def test_new_statements_carry_their_conditions(records, rid, label, needle):
    rec = next(r for r in records if r.id == rid)
    assert needle in rec.statement[label].latex(), f"{rid} {label}: no {needle!r}"


def test_numbers_in_step_prose_are_computed(records):
    """D5's T* values and D6's float32 sentinel come from the exports, not typed into the prose."""
    from fractions import Fraction

    from derivations import rounding, shift, state_size

    d5 = next(r for r in records if r.id == "D5")
    ratios = [float(state_size.crossover_ratio(n, 64, 64)) for n in (2, 3, 4)]
    text = next(s.text for s in d5.steps if "is not an integer" in s.text)
    assert ", ".join(f"{x:.2f}" for x in ratios) in text
    assert f"{state_size.crossover_length(2, 64, 64):,} at N = 2" in text
    d6 = next(r for r in records if r.id == "D6")
    text = next(s.text for s in d6.steps if "float32 the lowest" in s.text)
    lowest = -Fraction(rounding.largest_finite("float32"))
    k2 = float(shift.taylor_kernel_value(2, lowest))
    assert f"{k2:.1e}".split("e")[0] in text and f"10^{{{int(f'{k2:.1e}'.split('e')[1])}}}" in text


#: ratios whose denominator can vanish (odd kappa_N, relu features): the statement says it may not
NONZERO_DENOMINATORS = [
    ("D2", "output", r"\kappa_N(x_{t, s}) \ne 0"),
    ("D2", "readout", r"D_t \ne 0"),
    ("D3", "kernel_linear_attention", r"\phi(q_t)^{T} z_t \ne 0"),
    ("D9", "ReLU linear attention", r"\text{denominator} > 0"),
]


@pytest.mark.parametrize(("rid", "label", "needle"), NONZERO_DENOMINATORS)
def test_ratios_state_a_nonzero_denominator(records, rid, label, needle):
    rec = next(r for r in records if r.id == rid)
    assert needle in rec.statement[label].latex(), f"{rid} {label}: no {needle!r}"
