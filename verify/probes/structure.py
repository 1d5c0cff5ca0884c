"""Structural probes: causality (fault class 9), normalization and eps, linearity in v, whether
the weights depend on q.k only, injectivity (D9), rank, batch/head independence, determinism."""

from __future__ import annotations

from typing import Any

import numpy as np

from verify.probes.report import Check, ProbeReport
from verify.probes.runner import (
    DIM,
    STRUCT_LEN,
    Runner,
    hadamard,
    pos_inputs,
    same,
    shortest_in,
    value_identity,
)
from verify.spec.results import VariantError
from verify.spec.visibility import visible


# -- causality -------------------------------------------------------------------------------
def probe_causal(run: Runner, report: ProbeReport, T: int) -> str | None:
    """Fill ``calls``, ``causal``, ``causal_support``; return the read mode ("nc"/"c")."""
    q, k = run.rand(1, 1, T, DIM, lo=0.125, hi=1.0), run.rand(1, 1, T, DIM, lo=0.125, hi=1.0)
    v = run.rand(1, 1, T, DIM)
    n = min(T, STRUCT_LEN)
    eye = value_identity(T, n)
    mats, outs = {}, {}
    for causal in (False, True):
        key = f"causal={causal}"
        try:
            outs[causal] = run.out(q, k, v, causal)[..., :n, :]
            mats[causal] = run.weights(q, k, causal, n)[0, 0, :n]
            report.calls[key] = "ok"
        except VariantError as exc:
            report.calls[key] = str(exc)
    if not mats:
        return None
    upper = ~visible(n, n, causal=True)  # the future: s > t
    c = report.causal
    for causal, name in ((False, "noncausal_sees_future"), (True, "causal_masks_future")):
        if causal not in mats:
            continue
        bnd = run.bound(q, k, eye, causal, n)[0, 0]
        A = np.abs(mats[causal])
        sees = bool((A - bnd)[upper].max() > 0) if upper.any() else False
        c[name] = Check(
            sees if not causal else not sees,
            float(A[upper].max()) if upper.any() else 0.0,
            float(bnd[upper].max()) if upper.any() else 0.0,
            f"largest |w_ts|, s > t, with causal={causal}",
        )
    if True in mats:
        _future_and_prefix(run, report, q, k, v, outs[True], n)
    if len(outs) == 2:
        b = run.bound(q, k, v, False, n) + run.bound(q, k, v, True, n)
        c["flag_ignored"] = same(outs[False], outs[True], b, "causal=False vs causal=True")
    sees = c.get("noncausal_sees_future")
    masks = c.get("causal_masks_future")
    nc_ok = sees is not None and sees.result
    c_ok = masks is not None and masks.result
    always_causal = sees is not None and not sees.result
    if nc_ok and c_ok:
        report.causal_support = "both"
    elif c_ok or always_causal:
        report.causal_support = "yes"
        if not c_ok:  # masks with causal=False and causal=True does not work: call with False
            run.flag_map[True] = False
    elif nc_ok:
        report.causal_support = "no"
    else:
        report.causal_support = None
    if report.causal_support in ("both", "no"):
        return "nc"
    return "c" if report.causal_support == "yes" else None


