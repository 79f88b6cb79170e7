"""Evolution over any task: the epoch's phase functions run math, code and a user's task as they run search.

``evolve.domain`` names the task; a pool without split files is split by a hash of item ids. The epoch
below runs Phase A (real agent loop, scripted policy double), B (the task-neutral detectors), C (the
student double, told the task's own actions), D (the candidate asked about the task's actions), E, F
(the admitted skill carries the task's domain) and the evaluation over the same split rules.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from doubles import ScriptedPolicyDouble, StudentDouble

from hasp import artifacts as art
from hasp.atomic import read_json
from hasp.config import Params
from hasp.evolve import epoch as ep
from hasp.evolve.epoch_task import domain_name, epoch_task

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "unit_convert"


def _params(**evolve) -> Params:
    return Params.model_validate({"data": {"n_questions": 20}, "llm": {"base_url": "http://127.0.0.1:9/v1", "model": "policy"},
                                  "evolve": {"mode": "lite", "filtering": "exec", **evolve}})


def test_a_pool_without_split_files_is_split_by_item_hash(tmp_path):
    p = _params(domain="math")
    task = epoch_task(p, tmp_path)
    splits = {s: task.items(s) for s in ("train", "val", "test")}
    ids = {s: [task.domain.identity(it)[0] for it in items] for s, items in splits.items()}
    assert [len(ids[s]) for s in ("train", "val", "test")] == [7, 3, 10]  # 20 x (0.35, 0.15, 0.5)
    assert not (set(ids["train"]) & set(ids["val"])) and not (set(ids["train"]) & set(ids["test"]))
    assert task.items("train", limit=2) == splits["train"][:2]
    other_seed = epoch_task(Params.model_validate({"data": {"n_questions": 20, "seed": 8},
                                                   "evolve": {"domain": "math"}}), tmp_path)
    assert [other_seed.domain.identity(it)[0] for it in other_seed.items("train")] != ids["train"]
    assert epoch_task(p, tmp_path).items("train") == splits["train"]  # same on every call
    assert task.dataset(p, tmp_path, "test").questions == splits["test"]
    assert domain_name(p) == "math" and task.domain.detectors == "answer"
    with pytest.raises(ValueError, match="split 'seed'"):
        task.items("seed")


def test_an_unknown_task_is_one_error_line(tmp_path):
    from hasp.episode.task import TaskError

    with pytest.raises(TaskError, match="no_such_task"):
        epoch_task(_params(domain="no_such_task"), tmp_path)


def test_the_search_task_keeps_its_split_files(tmp_path):
    p = _params()
    task = epoch_task(p, tmp_path)
    assert task.pool is None and task.name == "search" and task.domain.detectors == "search"


def test_one_epoch_of_a_user_task_runs_phases_a_to_f_and_the_evaluation(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    p = _params(domain="task:unit_task", max_candidates=1, lite_max_candidates=1)
    lib = tmp_path / "lib"
    shutil.copytree(EXAMPLE / "skills", lib)
    ep_dir = tmp_path / "epoch_0"
    ep_dir.mkdir()
    # every answer is wrong: Phase B has failures to read; the policy never calls CONVERT
    policy = ScriptedPolicyDouble(default="Thought: guess.\nAction: FINAL[1]")
    a = ep.phase_a_rollout(p, tmp_path / "no-data", lib, ep_dir / art.ROLLOUT, policy=policy)
    train = epoch_task(p, tmp_path).items("train")
    assert a["n"] == len(train) == 7 and a["em"] == 0.0
    assert "CONVERT[" in policy.seen[0][0]["content"]  # the task's own prompt, not the search agent's

    b = ep.analyse(ep_dir / art.ROLLOUT, lib, p, ep_dir, epoch=0)
    assert b["detectors"] == "answer" and b["pattern_categories"].get("wrong_answer") == 7
    assert not {"premature_final", "no_read_before_final"} & set(b["pattern_categories"])

    student = StudentDouble()
    seen: list = []
    chat = student.chat
    student.chat = lambda messages, **kw: (seen.append(messages), chat(messages, **kw))[1]  # type: ignore[method-assign]
    c = ep.propose(ep_dir / art.CLUSTERS, lib, p, ep_dir / art.CANDIDATES, student=student, epoch=0)
    assert c["proposed"] == 1 and c["domain"] == "unit_convert"
    system = seen[0][0]["content"]
    assert "CONVERT[number unit to unit] or FINAL[answer]" in system and "READ[doc_id]" not in system

    d = ep.validate(ep_dir / art.CANDIDATES, ep_dir / art.VALIDATION, action_types=ep.epoch_actions(p))
    assert d["validated"] == 1 and ep.epoch_actions(p) == ("CONVERT", "FINAL")
    ep.review(ep_dir / art.CANDIDATES, ep_dir / art.VALIDATION, ep_dir / art.CLUSTERS, ep_dir / art.ROLLOUT, lib, p,
              ep_dir / art.REVIEWS)
    from hasp.evolve.heldout import write_heldout

    write_heldout([], ep_dir / art.HELDOUT)
    f = ep.admit_phase(ep_dir / art.CANDIDATES, ep_dir / art.REVIEWS, ep_dir / art.CLUSTERS, lib,
                       ep_dir / art.LIBRARY, p, epoch=0)
    # exec filtering admits the candidate that passed Phase D; its skill says which task it is for
    assert [r["admitted"] for r in f["decisions"]] == [True] and f["library_size"] == 2
    folder = next((ep_dir / art.LIBRARY / "generated").iterdir())
    assert "domain: unit_convert" in (folder / "hasp.yaml").read_text()

    metrics = ep.evaluate(p, tmp_path / "no-data", ep_dir / art.LIBRARY, tmp_path / "eval", policy=policy,
                          trained_policy=None)
    test = epoch_task(p, tmp_path).items("test")
    assert metrics["react"]["n"] == len(test) == 10
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["unit_convert"]["react"]["n"] == 10
    asked = {c["action"] for c in read_json(ep_dir / art.VALIDATION)[0]["calls"]}
    assert asked == {"CONVERT", "FINAL"}  # Phase D asked the candidate about the task's actions only


def test_a_rollout_of_a_task_whose_gold_is_not_an_answer_string_fails_by_its_score():
    """Code items are graded by their tests: no answer strings, yet every rolled-out episode has its EM."""
    from hasp.config import TracesParams
    from hasp.evolve.trace_signals import TraceSignal, failure_set, signal_patterns
    from hasp.records import Trajectory

    trajs = [Trajectory(qid=f"HumanEval/{i}", question="def f(x):", answers=[], variant="pf", steps=[],
                        prediction="return x", em=float(i == 0), terminated="final") for i in range(3)]
    rolled = failure_set(trajs, TracesParams(), scored=True)
    assert (rolled.gold, rolled.label_free, [t.qid for t in rolled.failed]) == (2, 0, ["HumanEval/1", "HumanEval/2"])
    logged = failure_set(trajs, TracesParams())  # logged traces without gold: only the label-free signals count
    assert logged.gold == 0
    fired = {t.qid: [TraceSignal("final_without_evidence", t.qid, -1, "answered at once")] for t in trajs}
    assert signal_patterns(rolled.failed, fired, scored=True) == []  # a scored failure is read by the detectors
    assert {p.category for p in signal_patterns(trajs, fired)} == {"trace_final_without_evidence"}


def test_rs_grpo_and_sage_sample_a_user_task_from_its_training_split(tmp_path, monkeypatch):
    """The training samplers take the epoch's task: the user task's own prompt, items and scorer."""
    import contextlib

    from hasp.config import TrainParams
    from hasp.evolve.chain_skill import chain_grower
    from hasp.train.inputs import recipe_inputs

    monkeypatch.syspath_prepend(str(EXAMPLE))
    p = _params(domain="task:unit_task").model_copy(update={"data": Params().data.model_copy(update={"n_questions": 48})})
    task = epoch_task(p, tmp_path)
    train = task.items("train")  # 17 of the 48: same-phrasing questions among them make SAGE's chains
    first_id, first_q, first_gold = task.domain.identity(train[0])
    policy = ScriptedPolicyDouble(default=f"Thought: known.\nAction: FINAL[{first_gold[0]}]")
    policy_for = lambda _: contextlib.nullcontext(policy)  # noqa: E731
    for recipe in ("rs", "grpo"):
        kw = recipe_inputs(p, TrainParams(recipe=recipe), task, EXAMPLE / "skills", out_dir=tmp_path / recipe,
                           policy_for=policy_for)
        assert kw["questions"] == train
        trajs = kw["sample"](train, tmp_path / "ckpt")
        assert [t.qid for t in trajs] == [task.domain.identity(it)[0] for it in train]
        assert {t.qid: t.em for t in trajs}[first_id] == 1.0  # scored by the task's scorer
        assert "CONVERT[" in policy.seen[-1][0]["content"]  # the task's prompt, not the search agent's
    kw = recipe_inputs(p, TrainParams(recipe="sage"), task, EXAMPLE / "skills", out_dir=tmp_path / "sage",
                       grower=chain_grower(p, gold=True), policy_for=policy_for)
    chains = kw["questions"]
    assert chains and all(len(c.items) == 2 for c in chains)
    assert {i for c in chains for i in c.id.split("+")} <= {task.domain.identity(it)[0] for it in train}
    trajs = kw["sample"](chains[:1], tmp_path / "ckpt")  # the policy double is its own (useless) student
    assert [t.qid for t in trajs] == chains[0].id.split("+") and all(t.terminated != "error" for t in trajs)


def test_only_an_epoch_over_split_files_writes_the_search_benchmark(tmp_path, monkeypatch):
    """Search reads ``hasp data prepare``'s split files; a math, code or user-task epoch splits its own
    items, so the flow's data step says so and writes no search corpus."""
    from hasp.evolve.epoch_task import reads_split_files
    from hasp.flows.evolve import _prepare
    from hasp.progress import Pipeline

    monkeypatch.syspath_prepend(str(EXAMPLE))
    assert reads_split_files(_params())
    for domain in ("math", "code", "task:unit_task"):
        p = _params(domain=domain)
        assert not reads_split_files(p)
        out = _prepare(p, tmp_path / "data", Pipeline("epoch 0", 1))
        assert out == {"skipped": "the task splits its own items", "domain": domain} and not (tmp_path / "data").exists()


