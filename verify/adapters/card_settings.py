"""How the adapters' report cards are run: one profile and one seed for every check, probe and
measurement (so a rerun in the same environment gives the same bytes), and the quick run the
tests use.
"""

from __future__ import annotations

SEED = 0
#: seconds per property before the watchdog stops it: generous, so a committed card never
#: depends on how loaded the machine that made it was (a real hang still stops)
CARD_TIMEOUT = 600.0
PROFILE = "ci"
#: examples per property and dtype of a card: the report's count (``verify.cli.report``'s
#: REPORT_EXAMPLES, as the verification table draws; the ci profile would draw 25), which keeps
#: the report within its 12-minute budget with 19 cards; a failing property stops at its first
#: failure and shrinks within the same 25-candidate budget either way
CARD_EXAMPLES = 10
#: a quick run (tests): two properties, three examples, float64
QUICK_SELECT = ("oracle-agreement", "causality")
QUICK_EXAMPLES = 3
#: the cards of a quick report (``attn-theory report --quick``, a smoke run of the pipeline):
#: a softmax card, a linear-attention card and a decode-path card, not all of them (the full
#: set is the committed report's, compared by ``report --check``)
QUICK_CARDS = ("torch-sdpa", "fla-naive_parallel_based", "hf-dynamic-cache")
#: cards started first when several are built at a time (longest first shortens the tail: the
#: eager flex cards took 50-70 s each, the others 5-35 s, measured on 2 cores); the rest follow
#: in card order. The order of building changes no card's bytes.
SLOW_FIRST = ("torch-flex-softcap-alibi", "torch-flex-document-window", "hf-sdpa-gqa")


def card_dtypes(variant, *, quick: bool = False) -> tuple[str, ...]:
    """The dtypes a card checks: float64 and float32, plus bfloat16 and float16 where the
    variant claims them (its low-precision properties run too); float64 only for a quick run.

    Args:
        variant: the adapter's :class:`~verify.spec.variant.AttentionVariant`.
    """
    if quick:
        return ("float64",)
    low = tuple(dt for dt in ("bfloat16", "float16") if dt in variant.dtypes)
    return ("float64", "float32", *low)
