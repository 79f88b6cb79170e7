"""A phase whose model calls failed is never served from the task cache as a result.

Real Prefect (the session's test API): Phase C's task runs against a student whose endpoint is
down, then again with the same cache key after the endpoint recovered. The outage must be
reported as failed proposals, and the second run must call the student again.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from doubles import OutageStudentDouble

from hasp.atomic import write_json
from hasp.config import load_params
from hasp.evolve.cluster import cluster_patterns, clusters_to_json
from hasp.evolve.detectors import _TEMPLATES, FailurePattern

ROOT = Path(__file__).resolve().parents[1]


def _clusters() -> list:
    out = []
    for cat in ("no_read_before_final", "repeated_search"):
        a, t, h = _TEMPLATES[cat]
        out += cluster_patterns([FailurePattern(cat, a, t, h, qid=f"{cat}{i}") for i in range(4)], ["seed_skill"])
    return out


@pytest.fixture
def epoch_dir(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "hasp" / "skills" / "search", tmp_path / "lib", ignore=shutil.ignore_patterns("__pycache__"))
    write_json(clusters_to_json(_clusters()), tmp_path / "clusters.json")
    return tmp_path


def test_failed_proposals_are_reported_and_retried_not_cached(prefect_harness, epoch_dir: Path) -> None:
    from prefect import flow

    from hasp.flows.evolve import proposals_line
    from hasp.tasks import phases

    params = load_params(ROOT / "params.yaml", {"evolve.max_candidates": 2, "evolve.mode": "full",
                                               "evolve.proposal_format": "code"})
    student = OutageStudentDouble()
    key = f"propose-outage-{epoch_dir.name}"

    @flow(name="propose-once")
    def propose_once() -> dict:
        return phases.settle(phases.propose)(key, epoch_dir / "clusters.json", epoch_dir / "lib", params,
                                             epoch_dir / "candidates.json", student=student, epoch=0,
                                             history_path=None)

    down = propose_once()
    assert down["failure"] == "2 proposals failed: endpoint error" and down["failed_calls"] == 2
    assert down["proposed"] == 0 and "http 500" in down["first_error"]
    assert proposals_line(down).startswith("2 proposals failed: endpoint error")

    student.down = False
    before = student.calls.n
    up = propose_once()  # same cache key: the outage was not stored as the phase's result
    assert student.calls.n == before + 2
    assert "failure" not in up and up["proposed"] == 2 and up["with_code"] == 2
    assert proposals_line(up) == "proposed 2"

    calls = student.calls.n
    assert propose_once() == up and student.calls.n == calls  # a complete phase is cached as before

    record = prefect_harness / "storage" / f"C-propose-{key}"
    assert record.is_file()
    record.write_text('{"broken')  # a corrupted cache entry is a miss: the phase runs again
    again = propose_once()
    assert student.calls.n == calls + 2 and again["proposed"] == 2


GOOD_SUMMARY = ('{"category": "stale_evidence", "abstraction": "The agent trusts an outdated document.", '
                '"trigger": "an answer read from an old page", "intervention_hint": "check the date"}')


def test_failed_summaries_are_counted_and_the_analysis_is_retried_not_cached(prefect_harness, tmp_path: Path) -> None:
    """Phase B's summarizer behind an endpoint that returns 500: the analysis says how many
    summaries failed and is not cached; once the endpoint answers, the same key calls it again."""
    from prefect import flow
    from traj_builders import scripted_traj

    from doubles import OpenAIEndpointDouble
    from hasp.agent.rollout import write_trajectories
    from hasp.llm.client import LLMClient, LLMConfig
    from hasp.tasks import phases

    shutil.copytree(ROOT / "hasp" / "skills" / "search", tmp_path / "lib", ignore=shutil.ignore_patterns("__pycache__"))
    trajs = [scripted_traj(f"q{i}", [("SEARCH", "who"), ("FINAL", "Oslo")], question=f"Where was q{i} born?",
                           answers=["Telvik"]) for i in range(3)]
    write_trajectories(trajs, tmp_path / "rollout.jsonl")
    params = load_params(ROOT / "params.yaml", {"evolve.mode": "full", "evolve.summarizer": True,
                                               "evolve.summarizer_retries": 0})
    key = f"analyse-outage-{tmp_path.name}"
    with OpenAIEndpointDouble(always=500, reply=lambda body: GOOD_SUMMARY) as ep:
        client = LLMClient(LLMConfig(base_url=ep.base_url, model="summarizer-double", max_retries=0))

        @flow(name="analyse-once")
        def analyse_once() -> dict:
            return phases.settle(phases.analyse)(key, tmp_path / "rollout.jsonl", tmp_path / "lib", params,
                                                 tmp_path, summarizer=client, epoch=0)

        down = analyse_once()
        assert down["failure"] == "3 summaries failed: endpoint error" and down["failed_calls"] == 3
        assert "http 500" in down["first_error"] and down["llm_patterns"] == 0
        ep.always = None  # the endpoint recovers
        before = ep.requests
        up = analyse_once()  # same cache key: the outage was not stored as the phase's result
        assert ep.requests == before + 3
        assert "failure" not in up and up["llm_patterns"] == 3


def test_a_rollout_cut_by_the_episode_deadline_reports_failed_episodes(tmp_path: Path) -> None:
    """A hung policy endpoint during a rollout: each episode ends at its wall budget as an
    endpoint failure, the phase summary says so (so the orchestrator retries, not caches, it) and
    Phase B does not mine those episodes as the agent's failures."""
    from doubles import OpenAIEndpointDouble

    from hasp.domains.search.prepare import prepare_data
    from hasp.evolve import epoch as ep
    from hasp.llm.client import LLMClient, LLMConfig

    params = load_params(ROOT / "params.yaml", {"data.n_questions": 10, "agent.max_steps": 2,
                                               "llm.max_concurrency": 4, "harness.timeout_seconds": 1.0,
                                               "evolve.summarizer": False})
    prepare_data(params, tmp_path / "data")
    with OpenAIEndpointDouble(always="hang") as endpoint:
        client = LLMClient(LLMConfig(base_url=endpoint.base_url, model="policy-double", timeout_s=300.0))
        s = ep.rollout(params, tmp_path / "data", None, "val", tmp_path / "val.jsonl", policy=client,
                       variant="react")
    assert s["n"] >= 1 and s["failed_calls"] == s["n"]
    assert s["failure"] == f"{s['n']} episodes failed: endpoint error" and "deadline" in s["first_error"]
    shutil.copytree(ROOT / "hasp" / "skills" / "search", tmp_path / "lib", ignore=shutil.ignore_patterns("__pycache__"))
    b = ep.analyse(tmp_path / "val.jsonl", tmp_path / "lib", params, tmp_path)
    assert b["analysed"] == 0 and b["patterns"] == 0
