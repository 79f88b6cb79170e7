"""One phase graph: dvc.yaml and the Prefect cache keys are both derived from hasp/evolve/phase_graph.py,
so a knob or file a phase reads re-runs it under both orchestrations (real dvc, real git)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hasp.config import load_params
from hasp.evolve.dvc_yaml import dvc_yaml
from hasp.evolve.phase_graph import BY_NAME, DVC_LAYOUT, cache_key, code_paths
from test_dvc_pipeline import DVC, dvc_repo, run, set_param, stale  # noqa: F401 - dvc_repo is a fixture

ROOT = Path(__file__).resolve().parents[1]


def test_committed_dvc_yaml_is_the_generated_one():
    assert (ROOT / "dvc.yaml").read_text(encoding="utf-8") == dvc_yaml(), "run `hasp dvc-yaml` and commit dvc.yaml"
    r = subprocess.run([sys.executable, "-m", "hasp.cli", "dvc-yaml", "--check"], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0 and "matches" in r.stdout


def test_propose_stage_and_cache_key_follow_every_proposal_knob(tmp_path):
    stages = yaml.safe_load(dvc_yaml())["stages"]
    propose = stages["propose"]
    for knob in ("evolve.proposal_format", "evolve.proposals_per_cluster", "evolve.declarative_max_tokens",
                 "evolve.structured_output"):
        assert knob in propose["params"]
    assert {"hasp/evolve/declarative.py", "hasp/evolve/propose.py", "outputs/epoch_0/rollout.jsonl"} <= set(
        propose["deps"])
    lay = {"data": tmp_path, "epoch": tmp_path, "library": ROOT / "hasp" / "skills" / "search"}
    base = load_params(ROOT / "params.yaml")
    other = load_params(ROOT / "params.yaml", {"evolve.proposal_format": "code"})
    assert base.evolve.proposal_format != "code"
    assert cache_key("propose", other, lay) != cache_key("propose", base, lay)
    for unaffected in ("rollout", "analyse", "validate"):
        assert cache_key(unaffected, other, lay) == cache_key(unaffected, base, lay)


def test_an_upstream_file_changes_the_key_of_the_phases_reading_it(tmp_path):
    lay = {"data": tmp_path / "data", "epoch": tmp_path, "library": ROOT / "hasp" / "skills" / "search"}
    p = load_params(ROOT / "params.yaml")
    before = {n: cache_key(n, p, lay) for n in ("analyse", "propose", "validate", "admit")}
    (tmp_path / "clusters.json").write_text("[]")
    after = {n: cache_key(n, p, lay) for n in before}
    assert after["analyse"] == before["analyse"]  # analyse writes clusters.json, it does not read it
    assert all(after[n] != before[n] for n in ("propose", "validate", "admit"))


def test_every_stage_reads_its_code_and_the_files_upstream_stages_write():
    stages = yaml.safe_load(dvc_yaml())["stages"]
    written = {o for s in stages.values() for o in s.get("outs", []) + s.get("metrics", [])}
    for name, s in stages.items():
        ph = BY_NAME[name]
        assert s["deps"][len(ph.inputs):] == code_paths(ph)
        for dep in s["deps"][:len(ph.inputs)]:
            assert dep in written or dep == DVC_LAYOUT["library"], (name, dep)
        assert s["cmd"].startswith("hasp "), name  # no logic in dvc.yaml


def test_dvc_status_shows_propose_changed_when_proposal_format_changes(dvc_repo):
    """Record the propose and analyse stages as done (``dvc commit`` on placeholder outputs, no model),
    then change evolve.proposal_format: DVC reports propose changed and analyse unchanged."""
    ep = dvc_repo / "outputs" / "epoch_0"
    ep.mkdir(parents=True)
    for name in ("rollout.jsonl", "failures.json", "summaries.json", "clusters.json", "summary_analyse.json",
                 "candidates.json", "summary_propose.json"):
        (ep / name).write_text("[]\n")
    run(DVC + ["commit", "-f", "analyse", "propose"], dvc_repo)
    assert stale(dvc_repo, "analyse", "propose") == set()
    set_param(dvc_repo, "evolve", "proposal_format", "code")
    assert stale(dvc_repo, "analyse", "propose") == {"propose"}
    assert "evolve.proposal_format" in run(DVC + ["status", "propose"], dvc_repo)


def test_the_episode_phases_depend_on_the_agent_loop_and_an_unknown_module_is_an_error():
    """Editing the agent loop must make Phase A, the val gate and evaluation stale, and nothing that
    does not run an episode; a module list naming a module that no longer exists fails loudly."""
    from hasp.evolve.phase_graph import BY_NAME, code_paths
    from hasp.fingerprint import module_closure

    loop = {"hasp/agent/loop.py", "hasp/agent/harness.py", "hasp/agent/parser.py", "hasp/agent/react.py",
            "hasp/episode/spec.py", "hasp/episode/domains.py"}
    for name in ("rollout", "val_rollout", "gate", "evaluate"):
        assert loop <= set(code_paths(BY_NAME[name])), name
    assert "hasp/train/run.py" in code_paths(BY_NAME["train"])
    assert "hasp/agent/loop.py" not in code_paths(BY_NAME["prepare"])
    with pytest.raises(ValueError, match="unknown module.*hasp.domains.search.rollout_spec"):
        module_closure(("hasp.domains.search.rollout_spec",))


_KEYS = """
import json, sys
import hasp
from hasp.config import load_params
from hasp.evolve.phase_graph import BY_NAME, DVC_LAYOUT, cache_key
assert hasp.__file__.startswith(sys.argv[1]), hasp.__file__  # the copy's code, not the checkout's
p = load_params("params.yaml")
print(json.dumps({name: cache_key(name, p, DVC_LAYOUT) for name in BY_NAME}))
"""


def _prefect_keys(repo: Path) -> dict[str, str]:
    """Every phase's Prefect cache key as the code in ``repo`` computes it (a fresh interpreter on the copy)."""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    r = subprocess.run([sys.executable, "-c", _KEYS, str(repo)], cwd=repo, env=env, capture_output=True, text=True,
                       check=True)
    return json.loads(r.stdout)


