"""Shared test configuration: the hypothesis profile (``$ATTN_THEORY_PROFILE``, default ``ci``),
tests marked ``slow`` skipped under ``ci``, one torch thread per process (the suite runs under
``pytest -n auto``), TF32 off."""

from __future__ import annotations

import pytest

from verify import profiles

PROFILE = profiles.load()


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` (the long-shape repeats of ci-sized tests) run outside the ``ci``
    profile only: ``ATTN_THEORY_PROFILE=dev python -m pytest -m slow`` runs them."""
    if PROFILE != "ci":
        return
    skip = pytest.mark.skip(reason="slow: runs outside the ci profile (ATTN_THEORY_PROFILE=dev)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _torch_settings():
    import torch

    torch.set_num_threads(1)
    if hasattr(torch.backends, "cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
    if hasattr(torch.backends, "cudnn"):
        torch.backends.cudnn.allow_tf32 = False
    yield


@pytest.fixture
def no_shrink():
    """Hypothesis without the shrink phase for one test: a failing faulty twin reports its first
    failing example at once (each shrink candidate re-draws inputs and re-runs the mpmath
    oracle, which would take minutes per twin)."""
    with profiles.without_shrinking():
        yield


@pytest.fixture(scope="session")
def derived(request, tmp_path_factory):
    """``derived(did)``: a fresh copy of derivation ``did``'s record, derived once per test run.

    The xdist workers share one pickle per record under the run's base temporary directory
    (a file lock: the first worker to need it derives it, the others wait and read it), so
    the ~45 s of sympy work is paid once, not once per test file. Each call unpickles a new
    copy, so a test may change it. The round trip renders the same bytes as the record
    itself: checked here when it is derived (``record_roundtrip.same_after_round_trip``).
    """
    import pickle

    from filelock import FileLock
    from record_roundtrip import same_after_round_trip

    import derivations

    shared = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):  # an xdist worker: the run's directory
        shared = shared.parent
    root = shared / "derived-records"
    root.mkdir(exist_ok=True)

    def get(derivation_id: str):
        path = root / f"{derivation_id}.pickle"
        with FileLock(f"{path}.lock"):
            if not path.is_file():
                rec = derivations.module(derivation_id).derive()
                data = pickle.dumps(rec)
                same_after_round_trip(rec, pickle.loads(data))
                part = path.with_suffix(".part")
                part.write_bytes(data)
                part.replace(path)
        return pickle.loads(path.read_bytes())

    return get
