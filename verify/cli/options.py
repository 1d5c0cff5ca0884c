"""Command-line options shared by the commands and the pytest plugin: argument types, and the
claim options (``--kernel``, ``--causal`` ...) mapped to ``AttentionVariant`` claims once.

``attn-theory check`` spells a claim ``--kernel``; the pytest plugin spells it
``--attn-kernel``; both read it through :data:`CLAIM_OPTIONS` and :func:`claims_from`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verify.spec.vocabulary import (
    ALIGNMENTS,
    CAUSAL_SUPPORT,
    DTYPES,
    EMPTY_ROW_CONVENTIONS,
    EPS_MODES,
    LAYOUTS,
)


def _int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


#: argparse types: an integer >= 1 (counts), an integer >= 0 (seeds)
positive_int = _int_at_least(1, "an integer >= 1")
seed = _int_at_least(0, "an integer seed >= 0")


def scale(text: str) -> float | str:
    """argparse type: ``default`` or a number."""
    if text == "default":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'default' or a number, got {text!r}") from None


@dataclass(frozen=True)
class ClaimOption:
    """One claim on the command line: the ``AttentionVariant`` field, the option name (without
    dashes; the plugin prefixes ``attn-``), its type or choices, and its help."""

    field: str
    name: str
    help: str
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    #: a boolean claim: ``--NAME`` sets True, ``--OFF`` sets False
    off: str | None = None
    #: a flag ``--FLAG`` that sets the claim to a constant: (flag name, constant)
    flag: tuple[str, Any] | None = None


def _numbers(what: str, check: Callable[[float], bool], want: str) -> Callable[[str], tuple]:
    """argparse type: comma-separated numbers, each satisfying ``check``."""

    def parse(text: str) -> tuple[float, ...]:
        try:
            values = tuple(float(x) for x in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {what} as comma-separated numbers, got {text!r}"
            ) from None
        bad = [x for x in values if not check(x)]
        if bad:
            raise argparse.ArgumentTypeError(f"expected {what} {want}, got {text!r}")
        return values

    return parse


def window(text: str) -> tuple[int, int]:
    """argparse type of ``--window``: ``LEFT,RIGHT``, ints >= -1 (-1 unbounded), not both -1."""
    parts = text.split(",")
    try:
        left, right = (int(x) for x in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected LEFT,RIGHT (ints >= -1, -1 = unbounded), got {text!r}"
        ) from None
    if min(left, right) < -1 or (left, right) == (-1, -1):
        raise argparse.ArgumentTypeError(
            f"expected LEFT,RIGHT with each >= -1 and not both -1, got {text!r}"
        )
    return left, right


def positive_float(text: str) -> float:
    """argparse type: a positive finite number."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def finite_float(text: str) -> float:
    """argparse type: a finite number."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _precision(text: str) -> str:
    """argparse type of ``--precision``: a valid model spec (its error names the option)."""
    import argparse

    from derivations.precision_models import parse_precision

    try:
        return parse_precision(text).spec
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _arithmetic(text: str) -> str:
    """argparse type of ``--arithmetic``: a preset name (its error names the option)."""
    import argparse

    from derivations.kernel_arithmetic import parse_arithmetic

    try:
        parse_arithmetic(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


CLAIM_OPTIONS = (
    ClaimOption(
        "kernel", "kernel", "claimed kernel: softmax | taylor:N | linear:MAP | sigmoid | unknown"
    ),
    ClaimOption("layout", "layout", "tensor layout", choices=LAYOUTS),
    ClaimOption(
        "causal",
        "causal",
        "which causal values the variant supports (default both)",
        choices=CAUSAL_SUPPORT,
    ),
    ClaimOption(
        "causal_alignment", "alignment", "causal alignment when T != S", choices=ALIGNMENTS
    ),
    ClaimOption("normalized", "normalized", "divides by the kernel sum", off="unnormalized"),
    ClaimOption(
        "scale", "scale", "'default' (1/sqrt(d) for whatever d a check uses) or a number", scale
    ),
    ClaimOption("eps", "eps", "constant in the variant's sum denominator (see --eps-mode)", float),
    ClaimOption(
        "eps_mode",
        "eps-mode",
        "how --eps enters the sum denominator: add, N/(D + eps) (default), or floor, "
        "N/max(D, eps) (a denominator clamped at eps, D.clamp(min=eps))",
        choices=EPS_MODES,
    ),
    # the closed list of input restrictions (found by the probes when not stated)
    ClaimOption(
        "dv_equals_d",
        "dv-equals-d",
        "restriction: the value dimension must equal the head dimension",
        off="dv-free",
    ),
    ClaimOption(
        "length_multiple",
        "length-multiple",
        "restriction: the sequence lengths T and S must be multiples of N (found by the "
        "probes when not stated)",
        positive_int,
    ),
    ClaimOption(
        "min_length",
        "min-length",
        "restriction: the sequence lengths T and S must be at least N",
        positive_int,
    ),
    ClaimOption(
        "head_dim_multiple",
        "head-dim-multiple",
        "restriction: the head dimension d must be a multiple of M",
        positive_int,
    ),
    ClaimOption(
        "self_attention_only",
        "self-attention-only",
        "restriction: the query and key lengths must be equal (T == S)",
        off="cross-attention",
    ),
    ClaimOption(
        "compute_dtype",
        "compute-dtype",
        "the dtype the variant computes in for wider inputs (e.g. float32 for float64 calls: "
        "float64 runs are judged against the float32 bound)",
        choices=DTYPES,
    ),
    ClaimOption(
        "precision",
        "precision",
        "precision model of bf16/fp16 softmax: two-level | fused | eager | online:B | "
        "input-accumulation:recursive|pairwise|blocked:B | envelope (default: found by the "
        "probes, else envelope: the largest of the fused, eager and online:16 bounds)",
        _precision,
    ),
    ClaimOption(
        "arithmetic",
        "arithmetic",
        "the kernel's arithmetic (D17): cpu | flash-attention-2, optionally +split:P (key "
        "splits combined by log-sum-exp); default: the device's (cpu; on CUDA "
        "flash-attention-2)",
        _arithmetic,
    ),
    ClaimOption(
        "empty_rows",
        "empty-rows",
        "what a row with no visible key returns: a convention, reported always and failed only "
        "against this declaration (undeclared: read by the probes in each dtype checked, and "
        "each dtype judged against its own)",
        choices=EMPTY_ROW_CONVENTIONS,
    ),
    # structural claims (D12-D15): what the variant computes beyond its kernel
    ClaimOption(
        "kv_heads",
        "kv-heads",
        "grouped kv heads: forward also takes k, v with G heads (query head h uses kv head "
        "h // (H / G), repeat_interleave); G is the kv-head count the GQA checks use (checked "
        "by head-groups; the other properties call with G = H)",
        positive_int,
    ),
    ClaimOption(
        "window",
        "window",
        "sliding window LEFT,RIGHT (FlashAttention window_size: bottom-right aligned, -1 "
        "unbounded, causal calls use RIGHT = 0; Hugging Face sliding_window=W is W-1,0; checked "
        "by window-extent)",
        window,
    ),
    ClaimOption("softcap", "softcap", "logit softcap C: scores -> C tanh(s / C)", positive_float),
    ClaimOption(
        "alibi_slopes",
        "alibi-slopes",
        "ALiBi slopes per head, comma-separated (bias -m_h |t' - s|)",
        _numbers("ALiBi slopes", lambda x: x > 0, "positive"),
        flag=("alibi", "reference"),
    ),
    ClaimOption(
        "decay",
        "decay",
        "decay gamma per head, comma-separated, in (0, 1] (a causal decayed Taylor or linear RNN)",
        _numbers("decays", lambda x: 0 < x <= 1, "in (0, 1]"),
    ),
    ClaimOption(
        "sigmoid_bias",
        "sigmoid-bias",
        "bias b of --kernel sigmoid (with --unnormalized): sigma(c q.k + b)",
        finite_float,
    ),
    ClaimOption(
        "qk_norm",
        "qk-norm",
        "q and k are L2-normalized before the score: c (q/|q|).(k/|k|), c the --scale "
        "(cosine attention's temperature, QK-norm)",
        off="no-qk-norm",
    ),
    ClaimOption(
        "score_bias",
        "score-bias",
        "forward accepts attn_bias, a float (B|1, H|1, T, S) bias added to the scaled scores "
        "(checked by score-bias)",
        off="no-score-bias",
    ),
    ClaimOption(
        "feature_map_spec",
        "feature-map",
        "pkg.module:phi, the variant's feature map: kernel linear:phi, phi(c q).phi(k) (scale c "
        "default 1), checked against its exact reference",
        str,
    ),
    ClaimOption(
        "key_padding",
        "key-padding",
        "forward accepts key_padding_mask (B, S) bool, True = keep (checked by key-padding, "
        "outputs and gradients)",
        off="no-key-padding",
    ),
    ClaimOption(
        "differentiable",
        "differentiable",
        "forward (and --packed) support autograd (the default); --not-differentiable: code "
        "without a backward, every gradient check skips with that reason",
        off="not-differentiable",
    ),
    # other code paths of the same attention (verify.spec.decode, D20)
    ClaimOption(
        "decode_spec",
        "decode",
        "pkg.mod:obj (an object with prefill(q, k, v, state=None) -> (o, state) and "
        "step(state, q_new, k_new, v_new) -> (o_new, state)) or pkg.mod (a module with both "
        "functions): the decode path, checked against the causal forward",
        str,
    ),
    ClaimOption(
        "packed_spec",
        "packed",
        "pkg.mod:fn, packed(q, k, v, cu_seqlens, *, causal) -> o in FlashAttention's varlen "
        "layout (total, H, d), cu_seqlens (B + 1,) int32: checked against forward per document",
        str,
    ),
    # FlexAttention's functions as claims (verify.spec.flex)
    ClaimOption(
        "score_mod_spec",
        "score-mod",
        "pkg.mod:fn, FlexAttention's score_mod(score, b, h, q_idx, kv_idx) -> score applied to "
        "the scaled scores (softmax): checked against the exact reference of this function "
        "(checked by flex-score-mod; its error bound assumes it monotone in the score)",
        str,
    ),
    ClaimOption(
        "score_mod_roundings",
        "score-mod-roundings",
        "roundings of the score_mod's own arithmetic, u each relative to the larger of the "
        "score and its image (default 2; a library function of n ulps counts 2n)",
        _int_at_least(0, "an integer >= 0"),
    ),
    ClaimOption(
        "mask_mod_spec",
        "mask-mod",
        "pkg.mod:fn, FlexAttention's mask_mod(b, h, q_idx, kv_idx) -> bool (True = visible), "
        "applied with the causal flag's visibility",
        str,
    ),
    ClaimOption(
        "block_mask_spec",
        "block-mask",
        "pkg.mod:fn, block_mask(B, H, T, S) -> the BlockMask the forward uses: checked against "
        "--mask-mod token by token (checked by flex-block-mask)",
        str,
    ),
)


#: the suffix of the attribute under which every spelling of a claim given is recorded
GIVEN = "__given"


class _Given(argparse.Action):
    """Stores a claim as ``store`` (``nargs=None``) or ``store_const`` (``nargs=0``) do, and
    records every spelling given with its value, so that a contradiction is a usage error
    (:func:`contradictions`) instead of the last spelling winning."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        value = self.const if self.nargs == 0 else values
        seen = list(getattr(namespace, self.dest + GIVEN, None) or [])
        seen.append((option_string, value))
        setattr(namespace, self.dest + GIVEN, seen)
        setattr(namespace, self.dest, value)


