"""A plain-torch kernel attention of a claimed kernel: the differentiable reference the gradient
and precision checks compare against (D2, D6, D7), with the weight majorants of its backward.
"""

from __future__ import annotations

import math

from verify.spec.kernel import parse as parse_kernel
from verify.spec.visibility import visible
from verify.spec.vocabulary import DENOMINATORS


def _parse(kernel: str) -> tuple[str, int | None, str | None]:
    """Claimed kernel -> (family: exp | taylor | map, order, map name); kappa_N through its
    feature map (``linear:taylor:N``) is the ``taylor`` family here (the same kernel)."""
    kern = parse_kernel(kernel)
    if not kern.known:
        raise ValueError(f"kernel: expected softmax, taylor:N or linear:MAP, got {kernel!r}")
    if kern.family == "softmax":
        return "exp", None, None
    if kern.order is not None:
        return "taylor", kern.order, None
    return "map", None, kern.map


def phi(name: str, x, projection=None):
    import torch

    if name == "identity":
        return x
    if name == "relu":
        return torch.relu(x)
    if name == "elu1":
        return torch.where(x > 0, x + 1.0, torch.exp(torch.clamp(x, max=0.0)))
    # favor: exp(w . x - |x|^2 / 2) / sqrt(m), x already scaled by sqrt(c)
    P = projection.to(x.dtype)
    return torch.exp(x @ P.T - 0.5 * (x * x).sum(-1, keepdim=True)) / math.sqrt(P.shape[0])


def resolved_scale(kernel: str, d: int, scale: float | None) -> float:
    """The score scale c: ``scale``, or the kernel's default at head dimension d (1/sqrt(d) for
    exp-type kernels, 1 for element-wise maps)."""
    return float(scale) if scale is not None else parse_kernel(kernel).default_scale(d)


def kernel_weights(q, k, v, *, kernel, causal, attn_mask, scale, projection):
    """Masked kernel weights of the claimed kernel on sanitized inputs.

    Returns (w (B, H, T, S), shift (B, H, T) or None, vis or None, q, k, v sanitized): exp
    weights are e^{x - m} with m the detached maximum over visible scores (the true weights
    are e^m w, D6); queries with no visible key and keys no query sees are zeroed.
    """
    import torch

    from derivations.feature_maps import taylor_coefficients

    family, order, fmap = _parse(kernel)
    T, d, S = q.shape[-2], q.shape[-1], k.shape[-2]
    if causal and T != S:
        raise ValueError(f"causal: requires T == S, got T={T}, S={S}")
    if fmap == "favor" and projection is None:
        raise ValueError("projection: required for linear:favor")
    c = resolved_scale(kernel, d, scale)
    vis = None
    if causal or attn_mask is not None:
        vis = visible(T, S, causal=causal, attn_mask=attn_mask, device=q.device)
    if vis is not None:
        rows = vis.any(-1)[..., None]
        cols = vis.transpose(-1, -2).any(-1)[..., None]
        q, k, v = torch.where(rows, q, 0.0), torch.where(cols, k, 0.0), torch.where(cols, v, 0.0)
    shift = None
    if family in ("exp", "taylor"):
        x = c * (q @ k.transpose(-1, -2))
        if vis is not None:
            x = torch.where(vis, x, 0.0)
        if family == "exp":
            xm = x if vis is None else torch.where(vis, x, float("-inf"))
            m = xm.amax(-1, keepdim=True)
            m = torch.where(torch.isfinite(m), m, 0.0).detach()
            w = torch.exp(x - m)
            shift = m[..., 0]
        else:
            coeffs = [float(a) for a in taylor_coefficients(order)]
            w = torch.full_like(x, coeffs[-1])
            for a in reversed(coeffs[:-1]):
                w = w * x + a
    elif fmap == "favor":
        sc = math.sqrt(c)
        w = phi(fmap, sc * q, projection) @ phi(fmap, sc * k, projection).transpose(-1, -2)
    else:
        w = phi(fmap, c * q) @ phi(fmap, k).transpose(-1, -2)
    if vis is not None:
        w = torch.where(vis, w, 0.0)
    return w, shift, vis, q, k, v


