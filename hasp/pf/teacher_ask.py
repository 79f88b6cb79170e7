"""The teacher calls of PFs under the name skill folders import them by (``hasp.pf.teacher_ask``).

Why: the shipped seed ``pf.py`` files, and every library copy of them on disk, import these from
here; a seed copy is trusted only while its bytes equal the shipped seed, so the import line stays
as it is and this module names the functions that live in ``hasp.pf.teacher``.
"""

from hasp.pf.teacher import ask_teacher, teacher_directive, teacher_objection

__all__ = ["ask_teacher", "teacher_directive", "teacher_objection"]