def add_claim_options(add: Callable[..., Any], prefix: str = "") -> None:
    """Declare every claim option with ``add`` (``ArgumentParser.add_argument`` or pytest's
    ``group.addoption``), named ``--{prefix}{name}``, default None (not claimed); every
    spelling given is recorded (:func:`contradictions`)."""
    for opt in CLAIM_OPTIONS:
        dest = _dest(prefix, opt)
        flag = dict(action=_Given, nargs=0, dest=dest, default=None)
        if opt.flag:
            add(
                f"--{prefix}{opt.flag[0]}",
                const=opt.flag[1],
                help=f"{opt.help}: {opt.flag[1]} (--{prefix}{opt.name})",
                **flag,
            )
        if opt.off:
            add(f"--{prefix}{opt.name}", const=True, help=opt.help, **flag)
            add(f"--{prefix}{opt.off}", const=False, help=f"not: {opt.help}", **flag)
            continue
        kw: dict[str, Any] = {"default": None, "help": opt.help, "dest": dest, "action": _Given}
        kw["metavar"] = metavar(opt)
        if opt.choices:
            kw["choices"] = opt.choices
        if opt.type:
            kw["type"] = opt.type
        add(f"--{prefix}{opt.name}", **kw)


def claims_from(get: Callable[[str], Any], prefix: str = "") -> dict[str, Any]:
    """The claims given (None when absent) from ``get(dest)``: an ``argparse.Namespace``'s
    ``getattr`` or pytest's ``config.getoption``.

    Raises:
        ValueError: contradictory claim options (:func:`contradictions`, each named).
    """
    if bad := contradictions(get, prefix):
        raise ValueError("contradictory options: " + "; ".join(bad))
    return {opt.field: get(_dest(prefix, opt)) for opt in CLAIM_OPTIONS}


