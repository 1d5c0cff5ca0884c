"""Reproducers reproduce, and hints cannot pass a bug.

1. For each property a faulty twin fails (``REPRODUCED``: the twin, its check and the failing
   properties), the reproducer the checker prints under the failure (``PropertyResult.snippet``,
   composed by ``verify.properties.support.reproduce.code``) runs in a fresh namespace and
   prints the reference and the exceeded bound: an element over its bound, an observation
   '> bound' of the re-checked property, or the failure the re-check raises.
2. An online softmax over key blocks of 64 that forgets to rescale its accumulator
   (``tests.flash_variants:online_no_rescale``) fails dtype-agreement in bfloat16 beyond every
   precision model: no ``--precision`` claim is suggested (the error does not shrink in
   float32), and every claim the hints name leaves the check failing. Its twin that really
   accumulates in bfloat16 (``pairwise_bf16`` below, judged without the claim) is told the
   claim its arithmetic is, and passes with it.
"""

from __future__ import annotations

import contextlib
import io
import re

import pytest

FV, MV = "tests.faulty_variants", "tests.modern_variants"

#: faulty twin -> (dtype, claims, the properties whose reproducers are run)
REPRODUCED = {
    f"{FV}:fault01_chunk_wrong_state": ("float64", {}, ("forms-agree", "oracle-agreement")),
    f"{FV}:fault02_padding_enters_state": ("float64", {}, ("state-step", "state-split-resume")),
    f"{FV}:fault04_normalizer_over_heads": (
        "float64",
        {},
        ("head-independence", "uniform-weights", "weights-vs-reference", "single-key-gradients"),
    ),
    f"{FV}:fault07_alignment_mislabelled": ("float64", {}, ("causal-alignment",)),
    f"{FV}:fault08_masked_rows_nan": ("float64", {}, ("masks", "masked-key-gradients")),
    f"{FV}:fault09_causal_ignored_short_path": ("float64", {}, ("causality",)),
    f"{FV}:fault12_single_key_dq": ("float64", {}, ("gradcheck", "gradients-vs-reference")),
    f"{MV}:bad_window": ("float64", {}, ("window-extent",)),
    f"{MV}:bad_gqa": ("float64", {}, ("head-groups",)),
    f"{MV}:bad_padding": ("float64", {}, ("key-padding",)),
    f"{MV}:bad_bias": ("float64", {}, ("score-bias",)),
}
#: examples per property (each twin fails within a few)
EXAMPLES = 10
#: what a reproducer prints when the output is off the reference beyond its bound, or when
#: the re-checked property fails
OVER = re.compile(r"(\d+) of \d+ elements over their bound")


