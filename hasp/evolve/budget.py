"""What an evolution epoch spends — tokens, model calls, wall seconds, money — and when it must stop.

Why one module: spend is counted in one place and read in one place. Counting: every model client of a
run is wrapped in a ``MeteredClient`` that adds each reply's tokens and one call to the run's ``Meter``
(the clients themselves, the doubles of tests included, need not know). Reading: ``metered_phase`` runs
one phase and writes what it cost into the phase's own summary (``summary["spend"]``), so a phase served
from the Prefect cache replays what producing it cost and a re-run stops where the first run stopped;
``Ledger`` adds the phases up and names the first ``evolve.budget`` limit reached. Phase C also checks
between proposals (``Guard``): one proposal must not spend the whole budget of the epoch unnoticed.

A limit is reached when the spend is at or above it; the check runs after a phase (or a proposal)
returns, so the step that crosses it runs to its end: the figure in the stop line says by how much.
Episodes that run in worker processes (``runner.kind: dask``) call their models there, out of the
meter's sight; their tokens are read from the trajectories instead (``rollout_spend``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hasp import artifacts as art
from hasp.config import BudgetParams
from hasp.evolve.phase_graph import EPOCH_STEPS

log = logging.getLogger(__name__)

#: phase name -> how the stop line names it (the epoch's own phase labels)
PHASE_LABELS: Mapping[str, str] = {s.name: s.label for s in EPOCH_STEPS if s.metered}


@dataclass(frozen=True)
class Spend:
    """Tokens, calls and wall seconds of a phase (or an epoch: the sum of its phases)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    wall_s: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Spend) -> Spend:
        return Spend(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens,
                     self.calls + other.calls, self.wall_s + other.wall_s)

    def __sub__(self, other: Spend) -> Spend:
        return Spend(self.prompt_tokens - other.prompt_tokens, self.completion_tokens - other.completion_tokens,
                     self.calls - other.calls, self.wall_s - other.wall_s)

    def cost(self, budget: BudgetParams) -> float | None:
        """Money at the configured prices (None when neither price is set)."""
        if budget.price_per_1k_prompt is None and budget.price_per_1k_completion is None:
            return None
        return (self.prompt_tokens * (budget.price_per_1k_prompt or 0.0)
                + self.completion_tokens * (budget.price_per_1k_completion or 0.0)) / 1000.0

    def to_dict(self, budget: BudgetParams | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                               "tokens": self.tokens, "calls": self.calls, "wall_s": round(self.wall_s, 3)}
        cost = self.cost(budget) if budget is not None else None
        if cost is not None:
            out["cost"] = round(cost, 6)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Spend:
        d = d or {}
        return cls(int(d.get("prompt_tokens") or 0), int(d.get("completion_tokens") or 0), int(d.get("calls") or 0),
                   float(d.get("wall_s") or 0.0))


