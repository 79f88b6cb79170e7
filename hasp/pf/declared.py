"""Compile a ``PFDeclaration`` into a ProgramFunction from fixed templates.

Every name in the declaration is looked up in ``hasp.pf.vocabulary`` at compile time; an unknown
name, a field the domain does not have, a source whose kind cannot feed the rewrite (a READ of a
question) or a placeholder with attribute or format syntax is a ``SkillFormatError`` naming the
file and the key. Nothing the declaration contains is ever evaluated as code: conditions become
closures over vocabulary functions and injected text is filled by plain concatenation. So a
declared PF is safe to run in-process, and at run time it never raises (a failure inside a
vocabulary function is logged and counted as "does not fire").
"""

from __future__ import annotations

import logging
import string
from collections.abc import Callable
from typing import Any

from hasp.pf.base import ProgramFunction, Teacher
from hasp.pf.conditions import compile_condition
from hasp.pf.declaration import PFDeclaration
from hasp.pf.intervention import MAX_REASON_CHARS, Intervention, InterventionType, shown_text
from hasp.pf.search_support import can_redirect_final, note_final_redirect
from hasp.pf.skill_md import SkillFormatError
from hasp.pf.vocabulary import ACTIONS, CONDITIONS, FIELDS, REWRITE_KINDS, SOURCES, Step

log = logging.getLogger(__name__)

#: longest argument a source may put into a rewritten action
MAX_ARG_CHARS = 300
#: domains that have a declarative vocabulary
DECLARATIVE_DOMAINS = ("search",)

_NAMES = {name: fn for name, (fn, _) in CONDITIONS.items()}
_FIELDS = {name: fn for name, (fn, _) in FIELDS.items()}


