"""Long attention inputs generated from a seed: past the block sizes of real kernels, a drawn
tensor of 10^5 elements would make hypothesis slow and its counterexample unreadable, so the
strategy draws a shape, a radius and a seed, and :func:`seeded_inputs` rebuilds the tensors
exactly (the repr and the reproducer say how)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from hypothesis import assume
from hypothesis import strategies as st

from verify.strategies import (
    AttentionInputs,
    Shape,
    _check_dtype,
    _check_radius,
    _rescale,
    _round_to,
)

#: how the keys of a seeded example are made (:func:`seeded_inputs`)
KEY_STRUCTURES = ("random", "low-rank", "near-duplicate")


@dataclass(frozen=True, eq=False, repr=False)
class SeededInputs(AttentionInputs):
    """Attention inputs generated from a seed (long sequences: a drawn tensor of 10^5 elements
    would make hypothesis slow and its counterexample unreadable): :func:`seeded_inputs` with
    these arguments rebuilds them exactly, and the repr and snippet say so."""

    seed: int = 0
    keys: str = "random"

    def recipe(self) -> str:
        tail = "" if self.keys == "random" else f", keys={self.keys!r}"
        return (
            f"seeded_inputs({self.seed}, {self.shape!r}, dtype={self.dtype}, "
            f"causal={self.causal!r}, radius={self.radius!r}, scale={self.scale!r}{tail})"
        )

    def __repr__(self) -> str:
        if self.case != "long":  # replaced tensors: the recipe no longer rebuilds them
            return super().__repr__()
        return f"SeededInputs: {self.recipe()}"

    def snippet(self) -> str:
        if self.case != "long":
            return super().snippet()
        return (
            "import torch\n\nfrom verify.seeded import seeded_inputs\n"
            "from verify.strategies import Shape\n\n"
            f"# a long example, {self.shape}, radius={self.radius!r}\n"
            f"x = {self.recipe()}\n"
            "q, k, v, attn_mask = x.q, x.k, x.v, None\n"
            f"causal = {self.causal!r}\nscale = {self.scale!r}\n"
        )


def seeded_inputs(
    seed: int,
    shape: Shape,
    *,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
    causal: bool = False,
    radius: float | None = None,
    scale: float | None = None,
    bound: float = 2.0,
    min_magnitude: float = 2.0**-6,
    keys: str = "random",
) -> SeededInputs:
    """Inputs of ``shape`` from ``torch.Generator().manual_seed(seed)``: elements of magnitude
    uniform in [min_magnitude, bound] with a random sign, rounded to ``dtype``; with ``radius``
    q and k rescaled so that max |c q.k| <= radius exactly (as :func:`attention_inputs`).
    ``keys`` (:data:`KEY_STRUCTURES`): ``random``; ``low-rank`` (every key a combination of two
    drawn vectors: scores of rank <= 2, where backward kernels have hidden their bugs);
    ``near-duplicate`` (every key the first one plus 2^-6 of another draw: nearly tied scores).

    Raises:
        ValueError: a bad dtype, seed, shape, radius or key structure; causal with T != S.
    """
    if keys not in KEY_STRUCTURES:
        raise ValueError(f"keys: expected one of {KEY_STRUCTURES}, got {keys!r}")
    _check_dtype(dtype)
    _check_radius(radius)
    if not isinstance(shape, Shape):
        raise TypeError(f"shape: expected a Shape, got {type(shape).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected an int >= 0, got {seed!r}")
    if causal and shape.T != shape.S:
        raise ValueError(f"causal: needs T == S, got {shape}")
    gen = torch.Generator().manual_seed(seed)

    def arr(dims):
        mag = min_magnitude + (bound - min_magnitude) * torch.rand(
            dims, generator=gen, dtype=torch.float64
        )
        sign = torch.randint(0, 2, dims, generator=gen).to(torch.float64) * 2 - 1
        return _round_to((mag * sign).numpy(), dtype)

    qd, kd, vd = arr(shape.q), arr(shape.k), arr(shape.v)
    if keys == "low-rank":
        basis = arr((*shape.k[:2], 2, shape.d))
        mix = arr((*shape.k[:3], 2))
        kd = _round_to(mix @ basis, dtype)
    elif keys == "near-duplicate":
        kd = _round_to(kd[..., :1, :] + 2.0**-6 * kd, dtype)
    if radius is not None:
        rescaled = _rescale(qd, kd, scale, float(radius), dtype)
        if rescaled is None:
            raise ValueError(f"radius: {radius!r} overflows {dtype} at this shape")
        qd, kd = rescaled
    device = torch.device(device)

    def tensor(a):
        return torch.from_numpy(np.ascontiguousarray(a)).to(dtype=dtype, device=device)

    return SeededInputs(
        q=tensor(qd), k=tensor(kd), v=tensor(vd), causal=causal, scale=scale,
        radius=None if radius is None else float(radius), shape=shape, case="long", seed=seed,
        keys=keys,
    )  # fmt: skip


def seeded_attention_inputs(
    shape: st.SearchStrategy[Shape],
    *,
    dtype: torch.dtype,
    device: str | torch.device = "cpu",
    causal: bool,
    radius: st.SearchStrategy[float | None],
    min_magnitude: float = 2.0**-6,
    keys: tuple[str, ...] = ("random",),
) -> st.SearchStrategy[SeededInputs]:
    """Strategy of :class:`SeededInputs`: a drawn shape, radius, key structure (of ``keys``,
    shrinking to the first) and seed (each shrinks: the shape towards its smallest lengths, the
    seed towards 0); a radius that overflows the dtype at the drawn shape is rejected."""

    @st.composite
    def draw(draw_):
        shp = draw_(shape)
        r = draw_(radius)
        structure = draw_(st.sampled_from(keys))
        seed = draw_(st.integers(0, 2**16))
        try:
            return seeded_inputs(seed, shp, dtype=dtype, device=device, causal=causal, radius=r,
                                 min_magnitude=min_magnitude, keys=structure)  # fmt: skip
        except ValueError:
            assume(False)

    return draw()