class Meter:
    """Running totals of the calls a run's metered clients made (thread-safe: rollouts reply on threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spend = Spend()

    def add(self, prompt_tokens: int = 0, completion_tokens: int = 0, calls: int = 1) -> None:
        with self._lock:
            self._spend = self._spend + Spend(prompt_tokens, completion_tokens, calls)

    def add_reply(self, reply: Any) -> None:
        """One call; its tokens when the reply says them (``ChatResult``; a bare string says none)."""
        self.add(int(getattr(reply, "prompt_tokens", 0) or 0), int(getattr(reply, "completion_tokens", 0) or 0))

    def read(self) -> Spend:
        with self._lock:
            return self._spend


class MeteredClient:
    """A model client whose replies are counted in ``meter``; everything else is the client's own.

    It has exactly the methods its client has (``getattr`` passes through), so code that asks
    ``getattr(model, "chat", None)`` or reads ``dialect`` / ``endpoint()`` / ``started`` sees the client.
    ``generate`` goes through the client's ``chat`` when it has one (``LLMClient.generate`` is ``chat(...).text``),
    so its tokens are counted too."""

    def __init__(self, inner: Any, meter: Meter) -> None:
        self._inner, self._meter = inner, meter

    @property
    def inner(self) -> Any:
        return self._inner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr
        if name == "chat":
            def chat(messages: Any, **kw: Any) -> Any:
                reply = attr(messages, **kw)
                self._meter.add_reply(reply)
                return reply
            return chat
        if name == "map_chat":
            def map_chat(batch: Any, **kw: Any) -> Any:
                replies = attr(batch, **kw)
                for r in replies:
                    self._meter.add_reply(r)
                return replies
            return map_chat
        if name == "generate":
            chat = getattr(self._inner, "chat", None)

            def generate(messages: Any, max_tokens: int = 256, temperature: float = 0.0) -> Any:
                if callable(chat):
                    reply = chat(messages, max_tokens=max_tokens, temperature=temperature)
                    self._meter.add_reply(reply)
                    return reply.text
                text = attr(messages, max_tokens=max_tokens, temperature=temperature)
                self._meter.add()
                return text
            return generate
        return attr


def metered(client: Any, meter: Meter) -> Any:
    """``client`` counted in ``meter`` (None stays None; a client already metered is not wrapped twice)."""
    if client is None or isinstance(client, MeteredClient):
        return client
    return MeteredClient(client, meter)


def rollout_spend(summary: Mapping[str, Any]) -> Spend:
    """A rollout's policy spend read from its trajectories' summary (episodes run in worker processes):
    its token sums, and one call per step."""
    n = int(summary.get("n") or 0)
    return Spend(int(summary.get("prompt_tokens") or 0), int(summary.get("completion_tokens") or 0),
                 round(n * float(summary.get("mean_steps") or 0.0)))


def metered_phase(meter: Meter | None, run: Callable[[], dict[str, Any]],
                  budget: BudgetParams | None = None) -> dict[str, Any]:
    """Run one phase and put what it cost into its summary as ``spend``. A rollout whose episodes ran out of
    the meter's sight (worker processes: the meter saw no call, the trajectories hold tokens) is counted
    from its trajectories and says so (``counted_from``)."""
    start = meter.read() if meter is not None else Spend()
    t0 = time.monotonic()
    summary = run()
    used = (meter.read() - start) if meter is not None else Spend()
    used = replace(used, wall_s=time.monotonic() - t0)
    spend = used.to_dict(budget)
    if isinstance(summary, dict):
        if used.calls == 0 and int(summary.get("prompt_tokens") or 0) + int(summary.get("completion_tokens") or 0):
            spend = replace(rollout_spend(summary), wall_s=used.wall_s).to_dict(budget)
            spend["counted_from"] = "trajectories"
        summary["spend"] = spend
    return summary


@dataclass(frozen=True)
class Reached:
    """The first limit the spend reached: its key, the limit and the spend it is compared with."""

    key: str
    limit: float
    value: float

    def figure(self) -> str:
        """The spend compared, as the stop line shows it: "21 034 tokens", "12 calls", "95.3 s", "cost 1.2500"."""
        if self.key == "max_wall_s":
            return f"{self.value:.1f} s"
        if self.key == "max_cost":
            return f"cost {self.value:.4f}"
        return f"{_grouped(int(self.value))} {self.key.removeprefix('max_')}"


def _grouped(n: int) -> str:
    return f"{n:,}".replace(",", " ")


def _limit(v: float) -> str:
    """The limit as params.yaml writes it (20000, 1800.5)."""
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def reached(spent: Spend, budget: BudgetParams) -> Reached | None:
    """The first of ``max_tokens``, ``max_calls``, ``max_wall_s``, ``max_cost`` that ``spent`` reached."""
    cost = spent.cost(budget)
    for key, value in (("max_tokens", spent.tokens), ("max_calls", spent.calls), ("max_wall_s", spent.wall_s),
                       ("max_cost", cost)):
        limit = getattr(budget, key)
        if limit is not None and value is not None and value >= limit:
            return Reached(key, float(limit), float(value))
    return None


def stop_line(r: Reached, where: str, written: tuple[int, int] | None = None) -> str:
    """"evolve.budget.max_tokens 20000 reached after phase C propose (21 034 tokens): stopping; 2 of 6
    proposals written" — ``where`` says after or during which phase, ``written`` (proposed, asked) is
    added once Phase C has run."""
    tail = f"; {written[0]} of {written[1]} proposals written" if written is not None else ""
    return f"evolve.budget.{r.key} {_limit(r.limit)} reached {where} ({r.figure()}): stopping{tail}"


@dataclass
class Ledger:
    """The spend of one epoch, phase by phase, against ``evolve.budget``."""

    budget: BudgetParams
    phases: dict[str, Spend] = field(default_factory=dict)

    def add(self, phase: str, summary: Mapping[str, Any] | None) -> None:
        self.phases[phase] = self.phases.get(phase, Spend()) + Spend.from_dict((summary or {}).get("spend"))

    @property
    def total(self) -> Spend:
        return sum(self.phases.values(), Spend())

    def reached(self) -> Reached | None:
        return reached(self.total, self.budget)

    def guard(self, meter: Meter | None) -> Guard:
        """The check Phase C runs between proposals: this epoch's phases so far plus the phase's own spend."""
        return Guard(self.budget, self.total, meter)

    def to_dict(self) -> dict[str, Any]:
        return {"limits": {k: v for k, v in self.budget.model_dump().items() if v is not None},
                "phases": {n: s.to_dict(self.budget) for n, s in self.phases.items()},
                "total": self.total.to_dict(self.budget)}


class Guard:
    """``reached()`` between the steps of a phase: the spend of the phases before it (``before``) plus what
    ``meter`` counted and the clock ran since the guard was made. ``hit`` keeps the limit that stopped it."""

    def __init__(self, budget: BudgetParams, before: Spend = Spend(), meter: Meter | None = None) -> None:
        self.budget, self.before, self.meter = budget, before, meter
        self._start = meter.read() if meter is not None else Spend()
        self._t0 = time.monotonic()
        self.hit: Reached | None = None

    def spent(self) -> Spend:
        now = (self.meter.read() - self._start) if self.meter is not None else Spend()
        return self.before + replace(now, wall_s=time.monotonic() - self._t0)

    def reached(self) -> bool:
        if self.hit is None:
            self.hit = reached(self.spent(), self.budget)
        return self.hit is not None


def limited(budget: BudgetParams) -> bool:
    """Whether any limit is set (an unlimited epoch needs no guard inside its phases)."""
    return any(getattr(budget, k) is not None for k in ("max_tokens", "max_calls", "max_wall_s", "max_cost"))


#: the metered phases of an epoch in the order they run (the phase graph's ``EPOCH_STEPS``), by the names
#: of their ``summary_<phase>.json``
EPOCH_ORDER: tuple[str, ...] = tuple(s.name for s in EPOCH_STEPS if s.metered)


def ledger_of(epoch_dir: Any, budget: BudgetParams, before: str) -> Ledger:
    """The spend the epoch folder's summaries record for the phases that run before ``before``: what a
    ``dvc repro`` stage (its own process) adds its own spend to."""
    import json
    from pathlib import Path

    ledger = Ledger(budget)
    for name in EPOCH_ORDER[:EPOCH_ORDER.index(before)]:
        path = Path(epoch_dir) / art.summary_file(name)
        if path.is_file():
            try:
                ledger.add(name, json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError) as e:  # an unreadable summary spends nothing: say so, keep going
                log.warning("%s: spend not read (%s); the budget leaves it out", path, e)
    return ledger
