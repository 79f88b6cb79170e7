"""Correct answers a PF took away: the policy proposed ``FINAL[<gold>]`` and a PF rewrote the step.

Why: a PF that rewrites actions can hurt as well as help. On the embedded model a trained policy
learns to answer right after its search, and a seed PF that insists on reading first rewrites
that correct answer into a READ; the episode then often runs out of steps. EM alone shows only
that the trained PF agent scores less than it could; this count shows where the answers went, per
arm, from the trajectory files any evaluation writes (full or archived, see
``hasp.track.grid_archive``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hasp.domains.search.metrics import exact_match


def blocked_answers(episode: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The steps of one episode (a trajectory record as written to JSON lines) where the policy's
    own action was a FINAL matching a gold answer and the action that ran was something else:
    ``[{"step", "to", "skill_ids"}]``."""
    golds = list(episode.get("answers") or [])
    out = []
    for s in episode.get("steps") or []:
        au = s.get("audit") or {}
        orig, final = au.get("a_orig") or {}, au.get("a_final") or {}
        if orig.get("type") != "FINAL" or not golds or not exact_match(orig.get("arg"), golds):
            continue
        if final.get("type") == "FINAL" and exact_match(final.get("arg"), golds):
            continue
        sids = sorted({f.get("skill_id") for f in au.get("fired") or []
                       if f.get("type") == "MODIFY_ACTION" and f.get("applied", True) and f.get("skill_id")})
        out.append({"step": s.get("index"), "to": f"{final.get('type')}[{final.get('arg', '')}]", "skill_ids": sids})
    return out


def blocked_in_file(path: Path) -> dict[str, Any]:
    """Over one trajectory file: ``{"n": episodes, "episodes": episodes with a correct FINAL
    rewritten, "by_skill": {skill_id: rewrites}}``; an unreadable or missing file gives ``n = 0``."""
    n, hit, by_skill = 0, 0, {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    for line in lines:
        if not line.strip():
            continue
        try:
            ep = json.loads(line)
        except ValueError:
            continue
        n += 1
        found = blocked_answers(ep)
        hit += bool(found)
        for b in found:
            for sid in b["skill_ids"] or ["(no PF named)"]:
                by_skill[sid] = by_skill.get(sid, 0) + 1
    return {"n": n, "episodes": hit, "by_skill": dict(sorted(by_skill.items()))}
