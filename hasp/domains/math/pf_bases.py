"""The math PF shape "check the answer against the reasoning, list what does not hold".

Why a base: the math seed checks share their trigger (FINAL), their text layout and one
exception: most checks are written for free-form problems and do not apply to Game of 24,
whose answer is an expression checked exactly elsewhere.
"""

from __future__ import annotations

from typing import Any, ClassVar

from hasp.domains.math.task import game24_numbers
from hasp.pf.base import FindingsPF


class MathFindingsPF(FindingsPF):
    """``FindingsPF`` on FINAL, off Game of 24 problems unless ``on_game24 = True``."""

    max_fires: ClassVar[int | None] = 2
    on_game24: ClassVar[bool] = False

    def applies(self, ctx: dict[str, Any]) -> bool:
        return self.on_game24 or not game24_numbers(ctx)
