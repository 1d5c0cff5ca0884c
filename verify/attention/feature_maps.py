"""Public feature maps phi: (..., d) -> (..., m) for kernel linear attention (D1, D3, D9).

Scale convention. Exp-type maps (Taylor, FAVOR+) take the score scale c of kappa(c q.k), default
1/sqrt(d), and absorb it symmetrically as sqrt(c) on their argument, so that
phi(q).phi(k) = kappa(c q.k) when the same map is applied to q and k. Element-wise maps
(identity, elu1, relu) take no scale: ``linear_attention`` multiplies q (only) by its ``scale``
before the map.

Taylor maps (D1): exp(c q.k) = sum_n (c q.k)^n / n! = <Phi(q), Phi(k)> with
- symmetric monomials, order-n block of C(n+d-1, n) features in the canonical order of
  ``derivations.feature_maps.multi_indices``: Phi_alpha(x) = c^{n/2} x^alpha / sqrt(alpha!)
  (1/sqrt(2) on squares x_i^2 and 1 on cross terms x_i x_j, i < j, at n = 2);
- tensor powers, order-n block of d^n features: (sqrt(c) x)^{(x)n} / sqrt(n!), index
  (i_1, ..., i_n) flattened row-major (i_1 slowest).
The coefficients 1/alpha! and 1/n! come from ``derivations.feature_maps``; the factors
c^{n/2} sqrt(1/alpha!) are formed in float64 and multiply each block once.

FAVOR+ (Choromanski et al. 2021, "Rethinking Attention with Performers", Lemma 1 / eq. (7)):
phi(x)_i = exp(w_i . x~ - |x~|^2 / 2) / sqrt(m), x~ = sqrt(c) x, rows w_i of a projection from
``favor_projection``; E[phi(q).phi(k)] = exp(c q.k).

All functions accept float64/float32 tensors and return the same dtype; bf16/fp16 inputs are
computed in float32 and returned in the input dtype. Shapes: any leading axes, last axis d >= 1.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from derivations.feature_maps import (
    feature_count,
    monomial_weight,
    symmetric_block_size,
    taylor_coefficient,
    tensor_block_size,
)
from verify.attention._validate import (
    FLOAT_DTYPES,
    accumulation_dtype,
    check_bool,
    check_choice,
    check_int,
    resolve_scale,
)
from verify.spec.vocabulary import BASES

#: default maximum number of Taylor features per token (about 2^24), checked before building
FEATURE_BUDGET = 2**24


def _check_x(x: object, name: str = "x") -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name}: expected a floating dtype in {[str(t) for t in FLOAT_DTYPES]}, got {x.dtype}"
        )
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"{name}: expected a last axis of size d >= 1, got shape {tuple(x.shape)}")
    return x


def _in_accumulation(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    acc = accumulation_dtype(x.dtype)
    return fn(x.to(acc)).to(x.dtype) if acc != x.dtype else fn(x)


# --------------------------------------------------------------------------- element-wise maps
def identity_features(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = x (D3: unnormalized first-order term). Shape and dtype of ``x``."""
    return _check_x(x)


