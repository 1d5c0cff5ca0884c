"""The project's own implementations, registered as :class:`~verify.spec.variant.AttentionVariant`.

They are what ``attn-theory verify`` and the report run the catalogue on, and the correct twins
the faulty variants in the tests are compared with. Each Taylor-N variant carries its other
forms (recurrent and chunked, both bases, chunk sizes that do not divide T) and its streaming
state API, so the form-agreement and state properties cover them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from verify.spec.variant import AttentionVariant, StateAPI
from verify.spec.vocabulary import DENOMINATORS, DEVICES, DTYPES, ELEMENTWISE_MAPS, NAMED_MAPS

TAYLOR_ORDERS = tuple(range(7))  # N = 0..6
FAVOR_FEATURES = 64
FAVOR_SEED = 1234
#: chunk sizes of the registered chunked forms: 1, one that divides no small T, one larger
CHUNK_SIZES = (1, 3, 64)

#: what every built-in supports: masks, every D7 denominator, every dtype and device; a row
#: with no visible key returns zeros
SUPPORTS = dict(
    supports_mask=True,
    denominators=DENOMINATORS,
    dtypes=DTYPES,
    devices=DEVICES,
    empty_rows="zeros",  # the API's convention for a row with no visible key
)

_REGISTRY: dict[str, Callable[[], AttentionVariant]] = {}


def register(
    name: str,
) -> Callable[[Callable[[], AttentionVariant]], Callable[[], AttentionVariant]]:
    """Decorator registering a zero-argument factory of an :class:`AttentionVariant`."""

    def deco(factory: Callable[[], AttentionVariant]) -> Callable[[], AttentionVariant]:
        if name in _REGISTRY:
            raise ValueError(f"name: variant {name!r} is already registered")
        _REGISTRY[name] = factory
        return factory

    return deco


def registered() -> dict[str, Callable[[], AttentionVariant]]:
    """Name -> factory of every registered built-in variant."""
    return dict(_REGISTRY)


def get(name: str) -> AttentionVariant:
    """Build the registered variant ``name``.

    Raises:
        KeyError: unknown name (the message lists the registered ones).
    """
    if name not in _REGISTRY:
        raise KeyError(f"name: expected one of {sorted(_REGISTRY)}, got {name!r}")
    return _REGISTRY[name]()


def _softmax(q, k, v, *, causal, attn_mask=None, denominator="sum"):
    from verify.attention import softmax_attention

    return softmax_attention(q, k, v, causal=causal, attn_mask=attn_mask, denominator=denominator)


def _taylor(
    q,
    k,
    v,
    *,
    causal,
    attn_mask=None,
    denominator="sum",
    order,
    form="parallel",
    basis="symmetric",
    chunk_size=64,
):
    from verify.attention import taylor_attention

    return taylor_attention(
        q,
        k,
        v,
        order=order,
        causal=causal,
        attn_mask=attn_mask,
        denominator=denominator,
        form=form,
        basis=basis,
        chunk_size=chunk_size,
    )


def favor_projection_for(d: int, dtype, device):
    """The fixed FAVOR+ directions of the registered ``linear-favor`` variant at dimension d."""
    import torch

    from verify.attention import favor_projection

    gen = torch.Generator(device="cpu").manual_seed(FAVOR_SEED + d)
    proj = favor_projection(d, FAVOR_FEATURES, orthogonal=True, generator=gen, dtype=torch.float64)
    return proj.to(device=device, dtype=dtype)


def _linear(
    q,
    k,
    v,
    *,
    causal,
    attn_mask=None,
    denominator="sum",
    feature_map,
    form="parallel",
    chunk_size=64,
):
    from verify.attention import linear_attention
    from verify.attention._validate import accumulation_dtype

    kw = {}
    if feature_map == "favor":
        kw["projection"] = favor_projection_for(q.shape[-1], accumulation_dtype(q.dtype), q.device)
    return linear_attention(
        q,
        k,
        v,
        feature_map=feature_map,
        causal=causal,
        attn_mask=attn_mask,
        denominator=denominator,
        form=form,
        chunk_size=chunk_size,
        **kw,
    )


def _state_api(kernel: str, **init) -> StateAPI:
    from verify.attention import state as st

    def prefill(q, k, v, state=None):
        extra = {} if state is not None else dict(init)
        if kernel == "favor" and state is None:
            from verify.attention._validate import accumulation_dtype

            extra["projection"] = favor_projection_for(
                q.shape[-1], accumulation_dtype(q.dtype), q.device
            )
        return st.prefill(q, k, v, kernel=kernel, state=state, **extra)

    def step(state, q_t, k_t, v_t):
        return st.step(state, q_t, k_t, v_t)

    return StateAPI(prefill=prefill, step=step)


@register("softmax")
def softmax_variant() -> AttentionVariant:
    return AttentionVariant(
        name="softmax",
        forward=_softmax,
        kernel="softmax",
        **SUPPORTS,
        description="verify.attention.softmax_attention (max-subtracted exp, boolean masks)",
    )


def taylor_variant(order: int) -> AttentionVariant:
    """Taylor-N attention: parallel form, with recurrent/chunked forms in both bases."""
    forms = {}
    for basis in ("symmetric", "tensor"):
        forms[f"recurrent/{basis}"] = partial(_taylor, order=order, form="recurrent", basis=basis)
        for c in CHUNK_SIZES:
            forms[f"chunked/{basis}/C={c}"] = partial(
                _taylor, order=order, form="chunked", basis=basis, chunk_size=c
            )
    return AttentionVariant(
        name=f"taylor-{order}",
        forward=partial(_taylor, order=order),
        kernel=f"taylor:{order}",
        forms=forms,
        state_api=_state_api(f"taylor:{order}"),
        feature_map=partial(_taylor_features, order=order),
        **SUPPORTS,
        description=f"verify.attention.taylor_attention(order={order}), parallel, "
        "recurrent and chunked forms, symmetric and tensor bases",
    )


def _taylor_features(x, *, order):
    from verify.attention import taylor_features

    return taylor_features(x, order, basis="symmetric")


for _n in TAYLOR_ORDERS:
    register(f"taylor-{_n}")(partial(taylor_variant, _n))


def linear_variant(feature_map: str) -> AttentionVariant:
    """Kernel linear attention with a named feature map: parallel, recurrent, chunked forms."""
    forms = {"recurrent": partial(_linear, feature_map=feature_map, form="recurrent")}
    for c in CHUNK_SIZES:
        forms[f"chunked/C={c}"] = partial(
            _linear, feature_map=feature_map, form="chunked", chunk_size=c
        )
    fmap = None
    if feature_map in ELEMENTWISE_MAPS:
        from verify.attention import feature_maps as fm

        fmap = getattr(fm, f"{feature_map}_features")
    return AttentionVariant(
        name=f"linear-{feature_map}",
        forward=partial(_linear, feature_map=feature_map),
        kernel=f"linear:{feature_map}",
        forms=forms,
        state_api=_state_api(feature_map),
        feature_map=fmap,
        feature_scale="none",
        projection=favor_projection_for if feature_map == "favor" else None,
        **SUPPORTS,
        description=f"verify.attention.linear_attention(feature_map={feature_map!r})",
    )


for _m in NAMED_MAPS:
    register(f"linear-{_m}")(partial(linear_variant, _m))
