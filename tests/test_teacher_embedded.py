"""An embedded teacher (``teacher.embedded: gemma3-270m``) on a real llama.cpp server, in each role the
teacher plays: Phase E review, teacher-assisted PFs, OPD targets and the judge.

One server for the module, started the way the product starts it (``teacher_client``: lazily, on its own
port, the same managed child process as the policy's). What is asserted is what a user relies on: the
call reached the real model (tokens counted), its reply was used or its fallback counted, never silent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from doubles import ScriptedPolicyDouble
from test_review_admit import cand, make_cluster

from hasp.config import LlamaCppParams, LLMParams, TeacherParams
from hasp.llm.server import free_port

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def teacher() -> Iterator[object]:
    from hasp.llm.endpoints import teacher_client

    llm = LLMParams(llamacpp=LlamaCppParams(startup_timeout_s=600.0, parallel=2, ctx_per_slot=4096))
    client = teacher_client(TeacherParams(embedded="gemma3-270m", port=free_port()), llm)
    try:
        yield client
    finally:
        client.close()  # type: ignore[union-attr]


def test_the_teacher_server_is_gemma_and_stops_with_its_client() -> None:
    from hasp.llm.endpoints import teacher_client

    client = teacher_client(TeacherParams(embedded="gemma3-270m", port=free_port()),
                            LLMParams(llamacpp=LlamaCppParams(startup_timeout_s=600.0, parallel=1)))
    reply = client.chat([{"role": "user", "content": "The capital of France is"}], max_tokens=4)
    assert reply.prompt_tokens > 0 and client.started
    server = client._stack._exit_callbacks  # noqa: SLF001 - the block that owns the server
    assert server, "the lazily started server is held by the client"
    url = client.endpoint().base_url
    assert "gemma-3-270m" in client.endpoint().model
    client.close()
    from hasp.llm.llamacpp_server import served_alias

    assert served_alias(url.removesuffix("/v1"), timeout=2.0) is None  # nothing left listening


def test_review_by_the_embedded_teacher_is_a_schema_constrained_verdict(teacher: object) -> None:
    from hasp.evolve.review import review_candidate

    before = teacher.client().usage  # type: ignore[attr-defined]
    r = review_candidate(cand(), 1.0, make_cluster(), teacher)
    after = teacher.client().usage  # type: ignore[attr-defined]
    assert after.requests > before.requests and after.constrained > before.constrained
    assert r.decision in ("ACCEPT", "REVISE", "REJECT") and all(0.0 <= v <= 1.0 for v in r.scores().values())
    # the JSON schema makes every reply parse; what it says is the model's review only when it reviews:
    # Gemma-270M repeats the prompt's example verdict word for word, which is refused, retried and then
    # left to the heuristic with the reason recorded (never counted as the model's review)
    if r.reviewer == "llm":
        assert r.feedback and "check has_read" not in r.feedback
    else:
        assert r.fallback_reason.startswith("teacher verdict unusable") and "not a review" in r.fallback_reason
        assert r.raw_reply  # what the model wrote is kept


def test_a_teacher_assisted_pf_asks_the_embedded_teacher(teacher: object) -> None:
    from hasp.agent.loop import AgentConfig, episode_runner
    from hasp.agent.react import ReactEnvironment
    from hasp.agent.variants import get_variant
    from hasp.config import HarnessParams
    from hasp.domains.search.generator import generate_benchmark
    from hasp.domains.search.retriever import BM25Retriever
    from hasp.domains.search.task import score
    from hasp.domains.search.tools import SearchEnvironment
    from hasp.pf.library import load_library

    bench = generate_benchmark(7, 20)
    retr = BM25Retriever.from_corpus(bench.corpus)
    lib = load_library(Path(__file__).resolve().parents[1] / "hasp" / "skills" / "search", "search")
    item = bench.questions[0]
    policy = ScriptedPolicyDouble([f"SEARCH[{item.question}]", "FINAL[nobody]", "FINAL[nobody]"])
    cfg = AgentConfig(max_steps=4, max_search_calls=3)
    run = episode_runner(policy=policy, library=lib, cfg=cfg, variant=get_variant("pf_teacher"),
                         params=HarnessParams(pf_selection="auto"), teacher=teacher,
                         make_env=lambda it: ReactEnvironment(SearchEnvironment(retr, top_k=3), max_search_calls=3,
                                                              max_read_calls=3, scorer=score),
                         identity=lambda it: (it.id, it.question, it.answers))
    try:
        traj = run(item)
    finally:
        lib.close()
    assert traj.teacher_calls > 0 and traj.teacher_prompt_tokens > 0  # the real model answered
    assert traj.teacher_errors == 0


def test_opd_targets_come_from_the_embedded_teacher_or_are_counted_unreadable(teacher: object) -> None:
    from test_recipes import traj

    from hasp.config import TrainParams
    from hasp.train.opd import opd_rows
    from hasp.train.run import teacher_fn

    before = teacher.client().usage.requests  # type: ignore[attr-defined]
    rows, stats = opd_rows([traj("q1", n_steps=2)], TrainParams(), reward_floor=-1.0, teacher=teacher_fn(teacher))
    assert rows and stats["target"] == "teacher"
    assert teacher.client().usage.requests - before == len(rows)  # type: ignore[attr-defined]
    by_source = stats["target_sources"]
    assert by_source.get("teacher", 0) + by_source.get("pf", 0) == len(rows)
    assert by_source.get("pf", 0) == stats["teacher_unreadable"]  # a reply without an action keeps the PF's


def test_the_embedded_judge_gives_a_verdict_in_one_of_two_words(teacher: object) -> None:
    from hasp.episode.judge import judge_answer

    v = judge_answer(teacher, "What is the capital of France?", ["Paris"], "Paris", max_tokens=8)
    assert v.prompt_tokens > 0 and v.correct is not None and not v.error, v  # constrained to the two words


def test_the_embedded_teacher_judges_logged_traces_in_one_of_two_words(teacher: object) -> None:
    from traj_builders import scripted_traj

    from hasp.evolve.trace_judge import judge_traces

    trajs = [scripted_traj("t1", [("SEARCH", "capital France"), ("FINAL", "Paris")], question="What is the "
                           "capital of France?", answers=(), prediction="Paris"),
             scripted_traj("t2", [("FINAL", "Berlin")], question="Who wrote Hamlet?", answers=(), prediction="Berlin")]
    judged = judge_traces(trajs, teacher)
    # the verdict is constrained to the two words: the base model cannot continue the prompt instead
    assert judged.asked == 2 and len(judged.verdicts) == 2 and judged.errors == 0, judged.summary()
    assert judged.unsupported == sum(1 for v in judged.verdicts.values() if not v)
    assert all(isinstance(v, bool) for v in judged.verdicts.values())
