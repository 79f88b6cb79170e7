"""The ``sandbox:`` params reach every path that runs generated PF code, and a run in the
weaker mode is recorded where a user looks: ``validation.json``, MLflow, ``hasp skills validate``.

A missing isolation layer is made the honest way: the host is told seccomp cannot be built
here (``seccomp.supported`` -> False), so the child reports the filter as missing, exactly as
on a machine without it. MLflow is a real sqlite store in tmp.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hasp.atomic import write_json
from hasp.config import Params, SandboxParams
from hasp.pf.dispatcher import Dispatcher
from hasp.pf.library import load_library
from hasp.pf.sandboxed import SandboxedPF
from hasp.pf.skill_md import load_skill, write_skill_folder
from hasp.sandbox import seccomp
from hasp.sandbox.worker import SandboxRefused

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "hasp" / "skills" / "search"
DATA = Path(os.environ.get("HASP_SHARED_DATA", ROOT.parent / "shared" / "data"))

INJECT = '''
from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf


@register_pf("iterative_refinement")
class Loud(ProgramFunction):
    def should_activate(self, ctx, action_type, arg):
        return action_type == "SEARCH"

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention(InterventionType.INJECT_CONTEXT, context_text="x" * 500, reason="loud")
'''

BURN = '''
from hasp.pf import ProgramFunction, register_pf


@register_pf("iterative_refinement")
class Burn(ProgramFunction):
    def should_activate(self, ctx, action_type, arg):
        n = 0
        for i in range(3000000):
            n += i
        return False
'''


def _library(tmp_path: Path, code: str) -> Path:
    """The seed premature_final plus a generated iterative_refinement v2 running ``code``."""
    root = tmp_path / "search"
    shutil.copytree(SEED / "premature-final", root / "premature-final")
    gen = root / "generated" / "iterative-refinement-v2"
    spec = load_skill(SEED / "iterative-refinement")
    write_skill_folder(gen, spec.model_copy(update={"version": 2, "pf": None}))
    (gen / "pf.py").write_text(textwrap.dedent(code))
    return root


@pytest.fixture()
def no_seccomp(monkeypatch):
    """This host cannot build the seccomp filter: a required layer is missing."""
    monkeypatch.setattr(seccomp, "supported", lambda: False)


def _generated(lib):
    return next(s.pf for s in lib.skills if s.generated)


# ----------------------------------------------------------------------------- the PF loader / dispatcher
def test_allow_weaker_from_params_reaches_the_library_loader(tmp_path, no_seccomp):
    root = _library(tmp_path, INJECT)
    strict = load_library(root, "search")
    try:
        with pytest.raises(SandboxRefused, match="seccomp filter"):
            _generated(strict).should_activate({}, "SEARCH", "q")
    finally:
        strict.close()
    weak = load_library(root, "search", sandbox=SandboxParams(allow_weaker=True))
    try:
        assert _generated(weak).should_activate({}, "SEARCH", "q") is True
        assert any("seccomp filter" in w for w in weak.sandbox_weaker())
    finally:
        weak.close()


def test_text_cap_from_params_holds_in_a_dispatcher_built_without_it(tmp_path):
    lib = load_library(_library(tmp_path, INJECT), "search", sandbox=SandboxParams(max_context_chars=100))
    try:
        res = Dispatcher([_generated(lib)]).dispatch({}, "SEARCH", "q")
    finally:
        lib.close()
    assert res.contexts == ["x" * 100]
    assert any("injected text cut to 100 characters" in e for e in res.errors)


def test_cpu_budget_from_params_disables_the_pf(tmp_path):
    lib = load_library(_library(tmp_path, BURN), "search", sandbox=SandboxParams(pf_cpu_budget_s=0.05))
    try:
        pf = _generated(lib)
        d = Dispatcher([pf])
        d.dispatch({}, "SEARCH", "q")
        assert pf.skill_id in d.disabled and "budget 0.05 s" in d.disabled[pf.skill_id]
    finally:
        lib.close()


# ----------------------------------------------------------------------------- Phase D
def test_phase_d_reads_caps_and_records_the_weaker_mode(tmp_path, no_seccomp):
    from hasp.evolve.epoch import validate

    cand = {"skill_id": "iterative_refinement", "code": INJECT, "cluster_category": "c", "skill_md": "",
            "raw_reply": ""}
    write_json([cand], tmp_path / "candidates.json")
    s = validate(tmp_path / "candidates.json", tmp_path / "strict.json")
    rep = json.loads((tmp_path / "strict.json").read_text())[0]
    assert not rep["passed"] and any("hasp sandbox refused" in e for e in rep["errors"]) and s["sandbox_weaker"] == []
    s = validate(tmp_path / "candidates.json", tmp_path / "validation.json",
                 sandbox=SandboxParams(allow_weaker=True, max_context_chars=100))
    rep = json.loads((tmp_path / "validation.json").read_text())[0]
    assert any("seccomp filter" in w for w in rep["weaker"]) and s["sandbox_weaker"] == rep["weaker"]
    assert rep["mock_exec"] == 1.0 and rep["return_types"] < 1.0  # 500 characters > the cap of 100
    assert any("context_text longer than 100 characters" in e for e in rep["errors"])


def test_lite_gate_runs_the_candidate_under_the_params(no_seccomp):
    from hasp.evolve.cluster import Cluster
    from hasp.evolve.gate import GATES, Evidence
    from hasp.evolve.propose import Candidate

    cand = Candidate.from_dict({"skill_id": "iterative_refinement", "code": INJECT, "cluster_category": "c", "skill_md": "",
            "raw_reply": ""})
    cl = Cluster(category="c", patterns=[], support=1, novelty=0.0, is_new_category=False, representative=None)
    exec_gate = GATES["sandbox_exec"]
    assert any("refused" in r for r in exec_gate(Evidence(candidate=cand, cluster=cl)))
    assert exec_gate(Evidence(candidate=cand, cluster=cl, sandbox=SandboxParams(allow_weaker=True))) == []


# ----------------------------------------------------------------------------- hasp skills validate
def test_skills_validate_reads_params_and_prints_the_weaker_mode(tmp_path, no_seccomp):
    from hasp.cli import app

    folder = _library(tmp_path, INJECT) / "generated" / "iterative-refinement-v2"
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"sandbox": {"allow_weaker": True}}))
    runner = CliRunner()
    strict = runner.invoke(app, ["skills", "validate", str(folder), "--params", str(tmp_path / "none.yaml")])
    assert strict.exit_code == 2 and "none.yaml" in strict.output  # an explicit missing file is one error line
    weak = runner.invoke(app, ["skills", "validate", str(folder), "--params", str(params), "--json"])
    out = json.loads(weak.stdout)["folders"][0]
    assert any("seccomp filter" in w for w in out["weaker"])
    table = runner.invoke(app, ["skills", "validate", str(folder), "--params", str(params)])
    assert "ran in the weaker sandbox mode" in table.stdout and "seccomp filter" in table.stdout


def test_skills_validate_refuses_without_the_opt_in(tmp_path, no_seccomp, monkeypatch):
    from hasp.cli import app

    folder = _library(tmp_path, INJECT) / "generated" / "iterative-refinement-v2"
    monkeypatch.chdir(tmp_path)  # no params.yaml here: the schema defaults (allow_weaker off)
    r = CliRunner().invoke(app, ["skills", "validate", str(folder), "--json"])
    out = json.loads(r.stdout)["folders"][0]
    assert r.exit_code == 1 and out["weaker"] == [] and any("hasp sandbox refused" in e for e in out["errors"])


# ----------------------------------------------------------------------------- MLflow
@pytest.fixture()
def mlflow_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    return tmp_path


def _tags(run_id: str) -> dict[str, str]:
    import mlflow

    return mlflow.tracking.MlflowClient().get_run(run_id).data.tags


def test_eval_run_records_the_weaker_mode_in_mlflow(mlflow_tmp, no_seccomp):
    from doubles import AnsweringPolicyDouble

    from hasp.eval.datasets import load_eval_dataset, parse_dataset_spec
    from hasp.eval.runner import run_eval
    from hasp.eval.tracking import log_eval_runs

    sample = DATA / "hotpotqa" / "hotpot_dev_distractor_sample_b.jsonl"
    if not sample.exists():
        pytest.skip(f"benchmark sample {sample} not present")
    p = Params()
    p = p.model_copy(update={"agent": p.agent.model_copy(update={"max_steps": 3}),
                             "sandbox": SandboxParams(allow_weaker=True)})
    ds = load_eval_dataset(parse_dataset_spec(f"hotpotqa:{sample}"), p, limit=1)
    policy = AnsweringPolicyDouble({q.question: q.answers[0] for q in ds.questions}, set())
    lib = _library(mlflow_tmp, INJECT)
    res = run_eval(p, [ds], ["pf"], policy=policy, library_root=lib, out_dir=mlflow_tmp / "out", progress=False)
    runs = log_eval_runs(res, experiment="sbx", run_name="weak", params={"sandbox.allow_weaker": True},
                         traces=False)
    for rid in (runs["parent"], *runs["children"].values()):
        assert "seccomp filter" in _tags(rid)["hasp.sandbox.weaker"]


def test_epoch_run_records_the_weaker_mode_and_none_otherwise(mlflow_tmp):
    from hasp.track.epoch_report import log_epoch

    ep = mlflow_tmp / "out" / "epoch_0"
    ep.mkdir(parents=True)
    write_json([{"skill_id": "a", "weaker": []}], ep / "validation.json")
    clean = log_epoch(mlflow_tmp / "out", Params(), epoch=0)
    assert _tags(clean)["hasp.sandbox.weaker"] == "none"
    write_json({"n": 1, "sandbox_weaker": ["seccomp filter (no filter for this machine)"]}, ep / "summary_rollout.json")
    write_json([{"skill_id": "a", "weaker": ["network namespace"]}], ep / "validation.json")
    weak = log_epoch(mlflow_tmp / "out", Params(), epoch=0)
    assert _tags(weak)["hasp.sandbox.weaker"] == "network namespace; seccomp filter (no filter for this machine)"
    assert _tags(clean)["hasp.domain"] == "search"  # the epoch's own task, never a fixed name
    math = log_epoch(mlflow_tmp / "out", Params.model_validate({"evolve": {"domain": "math"}}), epoch=0)
    assert _tags(math)["hasp.domain"] == "math"
    assert _tags(log_epoch(mlflow_tmp / "out", Params(), epoch=0, domain="unit_convert"))["hasp.domain"] == "unit_convert"


# ----------------------------------------------------------------------------- hasp eval --domain code
CODE_REPLY = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"


class CodePolicyDouble:
    """The model server's place: one Python block for every code prompt."""

    def chat(self, messages, **kw):
        from doubles import ReplyDouble

        return ReplyDouble(CODE_REPLY)


