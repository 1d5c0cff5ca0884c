"""Input restrictions: which sequence lengths and head dimensions work, the precision the outputs
are computed in, T != S and the causal alignment (fault class 7), and the dtypes a call
accepts."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from verify.probes.report import ProbeReport
from verify.probes.runner import DIM, PROBE_DTYPES, Runner
from verify.spec.results import VariantError

#: lengths tried by the restriction scan (fla's chunked forms need multiples of 256)
SCAN_LENGTHS = (1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 32, 64, 128, 256, 257)
#: the smallest length floor the scan reports as a restriction (a kernel's tile: 16 keys or
#: more); a kernel that fails only on shorter inputs -- one token is the decode path -- has a
#: defect inside its domain, which accepts-inputs fails
MIN_LENGTH_FLOOR = 16
#: head dimensions tried by the head-dimension scan (d_v = d), around the probes' own d = 4
SCAN_HEAD_DIMS = (1, 2, 3, 4, 5, 6, 7, 8)


# -- lengths ---------------------------------------------------------------------------------
def scan_lengths(run: Runner, report: ProbeReport) -> None:
    lengths = list(SCAN_LENGTHS)
    for mode in (False, True):
        tested: dict[int, str] = {}
        for T in lengths:  # positive q, k: no kernel of the family has a vanishing denominator
            q, k = (run.rand(1, 1, T, DIM, lo=0.125, hi=1.0) for _ in range(2))
            v = run.rand(1, 1, T, DIM)
            try:
                run.out(q, k, v, mode)
                tested[T] = "ok"
            except VariantError as exc:
                tested[T] = str(exc)
        if any(r == "ok" for r in tested.values()):
            break
    passing = sorted(T for T, r in tested.items() if r == "ok")
    failing = sorted(T for T, r in tested.items() if r != "ok")
    multiple = floor = None
    if passing:
        m = 0
        for T in passing:
            m = math.gcd(m, T)
        if m >= 64 and 2 * passing[-1] not in tested:  # confirm a large multiple once more
            T2 = 2 * passing[-1]
            q, k = (run.rand(1, 1, T2, DIM, lo=0.125, hi=1.0) for _ in range(2))
            v = run.rand(1, 1, T2, DIM)
            try:
                run.out(q, k, v, mode)
                tested[T2] = "ok"
                passing.append(T2)
            except VariantError as exc:
                tested[T2] = str(exc)
                failing.append(T2)
        if all((T % m == 0) == (T in passing) for T in tested):
            multiple = m
            rule = "any T" if m == 1 else f"T must be a multiple of {m}"
        elif passing == sorted(tested)[: len(passing)]:
            rule = f"T <= {passing[-1]} (fails from T = {failing[0]})"
        elif passing == sorted(tested)[-len(passing) :] and passing[0] >= MIN_LENGTH_FLOOR:
            floor = passing[0]  # works from a tile's length on: a floor
            rule = f"T >= {floor} (fails below, from T = {failing[-1]})"
        else:
            rule = f"irregular: works for T in {passing}"
    else:
        first = min(tested)
        rule = f"no tested length works (T = {first}: {tested[first]})"
    report.lengths = {
        "tested": {str(T): tested[T] for T in sorted(tested)},
        "mode": f"causal={mode}",
        "multiple": multiple,
        "min_length": floor,
        "smallest_failing": failing[0] if failing else None,
        "rule": rule,
        "passing": passing,
    }


def probe_head_dims(run: Runner, report: ProbeReport, T: int, causal: bool) -> None:
    """Which head dimensions d in ``SCAN_HEAD_DIMS`` a call accepts (d_v = d, T = S = ``T``):
    when exactly the multiples of some m > 1 work (e.g. code splitting d in halves),
    ``head_dim_multiple`` = m is a restriction. The draws do not move the other probes' inputs
    (the generator's state is restored)."""
    state = run.gen.get_state()
    tested: dict[int, str] = {}
    for d in SCAN_HEAD_DIMS:
        q, k = (run.rand(1, 1, T, d, lo=0.125, hi=1.0) for _ in range(2))
        try:
            run.out(q, k, run.rand(1, 1, T, d), causal)
            tested[d] = "ok"
        except VariantError as exc:
            tested[d] = str(exc)
    run.gen.set_state(state)
    report.head_dims = {str(d): r for d, r in tested.items()}
    passing = [d for d, r in tested.items() if r == "ok"]
    m = 0
    for d in passing:
        m = math.gcd(m, d)
    if m > 1 and all((d % m == 0) == (r == "ok") for d, r in tested.items()):
        report.restrictions["head_dim_multiple"] = m
        first = next(r for r in tested.values() if r != "ok")
        report.notes.append(
            f"head dimensions other than multiples of {m} are rejected ({first}): a restriction"
        )


def length_at_least(report: ProbeReport, n: int) -> int | None:
    m = report.lengths.get("multiple")
    if m:
        return -(-n // m) * m
    bigger = [T for T in report.lengths.get("passing", []) if T >= n]
    return bigger[0] if bigger else None


# -- precision -------------------------------------------------------------------------------
#: coarsest first: the first whose values contain every output is the computing precision
_COARSER = {
    "float64": ("bfloat16", "float16", "float32"),
    "float32": ("bfloat16", "float16"),
    "bfloat16": (),
    "float16": (),
}


def probe_precision(run: Runner, report: ProbeReport, T: int) -> None:
    """The precision the outputs are computed in: full-precision random values (q, k on the
    grid) mix into outputs that are generically representable only in the precision they
    were computed in; when every output is a number of a coarser dtype (an event of
    probability ~2^-29 per element for a genuine float64 result against float32), the
    structural and kernel bounds use that dtype (e.g. a variant computing in float32 and
    returning float64)."""
    import torch

    q, k = (run.rand(1, 1, T, DIM, lo=0.125, hi=1.0) for _ in range(2))
    v = run.exact(torch.randn(1, 1, T, DIM, generator=run.gen, dtype=torch.float64))
    o = None
    for flag in (False, True):
        try:
            o = run.out(q, k, v, flag)
            break
        except VariantError:
            continue
    report.output_precision = run.dtype
    if o is None:
        return
    for name in _COARSER[run.dtype]:
        if _all_in(o, name):
            report.output_precision = name
            run.bound_dtype = name
            report.notes.append(f"every output is a {name} number: bounds use {name}")
            report.restrictions["compute_dtype"] = name
            return
    w = None
    for flag in (False, True):  # the weights alone (V = I): softmax(s, dtype=float32).to(s.dtype)
        try:
            w = run.weights(q, k, flag, T)
            break
        except VariantError:
            continue
    if w is None:
        return
    generic = (w != 0) & (w != 1)  # 0 and 1 are numbers of every dtype
    if generic.sum() < MIN_GENERIC_WEIGHTS:
        return
    for name in _COARSER[run.dtype]:
        if _all_in(w[generic], name):
            run.bound_dtype = name
            report.notes.append(
                f"every attention weight is a {name} number (read with V = I; the outputs are "
                f"{run.dtype}): the weights are computed in {name} (a softmax with dtype={name}"
                f"), bounds use {name}"
            )
            report.restrictions["compute_dtype"] = name
            return


#: generic weights (not 0 or 1) that must all be numbers of a coarser dtype before the weights
#: are called computed in it: a genuine float64 weight is a float32 number with probability
#: ~2^-29, so 8 of them leave a chance below 2^-200
MIN_GENERIC_WEIGHTS = 8


def _all_in(x: np.ndarray, name: str) -> bool:
    """Every element of float64 ``x`` is a number of the dtype ``name``."""
    import torch

    return bool(np.array_equal(torch.from_numpy(x).to(getattr(torch, name)).double().numpy(), x))


# -- cross lengths and alignment -------------------------------------------------------------
def probe_cross(run: Runner, report: ProbeReport) -> None:
    m = report.lengths.get("multiple") or report.lengths.get("min_length") or 1
    cross: dict[str, Any] = {"noncausal": {}, "causal": {}, "alignment": None, "detail": ""}
    if report.causal_support in ("both", "no"):
        for T, S in ((m, 2 * m), (2 * m, m)):
            q, k, v = run.rand(1, 1, T, DIM), run.rand(1, 1, S, DIM), run.rand(1, 1, S, DIM)
            try:
                run.out(q, k, v, False)
                cross["noncausal"][f"{T},{S}"] = "ok"
            except VariantError as exc:
                cross["noncausal"][f"{T},{S}"] = str(exc)
    if report.causal_support in ("both", "yes"):
        patterns = []
        for T, S in ((m, 2 * m), (2 * m, 4 * m)):
            q = run.rand(1, 1, T, DIM, lo=0.125, hi=1.0)
            k = run.rand(1, 1, S, DIM, lo=0.125, hi=1.0)
            try:
                A = run.weights(q, k, True, S)[0, 0]
            except VariantError as exc:
                cross["causal"][f"{T},{S}"] = str(exc)
                patterns.append(None)
                continue
            # a masked weight is exactly zero (the project's API contract); visible ones here are
            # positive for every positive kernel (positive inputs)
            vis = A != 0
            t_idx, s_idx = np.indices((T, S))
            names = [
                name
                for name, pat in (
                    ("top-left", s_idx <= t_idx),
                    ("bottom-right", s_idx <= t_idx + S - T),
                    ("no mask", np.ones((T, S), dtype=bool)),
                )
                if np.array_equal(vis, pat)
            ]
            pat = " = ".join(names) if names else "other pattern"
            cross["causal"][f"{T},{S}"] = pat
            patterns.append(names)
        ok = [p for p in patterns if p is not None]
        if len(ok) == len(patterns) and ok:
            common = set(ok[0]).intersection(*map(set, ok[1:])) if ok else set()
            common.discard("no mask")
            if len(common) == 1:
                cross["alignment"] = common.pop()
        if cross["alignment"] == "bottom-right":
            cross["empty_rows"] = _empty_rows(run, m)
            report.restrictions["empty_rows"] = cross["empty_rows"]
        raised = [p for p, r in cross["causal"].items() if r.startswith("forward")]
        if len(raised) == len(patterns):
            cross["detail"] = "causal with T != S is rejected (raises)"
        elif cross["alignment"] is None:
            cross["detail"] = (
                "causal with T != S: no consistent top-left/bottom-right alignment"
                + (f" (raises for T,S = {', '.join(raised)})" if raised else "")
            )
    nc = list(cross["noncausal"].values())
    if nc and all(r.startswith("forward") for r in nc):
        report.restrictions["self_attention_only"] = True
        cross["detail"] = (cross["detail"] + "; " if cross["detail"] else "") + (
            "T != S is rejected without causal too: self-attention only (a restriction)"
        )
    report.cross = cross


def _empty_rows(run: Runner, m: int) -> str:
    """What a bottom-right causal call with T > S returns on its first T - S rows, which see no
    key: ``zeros``, ``nan``, ``uniform`` (the mean of the values) or ``other``."""
    T, S = 2 * m, m
    q, k, v = run.rand(1, 1, T, DIM), run.rand(1, 1, S, DIM), run.rand(1, 1, S, DIM)
    try:
        o = run.out(q, k, v, True, allow_nonfinite=True)[0, 0, : T - S]
    except VariantError:
        return "other"
    if np.isnan(o).all():
        return "nan"
    if np.array_equal(o, np.zeros_like(o)):
        return "zeros"
    mean = v[0, 0].double().mean(0).numpy()
    if np.allclose(o, mean[None, :], rtol=1e-6, atol=1e-6):
        return "uniform"
    return "other"


def probe_value_dim(run: Runner, report: ProbeReport, T: int, causal: bool) -> None:
    """d_v == d a restriction: a value dimension other than the head dimension raises while
    d_v = d works."""
    q, k = run.rand(1, 1, T, DIM), run.rand(1, 1, T, DIM)
    try:
        run.out(q, k, run.rand(1, 1, T, DIM), causal)
    except VariantError:
        return
    other = {}
    for dv in (1, DIM + 1):
        try:
            run.out(q, k, run.rand(1, 1, T, dv), causal)
            other[dv] = "ok"
        except VariantError as exc:
            other[dv] = str(exc)
    if all(r != "ok" for r in other.values()):
        report.restrictions["dv_equals_d"] = True
        report.notes.append(
            f"d_v != d is rejected ({other[1]}): the value dimension must equal the head "
            "dimension (a restriction)"
        )


def probe_dtypes(run: Runner, report: ProbeReport, T: int, causal: bool) -> None:
    import torch

    from verify.properties.support.calls import call

    q, k, v = (run.rand(1, 1, T, DIM, lo=0.125, hi=1.0) for _ in range(3))
    for name in PROBE_DTYPES:
        dt = getattr(torch, name)
        try:
            call(
                run.variant,
                q.to(run.device, dt),
                k.to(run.device, dt),
                v.to(run.device, dt),
                causal=run.flag_map.get(causal, causal),
                restricted=False,
            )
            report.dtypes[name] = "ok"
        except VariantError as exc:
            report.dtypes[name] = str(exc)
