"""Shared pytest fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_llm import real_llm  # noqa: F401  (session fixture: real model behind a local server)


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
    ``pytest -m "not model and not services"`` needs no list of files kept by hand."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & MODEL_FIXTURES:
            item.add_marker(pytest.mark.model)
        if used & SERVICE_FIXTURES:
            item.add_marker(pytest.mark.services)
