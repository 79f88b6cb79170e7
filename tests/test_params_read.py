"""Every knob of the params schema is read by some code: a field nothing reads is a knob that lies.

The check walks ``hasp.config.Params`` and, for each field, looks through the source of ``hasp/``,
``flows/`` and ``tasks/`` (the schema module itself excluded) for an attribute access ``.name`` or a
string key ``"name"``. It is a name check, not a data-flow proof: it catches the knob that nothing
mentions, which is how a knob comes to be written in ``params.yaml`` and then hard-coded in code.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

from hasp.config import Params, RecipeParams, TrainerParams, load_params

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("hasp", "flows", "tasks")
SCHEMA = ROOT / "hasp" / "config.py"

#: fields consumed without their name in the code, each with the reason
GENERIC: dict[str, str] = {}


def fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str]]:
    """``(dotted path, field name)`` of every field, nested sections included."""
    for name, f in model.model_fields.items():
        yield f"{prefix}{name}", name
        if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel):
            yield from fields(f.annotation, f"{prefix}{name}.")


def source() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for d in SOURCES for p in sorted((ROOT / d).rglob("*.py"))
                     if p != SCHEMA)


def test_every_params_field_is_read_by_some_code():
    text = source()
    unread = [path for path, name in fields(Params) if path not in GENERIC
              and not re.search(rf"\.{name}\b|[\"']{name}[\"']", text)]
    assert unread == [], f"params fields no code reads (remove them or wire them): {unread}"


def test_the_exceptions_are_fields_of_the_schema():
    assert set(GENERIC) <= {path for path, _ in fields(Params)}


def test_a_recipe_block_overrides_only_trainer_knobs_its_recipe_reads():
    """The override keys a recipe block accepts are the shared trainer knobs its trainer reads: each is
    a schema field of the trainer section, so the walk above covers them."""
    train = Params().train
    for name in ("sft", "rs", "opd", "dpo"):
        block = getattr(train, name)
        assert isinstance(block, RecipeParams) and block.READS <= set(TrainerParams.model_fields)
        assert not set(type(block).model_fields) & set(TrainerParams.model_fields), name  # one home per knob
    p = load_params(ROOT / "params.yaml")
    assert {r: p.train.trainer(r).learning_rate for r in ("sft", "rs", "opd", "dpo")} == {
        "sft": 2e-4, "rs": 1e-4, "opd": 1e-4, "dpo": 1e-4}
