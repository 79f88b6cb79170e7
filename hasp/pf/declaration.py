"""A PF declared as data (the ``pf:`` key of a skill's ``hasp.yaml``): a trigger and a repair from a menu.

Why: a PF is mostly "when these hold, rewrite the action to X with the argument taken from Y" or
"... inject this text". Declared that way, a small student model can write a working skill by
filling a few fields, and the project compiles it from fixed templates (``hasp.pf.declared``)
without ever executing text the student wrote — so a declared PF needs no sandbox.

Example::

    pf:
      watches: [READ]
      when: [last_action_failed, arg_not_in_results]
      rewrite: {action: READ, arg: best_unread_result}
      max_fires: 2
      reason: READ of a document no search has shown

The names come from ``hasp.pf.vocabulary``; this module only fixes the shape, so that a
SKILL.md loader can check it without knowing any domain.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hasp.pf.intervention import MAX_REASON_CHARS

MAX_INJECT_CHARS = 600


class Rewrite(BaseModel):
    """Replace the proposed action by ``action`` with its argument from the first source that yields one."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    action: str
    #: a source name, or several tried in order
    arg: str | list[str]

    @field_validator("action")
    @classmethod
    def _upper(cls, v: str) -> str:
        return v.strip().upper()

    @property
    def sources(self) -> list[str]:
        return [self.arg] if isinstance(self.arg, str) else list(self.arg)


class PFDeclaration(BaseModel):
    """One declared PF: which actions it watches, when it fires, and its repair (exactly one of
    ``rewrite`` / ``inject``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    watches: list[str] = Field(min_length=1)
    #: AND-ed conditions: names (``!name`` negates), ``{field, op, value}``, ``{any: [...]}``, ``{not: c}``
    when: list[str | dict[str, Any]] = Field(default_factory=list)
    rewrite: Rewrite | None = None
    #: text added to the observation; ``{source}`` placeholders are filled from the vocabulary
    inject: str | None = Field(None, min_length=1, max_length=MAX_INJECT_CHARS)
    max_fires: int | None = Field(None, ge=1, le=10)
    #: why it fires, recorded with each event (and the vote's objection); ``{source}`` placeholders allowed
    reason: str = Field("", max_length=MAX_REASON_CHARS)
    #: on FINAL, also vote against the answer when ``when`` holds (a code handler)
    vote: bool = False

    @field_validator("watches")
    @classmethod
    def _upper(cls, v: list[str]) -> list[str]:
        return [x.strip().upper() for x in v]

    @model_validator(mode="after")
    def _one_repair(self) -> "PFDeclaration":
        if (self.rewrite is None) == (self.inject is None):
            raise ValueError("declare exactly one repair: rewrite or inject")
        if self.vote and "FINAL" not in self.watches:
            raise ValueError("vote needs FINAL among watches")
        return self
