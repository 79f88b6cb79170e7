"""Builders for hand-made trajectories shared by the evolution tests."""

from __future__ import annotations

from hasp.records import Action, AuditEvent, StepRecord, Trajectory


def scripted_traj(qid: str, actions: list[tuple[str, str]], *, question: str = "q?", answers=("x",),
                  em: float = 0.0, prediction: str = "") -> Trajectory:
    """A PF-variant trajectory whose steps executed exactly ``actions`` (no PF changed anything)."""
    steps = []
    for i, (typ, arg) in enumerate(actions):
        fb = ({"n_hits": 1, "hit_ids": [f"d{i}"]} if typ == "SEARCH" else
              {"found": True, "doc_id": f"d{i}"} if typ == "READ" else {"final": True})
        steps.append(StepRecord(index=i, raw_output="", observation=f"text {i}",
                                audit=AuditEvent(state={}, a_orig=Action(typ, arg), a_final=Action(typ, arg),
                                                 feedback=fb)))
    return Trajectory(qid=qid, question=question, answers=list(answers), variant="pf", steps=steps,
                      prediction=prediction, em=em)
