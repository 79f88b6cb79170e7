"""The RS/OPD sampler runs the real PF agent on the train split with train.rollout's settings."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import pytest
from doubles import ScriptedPolicyDouble

from hasp.config import Params, RolloutParams
from hasp.domains.search.prepare import prepare_data
from hasp.train.rounds import RecipeError
from hasp.train.sampler import PFRolloutSampler, training_questions
from traj_builders import search_task

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("sampler_data")
    prepare_data(Params.model_validate({"data": {"n_questions": 10, "hop_weights": {1: 1.0}}}), d)
    return d


def test_samples_every_asked_question_under_the_rollout_budgets(data: Path, tmp_path: Path) -> None:
    lib = tmp_path / "search"
    shutil.copytree(ROOT / "hasp" / "skills" / "search", lib, ignore=shutil.ignore_patterns("__pycache__"))
    policy = ScriptedPolicyDouble(default="Thought: look again\nAction: SEARCH[who founded it]")
    asked: list[Path] = []

    @contextlib.contextmanager
    def policy_for(model_dir: Path):
        asked.append(model_dir)
        yield policy

    rollout = RolloutParams(k=2, temperature=0.9, top_p=0.95, max_steps=4, max_search_calls=2)
    p = Params.model_validate({"agent": {"max_steps": 9, "max_search_calls": 9}, "llm": {"max_concurrency": 2}})
    sampler = PFRolloutSampler(p, search_task(data).domain, lib, rollout=rollout, policy_for=policy_for)
    qs = training_questions(search_task(data))
    trajs = sampler([q for q in qs for _ in range(2)], tmp_path / "ckpt")
    assert asked == [tmp_path / "ckpt"] and len(trajs) == 2 * len(qs)
    assert [t.qid for t in trajs] == [q.id for q in qs for _ in range(2)]
    refusals = 0
    for t in trajs:
        assert t.variant == "train_rollout"
        loop_steps = [s for s in t.steps if s.audit is not None]
        assert len(loop_steps) <= 4  # the rollout's step budget, not the agent section's 9
        ran = [s for s in loop_steps if s.audit.a_final.type == "SEARCH" and "n_hits" in s.audit.feedback]
        refused = [s for s in loop_steps if s.audit.feedback.get("budget_exhausted") == "search"]
        assert len(ran) <= 2  # the rollout's SEARCH cap, not the agent section's 9
        refusals += len(refused)
    assert refusals > 0  # the policy kept searching and met the cap
    sampled = [kw for kw in policy.calls if kw.get("max_tokens") == p.agent.max_tokens]
    assert sampled and {kw["temperature"] for kw in sampled} == {0.9} and {kw["seed"] for kw in sampled} == {None}


def test_teacher_snippets_without_a_teacher_is_refused(data: Path) -> None:
    with pytest.raises(RecipeError, match="^train.rollout.teacher_snippets needs a teacher"):
        PFRolloutSampler(Params(), search_task(data).domain, None, rollout=RolloutParams(teacher_snippets=True))


def test_missing_train_split_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match=r"train.jsonl: no such file; prepare the data first"):
        training_questions(search_task(tmp_path))


def test_an_episode_whose_endpoint_gave_up_is_left_out_and_counted(data: Path, tmp_path: Path, caplog) -> None:
    """One question's endpoint fails after the client's retries: the other samples of the round are kept
    (the failed one becomes no row), the failure is logged and counted; if every episode fails the
    round ends with one line."""
    import logging

    from doubles import AnsweringPolicyDouble

    qs = training_questions(search_task(data))
    gold = {q.question: q.answers[0] for q in qs}
    p = Params.model_validate({"llm": {"max_concurrency": 2}})

    def sampler_with(policy):
        @contextlib.contextmanager
        def policy_for(model_dir: Path):
            yield policy

        return PFRolloutSampler(p, search_task(data).domain, None, rollout=RolloutParams(k=1), policy_for=policy_for)

    sampler = sampler_with(AnsweringPolicyDouble(gold, correct=set(gold), fail={qs[0].question}))
    with caplog.at_level(logging.WARNING, logger="hasp.train.sampler"):
        trajs = sampler(qs, tmp_path / "ckpt")
    assert [t.qid for t in trajs] == [q.id for q in qs[1:]] and all(t.em == 1.0 for t in trajs)
    assert sampler.calls[-1]["failed"] == 1 and sampler.calls[-1]["n"] == len(qs) - 1
    assert f"1 of {len(qs)} sampled episodes failed" in caplog.text and "ConnectionError" in caplog.text
    down = sampler_with(AnsweringPolicyDouble(gold, correct=set(), fail=set(gold)))
    with pytest.raises(RecipeError, match=rf"all {len(qs)} sampled episodes failed; first: ConnectionError"):
        down(qs, tmp_path / "ckpt")


def test_a_seeded_sample_sends_its_seed_with_every_request(data: Path) -> None:
    from hasp.episode.seeding import Seeded

    qs = training_questions(search_task(data))[:2]
    policy = ScriptedPolicyDouble(default="Thought: look again\nAction: SEARCH[who founded it]")

    @contextlib.contextmanager
    def policy_for(model_dir: Path):
        yield policy

    sampler = PFRolloutSampler(Params(), search_task(data).domain, None, rollout=RolloutParams(k=1, temperature=0.9),
                               policy_for=policy_for)
    trajs = sampler([Seeded(qs[0], 11), Seeded(qs[1], 12), Seeded(qs[0], 13)], Path("ckpt"))
    assert [t.qid for t in trajs] == [qs[0].id, qs[1].id, qs[0].id]  # the items, unwrapped
    seeds: dict[str, set] = {}
    for msgs, kw in zip(policy.seen, policy.calls):
        user = "\n".join(m["content"] for m in msgs if m["role"] == "user")
        seeds.setdefault(next(q.question for q in qs if q.question in user), set()).add(kw["seed"])
    assert seeds == {qs[0].question: {11, 13}, qs[1].question: {12}}  # every step of an episode: its seed
    assert len(policy.calls) > 3  # several steps per episode, all seeded


def test_rounds_ask_each_sample_with_a_seed_of_its_own_and_the_same_seeds_again(data: Path, tmp_path: Path) -> None:
    from doubles import RolloutSamplerDouble

    from hasp.config import TrainParams
    from hasp.episode.seeding import Seeded, sampling_seed
    from hasp.train.rounds import round_questions

    qs = training_questions(search_task(data))[:3]
    train = TrainParams.model_validate({"seed": 7, "rollout": {"k": 2}})
    asked = []
    for i in (0, 1):  # what run_rounds asks for in rounds 0 and 1
        asked.append([Seeded(q, sampling_seed(train.seed, "rs", i, n, j))
                      for n, q in enumerate(round_questions(qs, None, train.seed, i)) for j in range(2)])
    seeds = [s.seed for r in asked for s in r]
    assert len(set(seeds)) == len(seeds) == 12  # the k samples of a question differ, and so do the rounds
    assert sampling_seed(7, "rs", 0, 0, 0) == sampling_seed(7, "rs", 0, 0, 0) != sampling_seed(8, "rs", 0, 0, 0)
    # run_rounds itself hands the sampler exactly these items
    from hasp.train.rounds import run_rounds

    base = tmp_path / "base"  # a folder that passes the weights check; no training is reached
    base.mkdir()
    (base / "config.json").write_text("{}")
    (base / "model.safetensors").write_bytes(b"")
    double = RolloutSamplerDouble([])
    with contextlib.suppress(Exception):  # a round without rows stops or hands on: the asking is what is checked
        run_rounds("rs", base, qs, double, tmp_path / "out", train, rounds=1, build_rows=lambda trajs, i: ([], {}))
    assert double.calls and double.calls[0][0] == asked[0]
