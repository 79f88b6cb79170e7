"""One OpenAI-compatible chat client for policy, teacher and judge.

Why a wrapper: every caller needs the same things — retries with backoff on the failures that may
pass (429, 5xx, connection, timeout, a 200 whose body is not JSON or has no choices), a bound on
concurrent requests (a 2-core CPU server slows down for everyone if flooded), token accounting for
budgets/reports, one error type naming endpoint and model instead of a stack of HTTP exceptions,
and calls that stop within a fraction of a second on an interrupt or a passed episode deadline
(``hasp.llm.cancel``). The ``openai`` client makes single attempts; the retries are ours, so every
failure kind goes through the same policy.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Callable

import openai

from hasp.config import LLMParams, default_of
import hasp.llm.cancel as cancel
import hasp.llm.structured as structured

log = logging.getLogger(__name__)

Messages = list[dict[str, str]]

#: HTTP statuses worth another attempt: request timeout, conflict, rate limit, server errors
RETRY_STATUSES = frozenset({408, 409, 429})
#: backoff between attempts: BACKOFF_S * 2**attempt, capped (a server's retry-after wins when given)
BACKOFF_S, BACKOFF_CAP_S = 0.5, 8.0
#: greedy replies a client keeps for identical requests (``llm.reply_cache``); the oldest go first
REPLY_CACHE_SIZE = 50_000


class LLMError(RuntimeError):
    """A model call failed (after the retries that made sense); names the endpoint and model.

    ``kind`` says what failed: ``http <status>``, ``connection``, ``timeout``, ``non-JSON body``,
    ``no choices``, ``deadline`` or ``config``; ``detail`` is what the endpoint said."""

    def __init__(self, message: str, *, endpoint: str = "", model: str = "", kind: str = "",
                 attempts: int = 0, detail: str = "") -> None:
        super().__init__(message)
        self.endpoint, self.model, self.kind, self.attempts = endpoint, model, kind, attempts
        self.detail = detail


class LLMDeadlineExceeded(LLMError):
    """The calling thread's deadline (``cancel.call_deadline``) passed before the endpoint answered."""


class LLMInterrupted(KeyboardInterrupt):
    """The process is being interrupted (``cancel.abort_calls``): no error handler should contain
    this as one failed episode, so it is a KeyboardInterrupt, not an ``LLMError``."""


