"""The vocabulary answer extractor beside a score: its ceiling on gold support, and how many of a
PF agent's correct answers it wrote.

Why: a declared PF whose rewrite answers with an answer source of the vocabulary
(``answer_span_from_results``, ``answer_span_from_evidence``, ...) puts the hand-written extractor
``hasp.pf.search_support.answer_span`` in the policy's place. A score that leans on such rewrites
says little until it is read beside two figures: what that extractor gets right when the agent has
read exactly the documents that hold the answer (its ceiling), and the share of the agent's correct
answers that came from such a rewrite rather than from the policy.

The ceiling calls the same source a declared PF calls (``CEILING_SOURCE``) on the step context the
agent's loop builds (``EpisodeState.to_ctx``) after READs of the question's gold support documents in
hop order, and scores the span with the agent's scorer (``hasp.domains.search.task.score``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from hasp.agent.context import EpisodeState
from hasp.domains.search.task import score
from hasp.pf.vocabulary import SOURCES, Step
from hasp.records import Trajectory
from hasp.stats import rate

#: the vocabulary source the ceiling asks: the read documents first, then the last results
CEILING_SOURCE = "answer_span_from_evidence"
#: sources that answer with the extractor: a FINAL rewritten from one of them is the extractor's answer
ANSWER_SOURCES = frozenset(name for name, src in SOURCES.items() if src.kind == "answer")
#: the oracle row of an evaluation table
ORACLE_LABEL = "extractor | gold support"
#: cell-summary keys (``metrics.json``)
CEILING_KEY = "extractor_ceiling"
VIA_REWRITE_KEY = "correct_via_vocabulary_rewrite"

#: doc id -> the document's contents as a READ records them, or None when the corpus lacks it
CorpusLookup = Callable[[str], "str | None"]


def gold_support_answer(question: str, documents: Sequence[str]) -> str | None:
    """The extractor's answer once the agent has read ``documents`` (in order) and nothing else."""
    state = EpisodeState(question=question, max_steps=len(documents) + 2)
    for i, text in enumerate(documents):
        state.action_history.append(f"READ[gold{i}]")
        state.record_read(f"gold{i}", text)
        state.step_count += 1
    return SOURCES[CEILING_SOURCE].get(Step(state.to_ctx(), "FINAL", ""))


def extractor_ceiling(questions: Iterable[Any], corpus_lookup: CorpusLookup) -> dict[str, Any]:
    """The extractor's EM (Wilson 95 % interval) and mean F1 on each question's gold support.

    ``questions`` are ``QAItem``-like (``question``, ``answers``, ``support``: doc ids in hop order).
    A question none of whose support documents the corpus holds (AgentFlow files list none) is
    counted in ``no_support`` and left out of ``n``, EM and F1: the ceiling is undefined there."""
    ems: list[float] = []
    f1s: list[float] = []
    total = 0
    for q in questions:
        total += 1
        docs = [d for d in (corpus_lookup(str(i)) for i in getattr(q, "support", None) or ()) if d]
        if not docs:
            continue
        em, f1 = score(gold_support_answer(str(q.question), docs) or "", list(q.answers))
        ems.append(em)
        f1s.append(f1)
    r = rate(ems)
    return {"source": CEILING_SOURCE, "n": r.n, "em": round(r.p, 4), "em_k": r.k,
            "em_ci95": [round(r.lo, 4), round(r.hi, 4)], "f1": round(sum(f1s) / len(f1s), 4) if f1s else 0.0,
            "no_support": total - r.n, "n_questions": total}


def retriever_lookup(retriever: Any) -> CorpusLookup:
    """A search dataset's retriever as a corpus lookup (the ``contents`` a READ records)."""
    def lookup(doc_id: str) -> str | None:
        doc = retriever.get(doc_id) if retriever is not None else None
        text = doc.get("contents") if isinstance(doc, Mapping) else None
        return str(text) if text else None
    return lookup


def answered_by_vocabulary_rewrite(traj: Trajectory) -> bool:
    """Did the episode's answer come from a declared PF's rewrite whose argument an answer source gave?

    The answering step is the last one (a FINAL ends the episode), its applied rewrite names the
    source, and the recorded prediction is that step's answer (a teacher-rewritten or budget-turn
    answer is not the extractor's)."""
    audits = traj.audits()
    if traj.terminated != "final" or not audits:
        return False
    last = audits[-1]
    if last.a_final.type != "FINAL" or last.a_final.arg != traj.prediction or not last.was_modified:
        return False
    return any(f.get("type") == "MODIFY_ACTION" and f.get("applied", True) and f.get("source") in ANSWER_SOURCES
               for f in last.fired)


def vocabulary_rewrite_share(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """Of the correct answers (EM > 0), how many the extractor wrote: ``{"k", "n", "share"}``."""
    correct = [t for t in trajs if t.em > 0]
    k = sum(1 for t in correct if answered_by_vocabulary_rewrite(t))
    return {"k": k, "n": len(correct), "share": round(k / len(correct), 4) if correct else 0.0}


def ceiling_of(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The dataset's ceiling from its cells' summaries (every cell of a dataset carries the same one)."""
    return next((s[CEILING_KEY] for s in summaries.values() if isinstance(s.get(CEILING_KEY), Mapping)), None)


def ceiling_text(c: Mapping[str, Any]) -> str:
    """``"0.400 [0.23, 0.59]"``, or "–" when no question had support."""
    if not c.get("n"):
        return "–"
    lo, hi = c.get("em_ci95") or (0.0, 1.0)
    return f"{float(c['em']):.3f} [{float(lo):.2f}, {float(hi):.2f}]"


def oracle_label(c: Mapping[str, Any]) -> str:
    """The oracle row's label; it says how many questions had no support to give the extractor."""
    missing = int(c.get("no_support") or 0)
    return ORACLE_LABEL + (f" ({missing} without support)" if missing else "")
