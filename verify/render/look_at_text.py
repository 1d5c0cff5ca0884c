"""What to look at when a failure group's root is each property: the fix of the defects the
property decides, in words (``verify.render.check.look_at`` adds what depends on the claims
and on the failure's own measurements)."""

#: what to look at when a group's root fails (by root property): the fix of the defects the
#: property decides (:func:`look_at` adds what depends on the claims and the failure)
LOOK_AT = {
    "accepts-inputs": "the variant raised on an input inside its claimed domain: (B, T, H, d) "
    "tensors are claimed with --layout BTHD, restrictions with --dv-equals-d or "
    "--self-attention-only",
    "determinism": "two calls on the same inputs differ: uninitialized memory, an atomic or "
    "unordered reduction, a random draw",
    "gradcheck": "the backward pass disagrees with finite differences of the variant's own "
    "forward: a hand-written backward missing a term (FlashAttention's delta = rowsum(dO * O) "
    "in dS = P * (dP - delta)), a term computed under torch.no_grad() or .detach(), an in-place "
    "update of a saved tensor",
    "causal-mismatch-rejected": "causal=True with T != S should raise a ValueError naming "
    "'causal', or the alignment be declared (--alignment)",
    "batch-independence": "batch elements mix: a reshape or transpose across the batch axis, a "
    "reduction over it; the same axis error changes the result at B = 1 too",
    "head-independence": "heads mix: a reduction over the head axis where the time axis is "
    "meant (cumsum(dim=1) on (B, H, T, d)), a reshape that interleaves heads, (B, T, H, d) "
    "read as (B, H, T, d) (--layout); the same axis error changes the result at H = 1 too",
    "causality": "the causal mask: query t may see keys s <= t only (torch.ones(T, T).tril(), "
    "not tril(1)), on every code path (a short-sequence or fused path that skips the mask); a "
    "finite sentinel (-1e4 added to masked scores) lets huge scores through: mask with -inf or "
    "a boolean select; a transform applied after the mask (a softcap turns -inf into -C: cap "
    "before masking); a statistic over all positions (a max, a norm) used before masking",
    "prefix-invariance": "outputs at t depend on later positions or on the sequence length: "
    "the causal mask, a chunked form reading the state after its chunk (states[i] where "
    "states[i - 1] is meant), padding, a statistic over the whole sequence",
    "causal-alignment": "the causal mask for T != S: top-left is s <= t (tril()), bottom-right "
    "s <= t + S - T (tril(S - T)); make the mask the declared alignment, or declare the one it "
    "implements (--alignment)",
    "masks": "masked keys must get weight exactly 0 (a boolean mask, or -inf added, not a finite "
    "sentinel like -1e4) and a row with no visible key must return zeros (softmax of an all "
    "-inf row is NaN: zero such rows; --empty-rows states another convention)",
    "masked-key-gradients": "a masked key must get no gradient: mask with -inf or a boolean "
    "select, not a finite sentinel",
    "empty-row-gradients": "a row with no visible key must give finite, zero gradients: zero "
    "the row before the softmax's backward sees NaN",
    "window-extent": "the window's extent: query t (position t + S - T, bottom-right) must see "
    "exactly the keys t - left <= s <= t + right, both ends inclusive (FlashAttention's "
    "window_size; causal: right = 0); the reason names the key it gets wrong: an edge one key "
    "too wide or narrow (left + 1, < where <= is meant), a window aligned top-left",
    "head-groups": "the kv-head map: query head h must read kv head h // (H / G), "
    "k.repeat_interleave(H // G, dim=1); k.repeat(1, H // G, 1, 1) tiles the heads (h mod G)",
    "key-padding": "the key_padding_mask convention: True keeps a key (no weight and no "
    "gradient for False); nn.MultiheadAttention's mask (True = ignore) is the opposite: invert "
    "it (~mask) before masking",
    "score-bias": "attn_bias is added to the scaled (and softcapped) scores: softmax(c q k^T + "
    "bias), not c (q k^T + bias); before ALiBi and the mask",
    "forms-agree": "an alternative form disagrees with the forward: the chunked form must read "
    "the state before its chunk (states[i - 1], not states[i]), apply a decay once per step "
    "(gamma^n, not gamma^(n+1)) and keep padding out of its state",
    "state-step": "the streaming state: step must continue prefill exactly: a KV cache "
    "appends the new key and value before the new query attends (not after: reading the cache "
    "first drops the query's own key) and keeps every earlier entry (a buffer that drops or "
    "overwrites its oldest keys is a window: claim it with --window); a recurrent state takes "
    "no padded or zero key and its normalizer is updated with the step's key",
    "decode-steps": "decoding must continue prefill exactly: append the new keys and values to "
    "the cache before the new queries attend (reading it first drops their own keys), write "
    "them at the row's current length (not a fixed slot), keep every earlier key (a cache "
    "that drops or overwrites its oldest entries, a fixed buffer written at position % size, "
    "is a window: claim it with --window), scale and mask as the forward does (a decode query "
    "is the last row: bottom-right alignment)",
    "decode-resume": "a cache resumed after any split must hold every earlier key: prefill "
    "writes all T of its keys (an empty prefill included) and the length advances by each "
    "step's tokens",
    "decode-multi-token": "a step of several tokens (speculative decoding) is causal within "
    "itself: new query i sees the cache and new keys 0..i (bottom-right), as single steps do",
    "decode-batch-rows": "rows at different cache positions: each row writes and reads at its "
    "own length (cache_seqlens[b], not the batch's maximum or row 0's) and masks the slots "
    "past it",
    "decode-capacity": "the cache's unused capacity must not change the output: attend to the "
    "first length slots only (slice or mask by the length, not by the buffer's size)",
    "decode-unused-slots": "unused cache slots must be masked out, whatever they hold (zeros, "
    "NaN, inf): a boolean select or slicing, not a multiply by a 0/1 mask (0 * inf is NaN)",
    "decode-window": "a rolling window of W slots: write at position % W, and after the "
    "wraparound attend to exactly the last W keys (the window's left edge inclusive)",
    "packed-documents": "packed documents (cu_seqlens) must match each document alone: the "
    "block-diagonal mask (query and key in the same document), causal within each document "
    "from its own start, positions and scales per document",
    "packed-isolation": "one document must not see another: a change in one document must "
    "leave every other document's outputs bit-identical and their gradients zero (masks from "
    "cu_seqlens, boundaries inside a block included)",
    "flex-score-mod": "the score_mod's arithmetic: its sign and scale on the scaled scores (a "
    "bias added, a softcap C tanh(s / C)), applied with the indices it is given (b, h, q_idx, "
    "kv_idx)",
    "flex-block-mask": "the BlockMask must match its mask_mod at every token: rebuild it at "
    "the block size the kernel uses (BLOCK_SIZE), and list a block as full only when every "
    "token in it is visible",
    "state-split-resume": "resuming from a state must carry all of it: the normalizer z beside "
    "the numerator state",
    "kernel-identity": "the feature map does not reproduce the claimed kernel: phi(q).phi(k) "
    "must equal kappa_N(c q.k) (Taylor-2 needs every product x_i x_j, not the squares x_i^2 "
    "only)",
    "oracle-agreement": "the output differs from the claimed kernel beyond its bound (the "
    "reproducer prints o beside the reference): a constant or a step of the computation",
    "edge-cases": "zeros, one key, equal scores, large norms: overflow, 0/0, a missing "
    "max-subtraction; the normalizer (divide by the row sum, not multiply)",
    "claimed-scale": "the scores are not scaled as claimed (the reason names the scale that "
    "fits): fix the scale, or claim the intended one with --scale X",
    "weights-vs-reference": "the normalized weights (read with v = identity) differ from the "
    "claimed kernel's: the normalizer (phi(q) . sum_s phi(k_s)), the mask, the scale",
    "gradients-vs-reference": "dq, dk, dv differ from the exact gradients: a hand-written "
    "backward missing a term, a term computed under torch.no_grad() or .detach()",
    "gradient-identities": "the gradients break an exact identity (D21): sum_j dV_j != sum_i "
    "dO_i points at the weights dV reads (P as stored, normalized over the visible keys, every "
    "key block, every query head of a kv group); sum_j dK_j != 0 with dV right at dS = P (dP - "
    "delta): delta = rowsum(dO o O) of the right row and the final output",
    "dtype-agreement": "long rows in the narrower dtype are off the float64 result beyond "
    "every precision model (the reason measures each): a defect on long rows, not a rounding: "
    "an online softmax must rescale its accumulator when the running maximum grows (acc = "
    "exp(m_old - m_new) acc + P V), the keys padding the last block must be masked, a row sum "
    "or normalizer over thousands of keys must be accumulated in float32 (a float16 sum "
    "overflows or stalls)",
    "permutation-equivariance": "permuting keys and values together must not change the "
    "output (no causal mask claimed): a position-dependent step (a positional bias, a cumsum, "
    "a causal mask applied though none is claimed: --causal yes)",
    "linearity-in-v": "the output must be linear in v: no normalization, clamp or nonlinearity "
    "applied to v or to the output, no bias added after the weights",
    "convex-combination": "a normalized attention's output lies in the convex hull of its "
    "values: weights non-negative and summing to 1 (divide by the row sum; an eps in the "
    "denominator is claimed with --eps / --eps-mode)",
    "uniform-weights": "equal scores must give equal weights 1/S: the normalizer sums over the "
    "row's keys only (not over heads, the batch or padding)",
    "single-key": "one visible key must get weight 1 (the output equals its value): the "
    "normalizer, an eps, a mask that drops the only key",
    "single-key-gradients": "with one key the output is v: dq and dk must be 0 and dv = dO (a "
    "hand-written backward that misses the normalizer's term gives dq != 0)",
    "softmax-shift-invariance": "softmax must not change when every score of a row shifts by "
    "one constant: subtract the row maximum (not a global or a per-key one) before exp",
    "device-agreement": "the CUDA path differs from the CPU path beyond both precision models: "
    "a device-specific branch (a fused kernel, a different mask or scale)",
    "rounding-bias": "a one-sided rounding of the weights or the output (bit truncation): round "
    "to nearest (P.to(dtype))",
}
