"""YAML and JSON parsers for text nobody vetted (skill folder files, model replies), with limits.

Why: PyYAML and ``json`` expand aliases, recurse once per nesting level and turn any digit string
into an ``int``. On hostile text that is a MemoryError after a minute (an alias bomb), a
RecursionError (a reply ending in 600 unclosed ``[``) or a ValueError from Python's int-string
limit (a 5,000-digit integer) -- none of them naming the input, each one ending whatever phase
or command was reading. Here every such input is a ``ParseRefused`` with one line naming where,
raised before the cost is paid: no YAML aliases or anchors, a nesting depth cap, a node budget,
a size cap and integers of at most ``MAX_INT_DIGITS`` digits.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

#: deeper than any skill file or reply the project writes (a hasp.yaml ``pf.when`` is ~5 levels)
MAX_DEPTH = 32
#: YAML nodes in one document (a seed hasp.yaml has a few hundred)
MAX_NODES = 20_000
#: digits of one integer (Python refuses int() of more than 4,300)
MAX_INT_DIGITS = 64
#: characters of one document
MAX_CHARS = 512 * 1024


class ParseRefused(ValueError):
    """Text a bounded parser will not read; the message is one line, with the line number when known."""


def _line(mark: Any) -> str:
    return f"line {mark.line + 1}: " if mark is not None else ""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class _BoundedLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses aliases and anchors, and counts depth and nodes while composing."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise ParseRefused(f"{_line(event.start_mark)}YAML anchors and aliases are not allowed")
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise ParseRefused(f"{_line(event.start_mark)}more than {MAX_NODES} YAML nodes")
        if self._depth >= MAX_DEPTH:
            raise ParseRefused(f"{_line(event.start_mark)}nested deeper than {MAX_DEPTH} levels")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _bounded_int(loader: _BoundedLoader, node: yaml.ScalarNode) -> int:
    digits = sum(c.isdigit() for c in str(node.value))
    if digits > MAX_INT_DIGITS:
        raise ParseRefused(f"{_line(node.start_mark)}integer of {digits} digits (at most {MAX_INT_DIGITS})")
    return yaml.SafeLoader.construct_yaml_int(loader, node)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _bounded_int)


def _size(text: str) -> None:
    if len(text) > MAX_CHARS:
        raise ParseRefused(f"{len(text)} characters (at most {MAX_CHARS})")


def yaml_load(text: str) -> Any:
    """One YAML document from ``text`` (safe tags only); every refusal or syntax error is ``ParseRefused``."""
    _size(text)
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    except ParseRefused:
        raise
    except yaml.MarkedYAMLError as e:
        raise ParseRefused(_one_line(f"{_line(e.problem_mark)}{e.problem or e.context or 'invalid YAML'}")) from None
    except (yaml.YAMLError, ValueError, TypeError) as e:  # e.g. a date that does not exist
        raise ParseRefused(_one_line(f"{type(e).__name__}: {e}")) from None
    except RecursionError:  # not expected under MAX_DEPTH; kept so no input can escape as one
        raise ParseRefused(f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")


def _json_depth(text: str) -> int:
    depth = deepest = 0
    for ch in _BRACKET.findall(_JSON_STRING.sub("", text)):
        depth += 1 if ch in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _json_int(digits: str) -> int:
    n = len(digits.lstrip("-"))
    if n > MAX_INT_DIGITS:
        raise ParseRefused(f"integer of {n} digits (at most {MAX_INT_DIGITS})")
    return int(digits)


def json_load(text: str) -> Any:
    """``json.loads`` under the same limits: depth checked on the brackets before parsing, big integers
    and the non-JSON constants ``NaN`` / ``Infinity`` refused (a model's score must be a number), a
    float that overflows to infinity too; a syntax error stays a ``json.JSONDecodeError`` (all are
    ``ValueError``)."""
    _size(text)
    depth = _json_depth(text)
    if depth > MAX_DEPTH:
        raise ParseRefused(f"nested {depth} levels deep (at most {MAX_DEPTH})")
    return json.loads(text, parse_int=_json_int, parse_constant=_json_constant, parse_float=_json_float)


def _json_constant(name: str) -> Any:
    raise ParseRefused(f"{name} is not a JSON number")


def _json_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ParseRefused(f"{text[:40]} overflows a float")
    return value
