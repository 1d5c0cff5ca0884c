"""Figures of the reports (PNG, deterministic bytes): truncation error, positivity, state size
(the derivation figures), and the tightness of the verification bounds.

Every plotted bound comes from ``derivations/`` (D4, D5); the "observed" curves are evaluated
independently on a dense grid so the figure shows the bound against the measured quantity. Each
``draw_*`` function returns the matplotlib figure with its caption, which states the inputs it
was drawn from (the report Markdown prints it under the image).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from verify.spec.results import LOOSE

FIG_DIR = "figures"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "figure.dpi": 100,
            "savefig.dpi": 110,
            "font.size": 10,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "path.simplify": False,
        }
    )
    return plt


def save(fig, path: Path) -> None:
    """Save a PNG with no timestamp or software metadata, so reruns give identical bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", metadata={"Software": None}, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)


@dataclass(frozen=True)
class Drawn:
    """A drawn figure: the matplotlib ``Figure`` and its caption, which says what is plotted
    and ends with the inputs (``Inputs: ...``) the figure was drawn from."""

    fig: Any
    caption: str


def num(value: float) -> str:
    """A number for a caption: ``:g`` with a true minus sign; an exact power of ten 10ᵏ with
    |k| >= 3 written so."""
    k = round(np.log10(value)) if value > 0 else 0
    if abs(k) >= 3 and float(f"1e{k}") == value:
        return "10" + str(k).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"{value:g}".replace("-", "−")


def _listed(values) -> str:
    """``0, 2, 4`` style list of numbers (:func:`num`)."""
    return ", ".join(num(v) for v in values)


#: inputs of the truncation-error figure
KERNEL_ORDERS = tuple(range(1, 7))
KERNEL_X = (-4.0, 3.0)
KERNEL_Y = (-6.0, 20.0)
ERROR_ORDERS = tuple(range(0, 21, 2))
ERROR_RADII = (0.5, 1.0, 2.0, 4.0)
ERROR_GRID = 201
ERROR_FLOOR = 1e-18


def truncation_error_caption() -> str:
    """The caption of :func:`draw_truncation_error`: what is plotted, then its inputs."""
    return (
        "Left: the truncated Taylor kernels κ_N(x) = Σ_{n≤N} xⁿ/n! against eˣ. Right: the "
        "worst relative error max over |x| ≤ r of |1 − κ_N(x) e⁻ˣ| against the order N: the "
        "closed form δ_N(r) of D4 (line), the maximum over equally spaced points of [−r, r] "
        "(dots), the Lagrange bound eʳ r^(N+1)/(N+1)! (dotted); dashed: relative error 1. "
        f"Inputs: left, N = {_listed(KERNEL_ORDERS)} on "
        f"x ∈ [{num(KERNEL_X[0])}, {num(KERNEL_X[1])}] "
        f"(y axis cut at [{num(KERNEL_Y[0])}, {num(KERNEL_Y[1])}]); right, N = "
        f"{_listed(ERROR_ORDERS)}, r = {_listed(ERROR_RADII)}, {ERROR_GRID} grid points per "
        f"r (values below {num(ERROR_FLOOR)} are off the axis)."
    )


