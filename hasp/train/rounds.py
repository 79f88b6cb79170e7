"""The sample → build rows → train round that RS and OPD share, with resumable round folders.

Each round samples from the checkpoint the previous round wrote (the base model for the first), turns
the trajectories into SFT rows with a recipe-specific builder, and trains a LoRA adapter on them with
the weighted SFT trainer, starting from that same checkpoint. A round's folder is complete only once
its ``round.json`` is written; a later run reuses finished rounds and starts at the first unfinished
one, so a failed round leaves the earlier checkpoints intact. A finished round is reused only when it
was made from the same inputs (``round.json`` keeps their fingerprint: recipe, start checkpoint, questions,
train knobs including the seed, the caller's ``inputs_key``); a round left by other settings in the same
folder is run again.

The sampler is passed in (``sample(questions, model_dir) -> trajectories``): it owns the agent, the
library and the serving of ``model_dir``, which keeps this module free of servers and testable with a
scripted policy. Each question it is asked arrives as a ``hasp.episode.spec.Seeded`` item carrying the
sampling seed of that sample, derived from ``train.seed``, so a round can be sampled again identically.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hasp import artifacts as art
from hasp.atomic import read_json, write_json, write_jsonl
from hasp.config import TrainParams
from hasp.episode.seeding import Seeded, sampling_seed
from hasp.records import Trajectory

log = logging.getLogger(__name__)

Sampler = Callable[[Sequence[Any], Path], Iterable["Trajectory | dict[str, Any]"]]
#: (trajectories, round index) -> (SFT rows, stats); a row is what ``hasp.train.data.build_sft_rows`` makes
RowBuilder = Callable[[list[Trajectory], int], "tuple[list[dict[str, Any]], dict[str, Any]]"]
LogCallback = Callable[[dict[str, float], int], Any]
ROUND_FILE = "round.json"


class RecipeError(ValueError):
    """A recipe cannot go on (nothing to train on, a bad split, a teacher that failed); one line."""


class NoRowsError(RecipeError):
    """The sampled episodes left nothing to train on. Unlike a bad setting this is a result of the policy:
    a closed loop's later phase keeps its start checkpoint on it (``hasp.tasks.experiment.train_phase``)."""


@dataclass
class RecipeResult:
    """What a multi-round recipe left: the last checkpoint, one summary per round and the per-step
    history of every round's trainer, its steps continued across rounds (each row says its round)."""

    recipe: str
    model_dir: Path  # the checkpoint the last round wrote (merged folder)
    adapter_dir: Path
    rounds: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, float]] = field(default_factory=list)


def as_trajectories(items: Iterable[Trajectory | dict[str, Any]]) -> list[Trajectory]:
    return [t if isinstance(t, Trajectory) else Trajectory.from_dict(t) for t in items]


def question_id(q: Any) -> str | None:
    """The id of a question object (a dataset item with ``id``, or a mapping with ``id`` / ``qid``)."""
    if isinstance(q, dict):
        return q.get("id") or q.get("qid")
    return getattr(q, "id", None) or getattr(q, "qid", None)