def _given(get: Callable[[str], Any], dest: str) -> list[tuple[str, Any]]:
    """Every (spelling, value) given for ``dest`` ([] when none was recorded)."""
    try:
        return list(get(dest + GIVEN) or [])
    except (AttributeError, ValueError):  # argparse: no attribute; pytest: "no option named"
        return []


#: contradictions between claims: (when, why), ``when`` reading the claims given (the value,
#: or None when the option was not given), ``why`` naming the options (``{p}`` the prefix)
CONFLICTS: tuple[tuple[Callable[[dict[str, Any]], bool], str], ...] = (
    (
        lambda c: c["kernel"] == "sigmoid" and c["normalized"] is True,
        "--{p}kernel sigmoid is unnormalized (sigma(c q.k + b) per key, no division): it "
        "contradicts --{p}normalized",
    ),
    (
        lambda c: c["sigmoid_bias"] is not None and c["kernel"] not in (None, "sigmoid"),
        "--{p}sigmoid-bias is the bias of --{p}kernel sigmoid: it contradicts --{p}kernel {kernel}",
    ),
    (
        lambda c: (
            c["feature_map_spec"] is not None and c["kernel"] not in (None, "unknown", "linear:phi")
        ),
        "--{p}feature-map claims the kernel linear:phi: it contradicts --{p}kernel {kernel}",
    ),
    (
        lambda c: c["causal_alignment"] is not None and c["causal"] == "no",
        "--{p}alignment is the alignment of causal calls: it contradicts --{p}causal no",
    ),
    (
        lambda c: c["causal_alignment"] is not None and c["self_attention_only"] is True,
        "--{p}alignment is the alignment of calls with T != S: it contradicts "
        "--{p}self-attention-only",
    ),
    (
        lambda c: c["decay"] is not None and c["alibi_slopes"] is not None,
        "--{p}decay and --{p}alibi/--{p}alibi-slopes are two position biases: claim one",
    ),
    (
        lambda c: c["eps_mode"] is not None and c["eps"] == 0,
        "--{p}eps-mode says how an eps enters the denominator: it contradicts --{p}eps 0",
    ),
)


