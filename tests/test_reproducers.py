"""Reproducers reproduce, and hints cannot pass a bug.

1. For every variant-facing property of the catalogue a faulty twin fails (``CASES``: the twin,
   its check and the failing properties; the properties of the suite's own theory are left
   out, ``NOT_VARIANT_FACING``), the reproducer the checker prints under the failure
   (``PropertyResult.snippet``, composed by ``verify.properties.support.reproduce.code``) runs
   in a fresh namespace and prints the reference and the exceeded bound: an element over its
   bound, an observation '> bound' of the re-checked property, or the failure the re-check
   raises; the re-check of the property on the rebuilt example fails. A property of another
   path (the state API, a decode path, the packed function, the feature map, a BlockMask, a
   score_mod: ``OWN_CALL``) is reproduced by calling that path: the reproducer's own
   comparison of its output with the reference shows the failure, not only the re-check.
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
from dataclasses import dataclass, field

import pytest
import torch

from tests.test_grouping_catalogue import FAMILY_STATEMENTS

FV, MV = "tests.faulty_variants", "tests.modern_variants"
UV, DV, XV = "tests.unclaimed_variants", "tests.decode_variants", "tests.flex_variants"
SOFTMAX = {"kernel": "softmax"}
#: examples per property (each twin fails within a few)
EXAMPLES = 10
#: shrink candidates of the cases added for the whole catalogue (the fault catalogue's and the
#: structural twins' run with the checker's own budget)
FEW = 8


@dataclass(frozen=True)
class Case:
    """A faulty twin (``module:name``), the dtype and claims it is checked with, and the
    properties it fails whose reproducers are run (every variant-facing property of the
    catalogue is in one case: ``test_every_variant_facing_property_is_reproduced``)."""

    target: str
    props: tuple[str, ...]
    dtype: str = "float64"
    claims: dict = field(default_factory=dict)
    #: run the probes first (the twins whose claims they complete); False: the claims given
    probe: bool | None = None
    examples: int = EXAMPLES
    #: shrink candidates after the first failure (None: the checker's own budget,
    #: ``verify.properties.support.base.SHRINK_DRAWS``); a smaller budget leaves a larger
    #: counterexample, whose reproducer is composed and run the same way
    shrink: int | None = None

    def __str__(self) -> str:
        return self.target.split(":")[1] + "-" + self.props[0]


CASES = (
    # ------------------------------------------------------------ the fault catalogue
    Case(f"{FV}:fault01_chunk_wrong_state", ("forms-agree", "oracle-agreement")),
    Case(f"{FV}:fault02_padding_enters_state", ("state-step", "state-split-resume")),
    Case(
        f"{FV}:fault04_normalizer_over_heads",
        ("head-independence", "uniform-weights", "weights-vs-reference", "single-key-gradients"),
    ),
    Case(
        f"{FV}:fault06_normalizer_multiplied",
        ("edge-cases", "convex-combination", "single-key"),
        probe=False,
        shrink=FEW,
        examples=2,
    ),
    Case(f"{FV}:fault07_alignment_mislabelled", ("causal-alignment",)),
    Case(f"{FV}:fault08_masked_rows_nan", ("masks", "masked-key-gradients", "empty-row-gradients")),
    Case(f"{FV}:fault09_causal_ignored_short_path", ("causality", "prefix-invariance")),
    Case(
        f"{FV}:fault10_elementwise_square_map",
        ("kernel-identity",),
        probe=False,
        shrink=FEW,
        examples=4,
    ),
    Case(
        f"{FV}:fault12_single_key_dq",
        ("gradcheck", "gradients-vs-reference", "gradient-identities"),
    ),
    Case(
        f"{FV}:fault13_p_truncated",
        ("rounding-bias",),
        "bfloat16",
        probe=False,
        shrink=FEW,
        examples=2,
    ),
    # ------------------------------------------------------------ structural claims
    Case(f"{MV}:bad_window", ("window-extent",)),
    Case(f"{MV}:bad_gqa", ("head-groups",)),
    Case(f"{MV}:bad_padding", ("key-padding",)),
    Case(f"{MV}:bad_bias", ("score-bias",)),
    # ------------------------------------------------------------ plain functions, softmax claimed
    Case(f"{UV}:crash_at_one_token", ("accepts-inputs",), claims=SOFTMAX, probe=False, shrink=FEW),
    Case(
        f"{UV}:batch_keys_softmax", ("batch-independence",), claims=SOFTMAX, probe=False, shrink=FEW
    ),
    Case(
        f"{UV}:windowed_softmax",
        ("permutation-equivariance",),
        claims=SOFTMAX,
        probe=False,
        shrink=FEW,
    ),
    Case(
        f"{UV}:value_clipped_softmax", ("linearity-in-v",), claims=SOFTMAX, probe=False, shrink=FEW
    ),
    Case(f"{UV}:autotuned_softmax", ("determinism",), claims=SOFTMAX, probe=False, shrink=FEW),
    Case(
        f"{UV}:scale_over_d_softmax",
        ("claimed-scale",),
        claims=SOFTMAX,
        probe=False,
        shrink=FEW,
        examples=2,
    ),
    Case(
        f"{DV}:row_eps_softmax",
        ("softmax-shift-invariance",),
        claims=SOFTMAX,
        probe=False,
        shrink=FEW,
    ),
    # ------------------------------------------------------------ decode paths and packing (D20)
    Case(
        f"{DV}:softmax_forward",
        ("decode-steps", "decode-multi-token"),
        claims={**SOFTMAX, "decode_spec": f"{DV}:kv_cache_off_by_one"},
        probe=False,
        shrink=FEW,
        examples=2,
    ),
    Case(
        f"{DV}:softmax_forward",
        ("decode-resume",),
        claims={**SOFTMAX, "decode_spec": f"{DV}:kv_cache_resume_restarts"},
        probe=False,
        shrink=FEW,
        examples=2,
    ),
    Case(
        f"{DV}:softmax_forward",
        ("decode-batch-rows", "decode-unused-slots"),
        claims={**SOFTMAX, "decode_spec": f"{DV}:kv_cache_batch_position"},
        probe=False,
        shrink=FEW,
        examples=4,
    ),
    Case(
        f"{DV}:softmax_forward",
        ("decode-capacity",),
        claims={**SOFTMAX, "decode_spec": f"{DV}:static_cache_zero_slots"},
        probe=False,
        shrink=FEW,
        examples=2,
    ),
    Case(
        f"{DV}:window_forward",
        ("decode-window",),
        claims={**SOFTMAX, "window": (2, 0), "decode_spec": f"{DV}:window_cache_tq1"},
        probe=False,
        shrink=FEW,
        examples=2,
    ),
    Case(
        f"{DV}:softmax_forward",
        ("packed-documents",),
        claims={**SOFTMAX, "packed_spec": f"{DV}:packed_ignores_cu"},
        probe=False,
        shrink=FEW,
        examples=2,
    ),
    Case(
        f"{DV}:softmax_forward",
        ("packed-isolation",),
        claims={**SOFTMAX, "packed_spec": f"{DV}:packed_grad_corrupt"},
        probe=False,
        shrink=FEW,
        examples=4,
    ),
    # ------------------------------------------------------------ FlexAttention claims (D16)
    Case(
        f"{XV}:eager_softcap_wrong_sign",
        ("flex-score-mod",),
        "float32",
        {**SOFTMAX, "score_mod_spec": f"{XV}:softcap", "score_mod_roundings": 7},
        probe=False,
        shrink=FEW,
        examples=3,
    ),
    Case(
        f"{XV}:flex_document",
        ("flex-block-mask",),
        "float32",
        {
            **SOFTMAX,
            "mask_mod_spec": f"{XV}:document",
            "block_mask_spec": f"{XV}:document_block_mask_wrong_size",
        },
        probe=False,
        shrink=FEW,
        examples=3,
    ),
)
#: the device-agreement twin: it computes in float16 on CUDA only (run where there is one)
CUDA_CASE = Case(f"{UV}:cuda_half_softmax", ("device-agreement",), claims={**SOFTMAX,
                 "devices": ("cpu", "cuda")}, probe=False, shrink=FEW)  # fmt: skip
#: variant-facing properties reproduced by another test here (dtype-agreement: the online
#: softmax that forgets to rescale, ``test_no_rescale_gets_no_precision_hint_and_no_hint_...``)
ELSEWHERE = ("dtype-agreement",)
#: properties whose reproducer calls the path that failed (not forward) or another object
#: (the feature map, the BlockMask, the score_mod's reference): its own comparison with the
#: reference must show the failure, not only the re-check
OWN_CALL = (
    "state-step", "state-split-resume", "decode-steps", "decode-resume", "decode-multi-token",
    "decode-batch-rows", "decode-capacity", "decode-unused-slots", "decode-window",
    "packed-documents", "packed-isolation", "kernel-identity", "flex-block-mask",
    "flex-score-mod",
)  # fmt: skip
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


def prints_the_reference(text: str) -> bool:
    """A reference printed, and one that exists (not 'reference = None')."""
    return "reference = " in text and "reference = None" not in text


def check(target: str, dtype: str, claims: dict, select, max_examples: int | None = EXAMPLES,
          probe: bool | None = None):  # fmt: skip
    from verify.engine.check import check as run

    return run(target, dtypes=(dtype,), select=list(select), max_examples=max_examples,
               isolate=False, probe=probe, **claims)  # fmt: skip


def assert_reproduced(case: Case) -> None:
    """Each property of ``case`` fails on its twin, and its reproducer, run in a fresh
    namespace, prints the reference and the failure, and its re-check of the property on the
    rebuilt example fails (for :data:`OWN_CALL` the reproducer's own comparison of the
    failing path's output with the reference shows it too)."""
    from verify.properties.support import base

    with pytest.MonkeyPatch.context() as patch:
        if case.shrink is not None:
            patch.setattr(base, "SHRINK_DRAWS", case.shrink)
        result = check(case.target, case.dtype, case.claims, case.props, case.examples,
                       case.probe)  # fmt: skip
    failed = {r.property_id: r for r in result.failed}
    assert set(case.props) <= set(failed), (case.target, sorted(failed), [
        (r.property_id, r.status, r.reason[:200]) for r in result.results])  # fmt: skip
    for pid in case.props:
        r = failed[pid]
        assert f"get({pid!r})" in r.snippet, r.snippet
        text = run_snippet(r.snippet)
        assert prints_the_reference(text), (pid, r.snippet[-3000:], text[-2000:])
        assert shows_the_failure(text), (pid, text[-3000:])
        # the reproducer's own lines, then the re-check's (each line begins with the id)
        own = re.split(rf"^{re.escape(pid)}: ", text, maxsplit=1, flags=re.M)[0]
        rechecked = text[len(own) :]
        assert "> bound" in rechecked or f"{pid}: FAILS: " in rechecked, (pid, text[-3000:])
        if pid in OWN_CALL:
            assert any(int(n) > 0 for n in OVER.findall(own)), (pid, r.snippet, text[-3000:])


@pytest.mark.parametrize("case", CASES, ids=str)
def test_each_failure_reproducer_prints_the_reference_and_the_exceeded_bound(case):
    assert_reproduced(case)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="device-agreement needs a CUDA device")
def test_device_agreement_reproducer_calls_on_cuda():
    assert_reproduced(CUDA_CASE)


#: statements of the theory of a kernel family (D4, D6-D9: truncation, norms, peaks,
#: injectivity, rank, FAVOR+ statistics; ``tests/test_grouping_catalogue.py``), not of a
#: user's code path, and the project's own API contract (causal-mismatch-rejected applies to
#: ``verify.builtins`` and ``verify.attention`` only)
NOT_VARIANT_FACING = FAMILY_STATEMENTS | {"causal-mismatch-rejected"}


def test_every_variant_facing_property_is_reproduced():
    from verify.properties import catalogue

    covered = {p for c in (*CASES, CUDA_CASE) for p in c.props} | set(ELSEWHERE)
    ids = [p.id for p in catalogue()]
    assert set(NOT_VARIANT_FACING) <= set(ids)
    missing = [p for p in ids if p not in covered and p not in NOT_VARIANT_FACING]
    assert not missing, missing


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
