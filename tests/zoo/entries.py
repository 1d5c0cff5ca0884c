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

#: what entries checking the same function share (package, adapter, the claims a user passes)
_PERFORMER = dict(
    package=PERFORMER,
    module="performer_pytorch",
    target="tests.zoo.adapters_performer:fast_attention",
)
_PERFORMER_NONCAUSAL = dict(
    _PERFORMER,
    args=("--kernel", "unknown", "--causal", "no"),
    what="FastAttention (FAVOR+), non-causal, 16 features, fixed seed",
)
_LOCAL = dict(package=LOCAL, module="local_attention")
_LOCAL_EXACT = dict(
    _LOCAL,
    target="tests.zoo.adapters_local:local_attention_exact",
    args=("--kernel", "unknown", "--causal", "yes"),
    what="LocalAttention(window_size=2, causal, autopad, exact_windowsize=True)",
)
_MEA_CHUNKED = dict(
    package=MEA,
    module="memory_efficient_attention_pytorch",
    target="tests.zoo.adapters_mea:memory_efficient_attention",
    args=("--kernel", "softmax", "--alignment", "bottom-right", "--dtype", "float32"),
    what="memory_efficient_attention (Rabe & Staats chunked softmax), default buckets",
)
_MEA_FLASH = dict(
    package=MEA,
    module="memory_efficient_attention_pytorch",
    target="tests.zoo.adapters_mea:flash_attention",
    args=("--kernel", "softmax", "--dv-equals-d", "--dtype", "float32"),
    what="FlashAttentionFunction (FlashAttention in plain torch), default buckets",
)
_FLA = dict(
    package=FLA,
    module="fla",
    target="tests.zoo.adapters_fla:recurrent_linear_attn",
)
_FLA_CLAIMED = dict(
    _FLA,
    args=("--kernel", "linear:identity", "--causal", "yes", "--layout", "BTHD"),
    what="fla.ops.linear_attn.naive.naive_recurrent_linear_attn(normalize=True)",
)
_FLA_CLAIMED["args"] += ("--compute-dtype", "float32")  # it casts to float32


def _defect(id_, group, version, detail, citation, deciding, status="defect", **kw) -> Entry:
    """A release with a defect: the verdict fails, on the properties in ``deciding``."""
    fields = dict(group, **kw)
    return Entry(
        id=id_,
        version=version,
        status=status,
        detail=detail,
        citation=citation,
        expected_exit=1,
        deciding=deciding,
        **fields,
    )


def _fixed(id_, group, version, detail, citation, must_pass, **kw) -> Entry:
    """The release that fixed a defect: it must pass, its fixed defect's properties included."""
    fields = dict(group, **kw)
    return Entry(
        id=id_,
        version=version,
        status="fixed",
        detail=detail,
        citation=citation,
        expected_exit=0,
        must_pass=must_pass,
        **fields,
    )