def _future_and_prefix(run: Runner, report: ProbeReport, q, k, v, o, n: int) -> None:
    """Fault class 9: perturbing tokens t0.. leaves outputs before t0 unchanged (causal=True);
    prefix invariance f(x)[:tp] == f(x[:tp]) on the last rows before tp."""
    import torch

    c = report.causal
    T = q.shape[-2]
    t0 = max(1, n // 2)
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    q2[..., t0:, :] = run.rand(1, 1, T - t0, DIM, lo=0.125, hi=1.0)
    k2[..., t0:, :] = run.rand(1, 1, T - t0, DIM, lo=0.125, hi=1.0)
    v2[..., t0:, :] = run.rand(1, 1, T - t0, DIM)
    try:
        o2 = run.out(q2, k2, v2, True)[..., :t0, :]
        b = run.bound(q, k, v, True, t0) + run.bound(q2, k2, v2, True, t0)
        chk = same(o[..., :t0, :], o2, b, "outputs before t0")
        c["future_perturbation_changes_past"] = Check(
            not chk.result, chk.observed, chk.bound, f"tokens {t0}.. perturbed; {chk.detail}"
        )
    except VariantError as exc:
        c["future_perturbation_changes_past"] = Check(None, detail=str(exc))
    m = report.lengths.get("multiple") or 1
    tp = (T // 2) // m * m
    if tp < 1:  # no allowed length below T: a sequence twice as long, prefix T
        tp = T
        q = torch.cat([q, run.rand(1, 1, T, DIM, lo=0.125, hi=1.0)], -2)
        k = torch.cat([k, run.rand(1, 1, T, DIM, lo=0.125, hi=1.0)], -2)
        v = torch.cat([v, run.rand(1, 1, T, DIM)], -2)
    lo = max(0, tp - n)
    try:
        full = run.out(q, k, v, True)[..., lo:tp, :]
        pre = run.out(q[..., :tp, :], k[..., :tp, :], v[..., :tp, :], True)[..., lo:tp, :]
        b = run.bound(q, k, v, True, tp, lo)
        c["prefix_invariant"] = same(full, pre, b + b, f"f(x)[{lo}:{tp}] vs f(x[:{tp}])")
    except VariantError as exc:
        c["prefix_invariant"] = Check(None, detail=str(exc))


def probe_normalization(run: Runner, report: ProbeReport, T: int, causal: bool) -> None:
    """v = 1 gives 1 (sum); with every key twice a numerator-only variant's row sum doubles
    (none), a count-normalized one's stays, and D/(D + eps) turns into 2D/(2D + eps)."""
    import torch

    q, k = pos_inputs(run, T)
    n = min(T, STRUCT_LEN)
    h = n // 2
    norm: dict[str, Any] = {"kind": None}
    report.normalization = norm
    if report.linear_in_v.result is False:
        norm.update(kind="other", detail="the output is not linear in v (e.g. a norm, D7)")
        return
    try:
        if causal:  # tokens h..2h-1 repeat 0..h-1: row 2h-1 sees row h-1's keys twice
            q[..., h : 2 * h, :], k[..., h : 2 * h, :] = q[..., :h, :], k[..., :h, :]
            ones = torch.ones(1, 1, T, DIM, dtype=torch.float64)
            r = run.out(q, k, ones, causal)[0, 0, :n, 0]
            b = run.bound(q, k, ones, causal, n)[0, 0, :, 0]
            r1, r2, b1, b2 = r[h - 1], r[2 * h - 1], b[h - 1], b[2 * h - 1]
        else:  # every query sees every key twice
            ones = torch.ones(1, 1, T, DIM, dtype=torch.float64)
            r = run.out(q, k, ones, causal)[0, 0, :n, 0]
            b = run.bound(q, k, ones, causal, n)[0, 0, :, 0]
            q2, k2 = torch.cat([q, q], -2), torch.cat([k, k], -2)
            ones2 = torch.ones(1, 1, 2 * T, DIM, dtype=torch.float64)
            r2 = run.out(q2, k2, ones2, causal)[0, 0, 0, 0]
            b2 = run.bound(q2, k2, ones2, causal, 1)[0, 0, 0, 0]
            r1, b1 = r[0], b[0]
        A = run.weights(q, k, causal, n)[0, 0, :n]
    except VariantError as exc:
        norm["detail"] = str(exc)
        return
    r1, r2, b1, b2 = float(r1), float(r2), float(b1), float(b2)
    dev = np.abs(r - 1.0)
    i = int(np.argmax(dev / b))
    norm["row_sum"] = Check(
        bool(np.all(dev <= b)), float(dev[i]), float(b[i]), f"|o - 1| with v = 1 (row {i})"
    )
    norm["duplication"] = {"r1": r1, "r2": r2, "bound_r1": b1, "bound_r2": b2}
    if norm["row_sum"].result:
        norm["kind"] = "sum"
        run.dens = ("sum",)
        return
    if abs(r2 - 2 * r1) <= b2 + 2 * b1:
        norm["kind"] = "none"
        run.dens = ("none",)
        return
    # D/(D + eps): 1/r1 - 1 = eps/D and 1/r2 - 1 = eps/(2D), each known to within
    # |d(1/r)| <= b/(r (r - b))
    count = abs(r2 - r1) <= b2 + b1
    if r1 > b1 and r2 > b2:
        a, bb = 1 / r1 - 1, 1 / r2 - 1
        da, db = b1 / (r1 * (r1 - b1)), b2 / (r2 * (r2 - b2))
        if a > da and abs(a - 2 * bb) <= da + 2 * db and count:
            # both D/(D + eps) and a count normalization fit r1, r2 within their bounds (e.g.
            # a delta rule whose state a zero key leaves at zero): the probes cannot tell
            norm["kind"] = "unsettled"
            norm["detail"] = (
                f"rows do not sum to 1; with every key twice the row sums ({r1:.3g}, {r2:.3g}) "
                "fit both D/(D + eps) and a count normalization within their bounds"
            )
            return
        if a > da and abs(a - 2 * bb) <= da + 2 * db:
            norm["kind"] = "sum+eps"
            run.dens = ("sum",)
            _estimate_eps(run, norm, q, k, causal, r, b, A, n)
            return
    if count:
        norm["kind"] = "count"
        return
    norm["kind"] = "other"
    norm["detail"] = "rows neither sum to 1, nor double with duplicated keys, nor D/(D+eps)"


def _estimate_eps(run: Runner, norm: dict, q, k, causal: bool, r, b, A, n: int) -> None:
    """eps/kappa(0) = (1 - r_t)/w_t0 per row (key 0 is the zero vector, w_t0 =
    kappa(0)/(D_t + eps)), with |d eps| <= (b_r + eps b_w)/(w_t0 - b_w); the intervals of all
    rows are intersected and the shortest decimal inside reported. An empty intersection sets
    ``eps_consistent`` False (the median is kept as a guess): the rows need different values
    of eps/kappa(q_t, 0), which refutes D/(D + eps) where kappa(q_t, 0) is the same for every
    row (exp-type kernels: 1) or no kernel is known to refine the guess (a recurrence such as
    a delta rule whose two duplicated rows happen to look like D/(D + eps); read by
    ``verify.probes.suggested_claims``); for an element-wise map the conventions probe
    (``verify.probes.conventions``) decides with the kernel."""
    T = q.shape[-2]
    bw = run.bound(q, k, value_identity(T, n), causal, n)[0, 0, :, 0]
    w0 = A[:, 0]
    good = w0 > bw
    if not good.any():
        norm["detail"] = "kappa(0) = 0: eps not estimable from the zero key"
        return
    e = (1 - r[good]) / w0[good]
    de = (b[good] + e * bw[good]) / (w0[good] - bw[good])
    lo, hi = float(np.max(e - de)), float(np.min(e + de))
    norm["eps_interval"] = [lo, hi]
    norm["eps_consistent"] = lo <= hi
    norm["eps"] = shortest_in(lo, hi) if lo <= hi else float(np.median(e))
    norm["detail"] = "eps relative to kappa(0) (eps itself when kappa(0) = 1)"
    if lo > hi:
        norm["detail"] = (
            f"no single eps: D/(D + eps) gives eps/kappa(q_t, 0) from {np.min(e):.3g} to "
            f"{np.max(e):.3g} across rows, beyond their bounds"
        )


def probe_linear_in_v(run: Runner, report: ProbeReport, T: int, causal: bool) -> None:
    from derivations import rounding as d10

    q, k = pos_inputs(run, T)
    n = min(T, STRUCT_LEN)
    v = run.rand(1, 1, T, DIM)
    v[..., n:, :] = 0.0
    try:
        o = run.out(q, k, v, causal)[0, 0, :n]
        A = run.weights(q, k, causal, n)[0, 0, :n]
        vn = v[0, 0, :n].numpy()
        bo = run.bound(q, k, v, causal, n)[0, 0]
        bA = run.bound(q, k, value_identity(T, n), causal, n)[0, 0]
        av = np.abs(A) @ np.abs(vn)
        b = bo + bA @ np.abs(vn) + d10.gamma(n, d10.unit_roundoff("float64")) * av
        report.linear_in_v = same(o, A @ vn, b, "o(v) vs W v")
    except VariantError as exc:
        report.linear_in_v = Check(None, detail=str(exc))


# -- q.k only, injectivity, rank, independence -----------------------------------------------
def probe_qk_only(run: Runner, report: ProbeReport, T: int, causal: bool, window=None) -> None:
    """Whether the weights depend on q.k only (rotation, norms, positions); under a claimed or
    found ``window`` the position test reverses the keys the last row sees, inside it."""
    import torch

    n = min(T, STRUCT_LEN)
    q, k = pos_inputs(run, T)
    H = torch.from_numpy(hadamard(DIM))
    q2, k2 = q @ H / DIM, k @ H  # exact: dyadic entries, q2 . k2 = q H H^T k^T / d = q . k
    e = value_identity(T, n)
    # norms: every key in span(e_1, e_2) and the query moved along e_4 keep each q.k_s and
    # change |q| (the rotation above keeps |q||k|, so it cannot see a dependence on norms)
    k3 = k.clone()
    k3[..., 2:] = 0.0
    q3 = q.clone()
    q3[..., 3] += 2.0
    try:
        A = run.weights(q, k, causal, n)[0, 0, :n]
        A2 = run.weights(q2, k2, causal, n)[0, 0, :n]
        b = run.bound(q, k, e, causal, n) + run.bound(q2, k2, e, causal, n)
        rotated = same(A, A2, b[0, 0], "weights for (q, k) vs (q H/d, k H), same q.k")
        A3 = run.weights(q, k3, causal, n)[0, 0, :n]
        A4 = run.weights(q3, k3, causal, n)[0, 0, :n]
        b = run.bound(q, k3, e, causal, n) + run.bound(q3, k3, e, causal, n)
        normed = same(
            A3,
            A4,
            b[0, 0],
            "weights for q vs q + 2 e_4 with the keys in span(e_1, e_2): same q.k, another |q|",
        )
        # positions: the first n keys reversed; the last of the first n rows sees all of them
        # (causal or not), so a function of q.k_s alone moves its weights with its keys
        rev = torch.arange(n - 1, -1, -1)
        if window is not None:  # reverse inside the last row's window (the others stay)
            from verify.probes.kernels import window_visible

            seen = np.nonzero(window_visible(n, causal, window)[-1])[0]
            rev = torch.arange(n)
            rev[torch.from_numpy(seen)] = torch.from_numpy(seen[::-1].copy())
        k5 = k.clone()
        k5[..., :n, :] = k[..., rev, :]
        A5 = run.weights(q, k5, causal, n)[0, 0, :n]
        b = run.bound(q, k, e, causal, n) + run.bound(q, k5, e, causal, n)
        moved = same(
            A5[-1:],
            A[-1:, rev.numpy()],
            b[0, 0][-1:, rev.numpy()],
            "weights of the last row with its keys reversed: each weight moves with its key",
        )
        report.qk_only = next((c for c in (rotated, normed, moved) if not c.result), moved)
    except VariantError as exc:
        report.qk_only = Check(None, detail=str(exc))


def probe_injectivity(run: Runner, report: ProbeReport, T: int, causal: bool) -> None:

    n = min(T, STRUCT_LEN)
    q, k = pos_inputs(run, T)
    k[..., 0, :] = run.rand(DIM, lo=0.125, hi=1.0)
    inj: dict[str, Any] = {}
    e = value_identity(T, n)
    try:
        A = run.weights(q, k, causal, n)[0, 0, :n]
        A2 = run.weights(2 * q, k, causal, n)[0, 0, :n]
        b = run.bound(q, k, e, causal, n) + run.bound(2 * q, k, e, causal, n)
        inj["homogeneous"] = same(A, A2, b[0, 0], "weights for q vs 2q")
        # keys with k_1 = 1: q + e_1 adds 1 to every score of a row (K u = 1 with u = e_1)
        ks = k.clone()
        ks[..., 0] = 1.0
        qs = q.clone()
        qs[..., 0] += 1.0
        A3 = run.weights(q, ks, causal, n)[0, 0, :n]
        A4 = run.weights(qs, ks, causal, n)[0, 0, :n]
        b = run.bound(q, ks, e, causal, n) + run.bound(qs, ks, e, causal, n)
        inj["shift_invariant"] = same(A3, A4, b[0, 0], "weights for q vs q + e_1, k_s1 = 1")
        # distinct queries against keys with rank [K, 1] = d + 1 (D9)
        from derivations.related import softmax_injective

        kk = k[0, 0].numpy()
        inj["rank_K1"] = int(np.linalg.matrix_rank(np.hstack([kk, np.ones((T, 1))])))
        inj["keys_injective_for_softmax"] = bool(softmax_injective(kk.tolist()))
        bA = run.bound(q, k, e, causal, n)[0, 0]
        rows = A if not causal else A[-1:]
        if causal:  # rows differ in what they see; compare full rows of the last query instead
            qd = q.clone()
            qd[..., -1, :] = run.rand(DIM, lo=0.125, hi=1.0)
            Ad = run.weights(qd, k, causal, n)[0, 0, :n]
            bd = run.bound(qd, k, e, causal, n)[0, 0]
            diff = np.abs(Ad[-1] - A[-1]) - (bd[-1] + bA[-1])
            distinct = bool(diff.max() > 0)
        else:
            diff = [
                (np.abs(rows[i] - rows[j]) - (bA[i] + bA[j])).max()
                for i in range(n)
                for j in range(i + 1, n)
            ]
            distinct = bool(min(diff) > 0) if diff else True
        inj["distinct_rows"] = Check(distinct, detail="distinct queries give distinct weight rows")
    except VariantError as exc:
        inj["detail"] = str(exc)
    hom = inj.get("homogeneous")
    sh = inj.get("shift_invariant")
    if hom is not None and hom.result:
        inj["summary"] = "not injective: q and 2q give the same weights (homogeneous map, D9)"
    elif sh is not None and sh.result:
        inj["summary"] = (
            "shift-invariant like exp: collisions exactly along K u = c 1, injective when "
            "rank [K, 1] = d + 1 (D9, D6)"
        )
    elif inj.get("distinct_rows") is not None and inj["distinct_rows"].result:
        inj["summary"] = "no collision found (distinct queries give distinct rows)"
    else:
        inj["summary"] = "collisions found or not probed"
    report.injectivity = inj


def probe_rank(run: Runner, report: ProbeReport, T: int, modes: tuple[bool, ...]) -> None:
    from derivations import rounding as d10

    n = min(T, STRUCT_LEN)
    q, k = run.rand(1, 1, T, 2), run.rand(1, 1, T, 2)
    eps = 2 * d10.unit_roundoff(run.bound_dtype)
    rk: dict[str, Any] = {
        "size": [n, n],
        "d": 2,
        "rule": "numpy matrix_rank: singular values > sigma_max * max(T, S) * eps, eps = 2u of "
        "the dtype (Golub and Van Loan, Matrix Computations, sec. 5.4.1)",
    }
    for causal in modes:
        try:  # signed maps may divide by zero on some rows (IEEE): those rows are dropped
            A = run.weights(q, k, causal, n, allow_nonfinite=True)[0, 0, :n]
        except VariantError as exc:
            rk["causal" if causal else "noncausal"] = str(exc)
            continue
        A = A[np.isfinite(A).all(axis=-1)]
        if not A.size:
            rk["causal" if causal else "noncausal"] = "no finite row"
            continue
        rk["rows_used" + ("_causal" if causal else "")] = int(A.shape[0])
        tol = float(np.linalg.svd(A, compute_uv=False)[0] * n * eps)
        rk["causal" if causal else "noncausal"] = int(np.linalg.matrix_rank(A, tol=tol))
        rk["tolerance"] = tol
    report.rank = rk


def probe_independence(run: Runner, report: ProbeReport, T: int, causal: bool) -> None:
    q, k, v = (run.rand(2, 2, T, DIM, lo=0.125, hi=1.0) for _ in range(3))
    n = min(T, STRUCT_LEN)
    ind: dict[str, Check] = {}
    try:
        o = run.out(q, k, v, causal)[..., :n, :]
        b = run.bound(q, k, v, causal, n)
        for name, sl in (
            ("batch", (slice(1, 2), slice(None))),
            ("head", (slice(None), slice(1, 2))),
        ):
            q2, k2, v2 = q.clone(), k.clone(), v.clone()
            for x in (q2, k2, v2):
                x[sl] = run.rand(*x[sl].shape, lo=0.125, hi=1.0)
            o2 = run.out(q2, k2, v2, causal)[..., :n, :]
            keep = (slice(0, 1), slice(None)) if name == "batch" else (slice(None), slice(0, 1))
            bb = b[keep] + run.bound(q2, k2, v2, causal, n)[keep]
            ind[name] = same(o[keep], o2[keep], bb, f"{name} 0 when {name} 1 changes")
        o1 = run.out(q[:1, :1], k[:1, :1], v[:1, :1], causal)[..., :n, :]
        ind["single_call"] = same(o[:1, :1], o1, 2 * b[:1, :1], "(0, 0) of B = H = 2 vs B = H = 1")
    except VariantError as exc:
        ind["detail"] = Check(None, detail=str(exc))
    report.independence = ind


def probe_determinism(run: Runner, report: ProbeReport, T: int, causal: bool) -> None:
    q, k = (run.rand(1, 1, T, DIM, lo=0.125, hi=1.0) for _ in range(2))
    v = run.rand(1, 1, T, DIM)
    try:
        a, b = run.out(q, k, v, causal), run.out(q, k, v, causal)
    except VariantError as exc:
        report.deterministic = Check(None, detail=str(exc))
        return
    diff = float(np.max(np.abs(a - b)))
    report.deterministic = Check(diff == 0.0, diff, 0.0, "two calls, same inputs (bitwise)")
