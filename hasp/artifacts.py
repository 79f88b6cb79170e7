"""The files of one evolution epoch, named once.

An epoch folder (``<out>/epoch_<i>/``) holds what each phase wrote and the next phases read. The phase
graph (``hasp.evolve.phase_graph``) declares its stages' ``outs`` and ``inputs`` from these names, and
every reader and writer (the Prefect flows, the CLI stages, the story, the epoch report) joins them to
the epoch folder: a file renamed here is renamed for all of them, and ``dvc.yaml`` follows on its next
``hasp dvc-yaml``. A test fails on a literal epoch file name anywhere else in the package.

The core layer holds this module so that ``hasp.track`` (which imports only core modules) reads the
same names.
"""

from __future__ import annotations

__all__ = [
    "ROLLOUT", "TRACES_SUMMARY", "FAILURES", "SUMMARIES", "CLUSTERS", "CANDIDATES", "VALIDATION", "REVIEWS",
    "HELDOUT", "VAL_BASELINE", "GATE", "ANCHORS", "JUDGE_GATE", "VAL_RUNS", "ANCHOR_RUNS", "JUDGE_RUNS", "LIBRARY", "ADMISSION", "VAL_AFTER", "CARRY",
    "SFT", "DPO", "SFT_SKILL", "DPO_SKILL", "SKILL_RECORDS", "DATA_SUMMARY", "MLFLOW_RUN_ID", "BUDGET",
    "SUMMARY_GLOB", "FILES", "summary_file", "summary_phase",
]

# Phase A: the policy's (or the logged traces') trajectories on the train split
ROLLOUT = "rollout.jsonl"
TRACES_SUMMARY = "traces_summary.json"  # Phase A from logged traces: rows read, bad rows by reason
# Phase A from logged traces: the questions held out of Phases B-H for the judge gate (empty otherwise)
HELDOUT = "heldout.jsonl"
# Phase B: the detected failure patterns, the LLM's summaries of them, the clusters Phase C proposes for
FAILURES = "failures.json"
SUMMARIES = "summaries.json"
CLUSTERS = "clusters.json"
# Phase C: the proposed skills
CANDIDATES = "candidates.json"
# Phase D: the static and execution checks of every candidate
VALIDATION = "validation.json"
# Phase E: the teacher's review of every candidate
REVIEWS = "reviews.json"
# the val gate: the baseline library on the val split, each candidate's val and anchor results, their runs
VAL_BASELINE = "val_baseline.jsonl"
GATE = "gate.json"
ANCHORS = "anchors.json"
VAL_RUNS = "val_runs"  # a folder
ANCHOR_RUNS = "anchor_runs"  # a folder
# the judge gate: each candidate's judged answers to the held-out trace questions, and their runs
JUDGE_GATE = "judge_gate.json"
JUDGE_RUNS = "judge_runs"  # a folder
# Phase F: the evolved library (a folder) and every admission decision
LIBRARY = "library"
ADMISSION = "admission.json"
# the evolved library on the val split, and the library the next epoch starts from
VAL_AFTER = "val_after.jsonl"
CARRY = "carry.json"
# Phases G-H: Objective A's rows (the policy), Objective B's (the skill author) and its records
SFT = "sft.jsonl"
DPO = "dpo.jsonl"
SFT_SKILL = "sft_skill.jsonl"
DPO_SKILL = "dpo_skill.jsonl"
SKILL_RECORDS = "skill_records.jsonl"
DATA_SUMMARY = "data_summary.json"
# the epoch's MLflow run (``hasp track epoch``)
MLFLOW_RUN_ID = "mlflow_run_id.txt"

#: the phase name of the budget's own summary (``summary_budget.json``: the spend so far and the stop line)
BUDGET = "budget"
_SUMMARY_PREFIX, _SUMMARY_SUFFIX = "summary_", ".json"
#: every phase summary of an epoch folder
SUMMARY_GLOB = f"{_SUMMARY_PREFIX}*{_SUMMARY_SUFFIX}"

#: every file (not folder) name above: what the literal-name test looks for outside this module
FILES: tuple[str, ...] = (ROLLOUT, TRACES_SUMMARY, HELDOUT, FAILURES, SUMMARIES, CLUSTERS, CANDIDATES, VALIDATION,
                          REVIEWS, VAL_BASELINE, GATE, ANCHORS, JUDGE_GATE, ADMISSION, VAL_AFTER, CARRY, SFT, DPO, SFT_SKILL,
                          DPO_SKILL, SKILL_RECORDS, DATA_SUMMARY, MLFLOW_RUN_ID)


def summary_file(phase: str) -> str:
    """The summary a phase leaves in the epoch folder (``summary_rollout.json``); its numbers are the
    DVC stage's metrics and the epoch report's."""
    return f"{_SUMMARY_PREFIX}{phase}{_SUMMARY_SUFFIX}"


def summary_phase(file_name: str) -> str | None:
    """The phase a summary file belongs to (``summary_gate.json`` -> ``gate``); None for another file."""
    if file_name.startswith(_SUMMARY_PREFIX) and file_name.endswith(_SUMMARY_SUFFIX):
        return file_name[len(_SUMMARY_PREFIX):-len(_SUMMARY_SUFFIX)]
    return None
