"""The code PF shape "scan the submitted code, quote the lines that look wrong".

Why a base: every code seed PF parses the FINAL's code, asks one finder for
``(line, why)`` findings and formats them the same way; only the finder, the tag
and the advice differ.
"""

from __future__ import annotations

from typing import Any, ClassVar

from hasp.domains.code.task import CodeView, code_view, format_findings
from hasp.pf.base import FindingsPF


class CodeFindingsPF(FindingsPF):
    """``find(ctx, view)`` lists findings on the parsed code; the hint is ``label``, the lines, ``advice``."""

    max_fires: ClassVar[int | None] = 1
    text_attrs = ("advice",)
    advice: ClassVar[str] = ""
    #: False for finders that report on code that does not parse
    needs_tree: ClassVar[bool] = True

    def find(self, ctx: dict[str, Any], view: CodeView) -> list[tuple[int, str]]:
        raise NotImplementedError

    def scan(self, ctx: dict[str, Any], arg: str) -> list[tuple[int, str]]:
        view = code_view(arg)
        return self.find(ctx, view) if view.tree is not None or not self.needs_tree else []

    def render(self, ctx: dict[str, Any], arg: str, found: list[Any]) -> str:
        return format_findings(self.label, found, code_view(arg), self.advice)
