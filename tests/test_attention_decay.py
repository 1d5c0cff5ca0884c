"""The decayed RNN of D12 in every form: S_t = gamma S_{t-1} + phi(k_t) v_t^T.

Inputs are dyadic rationals of a few bits, the decays 1/2, 3/4, 1 and 1/4, and the feature maps
relu, identity and taylor:1 at scale 1 (features 1, x): every product and sum is then exact in
float64 (at most ~44 significant bits), so parallel, recurrent and chunked forms and an exact
rational reference must agree *bit for bit* -- the tolerance is zero, no error model needed. A
chunked form that decays the carried state once too often, or a decay applied as gamma^(t-s+1),
differs from that reference.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from derivations import decay as d12
from verify.attention import linear_attention, softmax_attention, taylor_attention

DECAYS = [0.5, 0.75, 1.0, 0.25]


def dyadic(B=1, H=4, T=10, d=2, dv=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randint(-4, 5, s, generator=g).double() / 4  # noqa: E731
    return mk(B, H, T, d), mk(B, H, T, d), mk(B, H, T, dv)


def exact_reference(q, k, v, decays, phi, twin_chunk=None):
    """sum_{s<=t} gamma^(t-s) phi(q_t).phi(k_s) v_s / (same with v = 1), in Fractions.

    ``twin_chunk=C``: the faulty chunked form that decays the carried state once too often
    (keys of earlier chunks weigh gamma^(t-s+1)); a factor on *every* key would cancel in the
    normalization."""
    B, H, T, _ = q.shape
    out = torch.zeros(B, H, T, v.shape[-1], dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            g = Fraction(decays[h])
            for t in range(T):
                fq = phi([Fraction(x) for x in q[b, h, t].tolist()])
                num = [Fraction(0)] * v.shape[-1]
                den = Fraction(0)
                for s in range(t + 1):
                    fk = phi([Fraction(x) for x in k[b, h, s].tolist()])
                    stale = twin_chunk is not None and s < t - t % twin_chunk
                    w = g ** (t - s + stale) * sum(a * c for a, c in zip(fq, fk))
                    num = [n + w * Fraction(x) for n, x in zip(num, v[b, h, s].tolist())]
                    den += w
                out[b, h, t] = torch.tensor([float(n / den) for n in num], dtype=torch.float64)
    return out


MAPS = {
    "relu": (dict(feature_map="relu"), lambda x: [max(a, Fraction(0)) for a in x]),
    "taylor:1": (dict(order=1, scale=1.0), lambda x: [Fraction(1)] + list(x)),
}


def _call(name, q, k, v, **kw):
    opts, _ = MAPS[name]
    if "order" in opts:
        return taylor_attention(q, k, v, causal=True, decay=DECAYS, **opts, **kw)
    return linear_attention(q, k, v, causal=True, decay=DECAYS, **opts, **kw)


@pytest.mark.parametrize("name", list(MAPS))
def test_forms_equal_exact_decayed_reference(name):
    q, k, v = dyadic(seed=1)
    if name == "relu":  # keep every denominator positive: one key feature always on
        k[..., 0] = k[..., 0].abs() + 0.25
        q[..., 0] = q[..., 0].abs() + 0.25
    else:
        q, k = q / 2, k / 2  # 1 + q.k > 0
    ref = exact_reference(q, k, v, DECAYS, MAPS[name][1])
    assert torch.equal(_call(name, q, k, v), ref)
    assert torch.equal(_call(name, q, k, v, form="recurrent"), ref)
    for chunk in (1, 3, 4, 10, 64):
        assert torch.equal(_call(name, q, k, v, form="chunked", chunk_size=chunk), ref), chunk
    # the faulty twin: the carried state decayed once too often differs from the reference
    twin = exact_reference(q, k, v, DECAYS, MAPS[name][1], twin_chunk=4)
    assert not torch.equal(twin, ref)


def test_decay_one_is_the_undecayed_form():
    q, k, v = dyadic(seed=2)
    out = taylor_attention(
        q, k, v, order=2, causal=True, decay=[1.0] * 4, form="chunked", chunk_size=3
    )
    ref = taylor_attention(q, k, v, order=2, causal=True, form="chunked", chunk_size=3)
    assert torch.equal(out, ref)


def test_decayed_taylor_approaches_alibi_softmax():
    """D12: gamma^(t-s) kappa_N -> ALiBi softmax with slope -ln gamma as N grows; the error at
    N = 8 is below D4's bound at N = 2 (a ratio of 1e-3 on this instance in the record)."""
    q, k, v = dyadic(seed=3)
    slopes = [d12.slope_from_decay(g) for g in DECAYS]
    alibi = softmax_attention(q, k, v, causal=True, alibi_slopes=slopes)
    errs = [
        (taylor_attention(q, k, v, order=n, causal=True, decay=DECAYS) - alibi).abs().max().item()
        for n in (1, 2, 4, 8)
    ]
    assert errs[0] > errs[1] > errs[2] > errs[3]
    assert errs[3] < 1e-3 * errs[0]


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(decay=[0.5] * 3, causal=True), "decay: expected 4"),
        (dict(decay=[0.5, 1.5, 0.5, 0.5], causal=True), r"decay: expected each decay in \(0, 1\]"),
        (dict(decay=[0.5] * 4, causal=False), "causal=True"),
        (dict(decay=[0.5] * 4, causal=True, denominator="count"), "count"),
        (dict(decay="0.5", causal=True), "decay"),
    ],
)
def test_bad_decay(kw, match):
    q, k, v = dyadic()
    with pytest.raises((TypeError, ValueError), match=match):
        taylor_attention(q, k, v, order=1, **kw)


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_step_and_split_prefill_with_decay_are_exact(form):
    """The streaming API with a decay: prefill of a prefix, then steps, equals the exact
    reference bit for bit (dyadic inputs), and a split prefill resumes the decayed state."""
    from verify.attention import init_state, prefill, step

    q, k, v = dyadic(seed=7)
    q, k = q / 2, k / 2
    ref = exact_reference(q, k, v, DECAYS, MAPS["taylor:1"][1])
    o1, st = prefill(
        q[:, :, :4], k[:, :, :4], v[:, :, :4], kernel="taylor:1", scale=1.0, decay=DECAYS,
        form=form, chunk_size=3,
    )  # fmt: skip
    o2, st = prefill(
        q[:, :, 4:7], k[:, :, 4:7], v[:, :, 4:7], kernel="taylor:1", state=st, form=form
    )
    outs = [o1, o2]
    for t in range(7, q.shape[2]):
        o_t, st = step(st, q[:, :, t], k[:, :, t], v[:, :, t])
        outs.append(o_t[:, :, None])
    assert torch.equal(torch.cat(outs, 2), ref)
    fresh = init_state(1, 4, 2, 2, kernel="taylor:1", scale=1.0, dtype=torch.float64, decay=DECAYS)
    assert torch.equal(fresh.decay, torch.tensor(DECAYS, dtype=torch.float64))
    with pytest.raises(ValueError, match="decay"):
        prefill(q, k, v, kernel="taylor:1", state=st, decay=DECAYS)