def visible_count(w, vis):
    import torch

    S = w.shape[-1]
    if vis is None:
        return torch.full(w.shape[:-1], float(S), dtype=w.dtype, device=w.device)
    return vis.to(w.dtype).sum(-1).expand(w.shape[:-1])


def normalize(N, D, n, shift, denominator: str, eps: float, eps_mode: str = "add"):
    """The D7 mode applied to numerator N (..., d_v), denominator D and count n (...); with
    ``eps_mode="floor"`` the ``sum`` mode divides by max(D, eps) (``verify.exact.eps_floor``)."""
    import torch

    empty = (n == 0)[..., None]
    up = 1.0 if shift is None else torch.exp(shift)[..., None]  # true N, D = e^m N, e^m D
    if denominator == "sum" and eps_mode == "floor":  # max(e^m D, eps) / e^m = max(D, eps/e^m)
        floor = torch.as_tensor(eps / up, dtype=D.dtype, device=D.device)
        out = N / torch.where(empty, 1.0, torch.maximum(D[..., None], floor))
    elif denominator == "sum":
        out = N / torch.where(empty, 1.0, D[..., None] + (eps / up if eps else 0.0))
    elif denominator == "none":
        out = N * up
    elif denominator == "count":
        out = N * up / torch.where(empty, 1.0, n[..., None] + eps)
    else:
        # on empty rows a stand-in with nonzero norm and variance keeps gradients finite
        stand = torch.arange(1, N.shape[-1] + 1, dtype=N.dtype, device=N.device)
        Y = torch.where(empty, stand, N)
        if denominator == "layernorm":
            Y = Y - Y.mean(-1, keepdim=True)
        power = (Y * Y).sum(-1, keepdim=True)
        if denominator != "l2":
            power = power / Y.shape[-1]
        out = Y / torch.sqrt(power + (eps / up**2 if eps else 0.0))
    return torch.where(empty, 0.0, out)


def reference_attention(
    q,
    k,
    v,
    *,
    kernel: str,
    causal: bool = False,
    attn_mask=None,
    scale: float | None = None,
    denominator: str = "sum",
    eps: float = 0.0,
    projection=None,
    eps_mode: str = "add",
):
    """Plain-torch kernel attention of a claimed kernel, differentiable, in the dtype of q.

    The gradient reference of the catalogue: weights kappa(x_ts) on the T x S score matrix
    (softmax: exp shifted by the detached row maximum, exact by D6; ``taylor:N``: kappa_N by
    Horner with the coefficients of ``derivations.feature_maps``; ``linear:MAP``:
    phi(c q) . phi(k) for element-wise maps, phi(sqrt(c) q) . phi(sqrt(c) k) for FAVOR+ and
    kappa_N(c q.k) for ``linear:taylor:N``), masked weights exactly zero, rows with no visible
    key zero, then the D7 denominator mode. Queries with no visible key and keys no query sees
    are zeroed first, so large finite values there give no inf in the graph.

    Args:
        q: (B, H, T, d), k: (B, H, S, d), v: (B, H, S, d_v), one float dtype and device.
        kernel: ``softmax``, ``taylor:N`` or ``linear:MAP`` (identity, elu1, relu, favor,
            taylor:N); the API conventions for the scale c (``scale`` None: 1/sqrt(d) for
            exp-type kernels, 1 for element-wise maps).
        causal: s <= t (T == S); attn_mask: bool, True = keep, broadcastable to (B, H, T, S).
        denominator: sum | none | count | l2 | rms | layernorm (D7); eps as
            ``verify.attention.norms`` (added to the true denominator; with ``eps_mode="floor"``
            the ``sum`` denominator is max(D, eps), ``verify.exact.eps_floor``).
        projection: (m, d) FAVOR+ directions (required for ``linear:favor``).

    Returns:
        (B, H, T, d_v) tensor in the dtype of q.

    Raises:
        ValueError: unknown kernel or denominator, causal with T != S, favor without projection.
    """
    if denominator not in DENOMINATORS:
        raise ValueError(f"denominator: expected a D7 mode, got {denominator!r}")
    w, shift, vis, _, _, v = kernel_weights(
        q, k, v, kernel=kernel, causal=causal, attn_mask=attn_mask, scale=scale,
        projection=projection,
    )  # fmt: skip
    return normalize(w @ v, w.sum(-1), visible_count(w, vis), shift, denominator, eps, eps_mode)


