"""Run ``transformers serve`` on a local HF folder as an OpenAI-compatible endpoint.

Why a subprocess: the same ``LLMClient`` then talks to the embedded CPU model and to any remote
endpoint (vLLM, a hosted API) alike, and continuous batching lets concurrent agent episodes share one
model copy. Facts about transformers 5.23's server that this module relies on:

- With a positional model (``FORCE_MODEL``) the server preloads it before listening and is *pinned*: a
  request must name exactly that string as ``model`` (or omit it); any other name gets HTTP 400
  ``Server is pinned to '<name>'``. We pass the resolved absolute folder path, so that path is the name.
- With ``--continuous-batching`` the sampling settings (temperature/top_p/do_sample) of the *first*
  request are frozen into the batching manager for the server's lifetime; later requests only choose
  ``max_tokens``. ``stop`` is ignored too (generation runs to EOS or ``max_tokens``; ``LLMClient`` cuts
  the text client-side). So we send the first request ourselves (warm-up) with ``temperature`` given
  at construction: 0.0 (default) makes the server greedy, > 0 makes it always sample at that value
  (with ``top_p`` when given: the nucleus mass is frozen the same way).
- On CPU the paged KV cache of continuous batching is sized, by default, to ~80-90% of the machine's
  *free RAM* (11 GB RSS seen on a 24 GB box, OOM-killed next to a training job). We always pass
  ``--cb-num-blocks``/``--cb-max-batch-tokens`` (``llm.transformers``; default 64 blocks x 256 tokens =
  16k cached tokens, ~0.75 GB in fp32 for SmolLM2-135M, enough for 8 concurrent 2k-token episodes; RSS
  then stays under ~2 GB).
- torch's default of one OpenMP thread per core collapses when anything else shares the cores; the
  server gets ``OMP_NUM_THREADS`` = half the cores unless told otherwise (see ``threads``).
- ``GET /v1/models`` lists only the Hugging Face hub cache (HTTP 500 when it does not exist) and never
  the pinned folder, so it is useless as a health check; we use ``GET /health`` plus a probe request.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from hasp.llm.guard import guarded, report_stale, stop_group

if TYPE_CHECKING:
    from hasp.config import TransformersServeParams

PROBE_MODEL = "__hasp_probe__"


class ServeError(RuntimeError):
    """A model server that cannot serve what was asked; the message is one line naming the file or setting."""


def free_port(host: str = "127.0.0.1") -> int:
    """An ephemeral port that was free a moment ago (tests start servers on these)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _http(method: str, url: str, body: dict | None = None, timeout: float = 5.0,
          api_key: str | None = None) -> tuple[int, str]:
    """Tiny stdlib HTTP call returning (status, text); status 0 means no connection."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError):
        return 0, ""


def pinned_model(root_url: str, timeout: float = 5.0) -> str | None:
    """Name of the model a healthy ``transformers serve`` at ``root_url`` is pinned to, else None.

    Asks for a nonexistent model: the server rejects it at once (no generation) and names its model.
    """
    status, _ = _http("GET", f"{root_url}/health", timeout=timeout)
    if status != 200:
        return None
    status, text = _http("POST", f"{root_url}/v1/chat/completions", timeout=timeout, body={
        "model": PROBE_MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    m = re.search(r"pinned to '(.*?)'", text)
    return m.group(1) if m else None


class LocalModelServer:
    """``transformers serve <folder> --continuous-batching`` as a managed child process.

    Use as a context manager or call ``start()``/``stop()``. Logs go to ``log_path`` (default
    ``$TMPDIR/hasp-serve-<port>.log``) so a failed start can show why.
    """

    label = "transformers serve"
    #: what a leftover server's command line contains (reported at start)
    stale_marker = "transformers.cli"

    def __init__(self, folder: Path | str, port: int | None = None, *, host: str = "127.0.0.1",
                 log_path: Path | None = None, startup_timeout_s: float = 300.0,
                 extra_args: tuple[str, ...] = (), temperature: float = 0.0, top_p: float | None = None,
                 cb_num_blocks: int = 64, cb_max_batch_tokens: int = 1024, cb_page_size: int | None = None,
                 threads: int | None = None) -> None:
        self.folder = Path(folder).resolve()
        self.host = host
        self.port = port or free_port(host)
        self.log_path = log_path or Path(tempfile.gettempdir()) / f"hasp-serve-{self.port}.log"
        self.startup_timeout_s = startup_timeout_s
        self.extra_args = extra_args
        self.temperature = temperature
        self.top_p = top_p
        self.cb_num_blocks = cb_num_blocks
        self.cb_max_batch_tokens = cb_max_batch_tokens
        self.cb_page_size = cb_page_size
        # torch intra-op threads (OMP_NUM_THREADS). Default $HASP_LLM_THREADS, else half the cores: with
        # all cores, OpenMP spin-waits whenever anything else runs (client, training) — measured on 2
        # cores beside a training job, 1 thread gave 34 tok/s for 8 concurrent requests vs 6.6 with 2.
        env_threads = os.environ.get("HASP_LLM_THREADS")
        self.threads = threads or (int(env_threads) if env_threads else max(1, (os.cpu_count() or 2) // 2))
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None

    @property
    def model_name(self) -> str:
        """The ``model`` string requests must carry (the server is pinned to it)."""
        return str(self.folder)

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI ``base_url`` (with ``/v1``)."""
        return f"{self.root_url}/v1"

    def command(self) -> list[str]:
        # What the `transformers` console script does, via this interpreter: no reliance on PATH.
        return [sys.executable, "-c", "import sys; from transformers.cli.transformers import main; "
                "sys.argv[0] = 'transformers'; sys.exit(main())",
                "serve", self.model_name, "--continuous-batching", "--host", self.host,
                "--port", str(self.port), "--log-level", "info",
                "--cb-num-blocks", str(self.cb_num_blocks), "--cb-max-batch-tokens", str(self.cb_max_batch_tokens),
                *(["--cb-block-size", str(self.cb_page_size)] if self.cb_page_size else []),
                *self.extra_args]

    def check(self) -> None:
        """Refuse what cannot start, before a process is spawned."""
        if not (self.folder / "config.json").is_file():  # else transformers takes it for a hub repo id
            raise FileNotFoundError(f"{self.folder} is not a model folder (no config.json); see prepare_model()")

    def env(self) -> dict[str, str]:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        env.update(OMP_NUM_THREADS=str(self.threads), MKL_NUM_THREADS=str(self.threads))
        return env

    def start(self) -> LocalModelServer:
        """Spawn the server and block until it answers a real 1-token completion (which also warms it)."""
        if self.proc is not None:
            return self
        self.check()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if s.connect_ex((self.host, self.port)) == 0:
                raise RuntimeError(f"port {self.port} on {self.host} is already in use")
        env = self.env()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        report_stale(self.stale_marker)
        with open(self.log_path, "ab") as log:
            # Own session/process group so stop() also reaches any workers it forks; the guard ends
            # the server when this process dies, even by SIGKILL.
            self.proc = subprocess.Popen(guarded(self.command()), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        atexit.register(self.stop)  # never leave an orphan (it has its own session, so no SIGHUP)
        try:
            self._wait_ready(t0 + self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - t0
        return self

    def _wait_ready(self, deadline: float) -> None:
        while time.perf_counter() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.label} exited with {self.proc.returncode} during startup; "
                                   f"log {self.log_path}:\n{self._log_tail()}")
            if _http("GET", f"{self.root_url}/health", timeout=2.0)[0] == 200 and self._warm():
                return
            time.sleep(0.5)
        raise TimeoutError(f"{self.label} not healthy after {self.startup_timeout_s:.0f}s; "
                           f"log {self.log_path}:\n{self._log_tail()}")

    def _warm(self) -> bool:
        """First request: proves the model answers and fixes the server's sampling mode (see module doc)."""
        body = {"model": self.model_name, "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 1, "temperature": self.temperature}
        if self.top_p is not None:
            body["top_p"] = self.top_p
        status, _ = _http("POST", f"{self.base_url}/chat/completions", timeout=120.0, body=body)
        return status == 200

    def _log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the process group, SIGKILL after ``grace_s``; safe to call twice."""
        proc, self.proc = self.proc, None
        atexit.unregister(self.stop)
        if proc is None or proc.poll() is not None:
            return
        stop_group(proc, grace_s)

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def ensure_server(folder: Path | str, port: int, *, host: str = "127.0.0.1",
                  startup_timeout_s: float = 300.0, temperature: float = 0.0, top_p: float | None = None,
                  serve: TransformersServeParams | None = None) -> tuple[str, str, LocalModelServer | None]:
    """``(base_url, model_name, handle)`` for a server of ``folder`` on ``port``.

    Reuses a healthy server already pinned to this folder (``handle`` is then None: not ours to stop);
    otherwise starts one and returns its handle, which the caller must ``stop()``. A server on that
    port pinned to a *different* model is an error rather than a silent mismatch. ``temperature`` and
    ``top_p`` only apply to a newly started server (a reused one keeps the sampling mode it was warmed with),
    and so does ``serve`` (``llm.transformers``: the KV cache's pages).
    """
    name = str(Path(folder).resolve())
    root = f"http://{host}:{port}"
    running = pinned_model(root)
    if running == name:
        return f"{root}/v1", name, None
    if running is not None:
        raise RuntimeError(f"{root} serves {running!r}, not {name!r}: another run holds port {port}; "
                           "stop it or give this run another llm.port")
    srv = LocalModelServer(name, port, host=host, startup_timeout_s=startup_timeout_s,
                           temperature=temperature, top_p=top_p, **cache_kwargs(serve)).start()
    return srv.base_url, srv.model_name, srv


def cache_kwargs(serve: TransformersServeParams | None) -> dict[str, int | None]:
    """``LocalModelServer`` keyword arguments of ``llm.transformers`` (none: the class defaults)."""
    if serve is None:
        return {}
    return {"cb_num_blocks": serve.num_blocks, "cb_page_size": serve.page_size,
            "cb_max_batch_tokens": serve.max_batch_tokens}
