"""The zoo: released, pip-installable, pure-torch attention implementations checked the way a user
checks them -- a plain adapter ``f(q, k, v, *, causal)`` in ``tests/zoo/adapters_*.py`` and the
claims a user would pass on the command line.

Each :class:`Entry` pins one released version (installed on its own with ``pip install --no-deps
--target DIR pkg==X.Y.Z``, outside the constraints file and the project environment) and states
what the theory says about it: the verdict (exit code) and, for a defective release, the property
ids that must be reported failing; for the release that fixed a defect, the property ids that
must pass (and no property may fail).

The README's "Zoo" table is written from :data:`ENTRIES`; ``tests/zoo/test_zoo.py`` checks it.
Every adapter, defect and fix below was read in the released source of that version (``pip
download --no-deps``) and in the project's git history.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Entry:
    id: str
    package: str  #: the pip name
    version: str
    module: str  #: the top-level import name the install must provide
    target: str  #: the adapter, ``tests.zoo.adapters_x:fn``
    args: tuple[str, ...]  #: claims (and run options) a user passes
    what: str
    status: str  #: "defect", "fixed", "unfixed defect", "regression", "defect (unreported)"
    detail: str  #: the defect, or what the fix changed (read in the source)
    citation: str
    expected_exit: int  #: the theory's verdict: 0 pass, 1 a property fails
    deciding: tuple[str, ...] = ()  #: property ids that must fail (expected_exit == 1)
    must_pass: tuple[str, ...] = ()  #: property ids that must pass (the fixed defect's)
    notes: tuple[str, ...] = field(default_factory=tuple)


PERFORMER = "performer-pytorch"
LOCAL = "local-attention"
MEA = "memory-efficient-attention-pytorch"
FLA = "fla-core"

_PERF_GH = "https://github.com/lucidrains/performer-pytorch"
_LOCAL_GH = "https://github.com/lucidrains/local-attention"
_MEA_GH = "https://github.com/lucidrains/memory-efficient-attention-pytorch"
_FLA_GH = "https://github.com/fla-org/flash-linear-attention"

ENTRIES: tuple[Entry, ...] = (
    # ------------------------------------------------------------ performer-pytorch FastAttention
    Entry(
        id="performer-1.1.0-noncausal",
        package=PERFORMER,
        version="1.1.0",
        module="performer_pytorch",
        target="tests.zoo.adapters_performer:fast_attention",
        args=("--kernel", "unknown", "--causal", "no"),
        what="FastAttention (FAVOR+), non-causal, 16 features, fixed seed",
        status="defect",
        detail=(
            "softmax_kernel stabilizes the key features with torch.max(data_dash), a max over the "
            "whole tensor (batch, heads, tokens, features); the +1e-4 feature eps does not scale "
            "with it, so one batch element or head moves the others"
        ),
        citation=f"{_PERF_GH}/commit/08525a43ec236a2a046e6bf1d2ce948367faad34 (released in 1.1.1)",
        expected_exit=1,
        deciding=("batch-independence", "head-independence"),
    ),
    Entry(
        id="performer-1.1.1-noncausal",
        package=PERFORMER,
        version="1.1.1",
        module="performer_pytorch",
        target="tests.zoo.adapters_performer:fast_attention",
        args=("--kernel", "unknown", "--causal", "no"),
        what="FastAttention (FAVOR+), non-causal, 16 features, fixed seed",
        status="fixed",
        detail="the key stabilizer is torch.amax over (tokens, features) of each (batch, head)",
        citation=f"{_PERF_GH}/commit/08525a43ec236a2a046e6bf1d2ce948367faad34",
        expected_exit=0,
        must_pass=("batch-independence", "head-independence"),
    ),
    Entry(
        id="performer-1.1.4-noncausal",
        package=PERFORMER,
        version="1.1.4",
        module="performer_pytorch",
        target="tests.zoo.adapters_performer:fast_attention",
        args=("--kernel", "unknown", "--causal", "no"),
        what="FastAttention (FAVOR+), non-causal, 16 features, fixed seed (latest release)",
        status="regression",
        detail=(
            "1.1.4 detaches the stabilizing amax; with the +1e-4 feature eps the output still "
            "depends on it, so autograd's gradient is no longer the derivative of the computed "
            "output (1.1.1, identical otherwise, passes gradcheck)"
        ),
        citation=f"{_PERF_GH}/commit/fc8b78441b1e27eb5d9b01fc738a8772cee07127",
        expected_exit=1,
        deciding=("gradcheck",),
        notes=("a judgement call: the detach is deliberate; the mismatch is O(feature eps)",),
    ),
    Entry(
        id="performer-1.1.4-causal",
        package=PERFORMER,
        version="1.1.4",
        module="performer_pytorch",
        target="tests.zoo.adapters_performer:fast_attention",
        args=("--kernel", "unknown", "--causal", "yes"),
        what="FastAttention (FAVOR+), causal (CPU: causal_linear_attention_noncuda), latest",
        status="unfixed defect",
        detail=(
            "the key stabilizer is a max over all tokens, later ones included; with the +1e-4 "
            "feature eps and the +1e-6 denominator eps later tokens move earlier outputs"
        ),
        citation=f"{_PERF_GH}/issues/82 (open)",
        expected_exit=1,
        deciding=("causality",),
    ),
    # ------------------------------------------------------------ local-attention LocalAttention
    Entry(
        id="local-attention-1.2.1-causal-exact",
        package=LOCAL,
        version="1.2.1",
        module="local_attention",
        target="tests.zoo.adapters_local:local_attention_exact",
        args=("--kernel", "unknown", "--causal", "yes"),
        what="LocalAttention(window_size=2, causal, autopad, exact_windowsize=True)",
        status="defect",
        detail=(
            "exact_windowsize combines the causal mask and the window mask with & instead of |: "
            "later keys of the same window (and the autopad zeros) are attended"
        ),
        citation=f"{_LOCAL_GH}/issues/5, fixed by {_LOCAL_GH}/commit/"
        "270adde5e1c68305dcbece5883d17d5b59c9f42f (1.2.2)",
        expected_exit=1,
        deciding=("causality",),
    ),
    Entry(
        id="local-attention-1.2.2-causal-exact",
        package=LOCAL,
        version="1.2.2",
        module="local_attention",
        target="tests.zoo.adapters_local:local_attention_exact",
        args=("--kernel", "unknown", "--causal", "yes"),
        what="LocalAttention(window_size=2, causal, autopad, exact_windowsize=True)",
        status="fixed",
        detail="the masks are combined with |",
        citation=f"{_LOCAL_GH}/issues/5",
        expected_exit=0,
        must_pass=("causality", "prefix-invariance"),
    ),
    Entry(
        id="local-attention-1.11.2-noncausal",
        package=LOCAL,
        version="1.11.2",
        module="local_attention",
        target="tests.zoo.adapters_local:local_attention",
        args=("--kernel", "unknown", "--causal", "no", "--self-attention-only"),
        what="LocalAttention(window_size=2, autopad=True), non-causal (latest release)",
        status="defect (unreported)",
        detail=(
            "autopad pads k and v with zeros to a multiple of the window; the padding mask only "
            "covers look_around's -1 positions, so non-causal queries attend the zero keys "
            "(T = S = 1, q = k = 0, v = 1 gives 0.5); causal mode hides them"
        ),
        citation=(
            f"no published issue found; {_LOCAL_GH}/blob/1.11.2/local_attention/"
            "local_attention.py (pad_to_multiple, pad_mask)"
        ),
        expected_exit=1,
        deciding=("single-key", "convex-combination"),
        notes=(
            "without --self-attention-only the probes do not find the T == S restriction: "
            "their non-causal cross probe tries (T, S) = (1, 2), (2, 1) only, which autopad "
            "to one window",
        ),
    ),
    # -------------------------------------------- memory-efficient-attention-pytorch (chunked)
    Entry(
        id="mea-0.0.12-memory-efficient",
        package=MEA,
        version="0.0.12",
        module="memory_efficient_attention_pytorch",
        target="tests.zoo.adapters_mea:memory_efficient_attention",
        args=("--kernel", "softmax", "--alignment", "bottom-right", "--dtype", "float32"),
        what="memory_efficient_attention (Rabe & Staats chunked softmax), default buckets",
        status="defect",
        detail=(
            "each chunk subtracts its row max before the causal mask: a large later score "
            "underflows exp of the visible ones (causal leak)"
        ),
        citation=f"{_MEA_GH}/commit/9ecb55a2c9926d7aea1dfbbbe8ea18d49df7a29a (released in 0.0.14)",
        expected_exit=1,
        deciding=("causality",),
        notes=(
            "--dtype float32: the default eps = 1e-8 is added to the max-stabilized row sum, a "
            "1e-8 relative error float64 checks see and the claims cannot state",
        ),
    ),
    Entry(
        id="mea-0.0.14-memory-efficient",
        package=MEA,
        version="0.0.14",
        module="memory_efficient_attention_pytorch",
        target="tests.zoo.adapters_mea:memory_efficient_attention",
        args=("--kernel", "softmax", "--alignment", "bottom-right", "--dtype", "float32"),
        what="memory_efficient_attention (Rabe & Staats chunked softmax), default buckets",
        status="fixed",
        detail="the row max is taken after masking",
        citation=f"{_MEA_GH}/commit/9ecb55a2c9926d7aea1dfbbbe8ea18d49df7a29a",
        expected_exit=0,
        must_pass=("causality", "prefix-invariance"),
    ),
    # -------------------------------------------- memory-efficient-attention-pytorch (flash)
    Entry(
        id="mea-0.0.22-flash",
        package=MEA,
        version="0.0.22",
        module="memory_efficient_attention_pytorch",
        target="tests.zoo.adapters_mea:flash_attention",
        args=("--kernel", "softmax", "--dv-equals-d", "--dtype", "float32"),
        what="FlashAttentionFunction (FlashAttention in plain torch), default buckets",
        status="defect",
        detail=(
            "the forward saves q already scaled and the backward scales it again (wrong "
            "gradients); the running row max is updated from the row sums, so rows whose "
            "scores are all below about -88 give 0/0 = NaN"
        ),
        citation=f"{_MEA_GH}/commit/33fb78afe23a2d8c3bd72748752c2964bee9a4cf (released in 0.0.23)",
        expected_exit=1,
        deciding=("gradients-vs-reference", "accepts-inputs"),
        notes=(
            "float32 only: the buffers are torch.full(..., -finfo(float64).max) in the default "
            "float32, which raises for float64 inputs; d_v must equal d (o = zeros_like(q))",
        ),
    ),
    Entry(
        id="mea-0.0.23-flash",
        package=MEA,
        version="0.0.23",
        module="memory_efficient_attention_pytorch",
        target="tests.zoo.adapters_mea:flash_attention",
        args=("--kernel", "softmax", "--dv-equals-d", "--dtype", "float32"),
        what="FlashAttentionFunction (FlashAttention in plain torch), default buckets",
        status="fixed",
        detail="scale applied once (forward and backward); running max from the row maxes",
        citation=f"{_MEA_GH}/commit/33fb78afe23a2d8c3bd72748752c2964bee9a4cf",
        expected_exit=0,
        must_pass=("gradients-vs-reference", "accepts-inputs", "oracle-agreement"),
    ),
    # ------------------------------------------------------------ fla-core naive references
    Entry(
        id="fla-0.3.2-recurrent-normalize",
        package=FLA,
        version="0.3.2",
        module="fla",
        target="tests.zoo.adapters_fla:recurrent_linear_attn",
        args=(
            "--kernel",
            "linear:identity",
            "--causal",
            "yes",
            "--layout",
            "BTHD",
            "--compute-dtype",
            "float32",
        ),
        what="fla.ops.linear_attn.naive.naive_recurrent_linear_attn(normalize=True)",
        status="defect",
        detail=(
            "normalize_output takes k.cumsum(-2), the heads axis of (B, T, H, K): the "
            "denominator mixes heads and does not accumulate over time"
        ),
        citation=f"{_FLA_GH}/pull/594 (released in 0.4.0)",
        expected_exit=1,
        deciding=("head-independence", "oracle-agreement"),
    ),
    Entry(
        id="fla-0.4.0-recurrent-normalize",
        package=FLA,
        version="0.4.0",
        module="fla",
        target="tests.zoo.adapters_fla:recurrent_linear_attn",
        args=(
            "--kernel",
            "linear:identity",
            "--causal",
            "yes",
            "--layout",
            "BTHD",
            "--compute-dtype",
            "float32",
        ),
        what="fla.ops.linear_attn.naive.naive_recurrent_linear_attn(normalize=True)",
        status="fixed",
        detail="k.cumsum(1): the time axis",
        citation=f"{_FLA_GH}/pull/594",
        expected_exit=0,
        must_pass=("head-independence", "oracle-agreement", "gradients-vs-reference"),
    ),
    Entry(
        id="fla-0.4.0-recurrent-normalize-unclaimed",
        package=FLA,
        version="0.4.0",
        module="fla",
        target="tests.zoo.adapters_fla:recurrent_linear_attn",
        args=("--kernel", "unknown", "--causal", "yes", "--layout", "BTHD"),
        what="the same function checked without a kernel claim (the probes identify it)",
        status="fixed",
        detail="k.cumsum(1): the time axis",
        citation=f"{_FLA_GH}/pull/594",
        expected_exit=0,
        must_pass=("head-independence", "causality"),
    ),
)


def _link(match) -> str:
    url = match.group(0).rstrip(",.")
    parts = url.split("/")  # https://github.com/owner/repo/{commit,issues,pull,blob}/...
    repo, kind, ref = parts[4], parts[5], parts[6]
    label = {"commit": f"{repo}@{ref[:7]}", "blob": f"{repo} {ref} source"}.get(kind)
    return f"[{label or f'{repo}#{ref}'}]({url})" + match.group(0)[len(url) :]


def markdown_table() -> str:
    """The README's zoo table (between ``<!-- zoo:start -->`` and ``<!-- zoo:end -->``)."""
    import re

    rows = [
        "| release | what is checked | claims | status | expected verdict | source |",
        "|---|---|---|---|---|---|",
    ]
    for e in ENTRIES:
        props = ", ".join(f"`{p}`" for p in (e.deciding if e.expected_exit else e.must_pass))
        verdict = f"fail (1): {props}" if e.expected_exit else f"pass (0), {props} pass"
        cite = re.sub(r"https://github\.com/\S+", _link, e.citation)
        rows.append(
            f"| `{e.package}=={e.version}` | {e.what} | `{' '.join(e.args)}` | {e.status} "
            f"| {verdict} | {cite} |"
        )
    return "\n".join(rows) + "\n"