def contradictions(get: Callable[[str], Any], prefix: str = "") -> list[str]:
    """The contradictions among the claim options given, one sentence each: a claim given two
    different values (``--normalized --unnormalized``, ``--dv-equals-d --dv-free``, ``--alibi``
    with ``--alibi-slopes``, ``--kernel`` twice), and the pairs of :data:`CONFLICTS`."""
    out = []
    for opt in CLAIM_OPTIONS:
        seen = _given(get, _dest(prefix, opt))
        values = list(dict.fromkeys(repr(v) for _, v in seen))
        if len(values) > 1:
            names = list(dict.fromkeys(s for s, _ in seen))
            if len(names) > 1:
                out.append(f"{' and '.join(names)} contradict each other: give one")
            else:
                out.append(f"{names[0]} given {len(seen)} times with different values "
                           f"({', '.join(values)}): give it once")  # fmt: skip
    claims = {}
    for opt in CLAIM_OPTIONS:
        seen = _given(get, _dest(prefix, opt))
        claims[opt.field] = seen[-1][1] if seen else None
    for when, why in CONFLICTS:
        try:
            hit = when(claims)
        except KeyError:  # a claim this table names is not an option (any more)
            continue
        if hit:
            out.append(why.format(p=prefix, kernel=claims.get("kernel")))
    return out


