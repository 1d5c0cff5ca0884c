"""pytest plugin: ``pytest --attn-variant pkg.module:object`` runs the property battery on a
variant, one pytest test per property.

Registered through the ``pytest11`` entry point. Importing it costs nothing: it only adds the
``--attn-*`` options; torch, hypothesis and the catalogue load when ``--attn-variant`` is given.
"""

from __future__ import annotations


def pytest_addoption(parser) -> None:
    from verify.cli.options import add_claim_options
    from verify.spec.vocabulary import DEVICES, DTYPES

    group = parser.getgroup("attn-theory", "attention variant checks (attn-theory)")
    group.addoption(
        "--attn-variant",
        action="append",
        default=[],
        metavar="PKG.MODULE:OBJECT",
        help="check this attention variant (repeatable)",
    )
    add_claim_options(group.addoption, prefix="attn-")
    group.addoption("--attn-dtype", default=None, choices=DTYPES, help="dtype to run")
    group.addoption("--attn-device", default=None, choices=DEVICES, help="device to run")
    group.addoption(
        "--attn-select",
        action="append",
        default=[],
        metavar="PROPERTY",
        help="only these properties",
    )
    group.addoption("--attn-max-examples", default=None, type=int, help="examples per property")
    group.addoption("--attn-seed", default=0, type=int, help="seed")


def pytest_collection_modifyitems(session, config, items) -> None:
    specs = config.getoption("--attn-variant")
    if not specs:
        return
    collector_cls = __getattr__("VariantCollector")
    for spec in specs:
        collector = collector_cls.from_parent(session, name=f"attn-variant[{spec}]", spec=spec)
        items.extend(collector.collect())


def _cache_key():
    """The one stash key of the battery cache (created on first use; a direct call of the module
    ``__getattr__`` would make a new key every time and rerun the battery per property)."""
    return globals().get("_CACHE_KEY") or __getattr__("_CACHE_KEY")


def _battery(config, spec: str) -> dict:
    """Run the whole battery once per variant (isolated worker + watchdog); cached."""
    cache = config.stash.setdefault(_cache_key(), {})
    if spec not in cache:
        from verify.cli.options import claims_from
        from verify.engine import check as engine

        opt = config.getoption
        dtype = opt("--attn-dtype")
        cache[spec] = engine.check(
            spec,
            dtypes=(dtype,) if dtype else None,
            device=opt("--attn-device") or "cpu",
            select=opt("--attn-select") or None,
            max_examples=opt("--attn-max-examples"),
            seed=opt("--attn-seed"),
            **claims_from(opt, prefix="attn-"),
        )
    return cache[spec]


def _make_classes():
    import pytest

    class PropertyItem(pytest.Item):
        """One property of the catalogue on one variant (all dtypes run)."""

        def __init__(self, *, spec: str, property_id: str, **kw) -> None:
            super().__init__(**kw)
            self.spec = spec
            self.property_id = property_id

        def runtest(self) -> None:
            result = _battery(self.config, self.spec)
            rows = [r for r in result.results if r.property_id == self.property_id]
            bad = [r for r in rows if r.status == "fail"]
            if bad:
                raise PropertyFailed(bad)
            erred = [r for r in rows if r.status == "error"]
            if erred:  # the checker's own fault: never reported as the variant's failure
                pytest.skip(f"internal error of attn-theory (not the variant's): {erred[0].reason}")
            if rows and all(r.status == "skip" for r in rows):
                pytest.skip(rows[0].reason or "not applicable")

        def repr_failure(self, excinfo):
            if isinstance(excinfo.value, PropertyFailed):
                from verify.render.check import failure_text

                return "\n".join(
                    f"[{r.dtype}] {r.statement}\n{failure_text(r)}" for r in excinfo.value.rows
                )
            return super().repr_failure(excinfo)

        def reportinfo(self):
            return self.spec, None, f"{self.spec}::{self.property_id}"

    item_cls = PropertyItem

    class VariantCollector(pytest.Collector):
        def __init__(self, *, spec: str, **kw) -> None:
            super().__init__(**kw)
            self.spec = spec

        def collect(self):
            from verify.properties import catalogue

            select = self.config.getoption("--attn-select")
            for prop in catalogue():
                if select and prop.id not in select:
                    continue
                yield item_cls.from_parent(self, name=prop.id, spec=self.spec, property_id=prop.id)

    return PropertyItem, VariantCollector


class PropertyFailed(Exception):
    def __init__(self, rows) -> None:
        super().__init__(f"{len(rows)} failing run(s)")
        self.rows = rows


def __getattr__(name: str):
    if name in ("PropertyItem", "VariantCollector"):
        item, collector = _make_classes()
        globals()["PropertyItem"], globals()["VariantCollector"] = item, collector
        return globals()[name]
    if name == "_CACHE_KEY":
        import pytest

        key = pytest.StashKey[dict]()
        globals()["_CACHE_KEY"] = key
        return key
    raise AttributeError(name)
