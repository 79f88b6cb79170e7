"""``vllm serve`` with LoRA: the GPU backend behind the same OpenAI-compatible client.

vLLM serves a base model with ``--enable-lora``; each trained adapter is registered under a name
(``--lora-modules name=path``) and a request selects it by sending that name as ``model``, so the
client, the agent and ``hasp eval`` need no change to run a trained policy. Unlike ``transformers
serve``, vLLM takes the sampling settings of every request, so one server serves greedy and sampling
callers alike and needs no per-temperature warm-up.

A server that runs with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` also takes adapters while it runs
(``POST /v1/load_lora_adapter {lora_name, lora_path}``): ``attach`` uses that to put a new
checkpoint on a server that is already up (the GPU compose stack's, or one a previous call started),
after checking that the server's base is the one the adapter was trained on.

vLLM pins its own torch, transformers and fastapi, and no release installs beside HASP's pins, so it
lives in an environment of its own and HASP runs its ``vllm`` console script (``llm.vllm.executable``,
looked up on PATH); a vllm importable in this interpreter is used in place. Neither is imported
here, so choosing the backend where vllm is missing fails with one line before anything starts.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from hasp.config import VLLMParams
from hasp.llm.adapters import Checkpoint, lora_rank_for
from hasp.llm.server import LocalModelServer, ServeError, _http

log = logging.getLogger(__name__)

RUNTIME_LORA_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"


def vllm_launcher(settings: VLLMParams) -> list[str]:
    """The command that runs ``vllm``: this interpreter when vllm is importable here (no reliance on
    PATH), else the console script ``settings.executable`` of vLLM's own environment. One line naming
    both ways when there is neither."""
    if importlib.util.find_spec("vllm") is not None:
        return [sys.executable, "-c", "import sys; from vllm.entrypoints.cli.main import main; "
                "sys.argv[0] = 'vllm'; sys.exit(main())"]
    exe = shutil.which(os.path.expanduser(settings.executable))
    if exe is None:
        raise ServeError(f"llm.backend is vllm, but vllm is not installed here: no `{settings.executable}` on "
                         "PATH and no vllm in this Python; install it in an environment of its own on a CUDA "
                         "machine (e.g. uv tool install vllm==0.30.0) and set llm.vllm.executable to its "
                         "vllm, or set llm.backend: transformers")
    return [exe]


def require_vllm(settings: VLLMParams) -> None:
    """Refuse the vllm backend where vllm cannot be run (one line)."""
    vllm_launcher(settings)


class VLLMServer(LocalModelServer):
    """``vllm serve <base> --enable-lora --lora-modules name=path ...`` as a managed child process.

    ``model_name`` is the first adapter's name (the base when there is none). The child inherits the
    environment, so ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` set here lets ``attach`` add adapters later."""

    label = "vllm serve"

    def __init__(self, base: str, adapters: Sequence[Checkpoint] = (), port: int | None = None, *,
                 host: str = "127.0.0.1", log_path: Path | None = None, settings: VLLMParams | None = None,
                 temperature: float = 0.0) -> None:
        settings = settings or VLLMParams()
        super().__init__(base, port, host=host, log_path=log_path, startup_timeout_s=settings.startup_timeout_s,
                         extra_args=tuple(settings.extra_args), temperature=temperature)
        self.base = str(base)
        self.adapters = [a for a in adapters if a.adapter is not None]
        self.settings = settings
        self.max_loras = settings.max_loras
        self.max_lora_rank = lora_rank_for(self.adapters, settings.max_lora_rank)

    @property
    def stale_marker(self) -> str:  # type: ignore[override]
        """What a leftover server's command line holds, for either way ``vllm_launcher`` runs it."""
        return "vllm.entrypoints.cli" if importlib.util.find_spec("vllm") is not None else "vllm serve"

    @property
    def model_name(self) -> str:
        return self.adapters[0].model if self.adapters else self.base

    def command(self) -> list[str]:
        cmd = [*vllm_launcher(self.settings), "serve", self.base, "--enable-lora"]
        if self.adapters:
            cmd += ["--lora-modules", *(a.lora_module() for a in self.adapters)]
        cmd += ["--max-loras", str(self.max_loras)]
        if self.max_lora_rank is not None:
            cmd += ["--max-lora-rank", str(self.max_lora_rank)]
        return [*cmd, "--host", self.host, "--port", str(self.port), *self.extra_args]

    def check(self) -> None:
        require_vllm(self.settings)

    def env(self) -> dict[str, str]:
        return dict(os.environ)


def root_of(base_url: str) -> str:
    """``http://host:port`` of an OpenAI ``base_url`` (``.../v1``)."""
    return base_url.rstrip("/").removesuffix("/v1")


def served_models(root_url: str, timeout: float = 5.0, api_key: str | None = None) -> list[dict] | None:
    """The ``/v1/models`` entries of a vLLM server at ``root_url``; None when none answers."""
    status, text = _http("GET", f"{root_url}/v1/models", timeout=timeout, api_key=api_key)
    if status != 200:
        return None
    try:
        data = json.loads(text).get("data")
    except (json.JSONDecodeError, AttributeError):
        return None
    return [m for m in data if isinstance(m, dict) and m.get("id")] if isinstance(data, list) else None


def same_model(a: str, b: str) -> bool:
    if a == b:
        return True
    pa, pb = Path(a), Path(b)
    return pa.is_absolute() and pb.is_absolute() and pa.resolve() == pb.resolve()


def load_adapter(root_url: str, ckpt: Checkpoint, timeout: float = 300.0, api_key: str | None = None) -> None:
    """``POST /v1/load_lora_adapter``: the server loads the adapter and serves it under its name."""
    assert ckpt.adapter is not None and ckpt.name is not None
    status, text = _http("POST", f"{root_url}/v1/load_lora_adapter", timeout=timeout, api_key=api_key,
                         body={"lora_name": ckpt.name, "lora_path": str(ckpt.adapter)})
    if status == 200 or (status == 400 and "already" in text):  # loaded meanwhile by another caller
        log.info("vLLM at %s: adapter %s loaded from %s", root_url, ckpt.name, ckpt.adapter)
        return
    if status in (404, 405):
        raise ServeError(f"{root_url} does not load LoRA adapters at run time (HTTP {status} from "
                         f"/v1/load_lora_adapter); start it with {RUNTIME_LORA_ENV}=True and --enable-lora, "
                         f"or register the adapter with --lora-modules {ckpt.lora_module()}")
    raise ServeError(f"{root_url}: loading adapter {ckpt.name} from {ckpt.adapter} failed "
                     f"(HTTP {status}): {' '.join(text.split())[:300]}")


def attach(root_url: str, ckpt: Checkpoint, api_key: str | None = None) -> str:
    """Make ``ckpt`` servable on the running vLLM server at ``root_url``; the ``model`` to send.

    An adapter the server already lists is used as is; otherwise it is loaded at run time, but only
    onto the base it was trained on (an adapter on another base would run, and be wrong)."""
    models = served_models(root_url, api_key=api_key)
    if models is None:
        raise ServeError(f"no vLLM server answers GET {root_url}/v1/models")
    if ckpt.name is not None and any(m["id"] == ckpt.name for m in models):
        return ckpt.name
    bases = [m for m in models if not m.get("parent")]
    match = next((m for m in bases if any(same_model(ckpt.base, str(m.get(k) or "")) for k in ("id", "root"))),
                 None)
    if match is None:
        what = f"adapter {ckpt.adapter} was trained on" if ckpt.adapter else "asked for"
        raise ServeError(f"{root_url} serves {', '.join(m['id'] for m in bases) or 'no base model'}, but "
                         f"{what} {ckpt.base}; serve that base there, or leave llm.base_url empty so "
                         "HASP starts vllm serve on it")
    if ckpt.adapter is None:
        return str(match["id"])
    load_adapter(root_url, ckpt, api_key=api_key)
    return str(ckpt.name)


def ensure_vllm(ckpt: Checkpoint, port: int, settings: VLLMParams, *, host: str = "127.0.0.1",
                temperature: float = 0.0) -> tuple[str, str, VLLMServer | None]:
    """``(base_url, model, handle)`` for ``ckpt`` on ``port``: a vLLM server already there takes it
    (``handle`` None: not ours to stop); otherwise one is started and the caller must ``stop()`` it."""
    root = f"http://{host}:{port}"
    if served_models(root) is not None:
        return f"{root}/v1", attach(root, ckpt), None
    srv = VLLMServer(ckpt.base, [ckpt], port, host=host, settings=settings, temperature=temperature).start()
    return srv.base_url, ckpt.model, srv
