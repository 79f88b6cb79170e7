"""One OpenAI-compatible chat client for policy, teacher and judge.

Why a wrapper: every caller needs the same four things — retries with backoff on 429/5xx (delegated to
the ``openai`` client's own ``max_retries``/``timeout``), a bound on concurrent requests (a 2-core CPU
server slows down for everyone if flooded), token accounting for budgets/reports, and one clear error
instead of a stack of HTTP exceptions when the endpoint is down.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import openai

from hasp.config import LLMParams, default_of

Messages = list[dict[str, str]]


class LLMError(RuntimeError):
    """The endpoint failed after the client's retries; names the endpoint and model."""


@dataclass(frozen=True)
class LLMConfig:
    """Where and how to call a model; plain data so a run config can hold it.

    ``api_key_env`` names an environment variable with the key (never the key itself); unset means a
    keyless local server, and the placeholder ``"EMPTY"`` is sent. Timeout, retries and concurrency
    default to the ``llm`` section's values (``hasp.config.LLMParams``).
    """

    base_url: str
    model: str
    api_key_env: str | None = None
    timeout_s: float = default_of(LLMParams, "timeout_s")
    max_retries: int = default_of(LLMParams, "max_retries")
    max_concurrency: int = default_of(LLMParams, "max_concurrency")
    temperature: float = 0.0
    max_tokens: int = 256

    def api_key(self) -> str:
        if not self.api_key_env:
            return "EMPTY"
        key = os.environ.get(self.api_key_env)
        if not key:
            raise LLMError(f"environment variable {self.api_key_env} (API key for {self.base_url}) is not set")
        return key


@dataclass(frozen=True)
class ChatResult:
    """One completion: text plus what it cost (tokens) and took (wall seconds, including retries)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float


@dataclass(frozen=True)
class Usage:
    """Cumulative totals over a client's lifetime."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class LLMClient:
    """Thread-safe chat client; share one instance across threads so the concurrency bound holds."""

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self._client = openai.OpenAI(
            base_url=config.base_url,
            api_key=config.api_key(),
            timeout=config.timeout_s,
            max_retries=config.max_retries,
        )
        self._sem = threading.BoundedSemaphore(max(1, config.max_concurrency))
        self._lock = threading.Lock()
        self._usage = Usage()

    @property
    def usage(self) -> Usage:
        with self._lock:
            return self._usage

    def chat(self, messages: Messages, *, temperature: float | None = None, max_tokens: int | None = None,
             stop: list[str] | None = None, seed: int | None = None,
             response_format: dict[str, Any] | None = None) -> ChatResult:
        """Send one chat completion; ``None`` arguments fall back to the config's defaults.
        ``response_format`` (structured output, e.g. a JSON schema) is passed through as given."""
        cfg = self.config
        kwargs: dict[str, Any] = {
            "model": cfg.model,
            "messages": messages,
            "temperature": cfg.temperature if temperature is None else temperature,
            "max_tokens": cfg.max_tokens if max_tokens is None else max_tokens,
        }
        if stop:
            kwargs["stop"] = list(stop)
        if seed is not None:
            kwargs["seed"] = seed
        if response_format is not None:
            kwargs["response_format"] = response_format
        t0 = time.perf_counter()
        with self._sem:
            try:
                resp = self._client.chat.completions.create(**kwargs)
            except openai.APIError as e:
                raise LLMError(f"LLM endpoint {cfg.base_url} (model {cfg.model!r}) failed: {type(e).__name__}: "
                               f"{e} (429/5xx/connection errors were retried up to {cfg.max_retries}x)") from e
        latency = time.perf_counter() - t0
        text = (resp.choices[0].message.content or "") if resp.choices else ""
        if stop:  # servers differ on whether the stop string is included; normalise to excluded
            cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
            if cut >= 0:
                text = text[:cut]
        pt = resp.usage.prompt_tokens if resp.usage else 0
        ct = resp.usage.completion_tokens if resp.usage else 0
        with self._lock:
            u = self._usage
            self._usage = Usage(u.requests + 1, u.prompt_tokens + pt, u.completion_tokens + ct)
        return ChatResult(text=text, prompt_tokens=pt, completion_tokens=ct, latency_s=latency)

    def map_chat(self, batch: list[Messages], **kw: Any) -> list[ChatResult]:
        """Run ``chat`` over many conversations concurrently (≤ max_concurrency), results in input order.

        The first failure is raised (as ``LLMError``) after in-flight calls finish.
        """
        if not batch:
            return []
        workers = min(len(batch), max(1, self.config.max_concurrency))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm") as pool:
            return list(pool.map(lambda m: self.chat(m, **kw), batch))

    def generate(self, messages: Messages, max_tokens: int = 256, temperature: float = 0.0) -> str:
        """Text-only convenience; the ``Teacher`` protocol PFs use."""
        return self.chat(messages, max_tokens=max_tokens, temperature=temperature).text

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
