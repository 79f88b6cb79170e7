"""`hasp eval --domain search` and `hasp eval --domain code` are one path: the same command, the
same runner and the same MLflow run shape (parent run, one nested run per dataset × variant with
the same param and metric names, one trace per episode, the same parent artifacts).

The policy is a test double put in place of the model server; MLflow is a real sqlite store in tmp.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE_REPLY = '''```python
def has_close_elements(numbers, threshold):
    return False
```'''


@dataclass
class Reply:
    text: str
    prompt_tokens: int = 7
    completion_tokens: int = 5


class DomainPolicyDouble:
    """Test double: a Python block for code prompts, an immediate FINAL for search prompts."""

    def __init__(self):
        self.calls = 0

    def chat(self, messages, **kw):
        self.calls += 1
        if any("python" in m["content"].lower() for m in messages):
            return Reply(CODE_REPLY)
        return Reply("Thought: I will answer now.\nAction: FINAL[Nowhere Special]")


@pytest.fixture()
def project(tmp_path, monkeypatch):
    """A project folder with params.yaml and a real MLflow store; the model server replaced by the double."""
    import hasp.eval.runner as runner_mod
    import hasp.llm.endpoints as endpoints

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    policy = DomainPolicyDouble()

    @contextlib.contextmanager
    def policy_double(*a, **kw):
        yield policy

    monkeypatch.setattr(endpoints, "policy_client", policy_double)
    calls: list[str] = []
    real = runner_mod._run_cell

    def spy(params, ds, arm, **kw):
        calls.append(f"{ds.domain}:{ds.name}/{arm.label}")
        return real(params, ds, arm, **kw)

    monkeypatch.setattr(runner_mod, "_run_cell", spy)
    return tmp_path, policy, calls


def _shape(client, parent_id: str) -> dict:
    parent = client.get_run(parent_id)
    exp = parent.info.experiment_id
    children = client.search_runs([exp], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'")
    kids = {c.info.run_name: c for c in children}
    return {"parent_tags": {k for k in parent.data.tags if k.startswith("hasp.")},
            "parent_params": set(parent.data.params),
            "parent_artifacts": {a.path for a in client.list_artifacts(parent_id)},
            "children": kids,
            "child_params": {frozenset(c.data.params) for c in children},
            "child_metric_core": {frozenset(k for k in c.data.metrics if k in CORE) for c in children}}


CORE = {"n", "em", "f1", "accuracy", "answered_rate", "mean_steps", "pf_fires_total", "pf_action_share",
        "pf_context_share", "prompt_tokens", "completion_tokens", "teacher_tokens", "episode_errors", "wall_s"}


def test_search_and_code_share_the_command_runner_and_run_shape(project, capsys):
    import mlflow

    from hasp.cli import main
    from hasp.fingerprint import content_hash
    from hasp.llm.endpoints import served_model
    from hasp.provenance import provenance

    tmp, policy, calls = project
    common = ["--params", "params.yaml", "--variants", "react,pf", "--limit", "2", "--no-progress"]
    assert main(["eval", "--domain", "search", "--dataset", "generated", "--data", "data", "--library",
                 str(ROOT / "hasp" / "skills" / "search"), "--out", "out_search", "--run-name", "search", *common]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("provenance: "))
    written = json.loads((tmp / "out_search" / "metrics.json").read_text())["provenance"]
    assert written["data_hash"] == content_hash(tmp / "data")
    assert written["library_hash"] == content_hash(ROOT / "hasp" / "skills" / "search")
    from hasp.config import load_params

    expected = provenance(model=served_model(load_params(tmp / "params.yaml").llm))
    assert (written["git_commit"], written["model_sha256"]) == (expected.git_commit, expected.model_sha256)
    for part in (written["git_commit"][:12], written["model_sha256"][:12], written["data_hash"][:12],
                 written["library_hash"][:12], written["params_hash"][:12]):
        assert part in header
    assert main(["eval", "--domain", "code", "--dataset", "humaneval", "--library", str(ROOT / "hasp" / "skills" / "code"),
                 "--out", "out_code", "--run-name", "code", *common]) == 0
    assert calls == ["search:generated/react", "search:generated/pf", "code:humaneval/react", "code:humaneval/pf"]
    assert policy.calls >= 8

    from hasp.config import load_params

    client = mlflow.tracking.MlflowClient()
    exp = client.get_experiment_by_name(load_params(tmp / "params.yaml").tracking.experiment)
    assert exp is not None, [e.name for e in client.search_experiments()]
    parents = {r.info.run_name: r.info.run_id for r in client.search_runs([exp.experiment_id])
               if "mlflow.parentRunId" not in r.data.tags}
    search, code = _shape(client, parents["search"]), _shape(client, parents["code"])
    assert set(search["children"]) == {"generated/react", "generated/pf"}
    assert set(code["children"]) == {"humaneval/react", "humaneval/pf"}
    for key in ("parent_tags", "parent_params", "parent_artifacts", "child_params", "child_metric_core"):
        assert search[key] == code[key], key
    assert search["child_metric_core"] == {frozenset(CORE)}
    assert client.get_run(parents["search"]).data.tags["hasp.provenance.data_hash"] == written["data_hash"]
    for shape, domain in ((search, "search"), (code, "code")):
        for name, child in shape["children"].items():
            assert child.data.tags["hasp.domain"] == domain and child.data.tags["hasp.kind"] == "eval"
            assert child.data.tags["hasp.provenance.git_commit"] == written["git_commit"]
            assert len(mlflow.search_traces(run_id=child.info.run_id, return_type="list")) == 2
    assert (tmp / "out_code" / "humaneval" / "pf.jsonl").exists()
    assert (tmp / "out_search" / "generated" / "pf.jsonl").exists()


def test_epoch_evaluation_uses_the_runner_and_labels_what_ran(tmp_path):
    """The epoch's evaluation stage is the same runner on the epoch's library and models; a
    configured teacher shows in the labels instead of hiding under ``pf``."""
    from hasp.config import Params
    from hasp.domains.search.prepare import prepare_data
    from hasp.evolve import epoch as ep

    teacher, trained = object(), DomainPolicyDouble()
    assert [(a.label, a.variant.name, a.policy) for a in ep.epoch_arms(teacher, trained, Params())] == [
        ("react", "react", None), ("pf_teacher", "pf_teacher", None), ("trained_pf_teacher", "pf_teacher", trained)]
    assert [a.label for a in ep.epoch_arms(None, None, Params())] == ["react", "pf"]
    reviews_only = Params.model_validate({"teacher": {"embedded": "gemma3-270m", "assist_agent": False}})
    assert [a.label for a in ep.epoch_arms(teacher, None, reviews_only)] == ["react", "pf"]  # the teacher only reviews

    p = Params()
    p = p.model_copy(update={"data": p.data.model_copy(update={"n_questions": 10})})
    prepare_data(p, tmp_path / "data")
    policy = DomainPolicyDouble()
    res = ep.evaluate(p, tmp_path / "data", ROOT / "hasp" / "skills" / "search", tmp_path / "eval", policy=policy,
                      trained_policy=trained)
    assert set(res) == {"react", "pf", "trained_pf"} and res["trained_pf"]["variant"] == "pf"
    assert policy.calls > 0 and trained.calls > 0 and res["react"]["pf_fires_total"] == 0
    written = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert set(written) == {"generated"} and set(written["generated"]) == set(res)
    assert (tmp_path / "eval" / "generated" / "trained_pf.jsonl").exists()
