"""Search-R1 retrieval API: our BM25 server, our HTTP client, and the client against test doubles.

Everything runs on loopback. The double servers are stdlib ``http.server`` instances that answer
with canned Search-R1 payloads (including the pyserini-BM25 variant whose documents carry
``title/text/contents`` but no ``id``) or with errors, to exercise retries and error messages.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from doubles import RetrieverServerDouble

from hasp.domains.search.generator import Benchmark, generate_benchmark
from hasp.domains.search.remote import RemoteRetriever, RemoteRetrieverError, parse_response
from hasp.domains.search.retriever import BM25Retriever
from hasp.domains.search.retriever_server import RetrieverServer, create_app, start_in_thread
from hasp.domains.search.tools import SearchEnvironment

DATA = Path(os.environ.get("HASP_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(scope="module")
def bench() -> Benchmark:
    return generate_benchmark(seed=11, n_questions=30)


@pytest.fixture(scope="module")
def server(bench: Benchmark) -> Iterator[RetrieverServer]:
    with start_in_thread(bench.corpus, topk=3) as srv:
        yield srv


def _post(url: str, body: dict) -> Any:
    resp = httpx.post(f"{url}/retrieve", json=body, timeout=10, trust_env=False)
    resp.raise_for_status()
    return resp.json()


# ------------------------------------------------------------------ our server: wire format
def test_response_shape_with_scores(server: RetrieverServer, bench: Benchmark) -> None:
    queries = [bench.questions[0].question, bench.questions[1].question]
    payload = _post(server.url, {"queries": queries, "topk": 2, "return_scores": True})
    assert set(payload) == {"result"} and len(payload["result"]) == 2
    for hits in payload["result"]:
        assert len(hits) == 2
        for hit in hits:
            assert set(hit) == {"document", "score"}
            assert isinstance(hit["score"], float)
            doc = hit["document"]
            assert isinstance(doc["id"], str) and isinstance(doc["contents"], str)
            assert doc["contents"].split("\n")[0].strip('"') == doc["title"]  # Search-R1 "Title"\ntext
        assert hits[0]["score"] >= hits[1]["score"]


def test_response_shape_without_scores(server: RetrieverServer, bench: Benchmark) -> None:
    q = bench.questions[0].question
    with_scores = _post(server.url, {"queries": [q], "topk": 3, "return_scores": True})["result"][0]
    bare = _post(server.url, {"queries": [q], "topk": 3, "return_scores": False})["result"][0]
    assert bare == [h["document"] for h in with_scores]  # bare documents, same order
    assert all("document" not in d and "score" not in d for d in bare)
    # return_scores defaults to false and a missing topk falls back to the server default (3)
    assert _post(server.url, {"queries": [q]})["result"][0] == bare


def test_server_edge_cases(server: RetrieverServer, bench: Benchmark) -> None:
    assert _post(server.url, {"queries": ["", "qqqzzzxx"], "topk": 3})["result"] == [[], []]
    assert _post(server.url, {"queries": [], "topk": 3}) == {"result": []}
    assert len(_post(server.url, {"queries": [bench.questions[0].question], "topk": 5})["result"][0]) == 5
    bad = httpx.post(f"{server.url}/retrieve", json={"queries": "not a list"}, trust_env=False)
    assert bad.status_code == 422
    health = httpx.get(f"{server.url}/health", trust_env=False).json()
    assert health["status"] == "ok" and health["docs"] == len(bench.corpus)


def test_create_app_accepts_a_saved_index(tmp_path: Path, bench: Benchmark) -> None:
    from fastapi.testclient import TestClient

    BM25Retriever(bench.corpus).save(tmp_path / "index")
    client = TestClient(create_app(tmp_path / "index"))
    payload = client.post("/retrieve", json={"queries": [bench.questions[0].question], "topk": 1}).json()
    assert len(payload["result"][0]) == 1


# ------------------------------------------------------------------ our client against our server
def test_round_trip_matches_local_bm25(server: RetrieverServer, bench: Benchmark) -> None:
    local = BM25Retriever(bench.corpus)
    with RemoteRetriever(server.url, topk=3) as remote:
        for q in bench.questions[:10]:
            assert remote.search(q.question, 3) == local.search(q.question, 3)
        hit = remote.search(bench.questions[0].question, 1)[0]
        assert remote.get(hit.id)["contents"] == local.get(hit.id)["contents"]
        assert remote.get("never-returned") is None
        assert remote.search("   ", 3) == [] and remote.search("x", 0) == []
        batched = remote.search_many([q.question for q in bench.questions[:3]], 2)
        assert batched == [local.search(q.question, 2) for q in bench.questions[:3]]


def test_round_trip_on_hotpotqa_paragraphs() -> None:
    path = DATA / "hotpotqa/hotpot_dev_distractor_sample_b.jsonl"
    if not path.exists():
        pytest.skip(f"benchmark sample {path} not present (the shared data folder is only on the dev/CI machine)")
    from hasp.domains.search.datasets import load_hotpotqa

    questions, corpus = load_hotpotqa(path)
    local = BM25Retriever(corpus)
    with start_in_thread(corpus) as srv, RemoteRetriever(srv.url + "/retrieve") as remote:
        for q in questions[:20]:
            assert remote.search(q.question, 3) == local.search(q.question, 3)


def test_scores_flag_off(server: RetrieverServer, bench: Benchmark) -> None:
    q = bench.questions[2].question
    with RemoteRetriever(server.url, return_scores=False) as bare, RemoteRetriever(server.url) as scored:
        plain, ranked = bare.search(q, 3), scored.search(q, 3)
    assert [h.id for h in plain] == [h.id for h in ranked]
    assert [h.snippet for h in plain] == [h.snippet for h in ranked]
    assert [h.score for h in plain] == [1.0, 0.5, 0.333333]  # rank-based stand-ins


def test_search_environment_over_remote(server: RetrieverServer, bench: Benchmark) -> None:
    item = bench.questions[0]
    with RemoteRetriever(server.url) as remote:
        env = SearchEnvironment(remote, top_k=3)
        text, hits = env.search(item.question)
        assert hits and text.startswith(f"1. [{hits[0].id}]")
        by_rank, doc = env.read("1")
        assert doc is not None and doc["id"] == hits[0].id and by_rank.startswith(f"[{hits[0].id}]")
        _, doc2 = env.read(f"[{hits[-1].id}]")
        assert doc2 is not None and doc2["id"] == hits[-1].id
        missing, none = env.read("not a document")
        assert none is None and "No document matches" in missing


# ------------------------------------------------------------------ client against doubles
@pytest.fixture
def double() -> Iterator[Callable[..., RetrieverServerDouble]]:
    made: list[RetrieverServerDouble] = []

    def make(respond: Callable[[int, dict], tuple[int, Any]]) -> RetrieverServerDouble:
        made.append(RetrieverServerDouble(respond))
        return made[-1]

    yield make
    for d in made:
        d.close()


DOC = {"id": "42", "contents": '"Alpha River"\nThe Alpha River flows through Betaland.'}


def _ok(body: dict) -> dict:
    return {"result": [[{"document": DOC, "score": 7.5}] for _ in body["queries"]]}


def test_retry_after_500(double) -> None:
    srv = double(lambda n, body: (500, {"detail": "boom"}) if n == 1 else (200, _ok(body)))
    with RemoteRetriever(srv.url, topk=3, backoff_s=0.01) as client:
        hits = client.search("alpha river", 3)
    assert [(h.id, h.title, h.score) for h in hits] == [("42", "Alpha River", 7.5)]
    assert hits[0].snippet == "The Alpha River flows through Betaland."
    assert len(srv.bodies) == 2
    assert srv.bodies[0] == {"queries": ["alpha river"], "topk": 3, "return_scores": True}


def test_gives_up_with_a_clear_error(double) -> None:
    srv = double(lambda n, body: (503, "overloaded"))
    with RemoteRetriever(srv.url, retries=2, backoff_s=0.01) as client, \
            pytest.raises(RemoteRetrieverError, match=r"/retrieve failed after 3 attempt\(s\): HTTP 503: overloaded"):
        client.search("alpha", 3)
    assert len(srv.bodies) == 3


def test_client_errors_are_not_retried(double) -> None:
    srv = double(lambda n, body: (422, {"detail": "bad request"}))
    with RemoteRetriever(srv.url, backoff_s=0.01) as client, pytest.raises(RemoteRetrieverError, match="HTTP 422"):
        client.search("alpha", 3)
    assert len(srv.bodies) == 1


def test_connection_refused_is_retried_then_reported() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    expected = r"failed after 2 attempt\(s\): ConnectError.*Is the retriever running"
    with RemoteRetriever(f"http://127.0.0.1:{port}", retries=1, backoff_s=0.01, timeout_s=2) as client, \
            pytest.raises(RemoteRetrieverError, match=expected):
        client.search("alpha", 3)


def test_wrong_shape_is_reported(double) -> None:
    srv = double(lambda n, body: (200, {"results": []}))
    with RemoteRetriever(srv.url) as client, pytest.raises(RemoteRetrieverError, match="'result' list"):
        client.search("alpha", 3)
    srv2 = double(lambda n, body: (200, "<html>not json</html>"))
    with RemoteRetriever(srv2.url) as client, pytest.raises(RemoteRetrieverError, match="not JSON"):
        client.search("alpha", 3)
    with pytest.raises(RemoteRetrieverError, match="asked 2 queries, got 1"):
        parse_response({"result": [[]]}, 2)


def test_pyserini_style_documents_without_ids(double) -> None:
    """Search-R1's BM25 path returns ``{title, text, contents}`` and, without scores, bare docs."""
    docs = [{"title": "Alpha River", "text": "The Alpha River flows through Betaland.",
             "contents": '"Alpha River"\nThe Alpha River flows through Betaland.'},
            {"title": "Betaland", "text": "Betaland is a country.", "contents": '"Betaland"\nBetaland is a country.'}]
    srv = double(lambda n, body: (200, {"result": [docs[: body["topk"]] for _ in body["queries"]]}))
    with RemoteRetriever(srv.url, return_scores=False) as client:
        hits = client.search("alpha", 2)
        again = client.search("alpha", 2)
        env = SearchEnvironment(client)
        env.search("alpha")
        text, doc = env.read("2")
    assert [h.title for h in hits] == ["Alpha River", "Betaland"]
    assert all(h.id.startswith("r-") for h in hits) and [h.id for h in hits] == [h.id for h in again]
    assert doc is not None and doc["title"] == "Betaland" and "Betaland is a country." in text
    assert srv.bodies[0]["return_scores"] is False


def test_document_cache_is_bounded(double) -> None:
    srv = double(lambda n, body: (200, {"result": [[{"document": {"id": f"d{n}", "contents": f'"T{n}"\nbody {n}'},
                                                     "score": 1.0}]]}))
    with RemoteRetriever(srv.url, cache_size=2) as client:
        for _ in range(3):
            client.search("q", 1)
        assert len(client) == 2 and client.get("d1") is None and client.get("d3")["title"] == "T3"
