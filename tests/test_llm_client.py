"""LLMClient against a scripted local double of an OpenAI chat endpoint (no model, no network)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from doubles import OpenAIEndpointDouble

from hasp.llm.client import LLMClient, LLMConfig, LLMError


def _client(base_url: str, **kw: object) -> LLMClient:
    cfg = {"base_url": base_url, "model": "fake-model", "timeout_s": 10.0, "max_retries": 3, **kw}
    return LLMClient(LLMConfig(**cfg))  # type: ignore[arg-type]


USER = [{"role": "user", "content": "hello"}]


@pytest.fixture
def flaky() -> Iterator[OpenAIEndpointDouble]:
    with OpenAIEndpointDouble([429, 429]) as ep:
        yield ep


def test_retries_429_then_counts_tokens(flaky: OpenAIEndpointDouble) -> None:
    client = _client(flaky.base_url)
    res = client.chat(USER, temperature=0.3, max_tokens=7, seed=1)
    assert res.text == "hello"
    assert (res.prompt_tokens, res.completion_tokens) == (10, 5)
    assert res.latency_s > 0
    assert flaky.requests == 3  # two 429s, then success
    assert flaky.bodies[-1]["model"] == "fake-model"
    assert (flaky.bodies[-1]["temperature"], flaky.bodies[-1]["max_tokens"], flaky.bodies[-1]["seed"]) == (0.3, 7, 1)
    client.chat(USER)
    u = client.usage
    assert (u.requests, u.prompt_tokens, u.completion_tokens, u.total_tokens) == (2, 20, 10, 30)


def test_persistent_500_raises_clear_llm_error() -> None:
    with OpenAIEndpointDouble(always=500) as ep:
        client = _client(ep.base_url, max_retries=2)
        with pytest.raises(LLMError) as info:
            client.chat(USER)
        msg = str(info.value)
        assert ep.base_url in msg and "fake-model" in msg and "500" in msg
        assert ep.requests == 3  # first try + 2 retries
        assert client.usage.requests == 0


def test_unreachable_endpoint_raises_llm_error() -> None:
    with OpenAIEndpointDouble() as ep:
        url = ep.base_url
    client = _client(url, max_retries=0, timeout_s=2.0)
    with pytest.raises(LLMError, match="fake-model"):
        client.generate(USER)


def test_map_chat_bounds_concurrency_and_keeps_order() -> None:
    with OpenAIEndpointDouble(delay_s=0.15) as ep:
        client = _client(ep.base_url, max_concurrency=3)
        batch = [[{"role": "user", "content": f"q{i}"}] for i in range(10)]
        results = client.map_chat(batch, max_tokens=4)
        assert [r.text for r in results] == [f"q{i}" for i in range(10)]
        assert ep.max_in_flight == 3
        assert client.usage.completion_tokens == 50


def test_semaphore_bounds_callers_own_threads() -> None:
    """The bound holds for one client shared by many caller threads, not just inside map_chat."""
    with OpenAIEndpointDouble(delay_s=0.1) as ep:
        client = _client(ep.base_url, max_concurrency=2)
        threads = [threading.Thread(target=client.chat, args=(USER,)) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert ep.max_in_flight == 2 and client.usage.requests == 6


def test_stop_is_sent_and_applied_client_side() -> None:
    with OpenAIEndpointDouble() as ep:
        client = _client(ep.base_url)
        res = client.chat([{"role": "user", "content": "Action: search\nObservation: leaked"}],
                          stop=["Observation:"])
        assert res.text == "Action: search\n"
        assert ep.bodies[0]["stop"] == ["Observation:"]


def test_generate_and_api_key_env(monkeypatch: pytest.MonkeyPatch) -> None:
    with OpenAIEndpointDouble() as ep:
        assert _client(ep.base_url).generate(USER, max_tokens=3, temperature=0.0) == "hello"
        monkeypatch.delenv("HASP_TEST_KEY", raising=False)
        with pytest.raises(LLMError, match="HASP_TEST_KEY"):
            _client(ep.base_url, api_key_env="HASP_TEST_KEY")
        monkeypatch.setenv("HASP_TEST_KEY", "sk-test")
        assert _client(ep.base_url, api_key_env="HASP_TEST_KEY").generate(USER) == "hello"


def test_top_p_is_sent_only_when_configured() -> None:
    """A sampling rollout's nucleus mass reaches the server; a greedy client sends none (server default)."""
    with OpenAIEndpointDouble() as ep:
        LLMClient(LLMConfig(base_url=ep.base_url, model="m", top_p=0.95)).chat([{"role": "user", "content": "hi"}],
                                                                           temperature=0.9)
        LLMClient(LLMConfig(base_url=ep.base_url, model="m")).chat([{"role": "user", "content": "hi"}])
    assert ep.bodies[0]["top_p"] == 0.95 and ep.bodies[0]["temperature"] == 0.9
    assert "top_p" not in ep.bodies[1]


def test_a_greedy_request_sent_again_is_answered_from_the_reply_cache() -> None:
    with OpenAIEndpointDouble() as ep:
        client = _client(ep.base_url)
        first = client.chat(USER, temperature=0.0, max_tokens=7)
        again = client.chat(USER, temperature=0.0, max_tokens=7)
        assert ep.requests == 1 and again.text == first.text  # one decode, the same reply
        assert (again.prompt_tokens, again.completion_tokens) == (first.prompt_tokens, first.completion_tokens)
        # anything the reply depends on makes another request: budget, stop, seed, grammar, messages
        client.chat(USER, temperature=0.0, max_tokens=8)
        client.chat(USER, temperature=0.0, max_tokens=7, stop=["Observation:"])
        client.chat(USER, temperature=0.0, max_tokens=7, seed=3)
        client.chat([{"role": "user", "content": "hello!"}], temperature=0.0, max_tokens=7)
        assert ep.requests == 5
        # a sampled request decodes anew every time
        client.chat(USER, temperature=0.7, max_tokens=7)
        client.chat(USER, temperature=0.7, max_tokens=7)
        assert ep.requests == 7
        u = client.usage
        assert (u.requests, u.cached, u.prompt_tokens) == (7, 1, 70)  # the cached reply cost no tokens


def test_the_reply_cache_can_be_turned_off() -> None:
    with OpenAIEndpointDouble() as ep:
        client = _client(ep.base_url, reply_cache=False)
        client.chat(USER, temperature=0.0)
        client.chat(USER, temperature=0.0)
        assert ep.requests == 2 and client.usage.cached == 0
