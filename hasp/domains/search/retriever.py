"""BM25 retrieval over a local Search-R1 style corpus (``{id, contents, title?}`` rows).

Why bm25s: a maintained, sparse-matrix BM25 that indexes a few hundred docs in milliseconds and
saves/loads its index as plain ``.npy``/json, so a DVC stage can cache it. We only add what the
agent loop needs: doc lookup by id, titles, snippets, deterministic tie-breaking (equal scores are
ordered by corpus position so rollouts replay exactly), and a process-wide cache keyed by the
corpus *content* hash, so many episodes over the same corpus share one index.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bm25s
import numpy as np

__all__ = ["BM25Retriever", "Hit", "clear_cache", "corpus_hash"]

_DOCS_FILE = "docs.jsonl"
_META_FILE = "hasp_meta.json"
_CACHE_SIZE = 8
_CACHE: OrderedDict[str, BM25Retriever] = OrderedDict()
_CACHE_LOCK = threading.Lock()


@dataclass(frozen=True)
class Hit:
    """One search result. ``snippet`` is the document body (title line removed), truncated."""

    id: str
    title: str
    score: float
    snippet: str


def _title_of(doc: dict[str, Any]) -> str:
    if doc.get("title"):
        return str(doc["title"])
    first = str(doc.get("contents", "")).split("\n", 1)[0]
    return first.strip().strip('"').strip()


def _index_text(doc: dict[str, Any]) -> str:
    """Contents, with the title prepended when the contents do not already start with it."""
    contents, title = str(doc.get("contents", "")), _title_of(doc)
    first = contents.split("\n", 1)[0].strip().strip('"')
    return contents if not title or first == title else f"{title}\n{contents}"


def corpus_hash(corpus: Sequence[dict[str, Any]], stem: bool = False) -> str:
    """Content hash of the corpus (ids, titles, contents, order) plus the analyzer settings."""
    h = hashlib.sha256(f"bm25s={bm25s.__version__};stem={stem}\n".encode())
    for d in corpus:
        row = [str(d.get("id")), _title_of(d), str(d.get("contents", ""))]
        h.update(json.dumps(row, ensure_ascii=False).encode() + b"\n")
    return h.hexdigest()


def _load_stemmer(stem: bool) -> Callable[[list[str]], list[str]] | None:
    if not stem:
        return None
    try:
        import Stemmer  # PyStemmer, optional
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("stem=True needs the PyStemmer package (pip install PyStemmer)") from exc
    stemmer: Callable[[list[str]], list[str]] = Stemmer.Stemmer("english").stemWords
    return stemmer


class BM25Retriever:
    """In-memory BM25 index plus the documents themselves (for READ)."""

    def __init__(self, corpus: Sequence[dict[str, Any]], *, stem: bool = False, snippet_chars: int = 240) -> None:
        if not corpus:
            raise ValueError("cannot index an empty corpus")
        docs = [{**d, "id": str(d["id"]), "title": _title_of(d)} for d in corpus]
        self._init_docs(docs, stem, snippet_chars)
        self._bm25 = bm25s.BM25()
        self._bm25.index(self._tokenize([_index_text(d) for d in docs]), show_progress=False)

    def _init_docs(self, docs: list[dict[str, Any]], stem: bool, snippet_chars: int) -> None:
        self.docs = docs
        self.stem = stem
        self.snippet_chars = snippet_chars
        self._stemmer = _load_stemmer(stem)
        self._pos: dict[str, int] = {}
        for i, d in enumerate(docs):
            if d["id"] in self._pos:
                raise ValueError(f"duplicate document id {d['id']!r}")
            self._pos[d["id"]] = i
        self.hash = corpus_hash(docs, stem)

    def _tokenize(self, texts: list[str]) -> list[list[str]]:
        tokens: list[list[str]] = bm25s.tokenize(
            texts, stopwords="en", stemmer=self._stemmer, return_ids=False, show_progress=False)
        return tokens

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_corpus(cls, corpus: Sequence[dict[str, Any]], *, stem: bool = False) -> BM25Retriever:
        """Cached constructor: the same corpus content returns the same (read-only) index."""
        key = corpus_hash(corpus, stem)
        with _CACHE_LOCK:
            if key in _CACHE:
                _CACHE.move_to_end(key)
                return _CACHE[key]
        built = cls(corpus, stem=stem)
        with _CACHE_LOCK:
            _CACHE[key] = built
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
        return built

    def save(self, directory: str | Path) -> Path:
        """Write the bm25s index, the documents and a small meta file to ``directory``."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        self._bm25.save(str(out), show_progress=False)
        with (out / _DOCS_FILE).open("w", encoding="utf-8") as fh:
            for d in self.docs:
                fh.write(json.dumps(d, ensure_ascii=False, sort_keys=True) + "\n")
        meta = {"hash": self.hash, "stem": self.stem, "bm25s": bm25s.__version__, "n_docs": len(self.docs)}
        (out / _META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True), encoding="utf-8")
        return out

    @classmethod
    def load(cls, directory: str | Path) -> BM25Retriever:
        """Load a saved index; refuses an index whose documents no longer match its hash."""
        src = Path(directory)
        meta = json.loads((src / _META_FILE).read_text(encoding="utf-8"))
        with (src / _DOCS_FILE).open(encoding="utf-8") as fh:
            docs = [json.loads(line) for line in fh if line.strip()]
        self = cls.__new__(cls)
        self._init_docs(docs, bool(meta["stem"]), 240)
        if self.hash != meta["hash"]:
            raise ValueError(f"{src}: documents do not match the saved index (stale or edited index)")
        self._bm25 = bm25s.BM25.load(str(src), show_progress=False)
        return self

    # ------------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self.docs)

    def get(self, doc_id: str) -> dict[str, Any] | None:
        """The document with this exact id, or None."""
        i = self._pos.get(str(doc_id))
        return self.docs[i] if i is not None else None

    def titles(self) -> dict[str, str]:
        """doc id -> title, in corpus order."""
        return {d["id"]: d["title"] for d in self.docs}

    def search(self, query: str, k: int = 3) -> list[Hit]:
        """Top-k documents with a positive BM25 score; [] for an empty / all-unknown query."""
        if k <= 0 or not query or not query.strip():
            return []
        vocab = self._bm25.vocab_dict
        tokens = [t for t in self._tokenize([query])[0] if t and t in vocab]
        if not tokens:
            return []
        scores = np.asarray(self._bm25.get_scores(tokens), dtype=np.float64)
        order = np.lexsort((np.arange(len(scores)), -scores))[:k]  # score desc, then corpus order
        return [self._hit(int(i), float(scores[i])) for i in order if scores[i] > 0]

    def _hit(self, i: int, score: float) -> Hit:
        d = self.docs[i]
        contents = str(d.get("contents", ""))
        first, _, rest = contents.partition("\n")
        body = rest.strip() if rest and first.strip().strip('"') == d["title"] else contents.strip()
        snippet = body if len(body) <= self.snippet_chars else body[: self.snippet_chars].rsplit(" ", 1)[0] + "…"
        return Hit(id=d["id"], title=d["title"], score=round(score, 6), snippet=snippet)


def clear_cache() -> None:
    """Drop all cached indexes (tests, or after editing a corpus in place)."""
    with _CACHE_LOCK:
        _CACHE.clear()
