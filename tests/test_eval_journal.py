"""An evaluation cell killed midway resumes from its journal: only the questions it lacks run again.

Policies are test doubles (named so) that say what they are (``identity()``), as the real clients do;
the dataset is the real HotpotQA sample in ``../shared/data``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doubles import AnsweringPolicyDouble
from test_eval_runner import HOTPOT, SKILLS, _gold, _params, _sets

from hasp.eval.journal import SUFFIX
from hasp.eval.runner import run_eval


class IdentifiedPolicyDouble(AnsweringPolicyDouble):
    """Answers like ``AnsweringPolicyDouble``, says which weights it stands for, and can be made to die
    (a KeyboardInterrupt, as a killed run's threads see) on its ``die_at``-th call."""

    def __init__(self, *args, weights: str = "w1", die_at: int | None = None, **kw):
        super().__init__(*args, **kw)
        self.weights, self.die_at = weights, die_at

    def identity(self):
        return {"weights": self.weights}

    def chat(self, messages, **kw):
        if self.die_at is not None and len(self.asked) + 1 >= self.die_at:
            raise KeyboardInterrupt("run killed (double)")
        return super().chat(messages, **kw)


@pytest.fixture(autouse=True)
def calls_allowed_again():
    """A KeyboardInterrupt through the episode pool aborts model calls process-wide, as in a killed run;
    the next test's calls must go through."""
    from hasp.llm.cancel import reset_abort

    yield
    reset_abort()


@pytest.fixture()
def cell(tmp_path):
    params = _params()
    params = params.model_copy(update={"llm": params.llm.model_copy(update={"max_concurrency": 1})})
    sets = _sets(params, limit=6, specs=(f"hotpotqa:{HOTPOT}",))
    gold = _gold(sets)
    correct = {q.question for q in sets[0].questions[::2]}
    return params, sets, gold, correct, tmp_path / "out"


def _run(params, sets, policy, out: Path):
    return run_eval(params, sets, ["react"], policy=policy, library_root=SKILLS, out_dir=out, progress=False)


def test_a_killed_cell_resumes_with_the_episodes_it_had_finished(cell):
    params, sets, gold, correct, out = cell
    ds = sets[0]
    with pytest.raises(KeyboardInterrupt):
        _run(params, sets, IdentifiedPolicyDouble(gold, correct, die_at=4), out)
    journal = out / ds.name / f"react{SUFFIX}"
    lines = journal.read_text().splitlines()
    assert len(lines) == 1 + 3  # the key, then the three episodes that finished before the kill
    assert not (out / ds.name / "react.jsonl").exists()

    again = IdentifiedPolicyDouble(gold, correct)
    res = _run(params, sets, again, out)
    asked_first = {json.loads(x)["record"]["traj"]["question"] for x in lines[1:]}
    assert len(again.asked) == 3 and not asked_first & set(again.asked)  # only what the journal lacked ran
    summary = res.metrics()[ds.name]["react"]
    assert summary["resumed_episodes"] == 3 and summary["n"] == 6
    assert not journal.exists()  # the whole evaluation is written; the journal is gone

    fresh = _run(params, sets, IdentifiedPolicyDouble(gold, correct), out.parent / "fresh")
    want = fresh.metrics()[ds.name]["react"]
    assert summary["em"] == want["em"] == pytest.approx(3 / 6)
    rows = [json.loads(x) for x in (out / ds.name / "react.jsonl").read_text().splitlines()]
    fresh_rows = [json.loads(x) for x in (out.parent / "fresh" / ds.name / "react.jsonl").read_text().splitlines()]
    assert [r["qid"] for r in rows] == [q.id for q in ds.questions]  # input order, not journal order
    assert [(r["prediction"], r["em"]) for r in rows] == [(r["prediction"], r["em"]) for r in fresh_rows]


def test_a_journal_of_another_model_is_set_aside(cell, caplog):
    params, sets, gold, correct, out = cell
    with pytest.raises(KeyboardInterrupt):
        _run(params, sets, IdentifiedPolicyDouble(gold, correct, die_at=4), out)
    other = IdentifiedPolicyDouble(gold, correct, weights="w2")
    res = _run(params, sets, other, out)
    assert len(other.asked) == 6 and "resumed_episodes" not in res.metrics()[sets[0].name]["react"]
    assert "a journal of another cell" in caplog.text


def test_a_torn_last_line_ends_the_read_and_the_rest_runs_again(cell, caplog):
    params, sets, gold, correct, out = cell
    with pytest.raises(KeyboardInterrupt):
        _run(params, sets, IdentifiedPolicyDouble(gold, correct, die_at=4), out)
    journal = out / sets[0].name / f"react{SUFFIX}"
    text = journal.read_text()
    journal.write_text(text[: len(text) - 40])  # the process died while writing the third episode
    again = IdentifiedPolicyDouble(gold, correct)
    res = _run(params, sets, again, out)
    assert len(again.asked) == 4 and res.metrics()[sets[0].name]["react"]["resumed_episodes"] == 2
    assert "unreadable journal line" in caplog.text


def test_a_policy_that_cannot_say_what_it_is_gets_no_journal(cell):
    params, sets, gold, correct, out = cell
    _run(params, sets, AnsweringPolicyDouble(gold, correct), out)
    assert not list(out.rglob(f"*{SUFFIX}"))


def test_failed_episodes_are_not_journaled(cell):
    params, sets, gold, correct, out = cell
    fail = {sets[0].questions[1].question}
    with pytest.raises(KeyboardInterrupt):
        _run(params, sets, IdentifiedPolicyDouble(gold, correct, fail=fail, die_at=4), out)
    lines = (out / sets[0].name / f"react{SUFFIX}").read_text().splitlines()
    assert [json.loads(x)["record"]["traj"]["question"] for x in lines[1:]] == [q.question for q in sets[0].questions[:3]
                                                                     if q.question not in fail]


def test_the_real_policy_identity_names_the_weights_not_the_port(tmp_path):
    """``LazyPolicy`` says what it would serve without starting a server: another port is the same
    policy, other weights in the same folder are not."""
    from hasp.config import LLMParams
    from hasp.llm.endpoints import LazyPolicy

    folder = tmp_path / "merged"
    folder.mkdir()
    (folder / "adapter.gguf").write_bytes(b"one")
    llm = LLMParams()
    a = LazyPolicy(llm, model_dir=folder).identity()
    assert LazyPolicy(llm.model_copy(update={"port": llm.port + 7}), model_dir=folder).identity() == a
    (folder / "adapter.gguf").write_bytes(b"two!")
    assert LazyPolicy(llm, model_dir=folder).identity() != a
    assert LazyPolicy(llm, model_dir=folder, temperature=0.7).identity()["temperature"] == 0.7
    assert not LazyPolicy(llm, model_dir=folder).started


def test_a_teacher_endpoint_is_known_by_its_name():
    """A teacher is a remote endpoint: its identity is the model's name there (as a remote policy's is),
    so an evaluation with a teacher journals its cells; another model or URL is another teacher."""
    from hasp.config import EndpointParams, LLMParams
    from hasp.llm.endpoints import teacher_client

    llm = LLMParams()
    a = teacher_client(EndpointParams(base_url="http://127.0.0.1:9/v1", model="judge-a"), llm)
    b = teacher_client(EndpointParams(base_url="http://127.0.0.1:9/v1", model="judge-b"), llm)
    assert a.identity()["weights"] == "judge-a at http://127.0.0.1:9/v1"
    assert a.identity() != b.identity()
    assert teacher_client(EndpointParams(), llm) is None


def test_a_finished_cell_of_an_interrupted_evaluation_is_not_run_again(cell):
    """react finishes, pf is killed midway: the next run reads react whole from its journal."""
    params, sets, gold, correct, out = cell
    ds = sets[0]
    n = len(ds.questions)
    dying = IdentifiedPolicyDouble(gold, correct, die_at=n + 3)  # react answers at once: n calls, then pf's
    with pytest.raises(KeyboardInterrupt):
        run_eval(params, sets, ["react", "pf"], policy=dying, library_root=SKILLS, out_dir=out, progress=False)
    assert (out / ds.name / "react.jsonl").is_file() and (out / ds.name / f"react{SUFFIX}").is_file()
    again = IdentifiedPolicyDouble(gold, correct)
    res = run_eval(params, sets, ["react", "pf"], policy=again, library_root=SKILLS, out_dir=out, progress=False)
    m = res.metrics()[ds.name]
    assert m["react"]["resumed_episodes"] == n and m["react"]["n"] == n
    assert not list(out.rglob(f"*{SUFFIX}"))


def test_a_journal_written_by_other_evaluation_code_is_set_aside(cell, monkeypatch, caplog):
    import hasp.eval.runner as runner

    params, sets, gold, correct, out = cell
    with pytest.raises(KeyboardInterrupt):
        _run(params, sets, IdentifiedPolicyDouble(gold, correct, die_at=4), out)
    monkeypatch.setattr(runner, "evaluation_code_key", lambda: "edited code")
    again = IdentifiedPolicyDouble(gold, correct)
    res = _run(params, sets, again, out)
    assert len(again.asked) == 6 and "resumed_episodes" not in res.metrics()[sets[0].name]["react"]
    assert "a journal of another cell" in caplog.text
