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

    @property
    def q(self) -> tuple[int, int, int, int]:
        return (self.B, self.H, self.T, self.d)

    @property
    def k(self) -> tuple[int, int, int, int]:
        return (self.B, self.H, self.S, self.d)

    @property
    def v(self) -> tuple[int, int, int, int]:
        return (self.B, self.H, self.S, self.d_v)

    @property
    def out(self) -> tuple[int, int, int, int]:
        return (self.B, self.H, self.T, self.d_v)