def draw_truncation_error() -> Drawn:
    """kappa_N against exp, and the worst relative error on [-r, r] versus N with the D4 bounds
    (closed form delta_N(r), a grid maximum, the Lagrange bound)."""
    from derivations import truncation as d4

    plt = _plt()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.2))
    x = np.linspace(*KERNEL_X, 701)
    ax0.plot(x, np.exp(x), "k", lw=2.2, label=r"$e^x$")
    for n in KERNEL_ORDERS:
        ax0.plot(x, [float(d4.kappa(n, float(t))) for t in x], lw=1.2, label=rf"$\kappa_{n}(x)$")
    ax0.set_ylim(*KERNEL_Y)
    ax0.axhline(0, color="grey", lw=0.8)
    ax0.set_xlabel(r"score $x = c\,q\cdot k$ (dimensionless)")
    ax0.set_ylabel(r"$\kappa_N(x)$ and $e^x$")
    ax0.set_title(r"Truncated Taylor kernels $\kappa_N$ against $e^x$")
    ax0.legend(ncol=2, fontsize=8)

    orders = np.array(ERROR_ORDERS)
    for r, color in zip(ERROR_RADII, ("C0", "C1", "C2", "C3")):
        grid = np.linspace(-r, r, ERROR_GRID)  # includes the end points, where the maximum lies
        observed = [
            max(abs(float(d4.relative_error(int(n), float(t)))) for t in grid) for n in orders
        ]
        closed = [float(d4.delta(int(n), r)) for n in orders]
        # Lagrange: |e^x - kappa_N(x)| <= e^{max(x,0)} |x|^{N+1}/(N+1)!; divided by e^x, its
        # largest value on [-r, r] is at x = -r: e^r r^{N+1}/(N+1)!
        lagrange = [float(d4.remainder_bound(int(n), -r)) * float(np.exp(r)) for n in orders]
        ax1.semilogy(orders, observed, "o", color=color, ms=4, label=f"grid max, r = {r:g}")
        ax1.semilogy(orders, closed, "-", color=color, lw=1.2, label=rf"$\delta_N({r:g})$")
        ax1.semilogy(orders, lagrange, ":", color=color, lw=1.2)
    ax1.semilogy([], [], ":", color="grey", lw=1.2, label="Lagrange bound")
    ax1.axhline(1.0, color="k", lw=0.8, ls="--")
    ax1.set_xticks(orders)  # N is an integer: a tick at each order drawn
    ax1.set_xlabel("truncation order N")
    ax1.set_ylabel(r"max over $|x| \leq r$ of $|1 - \kappa_N(x)\,e^{-x}|$")
    ax1.set_title(r"D4: $\delta_N(r)$ (line), grid max (dots), Lagrange bound (dotted)")
    ax1.legend(fontsize=7, ncol=2)
    ax1.set_ylim(ERROR_FLOOR, 1e4)
    return Drawn(fig, truncation_error_caption())


#: inputs of the positivity figure
EVEN_ORDERS = (2, 4, 6, 8)
ODD_ORDERS = (1, 3, 5, 7)
POSITIVITY_X = (-7.0, 2.0)
POSITIVITY_Y = (-4.0, 8.0)


def positivity_caption() -> str:
    """The caption of :func:`draw_positivity`: what is plotted, then its inputs."""
    return (
        "The truncated Taylor kernels κ_N(x) = Σ_{n≤N} xⁿ/n! (D4): even orders are positive "
        "everywhere (star: the minimum 1/2 of κ_2, at x = −1), odd orders have exactly one "
        f"real root, a negative one. Inputs: even N = {_listed(EVEN_ORDERS)} (left), odd N = "
        f"{_listed(ODD_ORDERS)} (right), x ∈ [{num(POSITIVITY_X[0])}, {num(POSITIVITY_X[1])}] (y "
        f"axis cut at [{num(POSITIVITY_Y[0])}, {num(POSITIVITY_Y[1])}])."
    )


def draw_positivity() -> Drawn:
    """kappa_N for even and odd N: even orders stay positive, odd orders have one negative
    root."""
    from derivations import truncation as d4

    plt = _plt()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.0), sharey=True)
    x = np.linspace(*POSITIVITY_X, 901)
    for n in EVEN_ORDERS:
        ax0.plot(x, [float(d4.kappa(n, float(t))) for t in x], label=rf"$\kappa_{n}$")
    ax0.plot([-1.0], [0.5], "k*", ms=9, label=r"min $\kappa_2 = 1/2$ at $x=-1$")
    for n in ODD_ORDERS:
        ax1.plot(x, [float(d4.kappa(n, float(t))) for t in x], label=rf"$\kappa_{n}$")
    for ax, title in ((ax0, "even N: no real root"), (ax1, "odd N: exactly one real root, < 0")):
        ax.axhline(0, color="k", lw=0.9)
        ax.set_ylim(*POSITIVITY_Y)
        ax.set_xlabel(r"score $x$ (dimensionless)")
        ax.set_title(title)
        ax.legend(fontsize=8)
    ax0.set_ylabel(r"$\kappa_N(x)$")
    return Drawn(fig, positivity_caption())


#: inputs of the state-size figure
STATE_ORDERS = (1, 2, 3, 4)
STATE_T_MAX = 10**7


def state_vs_kv_caption(d: int = 64, d_v: int = 64) -> str:
    """The caption of :func:`draw_state_vs_kv`: what is plotted, then its inputs (Markdown:
    the star of T* is escaped)."""
    return (
        "Numbers stored per attention head (D5): the recurrent state of Taylor-N attention, "
        "numerator and denominator blocks of orders 0 to N, in the symmetric basis "
        "(C(N+d, N)(d_v + 1), solid) and the tensor-power basis (Σ_{n≤N} dⁿ (d_v + 1), "
        "dotted), against the softmax KV cache T (d + d_v) (black). Dashed: the crossover "
        "T\\* = symmetric state / (d + d_v), where the cache equals the state, labelled with its "
        "exact value to one decimal (the cache is the larger one from the integer length "
        f"⌈T\\*⌉ on). Inputs: d = {d}, d_v = {d_v}, N = {_listed(STATE_ORDERS)}, integer T from "
        f"1 to {num(STATE_T_MAX)}."
    )