def run_snippet(snippet: str) -> str:
    """stdout of ``snippet`` executed in a fresh namespace."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(snippet, "<reproducer>", "exec"), {"__name__": "__reproducer__"})  # noqa: S102
    return out.getvalue()


def shows_the_failure(text: str) -> bool:
    """An element over its bound, an observation beyond its bound, or a failing re-check."""
    over = any(int(n) > 0 for n in OVER.findall(text))
    return over or "> bound" in text or ": FAILS: " in text


def check(target: str, dtype: str, claims: dict, select, max_examples: int | None = EXAMPLES):
    from verify.engine.check import check as run

    return run(target, dtypes=(dtype,), select=list(select), max_examples=max_examples,
               isolate=False, **claims)  # fmt: skip


@pytest.mark.parametrize("target", sorted(REPRODUCED), ids=lambda t: t.split(":")[1])
def test_each_failure_reproducer_prints_the_reference_and_the_exceeded_bound(target):
    dtype, claims, props = REPRODUCED[target]
    result = check(target, dtype, claims, props)
    failed = {r.property_id: r for r in result.failed}
    assert set(props) <= set(failed), (target, sorted(failed))
    for pid in props:
        r = failed[pid]
        assert "reference(variant" in r.snippet and f"get({pid!r})" in r.snippet, r.snippet
        text = run_snippet(r.snippet)
        assert "reference = " in text, (pid, text[-2000:])
        assert shows_the_failure(text), (pid, text[-3000:])


def test_head_groups_reproducer_calls_with_the_claimed_kv_heads():
    """The reproducer passes k and v with G heads (what head-groups calls), and its own
    comparison with the reference shows elements over their bound."""
    result = check(f"{MV}:bad_gqa", "float64", {}, ("head-groups",))
    (r,) = result.failed
    assert "k, v = k[:, :: q.shape[1] // G]" in r.snippet
    over = [int(n) for n in OVER.findall(run_snippet(r.snippet))]
    assert over and over[0] > 0, over


def test_a_wrong_shape_is_said_not_raised():
    """A variant returning the wrong shape: the reproducer's comparison says so (and the
    re-check fails) instead of raising."""
    import torch

    from verify import builtins
    from verify.properties.support.reproduce import reference

    q = k = v = torch.ones(1, 1, 2, 1, dtype=torch.float64)
    ref = reference(builtins.get("softmax"), q, k, v, causal=False)
    assert "wrong shape" in ref.difference(torch.ones(1, 1, 1, 1, dtype=torch.float64))


# ----------------------------------------------------------------------------- precision hints


def pairwise_bf16(q, k, v, *, causal):
    """Softmax with P.V and the row sum accumulated in the input type, pairwise (the
    ``input-accumulation:pairwise`` model's arithmetic): the probes cannot tell it."""
    from verify.attention import lowprec

    return lowprec.input_accumulation_attention(q, k, v, causal=causal, scheme="pairwise")


def _named_claims(result) -> tuple[list[str], str]:
    """The --precision and --compute-dtype claims the printed summary of ``result`` names in
    its hints ('look at') and next steps, and those lines."""
    from verify.render.check import summary_text

    lines = summary_text(result).split("\n")
    text = "\n".join(x for x in lines if x.startswith(("    look at:", "  - ")))
    named = [("precision", m) for m in re.findall(r"--precision ([a-z][\w:-]*\w)", text)]
    named += [("compute_dtype", d) for d in re.findall(r"--compute-dtype ([a-z]\w+)", text)]
    return named, text


def _follow(target: str, named, select) -> list:
    """The check of ``target`` again with each named claim: (claim, exit code) pairs."""
    out = []
    for field_, value in named:
        again = check(target, "bfloat16", {"kernel": "softmax", field_: value}, select,
                      max_examples=None)  # fmt: skip
        out.append(((field_, value), again.exit_code))
    return out


def test_no_rescale_gets_no_precision_hint_and_no_hint_passes_it():
    target = "tests.flash_variants:online_no_rescale"
    select = ("dtype-agreement",)
    result = check(target, "bfloat16", {"kernel": "softmax"}, select, max_examples=None)
    (r,) = result.failed
    assert "beyond every precision model" in r.reason, r.reason
    named, text = _named_claims(result)
    hints = [x for x in text.split("\n") if x.startswith("    look at:")]
    assert hints and not any("--precision" in x for x in hints), text
    # every claim the summary names, followed, leaves the check failing
    assert all(code == 1 for _, code in _follow(target, named, select)), named
    # the dtype-agreement reproducer prints the reference of the long rows and the failure
    out = run_snippet(r.snippet)
    assert "reference = " in out and shows_the_failure(out), out[-3000:]


def test_a_kernel_accumulating_in_bf16_is_told_its_claim_and_passes_with_it():
    target = "tests.test_reproducers:pairwise_bf16"
    select = ("dtype-agreement",)
    result = check(target, "bfloat16", {"kernel": "softmax"}, select, max_examples=None)
    named, text = _named_claims(result)
    assert result.exit_code == 1 and [c for c in named if c[0] == "precision"], text
    assert all(code == 0 for _, code in _follow(target, named, select)), named
