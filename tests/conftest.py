"""Shared pytest fixtures."""

from fixtures_llm import real_llm  # noqa: F401  (session fixture: real model behind a local server)