class _Failure(Exception):
    """One failed attempt: what failed, whether another attempt may pass, the server's wait hint."""

    def __init__(self, kind: str, detail: str, retryable: bool, retry_after_s: float | None = None) -> None:
        super().__init__(detail)
        self.kind, self.detail, self.retryable, self.retry_after_s = kind, detail, retryable, retry_after_s


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
    max_reply_chars: int = default_of(LLMParams, "max_reply_chars")
    temperature: float = 0.0
    max_tokens: int = 256
    top_p: float | None = None  # nucleus mass sent with every request; None = the server's default
    #: fields every request carries beyond the OpenAI ones, e.g. llama.cpp's ``lora`` list that selects a
    #: trained checkpoint's adapters on a server holding several (``hasp.llm.llamacpp_server``)
    extra_body: dict[str, Any] | None = None
    #: strings that end the model's turn in its chat format (``hasp.embedded_models``), sent with every request
    #: beside the caller's own: a base model laid out as a transcript does not stop by itself
    stop: tuple[str, ...] = ()
    #: how the server takes a grammar or JSON schema (``hasp.llm.structured``): llamacpp, vllm or openai
    dialect: str = "openai"
    #: a greedy request identical to one sent before gets that reply again (``llm.reply_cache``)
    reply_cache: bool = default_of(LLMParams, "reply_cache")

    def __post_init__(self) -> None:
        if self.dialect not in structured.DIALECTS:
            raise ValueError(f"LLMConfig.dialect must be one of {', '.join(structured.DIALECTS)}, "
                             f"not {self.dialect!r}")

    def api_key(self) -> str:
        if not self.api_key_env:
            return "EMPTY"
        key = os.environ.get(self.api_key_env)
        if not key:
            raise LLMError(f"environment variable {self.api_key_env} (API key for {self.base_url}) is not set",
                           endpoint=self.base_url, model=self.model, kind="config")
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
    """Cumulative totals over a client's lifetime. ``constrained``: requests answered under the
    grammar or JSON schema they asked for; ``constraint_fallbacks``: requests that asked for one and
    were answered without it (the dialect cannot say it, or the endpoint refused it); ``cached``: greedy
    requests answered from the client's reply cache, which ``requests`` and the token totals leave out."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    constrained: int = 0
    constraint_fallbacks: int = 0
    cached: int = 0  # greedy requests answered from the reply cache (not sent; not in the token totals)

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
            max_retries=0,
        )
        self._sem = threading.BoundedSemaphore(max(1, config.max_concurrency))
        self._lock = threading.Lock()
        self._usage = Usage()
        self._refused: set[str] = set()  # constraints this endpoint refused: not sent again
        self._warned: set[str] = set()   # constraint kinds whose fallback was logged as a warning
        self._replies: OrderedDict[str, tuple[str, int, int]] = OrderedDict()  # greedy request -> its reply
        #: computes what this client's replies depend on, when whoever built it knows (``policy_client``
        #: and ``teacher_client`` do); a client built by hand says nothing, so nothing resumes its episodes
        self.served: Callable[[], dict[str, Any]] | None = None

    def identity(self) -> dict[str, Any] | None:
        """The weights and decoding defaults behind this client (None when unknown): an evaluation's
        journal resumes only a cell whose policy says the same. Computed when asked (it hashes weights)."""
        return None if self.served is None else {**self.served(), "extra_body": self.config.extra_body}

    @property
    def usage(self) -> Usage:
        with self._lock:
            return self._usage

    @property
    def dialect(self) -> str:
        """How this endpoint takes a grammar or a JSON schema (``hasp.llm.structured``)."""
        return self.config.dialect

    @property
    def constraint_fallbacks(self) -> int:
        """Requests that asked for a grammar or JSON schema and were answered without it."""
        return self.usage.constraint_fallbacks

    def chat(self, messages: Messages, *, temperature: float | None = None, max_tokens: int | None = None,
             stop: list[str] | None = None, seed: int | None = None,
             response_format: dict[str, Any] | None = None, grammar: str | None = None,
             json_schema: dict[str, Any] | None = None) -> ChatResult:
        """Send one chat completion; ``None`` arguments fall back to the config's defaults.

        ``response_format`` is passed through as given (the caller handles a refusal). ``grammar``
        (GBNF) or ``json_schema`` constrains decoding, encoded for the config's ``dialect``; when the
        dialect cannot say it or the endpoint refuses it, the request goes out without it: one warning
        per kind in the log, every such request counted in ``usage.constraint_fallbacks``."""
        enc = structured.encode(self.config.dialect, grammar=grammar, json_schema=json_schema)
        if enc.kind and response_format is not None:
            raise ValueError("response_format and a grammar or JSON schema cannot go on one request")
        if self.config.stop:
            stop = [*(stop or []), *(s for s in self.config.stop if s not in (stop or []))]
        kwargs = self._request(messages, temperature, max_tokens, stop, seed, response_format)
        if not enc.kind:
            return self._send(kwargs, stop)
        if enc.dropped or enc.key in self._refused:
            self._fell_back(enc, enc.dropped or "the endpoint refused it before")
            return self._send(kwargs, stop)
        try:
            result = self._send(self._constrained(kwargs, enc), stop)
        except LLMError as e:
            if not structured.is_refusal(_status(e.kind), e.detail):
                raise
            with self._lock:
                self._refused.add(enc.key)
            self._fell_back(enc, f"{e.kind}: {e.detail}")
            return self._send(kwargs, stop)
        with self._lock:
            self._usage = replace(self._usage, constrained=self._usage.constrained + 1)
        return result

    def _request(self, messages: Messages, temperature: float | None, max_tokens: int | None,
                 stop: list[str] | None, seed: int | None, response_format: dict[str, Any] | None) -> dict[str, Any]:
        cfg = self.config
        kwargs: dict[str, Any] = {
            "model": cfg.model,
            "messages": messages,
            "temperature": cfg.temperature if temperature is None else temperature,
            "max_tokens": cfg.max_tokens if max_tokens is None else max_tokens,
        }
        if cfg.top_p is not None:
            kwargs["top_p"] = cfg.top_p
        if stop:
            kwargs["stop"] = list(stop)
        if seed is not None:
            kwargs["seed"] = seed
        if response_format is not None:
            kwargs["response_format"] = response_format
        if cfg.extra_body:
            kwargs["extra_body"] = dict(cfg.extra_body)
        return kwargs

    @staticmethod
    def _constrained(kwargs: dict[str, Any], enc: structured.Encoded) -> dict[str, Any]:
        out = dict(kwargs)
        if enc.body:
            out["extra_body"] = {**(kwargs.get("extra_body") or {}), **enc.body}
        if enc.response_format is not None:
            out["response_format"] = enc.response_format
        return out

    def _fell_back(self, enc: structured.Encoded, why: str) -> None:
        """Count one unconstrained answer to a constrained request; warn the first time per kind."""
        cfg = self.config
        with self._lock:
            self._usage = replace(self._usage, constraint_fallbacks=self._usage.constraint_fallbacks + 1)
            first = enc.kind not in self._warned
            self._warned.add(enc.kind)
        (log.warning if first else log.debug)(
            "LLM endpoint %s (model %r, dialect %s): %s not applied (%s); answering without it, counted in "
            "usage.constraint_fallbacks", cfg.base_url, cfg.model, cfg.dialect, enc.kind, why[:300])

    def _reply_key(self, kwargs: dict[str, Any]) -> str | None:
        """The cache key of a greedy request: everything the reply depends on (the model name and, in
        ``extra_body``, the adapters and grammar travel in ``kwargs``; the endpoint is this client's).
        None for a sampled request, which must decode anew each time."""
        if not self.config.reply_cache or kwargs.get("temperature") != 0:
            return None
        text = json.dumps([self.config.base_url, kwargs], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def _send(self, kwargs: dict[str, Any], stop: list[str] | None) -> ChatResult:
        key = self._reply_key(kwargs)
        if key is not None:
            with self._lock:
                hit = self._replies.get(key)
                if hit is not None:
                    self._replies.move_to_end(key)
                    self._usage = replace(self._usage, cached=self._usage.cached + 1)
            if hit is not None:
                return ChatResult(text=hit[0], prompt_tokens=hit[1], completion_tokens=hit[2], latency_s=0.0)
        result = self._decode(kwargs, stop)
        if key is not None:
            with self._lock:
                self._replies[key] = (result.text, result.prompt_tokens, result.completion_tokens)
                if len(self._replies) > REPLY_CACHE_SIZE:
                    self._replies.popitem(last=False)
        return result

    def _decode(self, kwargs: dict[str, Any], stop: list[str] | None) -> ChatResult:
        cfg = self.config
        t0 = time.perf_counter()
        end = cancel.deadline()
        self._wait_for(lambda: self._sem.acquire(timeout=cancel.POLL_S), end, "a free request slot")
        try:
            resp = self._with_retries(kwargs, end)
        finally:
            self._sem.release()
        latency = time.perf_counter() - t0
        text = resp.choices[0].message.content or ""
        if stop:  # servers differ on whether the stop string is included; normalise to excluded
            cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
            if cut >= 0:
                text = text[:cut]
        if len(text) > cfg.max_reply_chars:  # a runaway server must not fill the disk through trajectories
            text = text[:cfg.max_reply_chars] + f"\n[reply cut at {cfg.max_reply_chars} of {len(text)} characters]"
        pt = resp.usage.prompt_tokens if resp.usage else 0
        ct = resp.usage.completion_tokens if resp.usage else 0
        with self._lock:
            u = self._usage
            self._usage = replace(u, requests=u.requests + 1, prompt_tokens=u.prompt_tokens + pt,
                                  completion_tokens=u.completion_tokens + ct)
        return ChatResult(text=text, prompt_tokens=pt, completion_tokens=ct, latency_s=latency)

    # ------------------------------------------------------------------ attempts, retries, waiting
    def _with_retries(self, kwargs: dict[str, Any], end: float | None) -> Any:
        cfg = self.config
        last: _Failure | None = None
        attempts = 0
        for attempt in range(cfg.max_retries + 1):
            if attempt:
                pause = last.retry_after_s if last and last.retry_after_s is not None else \
                    min(BACKOFF_CAP_S, BACKOFF_S * 2 ** (attempt - 1))
                self._pause(pause, end, last)
            timeout = cfg.timeout_s if end is None else max(0.01, min(cfg.timeout_s, end - time.monotonic()))
            attempts += 1
            try:
                return self._bounded(lambda: self._attempt(kwargs, timeout), end, timeout, last)
            except _Failure as f:
                last = f
                if not f.retryable:
                    break
        assert last is not None
        retried = f" after {attempts} attempts" if attempts > 1 else ""
        raise LLMError(f"LLM endpoint {cfg.base_url} (model {cfg.model!r}) failed{retried}: {last.kind}: "
                       f"{last.detail}", endpoint=cfg.base_url, model=cfg.model, kind=last.kind,
                       attempts=attempts, detail=last.detail)

    def _attempt(self, kwargs: dict[str, Any], timeout: float) -> Any:
        """One request; every way it can fail becomes a ``_Failure`` saying whether to retry."""
        try:
            resp = self._client.chat.completions.create(**kwargs, timeout=timeout)
        except openai.APIStatusError as e:
            st = e.status_code
            return _raise(f"http {st}", str(e)[:300], st in RETRY_STATUSES or st >= 500,
                          _retry_after(e.response.headers))
        except openai.APITimeoutError:
            return _raise("timeout", f"no reply within {timeout:.1f}s", True)
        except openai.APIConnectionError as e:
            return _raise("connection", f"{e}: {e.__cause__ or ''}"[:300], True)
        except (json.JSONDecodeError, UnicodeDecodeError, openai.APIResponseValidationError) as e:
            return _raise("non-JSON body", f"{type(e).__name__}: {e}"[:300], True)
        if not hasattr(resp, "choices"):  # the openai client returns the raw text of a non-JSON content type
            return _raise("non-JSON body", f"reply starts {str(resp)[:80]!r}", True)
        if not resp.choices or getattr(resp.choices[0], "message", None) is None:
            return _raise("no choices", "a 200 reply without choices", True)
        return resp

    def _bounded(self, fn: Callable[[], Any], end: float | None, timeout: float, last: _Failure | None) -> Any:
        """Run one attempt on a daemon thread and wait for it in short slices, so an interrupt or
        the deadline ends the wait at once (the abandoned request dies with its own timeout, and a
        daemon thread never holds up the exit of the process)."""
        box: dict[str, Any] = {}
        done = threading.Event()

        def work() -> None:
            try:
                box["value"] = fn()
            except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
                box["error"] = e
            finally:
                done.set()

        threading.Thread(target=work, name="llm-request", daemon=True).start()
        hard_end = time.monotonic() + timeout + 5.0  # a server that dribbles bytes past the read timeout
        self._wait_for(lambda: done.wait(cancel.POLL_S) or time.monotonic() > hard_end, end, "a reply", last)
        if not done.is_set():
            raise _Failure("timeout", f"no reply within {timeout:.1f}s", True)
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _wait_for(self, ready: Callable[[], bool], end: float | None, what: str,
                  last: _Failure | None = None) -> None:
        while not ready():
            self._check(end, what, last)

    def _pause(self, seconds: float, end: float | None, last: _Failure | None) -> None:
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            self._check(end, "the next attempt", last)
            time.sleep(min(cancel.POLL_S, max(0.0, stop - time.monotonic())))

    def _check(self, end: float | None, what: str, last: _Failure | None) -> None:
        cfg = self.config
        if cancel.aborted():
            raise LLMInterrupted(f"model call to {cfg.base_url} (model {cfg.model!r}) interrupted")
        if end is not None and time.monotonic() >= end:
            before = f" (last failure: {last.kind}: {last.detail})" if last else ""
            raise LLMDeadlineExceeded(f"LLM endpoint {cfg.base_url} (model {cfg.model!r}): the deadline passed "
                                      f"while waiting for {what}{before}", endpoint=cfg.base_url,
                                      model=cfg.model, kind="deadline")

    def map_chat(self, batch: list[Messages], **kw: Any) -> list[ChatResult]:
        """Run ``chat`` over many conversations concurrently (≤ max_concurrency), results in input order.

        The first failure is raised (as ``LLMError``) after in-flight calls finish.
        """
        if not batch:
            return []
        workers = min(len(batch), max(1, self.config.max_concurrency))
        with cancel.worker_pool(workers, "llm") as pool:
            return list(pool.map(lambda m: self.chat(m, **kw), batch))

    def generate(self, messages: Messages, max_tokens: int = 256, temperature: float = 0.0) -> str:
        """Text-only convenience; the ``Teacher`` protocol PFs use."""
        return self.chat(messages, max_tokens=max_tokens, temperature=temperature).text

    def endpoint(self) -> LLMConfig:
        """Where this client calls: what a worker process needs to make its own."""
        return self.config

    def close(self) -> None:
        u = self.usage
        if u.cached:
            log.info("LLM endpoint %s (model %r): %d of %d requests answered from the reply cache",
                     self.config.base_url, self.config.model, u.cached, u.cached + u.requests)
        self._client.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _status(kind: str) -> int | None:
    """The HTTP status of a failure kind ``http <status>``, else None."""
    head, _, code = kind.partition(" ")
    return int(code) if head == "http" and code.isdigit() else None


def _raise(kind: str, detail: str, retryable: bool, retry_after_s: float | None = None) -> Any:
    raise _Failure(kind, detail, retryable, retry_after_s)


def _retry_after(headers: Any) -> float | None:
    """The server's wait hint (``retry-after-ms`` or ``retry-after`` in seconds), capped at a minute."""
    for key, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(key) if headers is not None else None
        try:
            return min(60.0, max(0.0, float(raw) * scale)) if raw is not None else None
        except ValueError:
            continue
    return None