def draw_state_vs_kv(d: int = 64, d_v: int = 64) -> Drawn:
    """State size of Taylor-N attention (both bases) against the softmax KV cache, with the
    exact crossover T* = state / (d + d_v) of the symmetric basis (D5)."""
    from derivations import state_size as d5

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    T = np.unique(np.round(np.logspace(0, np.log10(STATE_T_MAX), 400)).astype(int))
    ax.loglog(T, [d5.kv_cache_numbers(int(t), d, d_v) for t in T], "k", lw=2, label="KV cache")
    for n, color in zip(STATE_ORDERS, ("C0", "C1", "C2", "C3")):
        sym = d5.state_numbers(n, d, d_v, "symmetric")
        ten = d5.state_numbers(n, d, d_v, "tensor")
        ax.axhline(sym, color=color, lw=1.3, label=f"N={n} symmetric ({sym:,})")
        ax.axhline(ten, color=color, lw=1.0, ls=":", label=f"N={n} tensor ({ten:,})")
        t_star = float(d5.crossover_ratio(n, d, d_v, "symmetric"))  # exact, not rounded
        ax.axvline(t_star, color=color, lw=0.8, ls="--")
        ax.annotate(f"T* = {t_star:,.1f}", (t_star, sym), fontsize=7, rotation=90, va="bottom")
    ax.set_xlabel("sequence length T (tokens)")
    ax.set_ylabel("numbers stored per head (state or cache)")
    ax.set_title(f"D5: recurrent state vs KV cache (d = d_v = {d})" if d == d_v else
                 f"D5: recurrent state vs KV cache (d = {d}, d_v = {d_v})")  # fmt: skip
    ax.legend(fontsize=7, loc="upper left")
    return Drawn(fig, state_vs_kv_caption(d, d_v))


#: bins of the ratio figure: log10(observed / bound) from RATIO_LOW to RATIO_HIGH
RATIO_LOW, RATIO_HIGH, RATIO_BINS = -12.0, 0.5, 50


def ratio_distribution_caption(*, max_examples: int, profile: str) -> str:
    """The caption of :func:`draw_ratio_distribution`: what is plotted, then its inputs."""
    return (
        "Observed error / stated bound of every example of every passing cell of the "
        "verification matrix (built-in variants × properties with a stated bound), per dtype; "
        "the legend gives the number of examples. Dashed: the bound (ratio 1); dotted: the "
        f"'loose' threshold {num(LOOSE)}. Inputs: profile {profile}, {max_examples} examples "
        f"per cell, {RATIO_BINS} bins of log10 ratio on [{num(RATIO_LOW)}, {num(RATIO_HIGH)}] "
        f"(ratios below {num(10**RATIO_LOW)} are counted in the first bin; a zero ratio, exact "
        "agreement, is left out)."
    )