def _placeholder_outputs(repo: Path) -> None:
    """An empty file (or folder) for every output of every stage, so ``dvc commit`` records the stages as done
    without running a model."""
    stages = yaml.safe_load((repo / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    for s in stages.values():
        for entry in s.get("outs", []) + s.get("metrics", []) + s.get("plots", []):
            out = repo / (entry if isinstance(entry, str) else next(iter(entry)))
            if out.suffix:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text("{}\n")
            else:
                out.mkdir(parents=True, exist_ok=True)
                (out / "placeholder.txt").write_text("x\n")


def test_one_edited_line_of_the_agent_loop_makes_the_episode_phases_stale_in_dvc_and_prefect(dvc_repo):
    """Edit one line of the agent loop in a copy of the code: ``dvc status`` and the Prefect cache keys both
    report Phase A, the val gate and evaluation changed (and the experiment stage, which runs episodes too),
    and nothing that runs no episode."""
    _placeholder_outputs(dvc_repo)
    run(DVC + ["commit", "-f", "-q"], dvc_repo)
    assert stale(dvc_repo) == set()
    before = _prefect_keys(dvc_repo)
    loop = dvc_repo / "hasp" / "agent" / "loop.py"
    lines = loop.read_text(encoding="utf-8").splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("log = "))
    lines[at] = lines[at].rstrip("\n") + "  # edited\n"
    loop.write_text("".join(lines), encoding="utf-8")
    episode_stages = {"rollout", "gate", "evaluate", "experiment"}
    assert stale(dvc_repo) == episode_stages
    after = _prefect_keys(dvc_repo)
    changed = {name for name in before if before[name] != after[name]}
    assert changed == episode_stages | {"val_rollout"}
