"""Shared pytest fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_llm import real_llm  # noqa: F401  (session fixture: real model behind a local server)


def _share_the_cores() -> None:
    """Give torch in each pytest-xdist worker its share of the cores, in this process and in every
    process it starts (CLI runs, DVC stages). Two workers that each train with both cores' OpenMP
    threads oversubscribe them: threads waiting at barriers for a preempted sibling made a two-step
    LoRA SFT of the embedded model take 53.8 s with two threads against 28.7 s with one, beside another
    job. llama.cpp keeps its own setting (``llm.threads``). A setting the caller made wins."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if workers > 1:
        share = str(max(1, (os.cpu_count() or 1) // workers))
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, share)


_share_the_cores()


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One Prefect API for every Prefect test of the session; yields its ``PREFECT_HOME``.

    Starting the API migrates a fresh database, which takes tens of seconds on a loaded 2-core
    machine; paying it once per session instead of once per module is most of a Prefect test's
    cost. ``PREFECT_HOME`` is a session temp dir, so task caches and results never touch the
    user's ``~/.prefect`` and never leak from one test session into the next. Prefect is imported
    here, inside the fixture, so tests that never ask for it do not load it.
    """
    home = tmp_path_factory.mktemp("prefect_home")
    mp = pytest.MonkeyPatch()
    mp.setenv("PREFECT_HOME", str(home))
    mp.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    mp.setenv("PREFECT_LOGGING_LEVEL", "WARNING")
    from prefect.settings import PREFECT_HOME, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    try:
        with temporary_settings(updates={PREFECT_HOME: home}), prefect_test_harness(server_startup_timeout=240):
            yield home
    finally:
        mp.undo()


#: fixtures that start the real model (llama.cpp or transformers serving the embedded weights) or train one
MODEL_FIXTURES = frozenset({"real_llm", "tiny_model_dir", "transformers_llm", "llamacpp", "peft_and_llamacpp"})
#: fixtures that start a service: a Prefect API, or a git + DVC repository the test runs DVC in
SERVICE_FIXTURES = frozenset({"prefect_harness", "dvc_repo"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests by the fixtures they use (directly or through other fixtures), so the quick lane
    ``pytest -m "not model and not services"`` needs no list of files kept by hand.

    Then put the modules that start a model or a service first. scripts/test.sh hands whole modules
    to the xdist workers in this order (``--dist loadscope --no-loadscope-reorder``): a module's
    tests share its module fixtures (an epoch run, a deployed flow) that one test at a time would
    have built on both workers, and long modules first leave the short ones to even out the end."""
    heavy: set[str] = set()
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & MODEL_FIXTURES:
            item.add_marker(pytest.mark.model)
        if used & SERVICE_FIXTURES:
            item.add_marker(pytest.mark.services)
        if used & (MODEL_FIXTURES | SERVICE_FIXTURES):
            heavy.add(item.path)
    items.sort(key=lambda item: item.path not in heavy)  # stable: order within a group is kept
