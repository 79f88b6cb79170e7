"""SQuAD-style answer metrics for the search domain.

Why SQuAD normalisation: it is what HotpotQA / 2Wiki / MuSiQue / Search-R1 report, so numbers are
comparable, and it forgives the surface noise a small policy produces ("The Velm River." vs
"velm river"). Scores take the max over all gold aliases.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

__all__ = ["exact_match", "f1", "normalize_answer"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(text: str | None) -> str:
    """Lowercase, drop punctuation, drop articles (a/an/the), collapse whitespace."""
    text = (text or "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golds(golds: str | Sequence[str]) -> list[str]:
    return [golds] if isinstance(golds, str) else list(golds)


def exact_match(pred: str | None, golds: str | Sequence[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold, else 0.0."""
    p = normalize_answer(pred)
    return float(any(p == normalize_answer(g) for g in _golds(golds)))


def _f1_single(pred: str | None, gold: str) -> float:
    p, g = normalize_answer(pred).split(), normalize_answer(gold).split()
    if not p or not g:  # SQuAD convention: both empty -> 1, one empty -> 0
        return float(p == g)
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def f1(pred: str | None, golds: str | Sequence[str]) -> float:
    """Token-level F1 between prediction and gold, maximised over gold aliases (0.0 if none)."""
    return max((_f1_single(pred, g) for g in _golds(golds)), default=0.0)