def weight_majorants(kernel: str, q, k, c: float, shift, vis, projection=None):
    """Majorants W >= |w_ts| and Wq >= |dw_ts/dq_ti|, Wk >= |dw_ts/dk_si| (float64).

    exp: W = e^{x - m} (the shifted weights), Wq = c |k_si| W, Wk = c |q_ti| W. kappa_N: the
    feature-sum majorants W = kappa_N(a), Wq = c |k_si| kappa_{N-1}(a), a = c sum_i |q_i||k_i|
    (they bound every Taylor feature form as well as the score form). Element-wise maps:
    W = sum_i |phi(c q_i)| |phi(k_i)|, Wq = c |phi'(c q_i)| |phi(k_i)|, Wk = |phi(c q_i)|
    |phi'(k_i)|. FAVOR+: W = sum_m phi_m(q) phi_m(k), Wq = sqrt(c) sum_m phi_m(q) phi_m(k)
    |w_mi - sqrt(c) q_i| (and for k). Shapes (B, H, T, S) and (B, H, T, S, d); zero where masked.
    """
    import torch

    from derivations.feature_maps import taylor_coefficients

    family, order, fmap = _parse(kernel)
    qe, ke = q[..., :, None, :], k[..., None, :, :]  # (B, H, T, 1, d), (B, H, 1, S, d)
    if family == "exp":
        x = c * (qe * ke).sum(-1)
        W = torch.exp(x - (0.0 if shift is None else shift[..., None]))
        Wq, Wk = c * ke.abs() * W[..., None], c * qe.abs() * W[..., None]
    elif family == "taylor":
        a = c * (qe.abs() * ke.abs()).sum(-1)
        coeffs = [float(t) for t in taylor_coefficients(order)]
        W = sum(coeffs[n] * a**n for n in range(order + 1))
        prev = sum(coeffs[n] * a**n for n in range(order)) if order else torch.zeros_like(a)
        Wq, Wk = c * ke.abs() * prev[..., None], c * qe.abs() * prev[..., None]
    elif fmap == "favor":
        P = projection.to(torch.float64)
        sc = math.sqrt(c)
        qs, ks = sc * q, sc * k
        prod = phi("favor", qs, P)[..., :, None, :] * phi("favor", ks, P)[..., None, :, :]
        W = prod.sum(-1)  # (B, H, T, S)
        gq = (P - qs[..., :, None, None, :]).abs()  # (B, H, T, 1, m, d)
        gk = (P - ks[..., None, :, None, :]).abs()  # (B, H, 1, S, m, d)
        Wq, Wk = sc * (prod[..., None] * gq).sum(-2), sc * (prod[..., None] * gk).sum(-2)
    else:
        cq = c * qe
        fq, fk = phi(fmap, cq), phi(fmap, ke)

        def deriv(t):
            if fmap == "identity":
                return torch.ones_like(t)
            if fmap == "relu":
                return (t > 0).to(t.dtype)
            return torch.where(t > 0, 1.0, torch.exp(torch.clamp(t, max=0.0)))

        W = (fq.abs() * fk.abs()).sum(-1)
        Wq, Wk = c * deriv(cq).abs() * fk.abs(), fq.abs() * deriv(ke).abs()
    if vis is not None:
        W = torch.where(vis, W, 0.0)
        Wq, Wk = torch.where(vis[..., None], Wq, 0.0), torch.where(vis[..., None], Wk, 0.0)
    full = (*W.shape, q.shape[-1])
    return W, Wq.expand(full), Wk.expand(full)
