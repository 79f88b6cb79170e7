"""The PF runtime: interface, registry, SKILL.md, library and dispatcher.

Skill code imports its building blocks from here::

    from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf
"""

from hasp.pf.base import ProgramFunction, Teacher
from hasp.pf.intervention import Intervention, InterventionType
from hasp.pf.registry import register_pf

__all__ = ["Intervention", "InterventionType", "ProgramFunction", "Teacher", "register_pf"]
