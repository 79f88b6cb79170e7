"""A skill's user-facing texts as data: hasp.yaml ``texts:`` sets a PF's text attributes.

Why: a seed PF built on a shared base (``hasp.pf.base``) differs from its siblings in
its logic and in what it says (a label, a closing line, advice). Written as class
attributes, the texts made every pf.py repeat the same block with other strings; as data
next to the skill's other words (summary, phase texts) the pf.py holds only its logic,
and the texts can be read and edited without reading code.

Only the attributes a PF class names in ``text_attrs`` (its own and its bases') may be
set, and only where the class already has a string there: a typo, or a key that would
change what the PF does rather than what it says, is one error line naming the file and
the key, never a silently ignored setting.
"""

from __future__ import annotations

from hasp.pf.base import ProgramFunction
from hasp.pf.skill_md import SkillFormatError


def text_attrs(pf_class: type[ProgramFunction]) -> list[str]:
    """The text attributes ``pf_class`` accepts: every ``text_attrs`` along its MRO that is a string there."""
    names = {n for c in pf_class.__mro__ for n in vars(c).get("text_attrs", ())}
    return sorted(n for n in names if isinstance(getattr(pf_class, n, None), str))


def apply_texts(pf: ProgramFunction, texts: dict[str, str], source: str) -> ProgramFunction:
    """Set ``texts`` on ``pf`` (this instance only); a key the class does not accept raises naming it."""
    allowed = text_attrs(type(pf))
    for key in texts:
        if key not in allowed:
            raise SkillFormatError(f"{source}: texts: unknown key {key!r} for {type(pf).__name__} "
                                   f"(allowed: {', '.join(allowed) or 'none'})")
    for key, value in texts.items():
        setattr(pf, key, value)
    return pf
