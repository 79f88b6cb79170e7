"""Prompt text lives in YAML files shipped inside the package, next to the code that sends it.

A prompt in a file can be read, diffed and reworded without touching code, and one loader means
one error for a missing file or key. ``<package>/prompts/<name>.yaml`` maps keys to prompt text
(a few keys hold structured data, e.g. a demonstration as chat turns). Placeholders are
``str.format`` fields, so a literal brace in a prompt is written doubled.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from types import MappingProxyType
from typing import Any

import yaml


class PromptError(LookupError):
    """A prompt file or key the code asks for does not exist; the message names both."""


def _where(package: str, name: str) -> str:
    return f"{package.replace('.', '/')}/prompts/{name}.yaml"


@lru_cache(maxsize=None)
def load_prompts(package: str, name: str) -> Mapping[str, Any]:
    """Every entry of ``<package>/prompts/<name>.yaml``, read once per process."""
    try:
        text = resources.files(package).joinpath("prompts", f"{name}.yaml").read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError):
        raise PromptError(f"{_where(package, name)}: no such prompt file") from None
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise PromptError(f"{_where(package, name)}: top level must be a mapping of prompt names")
    return MappingProxyType(data)


def prompt(package: str, name: str, key: str) -> str:
    """The text of one prompt, unformatted."""
    entries = load_prompts(package, name)
    if key not in entries:
        raise PromptError(f"{_where(package, name)}: no prompt {key!r} (has: {', '.join(sorted(entries))})")
    text = entries[key]
    if not isinstance(text, str):
        raise PromptError(f"{_where(package, name)}: {key!r} is a {type(text).__name__}, not prompt text")
    return text


def render(package: str, name: str, key: str, **fields: object) -> str:
    """One prompt with its placeholders filled."""
    return prompt(package, name, key).format(**fields)