ENTRIES: tuple[Entry, ...] = (
    # ------------------------------------------------------------ performer-pytorch FastAttention
    _defect(
        "performer-1.1.0-noncausal",
        _PERFORMER_NONCAUSAL,
        "1.1.0",
        "softmax_kernel stabilizes the key features with torch.max(data_dash), a max over the "
        "whole tensor (batch, heads, tokens, features); the +1e-4 feature eps does not scale "
        "with it, so one batch element or head moves the others",
        f"{_PERF_GH}/commit/08525a43ec236a2a046e6bf1d2ce948367faad34 (released in 1.1.1)",
        ("batch-independence", "head-independence"),
    ),
    _fixed(
        "performer-1.1.1-noncausal",
        _PERFORMER_NONCAUSAL,
        "1.1.1",
        "the key stabilizer is torch.amax over (tokens, features) of each (batch, head)",
        f"{_PERF_GH}/commit/08525a43ec236a2a046e6bf1d2ce948367faad34",
        ("batch-independence", "head-independence"),
    ),
    _defect(
        "performer-1.1.4-noncausal",
        _PERFORMER_NONCAUSAL,
        "1.1.4",
        "1.1.4 detaches the stabilizing amax; with the +1e-4 feature eps the output still "
        "depends on it, so autograd's gradient is no longer the derivative of the computed "
        "output (1.1.1, identical otherwise, passes gradcheck)",
        f"{_PERF_GH}/commit/fc8b78441b1e27eb5d9b01fc738a8772cee07127",
        ("gradcheck",),
        notes=("a judgement call: the detach is deliberate; the mismatch is O(feature eps)",),
        status="regression",
    ),
    _defect(
        "performer-1.1.4-causal",
        _PERFORMER,
        "1.1.4",
        "the key stabilizer is a max over all tokens, later ones included; with the +1e-4 "
        "feature eps and the +1e-6 denominator eps later tokens move earlier outputs",
        f"{_PERF_GH}/issues/82 (open)",
        ("causality",),
        args=("--kernel", "unknown", "--causal", "yes"),
        what="FastAttention (FAVOR+), causal (on CPU causal_linear_attention_noncuda)",
        status="unfixed defect",
    ),
    # ------------------------------------------------------------ local-attention LocalAttention
    _defect(
        "local-attention-1.2.1-causal-exact",
        _LOCAL_EXACT,
        "1.2.1",
        "exact_windowsize combines the causal mask and the window mask with & instead of |: "
        "later keys of the same window (and the autopad zeros) are attended",
        f"{_LOCAL_GH}/issues/5, fixed by {_LOCAL_GH}/commit/"
        "270adde5e1c68305dcbece5883d17d5b59c9f42f (1.2.2)",
        ("causality",),
    ),
    _fixed(
        "local-attention-1.2.2-causal-exact",
        _LOCAL_EXACT,
        "1.2.2",
        "the masks are combined with |",
        f"{_LOCAL_GH}/issues/5",
        ("causality", "prefix-invariance"),
    ),
    _defect(
        "local-attention-1.11.2-noncausal",
        _LOCAL,
        "1.11.2",
        "autopad pads k and v with zeros to a multiple of the window; the padding mask only "
        "covers look_around's -1 positions, so non-causal queries attend the zero keys "
        "(T = S = 1, q = k = 0, v = 1 gives 0.5); causal mode hides them",
        f"no published issue found; {_LOCAL_GH}/blob/1.11.2/local_attention/"
        "local_attention.py (pad_to_multiple, pad_mask)",
        ("single-key", "convex-combination"),
        target="tests.zoo.adapters_local:local_attention",
        args=("--kernel", "unknown", "--causal", "no", "--self-attention-only"),
        what="LocalAttention(window_size=2, autopad=True), non-causal (latest release)",
        notes=(
            "without --self-attention-only the probes do not find the T == S restriction: "
            "their non-causal cross probe tries (T, S) = (1, 2), (2, 1) only, which autopad "
            "to one window",
        ),
        status="defect (unreported)",
    ),
    # -------------------------------------------- memory-efficient-attention-pytorch (chunked)
    _defect(
        "mea-0.0.12-memory-efficient",
        _MEA_CHUNKED,
        "0.0.12",
        "each chunk subtracts its row max before the causal mask: a large later score "
        "underflows exp of the visible ones (causal leak)",
        f"{_MEA_GH}/commit/9ecb55a2c9926d7aea1dfbbbe8ea18d49df7a29a (released in 0.0.14)",
        ("causality",),
        notes=(
            "--dtype float32: the default eps = 1e-8 is added to the max-stabilized row sum, a "
            "1e-8 relative error float64 checks see and the claims cannot state",
        ),
    ),
    _fixed(
        "mea-0.0.14-memory-efficient",
        _MEA_CHUNKED,
        "0.0.14",
        "the row max is taken after masking",
        f"{_MEA_GH}/commit/9ecb55a2c9926d7aea1dfbbbe8ea18d49df7a29a",
        ("causality", "prefix-invariance"),
    ),
    # -------------------------------------------- memory-efficient-attention-pytorch (flash)
    _defect(
        "mea-0.0.22-flash",
        _MEA_FLASH,
        "0.0.22",
        "the forward saves q already scaled and the backward scales it again (wrong "
        "gradients); the running row max is updated from the row sums, so rows whose "
        "scores are all below about -88 give 0/0 = NaN",
        f"{_MEA_GH}/commit/33fb78afe23a2d8c3bd72748752c2964bee9a4cf (released in 0.0.23)",
        ("gradients-vs-reference", "accepts-inputs"),
        notes=(
            "float32 only: the buffers are torch.full(..., -finfo(float64).max) in the default "
            "float32, which raises for float64 inputs; d_v must equal d (o = zeros_like(q))",
        ),
    ),
    _fixed(
        "mea-0.0.23-flash",
        _MEA_FLASH,
        "0.0.23",
        "scale applied once (forward and backward); running max from the row maxes",
        f"{_MEA_GH}/commit/33fb78afe23a2d8c3bd72748752c2964bee9a4cf",
        ("gradients-vs-reference", "accepts-inputs", "oracle-agreement"),
    ),
    # ------------------------------------------------------------ fla-core naive references
    _defect(
        "fla-0.3.2-recurrent-normalize",
        _FLA_CLAIMED,
        "0.3.2",
        "normalize_output takes k.cumsum(-2), the heads axis of (B, T, H, K): the "
        "denominator mixes heads and does not accumulate over time",
        f"{_FLA_GH}/pull/594 (released in 0.4.0)",
        ("head-independence", "oracle-agreement"),
    ),
    _fixed(
        "fla-0.4.0-recurrent-normalize",
        _FLA_CLAIMED,
        "0.4.0",
        "k.cumsum(1): the time axis",
        f"{_FLA_GH}/pull/594",
        ("head-independence", "oracle-agreement", "gradients-vs-reference"),
    ),
    _fixed(
        "fla-0.4.0-recurrent-normalize-unclaimed",
        _FLA,
        "0.4.0",
        "k.cumsum(1): the time axis",
        f"{_FLA_GH}/pull/594",
        ("head-independence", "causality"),
        args=("--kernel", "unknown", "--causal", "yes", "--layout", "BTHD"),
        what="the same function checked without a kernel claim (the probes identify it)",
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
