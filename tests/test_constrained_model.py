"""Constrained decoding on llama.cpp with the real embedded model (SmolLM2-135M, its GGUF): every
policy step of real agent episodes carries the action grammar and every reply parses; a math reply
under its grammar has its answer; the code grammar is accepted; a Phase C proposal under the
cluster's JSON schema is a declaration that compiles, sampled at the proposal temperature.

The server is llama.cpp's own (``xllamacpp``) in this process, on a free loopback port, reached
through ``LLMClient`` in the llamacpp dialect, so the request shape is the one production sends.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gbnf_regex import accepts
from test_declarative_proposals import cluster_of, invented_read_traj

from hasp.agent.loop import AgentConfig, run_episode
from hasp.config import Params
from hasp.agent.parser import action_grammar
from hasp.agent.replay import replay
from hasp.agent.rollout import run_many
from hasp.domains.code.task import CODE_GRAMMAR
from hasp.domains.math.datasets import MathItem
from hasp.episode.domains import MathDomain
from hasp.episode.spec import episode_spec
from hasp.domains.math.task import answer_grammar
from hasp.domains.search.generator import generate_benchmark
from hasp.domains.search.retriever import BM25Retriever
from hasp.domains.search.task import score
from hasp.domains.search.tools import SearchEnvironment
from hasp.evolve.declarative import propose_declarative
from hasp.llm.client import LLMClient, LLMConfig
from hasp.pf.library import load_library
from hasp.records import Trajectory

pytestmark = pytest.mark.model

SEED = Path(__file__).resolve().parents[1] / "hasp" / "skills" / "search"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llamacpp() -> Iterator[LLMClient]:
    """A client in the llamacpp dialect on llama.cpp's server with the embedded GGUF (2 slots, 2 threads)."""
    import xllamacpp as xlc

    from hasp.llm.model_prep import gguf_path

    p = xlc.CommonParams()
    p.model.path = str(gguf_path())
    p.n_parallel, p.n_ctx, p.port = 2, 8192, _free_port()
    p.cpuparams.n_threads = p.cpuparams_batch.n_threads = 2
    server = xlc.Server(p)
    base = f"http://127.0.0.1:{p.port}"
    end = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{base}/health", timeout=2).close()
            break
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)
    client = LLMClient(LLMConfig(base_url=f"{base}/v1", model=gguf_path().stem, dialect="llamacpp", timeout_s=300.0,
                                 max_retries=1, max_concurrency=2, temperature=0.0, max_tokens=64))
    try:
        yield client
    finally:
        client.close()
        del server


def test_every_constrained_step_of_real_episodes_parses(llamacpp: LLMClient) -> None:
    """Real prompts: the system prompt and demonstration, the question, then observations, PF context
    and reminders as the episode goes; the seed PFs send early answers back to search, so episodes
    run several steps and end with the answer-only turn."""
    bench = generate_benchmark(7, 20)
    env_index = BM25Retriever.from_corpus(bench.corpus)
    lib = load_library(SEED)
    before = llamacpp.usage

    def episode(q: Any) -> Trajectory:
        return run_episode(qid=q.id, question=q.question, answers=q.answers, policy=llamacpp,
                           env=SearchEnvironment(env_index, top_k=3, snippet_chars=120, read_chars=400),
                           pfs=lib.pfs(), cfg=AgentConfig(max_steps=4, max_tokens=64, constrained="auto"),
                           variant="pf", scorer=score)

    try:
        trajs = run_many(bench.questions[:4], episode, concurrency=2, progress=False)
    finally:
        lib.close()
    steps = [s for t in trajs for s in t.steps]
    assert [(s.raw_output, s.parse_error) for s in steps if s.parse_error] == []
    assert all(t.terminated in ("final", "budget_final") for t in trajs), [t.terminated for t in trajs]
    assert len(steps) >= 9, len(steps)  # more than two steps an episode
    grammars = (action_grammar(max_tokens=64), action_grammar(("FINAL",), 64))
    assert all(any(accepts(g, s.raw_output) for g in grammars) for s in steps)
    used = llamacpp.usage
    assert used.constrained - before.constrained == len(steps) and used.constraint_fallbacks == 0


def test_a_constrained_math_reply_has_its_answer_and_the_code_grammar_is_read(llamacpp: LLMClient) -> None:
    items = [MathItem(id="a", problem="What is 6 times 7?", answers=["42"]),
             MathItem(id="b", problem="Compute 15 + 27 - 2.", answers=["40"]),
             MathItem(id="g", problem="Make 24 from the numbers [4, 6, 1, 1].", answers=[], kind="game24",
                      numbers=[4, 6, 1, 1])]
    spec = episode_spec(Params.model_validate({"llm": {"constrained": "actions"}}), MathDomain(max_tokens=96), "react")
    for item in items:
        t = spec.runner(policy=llamacpp)(item).traj
        assert t.steps and not t.steps[0].parse_error and t.prediction, t.steps[0].raw_output
        assert accepts(answer_grammar(96), t.steps[0].raw_output)
    reply = llamacpp.chat([{"role": "user", "content": "Write a Python function add(a, b) returning a + b."}],
                          max_tokens=48, grammar=CODE_GRAMMAR).text
    assert reply.startswith("```python\n"), reply
    assert llamacpp.constraint_fallbacks == 0


def test_a_sampled_proposal_under_the_cluster_schema_is_a_declaration(llamacpp: LLMClient) -> None:
    replayed = {"q1": list(replay(invented_read_traj(), 5))}
    before = llamacpp.usage
    cands = propose_declarative([cluster_of("q1")], llamacpp, existing_skill_ids=["redundant_read"],
                                replayed=replayed, reply_format="schema", temperature=0.7, max_tokens=160, seed=3,
                                per_cluster=3)
    assert cands and all(c.declared and not c.parse_error for c in cands), [(c.parse_error, c.raw_reply) for c in cands]
    used = llamacpp.usage
    assert used.constraint_fallbacks == before.constraint_fallbacks
    assert used.constrained - before.constrained == used.requests - before.requests == 3  # one reply each, no retry
