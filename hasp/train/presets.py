"""E1-E6 as data: the presets file read, validated and applied to a train section.

A preset is a row of the post-training grid (loop x recipe, paper App. D.2, Table 13); it is a set of
train knobs, not a code path, so the same trainers run every row. ``apply_preset`` merges a preset's
knobs over a train section and validates the result with the params schema, so a preset cannot set a
knob the schema does not know, and a bad name fails with one line naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml
from pydantic import ValidationError

from hasp.config import ExperimentPreset, ParamsError, RecipeParams, TrainerParams, TrainParams

PRESETS_FILE = "hasp/train/presets.yaml"
GROUPS = {"paper": "", "cpu": "_cpu"}  # group in the file -> suffix of its preset names


class PresetError(ParamsError):
    """An unknown preset or a preset whose values the schema refuses; one line naming the key."""


def deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``, recursing into mappings both have."""
    out = dict(base)
    for k, v in top.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def _errors(e: ValidationError, prefix: str) -> str:
    return "; ".join(f"{prefix}{'.'.join(map(str, er['loc']))}: {er['msg']}" for er in e.errors())


@lru_cache(maxsize=1)
def load_presets() -> dict[str, ExperimentPreset]:
    """Every preset of the package file by name (``E1`` ... ``E6``, ``E1_cpu`` ... ``E6_cpu``), each
    with its group's shared knobs merged in and its train block checked against the schema."""
    raw = yaml.safe_load(resources.files("hasp.train").joinpath("presets.yaml").read_text(encoding="utf-8"))
    out: dict[str, ExperimentPreset] = {}
    for group, suffix in GROUPS.items():
        block = dict(raw.get(group) or {})
        shared = block.pop("shared", {}) or {}
        for name, spec in block.items():
            full = f"{name}{suffix}"
            spec = dict(spec)
            spec["train"] = deep_merge(shared, spec.get("train") or {})
            if spec.get("start"):
                spec["start"] = f"{spec['start']}{suffix}"  # a start names a preset of the same group
            try:
                preset = ExperimentPreset.model_validate(spec)
                TrainParams.model_validate(preset.train)
            except ValidationError as e:
                raise PresetError(f"{PRESETS_FILE}: {group}.{name}: {_errors(e, '')}") from None
            out[full] = preset
    for full, preset in out.items():
        if preset.start is not None and preset.start not in out:
            raise PresetError(f"{PRESETS_FILE}: {full}.start: no preset {preset.start}")
    return out


def get_preset(name: str, *, key: str = "train.preset") -> ExperimentPreset:
    presets = load_presets()
    if name not in presets:
        raise PresetError(f"{key}: unknown preset {name!r}; known: {', '.join(sorted(presets))}")
    return presets[name]


#: recipe blocks of the train section: besides their own keys they take the trainer knobs as overrides
_RECIPE_BLOCKS = {name for name, f in TrainParams.model_fields.items()
                  if isinstance(f.annotation, type) and issubclass(f.annotation, RecipeParams)}


def _unknown_knobs(top: Mapping[str, Any], base: Mapping[str, Any], prefix: str, *,
                   trainer_knobs: bool = False) -> list[str]:
    """Dotted keys of ``top`` that ``base`` (a dumped train section) does not have; a recipe block
    (``trainer_knobs``) also knows the trainer knobs (whether the recipe reads one is the schema's check)."""
    known = set(base) | (set(TrainerParams.model_fields) if trainer_knobs else set())
    out: list[str] = []
    for k, v in top.items():
        if k not in known or k in ("preset", "overrides"):
            out.append(f"{prefix}{k}")
        elif isinstance(v, Mapping) and isinstance(base.get(k), Mapping):
            out.extend(_unknown_knobs(v, base[k], f"{prefix}{k}.", trainer_knobs=not trainer_knobs and k in _RECIPE_BLOCKS))
    return out


def apply_preset(train: TrainParams, name: str | None = None) -> TrainParams:
    """``train`` with the preset's knobs merged over it (``name`` defaults to ``train.preset``), then
    ``train.overrides`` over both, so a user can shorten a preset (fewer steps, one round) from the
    params file or ``dvc exp run -S`` without editing the presets file.

    No preset and no overrides: ``train`` unchanged. The returned section names the preset it came from."""
    name = name or train.preset
    if not name and not train.overrides:
        return train
    merged = train.model_dump()
    if name:
        merged = deep_merge(merged, {**get_preset(name).train, "preset": name})
    unknown = _unknown_knobs(train.overrides, merged, "train.overrides.")
    if unknown:
        raise PresetError(f"{unknown[0]}: unknown train knob (an override names a key of the train section)")
    merged = deep_merge(merged, train.overrides)
    try:
        return TrainParams.model_validate(merged)
    except ValidationError as e:
        where = f"train.preset {name}" if name else "train.overrides"
        raise PresetError(f"{where}: {_errors(e, 'train.')}") from None


def replaced_knobs(train: TrainParams, applied: TrainParams) -> dict[str, tuple[Any, Any]]:
    """``dotted key -> (value before, value run)`` for the knobs in which ``applied`` (``train`` with a
    preset and the overrides applied) differs: what a run should log so a value set in the params file
    and replaced by the preset is visible."""
    before = train.model_dump()
    after = applied.model_dump()
    out: dict[str, tuple[Any, Any]] = {}

    def walk(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str) -> None:
        for k in b:
            if isinstance(b[k], Mapping):
                walk(a.get(k, {}), b[k], f"{prefix}{k}.")
            elif a.get(k) != b[k] and k != "preset":
                out[f"{prefix}{k}"] = (a.get(k), b[k])

    walk(before, after, "train.")
    return out
