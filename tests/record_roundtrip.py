"""The pickle round trip of a derivation record (tests' shared records, the report's worker
processes)."""

from __future__ import annotations


def same_after_round_trip(rec, back) -> None:
    """``attn-theory report`` derives in worker processes and pickles each record back; sympy
    rebuilds an expression by calling its class, which evaluates what a statement keeps
    unevaluated (D13's Eq(cosh(i pi/2), 0) came back as True). The copy must render the
    same Markdown and JSON as the record."""
    import json

    from verify.render.derivations import render_markdown

    assert render_markdown([back], []) == render_markdown([rec], []), rec.id
    assert json.dumps(back.to_json()) == json.dumps(rec.to_json()), rec.id
