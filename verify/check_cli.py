"""``attn-theory check pkg.module:object``: the property battery on any attention variant.

Exit codes: 0 at least one property ran and none failed; 1 a property failed; 2 usage or
import error (the message names the problem); 3 no property applicable.
"""

from __future__ import annotations

import argparse
import sys

DTYPE_CHOICES = ("float64", "float32", "bfloat16", "float16")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "target",
        help="pkg.module:object (an AttentionVariant, f(q, k, v, *, causal), "
        "or a zero-argument factory returning either)",
    )
    g = p.add_argument_group("claims")
    g.add_argument("--kernel", help="softmax | taylor:N | linear:MAP | unknown")
    g.add_argument("--layout", choices=("BHTD", "BTHD"))
    g.add_argument(
        "--causal",
        choices=("yes", "no", "both"),
        default=None,
        help="which causal values the variant supports (default both)",
    )
    g.add_argument(
        "--alignment", choices=("top-left", "bottom-right"), help="causal alignment when T != S"
    )
    norm = g.add_mutually_exclusive_group()
    norm.add_argument("--normalized", dest="normalized", action="store_true", default=None)
    norm.add_argument("--unnormalized", dest="normalized", action="store_false")
    g.add_argument("--scale", help="'default' (1/sqrt(d) for whatever d a check uses) or a number")
    g.add_argument("--eps", type=float, help="constant the variant adds to its denominator")
    r = p.add_argument_group("run")
    r.add_argument("--device", default="cpu")
    r.add_argument(
        "--dtype",
        action="append",
        choices=DTYPE_CHOICES,
        help="dtypes to run (repeatable; default float64 and float32)",
    )
    r.add_argument("--profile", choices=("ci", "dev", "thorough"), default=None)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--max-examples", type=int, default=None)
    r.add_argument("--select", nargs="+", action="extend", metavar="PROPERTY", default=None)
    r.add_argument("--timeout", type=float, default=None, help="seconds per property (watchdog)")
    r.add_argument("--json", metavar="PATH", help="write the JSON result ('-' for stdout only)")
    r.add_argument("--report-dir", metavar="DIR", help="write the report card here")


def _claims(args) -> dict:
    scale = args.scale
    if scale is not None and scale != "default":
        try:
            scale = float(scale)
        except ValueError:
            raise ValueError(f"--scale: expected 'default' or a number, got {scale!r}") from None
    return {
        "kernel": args.kernel,
        "layout": args.layout,
        "causal": args.causal,
        "causal_alignment": args.alignment,
        "normalized": args.normalized,
        "scale": scale,
        "eps": args.eps,
    }


def _usage(msg: str) -> int:
    print(f"attn-theory check: error: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from verify import checker
    from verify.render import card

    quiet_stdout = args.json == "-"
    out = sys.stderr if quiet_stdout else sys.stdout

    def progress(r):
        ratio = "" if r.get("max_ratio") is None else f"  max obs/bound {r['max_ratio']:.3g}"
        print(f"  {r['status']:5s} {r['property_id']:30s} {r['dtype']:8s}{ratio}", file=sys.stderr)

    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            return _usage("--device cuda: torch.cuda.is_available() is False")
    try:
        claims = _claims(args)
        print(f"checking {args.target} ...", file=sys.stderr)
        result = checker.check(
            args.target,
            dtypes=tuple(args.dtype) if args.dtype else None,
            device=args.device,
            select=args.select,
            max_examples=args.max_examples,
            seed=args.seed,
            profile=args.profile,
            timeout=args.timeout or checker.DEFAULT_TIMEOUT,
            progress=progress,
            **claims,
        )
    except checker.TargetError as exc:
        return _usage(str(exc))
    except (ValueError, TypeError) as exc:
        return _usage(str(exc))
    from verify.render.markdown import dumps, table

    print(f"\n{result.variant}: {result.description}", file=out)
    for n in result.notes:
        print(f"  note: {n}", file=out)
    rows = [
        [
            r["property_id"],
            r["dtype"],
            r["status"],
            r["examples"],
            "" if r.get("max_ratio") is None else f"{r['max_ratio']:.3g}",
            (r.get("reason") or "").split("\n")[0][:90],
        ]
        for r in result.results
    ]
    print(
        table(["property", "dtype", "status", "examples", "max obs/bound", "note"], rows), file=out
    )
    for r in result.failed:
        print(f"\nFAILED {r['property_id']} ({r['dtype']}): {r['reason'].strip()}", file=out)
        if r.get("counterexample"):
            print(f"counterexample:\n{r['counterexample']}", file=out)
        if r.get("snippet"):
            print(f"reproduce:\n{r['snippet']}", file=out)
    c = result.counts
    print(
        f"\n{c['pass']} passed, {c['fail']} failed, {c['skip']} skipped, {c['error']} errors",
        file=out,
    )
    if args.report_dir:
        md_path, _ = card.write(result, args.report_dir)
        print(f"report card: {md_path}", file=out)
    if args.json:
        text = dumps(result.to_json())
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as fh:
                fh.write(text + "\n")
    return result.exit_code
