"""Registers the ``zoo`` marker (the project runs pytest with ``--strict-markers``)."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "zoo: checks a pinned released package in a subprocess (tests/zoo; runs only with "
        "ATTN_THEORY_ZOO=1, its own CI step)",
    )
