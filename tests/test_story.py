"""The epoch story `hasp demo` prints is read off the epoch folder: proposals as written, gate numbers
with n and intervals, admission, and the test EM before/after with the paired difference."""

from __future__ import annotations

import json
from pathlib import Path

from hasp.evolve.story import epoch_story


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_story_tells_proposal_gate_admission_and_before_after(tmp_path):
    ep = tmp_path / "epoch_0"
    ep.mkdir()
    (ep / "candidates.json").write_text(json.dumps([
        {"skill_id": "seen_answer", "proposal_format": "declarative", "cluster_category": "answer_seen_not_given",
         "raw_reply": "WATCH? 2) READ\nWHEN? 2) evidence_has_answer\nREPAIR? 2)",
         "declaration": {"watches": ["READ"], "when": ["evidence_has_answer"]}},
        {"skill_id": "no_help", "proposal_format": "declarative", "cluster_category": "answer_seen_not_given",
         "raw_reply": "", "parse_error": "no WHEN named"}]))
    (ep / "validation.json").write_text(json.dumps([{"skill_id": "seen_answer", "q_exec": 1.0, "passed": True}]))
    (ep / "reviews.json").write_text(json.dumps([{"skill_id": "seen_answer", "decision": "ACCEPT", "q_skill": 0.88,
                                                  "reviewer": "heuristic", "trigger_hit_rate": 0.7}]))
    (ep / "gate.json").write_text(json.dumps([{"skill_id": "seen_answer", "n": 8, "base_em": 0.0, "em_val": 0.25,
                                               "delta_em": 0.25, "error": ""}]))
    (ep / "admission.json").write_text(json.dumps([
        {"skill_id": "seen_answer", "admitted": True, "version": 1, "reason": "passed gates parse+exec+teacher+val"},
        {"skill_id": "no_help", "admitted": False, "reasons": ["parse: no WHEN named"]}]))
    qids = [f"q{i}" for i in range(8)]
    _jsonl(ep / "val_baseline.jsonl", [{"qid": q, "em": 0.0} for q in qids])
    _jsonl(ep / "val_runs" / "val__seen_answer.jsonl", [{"qid": q, "em": float(i < 2)} for i, q in enumerate(qids)])
    _jsonl(tmp_path / "eval" / "generated" / "pf_before.jsonl", [{"qid": q, "em": 0.0} for q in qids])
    _jsonl(tmp_path / "eval" / "generated" / "pf.jsonl", [{"qid": q, "em": float(i < 2)} for i, q in enumerate(qids)])
    text = "\n".join(epoch_story(ep, {"pf_before": {"n": 8, "em": 0.0}, "pf": {"n": 8, "em": 0.25}},
                                 tmp_path / "eval"))
    assert "| WHEN? 2) evidence_has_answer" in text and "refused at parse: no WHEN named" in text
    assert "Phase D: Q_exec 1.00 (passed)" in text and "review: ACCEPT Q_skill 0.880" in text
    assert "val gate: EM 0.000 [0.00, 0.32] -> 0.250 [0.07, 0.59] (n=8)" in text
    assert "decision: admitted (version 1; passed gates" in text and "decision: rejected: parse: no WHEN" in text
    assert "PF agent after - before (same questions): +0.250 [+0.000, +0.625] (n=8)" in text


def test_story_of_an_empty_folder_is_short_not_an_error(tmp_path):
    lines = epoch_story(tmp_path)
    assert lines[0].startswith("Failures found: 0") and "Proposals: 0" in lines