def _dest(prefix: str, opt: ClaimOption) -> str:
    return prefix.replace("-", "_") + opt.field


# -- the option table in Markdown (README: "Checking your own attention variant", the plugin) --
#: how the value of an option is written, by option name (:func:`metavar`)
METAVARS = {
    "kernel": "KERNEL",
    "scale": "default|X",
    "eps": "X",
    "window": "LEFT,RIGHT",
    "softcap": "C",
    "alibi-slopes": "M1,M2,...",
    "decay": "G1,G2,...",
    "sigmoid-bias": "B",
    "precision": "MODEL",
    "arithmetic": "cpu|flash-attention-2[+split:P]",
    "feature-map": "PKG.MOD:PHI",
    "kv-heads": "G",
    "head-dim-multiple": "M",
    "score-mod": "PKG.MOD:FN",
    "mask-mod": "PKG.MOD:FN",
    "block-mask": "PKG.MOD:FN",
    "score-mod-roundings": "K",
}


def metavar(opt: ClaimOption) -> str:
    """How the value of ``opt`` is written: its choices, :data:`METAVARS`, N for a count, X for
    a number, VALUE otherwise."""
    if opt.choices:
        return "|".join(opt.choices)
    if opt.name in METAVARS:
        return METAVARS[opt.name]
    if opt.type is positive_int:
        return "N"
    if opt.type in (float, finite_float, positive_float):
        return "X"
    return "VALUE"


def spellings(opt: ClaimOption, prefix: str = "") -> list[str]:
    """The ways ``opt`` is given on the command line, e.g. ``['--normalized',
    '--unnormalized']`` or ``['--alibi-slopes M1,M2,...', '--alibi']``."""
    if opt.off:
        return [f"--{prefix}{opt.name}", f"--{prefix}{opt.off}"]
    out = [f"--{prefix}{opt.name} {metavar(opt)}"]
    if opt.flag:
        out.append(f"--{prefix}{opt.flag[0]}")
    return out


def markdown(prefix: str = "") -> str:
    """The claim options as a Markdown table (option, the ``AttentionVariant`` field it claims,
    what it claims): what the README lists, generated from :data:`CLAIM_OPTIONS` (``python -m
    verify.cli.options --markdown [--prefix attn-]``)."""
    rows = [
        "| option | claims (`AttentionVariant` field) | meaning |",
        "|---|---|---|",
    ]
    for opt in CLAIM_OPTIONS:
        names = " / ".join(f"`{s}`" for s in spellings(opt, prefix)).replace("|", "\\|")
        text = opt.help.replace("|", "\\|")
        rows.append(f"| {names} | `{opt.field}` | {text} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m verify.cli.options --markdown [--prefix attn-]``: print :func:`markdown`."""
    p = argparse.ArgumentParser(prog="python -m verify.cli.options")
    p.add_argument("--markdown", action="store_true", help="print the claim options' table")
    p.add_argument("--prefix", default="", help="option prefix (the pytest plugin's: attn-)")
    args = p.parse_args(argv)
    if args.markdown:
        print(markdown(args.prefix), end="")
    return 0


if __name__ == "__main__":  # pragma: no cover - the command line
    raise SystemExit(main())
