"""A user's own Domain for the tests: a countdown whose tool keeps state across an episode's steps,
which a ``Task`` (stateless tools and a scorer) cannot say. Importable as ``countdown_domain:...``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from hasp.api import Domain, Item, Tool, ToolEnvironment


@dataclass(frozen=True)
class CountdownDomain(Domain):
    """Tick down from the item's start, then answer ``liftoff``: right only when every tick was taken."""

    start: int = 2
    n: int = 20
    name: ClassVar[str] = "countdown"
    action_types: ClassVar[tuple[str, ...]] = ("TICK", "FINAL")

    def load_items(self) -> list[Any]:
        return [Item(f"count-{i}", f"Count down from {self.start}, then answer liftoff.", ["liftoff"])
                for i in range(self.n)]

    def environment(self, item: Any, opened: Any, *, params: Any, cfg: Any, teacher: Any, snippets: bool) -> Any:
        left = {"n": self.start}

        def tick(_arg: str) -> str:
            left["n"] -= 1
            return f"{max(left['n'], 0)} to go"

        def score(traj: Any) -> tuple[float, float]:
            ok = float((traj.prediction or "").strip().lower() == "liftoff" and left["n"] <= 0)
            return ok, ok

        return ToolEnvironment([Tool("TICK", tick, "counts one down")], instructions="You count down.", scorer=score)


COUNTDOWN = CountdownDomain()


class NoEnvironment(Domain):
    name = "broken"
    action_types = ("TICK", "FINAL")


class NoFinal(CountdownDomain):
    action_types = ("TICK",)
