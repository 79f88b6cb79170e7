"""The value a Program Function returns: what to do with the proposed action."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any


class InterventionType(str, Enum):
    """How a PF changes the step (paper App. B.1)."""

    MODIFY_ACTION = "MODIFY_ACTION"
    INJECT_CONTEXT = "INJECT_CONTEXT"
    NOOP = "NOOP"


@dataclass(slots=True)
class Intervention:
    """A PF's decision. Only these keyword arguments are part of the contract,
    because generated PFs are written against exactly this interface."""

    type: InterventionType = InterventionType.NOOP
    new_action_type: str | None = None
    new_action_arg: str | None = None
    context_text: str = ""
    reason: str = ""
    skill_id: str = ""

    def __post_init__(self) -> None:
        if type(self.type) is not InterventionType:  # a plain string from generated code or a dict
            self.type = InterventionType(self.type)
        if self.type is InterventionType.MODIFY_ACTION and not self.new_action_type:
            raise ValueError("MODIFY_ACTION needs new_action_type")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["type"] = self.type.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Intervention":
        keys = {"type", "new_action_type", "new_action_arg", "context_text", "reason", "skill_id"}
        return cls(**{k: v for k, v in d.items() if k in keys})
