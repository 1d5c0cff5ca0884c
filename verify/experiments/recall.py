"""Multi-query associative recall (MQAR) with tiny attention models, one per attention form.

The task (Arora et al. 2023, "Zoology", arXiv 2312.04927, section 3): a sequence of P key-value
token pairs ``k_1 v_1 k_2 v_2 ... k_P v_P`` followed by Q queries, each a key from the context;
the target at a query position is the value paired with that key earlier in the sequence.
Accuracy is the fraction of query positions whose arg-max prediction is the right value.

The model: token + learned position embeddings plus an embedding of the previous token (a width-2
causal convolution, ``ModelConfig.token_shift``), ``n_layers`` pre-LayerNorm blocks (attention and
a GELU MLP, both residual), a final LayerNorm and a linear read-out over the vocabulary
(``ModelConfig.layernorm=False`` removes every LayerNorm: the set-up in which an unnormalized
attention output reaches the read-out unrescaled). The
attention layer calls the suite's own implementations (``verify.attention``, parallel form,
``causal=True``), so the experiment exercises the functions the property checks verify. Only the
attention form changes between runs; every other hyperparameter is fixed in ``ExperimentConfig``
before any run.

Runs are deterministic: one torch thread, ``torch.use_deterministic_algorithms(True)``,
``torch.manual_seed(seed)`` for the weights, and the data from ``torch.Generator``s seeded from the
seed alone (the same batches for every form at a given seed). Training stops at a plateau of the
evaluation metrics (``plateaued``) or at ``max_steps``. A run whose loss or gradient norm becomes
non-finite, or whose loss exceeds ``divergence_loss``, is recorded as diverged at that step with
its cause (``divergence_cause``: a vanishing denominator without eps is labelled as such) and the
experiment continues. Every evaluation also logs the quantities that explain the attention's
behaviour (``attention_diagnostics``): the score radius, the denominator D_t and its signs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from verify.experiments.diagnostics import (
    CURVE_DIAG,
    EPS_RATIO,
    attention_diagnostics,
    divergence_cause,
)

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

#: offsets that separate the data streams of one seed (training batches, evaluation set)
_TRAIN_STREAM = 1_000_003
_EVAL_STREAM = 2_000_003


# ----------------------------------------------------------------------------- task


@dataclass(frozen=True)
class TaskConfig:
    """MQAR sizes. Token ids: keys ``[0, num_keys)``, values ``[num_keys, num_keys + num_values)``.

    Keys of one sequence are distinct (drawn without replacement), values are drawn with
    replacement; the Q queries are distinct keys of the context in random order (Q <= P).
    """

    num_keys: int = 64
    num_values: int = 64
    num_pairs: int = 16
    num_queries: int = 16

    def __post_init__(self) -> None:
        for name in ("num_keys", "num_values", "num_pairs", "num_queries"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        if self.num_pairs > self.num_keys:
            raise ValueError(
                f"num_pairs: expected <= num_keys ({self.num_keys}) so keys are distinct, "
                f"got {self.num_pairs}"
            )
        if self.num_queries > self.num_pairs:
            raise ValueError(
                f"num_queries: expected <= num_pairs ({self.num_pairs}), got {self.num_queries}"
            )

    @property
    def vocab_size(self) -> int:
        return self.num_keys + self.num_values

    @property
    def seq_len(self) -> int:
        return 2 * self.num_pairs + self.num_queries


def make_batch(
    task: TaskConfig, batch: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """One MQAR batch drawn from ``generator``.

    Returns:
        tokens: (batch, T) int64, T = 2P + Q.
        targets: (batch, T) int64; the value id at the Q query positions, -100 (ignored by the
            loss and the accuracy) elsewhere.
    """
    P, Q = task.num_pairs, task.num_queries
    keys = torch.rand(batch, task.num_keys, generator=generator).argsort(-1)[:, :P]
    values = task.num_keys + torch.randint(task.num_values, (batch, P), generator=generator)
    order = torch.rand(batch, P, generator=generator).argsort(-1)[:, :Q]
    tokens = torch.empty(batch, task.seq_len, dtype=torch.int64)
    tokens[:, 0 : 2 * P : 2] = keys
    tokens[:, 1 : 2 * P : 2] = values
    tokens[:, 2 * P :] = keys.gather(1, order)
    targets = torch.full_like(tokens, -100)
    targets[:, 2 * P :] = values.gather(1, order)
    return tokens, targets


# ----------------------------------------------------------------------------- attention forms


@dataclass(frozen=True)
class Form:
    """One attention form: a name, its family and Taylor order (for the figure), the call.

    ``fn(q, k, v)`` maps (B, H, T, d_h) x3 to (B, H, T, d_h); ``call`` says in words which suite
    function and arguments it is (written to the report). ``kernel`` (``exp``, ``taylor``,
    ``elu1``, ``relu``, ``identity``), ``denominator``, ``eps`` and ``scale`` describe the call
    for the diagnostics (``attention_diagnostics``); a custom form (``kernel=None``) gets none.
    """

    name: str
    family: str  # softmax | exp-norm | taylor | linear | custom
    call: str
    fn: AttentionFn = field(repr=False, compare=False)
    order: int | None = None
    kernel: str | None = None
    denominator: str = "sum"
    eps: float = 0.0
    scale: float | None = None  # the call's scale argument (None: the default)

    @property
    def signed(self) -> bool:
        """Can D_t = sum_s kappa(x_ts) vanish or change sign? Odd Taylor orders (kappa_N has a
        real root), relu (phi(q).phi(k) = 0 when the supports are disjoint), identity (q.k)."""
        if self.kernel == "taylor":
            return self.order is not None and self.order % 2 == 1
        return self.kernel in ("relu", "identity")


__all__ = [
    "CURVE_DIAG", "EPS_RATIO", "ExperimentConfig", "Form", "ModelConfig", "RunResult", "Setup",
    "TaskConfig", "TrainConfig", "attention_diagnostics", "builtin_forms", "divergence_cause",
    "make_batch", "plateaued", "run_experiment", "train_one",
]  # fmt: skip

#: the eps of the ``linear-relu-eps`` control (the relu form without the 0/0 of a missing eps)
RELU_EPS = 1e-6


def builtin_forms() -> dict[str, Form]:
    """The forms of issues 7 and 14, all through ``verify.attention`` (parallel form, causal)."""
    from functools import partial

    from verify.attention import linear_attention, softmax_attention, taylor_attention

    forms = [
        Form(
            "softmax", "softmax", 'softmax_attention(denominator="sum")', softmax_attention,
            kernel="exp",
        ),
    ]  # fmt: skip
    for den in ("l2", "rms", "none"):
        forms.append(
            Form(
                f"exp-{den}",
                "exp-norm",
                f'softmax_attention(denominator="{den}")',
                partial(softmax_attention, denominator=den),
                kernel="exp",
                denominator=den,
            )
        )
    for n in (1, 2, 3, 4, 5, 6):
        forms.append(
            Form(
                f"taylor-{n}",
                "taylor",
                f'taylor_attention(order={n}, denominator="sum")',
                partial(taylor_attention, order=n, denominator="sum"),
                order=n,
                kernel="taylor",
            )
        )
    for fmap, den, eps in (
        ("elu1", "sum", 0.0),
        ("relu", "sum", 0.0),
        ("relu", "sum", RELU_EPS),
        ("identity", "l2", 0.0),
    ):
        name = f"linear-{fmap}" + ("" if den == "sum" else f"-{den}") + ("-eps" if eps else "")
        extra = f", eps={eps:g}" if eps else ""
        forms.append(
            Form(
                name,
                "linear",
                f'linear_attention(feature_map="{fmap}", denominator="{den}"{extra})',
                partial(linear_attention, feature_map=fmap, denominator=den, eps=eps),
                kernel=fmap,
                denominator=den,
                eps=eps,
            )
        )
    return {f.name: f for f in forms}


#: the default order of the forms in the tables
FORM_NAMES = (
    "softmax",
    "exp-l2",
    "exp-rms",
    "exp-none",
    "taylor-1",
    "taylor-2",
    "taylor-3",
    "taylor-4",
    "taylor-5",
    "taylor-6",
    "linear-elu1",
    "linear-relu",
    "linear-relu-eps",
    "linear-identity-l2",
)


# ----------------------------------------------------------------------------- model


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the tiny decoder: width ``d_model`` = ``n_heads`` x head dimension.

    ``token_shift`` adds a second embedding of the *previous* token to each position (a width-2
    causal convolution on the one-hot tokens, the "short convolution" of Zoology's models). It
    puts the key beside its value at the value's position, so one attention layer can do the
    look-up (query = key token, key = previous token, value = current token) and the experiment
    measures the attention form's recall rather than its ability to learn a previous-token head.

    ``layernorm=False`` removes the three LayerNorms (before attention, before the MLP, before
    the read-out): the attention output then reaches the read-out with its own scale.
    """

    d_model: int = 64
    n_heads: int = 2
    n_layers: int = 1
    mlp_ratio: int = 4
    token_shift: bool = True
    layernorm: bool = True

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class Attention(nn.Module):
    """Multi-head causal self-attention whose core is ``fn(q, k, v, causal=True)``.

    Each forward keeps its (detached) q, k, v in ``last_qkv`` for the diagnostics.
    """

    def __init__(self, cfg: ModelConfig, fn: AttentionFn) -> None:
        super().__init__()
        self.cfg = cfg
        self.fn = fn
        self.nonfinite = False  # set by each forward: did the attention output have inf/nan?
        self.last_qkv: tuple[torch.Tensor, ...] | None = None
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        H, dh = self.cfg.n_heads, self.cfg.head_dim
        q, k, v = self.qkv(x).view(B, T, 3, H, dh).permute(2, 0, 3, 1, 4).unbind(0)
        self.last_qkv = (q.detach(), k.detach(), v.detach())
        o = self.fn(q, k, v, causal=True)  # (B, H, T, dh)
        self.nonfinite = not bool(torch.isfinite(o.detach()).all())
        return self.out(o.transpose(1, 2).reshape(B, T, H * dh))


