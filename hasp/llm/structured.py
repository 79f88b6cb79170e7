"""Constrained decoding in each server's dialect: a GBNF grammar or a JSON schema on one request.

Why a module of its own: servers disagree on the request shape. llama.cpp's OpenAI-compatible server
reads a ``grammar`` string or a ``json_schema`` object from the request body (one of them: both is an
error); vLLM reads a JSON schema as ``response_format`` and a grammar under ``structured_outputs``
(its older ``guided_*`` fields are gone); an OpenAI-style endpoint takes a JSON schema as
``response_format`` and no grammar at all. One function per dialect turns a constraint into request
fields; the client (``hasp.llm.client``) sends them, and when an endpoint refuses one it falls back to
the unconstrained request, logged once and counted, so a constraint never breaks a run and never
disappears unnoticed.

``llm.constrained`` says which calls are constrained; ``auto`` means "where the engine takes grammars",
which is a property of the dialect (``resolve``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

#: the request shapes the client knows; the endpoint code picks one from ``llm.backend``
DIALECTS = ("llamacpp", "vllm", "openai")
#: dialects whose engines constrain decoding with a grammar, which ``llm.constrained: auto`` turns on
GRAMMAR_DIALECTS = frozenset({"llamacpp", "vllm"})
#: a 400/422 naming one of these is the endpoint refusing the constraint, not the request as a whole
_REFUSAL = re.compile(r"grammar|schema|response_format|structured|guided", re.I)
REFUSAL_STATUSES = frozenset({400, 422})


@dataclass(frozen=True)
class Encoded:
    """A constraint as request fields: ``body`` goes into the JSON body beside the OpenAI fields
    (``extra_body``), ``response_format`` is the OpenAI field. ``dropped`` says why a constraint that
    was asked for cannot be sent in this dialect ("" when it is sent, or none was asked for)."""

    kind: str = ""
    body: dict[str, Any] = field(default_factory=dict)
    response_format: dict[str, Any] | None = None
    dropped: str = ""

    @property
    def sent(self) -> bool:
        return bool(self.body) or self.response_format is not None

    @property
    def key(self) -> str:
        """Identity of the constraint, to remember one an endpoint has refused."""
        raw = json.dumps([self.kind, self.body, self.response_format], sort_keys=True, default=str)
        return hashlib.sha256(raw.encode()).hexdigest()[:16]


def schema_format(schema: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """The OpenAI ``response_format`` asking for JSON that follows ``schema``."""
    label = re.sub(r"[^A-Za-z0-9_-]+", "_", str(name or schema.get("title") or "reply"))[:64]
    return {"type": "json_schema", "json_schema": {"name": label, "schema": schema}}


#: a bounded number becomes this many steps between its bounds (``bounded_numbers``)
NUMBER_STEPS = 20


def bounded_numbers(schema: Any) -> Any:
    """``schema`` with every ``number`` that has both a ``minimum`` and a ``maximum`` turned into the
    enum of ``NUMBER_STEPS + 1`` evenly spaced values between them (0.0, 0.05, ..., 1.0 for [0, 1]).

    Why: llama.cpp's JSON-schema grammar bounds integers but not numbers, so a small model under a
    schema asking for scores in [0, 1] still writes 3 or 5; as an enum the bounds are in the grammar
    and a reply cannot leave them. Other dialects get the schema as it is (their engines, or the
    caller's check, enforce it)."""
    if isinstance(schema, list):
        return [bounded_numbers(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: bounded_numbers(v) for k, v in schema.items()}
    lo, hi = out.get("minimum"), out.get("maximum")
    if out.get("type") == "number" and isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo < hi:
        step = (hi - lo) / NUMBER_STEPS
        out = {k: v for k, v in out.items() if k not in ("type", "minimum", "maximum")}
        out["enum"] = [round(lo + i * step, 6) for i in range(NUMBER_STEPS + 1)]
    return out


def llamacpp(grammar: str | None, json_schema: dict[str, Any] | None) -> Encoded:
    """llama.cpp's server: ``grammar`` (GBNF) or ``json_schema`` in the body (its bounded numbers as
    enums: ``bounded_numbers``)."""
    if grammar is not None:
        return Encoded("grammar", body={"grammar": grammar})
    if json_schema is not None:
        return Encoded("json_schema", body={"json_schema": bounded_numbers(json_schema)})
    return Encoded()


def vllm(grammar: str | None, json_schema: dict[str, Any] | None) -> Encoded:
    """vLLM's OpenAI server: a grammar under ``structured_outputs``, a schema as ``response_format``."""
    if grammar is not None:
        return Encoded("grammar", body={"structured_outputs": {"grammar": grammar}})
    if json_schema is not None:
        return Encoded("json_schema", response_format=schema_format(json_schema))
    return Encoded()


def openai(grammar: str | None, json_schema: dict[str, Any] | None) -> Encoded:
    """An OpenAI-style endpoint: a schema as ``response_format``; a grammar cannot be said."""
    if grammar is not None:
        return Encoded("grammar", dropped="the openai dialect has no grammar field")
    if json_schema is not None:
        return Encoded("json_schema", response_format=schema_format(json_schema))
    return Encoded()


ENCODERS: dict[str, Callable[[str | None, dict[str, Any] | None], Encoded]] = {
    "llamacpp": llamacpp, "vllm": vllm, "openai": openai}


def encode(dialect: str, *, grammar: str | None = None, json_schema: dict[str, Any] | None = None) -> Encoded:
    """The request fields of at most one constraint in ``dialect``; both at once is a caller's error
    (llama.cpp answers it with a 500, and no dialect can say "both")."""
    if grammar is not None and json_schema is not None:
        raise ValueError("a request takes a grammar or a JSON schema, not both")
    if dialect not in ENCODERS:
        raise ValueError(f"unknown dialect {dialect!r}; known: {', '.join(DIALECTS)}")
    return ENCODERS[dialect](grammar, json_schema)


def is_refusal(status: int | None, message: str) -> bool:
    """Does an error answer refuse the constraint (llama.cpp: 400 "failed to parse grammar"; vLLM and
    OpenAI: 400/422 naming the grammar, schema or response_format) rather than the request?"""
    return status in REFUSAL_STATUSES and bool(_REFUSAL.search(message or ""))


# ------------------------------------------------------------------------------- which calls are constrained

def backend_dialect(backend: str) -> str:
    """The dialect of a server started for ``llm.backend`` (transformers serve speaks plain OpenAI)."""
    return backend if backend in GRAMMAR_DIALECTS else "openai"


def dialect_of(client: Any) -> str:
    """The dialect of a client (``LLMClient.dialect``); a client that does not say is plain OpenAI."""
    d = getattr(client, "dialect", None)
    return d if isinstance(d, str) and d in DIALECTS else "openai"


def resolve(setting: str, dialect: str) -> str:
    """``llm.constrained`` for a client of ``dialect``: ``actions``, ``json`` or ``off``; ``auto`` is
    ``actions`` where the engine takes grammars, else ``off``."""
    if setting == "auto":
        return "actions" if dialect in GRAMMAR_DIALECTS else "off"
    if setting not in ("actions", "json", "off"):
        raise ValueError(f"llm.constrained must be auto, actions, json or off, not {setting!r}")
    return setting


def constrains_actions(setting: str, dialect: str) -> bool:
    """Do the agent's policy steps carry their reply grammar?"""
    return resolve(setting, dialect) == "actions"


def constrains_json(setting: str, dialect: str) -> bool:
    """Are Phase C proposals asked for under their JSON schema?"""
    return resolve(setting, dialect) in ("actions", "json")
