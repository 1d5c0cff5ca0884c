"""Figures of the derivations (PNG, deterministic bytes): truncation error, positivity, state size.

Every plotted bound comes from ``derivations/`` (D4, D5); the "observed" curves are evaluated
independently on a dense grid so the figure shows the bound against the measured quantity.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

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


def truncation_error(path: Path) -> str:
    """kappa_N against exp, and the worst relative error on [-r, r] versus N with the D4 bounds."""
    from derivations import truncation as d4

    plt = _plt()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.2))
    x = np.linspace(-4.0, 3.0, 701)
    ax0.plot(x, np.exp(x), "k", lw=2.2, label=r"$e^x$")
    for n in range(1, 7):
        ax0.plot(x, [float(d4.kappa(n, float(t))) for t in x], lw=1.2, label=rf"$\kappa_{n}$")
    ax0.set_ylim(-6, 20)
    ax0.axhline(0, color="grey", lw=0.8)
    ax0.set_xlabel(r"score $x = c\,q\cdot k$ (dimensionless)")
    ax0.set_ylabel("kernel value")
    ax0.set_title(r"Truncated Taylor kernels $\kappa_N$ against $e^x$")
    ax0.legend(ncol=2, fontsize=8)

    orders = np.arange(0, 21, 2)
    for r, color in zip((0.5, 1.0, 2.0, 4.0), ("C0", "C1", "C2", "C3")):
        grid = np.linspace(-r, r, 201)  # includes the end points, where the maximum lies
        observed = [
            max(abs(float(d4.relative_error(int(n), float(t)))) for t in grid) for n in orders
        ]
        closed = [float(d4.delta(int(n), r)) for n in orders]
        lagrange = [float(d4.remainder_bound(int(n), -r)) * float(np.exp(r)) for n in orders]
        ax1.semilogy(orders, observed, "o", color=color, ms=4, label=f"grid max, r={r:g}")
        ax1.semilogy(orders, closed, "-", color=color, lw=1.2, label=rf"$\delta_N({r:g})$")
        ax1.semilogy(orders, lagrange, ":", color=color, lw=1.2)
    ax1.axhline(1.0, color="k", lw=0.8, ls="--")
    ax1.set_xlabel("truncation order N")
    ax1.set_ylabel(r"max relative error on $[-r, r]$")
    ax1.set_title(r"D4: $\delta_N(r)$ (line), grid max (dots), Lagrange bound (dotted)")
    ax1.legend(fontsize=7, ncol=2)
    ax1.set_ylim(1e-18, 1e4)
    save(fig, path)
    return "Truncation error of Taylor-N attention kernels against the D4 bounds"


def positivity(path: Path) -> str:
    """kappa_N for even and odd N: even orders stay positive, odd orders have one negative root."""
    from derivations import truncation as d4

    plt = _plt()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.0), sharey=True)
    x = np.linspace(-7.0, 2.0, 901)
    for n in (2, 4, 6, 8):
        ax0.plot(x, [float(d4.kappa(n, float(t))) for t in x], label=rf"$\kappa_{n}$")
    ax0.plot([-1.0], [0.5], "k*", ms=9, label=r"min $\kappa_2 = 1/2$ at $x=-1$")
    for n in (1, 3, 5, 7):
        ax1.plot(x, [float(d4.kappa(n, float(t))) for t in x], label=rf"$\kappa_{n}$")
    for ax, title in ((ax0, "even N: no real root"), (ax1, "odd N: exactly one negative root")):
        ax.axhline(0, color="k", lw=0.9)
        ax.set_ylim(-4, 8)
        ax.set_xlabel(r"score $x$ (dimensionless)")
        ax.set_title(title)
        ax.legend(fontsize=8)
    ax0.set_ylabel(r"$\kappa_N(x)$")
    save(fig, path)
    return "Positivity of even truncations and the sign change of odd ones (D4)"


def state_vs_kv(path: Path, d: int = 64, d_v: int = 64) -> str:
    """State size of Taylor-N attention (both bases) against the softmax KV cache, with T*."""
    from derivations import state_size as d5

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    T = np.logspace(0, 7, 200)
    ax.loglog(
        T, [d5.kv_cache_numbers(int(round(t)), d, d_v) for t in T], "k", lw=2, label="KV cache"
    )
    for n, color in zip((1, 2, 3, 4), ("C0", "C1", "C2", "C3")):
        sym = d5.state_numbers(n, d, d_v, "symmetric")
        ten = d5.state_numbers(n, d, d_v, "tensor")
        ax.axhline(sym, color=color, lw=1.3, label=f"N={n} symmetric ({sym:,})")
        ax.axhline(ten, color=color, lw=1.0, ls=":", label=f"N={n} tensor ({ten:,})")
        t_star = d5.crossover_length(n, d, d_v, "symmetric")
        ax.axvline(t_star, color=color, lw=0.8, ls="--")
        ax.annotate(f"T*={t_star:,}", (t_star, sym), fontsize=7, rotation=90, va="bottom")
    ax.set_xlabel("sequence length T (tokens)")
    ax.set_ylabel("numbers stored (state or cache)")
    ax.set_title(f"D5: recurrent state vs KV cache (d = d_v = {d})")
    ax.legend(fontsize=7, loc="upper left")
    save(fig, path)
    return f"State size of Taylor-N attention against the softmax KV cache, d = d_v = {d} (D5)"


DERIVATION_FIGURES = {
    "truncation_error.png": truncation_error,
    "kappa_positivity.png": positivity,
    "state_vs_kv_cache.png": state_vs_kv,
}


def write_derivation_figures(stage: Path) -> list[tuple[str, str]]:
    """Write the derivation figures under ``stage/figures``; returns (relative path, caption)."""
    out = []
    for name, fn in DERIVATION_FIGURES.items():
        caption = fn(stage / FIG_DIR / name)
        out.append((f"{FIG_DIR}/{name}", caption))
    return out