def draw_ratio_distribution(
    ratios_by_dtype: dict[str, list[float]], *, max_examples: int, profile: str
) -> Drawn:
    """Histogram per dtype of log10(observed error / stated bound) over the examples of the
    passing cells of the verification matrix."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.2))
    bins = np.linspace(RATIO_LOW, RATIO_HIGH, RATIO_BINS + 1)
    for dtype in ("float64", "float32", "bfloat16", "float16"):
        vals = ratios_by_dtype.get(dtype)
        if vals:
            logs = np.clip(np.log10(vals), RATIO_LOW, RATIO_HIGH)  # none falls off the axis
            ax.hist(logs, bins=bins, histtype="step", lw=1.6, label=f"{dtype} ({len(vals)})")
    ax.axvline(0.0, color="k", lw=1, ls="--", label="bound (ratio 1)")
    ax.axvline(
        np.log10(LOOSE), color="grey", lw=0.8, ls=":", label=f"'loose' threshold ({num(LOOSE)})"
    )
    ax.set_xlabel(r"$\log_{10}$(observed error / stated bound)")
    ax.set_ylabel("examples per bin")
    ax.set_title("Tightness of the stated bounds over all passing examples")
    ax.legend(fontsize=8)
    return Drawn(fig, ratio_distribution_caption(max_examples=max_examples, profile=profile))


#: inputs of the softcap figure (D13)
CAP_RANGE = (1, 60)


def softcap_orders_caption() -> str:
    """The caption of :func:`draw_softcap_orders`: what is plotted, then its inputs."""
    return (
        "Taylor-N of the capped score, uniformly (D13; κ_N applied to capped scores, a parallel "
        "form: no feature map): with every capped score "
        "in (−C, C), the smallest Taylor order N from which δ_N(C) stays below 1 (D4's output "
        "bound exists) and below 10⁻³, against the cap C; markers at the caps of the record's "
        "table. Both grow about linearly in C (δ_N(C) only falls once N exceeds C). Inputs: "
        f"integer C from {CAP_RANGE[0]} to {CAP_RANGE[1]}, levels 1 and 10⁻³, δ_N from "
        "derivations.truncation.delta (exact rationals and mpmath)."
    )


def draw_softcap_orders() -> Drawn:
    """Smallest uniform Taylor order against the softcap C (D13)."""
    from derivations import softcap as d13

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    caps = np.arange(CAP_RANGE[0], CAP_RANGE[1] + 1)
    for level, style, label in ((1, "C0-", "δ_N(C) < 1"), (1e-3, "C1--", "δ_N(C) < 10⁻³")):
        orders = [d13.smallest_uniform_order(int(c), level) for c in caps]
        ax.plot(caps, orders, style, lw=1.5, label=label)
        for c in d13.CAPS:  # the caps of the record's table
            n = orders[int(c) - CAP_RANGE[0]]
            ax.plot([c], [n], style[:2] + "o", ms=5)
            ax.annotate(f"N = {n}", (c, n), fontsize=7, xytext=(4, -10), textcoords="offset points")
    ax.set_xlabel("softcap C (every score in (−C, C))")
    ax.set_ylabel("smallest Taylor order N")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title("D13: orders needed for a uniform Taylor-N bound under a softcap")
    ax.legend(fontsize=8)
    return Drawn(fig, softcap_orders_caption())


def alibi_agreement_caption() -> str:
    """The caption of :func:`draw_alibi_agreement`: what is plotted, then its inputs."""
    from derivations import decay as d12

    return (
        "Decayed Taylor-N attention against ALiBi softmax (D12): the largest output difference "
        "max_t |o_N,t − o_t| (o: causal softmax with the bias −m(t − s) at 50 digits; o_N: "
        "γ^(t−s) κ_N(c q·k) weights, γ = e^(−m), normalized) and D4's bound B(δ_N(r)) max|v| "
        "with r the radius of c q·k alone (no bound where δ_N(r) ≥ 1). Inputs: the record's "
        "instance, T = 6, d = 2, q, k, v rational in [−1.5, 1.5] (seed 12), c = 1/2, slope "
        f"m = {num(float(d12.NUMERIC_SLOPE))}, N = {_listed(d12.NUMERIC_ORDERS)}."
    )


def draw_alibi_agreement() -> Drawn:
    """Decayed Taylor-N vs ALiBi softmax against D4's bound, by order (D12)."""
    from derivations import decay as d12

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    rows = d12.agreement_table()
    orders = [r[0] for r in rows]
    ax.semilogy(orders, [r[1] for r in rows], "C0o-", label="observed max |o_N − o|")
    bounded = [r for r in rows if r[2] is not None]
    ax.semilogy([r[0] for r in bounded], [r[2] for r in bounded], "k:", marker="x",
                label="D4 bound B(δ_N(r)) max|v|")  # fmt: skip
    ax.set_xticks(orders)
    ax.set_xlabel("Taylor order N")
    ax.set_ylabel("max output difference")
    ax.set_title("D12: decayed Taylor-N RNN vs ALiBi softmax")
    ax.legend(fontsize=8)
    return Drawn(fig, alibi_agreement_caption())


#: the figures ``attn-theory derive`` writes: file name -> drawing function
DERIVATION_FIGURES = {
    "truncation_error.png": draw_truncation_error,
    "kappa_positivity.png": draw_positivity,
    "state_vs_kv_cache.png": draw_state_vs_kv,
    "alibi_agreement.png": draw_alibi_agreement,
    "softcap_orders.png": draw_softcap_orders,
}


def write_derivation_figures(stage: Path) -> list[tuple[str, str]]:
    """Write the derivation figures under ``stage/figures``; returns (relative path, caption)."""
    out = []
    for name, draw in DERIVATION_FIGURES.items():
        drawn = draw()
        save(drawn.fig, stage / FIG_DIR / name)
        out.append((f"{FIG_DIR}/{name}", drawn.caption))
    return out