def round_fingerprint(recipe: str, start: Path, questions: Sequence[Any], train: TrainParams, index: int,
                      previous: str | None, inputs_key: str | None) -> str:
    """What a round's result depends on, as a hash: a finished round with another fingerprint (another
    seed, knob, start checkpoint or caller input) must not be reused."""
    blob = json.dumps({"recipe": recipe, "start": str(start), "questions": [question_id(q) for q in questions],
                       "train": train.model_dump(mode="json"), "round": index, "previous": previous,
                       "inputs": inputs_key}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def round_questions(questions: Sequence[Any], per_round: int | None, seed: int, index: int) -> list[Any]:
    """The questions round ``index`` samples: all, or ``per_round`` of them drawn with the seed and the
    round (a resumed run draws the same ones)."""
    if per_round is None or per_round >= len(questions):
        return list(questions)
    return random.Random(f"{seed}:{index}").sample(list(questions), per_round)


def policy_gradient_step(sft: Any, n_rows: int) -> Any:
    """The trainer knobs of one strictly on-policy update: every row of the round in one optimizer step
    (micro-batches accumulated), the signed advantage as the row weight, a constant learning rate."""
    per = sft.per_device_train_batch_size
    return sft.model_copy(update={"weighting": "advantage", "max_steps": 1, "num_train_epochs": 1.0,
                                  "gradient_accumulation_steps": max(1, math.ceil(n_rows / per)),
                                  "warmup_steps": 0.0, "lr_scheduler_type": "constant"})


def run_rounds(recipe: str, model_dir: Path, questions: Sequence[Any], sample: Sampler, out_dir: Path,
               train: TrainParams, *, rounds: int, build_rows: RowBuilder, log_callback: LogCallback | None = None,
               inputs_key: str | None = None, repeats: int | None = None,
               policy_gradient: bool = False, kl_beta: float = 0.0, per_round: int | None = None) -> RecipeResult:
    """``rounds`` rounds of sample → rows → LoRA training with ``train.trainer(recipe)``'s knobs; returns
    the last checkpoint and every round's summary.

    ``repeats`` (default ``train.rollout.k``) is how often each question is sampled. With
    ``policy_gradient`` a round takes one optimizer step on advantage-weighted rows
    (``policy_gradient_step``; KL of weight ``kl_beta`` to ``model_dir``), and a round whose groups
    carry no signal (every advantage 0) trains nothing and hands its start checkpoint on. So does a
    round after the first whose episodes leave no rows (``NoRowsError`` from ``build_rows``): the
    rounds before it stay in the result. The first round's ``NoRowsError`` reaches the caller.
    ``per_round`` samples that many questions per round, drawn afresh each round with ``train.seed``
    (all of them when None or larger).
    ``inputs_key`` names what the sampler depends on beyond the arguments (library, data, agent
    settings; the grid passes its phase's cache key): it is part of each round's fingerprint."""
    from hasp.train.sft import SFTRecipe, check_model, train_sft

    check_model(model_dir)
    out_dir = Path(out_dir)
    sft = SFTRecipe.from_params(train.trainer(recipe))
    start = Path(model_dir)
    current, adapter = Path(model_dir), Path(model_dir)
    done: list[dict[str, Any]] = []
    history: list[dict[str, float]] = []
    step0 = 0
    k = repeats or train.rollout.k
    previous: str | None = None
    for i in range(rounds):
        rdir = out_dir / f"round_{i}"
        marker = rdir / ROUND_FILE
        fp = round_fingerprint(recipe, current, questions, train, i, previous, inputs_key)
        summary = read_json(marker) if marker.is_file() else None
        if summary is not None and summary.get("fingerprint") == fp:
            log.info("%s round %d already finished (%s); resuming after it", recipe, i + 1, marker)
        else:
            if summary is not None:
                log.warning("%s round %d in %s was made from other inputs (seed, knobs, start model or data); "
                            "running it again", recipe, i + 1, rdir)
                shutil.rmtree(rdir)
            rdir.mkdir(parents=True, exist_ok=True)
            # each (round, question, sample) samples with a seed of its own: the k samples differ, and the
            # round samples the same episodes when it runs again (hasp.episode.spec.Seeded)
            asked = [Seeded(q, sampling_seed(train.seed, recipe, i, n, j))
                     for n, q in enumerate(round_questions(questions, per_round, train.seed, i)) for j in range(k)]
            trajs = as_trajectories(sample(asked, current))
            write_jsonl([t.to_dict() for t in trajs], rdir / art.ROLLOUT)
            empty = None
            try:
                rows, stats = build_rows(trajs, i)
            except NoRowsError as e:
                if not done:  # nothing trained yet: the caller decides (a first phase fails, a later one keeps)
                    raise
                rows, stats, empty = [], {}, str(e)
            write_jsonl(rows, rdir / "rows.jsonl")
            offset = step0

            def shifted(metrics: dict[str, float], step: int, _o: int = offset) -> Any:
                return log_callback({**metrics, "round": float(i)}, step + _o) if log_callback else None

            summary = {"round": i, "start_model": str(current), "n_trajectories": len(trajs),
                       "n_questions": len(questions), "k": k, "data": stats, "step_offset": offset,
                       "fingerprint": fp}
            if empty is not None or (policy_gradient and not rows):
                skipped = empty or "no advantage signal"  # every group's rewards are equal
                log.warning("%s round %d: %s; the round hands its start checkpoint on", recipe, i + 1, skipped)
                summary.update(metrics={"global_step": 0}, skipped=skipped,
                               adapter_dir=str(adapter), merged_dir=str(current))
            else:
                knobs = policy_gradient_step(sft, len(rows)) if policy_gradient else sft
                # the next round samples from the merged folder
                res = train_sft(current, rdir / "rows.jsonl", rdir, knobs, log_callback=shifted,
                                label=f"train: {recipe} round {i + 1}/{rounds}", save_merged=True,
                                kl_beta=kl_beta if policy_gradient else 0.0, reference=start)
                summary.update(metrics=res.metrics, adapter_dir=str(res.adapter_dir), merged_dir=str(res.merged_dir))
            write_json(summary, marker)
        previous = fp
        done.append(summary)
        trainer_log = read_json(rdir / "train_summary.json") if (rdir / "train_summary.json").is_file() else {}
        history += [{**h, "step": h["step"] + summary["step_offset"], "round": float(i)}
                    for h in trainer_log.get("history", [])]
        step0 = int(summary["step_offset"]) + int(summary["metrics"].get("global_step", 0))
        current, adapter = Path(summary["merged_dir"]), Path(summary["adapter_dir"])
    return RecipeResult(recipe=recipe, model_dir=current, adapter_dir=adapter, rounds=done, history=history)
