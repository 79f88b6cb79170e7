"""The epoch's budget (``evolve.budget``): what every phase spent, and the one line that stops an epoch.

The flow tests run the real multi-epoch Prefect flow (the session's test API), real MLflow (temp sqlite),
real BM25 and the real sandbox; only the models are doubles (``make_clients`` returns them, as in
``test_evolve_flow``). The spend the flow reports is checked against the trajectories it wrote.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml
from doubles import ReplyDouble, ScriptedPolicyDouble, ScriptedTeacherDouble, StudentDouble, flow_with_doubles

from test_evolve_modes import epoch_files  # noqa: F401 - a fixture

from hasp.config import ParamsError, load_params
from hasp.evolve.budget import Guard, Meter, MeteredClient, Spend, metered
from hasp.records import Trajectory

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- params

@pytest.mark.parametrize("key,value", [("max_tokens", 0), ("max_calls", -1), ("max_wall_s", 0), ("max_cost", 0)])
def test_a_budget_of_zero_or_less_is_refused_naming_the_key(key, value):
    with pytest.raises(ParamsError) as e:
        load_params(ROOT / "params.yaml", {f"evolve.budget.{key}": value, "evolve.budget.price_per_1k_prompt": 1.0})
    msg = str(e.value)
    assert f"evolve.budget.{key}: {key} must be > 0, or null for unlimited" in msg and "\n" not in msg


def test_a_cost_limit_needs_a_price_and_prices_price_the_spend():
    with pytest.raises(ParamsError, match="max_cost needs price_per_1k_prompt or price_per_1k_completion"):
        load_params(ROOT / "params.yaml", {"evolve.budget.max_cost": 1.0})
    b = load_params(ROOT / "params.yaml", {"evolve.budget.price_per_1k_prompt": 0.5,
                                           "evolve.budget.price_per_1k_completion": 2.0}).evolve.budget
    assert Spend(2000, 500).cost(b) == pytest.approx(2.0) and Spend(2000, 500).to_dict(b)["cost"] == pytest.approx(2.0)
    assert "cost" not in Spend(2000, 500).to_dict(load_params(ROOT / "params.yaml").evolve.budget)


def test_hasp_params_writes_the_budget_and_anchor_keys(tmp_path):
    from hasp.cli import main

    assert main(["params", "--out", str(tmp_path / "p.yaml"), "--params", str(ROOT / "params.yaml"),
                 "--set", "evolve.budget.max_tokens=20000"]) == 0
    evolve = yaml.safe_load((tmp_path / "p.yaml").read_text())["evolve"]
    assert evolve["anchors"] is None
    assert evolve["budget"] == {"max_tokens": 20000, "max_calls": None, "max_wall_s": None, "max_cost": None,
                                "price_per_1k_prompt": None, "price_per_1k_completion": None}
    assert set(yaml.safe_load((ROOT / "params.yaml").read_text())["evolve"]["budget"]) == set(evolve["budget"])


# --------------------------------------------------------------------------- the meter

class _TextOnlyTeacherDouble:
    """A teacher with ``generate`` only (no token counts)."""

    dialect = "vllm"

    def generate(self, messages, max_tokens=256, temperature=0.0):
        return "ok"


def test_a_metered_client_counts_every_reply_and_is_otherwise_its_client():
    meter = Meter()
    pol = ScriptedPolicyDouble(["a", "b", "c"], prompt_tokens=7, completion_tokens=2)
    m = metered(pol, meter)
    assert metered(m, meter) is m and metered(None, meter) is None
    assert m.chat([{"role": "user", "content": "q"}], temperature=0.0).text == "a"
    assert m.seen is pol.seen and not hasattr(m, "map_chat")  # the client's own attributes, nothing more
    assert not hasattr(m, "generate")
    both = metered(ScriptedTeacherDouble("yes", prompt_tokens=7, completion_tokens=2), meter)
    assert both.generate([{"role": "user", "content": "q"}]) == "yes"  # through chat: its tokens count too
    assert meter.read() == Spend(14, 4, 2)
    teacher = MeteredClient(_TextOnlyTeacherDouble(), meter)
    assert not hasattr(teacher, "chat") and teacher.dialect == "vllm"  # CountingTeacher would call a chat
    assert teacher.generate([{"role": "user", "content": "q"}]) == "ok"
    student = metered(StudentDouble(), meter)
    student.map_chat([[{"role": "user", "content": "Answer in JSON"}]] * 3)
    assert meter.read() == Spend(17, 7, 6)


def test_a_guard_adds_the_earlier_phases_to_what_the_meter_counts_since():
    b = load_params(ROOT / "params.yaml", {"evolve.budget.max_calls": 5}).evolve.budget
    meter = Meter()
    meter.add(100, 10, 3)  # before the guard: not this phase's
    g = Guard(b, Spend(calls=3), meter)
    assert not g.reached()
    meter.add(1, 1, 2)
    assert g.reached() and (g.hit.key, g.hit.limit, g.hit.value) == ("max_calls", 5.0, 5.0)


def test_declared_proposals_stop_between_proposals_when_the_guard_says_so(tmp_path):
    from hasp.evolve.cluster import cluster_patterns
    from hasp.evolve.declarative import propose_declarative
    from hasp.evolve.detectors import _TEMPLATES, FailurePattern

    clusters = []
    for cat in ("no_read_before_final", "repeated_search", "premature_final"):
        a, t, h = _TEMPLATES[cat]
        clusters += cluster_patterns([FailurePattern(cat, a, t, h, qid=f"{cat}{i}") for i in range(3)], [])
    meter = Meter()
    student = metered(StudentDouble(), meter)
    guard = Guard(load_params(ROOT / "params.yaml", {"evolve.budget.max_calls": 1}).evolve.budget, meter=meter)
    cands = propose_declarative(clusters, student, existing_skill_ids=[], replayed={}, max_candidates=3,
                                stop=guard.reached)
    assert len(cands) == 1 and meter.read().calls == 1 and guard.hit.key == "max_calls"


# --------------------------------------------------------------------------- the flow

@pytest.fixture(scope="module")
def flow_env(tmp_path_factory, prefect_harness):
    work = tmp_path_factory.mktemp("budget_flow")
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{work / 'mlflow.db'}")
    doubles = flow_with_doubles(mp, work, ROOT / "hasp" / "skills" / "search")
    yield work, doubles
    mp.undo()


def _run(work: Path, out: str = "outputs", epochs: int = 2, **evolve):
    from hasp.flows.evolve import evolve_flow

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["data"].update(n_questions=8)
    params["agent"].update(max_steps=3)
    params["llm"].update(base_url="http://127.0.0.1:9/v1", model="budget-double-model", max_concurrency=2)
    params["evolve"].update({"max_candidates": 6, "min_cluster_size": 1, "proposal_format": "code", **evolve})
    params["train"].update(enabled=False)
    params["tracking"]["experiment"] = "hasp-budget-test"
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    return evolve_flow(epochs=epochs, params_path=str(work / "params.yaml"), out_root=str(work / out),
                       library=str(work / "skills" / "search"))


def _tokens(path: Path) -> tuple[int, int]:
    trajs = [Trajectory.from_dict(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
    return sum(t.prompt_tokens + t.completion_tokens for t in trajs), sum(len(t.steps) for t in trajs)


@pytest.fixture(scope="module")
def stopped_after_a(flow_env):
    work, doubles = flow_env
    logs = _Records()
    ed = work / "outputs" / "epoch_0"
    ed.mkdir(parents=True, exist_ok=True)
    for name in ("failures.json", "summaries.json", "clusters.json", "candidates.json"):  # an earlier run's
        (ed / name).write_text("[]\n")
    logging.getLogger("hasp.flows.evolve").addHandler(logs)
    try:
        res = _run(work, budget={"max_tokens": 4})
    finally:
        logging.getLogger("hasp.flows.evolve").removeHandler(logs)
    return work, doubles, res, logs.lines


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_token_budget_below_phase_a_stops_before_phase_b_with_one_line(stopped_after_a):
    work, doubles, res, lines = stopped_after_a
    ed = work / "outputs" / "epoch_0"
    tokens, steps = _tokens(ed / "rollout.jsonl")
    assert tokens > 4
    line = f"evolve.budget.max_tokens 4 reached after phase A rollout ({tokens} tokens): stopping"
    assert res["stopped"] == line and len(res["epochs"]) == 1  # the run ends: epoch 1 never starts
    assert [m for m in lines if "evolve.budget" in m] == [f"epoch 0: {line}"]
    assert doubles["student"].calls.n == 0  # Phase B never ran, and an earlier run's B and C files are gone
    assert not [n for n in ("failures.json", "summaries.json", "clusters.json", "candidates.json") if (ed / n).exists()]
    budget = json.loads((ed / "summary_budget.json").read_text())
    assert budget["stopped"] == line and budget["phases_run"] == ["rollout"] and not budget["library_changed"]
    assert budget["limits"] == {"max_tokens": 4}
    spend = json.loads((ed / "summary_rollout.json").read_text())["spend"]
    assert (spend["tokens"], spend["calls"]) == (tokens, steps) == (budget["total"]["tokens"], budget["total"]["calls"])
    assert spend["wall_s"] > 0
    assert not (ed / "library").exists() and not (ed / "carry.json").exists() and not (ed / "admission.json").exists()
    assert res["library"] == str(work / "skills" / "search") and res["eval"] == {}


def test_the_spend_is_logged_to_mlflow(stopped_after_a):
    import mlflow

    work, doubles, res, lines = stopped_after_a
    tokens, steps = _tokens(work / "outputs" / "epoch_0" / "rollout.jsonl")
    client = mlflow.tracking.MlflowClient()
    run = client.get_run(res["run_id"])
    m = run.data.metrics
    assert (m["spend.tokens"], m["spend.calls"], m["spend.rollout.tokens"], m["budget_stopped"]) == (
        tokens, steps, tokens, 1.0)
    assert [h.step for h in client.get_metric_history(res["run_id"], "spend.rollout.calls")] == [0]
    assert run.data.tags["hasp.budget.stopped"] == f"epoch_0: {res['stopped']}"


def test_a_calls_budget_stops_phase_c_mid_way_and_says_why(stopped_after_a):
    work, doubles, first, _ = stopped_after_a
    ed = work / "outputs" / "epoch_0"
    a_calls = json.loads((ed / "summary_rollout.json").read_text())["spend"]["calls"]
    before = doubles["policy"].calls.n
    # Phase A is served from the cache (its spend replayed); B asks no model; C may ask two proposals
    res = _run(work, summarizer=False, budget={"max_calls": a_calls + 2})
    assert doubles["policy"].calls.n == before
    clusters = json.loads((ed / "clusters.json").read_text())
    assert len(clusters) >= 3  # more clusters than the budget lets Phase C answer
    asked = min(6, len(clusters))
    line = (f"evolve.budget.max_calls {a_calls + 2} reached during phase C propose ({a_calls + 2} calls): "
            f"stopping; 2 of 6 proposals written")
    assert res["stopped"] == line
    assert len(json.loads((ed / "candidates.json").read_text())) == 2
    c = json.loads((ed / "summary_propose.json").read_text())
    assert (c["proposed"], c["asked"], c["budget_stop"]) == (2, 6, line)
    reasons = {"budget": asked - 2, **({"no_clusters": 6 - len(clusters)} if len(clusters) < 6 else {})}
    assert c["short"]["reasons"] == reasons and c["short"]["missing"] == 4
    budget = json.loads((ed / "summary_budget.json").read_text())
    assert budget["proposals"]["short"]["reasons"] == reasons and budget["total"]["calls"] == a_calls + 2
    assert budget["phases_run"] == ["rollout", "analyse", "propose"]
    assert not (ed / "validation.json").exists() and not (ed / "admission.json").exists()
    # the cache never stands in for a cut phase: each run's own budget decides how far Phase C goes
    calls = doubles["student"].calls.n
    assert _run(work, summarizer=False, budget={"max_calls": a_calls + 2})["stopped"] == line
    assert doubles["student"].calls.n == calls + 2
    more = _run(work, summarizer=False, budget={"max_calls": a_calls + 3})
    assert more["stopped"].endswith("stopping; 3 of 6 proposals written")
    assert doubles["student"].calls.n == calls + 5 and len(json.loads((ed / "candidates.json").read_text())) == 3


def test_a_reply_double_without_usage_counts_as_a_call():
    meter = Meter()
    meter.add_reply("plain text")
    meter.add_reply(ReplyDouble("x", 3, 4))
    assert meter.read() == Spend(3, 4, 2)


def test_the_flow_checks_pinned_anchors_with_the_val_gate_off(flow_env):
    """The gate phase runs for the anchors alone (``val_gate: false``): the real PF agent answers the pinned
    questions with the library alone and with each candidate; none breaks here, so none is refused for it."""
    work, doubles = flow_env
    rows = [{"id": f"pin{i}", "question": f"Who founded company number {i}?", "answers": ["Nobody Known"],
             "hops": 1, "support": []} for i in range(3)]
    (work / "anchors.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = _run(work, out="outputs_anchors", epochs=1, val_gate=False, anchors=str(work / "anchors.jsonl"),
               max_candidates=2)  # two candidates, each checked on the pins
    assert res["stopped"] is None and len(res["epochs"]) == 1
    ed = work / "outputs_anchors" / "epoch_0"
    g = json.loads((ed / "summary_gate.json").read_text())
    assert g["val_runs"] == 0 and g["anchors"]["n"] == 3 and g["anchors"]["passes_before"] == 3
    checks = json.loads((ed / "anchors.json").read_text())
    assert checks and g["anchors"]["runs"] == len(checks) and g["anchors"]["refused"] == {}
    assert all((c["n"], c["passes_before"], c["passes_after"], c["broken"]) == (3, 3, 3, []) for c in checks)
    assert len((ed / "anchor_runs" / "anchors_baseline.jsonl").read_text().splitlines()) == 3
    adm = json.loads((ed / "admission.json").read_text())
    assert all("anchors" in a["gates"] for a in adm)
    hist = json.loads((ed / "library" / "library_history.json").read_text())
    assert not any(r.startswith("anchors:") for h in hist for r in h.get("reasons") or [])
    budget = json.loads((ed / "summary_budget.json").read_text())
    assert budget["stopped"] is None and budget["total"]["calls"] == sum(
        s["calls"] for s in budget["phases"].values())
    assert budget["phases"]["gate"]["calls"] > 0  # the anchor episodes are the gate's spend


# --------------------------------------------------------------------------- dvc repro's stages

def test_a_dvc_stage_reads_the_earlier_stages_spend_and_refuses_to_start_past_the_budget(tmp_path, capsys):
    """``hasp evolve <phase>`` runs one stage per process: the ledger is the earlier summaries' spend. A
    stage that starts with the budget reached is one error line and exit 1 (``dvc repro`` stops there),
    before any model starts; a stage under the budget runs and records its own spend."""
    from hasp.atomic import write_json
    from hasp.cli import main

    ed = tmp_path / "epoch_0"
    write_json({"n": 4, "spend": {"prompt_tokens": 80, "completion_tokens": 20, "calls": 8, "wall_s": 1.5}},
               ed / "summary_rollout.json")
    write_json({"clusters": 0, "spend": {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0, "wall_s": 0.2}},
               ed / "summary_analyse.json")
    write_json([], ed / "candidates.json")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["evolve"]["budget"] = {"max_tokens": 100}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    lib = str(ROOT / "hasp" / "skills" / "search")
    capsys.readouterr()
    assert main(["evolve", "propose", "--epoch-dir", str(ed), "--library", lib,
                 "--params", str(tmp_path / "params.yaml")]) == 1
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    line = "evolve.budget.max_tokens 100 reached after phase B analyse (100 tokens): stopping"
    assert err == [f"error: {line}"] and not (ed / "summary_propose.json").exists()
    budget = json.loads((ed / "summary_budget.json").read_text())
    assert budget["stopped"] == line and budget["total"]["tokens"] == 100 and list(budget["phases"]) == [
        "rollout", "analyse"]

    params["evolve"]["budget"] = {"max_tokens": 1000}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert main(["evolve", "validate", "--epoch-dir", str(ed), "--params", str(tmp_path / "params.yaml")]) == 0
    spend = json.loads((ed / "summary_validate.json").read_text())["spend"]
    assert (spend["tokens"], spend["calls"]) == (0, 0) and spend["wall_s"] >= 0
    budget = json.loads((ed / "summary_budget.json").read_text())
    assert budget["stopped"] is None and list(budget["phases"]) == ["rollout", "analyse", "validate"]


def test_a_calls_budget_stops_the_val_gate_between_candidates(flow_env):
    """The val gate asks the budget before each candidate: the ones left once it is reached are refused
    with a reason, the summary says how many were gated, and the epoch stops after admission."""
    work, doubles = flow_env
    ed = work / "outputs_gate" / "epoch_0"
    full = _run(work, out="outputs_gate", epochs=1, summarizer=False)
    assert full["stopped"] is None
    gate = json.loads((ed / "gate.json").read_text())
    assert len(gate) >= 2, "the doubles' epoch sends at least two candidates to the val gate"
    phases = json.loads((ed / "summary_budget.json").read_text())["phases"]
    before_gate = sum(phases[n]["calls"] for n in ("rollout", "analyse", "propose", "validate", "review",
                                                    "val_baseline") if n in phases)
    (ed / "gate.json").unlink()  # the gate runs again (its output is missing), now under a budget
    res = _run(work, out="outputs_gate", epochs=1, summarizer=False, budget={"max_calls": before_gate + 1})
    cut = json.loads((ed / "gate.json").read_text())
    not_run = [g for g in cut if (g.get("error") or "").startswith("not run: the epoch's budget")]
    assert len(cut) == len(gate) and len(not_run) == len(gate) - 1  # the first candidate ran, the rest did not
    summary = json.loads((ed / "summary_gate.json").read_text())
    assert summary["budget_stop"].startswith(f"evolve.budget.max_calls {before_gate + 1} reached during the val gate")
    assert summary["budget_stop"].endswith(f"1 of {len(gate)} candidates gated, the others refused")
    assert res["stopped"] == summary["budget_stop"]
    decisions = {d["skill_id"]: d for d in json.loads((ed / "admission.json").read_text())}
    for g in not_run:  # admission ran on the gate's evidence: an ungated candidate is refused, saying why
        assert not decisions[g["skill_id"]]["admitted"]
        assert "not run: the epoch's budget" in decisions[g["skill_id"]]["reason"]


def test_the_dvc_gate_stage_asks_the_budget_before_each_candidate(epoch_files):  # noqa: F811
    """``hasp evolve gate`` (the DVC stage) guards the val gate as the flow does: a budget the val
    baseline already spends leaves every candidate ungated and refused, with the stop line."""
    from doubles import OpenAIEndpointDouble
    from test_evolve_modes import _second_good

    from hasp.cli import main
    from hasp.domains.search.prepare import prepare_data

    tmp_path, lib, ed = epoch_files
    _second_good(ed)
    prepare_data(load_params(ROOT / "params.yaml", {"data.n_questions": 10}), tmp_path / "data")
    with OpenAIEndpointDouble(reply=lambda body: "Thought: done.\nAction: FINAL[Telvik]") as ep:
        params = yaml.safe_load((ROOT / "params.yaml").read_text())
        params["data"].update(n_questions=10)
        params["llm"].update(base_url=ep.base_url, model="gate-double", max_concurrency=1)
        params["evolve"].update(filtering="full", budget={"max_calls": 1})
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
        assert main(["evolve", "gate", "--epoch-dir", str(ed), "--library", str(lib), "--data", str(tmp_path / "data"),
                     "--params", str(tmp_path / "params.yaml")]) in (0, None)
    gate = json.loads((ed / "gate.json").read_text())
    assert len(gate) == 2 and all((g["error"] or "").startswith("not run: the epoch's budget") for g in gate)
    summary = json.loads((ed / "summary_gate.json").read_text())
    assert summary["budget_stop"].startswith("evolve.budget.max_calls 1 reached during the val gate")
    assert summary["budget_stop"].endswith("0 of 2 candidates gated, the others refused")
