"""One parsed value for every kernel name of the suite.

Claims name a kernel as ``softmax``, ``taylor:N`` (kappa_N, D1), ``linear:MAP`` (kernel linear
attention with a feature map, D3: MAP in ``identity``, ``elu1``, ``relu``, ``favor``,
``taylor:N``, or ``phi``: the variant's own declared ``feature_map``), ``sigmoid``
(unnormalized sigma(c q.k + b), D14) or ``unknown``; the attention functions name feature maps
(``elu1``, ``taylor:N``, ``favor``, ...); the mpmath oracle calls the softmax kernel ``exp``.
:func:`parse`, :func:`from_feature_map` and :func:`taylor_order` are the only places these
strings are read.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from verify.spec.vocabulary import ELEMENTWISE_MAPS, NAMED_MAPS, USER_MAP

FAMILIES = ("softmax", "taylor", "linear", "sigmoid", "unknown")
_TAYLOR = re.compile(r"taylor:(\d+)\Z")


def taylor_order(name: object) -> int | None:
    """N for ``"taylor:N"`` (N a non-negative integer), None for any other value."""
    if not isinstance(name, str):
        return None
    m = _TAYLOR.match(name)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class Kernel:
    """A kernel claim: ``family`` (softmax | taylor | linear | sigmoid | unknown), the truncation
    ``order`` (``taylor:N`` and ``linear:taylor:N``) and the feature ``map`` (linear family)."""

    family: str
    order: int | None = None
    map: str | None = None

    def __str__(self) -> str:
        if self.family == "taylor":
            return f"taylor:{self.order}"
        if self.family == "linear":
            return f"linear:{self.map}"
        return self.family

    @property
    def known(self) -> bool:
        return self.family != "unknown"

    @property
    def exp_type(self) -> bool:
        """Kernels of the exp family: scores scaled by c (default 1/sqrt(d)), absorbed as
        sqrt(c) on q and k in feature form (softmax, kappa_N, FAVOR+, Taylor features)."""
        return (
            self.family in ("softmax", "taylor", "sigmoid")
            or self.map == "favor"
            or self.taylor_map
        )

    @property
    def taylor_map(self) -> bool:
        """``linear:taylor:N``: kappa_N through its feature map."""
        return self.family == "linear" and self.order is not None

    @property
    def elementwise(self) -> bool:
        """An element-wise feature map (identity, elu1, relu): scale on q only, default 1."""
        return self.map in ELEMENTWISE_MAPS

    @property
    def positive(self) -> bool | None:
        """True for positive kernels (exp, even kappa_N, elu1, favor); False for signed or
        vanishing ones (odd kappa_N, identity, relu); None when unknown."""
        if self.family in ("softmax", "sigmoid"):
            return True
        if self.order is not None:
            return self.order % 2 == 0
        if self.map in ("elu1", "favor"):
            return True
        if self.map in ("identity", "relu"):
            return False
        return None

    @property
    def feature_map(self) -> str | None:
        """The feature-map name of the attention functions (``taylor:N`` for kappa_N)."""
        if self.family == "taylor":
            return f"taylor:{self.order}"
        return self.map

    @property
    def oracle_name(self) -> str | None:
        """The kernel name of ``verify.exact.oracle.reference``: ``exp``, ``taylor:N`` or a map."""
        if self.family == "softmax":
            return "exp"
        if self.family == "sigmoid":
            return "sigmoid"
        return self.feature_map

    def default_scale(self, d: int) -> float:
        """The default score scale at head dimension d: 1/sqrt(d) for exp-type kernels, 1 for
        element-wise maps (a factor on q before the map)."""
        return 1.0 / math.sqrt(d) if self.exp_type else 1.0

    def kappa_at_zero(self, d: int) -> int | None:
        """kappa(0) at head dimension d (an exact integer), None if unknown.

        exp and kappa_N: e^0 = kappa_N(0) = 1 (D1); elu1: phi(0) = elu(0) + 1 = 1 per coordinate,
        so phi(0).phi(0) = d (D3); FAVOR+: m features exp(0)/sqrt(m), phi(0).phi(0) = 1 (D9);
        identity and relu: phi(0) = 0.
        """
        if self.family == "softmax" or self.order is not None:
            return 1
        return {"elu1": d, "favor": 1, "identity": 0, "relu": 0}.get(self.map)


UNKNOWN = Kernel("unknown")


def parse(text: object, *, name: str = "kernel") -> Kernel:
    """Parse a kernel claim (``softmax`` -- alias ``exp`` --, ``taylor:N``, ``linear:MAP``,
    ``unknown``).

    Raises:
        ValueError: anything else (the message names ``name`` and lists the accepted forms).
    """
    if text in ("softmax", "exp"):
        return Kernel("softmax")
    if text == "unknown":
        return UNKNOWN
    if text == "sigmoid":
        return Kernel("sigmoid")
    if text == f"linear:{USER_MAP}":
        return Kernel("linear", map=USER_MAP)
    n = taylor_order(text)
    if n is not None:
        return Kernel("taylor", order=n)
    if isinstance(text, str) and text.startswith("linear:"):
        try:
            return from_feature_map(text.split(":", 1)[1])
        except ValueError:
            pass
    raise ValueError(
        f"{name}: expected 'softmax', 'taylor:N', 'linear:MAP' (MAP in "
        f"{NAMED_MAPS + ('taylor:N', USER_MAP)}; {USER_MAP}: the declared feature_map), "
        f"'sigmoid' or 'unknown', got {text!r}"
    )


def from_feature_map(text: object, *, name: str = "feature_map") -> Kernel:
    """The ``linear:`` kernel of a feature-map name (``identity``, ``elu1``, ``relu``, ``favor``,
    ``taylor:N``).

    Raises:
        ValueError: not a feature-map name.
    """
    if text in NAMED_MAPS:
        return Kernel("linear", map=text)
    n = taylor_order(text)
    if n is not None:
        return Kernel("linear", order=n, map=f"taylor:{n}")
    raise ValueError(
        f"{name}: expected one of {NAMED_MAPS + ('taylor:N',)} (N an integer >= 0), got {text!r}"
    )


def parse_name(text: object, *, name: str = "kernel") -> Kernel:
    """A kernel claim (:func:`parse`) or a bare feature-map name (:func:`from_feature_map`):
    ``exp``/``softmax``, ``taylor:N``, ``linear:MAP``, ``elu1``, ``favor``, ...

    Raises:
        ValueError: neither (the message names ``name`` and lists both forms).
    """
    for read in (parse, from_feature_map):
        try:
            return read(text)
        except ValueError:
            pass
    raise ValueError(
        f"{name}: expected 'exp', 'softmax', 'taylor:N', 'linear:MAP' or a feature map "
        f"{NAMED_MAPS + ('taylor:N',)}, got {text!r}"
    )
