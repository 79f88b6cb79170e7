"""Session fixture for tests that need the real embedded model behind a real server.

Why session scope: the server (llama.cpp on the embedded GGUF, the default CPU engine; a few seconds
to start) is paid once per test run; every test then shares one warm server.
Wire it in with ``from fixtures_llm import real_llm`` in ``tests/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hasp.config import LlamaCppParams
from hasp.llm.client import LLMClient, LLMConfig
from hasp.llm.llamacpp_server import LlamaCppServer, resolve_gguf_checkpoint


@pytest.fixture(scope="session")
def real_llm() -> Iterator[LLMClient]:
    """An ``LLMClient`` (greedy, max_concurrency 8) talking to a fresh local SmolLM2-135M server."""
    settings = LlamaCppParams(startup_timeout_s=600.0)
    with LlamaCppServer.from_settings(resolve_gguf_checkpoint(None, None), None, settings) as srv:
        client = LLMClient(LLMConfig(base_url=srv.base_url, model=srv.model_name, timeout_s=300.0,
                                     max_retries=2, max_concurrency=8, temperature=0.0, max_tokens=64))
        try:
            yield client
        finally:
            client.close()