def _norm(cfg: ModelConfig) -> nn.Module:
    return nn.LayerNorm(cfg.d_model) if cfg.layernorm else nn.Identity()


class Block(nn.Module):
    """Pre-LayerNorm residual block: causal attention, then a GELU MLP."""

    def __init__(self, cfg: ModelConfig, fn: AttentionFn) -> None:
        super().__init__()
        self.ln1 = _norm(cfg)
        self.attn = Attention(cfg, fn)
        self.ln2 = _norm(cfg)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model),
            nn.GELU(),
            nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class RecallModel(nn.Module):
    """Token + position embeddings, ``n_layers`` blocks, LayerNorm, read-out: (B, T) -> logits."""

    def __init__(self, cfg: ModelConfig, task: TaskConfig, fn: AttentionFn) -> None:
        super().__init__()
        self.tok = nn.Embedding(task.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(task.seq_len, cfg.d_model)
        self.prev = nn.Embedding(task.vocab_size, cfg.d_model) if cfg.token_shift else None
        self.blocks = nn.ModuleList(Block(cfg, fn) for _ in range(cfg.n_layers))
        self.ln_f = _norm(cfg)
        self.head = nn.Linear(cfg.d_model, task.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(pos)
        if self.prev is not None:  # width-2 causal convolution on the one-hot tokens
            x = x + nn.functional.pad(self.prev(tokens[:, :-1]), (0, 0, 1, 0))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def attentions(self) -> list[Attention]:
        return [b.attn for b in self.blocks]


# ----------------------------------------------------------------------------- training


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings shared by every form (fixed before any run; no per-form tuning).

    AdamW with linear warm-up over ``warmup`` steps, then a constant learning rate (training
    length is set by the plateau criterion, so no schedule tied to a step count); gradient norm
    clipped at ``clip``. Evaluation every ``eval_every`` steps on ``eval_size`` fixed sequences;
    the run stops at the first evaluation where ``plateaued`` holds, or at ``max_steps``.
    A run diverges when its loss or gradient norm is not finite or its loss exceeds
    ``divergence_loss`` nats (chance level is ln(num_values) ~ 4.2 nats).
    """

    max_steps: int = 700
    min_steps: int = 300
    patience: int = 3
    min_acc_gain: float = 0.01
    min_loss_gain: float = 0.05
    batch: int = 16
    lr: float = 3e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.98)
    warmup: int = 50
    clip: float = 1.0
    eval_size: int = 256
    eval_every: int = 100
    diag_size: int = 32
    divergence_loss: float = 50.0
    threads: int = 1


@dataclass(frozen=True)
class ExperimentConfig:
    task: TaskConfig = TaskConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()

    def to_dict(self) -> dict:
        out = asdict(self)
        out["train"]["betas"] = list(self.train.betas)
        out["task"]["vocab_size"] = self.task.vocab_size
        out["task"]["seq_len"] = self.task.seq_len
        out["model"]["head_dim"] = self.model.head_dim
        return out


@dataclass(frozen=True)
class Setup:
    """One set-up of the experiment: a name, what it varies (in words), its configuration and
    the forms it trains (every form of a set-up sees the same data and initial weights per seed).
    """

    name: str
    description: str
    config: ExperimentConfig
    forms: tuple[Form, ...]


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate at ``step`` (0-based): linear warm-up over ``warmup`` steps, then constant."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    return cfg.lr


def plateaued(curve: list[dict], cfg: TrainConfig) -> bool:
    """The stopping rule, on the evaluations so far (dicts with ``step``, ``eval_accuracy``,
    ``eval_loss``): True when the last evaluation is at step >= ``min_steps`` and, over the
    last ``patience`` evaluations, neither the best accuracy rose by more than ``min_acc_gain``
    nor the best evaluation loss fell by more than ``min_loss_gain`` nats, compared with the
    best values of all earlier evaluations.
    """
    K = cfg.patience
    if not curve or curve[-1]["step"] < cfg.min_steps or len(curve) <= K:
        return False
    before, last = curve[:-K], curve[-K:]
    acc_gain = max(c["eval_accuracy"] for c in last) - max(c["eval_accuracy"] for c in before)
    loss_gain = min(c["eval_loss"] for c in before) - min(c["eval_loss"] for c in last)
    return acc_gain <= cfg.min_acc_gain and loss_gain <= cfg.min_loss_gain


def masked_loss_and_correct(
    logits: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, int, int]:
    """Cross-entropy over query positions; (loss, number correct, number of query positions)."""
    keep = targets != -100
    sel, tgt = logits[keep], targets[keep]
    loss = nn.functional.cross_entropy(sel, tgt)
    correct = int((sel.argmax(-1) == tgt).sum())
    return loss, correct, int(tgt.numel())


@dataclass
class RunResult:
    """Outcome of one (set-up, form, seed) run.

    ``accuracy`` (fraction of evaluation query positions) and ``eval_loss`` (nats) are those of
    the last evaluation, None when the run diverged; ``final_loss`` is the mean training loss
    over the last evaluation interval, or the loss at the diverging step (None if not finite).
    ``stop``: ``plateau`` | ``cap`` (max_steps reached) | ``diverged``; ``steps``: steps
    trained. ``curve`` holds the evaluations (with the diagnostics of each); ``diagnostics``
    those of the last evaluation, or of the diverging step's training batch. ``cause`` and
    ``missing_eps`` label a divergence (``divergence_cause``). ``best_accuracy``: the best
    evaluation accuracy during training (context; the score is the final one). ``seconds`` is
    wall time, ``cpu_seconds`` the process's CPU time.
    """

    form: str
    seed: int
    diverged: bool
    diverged_step: int | None
    reason: str | None
    accuracy: float | None
    final_loss: float | None
    eval_loss: float | None
    curve: list[dict]
    seconds: float
    cpu_seconds: float
    setup: str = "main"
    stop: str = "cap"
    steps: int = 0
    diagnostics: dict | None = None
    cause: str | None = None
    missing_eps: bool = False
    best_accuracy: float | None = None


def evaluate(
    model: RecallModel,
    tokens: torch.Tensor,
    targets: torch.Tensor,
    form: Form | None = None,
    diag_size: int = 0,
) -> tuple[float, float, dict | None]:
    """(loss, accuracy, diagnostics) on a fixed evaluation set, in chunks of 256 sequences;
    the diagnostics (``attention_diagnostics`` of the first layer) on its first ``diag_size``
    sequences (None when ``form`` is None or diag_size is 0)."""
    model.eval()
    total, correct, loss_sum = 0, 0, 0.0
    diag = None
    with torch.no_grad():
        for lo in range(0, tokens.shape[0], 256):
            logits = model(tokens[lo : lo + 256])
            if lo == 0 and form is not None and diag_size > 0:
                q, k, v = model.attentions()[0].last_qkv
                diag = attention_diagnostics(form, q[:diag_size], k[:diag_size], v[:diag_size])
            loss, c, n = masked_loss_and_correct(logits, targets[lo : lo + 256])
            loss_sum += float(loss) * n
            correct += c
            total += n
    model.train()
    return loss_sum / total, correct / total, diag


def eval_set(cfg: ExperimentConfig, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed evaluation set of a seed (disjoint stream from the training batches)."""
    gen = torch.Generator().manual_seed(seed * 7919 + _EVAL_STREAM)
    return make_batch(cfg.task, cfg.train.eval_size, gen)


def _diverging_step_diagnostics(model: RecallModel, form: Form) -> dict | None:
    """Diagnostics of the diverging step's forward (its training batch), the layer that explains
    a missing eps first."""
    diags = []
    for attn in model.attentions():
        if attn.last_qkv is not None:
            diags.append(attention_diagnostics(form, *attn.last_qkv))
    if not diags or diags[0] is None:
        return None
    return max(diags, key=lambda d: divergence_cause(d)[1])


def _round(x, digits: int = 4):
    """Floats to ``digits`` significant digits (keeps the JSON small); other values as they are."""
    if isinstance(x, float) and math.isfinite(x) and x != 0.0:
        return float(f"{x:.{digits}g}")
    if isinstance(x, dict):
        return {k: _round(v, digits) for k, v in x.items()}
    return x


def train_one(form: Form, seed: int, cfg: ExperimentConfig, setup: str = "main") -> RunResult:
    """Train one model with attention ``form`` from ``seed``; never raises on divergence.

    Thread count and the deterministic-algorithms flag are set for the run and restored after.
    """
    tc = cfg.train
    prev_threads = torch.get_num_threads()
    prev_det = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(tc.threads)
    torch.use_deterministic_algorithms(True)
    t0, c0 = time.perf_counter(), time.process_time()

    def done(**kw) -> RunResult:
        best = max((c["eval_accuracy"] for c in curve), default=None)
        return RunResult(
            form=form.name, seed=seed, curve=curve, seconds=time.perf_counter() - t0,
            cpu_seconds=time.process_time() - c0, setup=setup, best_accuracy=best, **kw,
        )  # fmt: skip

    curve: list[dict] = []
    try:
        torch.manual_seed(seed)
        model = RecallModel(cfg.model, cfg.task, form.fn)
        opt = torch.optim.AdamW(
            model.parameters(), lr=tc.lr, betas=tc.betas, weight_decay=tc.weight_decay,
            foreach=True,
        )  # fmt: skip
        gen = torch.Generator().manual_seed(seed * 7919 + _TRAIN_STREAM)
        ev_tokens, ev_targets = eval_set(cfg, seed)
        loss_value = float("nan")
        recent: list[float] = []
        final_diag = None
        for step in range(tc.max_steps):
            tokens, targets = make_batch(cfg.task, tc.batch, gen)
            for group in opt.param_groups:
                group["lr"] = lr_at(step, tc)
            logits = model(tokens)
            loss, _, _ = masked_loss_and_correct(logits, targets)
            loss_value = float(loss.detach())
            reason = _divergence(loss_value, tc)
            if reason is None:
                opt.zero_grad(set_to_none=True)
                loss.backward()
                gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip))
                if not math.isfinite(gnorm):
                    reason = f"non-finite gradient norm ({gnorm})"
            if reason is not None:
                if any(m.nonfinite for m in model.attentions()):
                    reason += "; the attention output had non-finite entries"
                diag = _diverging_step_diagnostics(model, form)
                cause, eps = divergence_cause(diag)
                return done(
                    diverged=True, diverged_step=step, reason=reason, accuracy=None,
                    final_loss=_finite_or_none(loss_value), eval_loss=None, stop="diverged",
                    steps=step, diagnostics=_round(diag), cause=cause, missing_eps=eps,
                )  # fmt: skip
            opt.step()
            recent.append(loss_value)
            if (step + 1) % tc.eval_every == 0 or step + 1 == tc.max_steps:
                ev_loss, ev_acc, diag = evaluate(model, ev_tokens, ev_targets, form, tc.diag_size)
                train_loss = sum(recent) / len(recent)
                recent = []
                point = {
                    "step": step + 1, "train_loss": train_loss, "eval_accuracy": ev_acc,
                    "eval_loss": _finite_or_none(ev_loss),
                }  # fmt: skip
                final_diag = diag
                if diag is not None:
                    point["diag"] = {k: diag[k] for k in CURVE_DIAG}
                curve.append(_round(point, 5))
                if not math.isfinite(ev_loss):
                    cause, eps = divergence_cause(diag)
                    return done(
                        diverged=True, diverged_step=step + 1, accuracy=None,
                        reason="non-finite evaluation loss", final_loss=train_loss,
                        eval_loss=None, stop="diverged", steps=step + 1,
                        diagnostics=_round(diag), cause=cause, missing_eps=eps,
                    )  # fmt: skip
                if plateaued(curve, tc):
                    break
        last = curve[-1]
        return done(
            diverged=False, diverged_step=None, reason=None, accuracy=last["eval_accuracy"],
            final_loss=last["train_loss"], eval_loss=last["eval_loss"],
            stop="plateau" if plateaued(curve, tc) else "cap", steps=last["step"],
            diagnostics=_round(final_diag),
        )  # fmt: skip
    finally:
        torch.use_deterministic_algorithms(prev_det)
        torch.set_num_threads(prev_threads)


