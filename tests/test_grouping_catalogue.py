"""Every planted defect is one failure group rooted at the property that decides it.

For each faulty twin of the fault catalogue (``tests/faulty_variants.py``), of the structural
claims (``tests/modern_variants.py``), of FlashAttention-2's emulated defects
(``tests/flash_variants.py``), of the low-precision emulations (``tests/lowprec_variants.py``)
and of the user-reported variants (``tests/user_variants.py``), the battery runs once, in
this process, on the properties the defect fails (``select``), and the failures must form
exactly one group (``verify.engine.groups``) whose root is the most specific property that
decides the defect, whose cause lists only what the defect needs (``cause``), and whose hint
(``verify.render.check.look_at``) names the defect's fix (``fix``, words of the hint).

The default run holds one twin of every root property and every user-reported case to this
(``CORE``); the rest of the catalogue runs with ``-m slow``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import pytest


@dataclass(frozen=True)
class Twin:
    """A faulty variant (``module:name``), the claims and dtype it is checked with, the
    properties its check selects, and what its one group must be."""

    target: str
    #: the deciding property; a tuple: the first of them that fails (the same comparison
    #: made by two properties, e.g. long rows in oracle-agreement's long examples and in
    #: dtype-agreement, where the examples drawn decide which sees the defect)
    root: str | tuple[str, ...]
    select: tuple[str, ...]
    cause: tuple[str, ...] = ()
    fix: str = ""
    dtype: str = "float64"
    claims: dict = field(default_factory=dict)
    core: bool = False

    def __str__(self) -> str:
        return self.target.split(":")[1]


FV, MV, FL = "tests.faulty_variants", "tests.modern_variants", "tests.flash_variants"
SOFTMAX = {"kernel": "softmax"}

TWINS = (
    # --------------------------------------------------------------- the fault catalogue
    Twin(
        f"{FV}:fault01_chunk_wrong_state",
        "forms-agree",
        ("forms-agree", "oracle-agreement"),
        (),
        "states[i - 1]",
        core=True,
    ),
    Twin(
        f"{FV}:fault02_padding_enters_state",
        "state-step",
        ("state-step", "state-split-resume"),
        (),
        "padded",
        core=True,
    ),
    Twin(
        f"{FV}:fault03_resume_forgets_denominator",
        "state-split-resume",
        ("state-split-resume",),
        (),
        "normalizer z",
        core=True,
    ),
    Twin(
        f"{FV}:fault04_normalizer_over_heads",
        "head-independence",
        ("head-independence", "oracle-agreement", "edge-cases"),
        ("heads",),
        "cumsum(dim=1)",
        core=True,
    ),
    # a causal-only variant: causal=True is every call's, no need (a draw whose gradcheck
    # example did not shrink dropped it, one that did kept it)
    Twin(
        f"{FV}:fault05_key_sum_detached",
        "gradcheck",
        ("gradcheck", "gradients-vs-reference"),
        (),
        "torch.no_grad()",
    ),
    Twin(
        f"{FV}:fault06_normalizer_multiplied",
        "oracle-agreement",
        ("oracle-agreement", "edge-cases", "weights-vs-reference"),
        (),
        "normalizer",
    ),
    Twin(
        f"{FV}:fault06_query_left_out",
        "oracle-agreement",
        ("oracle-agreement", "weights-vs-reference"),
        (),
        "normalizer",
    ),
    Twin(
        f"{FV}:fault07_alignment_mislabelled",
        "causal-alignment",
        ("causal-alignment", "oracle-agreement"),
        ("causal", "cross"),
        "--alignment",
        core=True,
    ),
    Twin(
        f"{FV}:fault08_masked_rows_nan",
        "masks",
        ("masks", "masked-key-gradients", "empty-row-gradients"),
        ("mask",),
        "NaN",
        core=True,
    ),
    Twin(
        f"{FV}:fault08_sentinel_leak",
        "causality",
        ("causality", "masks", "masked-key-gradients"),
        ("causal",),
        "finite sentinel",
    ),
    Twin(
        f"{FV}:fault09_causal_ignored_short_path",
        "causality",
        ("causality", "prefix-invariance", "edge-cases"),
        ("causal",),
        "every code path",
        core=True,
    ),
    Twin(
        f"{FV}:fault10_elementwise_square_map",
        "kernel-identity",
        ("kernel-identity", "oracle-agreement", "causal-alignment"),
        (),
        "x_i x_j",
        core=True,
    ),
    Twin(
        f"{FV}:fault11_fp16_normalizer",
        "oracle-agreement",
        ("oracle-agreement", "single-key"),
        (),
        "normalizer",
        dtype="float16",
    ),
    Twin(
        f"{FV}:fault12_single_key_dq",
        "gradcheck",
        ("gradcheck", "gradients-vs-reference", "single-key-gradients"),
        (),
        "delta",
        core=True,
    ),
    Twin(
        f"{FV}:fault13_p_truncated",
        "rounding-bias",
        ("rounding-bias", "oracle-agreement"),
        (),
        "round to nearest",
        dtype="bfloat16",
        core=True,
    ),
    # --------------------------------------------------------------- structural claims
    Twin(
        f"{MV}:bad_window",
        "window-extent",
        ("window-extent", "oracle-agreement", "causal-alignment"),
        (),
        "too wide",
        core=True,
    ),
    Twin(
        f"{MV}:bad_gqa",
        "head-groups",
        ("head-groups", "oracle-agreement"),
        (),
        "repeat_interleave",
    ),
    Twin(
        f"{MV}:bad_softcap",
        "causality",
        ("causality", "oracle-agreement"),
        ("causal",),
        "cap before masking",
    ),
    Twin(
        f"{MV}:bad_alibi_sign",
        "oracle-agreement",
        ("oracle-agreement", "causal-alignment"),
        (),
        "ALiBi",
    ),
    Twin(f"{MV}:bad_alibi_order", "oracle-agreement", ("oracle-agreement",), (), "head order"),
    Twin(
        f"{MV}:bad_sigmoid",
        "oracle-agreement",
        ("oracle-agreement", "edge-cases"),
        (),
        "sigmoid bias",
    ),
    Twin(
        f"{MV}:bad_padding",
        "key-padding",
        ("key-padding", "oracle-agreement"),
        (),
        "True keeps",
    ),
    Twin(f"{MV}:bad_decay", "forms-agree", ("forms-agree",), (), "decay"),
    Twin(f"{MV}:bad_hedgehog", "oracle-agreement", ("oracle-agreement",), (), "feature map"),
    Twin(f"{MV}:bad_cosine", "oracle-agreement", ("oracle-agreement",), (), "QK-norm"),
    Twin(
        f"{MV}:bad_bias",
        "score-bias",
        ("score-bias", "oracle-agreement"),
        (),
        "c q k^T + bias",
        core=True,
    ),
    # --------------------------------------------------------------- FlashAttention-2's defects
    Twin(
        f"{FL}:bad_flash_last_block",
        "oracle-agreement",
        ("oracle-agreement", "edge-cases"),
        (),
        "last block",
        dtype="float32",
    ),
    Twin(
        f"{FL}:bad_flash_softcap",
        "oracle-agreement",
        ("oracle-agreement", "causal-alignment"),
        (),
        "softcap",
        dtype="float32",
    ),
    Twin(
        f"{FL}:bad_flash_alibi",
        "oracle-agreement",
        ("oracle-agreement",),
        (),
        "ALiBi",
        dtype="float32",
    ),
    Twin(
        f"{FL}:bad_flash_split",
        "oracle-agreement",
        ("oracle-agreement",),
        (),
        "log-sum-exp",
        dtype="float32",
    ),
    Twin(
        f"{FL}:bad_flash_window",
        "window-extent",
        ("window-extent", "oracle-agreement"),
        (),
        "too wide",
        dtype="float32",
    ),
    Twin(
        f"{FL}:bad_flash_gqa",
        "head-groups",
        ("head-groups", "oracle-agreement"),
        (),
        "h // (H / G)",
        dtype="float32",
    ),
    # an online softmax that forgets to rescale: past one block of 64 keys only (oracle-
    # agreement's long examples), not one group per example's sizes
    Twin(
        f"{FL}:bad_flash_no_rescale",
        ("oracle-agreement", "dtype-agreement"),
        ("oracle-agreement", "dtype-agreement"),
        (),
        "rescal",
        dtype="bfloat16",
    ),
    # --------------------------------------------------------------- low precision
    Twin(
        "tests.lowprec_variants:fused_truncated",
        "rounding-bias",
        ("rounding-bias", "oracle-agreement"),
        (),
        "round to nearest",
        dtype="bfloat16",
        claims=SOFTMAX,
    ),
    # --------------------------------------------------------------- reported by users
    # weights computed in float32 in a float64 call, declared to compute in float64 (the probes
    # find the float32 weights and would judge it on the float32 bound: it passes undeclared):
    # the forward decides (the hint names the float32 step), gradcheck's finite differences of
    # it are explained, not a root
    Twin(
        "tests.user_variants:weights_float32",
        "oracle-agreement",
        ("gradcheck", "oracle-agreement"),
        (),
        "computed in float32",
        claims={**SOFTMAX, "compute_dtype": "float64"},
        core=True,
    ),
    # a wrong softcap constant in bf16: not rooted at causal-alignment (it fails on
    # non-causal inputs too), and no T != S in its cause
    Twin(
        "tests.user_variants:softcap_30",
        "oracle-agreement",
        ("oracle-agreement", "causal-alignment"),
        (),
        "C = 20",
        dtype="bfloat16",
        claims={**SOFTMAX, "softcap": 20.0},
        core=True,
    ),
)
CORE = [t for t in TWINS if t.core]
REST = [t for t in TWINS if not t.core]
#: examples per property: enough for each selected defect to show (the twins fail early)
EXAMPLES = 10


def check_twin(twin: Twin):
    """The battery on ``twin`` (its selected properties, in this process) and its groups."""
    from verify.engine.check import check

    return check(
        twin.target,
        dtypes=(twin.dtype,),
        select=list(twin.select),
        max_examples=EXAMPLES,
        isolate=False,
        **twin.claims,
    )


def assert_one_group(twin: Twin) -> None:
    from verify.render.check import group_look_at

    result = check_twin(twin)
    failing = sorted({r.property_id for r in result.failed})
    groups = result.groups
    shown = [(g.root.property_id, g.cause, g.property_ids) for g in groups]
    roots = (twin.root,) if isinstance(twin.root, str) else twin.root
    root = next((p for p in roots if p in failing), None)
    assert root is not None, (twin.target, failing, [r.reason for r in result.results])
    assert len(groups) == 1, (twin.target, shown)
    (group,) = groups
    assert group.root.property_id == root, (twin.target, shown)
    assert tuple(group.cause) == twin.cause, (twin.target, shown)
    assert sorted(group.property_ids) == failing, (twin.target, shown)
    hint = group_look_at(group, result.variant)
    assert twin.fix in hint, (twin.target, hint)


@pytest.mark.parametrize("twin", CORE, ids=str)
def test_a_planted_defect_is_one_group_rooted_where_it_is_decided(twin):
    assert_one_group(twin)


@pytest.mark.slow
@pytest.mark.parametrize("twin", REST, ids=str)
def test_every_twin_of_the_catalogue_is_one_group(twin):
    assert_one_group(twin)


def test_the_table_covers_every_faulty_twin():
    """Every faulty variant the twin modules list is held to one group here."""
    from tests import faulty_variants, flash_variants, modern_variants

    listed = {t.target for t in TWINS}
    names = [n for ns in faulty_variants.FAULTY.values() for n in ns]
    want = {f"{FV}:{n}" for n in names}
    want |= {f"{MV}:{n}" for n in modern_variants.TWINS}
    want |= {f"{FL}:{n}" for n in flash_variants.TWINS}
    assert want <= listed, sorted(want - listed)
    for t in TWINS:  # the expected root is the twin module's deciding property, where it says
        mod, name = t.target.split(":")
        deciding = getattr(importlib.import_module(mod), "TWINS", {}).get(name)
        if isinstance(deciding, tuple):
            roots = (t.root,) if isinstance(t.root, str) else t.root
            assert deciding[1] == roots[0], (t.target, deciding)


# ----------------------------------------------------------------------------- the rule itself


def _failure(pid: str, reason: str = "observed 1 > bound 0", kind: str = "derived", **features):
    from verify.spec.results import PropertyResult

    shape = {"B": 1, "H": 1, "T": 2, "S": 2, "d": 1, "d_v": 1, "causal": False, "mask": False}
    r = PropertyResult(pid, "D10", "s", "fail", "float64", "cpu", reason=reason, bound_kind=kind)
    r.features, r.counterexample = {**shape, **features}, "Example()"
    return r


def test_needs_are_read_from_a_minimal_counterexample_only():
    from verify.engine.groups import needs

    stopped = "observed 2 > bound 1 [shrinking stopped after 25 candidates]"
    assert needs(_failure("oracle-agreement", T=1, S=2)) == ()  # T != S needs causal=True
    assert needs(_failure("oracle-agreement", causal=True, T=1, S=2)) == ("causal", "cross")
    assert needs(_failure("oracle-agreement", B=2, H=2)) == ()  # a slice fails alone
    assert needs(_failure("head-independence", H=2)) == ("heads",)
    assert needs(_failure("dtype-agreement", stopped, causal=True, H=2)) == ()
    assert needs(_failure("oracle-agreement", "on a long example: x", causal=True)) == ()
    # a flag every call has (a causal-only variant) tells nothing apart
    assert needs(_failure("oracle-agreement", causal=True, T=1, S=2), ("causal",)) == ("cross",)


def test_a_wrong_constant_is_not_rooted_at_the_causal_alignment():
    """causal-alignment (causal T != S against the oracle) and oracle-agreement on non-causal
    inputs: one group, rooted at oracle-agreement, no cause."""
    from verify.engine.groups import group_failures

    runs = [_failure("causal-alignment", T=1, S=7), _failure("oracle-agreement", T=1, S=2)]
    (g,) = group_failures(runs, ["oracle-agreement", "causal-alignment"])
    assert g.root.property_id == "oracle-agreement" and g.cause == ()
    assert g.property_ids == ["oracle-agreement", "causal-alignment"]


def test_a_mask_leak_and_a_wrong_scale_stay_two_groups():
    """The rule still separates two defects: a causal leak (causality, and oracle-agreement
    on causal inputs) and a wrong constant (claimed-scale on non-causal inputs)."""
    from verify.engine.groups import group_failures

    runs = [
        _failure("causality"),
        _failure("oracle-agreement", causal=True),
        _failure("claimed-scale", T=1, S=3),
    ]
    groups = group_failures(runs)
    assert [(g.root.property_id, g.cause) for g in groups] == [
        ("causality", ("causal",)),
        ("claimed-scale", ()),
    ]


def test_a_one_sided_rounding_roots_before_the_max_error():
    from verify.engine.groups import group_failures

    runs = [_failure("oracle-agreement"), _failure("rounding-bias", kind="statistical", H=512)]
    (g,) = group_failures(runs, ["oracle-agreement", "rounding-bias"])
    assert g.root.property_id == "rounding-bias"
    runs[1] = _failure("rounding-bias", kind="derived", H=512)  # a head past its bound
    (g,) = group_failures(runs, ["oracle-agreement", "rounding-bias"])
    assert g.root.property_id == "oracle-agreement"


#: properties whose failures describe the variant's own arithmetic or paths (every other id of
#: the catalogue is a statement about a kernel family: its failure names the family's claim)
FAMILY_STATEMENTS = {
    "odd-order-counterexample", "taylor-not-shift-invariant", "truncation-within-d4",
    "convergence-in-n", "norm-identities", "softmax-peak-bounds", "softmax-peak-monotone",
    "power-attention-peak", "linear-peak-bound", "softmax-injectivity",
    "homogeneous-map-collision", "linear-attention-rank", "exp-kernel-full-rank",
    "favor-kernel-unbiased", "favor-orthogonal-variance",
}  # fmt: skip


def test_every_variant_facing_root_has_a_fix_to_look_at():
    """A group rooted at a decode, packing, flex or state property names that path's fix
    (a root with no hint printed no 'look at' line)."""
    from verify.properties import catalogue
    from verify.render.check import LOOK_AT, look_at

    missing = [p.id for p in catalogue() if p.id not in FAMILY_STATEMENTS and not look_at(p.id)]
    assert not missing, missing
    assert "append" in LOOK_AT["decode-steps"] and "cache_seqlens" in LOOK_AT["decode-batch-rows"]
    assert (
        "cu_seqlens" in LOOK_AT["packed-documents"] and "BLOCK_SIZE" in LOOK_AT["flex-block-mask"]
    )


def test_a_claimed_softcap_puts_cap_before_masking_first_for_causality():
    from types import SimpleNamespace

    from verify.render.check import look_at

    capped = look_at("causality", SimpleNamespace(softcap=50.0))
    assert capped.startswith("the softcap (C = 50) applied after the mask")
    assert look_at("causality", SimpleNamespace(softcap=None)).startswith("the causal mask")


def test_the_scale_hint_names_claimed_scale_only_where_it_ran():
    """oracle-agreement's hint sends the reader to claimed-scale's reason only when that check
    ran; else it says it did not and names the claim instead."""
    from verify import builtins
    from verify.render.check import look_at

    softmax = builtins.get("softmax")
    ran = look_at("oracle-agreement", softmax, ran=frozenset({"oracle-agreement", "claimed-scale"}))
    assert "the reason of claimed-scale names the one that fits" in ran, ran
    not_ran = look_at("oracle-agreement", softmax, ran=frozenset({"oracle-agreement"}))
    assert "claimed-scale did not run in this check; --scale VALUE" in not_ran, not_ran
    assert "the reason of claimed-scale" not in not_ran
