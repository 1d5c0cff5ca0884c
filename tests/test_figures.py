"""Every report figure states its inputs in its caption, its labels say what is drawn, and an
axis whose plotted values are integers has integer ticks only.

The figures are drawn by the same functions the reports call (``verify.render.figures`` and the
error-vs-radius figure of ``verify.render.index``); nothing is written to disk.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from verify.render import figures, index


def _error_vs_radius():
    return index.draw_error_vs_radius(index.error_vs_radius_data())


def _ratio_distribution():
    ratios = {"float64": [1e-14, 1e-3, 0.5], "bfloat16": [0.02, 0.9]}
    return figures.draw_ratio_distribution(ratios, max_examples=7, profile="ci")


DRAWERS = {
    **{name.removesuffix(".png"): draw for name, draw in figures.DERIVATION_FIGURES.items()},
    "error_vs_radius": _error_vs_radius,
    "ratio_distribution": _ratio_distribution,
}


@pytest.fixture(scope="module")
def drawn():
    import matplotlib.pyplot as plt

    out = {name: draw() for name, draw in DRAWERS.items()}
    for d in out.values():
        d.fig.canvas.draw()  # the tick locators run at draw time
    yield out
    for d in out.values():
        plt.close(d.fig)


def _data_x(ax) -> np.ndarray:
    """x values of the data drawn on ``ax`` in data coordinates (lines and markers; not the
    axhline/axvline guides, whose x is in axes coordinates)."""
    xs = [
        np.asarray(line.get_xdata(), dtype=float)
        for line in ax.get_lines()
        if line.get_transform() is ax.transData or line.get_transform() == ax.transData
    ]
    xs = [x for x in xs if x.size]
    return np.concatenate(xs) if xs else np.array([])


@pytest.mark.parametrize("name", sorted(DRAWERS))
def test_caption_states_the_inputs(drawn, name):
    caption = drawn[name].caption
    what, sep, inputs = caption.partition(" Inputs: ")
    assert sep, f"{name}: caption without 'Inputs: ...': {caption!r}"
    assert len(what) > 40 and len(inputs) > 20 and caption.endswith(".")
    assert re.search(r"\d", inputs), f"{name}: the inputs name no value: {inputs!r}"
    # the report prints it as *caption*: a bare star would end the emphasis early
    assert not re.search(r"(?<!\\)\*", caption), f"{name}: unescaped * in {caption!r}"


@pytest.mark.parametrize("name", sorted(DRAWERS))
def test_integer_axes_have_integer_ticks(drawn, name):
    for ax in drawn[name].fig.axes:
        x = _data_x(ax)
        if not x.size or not np.all(np.isfinite(x)) or not np.all(x == np.round(x)):
            continue
        lo, hi = sorted(ax.get_xlim())
        ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
        assert ticks and all(float(t).is_integer() for t in ticks), (name, ticks)


@pytest.mark.parametrize("name", sorted(DRAWERS))
def test_axes_are_labelled(drawn, name):
    for ax in drawn[name].fig.axes:
        assert ax.get_xlabel() and ax.get_title(), name
    assert drawn[name].fig.axes[0].get_ylabel(), name


def test_truncation_error_ticks_at_the_orders_drawn(drawn):
    ax = drawn["truncation_error"].fig.axes[1]
    assert list(ax.get_xticks()) == list(figures.ERROR_ORDERS)


def test_error_vs_radius_states_its_inputs(drawn):
    from verify.builtins import FAVOR_FEATURES

    data = index.error_vs_radius_data()
    caption = drawn["error_vs_radius"].caption
    for text in (
        f"T = {index.FIGURE_T}",
        f"d = {index.FIGURE_D}",
        f"d_v = {index.FIGURE_DV}",
        "v ~ U(−1, 1)",
        f"m = {FAVOR_FEATURES}",
        f"max|v| = {data['max_abs_v']:.3f}",  # the dotted bound scales with it
        f"seed {index.FIGURE_SEED}",
    ):
        assert text in caption, text
    assert 0 < data["max_abs_v"] <= 1  # v ~ U(-1, 1)


def test_state_figure_labels_the_exact_crossover(drawn):
    """T* is state / (d + d_v) exactly (D5's crossover_ratio), not the rounded-up length."""
    from derivations import state_size as d5

    ax = drawn["state_vs_kv_cache"].fig.axes[0]
    labels = [t.get_text() for t in ax.texts if t.get_text().startswith("T*")]
    want = [f"T* = {float(d5.crossover_ratio(n, 64, 64)):,.1f}" for n in figures.STATE_ORDERS]
    assert labels == want
    assert "T* = 1,089.3" in labels  # N = 2: T* = 139425/128; the rounded-up length is 1,090
    vlines = sorted(line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == "--")
    assert vlines == [float(d5.crossover_ratio(n, 64, 64)) for n in figures.STATE_ORDERS]


def test_ratio_figure_keeps_ratios_below_the_axis(drawn):
    """A ratio below the first bin is counted in it (float64 has one, 1e-14, of its three)."""
    ax = drawn["ratio_distribution"].fig.axes[0]
    first = ax.patches[0].get_xy()  # float64's step outline: (x0, 0), (x0, h0), (x1, h0), ...
    assert first[1][0] == figures.RATIO_LOW and first[1][1] == 1


def test_markdown_captions_are_the_figure_captions():
    from verify.render.verification import render

    data = {
        "summary": {"pass": 0, "fail": 0, "skip": 0, "error": 0, "loose": 0, "failing": []},
        "max_examples": 7,
        "properties": [],
        "cells": [],
        "devices": [],
        "environment": {},
        "profile": "ci",
    }
    caption = figures.ratio_distribution_caption(max_examples=7, profile="ci")
    text = render(data, ("figures/ratio_distribution.png", caption))
    assert f"![observed/bound per dtype](figures/ratio_distribution.png)\n\n*{caption}*" in text
