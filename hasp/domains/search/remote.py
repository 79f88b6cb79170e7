"""Client for a Search-R1 compatible HTTP retriever.

The wire format is the one of Search-R1's ``search_r1/search/retrieval_server.py``:

* request  ``POST {base_url}/retrieve`` with ``{"queries": [...], "topk": k, "return_scores": bool}``
* response ``{"result": [per query: [hit, ...]]}`` where a hit is ``{"document": doc, "score": s}``
  when scores were asked for, and the bare ``doc`` otherwise.

``doc`` is whatever row the server's corpus holds: ``{"id", "contents"}`` for the wiki-18 dense
index, ``{"title", "text", "contents"}`` (no id!) for its pyserini BM25 path. ``contents`` starts
with the quoted title line (``"Title"\\ntext``). Documents without an id get a stable one from a
hash of their contents, so READ can refer to them.

The client offers the same ``search(query, k)`` / ``get(doc_id)`` surface as
:class:`~hasp.domains.search.retriever.BM25Retriever`; ``get`` answers from a bounded local cache
of documents the server has returned, because the API has no fetch-by-id route. There is no
``titles()``: title and fuzzy READs are a local-corpus feature (see ``tools.SearchEnvironment``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import httpx

from .retriever import Hit

__all__ = ["RemoteRetriever", "RemoteRetrieverError", "parse_response"]

log = logging.getLogger(__name__)


class RemoteRetrieverError(RuntimeError):
    """The retriever could not be reached or answered something that is not the Search-R1 shape."""


def _title_and_body(doc: dict[str, Any]) -> tuple[str, str]:
    contents = str(doc.get("contents") or "")
    first, _, rest = contents.partition("\n")
    title = str(doc.get("title") or "").strip()
    line_title = first.strip().strip('"').strip()
    if not title:
        title = line_title if rest else ""
    if rest and line_title == title:
        body = rest.strip()
    else:
        body = str(doc.get("text") or contents).strip()
    return title, body


def _doc_id(doc: dict[str, Any]) -> str:
    for key in ("id", "docid", "doc_id", "_id"):
        value = doc.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    digest = hashlib.sha256(str(doc.get("contents") or doc.get("text") or "").encode()).hexdigest()
    return f"r-{digest[:10]}"


def _normalize_doc(doc: dict[str, Any]) -> dict[str, Any]:
    """The served row plus the ``id`` and ``title`` fields the tools rely on."""
    if not isinstance(doc.get("contents"), str) and isinstance(doc.get("text"), str):
        title = str(doc.get("title") or "")
        doc = {**doc, "contents": f'"{title}"\n{doc["text"]}' if title else doc["text"]}
    if not isinstance(doc.get("contents"), str):
        raise RemoteRetrieverError(f"document without 'contents': {str(doc)[:120]}")
    title, _ = _title_and_body(doc)
    return {**doc, "id": _doc_id(doc), "title": title}


def parse_response(payload: Any, n_queries: int) -> list[list[tuple[dict[str, Any], float | None]]]:
    """Search-R1 response JSON -> per query, ``[(normalized doc, score or None)]``.

    Accepts both layouts (with and without scores); raises RemoteRetrieverError otherwise."""
    if not isinstance(payload, dict) or not isinstance(payload.get("result"), list):
        raise RemoteRetrieverError(f"expected a JSON object with a 'result' list, got {str(payload)[:200]}")
    result = payload["result"]
    if len(result) != n_queries:
        raise RemoteRetrieverError(f"asked {n_queries} queries, got {len(result)} result lists")
    out: list[list[tuple[dict[str, Any], float | None]]] = []
    for qi, hits in enumerate(result):
        if not isinstance(hits, list):
            raise RemoteRetrieverError(f"result[{qi}] is not a list")
        parsed: list[tuple[dict[str, Any], float | None]] = []
        for hi, hit in enumerate(hits):
            if isinstance(hit, dict) and isinstance(hit.get("document"), dict):
                score = hit.get("score")
                if score is not None and not isinstance(score, (int, float)):
                    raise RemoteRetrieverError(f"result[{qi}][{hi}].score is not a number: {score!r}")
                parsed.append((_normalize_doc(hit["document"]), None if score is None else float(score)))
            elif isinstance(hit, dict):
                parsed.append((_normalize_doc(hit), None))
            else:
                raise RemoteRetrieverError(f"result[{qi}][{hi}] is not a document object")
        out.append(parsed)
    return out


class RemoteRetriever:
    """HTTP client with retries (5xx, 429, connection errors, timeouts; exponential backoff).

    ``return_scores=False`` asks the server for bare documents; hits then carry rank-based
    pseudo-scores (1, 1/2, 1/3, ...) so ordering information is kept."""

    def __init__(self, base_url: str, topk: int = 3, timeout_s: float = 10, *, return_scores: bool = True,
                 retries: int = 3, backoff_s: float = 0.5, snippet_chars: int = 240,
                 cache_size: int = 10_000, trust_env: bool = False,
                 client: httpx.Client | None = None) -> None:
        if not base_url:
            raise ValueError("base_url is required, e.g. http://127.0.0.1:8000")
        self.base_url = base_url.rstrip("/")
        if self.base_url.endswith("/retrieve"):  # accept the full endpoint too
            self.base_url = self.base_url[: -len("/retrieve")]
        self.url = f"{self.base_url}/retrieve"
        self.topk = topk
        self.timeout_s = timeout_s
        self.return_scores = return_scores
        self.retries = max(0, retries)
        self.backoff_s = backoff_s
        self.snippet_chars = snippet_chars
        self.cache_size = cache_size
        # trust_env=False by default: a proxy from the environment must not capture loopback calls
        self._client = client or httpx.Client(timeout=timeout_s, trust_env=trust_env)
        self._own_client = client is None
        self._docs: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ transport
    def _post(self, body: dict[str, Any]) -> Any:
        attempts = self.retries + 1
        last = ""
        for attempt in range(1, attempts + 1):
            try:
                resp = self._client.post(self.url, json=body, timeout=self.timeout_s)
            except httpx.TransportError as exc:  # connect/read errors and timeouts
                last = f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code < 300:
                    try:
                        return resp.json()
                    except (json.JSONDecodeError, ValueError):
                        raise RemoteRetrieverError(
                            f"POST {self.url}: response is not JSON: {resp.text[:200]!r}") from None
                last = f"HTTP {resp.status_code}: {resp.text[:200]}"
                if resp.status_code < 500 and resp.status_code != 429:
                    raise RemoteRetrieverError(f"POST {self.url} failed ({last})")
            if attempt < attempts:
                delay = self.backoff_s * 2 ** (attempt - 1)
                log.warning("POST %s attempt %d/%d failed (%s); retrying in %.2fs",
                            self.url, attempt, attempts, last, delay)
                time.sleep(delay)
        raise RemoteRetrieverError(f"POST {self.url} failed after {attempts} attempt(s): {last}. "
                                   "Is the retriever running (hasp retriever serve) and the URL right?")

    # ------------------------------------------------------------------ API
    def retrieve(self, queries: Sequence[str], k: int | None = None) -> list[list[tuple[dict[str, Any], float | None]]]:
        """One batched request: per query, ``[(document, score or None)]``; documents are cached."""
        queries = list(queries)
        if not queries:
            return []
        k = self.topk if k is None else k
        payload = self._post({"queries": queries, "topk": k, "return_scores": self.return_scores})
        results = parse_response(payload, len(queries))
        with self._lock:
            for hits in results:
                for doc, _ in hits:
                    self._docs[doc["id"]] = doc
                    self._docs.move_to_end(doc["id"])
            while len(self._docs) > self.cache_size:
                self._docs.popitem(last=False)
        return results

    def search_many(self, queries: Sequence[str], k: int | None = None) -> list[list[Hit]]:
        """Batched :meth:`search` (one HTTP request for all queries)."""
        k = self.topk if k is None else k
        return [[self._hit(doc, score, rank) for rank, (doc, score) in enumerate(hits[:k], 1)]
                for hits in self.retrieve(queries, k)]

    def search(self, query: str, k: int | None = None) -> list[Hit]:
        """Top-k hits for one query; [] for an empty query (no request is sent)."""
        k = self.topk if k is None else k
        if k <= 0 or not query or not query.strip():
            return []
        return self.search_many([query], k)[0]

    def get(self, doc_id: str) -> dict[str, Any] | None:
        """A document this client has already received, or None."""
        with self._lock:
            return self._docs.get(str(doc_id))

    def __len__(self) -> int:
        with self._lock:
            return len(self._docs)

    def close(self) -> None:
        if self._own_client:
            self._client.close()

    def __enter__(self) -> RemoteRetriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _hit(self, doc: dict[str, Any], score: float | None, rank: int) -> Hit:
        title, body = _title_and_body(doc)
        snippet = body if len(body) <= self.snippet_chars else body[: self.snippet_chars].rsplit(" ", 1)[0] + "…"
        value = round(score, 6) if score is not None else round(1.0 / rank, 6)
        return Hit(id=doc["id"], title=title, score=value, snippet=snippet)
