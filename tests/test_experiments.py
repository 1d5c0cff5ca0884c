"""Tests of ``attn-theory experiment recall`` (issues 7, 14): task, training loop, plateau rule,
divergence labelling, paired tests and Holm's correction (against values computed by hand),
claim verdicts, and the report files. Training runs use a few steps only."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from functools import partial

import pytest
import torch

from verify.cli import main
from verify.experiments import DEFAULT_SEEDS, default_setups, quick_setups
from verify.experiments import payload as pl
from verify.experiments import recall as rc
from verify.experiments import stats as sx
from verify.experiments import summary as sm
from verify.render import experiments as rp

RUN_KEYS = {
    "setup", "form", "seed", "diverged", "diverged_step", "reason", "cause", "missing_eps",
    "accuracy", "best_accuracy", "final_loss", "eval_loss", "stop", "steps", "diagnostics",
    "seconds", "cpu_seconds", "curve",
}  # fmt: skip


def tiny_cfg(steps: int = 6, **task) -> rc.ExperimentConfig:
    cfg = rc.ExperimentConfig(task=rc.TaskConfig(**task)) if task else rc.ExperimentConfig()
    tc = replace(
        cfg.train, max_steps=steps, min_steps=steps, eval_size=32, eval_every=3, diag_size=8
    )
    return replace(cfg, train=tc)


def nan_attention(q, k, v, *, causal):
    return torch.full_like(v, float("nan"))


BROKEN = rc.Form("broken-nan", "custom", "returns NaN", nan_attention)


# ----------------------------------------------------------------------------- task


def test_make_batch_targets_are_the_paired_values():
    task = rc.TaskConfig(num_keys=10, num_values=7, num_pairs=5, num_queries=4)
    tokens, targets = rc.make_batch(task, 50, torch.Generator().manual_seed(3))
    assert tokens.shape == targets.shape == (50, task.seq_len) == (50, 14)
    for seq, tgt in zip(tokens.tolist(), targets.tolist()):
        pairs = seq[: 2 * task.num_pairs]
        keys, values = pairs[0::2], pairs[1::2]
        assert len(set(keys)) == len(keys) and all(0 <= x < 10 for x in keys)
        assert all(10 <= x < 17 for x in values)
        lookup = dict(zip(keys, values))
        queries = seq[2 * task.num_pairs :]
        assert len(set(queries)) == len(queries) == 4
        assert tgt[: 2 * task.num_pairs] == [-100] * 10
        assert tgt[2 * task.num_pairs :] == [lookup[q] for q in queries]


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"num_pairs": 0}, "num_pairs"),
        ({"num_keys": 4, "num_pairs": 5}, "num_pairs"),
        ({"num_pairs": 3, "num_queries": 4}, "num_queries"),
        ({"num_values": 2.0}, "num_values"),
    ],
)
def test_task_config_rejects_bad_sizes(kwargs, name):
    with pytest.raises(ValueError, match=name):
        rc.TaskConfig(**kwargs)


def test_learning_rate_warms_up_then_stays_constant():
    tc = rc.TrainConfig(warmup=10, lr=2.0)
    assert rc.lr_at(0, tc) == pytest.approx(0.2)
    assert rc.lr_at(9, tc) == pytest.approx(2.0)
    assert rc.lr_at(10, tc) == rc.lr_at(5000, tc) == 2.0


# ----------------------------------------------------------------------------- plateau rule


def _curve(accs, losses, every=100):
    return [
        {"step": every * (i + 1), "eval_accuracy": a, "eval_loss": l}
        for i, (a, l) in enumerate(zip(accs, losses))
    ]


PLATEAU = rc.TrainConfig(min_steps=400, patience=3, min_acc_gain=0.01, min_loss_gain=0.02)


def test_plateau_rule_on_a_synthetic_learning_curve():
    # chance until step 300, a transition, then flat at 0.99 from step 600
    accs = [0.02, 0.02, 0.02, 0.30, 0.90, 0.99, 0.99, 0.995, 0.99, 0.99]
    losses = [4.2, 4.1, 4.0, 2.5, 0.50, 0.05, 0.045, 0.04, 0.041, 0.039]
    stops = [
        rc.plateaued(_curve(accs[: i + 1], losses[: i + 1]), PLATEAU) for i in range(len(accs))
    ]
    # step 800: last three evaluations (600-800) gain 0.005 accuracy and 0.01 nats over the
    # best before (0.99 at 600? no: 'before' is 100-500, best 0.99 at step 600 is in the window)
    # -> the window 600..800 still contains the rise from 0.90; step 900 is the first whose
    # window (700..900) gains <= 0.01 accuracy and <= 0.02 nats over steps 100..600.
    assert stops == [False] * 8 + [True, True]


def test_plateau_rule_waits_for_min_steps_and_sees_slow_loss_decrease():
    flat = _curve([0.02] * 6, [4.2] * 6)  # flat from the start: stop at min_steps (400)
    assert [rc.plateaued(flat[: i + 1], PLATEAU) for i in range(6)] == [False] * 3 + [True] * 3
    # accuracy flat at chance but the loss still falls 0.03 per evaluation: not a plateau
    falling = _curve([0.02] * 8, [4.2 - 0.03 * i for i in range(8)])
    assert not any(rc.plateaued(falling[: i + 1], PLATEAU) for i in range(8))
    # a collapse after a peak is a plateau (no gain over the best before): training stops
    collapse = _curve([0.1, 0.5, 0.95, 0.9, 0.2, 0.1, 0.3], [3, 1, 0.3, 0.4, 3, 3.5, 2.8])
    assert rc.plateaued(collapse, PLATEAU)


# ----------------------------------------------------------------------------- paired tests


def test_sign_flip_p_values_by_hand():
    # d = (1, -2, 3): the 8 signed sums are 6, 0, 2, -4, 4, -2, 0, -6; observed 2
    assert sx.sign_flip_p([1, -2, 3]) == 6 / 8  # |sum| >= 2: 6, 2, -4, 4, -2, -6
    assert sx.sign_flip_p([1, -2, 3], "greater") == 3 / 8  # sum >= 2: 6, 2, 4
    assert sx.sign_flip_p([1, -2, 3], "less") == 6 / 8  # sum <= 2
    # one sign everywhere: the two extreme patterns of 2^n
    assert sx.sign_flip_p([0.1, 0.2, 0.3, 0.4, 0.5]) == 2 / 32 == 0.0625
    assert sx.sign_flip_p([0.1, 0.2, 0.3, 0.4, 0.5], "greater") == 1 / 32
    assert sx.sign_flip_p([0.01] * 10) == 2 / 1024 == sx.min_p(10)
    assert sx.sign_flip_p([0.0, 0.0, 0.0]) == 1.0
    # a tie with rounding in the sums still counts as extreme
    assert sx.sign_flip_p([0.1, 0.2, -0.3]) == 1.0


def test_equivalence_p_by_hand():
    assert sx.equivalence_p([0.001] * 10, 0.02) == 1 / 1024  # both one-sided tests extreme
    assert sx.equivalence_p([0.05] * 10, 0.02) == 1.0  # outside the margin: not equivalent
    # d - margin = (-0.01, -0.03, +0.01): sum -0.03; sums <= -0.03 are 3 of 8 -> 0.375;
    # d + margin = (0.03, 0.01, 0.05): all positive -> 1/8
    assert sx.equivalence_p([0.01, -0.01, 0.03], 0.02) == pytest.approx(3 / 8)
    with pytest.raises(ValueError, match="margin"):
        sx.equivalence_p([0.1], 0.0)


def test_beyond_margin_p_four_pairs_counted_by_hand():
    # d = (0.05, 0.03, -0.01, 0.04), margin 0.02, "above": the shifted d - 0.02 is
    # (0.03, 0.01, -0.03, 0.02), observed sum 0.03. In hundredths, the 16 sign patterns of the
    # magnitudes (3, 1, 3, 2) sum to
    #   ++++ 9   +++- 5   ++-+ 3   ++-- -1   +-++ 7   +-+- 3   +--+ 1   +--- -3
    #   -+++ 3   -++- -1  -+-+ -3  -+-- -7   --++ 1   --+- -3  ---+ -5  ---- -9
    # and 6 of them are >= 3 (9, 5, 3, 7, 3, 3): p = 6/16.
    d = [0.05, 0.03, -0.01, 0.04]
    assert sx.beyond_margin_p(d, 0.02, "above") == 6 / 16
    # the mirrored sample, "below": the same count with every sign reversed
    assert sx.beyond_margin_p([-x for x in d], 0.02, "below") == 6 / 16
    # d + 0.02 = (-0.01, -0.03, -0.02, -0.04): every shifted difference negative, so only the
    # observed pattern is as low: 1/16; the same sample is nowhere near "above" (16/16)
    low = [-0.03, -0.05, -0.04, -0.06]
    assert sx.beyond_margin_p(low, 0.02, "below") == 1 / 16
    assert sx.beyond_margin_p(low, 0.02, "above") == 1.0
    with pytest.raises(ValueError, match="direction"):
        sx.beyond_margin_p(d, 0.02, "beyond")
    with pytest.raises(ValueError, match="margin"):
        sx.beyond_margin_p(d, -0.02, "above")


def _brute_p(units: list[int], shift: int, alternative: str) -> float:
    """Independent exact p-value (integer units, no rounding): fraction of the 2^n sign patterns
    of |u_i + shift| whose sum is <= (less) or >= (greater) the observed sum."""
    import itertools

    x = [u + shift for u in units]
    obs = sum(x)
    sums = [
        sum(s * abs(v) for s, v in zip(signs, x))
        for signs in itertools.product((1, -1), repeat=len(x))
    ]
    hits = sum(t <= obs for t in sums) if alternative == "less" else sum(t >= obs for t in sums)
    return hits / len(sums)


#: per-seed differences (linear - exp, in thousandths) whose mean, -0.023, is beyond the margin
#: -0.02 and whose signs all agree (two-sided p = 2/1024), but which do not show a difference
#: beyond the margin (TOST p ~ 0.74, the case of P4 linear-relu-eps - softmax)
NOT_BEYOND = [-3, -10, -12, -15, -18, -22, -25, -30, -50, -45]


def test_a_mean_beyond_the_margin_is_not_a_difference_beyond_it():
    d = [u / 1000 for u in NOT_BEYOND]
    assert sx.mean(d) < -sm.MARGIN and sx.sign_flip_p(d) == 2 / 1024
    tost = max(_brute_p(NOT_BEYOND, 20, "greater"), _brute_p(NOT_BEYOND, -20, "less"))
    assert 0.7 < tost < 0.8 and sx.equivalence_p(d, sm.MARGIN) == pytest.approx(tost)
    below = _brute_p(NOT_BEYOND, 20, "less")
    assert below > sx.ALPHA and sx.beyond_margin_p(d, sm.MARGIN, "below") == pytest.approx(below)
    # the faulty twin, the earlier rule: the two-sided test decides and the point estimate lies
    # beyond the margin -- it calls this sample "below by more than the margin"
    assert sx.sign_flip_p(d) <= sx.ALPHA and sx.mean(d) < -sm.MARGIN


def _pair_runs(diffs: list[float], a: str = "linear-elu1", b: str = "softmax", base=0.95):
    return _runs("A", {b: lambda s: base, a: lambda s: base + diffs[s]}, seeds=range(len(diffs)))


def _outcome(diffs: list[float]) -> str:
    results = _pair_runs(diffs)
    tests = sm.adjust(sm.comparison(results, "A", "linear-elu1", "softmax"))
    return sm.outcome(tests)


def test_e3_counts_below_by_more_than_the_margin_only_when_its_shifted_test_decides():
    # the sample above: a mean of -0.023 on 10 of 10 seeds is undecided, not below the margin
    not_beyond = [u / 1000 for u in NOT_BEYOND]
    assert _outcome(not_beyond) == sm.UNDECIDED
    by, _ = _claims(_pair_runs(not_beyond), [("A", ["softmax", "linear-elu1"], True)])
    assert by["E3"]["verdict"] == sm.UNDECIDED  # the earlier rule read "agree"
    # clearly below by more than the margin: every shifted difference d + 0.02 negative
    clearly = [-0.05 - 0.001 * s for s in range(10)]
    assert _outcome(clearly) == sm.BELOW
    by, _ = _claims(_pair_runs(clearly), [("A", ["softmax", "linear-elu1"], True)])
    assert by["E3"]["verdict"] == sm.SUPPORTED
    # the symmetric cases, above: the mirrored samples
    assert _outcome([-x for x in not_beyond]) == sm.UNDECIDED
    above = [-x for x in clearly]
    assert _outcome(above) == sm.ABOVE
    by, _ = _claims(_pair_runs(above), [("A", ["softmax", "linear-elu1"], True)])
    assert by["E3"]["verdict"] == sm.NOT_SUPPORTED  # a linear form above: against "lags"
    # and within the margin: equivalent, also against "lags"
    within = [0.001 * ((-1) ** s) for s in range(10)]
    assert _outcome(within) == sm.EQUIVALENT


def test_outcome_reads_only_one_comparisons_adjusted_margin_tests():
    results = _pair_runs([0.05] * 10)
    raw = sm.comparison(results, "A", "linear-elu1", "softmax")
    assert [t["kind"] for t in raw] == list(sm.MARGIN_KINDS)
    with pytest.raises(ValueError, match="Holm-adjusted"):
        sm.outcome(raw)
    with pytest.raises(ValueError, match="tests"):
        sm.outcome(sm.adjust(raw)[:2])
    with pytest.raises(ValueError, match="kind"):
        sm.compare(results, "A", "linear-elu1", "softmax", kind="beyond")
    missing = sm.adjust(sm.comparison(results, "A", "linear-elu1", "exp-l2"))
    assert sm.outcome(missing) == sm.NOT_MEASURED


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04: 3 x 0.01 = 0.03; 2 x 0.03 = 0.06; 1 x 0.04 -> max(0.06, 0.04)
    assert sx.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert sx.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert sx.holm([]) == []


def test_stats_reject_bad_input():
    with pytest.raises(ValueError, match="d"):
        sx.sign_flip_p([])
    with pytest.raises(ValueError, match="alternative"):
        sx.sign_flip_p([1.0], "both")
    with pytest.raises(ValueError, match="finite"):
        sx.sign_flip_p([float("nan")])


def test_default_seeds_can_decide_the_families_they_are_used_for():
    n = len(DEFAULT_SEEDS)
    assert n >= 5
    # the largest Holm family (an ordering of 14 forms: 13 neighbour pairs) can still decide
    assert sx.min_p(n) <= sx.ALPHA / 13
    assert sx.min_p(5) > sx.ALPHA  # at 5 seeds nothing can be decided two-sided


# ----------------------------------------------------------------------------- diagnostics


def test_zero_denominator_is_labelled_missing_eps_0_over_0():
    from verify.attention import linear_attention

    relu = rc.builtin_forms()["linear-relu"]
    q = torch.tensor([[[[-1.0, -2.0], [1.0, 0.5], [0.3, 1.0]]]])  # row 0: relu(q) = 0
    k = torch.tensor([[[[1.0, 1.0], [0.5, 2.0], [1.0, 0.0]]]])
    v = torch.tensor([[[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]]])
    out = linear_attention(q, k, v, causal=True, feature_map="relu")
    assert torch.isnan(out[0, 0, 0]).all() and torch.isfinite(out[0, 0, 1:]).all()  # real 0/0
    diag = rc.attention_diagnostics(relu, q, k, v)
    assert (diag["zero_div_00"], diag["zero_div_x0"], diag["min_abs_divisor"]) == (1, 0, 0.0)
    cause, eps = rc.divergence_cause(diag)
    assert eps and cause.startswith("missing eps: 0/0")
    # the same inputs with eps: no vanishing divisor, not a missing eps
    diag_eps = rc.attention_diagnostics(rc.builtin_forms()["linear-relu-eps"], q, k, v)
    assert diag_eps["zero_div_00"] == 0 and diag_eps["min_abs_divisor"] == rc.RELU_EPS
    assert rc.divergence_cause(diag_eps)[1] is False


def test_signed_denominator_x_over_0_and_sign_changes():
    # identity features, sum denominator: D_1 = q_1.k_0 + q_1.k_1 = 1 - 1 = 0 with N_1 = -1
    form = rc.Form("id-sum", "custom", "identity / sum", None, kernel="identity")
    q = torch.tensor([[[[1.0], [1.0], [1.0]]]])
    k = torch.tensor([[[[1.0], [-1.0], [-1.0]]]])
    v = torch.tensor([[[[1.0], [2.0], [0.0]]]])
    diag = rc.attention_diagnostics(form, q, k, v)
    assert diag["zero_div_x0"] == 1 and diag["zero_div_00"] == 0
    assert rc.divergence_cause(diag) == ("missing eps: x/0 (divisor exactly 0 in 1 row(s))", True)
    # D = (1, 0, -1): one of three rows negative, the row changes sign once (through 0)
    assert diag["neg_D_fraction"] == pytest.approx(1 / 3)
    assert diag["sign_change_rows"] == 1.0 and diag["radius"] == 1.0
    # a divisor 1e-8 against a numerator ~1: |o| = 1e8 >= 1e7, also a missing eps
    k2 = torch.tensor([[[[1.0], [-1.0 + 1e-8], [0.5]]]], dtype=torch.float64)
    v2 = torch.tensor([[[[1.0], [0.0], [1.0]]]], dtype=torch.float64)  # N_1 = 1, D_1 = 1e-8
    cause, eps = rc.divergence_cause(rc.attention_diagnostics(form, q.double(), k2, v2))
    assert eps and "vanishing" in cause


def test_softmax_diagnostics_radius_and_positive_denominator():
    soft = rc.builtin_forms()["softmax"]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 4, generator=g) for _ in range(3))
    diag = rc.attention_diagnostics(soft, q, k, v)
    s = (q.double() @ k.double().transpose(-1, -2)) / 2.0  # c = 1/sqrt(4)
    expect = s.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), 0).abs().max()
    assert diag["radius"] == pytest.approx(float(expect))
    assert diag["neg_D_fraction"] == 0.0 and diag["sign_change_rows"] == 0.0
    assert rc.divergence_cause(diag) == (
        f"no vanishing divisor at the diverging step (score radius {diag['radius']:.3g})",
        False,
    )
    assert rc.attention_diagnostics(BROKEN, q, k, v) is None


# ----------------------------------------------------------------------------- forms, training


def test_builtin_forms_compute_what_their_names_say():
    forms = rc.builtin_forms()
    assert tuple(forms) == rc.FORM_NAMES
    assert [forms[f"taylor-{n}"].order for n in range(1, 7)] == [1, 2, 3, 4, 5, 6]
    assert [n for n, f in forms.items() if f.signed] == [
        "taylor-1", "taylor-3", "taylor-5", "linear-relu", "linear-relu-eps",
        "linear-identity-l2",
    ]  # fmt: skip
    from verify.attention import linear_attention, softmax_attention, taylor_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 4, generator=g, dtype=torch.float64) for _ in range(3))
    expect = {
        "softmax": softmax_attention(q, k, v, causal=True),
        "exp-rms": softmax_attention(q, k, v, causal=True, denominator="rms"),
        "taylor-5": taylor_attention(q, k, v, order=5, causal=True),
        "linear-relu-eps": linear_attention(q, k, v, causal=True, feature_map="relu", eps=1e-6),
        "linear-identity-l2": linear_attention(
            q, k, v, causal=True, feature_map="identity", denominator="l2"
        ),
    }
    for name, out in expect.items():
        assert torch.equal(forms[name].fn(q, k, v, causal=True), out), name
    assert not torch.allclose(forms["softmax"].fn(q, k, v, causal=True), expect["exp-rms"])


def test_training_is_deterministic_logs_diagnostics_and_restores_global_state():
    cfg = tiny_cfg(6)
    before = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
    a = rc.train_one(rc.builtin_forms()["taylor-3"], 5, cfg)
    b = rc.train_one(rc.builtin_forms()["taylor-3"], 5, cfg)
    assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == before
    assert not a.diverged and a.stop in ("plateau", "cap") and a.steps == 6
    assert a.curve == b.curve and a.accuracy == b.accuracy
    assert [c["step"] for c in a.curve] == [3, 6]
    assert set(a.curve[0]["diag"]) == set(rc.CURVE_DIAG)
    assert a.diagnostics["radius"] > 0 and 0 <= a.diagnostics["neg_D_fraction"] <= 1
    assert a.best_accuracy == max(c["eval_accuracy"] for c in a.curve)


def test_a_zero_denominator_in_training_is_a_missing_eps_divergence():
    # relu features of 0 * q are all 0: every row is 0/0 at the first step
    form = rc.Form(
        "relu-scale0", "custom", "relu, scale 0",
        partial(_linear, feature_map="relu", scale=0.0), kernel="relu", scale=0.0,
    )  # fmt: skip
    res = rc.train_one(form, 0, tiny_cfg(6))
    assert res.diverged and res.diverged_step == 0 and res.missing_eps
    assert res.cause.startswith("missing eps: 0/0") and "non-finite" in res.reason
    assert sm.score(res) is None  # excluded, never evidence


def _linear(q, k, v, *, causal, **kw):
    from verify.attention import linear_attention

    return linear_attention(q, k, v, causal=causal, **kw)


def test_nan_attention_is_a_genuine_divergence_scored_zero():
    res = rc.train_one(BROKEN, 0, tiny_cfg(6))
    assert res.diverged and res.diverged_step == 0 and not res.missing_eps
    assert "attention output had non-finite" in res.reason
    assert res.cause.startswith("cause unknown") and sm.score(res) == 0.0


def test_run_experiment_validates_arguments():
    cfg = tiny_cfg(2)
    soft = rc.builtin_forms()["softmax"]
    one = rc.Setup("s", "test", cfg, (soft,))
    with pytest.raises(ValueError, match="setups"):
        rc.run_experiment([], [0])
    with pytest.raises(ValueError, match="setups"):
        rc.run_experiment([one, one], [0])
    with pytest.raises(ValueError, match="forms"):
        rc.run_experiment([rc.Setup("s", "test", cfg, (soft, soft))], [0])
    with pytest.raises(ValueError, match="seeds"):
        rc.run_experiment([one], [])
    with pytest.raises(ValueError, match="workers"):
        rc.run_experiment([one], [0], workers=0)


def test_worker_processes_give_the_same_results():
    setup = rc.Setup("s", "test", tiny_cfg(3), (rc.builtin_forms()["softmax"], BROKEN))
    one = rc.run_experiment([setup], [0], workers=1)
    two = rc.run_experiment([setup], [0], workers=2)  # softmax in a spawned process
    key = [(r.setup, r.form, r.seed, r.diverged, r.accuracy, r.curve) for r in one]
    assert key == [(r.setup, r.form, r.seed, r.diverged, r.accuracy, r.curve) for r in two]


def test_default_setups_two_task_sizes_and_a_set_up_without_layernorm():
    setups = default_setups()
    assert [s.name for s in setups] == ["P8", "P4", "P8-noLN"]
    assert [s.config.task.num_pairs for s in setups] == [8, 4, 8]
    assert [s.config.model.layernorm for s in setups] == [True, True, False]
    assert [f.name for f in setups[0].forms] == list(rc.FORM_NAMES)
    assert default_setups(["taylor-6"])[0].forms[0].order == 6
    assert len(default_setups(["taylor-6"])) == 2  # the no-LN set-up has no Taylor form


# ----------------------------------------------------------------------------- claims


def _runs(setup: str, accs: dict, seeds=range(10), eps_forms=()) -> list[rc.RunResult]:
    """Constructed runs: accs[form] is a function of the seed (None: diverged)."""
    out = []
    for form, fn in accs.items():
        for s in seeds:
            a = fn(s)
            div = a is None
            out.append(
                rc.RunResult(
                    form, s, div, 3 if div else None, "x" if div else None, a, 0.1, None, [],
                    1.0, 0.5, setup=setup, stop="diverged" if div else "plateau",
                    steps=600, missing_eps=div and form in eps_forms,
                )
            )  # fmt: skip
    return out


def _claims(results, setups):
    pairs = [(name, [rc.builtin_forms()[f] for f in forms]) for name, forms, _ in setups]
    meta = [{"name": name, "layernorm": ln} for name, _, ln in setups]
    summ = sm.summarize(pairs, results)
    return {c["id"]: c for c in sm.claims(summ, results, meta)}, summ


def test_claim_verdicts_follow_the_tests():
    noise = lambda s: 0.001 * ((s * 7) % 5 - 2)  # noqa: E731 -- small seed-to-seed noise
    accs = {
        "softmax": lambda s: 0.98 + noise(s),
        "exp-l2": lambda s: 0.98 + noise(s) + 0.002 * (-1) ** s,  # equivalent
        "exp-rms": lambda s: 0.80 + noise(s),  # 0.18 below: differs
        "exp-none": lambda s: 0.99,
        "taylor-1": lambda s: 0.05 + noise(s),
        "taylor-2": lambda s: 0.90 + noise(s),
        "taylor-3": lambda s: 0.30 + noise(s),  # a decided decrease 2 -> 3
        "linear-elu1": lambda s: 0.20 + noise(s),
        "linear-relu": lambda s: None,  # every run a missing-eps divergence
        "linear-relu-eps": lambda s: 0.10 + noise(s),
        "linear-identity-l2": lambda s: 0.05 + noise(s),
    }
    results = _runs("A", accs, eps_forms=("linear-relu",))
    results += _runs("N", {"softmax": accs["softmax"], "exp-none": lambda s: 0.981})
    by, summ = _claims(results, [("A", list(accs), True), ("N", ["softmax", "exp-none"], False)])
    assert by["E1"]["verdict"] == sm.MIXED  # exp-l2 equivalent, exp-rms below by > 0.02
    assert by["E2"]["verdict"] == sm.MIXED and by["E2"]["setups"] == {"A": sm.MIXED}
    assert by["E3"]["verdict"] == sm.SUPPORTED  # relu not measured (missing eps), the rest below
    relu = [t for t in by["E3"]["tests"] if t["a"] == "linear-relu"][0]
    assert relu["p"] is None and relu["n"] == 0
    assert by["E4"]["verdict"] == sm.NOT_SUPPORTED  # exp-none equivalent to softmax without LN
    # exp-none at 0.981 and softmax at 0.98: both at the ceiling, and the verdict says so
    assert by["E4"]["qualifier"].startswith("at the ceiling") and not by["E3"]["qualifier"]
    assert by["E4"]["setups"]["A"] == sm.NOT_TESTABLE
    for c in by.values():
        assert c["verdict"] in sm.VERDICTS and c["summary"].startswith(
            (c["verdict"], sm.NOT_TESTABLE)
        )
        # every test of a claim is Holm-adjusted within the claim's family
        run = [t for t in c["tests"] if t["p"] is not None]
        assert all(t["family_size"] == len(run) and t["p_holm"] >= t["p"] for t in run)
    # the relu form is excluded, not scored 0
    relu_s = [s for s in summ if s.form == "linear-relu"][0]
    assert (relu_s.scored, relu_s.missing_eps, relu_s.mean) == (0, 10, None)


def test_without_a_no_layernorm_set_up_the_norm_claim_is_not_testable():
    results = _runs("A", {"softmax": lambda s: 0.98, "exp-none": lambda s: 0.99})
    by, _ = _claims(results, [("A", ["softmax", "exp-none"], True)])
    assert by["E4"]["verdict"] == sm.NOT_TESTABLE
    assert "LayerNorm" in by["E4"]["evidence"]


def test_few_seeds_leave_everything_undecided():
    # five seeds, every difference of one sign: one-sided p = 1/32, and Holm over the
    # comparison's three tests makes it 3/32 > 0.05 (two-sided: 0.0625 before any correction)
    accs = {"softmax": lambda s: 0.9, "linear-elu1": lambda s: 0.1}
    results = _runs("A", accs, seeds=range(5))
    by, summ = _claims(results, [("A", list(accs), True)])
    t = [t for t in by["E3"]["tests"] if t["kind"] == "below"][0]
    assert t["p"] == 1 / 32 and t["p_holm"] == 3 / 32 and not t["decided"]
    assert by["E3"]["verdict"] == sm.UNDECIDED
    order = sm.ordering(summ, results, "A")
    assert order["line"] == "softmax 0.900 ~ linear-elu1 0.100"


def test_ordering_joins_decided_neighbours_with_greater():
    accs = {
        "softmax": lambda s: 0.95 + 0.001 * s,
        "exp-l2": lambda s: 0.95 + 0.001 * s - 0.001 * (s % 2),  # 5 ties, 5 lower: p = 1/16
        "linear-elu1": lambda s: 0.2,
    }
    results = _runs("A", accs)
    _, summ = _claims(results, [("A", list(accs), True)])
    order = sm.ordering(summ, results, "A")
    assert order["forms"] == ["softmax", "exp-l2", "linear-elu1"]
    assert [t["decided"] for t in order["tests"]] == [False, True]
    assert " ~ exp-l2 " in order["line"] and " > linear-elu1 " in order["line"]
    assert order["tests"][1]["p"] == 2 / 1024 and order["tests"][1]["p_holm"] == 4 / 1024


# ----------------------------------------------------------------------------- report files


def test_quick_writes_to_a_scratch_directory_and_prints_no_verdicts(tmp_path, monkeypatch, capsys):
    import tempfile

    work = tmp_path / "work"
    (work / "reports" / "figures").mkdir(parents=True)
    (work / "reports" / "experiments.md").write_text("committed\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    code = main(["experiment", "recall", "--quick", "--forms", "softmax", "--seeds", "0",
                 "--max-steps", "3", "--workers", "1"])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "no verdicts" in out
    for word in ("[supported", "[not supported", "[mixed", "[undecided]", " > ", " ~ "):
        assert word not in out
    assert (work / "reports" / "experiments.md").read_text() == "committed\n"
    assert sorted(p.name for p in (work / "reports").rglob("*")) == ["experiments.md", "figures"]
    written = [p for p in scratch.iterdir() if p.name.startswith("attn-theory-experiment-")]
    docs = [p / "experiments.json" for p in written if (p / "experiments.json").exists()]
    assert len(docs) == 1
    doc = json.loads(docs[0].read_text())
    assert doc["quick"] is True and doc["claims"] == [] and doc["orderings"] == []
    assert doc["rules_fixed"].startswith("fixed before the runs")
    assert [s["name"] for s in doc["setups"]] == ["P8", "P4"]
    for r in doc["runs"]:
        assert set(r) == RUN_KEYS
    md = (docs[0].parent / "experiments.md").read_text()
    assert "No verdicts" in md and rp.CURVES in md
    assert not list(scratch.glob("attn-theory-experiment-runs-*.jsonl"))  # runs log removed


def test_quick_setups_are_short():
    setups = quick_setups()
    assert [s.name for s in setups] == ["P8", "P4"]
    assert all(s.config.train.max_steps <= 60 for s in setups)


def test_report_of_a_full_document_and_its_recomputation(tmp_path):
    accs = {"softmax": lambda s: 0.9 + 0.01 * s, "linear-relu": lambda s: None}
    results = _runs("P8", accs, seeds=range(3), eps_forms=("linear-relu",))
    setups = [st for st in default_setups(list(accs)) if st.name == "P8"]
    doc = pl.payload(
        setups, [0, 1, 2], results, quick=False, workers=1, total_seconds=1.0, command="test"
    )
    rp.write(tmp_path, doc)
    saved = json.loads((tmp_path / "experiments.json").read_text())
    assert saved["schema"] == pl.SCHEMA and [c["id"] for c in saved["claims"]] == [
        "E1", "E2", "E3", "E4",
    ]  # fmt: skip
    assert pl.recompute(saved)["claims"] == saved["claims"]
    md = (tmp_path / "experiments.md").read_text()
    assert "excluded (missing eps)" in md and "Holm" in md
    assert "Ordering (P8): softmax 0.910 ; no score" in md
    for fig in (rp.FIGURE, rp.CURVES):
        assert (tmp_path / fig).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_from_runs_rewrites_the_report_without_training(tmp_path, capsys):
    accs = {"softmax": lambda s: 0.9, "exp-l2": lambda s: 0.9}
    results = _runs("P8", accs, seeds=range(2))
    results += _runs("P8", {"softmax": accs["softmax"]}, seeds=[2])  # seed 2 incomplete
    log = tmp_path / "runs.jsonl"
    log.write_text("".join(json.dumps(pl.run_record(r)) + "\n" for r in results))
    out = tmp_path / "out"
    assert main(["experiment", "recall", "--from-runs", str(log), "--out", str(out)]) == 0
    doc = json.loads((out / "experiments.json").read_text())
    assert [s["name"] for s in doc["setups"]] == ["P8"] and doc["seeds"] == [0, 1]
    printed = capsys.readouterr().out
    assert len(doc["runs"]) == 4 and "[undecided] E1" in printed
    assert "seeds with missing runs left out: [2]" in printed
    assert "2 of the planned 10 seeds" in doc["note"]
    assert doc["note"] in (out / "experiments.md").read_text()
    assert pl.recompute(doc)["note"] == doc["note"]
    assert main(["experiment", "recall", "--from-runs", str(tmp_path / "nope.json")]) == 2


def test_from_runs_on_a_document_keeps_its_runs_environment_and_states_when_rules_were_fixed(
    tmp_path, capsys
):
    from verify.cli import experiment as cli

    accs = {"softmax": lambda s: 0.9, "linear-elu1": lambda s: 0.5}
    results = _runs("P8", accs, seeds=range(3))
    setups = [st for st in default_setups(list(accs)) if st.name == "P8"]
    doc = pl.payload(
        setups, [0, 1, 2], results, quick=False, workers=1, total_seconds=1.0, command="test"
    )
    doc["environment"] = {**doc["environment"], "torch_cpu_capability": "where the runs ran"}
    saved = tmp_path / "experiments.json"
    saved.write_text(json.dumps(doc))
    out = tmp_path / "out"
    argv = ["experiment", "recall", "--from-runs", str(saved), "--out", str(out), "--quiet"]
    assert main([*argv, "--note", "rule X changed after the runs"]) == 0
    new = json.loads((out / "experiments.json").read_text())
    assert new["environment"]["torch_cpu_capability"] == "where the runs ran"
    assert new["runs"] == doc["runs"] and new["note"] == "rule X changed after the runs"
    assert new["rules_fixed"].startswith(cli.RULES_AFTER) and "note" in new["rules_fixed"]
    md = (out / "experiments.md").read_text()
    assert "fixed in `verify/experiments/summary.py` before the runs" not in md
    assert f"(`verify/experiments/summary.py`; {new['rules_fixed']}):" in md
    assert "**at this scale** only: 1-layer models" in md


def test_cli_rejects_unknown_forms(tmp_path, capsys):
    assert main(["experiment", "recall", "--forms", "softmax,bogus", "--out",
                 str(tmp_path)]) == 2  # fmt: skip
    assert "--forms" in capsys.readouterr().err
    assert not (tmp_path / "experiments.md").exists()


def test_claims_page_takes_experiment_verdicts_without_counting_the_undecided():
    from verify.render import claims as cl

    claim = cl.Claim("X", "a claim", "src", ("D1",))
    ders = [{"id": "D1", "status": "proved"}]
    untestable = {"id": "E4", "claim": "exp …", "verdict": sm.NOT_TESTABLE, "evidence": "LN"}
    verdict, why = cl._verdict(claim, ders, [], [untestable])
    assert verdict == "confirmed" and "not decided by the experiment: experiment E4" in why
    against = dict(untestable, verdict=sm.NOT_SUPPORTED, evidence="equivalent")
    verdict, why = cl._verdict(claim, ders, [], [against])
    assert verdict == "not supported at this scale (in this experiment)"
    assert why == "experiment E4 (exp …): not supported at this scale — equivalent"
    # the claims page knows every decided verdict of the experiment's vocabulary
    assert set(cl.EXPERIMENT_DECIDED) == {sm.SUPPORTED, sm.NOT_SUPPORTED, sm.MIXED}
    mixed = dict(untestable, verdict=sm.MIXED, evidence="both")
    assert cl._verdict(claim, ders, [], [mixed])[0] == "confirmed with conditions"
    assert math.isfinite(len(why))


def test_claims_page_prefixes_match_the_experiment_claims():
    from verify.render import claims as cl

    results = _runs("A", {"softmax": lambda s: 0.9}, seeds=range(2))
    by, _ = _claims(results, [("A", ["softmax"], True)])
    statements = [c["claim"] for c in by.values()]
    linked = [pre for c in cl.CLAIMS for pre in c.experiments]
    assert linked, "no claim links the experiment"
    for pre in linked:
        assert any(s.startswith(pre) for s in statements), pre
    got = cl._experiment_results({"claims": list(by.values())}, ("exp without a normalization",))
    assert [(e["id"], e["evidence"]) for e in got] == [("E4", by["E4"]["summary"])]


def test_report_reads_committed_results_and_never_trains():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for rel in ("verify/cli/report.py", "verify/render/claims.py", "verify/render/index.py"):
        tree = ast.parse((root / rel).read_text())
        names = [
            n.module if isinstance(n, ast.ImportFrom) else a.name
            for n in ast.walk(tree)
            if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in n.names
        ]
        assert not [m for m in names if m and m.startswith("verify.experiments")], rel
        assert "verify.cli.experiment" not in names, rel
