"""The shared PF bases under the name skill folders import them by (``from hasp.pf.bases import ...``).

Why: the shipped seed ``pf.py`` files, and every library copy of them on disk, import their bases
from here; a seed copy is trusted only while its bytes equal the shipped seed, so the import line
stays as it is and this module names the classes that live in ``hasp.pf.base``.
"""

from hasp.pf.base import AuditOnlyPF, FinalCheckPF, FinalHintPF, HintPF, TeacherVotePF

__all__ = ["AuditOnlyPF", "FinalCheckPF", "FinalHintPF", "HintPF", "TeacherVotePF"]