def _template(text: str, where: str) -> list[tuple[str, str | None]]:
    """``text`` as (literal, source name or None) pieces; only bare ``{source}`` placeholders."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as e:
        raise SkillFormatError(f"{where}: {e}") from e
    pieces = []
    for literal, name, spec, conv in parsed:
        if name is not None and (spec or conv or name not in SOURCES):
            raise SkillFormatError(f"{where}: placeholder {{{name}}} is not a source name; known: {sorted(SOURCES)}")
        pieces.append((literal, name))
    return pieces


class DeclaredPF(ProgramFunction):
    """A PF whose trigger and repair come from a declaration (see module doc)."""

    def __init__(self, skill_id: str, decl: PFDeclaration, where: str, domain: str = "search") -> None:
        if domain not in DECLARATIVE_DOMAINS:
            raise SkillFormatError(f"{where}: domain {domain!r} has no declarative vocabulary "
                                   f"(declared PFs: {', '.join(DECLARATIVE_DOMAINS)}); write a pf.py")
        self.skill_id, self.declaration = skill_id, decl
        bad = [w for w in decl.watches if w not in ACTIONS]
        if bad:
            raise SkillFormatError(f"{where}: watches: unknown action type(s) {bad}; known: {list(ACTIONS)}")
        self.watches = tuple(decl.watches)
        self.max_fires = decl.max_fires
        self.handler_kind = "code" if decl.vote else None
        self._when = [compile_condition(c, _NAMES, f"{where}: when", _FIELDS) for c in decl.when]
        self._sources: list[tuple[str, Callable[[Step], str | None]]] = []  # (source name, getter)
        self._text: list[tuple[str, str | None]] = []
        if decl.rewrite is not None:
            new = decl.rewrite.action
            if new not in ACTIONS:
                raise SkillFormatError(f"{where}: rewrite.action: unknown action type {new!r}; known: {list(ACTIONS)}")
            for name in decl.rewrite.sources:
                src = SOURCES.get(name)
                if src is None:
                    raise SkillFormatError(f"{where}: rewrite.arg: unknown source {name!r}; known: {sorted(SOURCES)}")
                if src.kind not in REWRITE_KINDS[new]:
                    raise SkillFormatError(f"{where}: rewrite.arg: source {name!r} yields a {src.kind}, which "
                                           f"{new} cannot take (it takes: {sorted(REWRITE_KINDS[new] - {'any'})})")
                if name == "arg" and set(self.watches) == {new}:
                    raise SkillFormatError(f"{where}: rewrite.arg: 'arg' would repeat the proposed {new} unchanged")
                self._sources.append((name, src.get))
        else:
            self._text = _template(decl.inject or "", f"{where}: inject")
        self.modify_only = decl.rewrite is not None
        self.reason = decl.reason or ("declared rewrite" if decl.rewrite else "declared hint")
        self._reason = _template(self.reason, f"{where}: reason")

    # ------------------------------------------------------------------ the two templates
    def _holds(self, s: Step) -> bool:
        return all(c(s) for c in self._when)

    def _target(self, s: Step) -> tuple[str, str] | None:
        """``(source name, argument)`` from the first source that yields one."""
        for name, get in self._sources:
            value = get(s)
            if value and value.strip():
                return name, value.strip()[:MAX_ARG_CHARS]
        return None

    @staticmethod
    def _fill(pieces: list[tuple[str, str | None]], s: Step, missing: str | None) -> str | None:
        """The template filled from the sources; a source yielding nothing gives ``missing``
        in its place, or None for the whole text when ``missing`` is None."""
        out = []
        for literal, name in pieces:
            out.append(literal)
            if name is not None:
                value = SOURCES[name].get(s)
                if not value:
                    if missing is None:
                        return None
                    value = missing
                out.append(value[:MAX_ARG_CHARS])
        return "".join(out)

    def _render(self, s: Step) -> str | None:
        return self._fill(self._text, s, None)  # a hint about nothing is not given

    def _why(self, s: Step) -> str:
        # the declared template is capped; what its sources fill in is held to the same cap
        return shown_text(self._fill(self._reason, s, "?") or self.reason, MAX_REASON_CHARS, one_line=True)

    def _decide(self, ctx: dict[str, Any], action_type: str, arg: str) -> Intervention | None:
        s = Step(ctx if isinstance(ctx, dict) else {}, str(action_type), arg if isinstance(arg, str) else "")
        if s.action not in self.watches or not self._holds(s):
            return None
        rw = self.declaration.rewrite
        if rw is None:
            text = self._render(s)
            return None if text is None else Intervention(type=InterventionType.INJECT_CONTEXT, context_text=text,
                                                          reason=self._why(s))
        if s.action == "FINAL" and rw.action != "FINAL" and not can_redirect_final(s.ctx):
            return None  # the episode's shared budget for turning answers back into lookups
        found = self._target(s)
        if found is None or (rw.action, found[1]) == (s.action, s.arg.strip()):
            return None
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type=rw.action, new_action_arg=found[1],
                            reason=self._why(s), source=found[0])

    def _safe_decide(self, ctx: dict[str, Any], action_type: str, arg: str) -> Intervention | None:
        try:
            return self._decide(ctx, action_type, arg)
        except Exception as e:  # noqa: BLE001 - a declared PF never raises into the loop
            log.warning("declared PF %s did not fire: %s: %s", self.skill_id, type(e).__name__, e)
            return None

    # ------------------------------------------------------------------ the PF interface
    def should_activate(self, ctx: dict[str, Any], action_type: str, arg: str) -> bool:
        return self._safe_decide(ctx, action_type, arg) is not None

    def intervene(self, ctx: dict[str, Any], action_type: str, arg: str,
                  teacher: Teacher | None = None) -> Intervention:
        found = self._safe_decide(ctx, action_type, arg)
        if found is None:
            return Intervention(type=InterventionType.NOOP, reason="conditions no longer hold")
        if found.type is InterventionType.MODIFY_ACTION and action_type == "FINAL" and found.new_action_type != "FINAL":
            note_final_redirect(ctx)
        return found

    def check_final(self, ctx: dict[str, Any], answer: str, teacher: Teacher | None = None) -> str | None:
        if not self.declaration.vote:
            return None
        try:
            s = Step(ctx, "FINAL", answer or "")
            return self._why(s) if self._holds(s) else None
        except Exception as e:  # noqa: BLE001
            log.warning("declared PF %s did not vote: %s: %s", self.skill_id, type(e).__name__, e)
            return None

    # ------------------------------------------------------------------ display
    @property
    def prompt_equivalent(self) -> bool:
        """A+B (App. B.5): only injects, and the text has no placeholder (a constant)."""
        return self.declaration.inject is not None and all(name is None for _, name in self._text)

    def compiled(self) -> str:
        """The compiled PF written out as the Python its templates amount to (for ``hasp skills show``)."""
        d = self.declaration

        def cond(c: Any) -> str:
            if isinstance(c, str):
                return f"not {cond(c[1:])}" if c.startswith("!") else f"{c}(step)"
            if "any" in c:
                return "(" + " or ".join(cond(x) for x in c["any"]) + ")"
            if "not" in c:
                return f"not {cond(c['not'])}"
            return f"{c['field']}(step) {c['op']} {c['value']!r}"

        test = " and ".join(cond(c) for c in d.when) or "True"
        lines = [f"class {''.join(p.title() for p in self.skill_id.split('_'))}PF(ProgramFunction):",
                 f"    watches = {tuple(self.watches)!r}", f"    max_fires = {d.max_fires!r}",
                 f"    handler_kind = {self.handler_kind!r}", "",
                 "    def should_activate(self, ctx, action_type, arg):",
                 "        step = Step(ctx, action_type, arg)",
                 f"        return action_type in self.watches and {test} and self.repair(step) is not None", "",
                 "    def repair(self, step):"]
        if d.rewrite is not None:
            srcs = " or ".join(f"{n}(step)" for n in d.rewrite.sources)
            if "FINAL" in self.watches and d.rewrite.action != "FINAL":
                lines.append("        if step.action == 'FINAL' and not can_redirect_final(step.ctx): return None")
            lines.append(f"        target = {srcs}")
            lines.append(f"        return None if not target or target == step.arg else "
                         f"MODIFY_ACTION({d.rewrite.action!r}, target[:{MAX_ARG_CHARS}], reason={self.reason!r})")
        else:
            parts = " + ".join([repr(lit) for lit, _ in self._text if lit] or ["''"])
            if any(n for _, n in self._text):
                parts = "fill(" + repr(d.inject) + ", " + ", ".join(f"{n}=({n}(step) or ABSTAIN)"
                                                                      for _, n in self._text if n) + ")"
            lines.append(f"        return INJECT_CONTEXT({parts}, reason={self.reason!r})")
        if d.vote:
            lines += ["", "    def check_final(self, ctx, answer, teacher=None):",
                      f"        step = Step(ctx, 'FINAL', answer)\n        return {self.reason!r} if {test} else None"]
        return "\n".join(lines)


def compile_declaration(skill_id: str, decl: PFDeclaration, where: str, domain: str = "search") -> DeclaredPF:
    """The PF of a declaration; raises ``SkillFormatError`` (naming ``where`` and the key) if invalid."""
    return DeclaredPF(skill_id, decl, where, domain)
