"""A policy client that starts its model server only when first asked.

A warm, fully cached pipeline run should not pay ~30 s to boot a server it never
calls; the flow hands this object to every task that *might* need the model.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

from hasp.config import LLMParams
from hasp.llm.client import LLMClient, LLMConfig
from hasp.llm.structured import backend_dialect


class LazyPolicy:
    def __init__(self, llm: LLMParams, *, model_dir: Path | None = None, port: int | None = None,
                 max_tokens: int = 256, temperature: float = 0.0) -> None:
        self._args = dict(llm=llm, model_dir=model_dir, port=port, max_tokens=max_tokens,
                          temperature=temperature)
        self._lock = threading.Lock()
        self._stack: contextlib.ExitStack | None = None
        self._client: LLMClient | None = None
        self._ever_started = False

    @property
    def started(self) -> bool:
        """True once a server/client was needed (stays True after ``close``)."""
        return self._ever_started

    def client(self) -> LLMClient:
        with self._lock:
            if self._client is None:
                from hasp.llm.endpoints import policy_client

                stack = contextlib.ExitStack()
                self._client = stack.enter_context(policy_client(**self._args))
                self._stack = stack
                self._ever_started = True
            return self._client

    def identity(self) -> dict[str, Any]:
        """What the replies depend on (``policy_identity``), without starting the server."""
        from hasp.llm.endpoints import policy_identity

        a = self._args
        return policy_identity(a["llm"], a["model_dir"], max_tokens=a["max_tokens"], temperature=a["temperature"])

    def endpoint(self) -> LLMConfig:
        """The endpoint of the (started) server, for episodes that run in other processes."""
        return self.client().endpoint()

    @property
    def dialect(self) -> str:
        """The started client's dialect; before the start, the one ``llm.backend`` implies, so asking
        whether to constrain a call does not boot the server."""
        with self._lock:
            client = self._client
        return client.dialect if client is not None else backend_dialect(self._args["llm"].backend)

    def chat(self, messages: list[dict[str, str]], **kw: Any) -> Any:
        return self.client().chat(messages, **kw)

    def map_chat(self, batch: list[list[dict[str, str]]], **kw: Any) -> list[Any]:
        return self.client().map_chat(batch, **kw)

    def generate(self, messages: list[dict[str, str]], max_tokens: int = 256, temperature: float = 0.0) -> str:
        return self.client().generate(messages, max_tokens=max_tokens, temperature=temperature)

    def close(self) -> None:
        with self._lock:
            if self._stack is not None:
                self._stack.close()
            self._stack, self._client = None, None