def _divergence(loss: float, tc: TrainConfig) -> str | None:
    if not math.isfinite(loss):
        return f"non-finite loss ({loss})"
    if loss > tc.divergence_loss:
        return f"loss {loss:.4g} > {tc.divergence_loss:g} nats"
    return None


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


# ----------------------------------------------------------------------------- many runs


def _run_builtin(setup: str, name: str, seed: int, cfg: ExperimentConfig) -> RunResult:
    """Worker entry point (module level, so a spawned process can import it)."""
    return train_one(builtin_forms()[name], seed, cfg, setup)


def run_experiment(
    setups: list[Setup],
    seeds: list[int],
    *,
    workers: int = 1,
    progress: Callable[[RunResult], None] | None = None,
) -> list[RunResult]:
    """Train every (set-up, form, seed); results in seed, set-up, form order.

    Each run is independent and single-threaded, so results do not depend on ``workers``.
    ``workers > 1`` runs built-in forms in spawned processes (a custom ``Form``, e.g. a test's
    broken attention, always runs in this process); jobs are submitted seed by seed.

    Raises:
        ValueError: no set-ups, forms or seeds, duplicate names or seeds, workers < 1.
    """
    if not setups:
        raise ValueError("setups: expected at least one set-up, got none")
    if len({s.name for s in setups}) != len(setups):
        raise ValueError(f"setups: names must be distinct, got {[s.name for s in setups]}")
    for st in setups:
        if not st.forms:
            raise ValueError(f"forms: set-up {st.name!r} has no attention form")
        names = [f.name for f in st.forms]
        if len(set(names)) != len(names):
            raise ValueError(f"forms: names must be distinct, got {names}")
    if not seeds:
        raise ValueError("seeds: expected at least one seed, got none")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: must be distinct, got {seeds}")
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected an int >= 1, got {workers!r}")
    builtin = builtin_forms()
    # seed-major: the runs of a seed finish together, so a run stopped early leaves complete
    # seeds (``attn-theory experiment recall --from-runs`` keeps those)
    jobs = [(st, f, s) for s in seeds for st in setups for f in st.forms]
    results: dict[tuple[str, str, int], RunResult] = {}
    pooled = [
        (st, f, s)
        for st, f, s in jobs
        if workers > 1 and f.name in builtin and builtin[f.name] == f
    ]
    if pooled:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
            futures = {
                pool.submit(_run_builtin, st.name, f.name, s, st.config): (st.name, f.name, s)
                for st, f, s in pooled
            }
            for fut in as_completed(futures):
                res = fut.result()
                results[futures[fut]] = res
                if progress is not None:
                    progress(res)
    for st, f, s in jobs:
        if (st.name, f.name, s) not in results:
            res = train_one(f, s, st.config, st.name)
            results[(st.name, f.name, s)] = res
            if progress is not None:
                progress(res)
    return [results[(st.name, f.name, s)] for st, f, s in jobs]
