"""The sizes of one attention call."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """Sizes of one attention call: q (B, H, T, d), k (B, H, S, d), v (B, H, S, d_v).

    Raises:
        ValueError: a size below 1 (the message names it).
    """

    B: int
    H: int
    T: int
    S: int
    d: int
    d_v: int

    def __post_init__(self) -> None:
        for name in ("B", "H", "T", "S", "d", "d_v"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")

    q = property(lambda s: (s.B, s.H, s.T, s.d), doc="(B, H, T, d): queries")
    k = property(lambda s: (s.B, s.H, s.S, s.d), doc="(B, H, S, d): keys")
    v = property(lambda s: (s.B, s.H, s.S, s.d_v), doc="(B, H, S, d_v): values")
    out = property(lambda s: (s.B, s.H, s.T, s.d_v), doc="(B, H, T, d_v): the output")
