"""Serve a local BM25 index over HTTP with Search-R1's retrieval API.

``POST /retrieve`` takes ``{"queries": [...], "topk": k, "return_scores": bool}`` and answers
``{"result": [...]}`` exactly like Search-R1's ``retrieval_server.py``: per query, a list of
``{"document": row, "score": float}`` when scores are requested, else a list of bare rows. A row
is the stored corpus document (``id``, ``contents`` and, for our corpora, ``title``). A missing or
zero ``topk`` falls back to the server default, as in Search-R1. ``GET /health`` reports the
document count.

Why a server at all when BM25 runs in-process: many rollout workers can share one index, the
agent can be pointed at a Search-R1 dense (e5/faiss, GPU) server by changing one URL, and the
client (:mod:`.remote`) is exercised against a real implementation of the same protocol.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from .generator import load_corpus
from .retriever import BM25Retriever

__all__ = ["RetrieverServer", "create_app", "load_retriever", "serve", "start_in_thread"]

log = logging.getLogger(__name__)

CorpusSource = BM25Retriever | Sequence[dict[str, Any]] | str | Path


class QueryRequest(BaseModel):
    queries: list[str]
    topk: int | None = None
    return_scores: bool = False


def load_retriever(source: CorpusSource, *, stem: bool = False) -> BM25Retriever:
    """A BM25Retriever from an instance, a list of documents, a corpus jsonl, or a saved index dir."""
    if isinstance(source, BM25Retriever):
        return source
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            return BM25Retriever.load(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no corpus jsonl or saved index here")
        return BM25Retriever(load_corpus(path), stem=stem)
    return BM25Retriever(list(source), stem=stem)


def create_app(source: CorpusSource, *, default_topk: int = 3) -> FastAPI:
    """The FastAPI application serving ``source`` (see :func:`load_retriever`)."""
    retriever = load_retriever(source)
    lock = threading.Lock()  # bm25s scoring is not documented as thread-safe; it is fast anyway
    app = FastAPI(title="hasp BM25 retriever (Search-R1 API)")

    @app.post("/retrieve")
    def retrieve(request: QueryRequest) -> dict[str, Any]:
        k = request.topk or default_topk
        if k < 0:
            raise HTTPException(status_code=422, detail="topk must be >= 0")
        result: list[list[Any]] = []
        for query in request.queries:
            with lock:
                hits = retriever.search(query, k=k)
            rows = [(retriever.get(h.id), h.score) for h in hits]
            if request.return_scores:
                result.append([{"document": doc, "score": float(score)} for doc, score in rows])
            else:
                result.append([doc for doc, _ in rows])
        return {"result": result}

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "docs": len(retriever), "hash": retriever.hash}

    return app


def _server(app: FastAPI, host: str, port: int, log_level: str) -> uvicorn.Server:
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="off",
                            access_log=log_level == "debug")
    return uvicorn.Server(config)


def serve(corpus_path: str | Path, host: str = "127.0.0.1", port: int = 8000, *, topk: int = 3,
          log_level: str = "info") -> None:
    """Index ``corpus_path`` (jsonl ``{id, contents, title?}`` or a saved index dir) and serve
    it until interrupted. Binds to loopback by default; pass ``host="0.0.0.0"`` deliberately."""
    app = create_app(corpus_path, default_topk=topk)
    log.info("serving %s on http://%s:%d/retrieve", corpus_path, host, port)
    _server(app, host, port, log_level).run()


class RetrieverServer:
    """A server running in a daemon thread; use as a context manager or call :meth:`stop`."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, host: str, port: int) -> None:
        self._server = server
        self._thread = thread
        self.host = host
        self.port = port
        self.url = f"http://{host}:{port}"

    def stop(self, timeout_s: float = 10) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)

    def __enter__(self) -> RetrieverServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_in_thread(source: CorpusSource, host: str = "127.0.0.1", port: int = 0, *, topk: int = 3,
                    log_level: str = "warning", startup_timeout_s: float = 15) -> RetrieverServer:
    """Start a server in a background thread; ``port=0`` picks a free port (see ``.url``)."""
    app = create_app(source, default_topk=topk)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    server = _server(app, host, bound, log_level)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                              name=f"hasp-retriever-{bound}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError(f"retriever server on {host}:{bound} did not start")
        time.sleep(0.01)
    return RetrieverServer(server, thread, host, bound)
