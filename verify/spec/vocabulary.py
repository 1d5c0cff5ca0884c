"""The suite's vocabulary: every closed set of names a claim, a form or a check may use.

Each table is defined here once; the attention forms, the oracle, the error model, the checks and
the command line import it from here.
"""

from __future__ import annotations

#: tensor layouts a variant may take: (batch, heads, time, dim) or (batch, time, heads, dim)
LAYOUTS = ("BHTD", "BTHD")
#: which ``causal`` values a variant supports
CAUSAL_SUPPORT = ("yes", "no", "both")
#: causal alignment when T != S: SDPA's top-left or FlashAttention's (>= 2.1) bottom-right
ALIGNMENTS = ("top-left", "bottom-right")
#: floating dtypes, widest first
DTYPES = ("float64", "float32", "bfloat16", "float16")
#: dtypes that accumulate in float32 and are checked against the two-level model (D10)
LOW_PRECISION_DTYPES = ("bfloat16", "float16")
#: the dtypes every property runs in
FULL_PRECISION_DTYPES = ("float64", "float32")
DEVICES = ("cpu", "cuda")

#: denominator modes of D7 (``sum`` is softmax normalization), in the suite's canonical order
DENOMINATORS = ("sum", "none", "l2", "rms", "layernorm", "count")
#: the modes for which the output is linear in v (the others normalize the numerator itself)
LINEAR_IN_V_DENOMINATORS = ("sum", "none", "count")

#: the element-wise feature maps (scale c multiplies q before the map)
ELEMENTWISE_MAPS = ("identity", "elu1", "relu")
#: named feature maps of kernel linear attention (D3, D9), besides ``taylor:N``
NAMED_MAPS = ELEMENTWISE_MAPS + ("favor",)
#: every feature-map name, as error messages list them
FEATURE_MAPS = ("identity", "elu1", "relu", "taylor:N", "favor")
#: q and k normalization (``qk_norm``): x / max(|x|, QK_NORM_EPS), the default of
#: ``torch.nn.functional.normalize`` (a vector shorter than it is divided by it, not by its norm)
QK_NORM_EPS = 1e-12
#: the kernel ``linear:phi``: the variant's own declared feature map, kappa(q, k) = phi(c q).phi(k)
USER_MAP = "phi"

#: the forms of Taylor-N and kernel linear attention (D2, D3)
FORMS = ("parallel", "recurrent", "chunked")
#: bases of the Taylor feature map (D1): monomials x^alpha/sqrt(alpha!) or x^(tensor n)/sqrt(n!)
BASES = ("symmetric", "tensor")
#: what a variant returns for a query row that sees no key (a convention the theory leaves open):
#: zeros (SDPA's current convention, this project's API), NaN (0/0), the uniform mean of the
#: values, or anything else
EMPTY_ROW_CONVENTIONS = ("zeros", "nan", "uniform", "other")

#: how a declared eps enters the ``sum`` denominator: ``add`` N/(D + eps) (this project's API),
#: or ``floor`` N/max(D, eps) (a clamp at eps, e.g. ``D.clamp(min=eps)``; the max is exact)
EPS_MODES = ("add", "floor")

#: what a user variant's ``feature_map`` absorbs (``sqrt``: the default exp scale on q and k)
FEATURE_SCALES = ("sqrt", "none")


def one_of(name: str, value: object, allowed: tuple) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is in ``allowed``."""
    if value not in allowed:
        raise ValueError(f"{name}: expected one of {allowed}, got {value!r}")