def elu1_features(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1 > 0 (Katharopoulos et al. 2020, eq. (7)). Shape and dtype of ``x``."""
    return _in_accumulation(lambda t: F.elu(t) + 1.0, _check_x(x))


def relu_features(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = max(x, 0) >= 0 (a signed-free map whose kernel can vanish). Shape/dtype of x."""
    return _in_accumulation(F.relu, _check_x(x))


# --------------------------------------------------------------------------- Taylor maps
def check_feature_budget(order: int, d: int, basis: str, feature_budget: object) -> int:
    """Raise before building a Taylor map with more than ``feature_budget`` features per token.

    Returns the feature count ``derivations.feature_maps.feature_count(order, d, basis)``.
    """
    budget = check_int("feature_budget", feature_budget, 1)
    count = feature_count(order, d, basis)
    if count > budget:
        raise ValueError(
            f"feature_budget: Taylor order={order}, d={d}, basis={basis!r} needs "
            f"feature_count = {count} features per token, over feature_budget = {budget}; "
            "pass a larger feature_budget=, use basis='symmetric', or the parallel form"
        )
    return count


def taylor_block_sizes(order: int, d: int, basis: str = "symmetric") -> tuple[int, ...]:
    """Feature block sizes of orders 0..order: C(n+d-1, n) (symmetric) or d^n (tensor)."""
    check_choice("basis", basis, BASES)
    size = symmetric_block_size if basis == "symmetric" else tensor_block_size
    return tuple(size(n, d) for n in range(order + 1))


@functools.cache
def _symmetric_plan(n: int, d: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """(starts, weights) of the order-n symmetric block (n >= 1).

    Order: that of itertools.combinations_with_replacement(range(d), n) (= ``multi_indices``),
    i.e. lexicographic in the sorted index tuple. The monomials whose smallest index is i are
    x_i times the order-(n-1) monomials over indices >= i, which are the contiguous tail of the
    order-(n-1) block starting at ``starts[i]`` = C(n-2+d, n-1) - C(n-2+d-i, n-1) (block sizes
    from ``derivations.feature_maps``). ``weights`` are sqrt(monomial_weight(alpha)) =
    1/sqrt(alpha!) in that order (float64).
    """
    m_prev = symmetric_block_size(n - 1, d)
    starts = tuple(m_prev - symmetric_block_size(n - 1, d - i) for i in range(d))
    weight_of = functools.lru_cache(maxsize=None)(
        lambda pattern: math.sqrt(float(monomial_weight(pattern)))
    )
    weights = tuple(
        weight_of(tuple(len(list(g)) for _, g in itertools.groupby(combo)))
        for combo in itertools.combinations_with_replacement(range(d), n)
    )
    return starts, weights


@functools.lru_cache(maxsize=256)
def _weights(n: int, d: int, basis: str, c: float, dtype: torch.dtype, device: torch.device):
    """Per-feature factors of the order-n block, (m_n,) tensor: c^{n/2} / sqrt(alpha! or n!).

    Built outside inference mode: a cached inference tensor could not be saved for a later
    backward pass."""
    with torch.inference_mode(False):
        if basis == "symmetric":
            w = torch.tensor(_symmetric_plan(n, d)[1] if n else (1.0,), dtype=torch.float64)
        else:
            w = torch.full((d**n,), math.sqrt(float(taylor_coefficient(n))), dtype=torch.float64)
        return (w * c ** (n / 2)).to(dtype=dtype, device=device)


def _top_pieces(xt: torch.Tensor, prev: torch.Tensor, n: int, basis: str) -> list[torch.Tensor]:
    """Order-n monomials as pieces whose concatenation (axis -2) is the order-n block."""
    if n == 1:
        return [xt]
    if basis == "symmetric":
        starts = _symmetric_plan(n, xt.shape[-2])[0]
        return [xt[..., i : i + 1, :] * prev[..., s:, :] for i, s in enumerate(starts)]
    return [(prev[..., :, None, :] * xt[..., None, :, :]).flatten(-3, -2)]


def taylor_monomials_t(
    xt: torch.Tensor, order: int, basis: str, *, concatenated: bool = False
) -> list[torch.Tensor] | torch.Tensor:
    """Unweighted order blocks 0..order in column layout: xt (..., d, L) -> (..., m_n, L).

    Symmetric: x^alpha in ``multi_indices`` order, built order by order as x_i times a tail of
    the previous block (contiguous slices, no gathers). Tensor: x^{(x)n}, index (i_1..i_n)
    row-major. Multiply block n by ``_weights(n, ...)[:, None]`` to get the feature block.
    ``concatenated``: one (..., m, L) tensor. Without autograd the products are written straight
    into it (``out=``, one pass instead of product + concatenation; the same values bit for bit).
    """
    if concatenated and not (torch.is_grad_enabled() and xt.requires_grad):
        return _monomials_into(xt, order, basis)
    blocks = [torch.ones(xt.shape[:-2] + (1, xt.shape[-1]), dtype=xt.dtype, device=xt.device)]
    for n in range(1, order):
        blocks.append(torch.cat(_top_pieces(xt, blocks[-1], n, basis), -2))
    if order == 0:
        return blocks[0] if concatenated else blocks
    top = _top_pieces(xt, blocks[-1], order, basis)
    if concatenated:
        return torch.cat(blocks + top, -2)
    return blocks + [torch.cat(top, -2) if len(top) > 1 else top[0]]


def _monomials_into(xt: torch.Tensor, order: int, basis: str) -> torch.Tensor:
    """``taylor_monomials_t(..., concatenated=True)`` written in place (no autograd)."""
    d, L = xt.shape[-2], xt.shape[-1]
    sizes = taylor_block_sizes(order, d, basis)
    out = torch.empty(xt.shape[:-2] + (sum(sizes), L), dtype=xt.dtype, device=xt.device)
    out[..., 0, :] = 1.0
    lo = 1
    for n in range(1, order + 1):
        prev = out[..., lo - sizes[n - 1] : lo, :]
        block = out[..., lo : lo + sizes[n], :]
        if n == 1:
            block.copy_(xt)
        elif basis == "symmetric":
            at = 0
            for i, s in enumerate(_symmetric_plan(n, d)[0]):
                rows = prev.shape[-2] - s
                torch.mul(
                    xt[..., i : i + 1, :], prev[..., s:, :], out=block[..., at : at + rows, :]
                )
                at += rows
        else:
            shape = block.shape[:-2] + (sizes[n - 1], d, L)
            torch.mul(prev[..., :, None, :], xt[..., None, :, :], out=block.view(shape))
        lo += sizes[n]
    return out


def taylor_weights(order: int, d: int, basis: str, c: float, dtype, device) -> torch.Tensor:
    """Concatenated per-feature factors of orders 0..order, (m,) in ``dtype`` on ``device``."""
    return torch.cat([_weights(n, d, basis, c, dtype, device) for n in range(order + 1)])


def taylor_blocks_t(xt: torch.Tensor, order: int, c: float, basis: str) -> list[torch.Tensor]:
    """Weighted feature blocks of orders 0..order, column layout (internal: accumulation dtype)."""
    d = xt.shape[-2]
    return [
        m * _weights(n, d, basis, c, xt.dtype, xt.device)[:, None]
        for n, m in enumerate(taylor_monomials_t(xt, order, basis))
    ]


def rows_to_cols(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Apply a column-layout map (d, N) -> (m, N) to x (..., d), giving (..., m)."""
    lead = x.shape[:-1]
    out = fn(x.reshape(-1, x.shape[-1]).T.contiguous())
    return out.T.reshape(lead + (out.shape[0],))


def _check_order(order: object) -> int:
    return check_int("order", order, 0)


def _order_block(x, n, scale, basis: str) -> torch.Tensor:
    _check_x(x)
    n = check_int("n", n, 0)
    c = resolve_scale(scale, x.shape[-1], exp_type=True)
    return _in_accumulation(
        lambda t: rows_to_cols(lambda u: taylor_blocks_t(u, n, c, basis)[n], t), x
    )


def symmetric_monomial_features(x: torch.Tensor, n: int, *, scale: float | None = None):
    """Order-n symmetric monomial block c^{n/2} x^alpha / sqrt(alpha!) (D1).

    Args:
        x: (..., d) float tensor.
        n: order >= 0.
        scale: c, default 1/sqrt(d).

    Returns:
        (..., C(n+d-1, n)) tensor, dtype of ``x``, monomials in ``multi_indices(n, d)`` order.
        sum over the block of phi(q) phi(k) = (c q.k)^n / n! (multinomial theorem).

    Raises:
        TypeError, ValueError: bad ``x``, ``n`` or ``scale``.
    """
    return _order_block(x, n, scale, "symmetric")


def tensor_power_features(x: torch.Tensor, n: int, *, scale: float | None = None):
    """Order-n tensor-power block (sqrt(c) x)^{(x)n} / sqrt(n!) (D1): a (..., d^n) tensor in
    the dtype of ``x`` with phi(q).phi(k) = (c q.k)^n / n!. Arguments and errors as
    :func:`symmetric_monomial_features`."""
    return _order_block(x, n, scale, "tensor")


def taylor_features(
    x: torch.Tensor,
    order: int,
    *,
    basis: str = "symmetric",
    scale: float | None = None,
    feature_budget: int = FEATURE_BUDGET,
) -> torch.Tensor:
    """Taylor-N feature map: the blocks of orders 0..N concatenated (D1, D3).

    phi(q).phi(k) = kappa_N(c q.k) = sum_{n<=N} (c q.k)^n / n! exactly (up to rounding).

    Args:
        x: (..., d) float tensor.
        order: N >= 0 (bool rejected).
        basis: ``"symmetric"`` (C(N+d, N) features) or ``"tensor"`` (sum_n d^n features).
        scale: c, default 1/sqrt(d); absorbed as sqrt(c) on x.
        feature_budget: maximum feature count; checked before anything is built.

    Returns:
        (..., feature_count(N, d, basis)) tensor, dtype of ``x``.

    Raises:
        TypeError, ValueError: bad ``x``, ``order``, ``basis``, ``scale``; feature budget exceeded.
    """
    _check_x(x)
    order = _check_order(order)
    check_choice("basis", basis, BASES)
    c = resolve_scale(scale, x.shape[-1], exp_type=True)
    check_feature_budget(order, x.shape[-1], basis, feature_budget)
    return _in_accumulation(
        lambda t: rows_to_cols(lambda u: torch.cat(taylor_blocks_t(u, order, c, basis), -2), t), x
    )


# --------------------------------------------------------------------------- FAVOR+
def favor_projection(
    d: int,
    num_features: int,
    *,
    orthogonal: bool = True,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Random directions w_1..w_m (rows) for FAVOR+ (Choromanski et al. 2021, Sec. 2.4, 4).

    iid: rows ~ N(0, I_d). Orthogonal: blocks of d rows from the Q factor of a Gaussian matrix
    (signs fixed by diag(R), so Haar distributed), each row rescaled by the norm of an
    independent N(0, I_d) vector, so every row is still marginally N(0, I_d) (Performer's
    ``gaussian_orthogonal_random_matrix`` with ``scaling=0``).

    Draws in float64 on the generator's device (CPU for ``generator=None``, which uses torch's
    default generator), then converts to ``dtype`` on ``device``.

    Returns:
        (num_features, d) tensor.

    Raises:
        TypeError, ValueError: bad d, num_features, orthogonal, generator, dtype.
    """
    d = check_int("d", d, 1)
    m = check_int("num_features", num_features, 1)
    check_bool("orthogonal", orthogonal)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator: expected a torch.Generator or None, got {type(generator).__name__}"
        )
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype: expected one of {[str(t) for t in FLOAT_DTYPES]}, got {dtype}")
    gen_device = generator.device if generator is not None else torch.device("cpu")
    opts = dict(generator=generator, dtype=torch.float64, device=gen_device)
    if not orthogonal:
        w = torch.randn(m, d, **opts)
    else:
        blocks = []
        for _ in range(-(-m // d)):
            q, r = torch.linalg.qr(torch.randn(d, d, **opts))
            q = q * torch.sign(torch.diagonal(r))  # Haar measure (Mezzadri 2007)
            blocks.append(q.T)
        norms = torch.randn(m, d, **opts).norm(dim=1)
        w = torch.cat(blocks)[:m] * norms[:, None]
    return w.to(device=device, dtype=dtype)


def favor(x: torch.Tensor, projection: torch.Tensor, c: float) -> torch.Tensor:
    """FAVOR+ features without checks (x, projection in the accumulation dtype)."""
    xs = x * math.sqrt(c)
    u = xs @ projection.T - 0.5 * xs.square().sum(-1, keepdim=True)
    return torch.exp(u) / math.sqrt(projection.shape[0])


def check_projection(projection: object, d: int, dtype: torch.dtype, device) -> torch.Tensor:
    if not isinstance(projection, torch.Tensor):
        raise TypeError(f"projection: expected a torch.Tensor, got {type(projection).__name__}")
    if projection.dim() != 2 or projection.shape[1] != d or projection.shape[0] < 1:
        raise ValueError(
            f"projection: expected shape (num_features >= 1, d = {d}), "
            f"got {tuple(projection.shape)}"
        )
    if projection.dtype != dtype:
        raise TypeError(f"projection: expected dtype {dtype}, got {projection.dtype}")
    if projection.device != device:
        raise ValueError(f"projection: expected device {device}, got {projection.device}")
    return projection


def favor_features(
    x: torch.Tensor, projection: torch.Tensor, *, scale: float | None = None
) -> torch.Tensor:
    """FAVOR+ positive random features exp(w_i . x~ - |x~|^2/2) / sqrt(m), x~ = sqrt(c) x.

    Args:
        x: (..., d) float tensor.
        projection: (m, d) from ``favor_projection``, same dtype and device as ``x``.
        scale: c, default 1/sqrt(d).

    Returns:
        (..., m) positive tensor, dtype of ``x``; E_w[phi(q).phi(k)] = exp(c q.k) (D9).

    Raises:
        TypeError, ValueError: bad ``x``, ``projection`` or ``scale``.
    """
    _check_x(x)
    check_projection(projection, x.shape[-1], x.dtype, x.device)
    c = resolve_scale(scale, x.shape[-1], exp_type=True)
    acc = accumulation_dtype(x.dtype)
    return favor(x.to(acc), projection.to(acc), c).to(x.dtype)