@pytest.fixture()
def code_eval(mlflow_tmp, monkeypatch):
    """``hasp eval --domain code`` on one HumanEval problem with the policy double; returns a
    runner ``(allow_weaker) -> (exit code, out dir)``."""
    import contextlib

    import hasp.llm.endpoints as endpoints
    from hasp.cli import main

    @contextlib.contextmanager
    def policy_double(*a, **kw):
        yield CodePolicyDouble()

    monkeypatch.setattr(endpoints, "policy_client", policy_double)
    base = yaml.safe_load((ROOT / "params.yaml").read_text())

    def run(allow_weaker: bool) -> tuple[int, Path]:
        name = f"weak{int(allow_weaker)}"
        (mlflow_tmp / f"{name}.yaml").write_text(yaml.safe_dump(
            {**base, "sandbox": {**base.get("sandbox", {}), "allow_weaker": allow_weaker}}))
        rc = main(["eval", "--domain", "code", "--dataset", "humaneval", "--library", str(ROOT / "hasp" / "skills" / "code"),
                   "--variants", "react", "--limit", "1",
                   "--params", f"{name}.yaml", "--out", name, "--run-name", name, "--no-progress"])
        return rc, mlflow_tmp / name

    return run


def test_code_eval_refuses_a_missing_layer_in_one_line(code_eval, no_seccomp, capsys):
    rc, _ = code_eval(False)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1
    assert "hasp sandbox refused" in err[0] and "seccomp filter" in err[0] and "allow_weaker" in err[0]


def test_code_eval_records_the_weaker_mode_it_graded_in(code_eval, no_seccomp):
    import mlflow

    rc, out = code_eval(True)
    assert rc == 0
    traj = json.loads((out / "humaneval" / "react.jsonl").read_text().splitlines()[0])
    feedback = traj["steps"][-1]["audit"]["feedback"]
    assert feedback["status"] == "failed"  # the program ran (and is wrong), it was not refused
    assert any("seccomp filter" in w for w in feedback["sandbox_weaker"])
    cell = json.loads((out / "metrics.json").read_text())["humaneval"]["react"]
    assert any("seccomp filter" in w for w in cell["sandbox_weaker"])
    runs = mlflow.search_runs(search_all_experiments=True, filter_string="tags.`hasp.kind` = 'eval'",
                              output_format="list")
    assert runs and all("seccomp filter" in r.data.tags["hasp.sandbox.weaker"] for r in runs)


def test_code_eval_records_no_weaker_mode_when_every_layer_holds(code_eval):
    rc, out = code_eval(False)
    assert rc == 0
    assert json.loads((out / "metrics.json").read_text())["humaneval"]["react"]["sandbox_weaker"] == []