def test_an_epoch_of_a_user_domain_rolls_out_its_own_environment_and_keys_on_its_class_file(tmp_path):
    """A ``hasp.api.Domain`` subclass (tests/countdown_domain.py) as ``evolve.domain``: its items are split
    like a task's, Phase A runs its own environment and Phase B reads it with the task-neutral detectors;
    the cache key of its phases is its class's file."""
    from hasp.evolve.epoch_task import task_code_key

    p = _params(domain="countdown_domain:COUNTDOWN")
    lib = tmp_path / "lib"
    lib.mkdir()
    ep_dir = tmp_path / "epoch_0"
    ep_dir.mkdir()
    policy = ScriptedPolicyDouble(default="Thought: done.\nAction: FINAL[liftoff]")  # answers before ticking
    a = ep.phase_a_rollout(p, tmp_path / "no-data", lib, ep_dir / art.ROLLOUT, policy=policy)
    assert a["n"] == len(epoch_task(p, tmp_path).items("train")) == 7 and a["em"] == 0.0
    assert "TICK[" in policy.seen[0][0]["content"] and "You count down." in policy.seen[0][0]["content"]
    b = ep.analyse(ep_dir / art.ROLLOUT, lib, p, ep_dir, epoch=0)
    assert b["detectors"] == "answer" and b["pattern_categories"].get("wrong_answer") == 7
    assert domain_name(p) == "countdown" and ep.epoch_actions(p) == ("TICK", "FINAL")
    assert task_code_key(p) and task_code_key(p) != task_code_key(_params(domain="math"))
