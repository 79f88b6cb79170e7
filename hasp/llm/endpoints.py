"""From params to live clients: the embedded server when no base_url is given.

Pointing ``llm.base_url``/``llm.model`` (or ``teacher.*``) in params.yaml at any
OpenAI-compatible server (vLLM, a hosted API) needs no code change; a trained adapter on a vLLM
server is selected by sending its name as ``llm.model``. ``llm.backend`` decides what serves a
model or checkpoint: llama.cpp on its GGUF with the checkpoint's LoRA adapters converted to GGUF and
selected per request (CPU, the default; ``hasp.llm.llamacpp_server``), ``transformers serve`` on a merged
folder (CPU, models without a GGUF), or ``vllm serve`` with the checkpoint's LoRA adapter registered
by name (GPU; ``hasp.llm.vllm_server``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hasp.config import EndpointParams, LLMParams
from hasp.llm.client import LLMClient, LLMConfig
from hasp.llm.structured import backend_dialect

log = logging.getLogger(__name__)


@contextlib.contextmanager
def policy_client(llm: LLMParams, *, model_dir: Path | None = None, port: int | None = None,
                  max_tokens: int = 256, temperature: float = 0.0,
                  top_p: float | None = None) -> Iterator[LLMClient]:
    """Yield a client for the policy. With no ``base_url``, serve ``model_dir`` (default: the
    embedded SmolLM2 folder) on a loopback port for the duration of the block.

    ``temperature`` matters for the embedded server only: transformers' continuous batching
    freezes the sampling mode of its first request, so a sampling student (Phase C, T=0.7)
    needs its own server, separate from the greedy rollout server. ``top_p`` is sent with every
    request (and frozen into a new embedded server the same way).

    With ``llm.backend: vllm``, ``model_dir`` is served by vLLM as base + LoRA adapter (a training
    ``merged`` folder is served as the ``adapter`` beside it); with ``base_url`` set too, the checkpoint
    is loaded into that running vLLM server instead of a new one."""
    served = functools.partial(policy_identity, llm, model_dir, max_tokens=max_tokens, temperature=temperature,
                               top_p=top_p)  # hashed only if something asks (an evaluation's journal)
    if llm.backend == "vllm" and (model_dir is not None or not llm.base_url):
        with _vllm_client(llm, model_dir, port, max_tokens, temperature, top_p) as client:
            client.served = served
            yield client
        return
    if llm.backend == "llamacpp" and (model_dir is not None or not llm.base_url):
        with _llamacpp_client(llm, model_dir, port, max_tokens, temperature, top_p) as client:
            client.served = served
            yield client
        return
    if llm.base_url:
        with _client(llm, llm.base_url, str(llm.model), None, api_key_env=llm.api_key_env, max_tokens=max_tokens,
                     temperature=temperature, top_p=top_p) as client:
            client.served = served
            yield client
        return
    from hasp.llm.model_prep import prepare_model
    from hasp.llm.server import ensure_server

    folder = model_dir or prepare_model(name=llm.embedded, chat_format=llm.chat_format)
    base_url, model_name, handle = ensure_server(folder, port or llm.port, temperature=temperature, top_p=top_p,
                                                 serve=llm.transformers)
    with _client(llm, base_url, model_name, handle, api_key_env=None, max_tokens=max_tokens,
                 temperature=temperature, top_p=top_p) as client:
        client.served = served
        yield client


def policy_identity(llm: LLMParams, model_dir: Path | None = None, *, max_tokens: int = 256,
                    temperature: float = 0.0, top_p: float | None = None) -> dict[str, Any]:
    """What ``policy_client(llm, model_dir=...)``'s replies depend on, known without serving anything: the
    llm settings (the port aside: where a server listens does not change what it says), the content hash
    of the weights served (a model folder's, or the GGUF's; a remote endpoint is only its name) and the
    decoding defaults."""
    from hasp.fingerprint import cached_content_hash

    weights = Path(model_dir) if model_dir is not None else served_model(llm)
    return {"llm": llm.model_dump(mode="json", exclude={"port"}),
            "weights": cached_content_hash(weights) if isinstance(weights, Path) and weights.exists() else str(weights),
            "max_tokens": max_tokens, "temperature": temperature, "top_p": top_p}


def served_model(llm: LLMParams, model_dir: Path | None = None) -> Path | str:
    """The weights ``policy_client(llm, model_dir=...)`` serves, as a run's provenance names them.

    The embedded model, and a folder ``hasp model prepare`` made from it, is its GGUF: the file llama.cpp
    serves and the other backends are dequantized from. Another model folder is itself. A server HASP
    does not start (``llm.base_url``; vLLM aside, which loads the checkpoint into it) is only a name,
    ``<model> at <base_url>``. Nothing is served or converted to find out."""
    if llm.base_url and llm.backend != "vllm":
        return f"{llm.model} at {llm.base_url}"
    from hasp.llm.model_prep import MARKER, gguf_path

    configured = llm.llamacpp.gguf if llm.backend == "llamacpp" else None
    if model_dir is None:
        if configured:
            return Path(configured).expanduser()
        try:
            return gguf_path(llm.embedded)
        except RuntimeError as e:
            return f"embedded model ({e})"
    if (Path(model_dir) / MARKER).is_file():
        from hasp.llm.llamacpp_server import base_gguf_of
        from hasp.llm.server import ServeError

        try:
            return base_gguf_of(Path(model_dir), configured)
        except ServeError:
            return Path(model_dir)
    return Path(model_dir)


@contextlib.contextmanager
def _client(llm: LLMParams, base_url: str, model: str, handle: object | None, *, api_key_env: str | None,
            max_tokens: int, temperature: float, top_p: float | None,
            extra_body: dict | None = None, stop: tuple[str, ...] = ()) -> Iterator[LLMClient]:
    """The client of one endpoint with the params' timeouts, retries and caps; stops ``handle`` (the
    server this block started, if any) on every exit path."""
    try:
        cfg = LLMConfig(base_url=base_url, model=model, api_key_env=api_key_env, timeout_s=llm.timeout_s,
                        max_retries=llm.max_retries, max_concurrency=llm.in_flight, max_tokens=max_tokens,
                        temperature=temperature, top_p=top_p, max_reply_chars=llm.max_reply_chars,
                        extra_body=extra_body, dialect=backend_dialect(llm.backend), reply_cache=llm.reply_cache,
                        stop=stop)
        with LLMClient(cfg) as client:
            yield client
    finally:
        if handle is not None:
            handle.stop()  # type: ignore[attr-defined]


@contextlib.contextmanager
def _vllm_client(llm: LLMParams, model_dir: Path | None, port: int | None, max_tokens: int,
                 temperature: float, top_p: float | None) -> Iterator[LLMClient]:
    from hasp.llm.adapters import resolve_checkpoint
    from hasp.llm.vllm_server import attach, ensure_vllm, root_of

    if model_dir is None:
        from hasp.llm.model_prep import prepare_model

        model_dir = prepare_model(name=llm.embedded, chat_format=llm.chat_format)
    ckpt = resolve_checkpoint(model_dir)
    handle = None
    if llm.base_url:
        key = os.environ.get(llm.api_key_env) if llm.api_key_env else None  # a server started with --api-key
        base_url, model = llm.base_url, attach(root_of(llm.base_url), ckpt, api_key=key)
    else:
        base_url, model, handle = ensure_vllm(ckpt, port or llm.port, llm.vllm, temperature=temperature)
    with _client(llm, base_url, model, handle, api_key_env=llm.api_key_env if llm.base_url else None,
                 max_tokens=max_tokens, temperature=temperature, top_p=top_p) as client:
        yield client


@contextlib.contextmanager
def _llamacpp_client(llm: LLMParams, model_dir: Path | None, port: int | None, max_tokens: int,
                     temperature: float, top_p: float | None) -> Iterator[LLMClient]:
    """llama.cpp on the base GGUF, a trained checkpoint's adapters converted and selected per request.
    A running server (``base_url``) serves a plain model folder; llama.cpp loads adapters only at start,
    so a checkpoint with adapters always gets a server of its own."""
    from hasp.llm.llamacpp_server import ServeError, ensure_llamacpp, resolve_gguf_checkpoint

    ckpt = resolve_gguf_checkpoint(model_dir, llm.llamacpp.gguf, embedded=llm.embedded, chat_format=llm.chat_format)
    extra = {"lora": ckpt.lora_request()} if ckpt.adapters else None
    if llm.base_url:
        if ckpt.adapters:
            raise ServeError(f"llm.base_url is set, but the checkpoint {model_dir} has LoRA adapters that llama.cpp "
                             "loads only at start; leave llm.base_url empty so HASP starts a server for it")
        with _client(llm, llm.base_url, str(llm.model), None, api_key_env=llm.api_key_env, max_tokens=max_tokens,
                     temperature=temperature, top_p=top_p, stop=ckpt.stop) as client:
            yield client
        return
    base_url, model, handle = ensure_llamacpp(ckpt, port or llm.port, llm.llamacpp)
    with _client(llm, base_url, model, handle, api_key_env=None, max_tokens=max_tokens, temperature=temperature,
                 top_p=top_p, extra_body=extra, stop=ckpt.stop) as client:
        yield client


def teacher_llm(teacher: EndpointParams, llm: LLMParams) -> LLMParams:
    """The policy's serving settings for an embedded teacher: its own model, chat format and port, the
    policy's llama.cpp knobs (threads, slots, timeouts) but never the policy's own GGUF."""
    port = getattr(teacher, "port", llm.port + 1)
    return llm.model_copy(update={"base_url": None, "model": None, "api_key_env": None, "embedded": teacher.embedded,
                                  "chat_format": teacher.chat_format, "backend": "llamacpp", "port": port,
                                  "llamacpp": llm.llamacpp.model_copy(update={"gguf": None})})


def teacher_client(teacher: EndpointParams, llm: LLMParams) -> LLMClient | LazyPolicy | None:
    """A client for the teacher, or None (PFs and review then use their deterministic paths).

    An embedded teacher (``teacher.embedded``) is a llama.cpp server of its own, started on the first
    request and stopped with the process (the same managed child as the policy's server)."""
    if teacher.embedded and not teacher.base_url:
        return LazyPolicy(teacher_llm(teacher, llm), max_tokens=256)
    if not teacher.base_url:
        return None
    client = LLMClient(LLMConfig(base_url=teacher.base_url, model=str(teacher.model),
                                 api_key_env=teacher.api_key_env, timeout_s=llm.timeout_s,
                                 max_retries=llm.max_retries, max_concurrency=llm.max_concurrency,
                                 max_reply_chars=llm.max_reply_chars, reply_cache=llm.reply_cache))
    # a remote endpoint is only its name, as a remote policy is (policy_identity): an evaluation with a
    # teacher then journals its cells, which matters most when every teacher call is paid for
    client.served = lambda: {"weights": f"{teacher.model} at {teacher.base_url}"}
    return client


class ServeUnavailable(RuntimeError):
    """A lazily started server that failed to start; the message says why (and is the same every time)."""


class LazyPolicy:
    """A policy client that starts its model server only when first asked: a warm, fully cached pipeline run
    should not pay ~30 s to boot a server it never calls, so the flow hands this object to every task that
    *might* need the model (and an embedded teacher is one, see ``teacher_client``)."""

    def __init__(self, llm: LLMParams, *, model_dir: Path | None = None, port: int | None = None,
                 max_tokens: int = 256, temperature: float = 0.0) -> None:
        self._args = dict(llm=llm, model_dir=model_dir, port=port, max_tokens=max_tokens,
                          temperature=temperature)
        self._lock = threading.Lock()
        self._stack: contextlib.ExitStack | None = None
        self._client: LLMClient | None = None
        self._ever_started = False
        #: why the server could not start: every later call fails at once with it instead of waiting for
        #: another start-up timeout (an embedded teacher is asked once per PF intervention)
        self._failed: str | None = None

    @property
    def started(self) -> bool:
        """True once a server/client was needed (stays True after ``close``)."""
        return self._ever_started

    def client(self) -> LLMClient:
        with self._lock:
            if self._failed is not None:
                raise ServeUnavailable(self._failed)
            if self._client is None:
                stack = contextlib.ExitStack()
                try:
                    self._client = stack.enter_context(policy_client(**self._args))
                except Exception as e:  # noqa: BLE001 - remembered once, then every caller's own fallback
                    stack.close()
                    self._failed = f"the model server on port {self._args['llm'].port} did not start: {e}"
                    log.warning("%s", self._failed)
                    raise ServeUnavailable(self._failed) from e
                self._stack = stack
                self._ever_started = True
            return self._client

    def identity(self) -> dict[str, Any]:
        """What the replies depend on (``policy_identity``), without starting the server."""
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
