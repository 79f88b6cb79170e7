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


@dataclass(slots=True, init=False)
class Intervention:
    """A PF's decision. Only these keyword arguments are part of the contract,
    because generated PFs are written against exactly this interface."""

    type: InterventionType
    new_action_type: str | None
    new_action_arg: str | None
    context_text: str
    reason: str
    skill_id: str

    # written out rather than generated + __post_init__: one Python frame per fire, which is
    # most of a PF's cost on the step it fires (bench/harness_overhead.py)
    def __init__(self, type: InterventionType | str = InterventionType.NOOP, new_action_type: str | None = None,
                 new_action_arg: str | None = None, context_text: str = "", reason: str = "",
                 skill_id: str = "") -> None:
        if type.__class__ is not InterventionType:  # a plain string from generated code or a dict
            type = InterventionType(type)
        if type is InterventionType.MODIFY_ACTION and not new_action_type:
            raise ValueError("MODIFY_ACTION needs new_action_type")
        self.type = type
        self.new_action_type = new_action_type
        self.new_action_arg = new_action_arg
        self.context_text = context_text
        self.reason = reason
        self.skill_id = skill_id

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["type"] = self.type.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Intervention":
        keys = {"type", "new_action_type", "new_action_arg", "context_text", "reason", "skill_id"}
        return cls(**{k: v for k, v in d.items() if k in keys})
