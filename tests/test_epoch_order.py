"""The epoch's step order is declared once (``hasp.evolve.phase_graph.EPOCH_STEPS``): the Prefect flow's
``run_epoch``, its progress count and the budget ledger the ``hasp evolve`` stages rebuild all read it, and
it agrees with what the graph says each phase reads."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

from hasp.config import load_params
from hasp.evolve.budget import EPOCH_ORDER, PHASE_LABELS
from hasp.evolve.gate import epoch_phases
from hasp.evolve.phase_graph import BY_NAME, EPOCH_STEPS, PHASES, STEP, epoch_order
from hasp.flows.evolve import epoch_phase_count

ROOT = Path(__file__).resolve().parents[1]
OPTIONAL = ("validate", "review", "gate")


def _restated(run_phases: set[str]) -> list[str]:
    """The order as run_epoch spelled it before the graph declared it (the behaviour to keep)."""
    return ["rollout", "analyse", "propose", *[n for n in ("validate", "review") if n in run_phases],
            "val_baseline", *(["gate"] if "gate" in run_phases else []), "admit", "val_after", "frontier",
            "build_data"]


def test_order_is_the_one_run_epoch_ran_for_every_set_of_optional_phases() -> None:
    for k in range(len(OPTIONAL) + 1):
        for run in combinations(OPTIONAL, k):
            assert list(epoch_order(set(run))) == _restated(set(run)), run


def test_progress_count_and_budget_order_follow_the_declared_steps() -> None:
    base = load_params(ROOT / "params.yaml")
    lite = load_params(ROOT / "params.yaml", {"evolve.mode": "lite"})
    for p in (base, lite):
        run = epoch_phases(p.evolve)
        assert epoch_phase_count(p) == len(epoch_order(run)) == 8 + len(set(run) & set(OPTIONAL))
    assert epoch_phase_count(lite) < epoch_phase_count(base)
    # the ledger's order and the stop line's labels: the metered steps (the frontier calls no model)
    assert EPOCH_ORDER == ("rollout", "analyse", "propose", "validate", "review", "val_baseline", "gate", "admit",
                           "val_after", "build_data")
    assert PHASE_LABELS["gate"] == "E2 val gate" and PHASE_LABELS["build_data"] == "G-H build data"
    assert set(PHASE_LABELS) == set(EPOCH_ORDER)


def test_steps_name_graph_phases_and_only_the_gated_phases_are_optional() -> None:
    assert len(STEP) == len(EPOCH_STEPS)
    for s in EPOCH_STEPS:
        assert s.phase is None or s.phase in BY_NAME, s
    assert {s.name for s in EPOCH_STEPS if s.optional} == set(OPTIONAL)
    for mode in ("lite", "full"):
        run = epoch_phases(load_params(ROOT / "params.yaml", {"evolve.mode": mode}).evolve)
        assert set(run) <= set(OPTIONAL)


def test_each_step_reads_only_epoch_files_an_earlier_step_wrote() -> None:
    written: set[str] = set()
    for s in EPOCH_STEPS:
        if s.phase is None:
            continue
        ph = BY_NAME[s.phase]
        needs = {i for i in ph.inputs if i.startswith("{epoch}/")}
        assert needs <= written, f"{s.name} reads {sorted(needs - written)} before a step writes it"
        written |= set(ph.outs)


def test_dvc_stages_run_in_the_declared_order() -> None:
    """dvc.yaml lists the stages in ``PHASES`` order; the epoch's stages follow the steps' order."""
    staged = [ph.name for ph in PHASES if ph.cmd]
    from_steps = [s.phase for s in EPOCH_STEPS if s.phase and BY_NAME[s.phase].cmd]
    assert [n for n in staged if n in from_steps] == list(dict.fromkeys(from_steps))


def test_files_removed_for_a_skipped_or_unreached_step_cover_what_the_graph_says_it_writes() -> None:
    from hasp import artifacts as art
    from hasp.evolve.phase_graph import epoch_outs
    from hasp.flows.evolve import PHASE_OUTPUTS, STALE_IF_SKIPPED

    assert STALE_IF_SKIPPED == {"validate": (art.VALIDATION,), "review": (art.REVIEWS,),
                                "gate": (art.GATE, art.ANCHORS, art.JUDGE_GATE)}
    for name, files in PHASE_OUTPUTS.items():
        step = STEP[name]
        if step.phase is not None:
            assert set(epoch_outs(step.phase)) <= set(files), name
