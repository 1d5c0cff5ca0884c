"""The positional probes (``verify.probes.positional``) read a window, the kv-head map, a softcap
and an ALiBi bias off a black box, and suggest claims only where the evidence is exact."""

from __future__ import annotations

import pytest
import torch

import tests.modern_variants as mv
from verify import builtins
from verify.probes import probe, suggested_claims
from verify.probes.positional import window_of
from verify.render.probes import describe

STRUCTURAL = ("window", "kv_heads", "softcap", "alibi_slopes")


def _found(variant) -> tuple[dict, str]:
    report = probe(variant)
    claims = suggested_claims(report)
    return {k: claims[k] for k in STRUCTURAL if k in claims}, describe(report)


@pytest.mark.parametrize(
    "name, expected, words",
    [
        ("ok_window", {"window": (2, 1)}, "window (2, 1)"),
        ("bad_window", {"window": (3, 1)}, "window (3, 1)"),  # what it computes, not its claim
        ("ok_gqa", {"kv_heads": 2}, "h // (H / G)"),
        # a tiled map is claimed as grouped-query attention too: head-groups then checks it
        ("bad_gqa", {"kv_heads": 2}, "repeat, not h // (H / G)"),
        ("ok_softcap", {"softcap": 5.0}, "softcapped at C = 5"),
        ("ok_alibi", {"alibi_slopes": "reference"}, "ALiBi's reference slopes"),
        ("bad_alibi_order", {}, "bias linear in |t - s| with slopes 0.003906"),
    ],
)
def test_positional_probes_find_what_the_variant_computes(name, expected, words):
    found, sentence = _found(getattr(mv, name))
    assert found == expected, (found, sentence)
    assert words in sentence, sentence


def _tiled(q, k, v, *, causal):
    """GQA by tiling the kv heads (query head h reads kv head h mod G), no claim declared."""
    return mv.gqa_forward(q, k, v, causal=causal, interleave=False)


def _interleaved(q, k, v, *, causal):
    return mv.gqa_forward(q, k, v, causal=causal)


@pytest.mark.parametrize("fn, fails", [(_tiled, True), (_interleaved, False)])
def test_unclaimed_grouped_kv_heads_are_checked(fn, fails):
    """A plain function that takes fewer kv heads, with no claim: the probes claim kv_heads, so
    head-groups runs (it passed unchecked with the tiled map before)."""
    from verify.engine.check import check

    res = check(fn, select=["head-groups"], dtypes=("float64",), isolate=False, max_examples=10)
    assert res.variant.kv_heads == 2
    ran = [r for r in res.results if r.property_id == "head-groups"]
    assert ran and all(r.status in ("pass", "fail") for r in ran), ran
    assert bool(res.failed) == fails, [r.reason for r in res.failed]


def test_plain_softmax_suggests_no_structure():
    found, sentence = _found(builtins.get("softmax"))
    assert found == {}, found
    assert "window" not in sentence and "softcap" not in sentence and "bias" not in sentence


def test_window_of_reads_flashattention_windows_and_rejects_buckets():
    # T = S = 4: causal (-1, 0), a sliding window (1, 0), and a bucketed pattern (no window)
    causal = [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3]]
    assert window_of(causal, 4) == (-1, 0)
    assert window_of([[0], [0, 1], [1, 2], [2, 3]], 4) == (1, 0)
    assert window_of([[0], [0, 1], [2], [2, 3]], 4) is None
    # bottom-right alignment: T = 2 queries over S = 4 keys, causal
    assert window_of([[0, 1, 2], [0, 1, 2, 3]], 4) == (-1, 0)


def _delta_rule(q, k, v, *, causal):
    """An unnormalized delta rule (beta = 1, causal only): S_t = S_{t-1} (I - k_t k_t^T) +
    v_t k_t^T, o_t = S_t q_t. A zero key leaves the state at zero."""
    B, H, T, d = q.shape
    S = q.new_zeros(B, H, v.shape[-1], d)
    out = []
    for t in range(T):
        kt, vt = k[:, :, t], v[:, :, t]
        S = S - (S @ kt[..., None]) @ kt[..., None, :] + vt[..., None] @ kt[..., None, :]
        out.append((S @ q[:, :, t, :, None])[..., 0])
    return torch.stack(out, 2)


def test_a_delta_rule_is_not_called_normalized_or_bucketed():
    """Zero keys leave a delta rule's state at zero: the visibility probe reads it at a constant
    nonzero q = k instead of calling an all-zero pattern "bucketed", fits no positional bias
    there, and row sums that fit both D/(D + eps) and a count normalization are reported as
    unsettled, not as a normalization (no ``normalized`` claim is suggested)."""
    from verify.spec.variant import AttentionVariant

    report = probe(AttentionVariant(name="delta", forward=_delta_rule, causal="yes"))
    sentence = describe(report)
    assert "bucketed" not in sentence and "normalized" not in sentence.split(",")[0], sentence
    assert report.positional["window"]["plain"], report.positional["window"]
    assert "linear" not in report.positional["bias"], report.positional["bias"]
    assert report.normalization["kind"] in ("unsettled", "none", "other"), report.normalization
    assert "normalized" not in suggested_claims(report) or report.normalization["kind"] == "none"


@pytest.mark.parametrize("claimed", [True, False])
def test_the_kernel_is_read_inside_a_window(claimed):
    """A windowed softmax was 'none of the known kernels (weights do not depend on q.k only)':
    the identification read zeros outside the window as the kernel's weights, and the position
    test moved keys out of it. Read inside the claimed window, or, with none claimed, inside
    the window the positional probe found exactly, it is softmax at 1/sqrt(d); a window
    claimed one key too narrow still reads softmax (inside it the ratios are exp's) and the
    window is the finding that differs."""
    from verify.spec.variant import AttentionVariant

    def windowed(q, k, v, *, causal):
        return mv.window_forward(q, k, v, causal=causal)

    variant = AttentionVariant("w", windowed, window=mv.WINDOW if claimed else None)
    claims = suggested_claims(probe(variant))
    assert claims["kernel"] == "softmax" and claims.get("scale") == "default", claims
    assert claims["window"] == mv.WINDOW, claims
    narrow = AttentionVariant("w", windowed, window=(mv.WINDOW[0] - 1, mv.WINDOW[1]))
    assert suggested_claims(probe(narrow))["kernel"] == "softmax"
