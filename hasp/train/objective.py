"""The rows file the sft and dpo trainers read, as ``train.objective`` says (paper App. D, data layers 1-2).

Phase H writes two kinds of rows per epoch: Objective A, the policy's PF-corrected steps (``sft.jsonl``,
``dpo.jsonl``), and Objective B, the skill author's own proposals (``sft_skill.jsonl``,
``dpo_skill.jsonl``: prompt = the Phase-C proposal prompt, target = the candidate, reward
r_skill = Q_skill + lambda * dEM_val). ``rows_for`` is the one place that picks between them, so the
evolution epoch, the command line (and so DVC) and the post-training grid train on the same rows.

A is the policy file as it is. B and AB are written beside it (``<stem>_objective_<B|AB>.jsonl``, with
its counts in ``<stem>_objective_<B|AB>.json``): an SFT row of B carries ``sample_weight`` = r_skill,
clamped at 0 (the SFT trainer's loss weight); a DPO pair of B is used as Phase H wrote it.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hasp import artifacts as art
from hasp.atomic import read_jsonl, write_json, write_jsonl
from hasp.config import TrainParams
from hasp.train.rewards import loss_weight
from hasp.train.rounds import RecipeError

log = logging.getLogger(__name__)

#: Objective B's rows of one epoch, per recipe (``hasp.evolve.epoch.build_skill_data`` writes them)
SKILL_ROWS = {"sft": art.SFT_SKILL, "dpo": art.DPO_SKILL}
#: every scored skill-author record of the epoch, with or without a training row
SKILL_RECORDS = art.SKILL_RECORDS


@dataclass(frozen=True)
class TrainRows:
    """The rows file a trainer reads and what is in it."""

    path: Path
    objective: str
    recipe: str
    n_policy: int  # Objective A rows in the file
    n_skill: int  # Objective B rows in the file
    n_unscored: int  # skill records without r_skill (never reviewed): left out
    n_below_floor: int  # skill records whose r_skill is under the reward floor: no SFT row in sft_skill.jsonl

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "path": str(self.path)}


def policy_rows(train: TrainParams, folder: Path) -> Path:
    """Objective A's rows file of ``train.recipe`` in a Phase-H folder."""
    return Path(folder) / (art.SFT if train.recipe == "sft" else train.dpo.rows)


def _read(path: Path) -> list[dict[str, Any]]:
    """A rows file's rows; an epoch without candidates has no skill files, which is no rows."""
    return read_jsonl(path) if path.is_file() else []


def rows_for(train: TrainParams, policy: Path, skill_dir: Path | None) -> TrainRows:
    """The rows ``train.recipe`` (sft or dpo) trains on under ``train.objective``: ``policy`` is
    Objective A's rows file, ``skill_dir`` the evolution epoch whose skill-author rows B reads (None:
    the run has no evolution, so B and AB are a ``RecipeError``)."""
    recipe, objective = train.recipe, train.objective
    if recipe not in SKILL_ROWS:
        raise RecipeError(f"train.recipe {recipe} samples its own rows; train.objective applies to sft and dpo")
    policy = Path(policy)
    if objective == "A":
        return TrainRows(policy, objective, recipe, len(_read(policy)), 0, 0, 0)
    if skill_dir is None:
        raise RecipeError(f"train.objective {objective} trains on the skill author's proposals, and this run has "
                          "no evolution epoch to take them from (an open-loop preset evolves nothing)")
    skill_dir = Path(skill_dir)
    sft_skill = _read(skill_dir / SKILL_ROWS["sft"])
    with_row = {r.get("skill_id") for r in sft_skill if r.get("sample_weight") is not None}
    records = _read(skill_dir / SKILL_RECORDS)
    unscored = sum(r.get("r_skill") is None for r in records)
    below = sum(r.get("r_skill") is not None and r.get("skill_id") not in with_row for r in records)
    if recipe == "sft":  # the loss weight is r_skill, never negative; a row without one has no reward
        b_rows = [{**r, "sample_weight": loss_weight(r["sample_weight"])}
                  for r in sft_skill if r.get("sample_weight") is not None]
        unscored += len(sft_skill) - len(b_rows)
    else:
        b_rows = _read(skill_dir / SKILL_ROWS[recipe])
    if objective == "AB" and not policy.is_file():
        raise RecipeError(f"train.objective AB: policy rows file {policy} not found")
    a_rows = read_jsonl(policy) if objective == "AB" else []
    out = policy.with_name(f"{policy.stem}_objective_{objective}.jsonl")
    write_jsonl(a_rows + b_rows, out)
    rows = TrainRows(out, objective, recipe, len(a_rows), len(b_rows), unscored, below)
    write_json(rows.to_dict(), out.with_suffix(".json"))
    log.info("train.objective %s: %s holds %d policy rows and %d skill-author rows; left out: %d proposals "
             "without r_skill, %d under the reward floor", objective, out, len(a_rows), len(b_rows), unscored, below)
    return rows
