"""Correct answers a PF took away: the policy proposed ``FINAL[<gold>]`` and a PF rewrote the step.

Why: a PF that rewrites actions can hurt as well as help. On the embedded model a trained policy
learns to answer right after its search, and a seed PF that insists on reading first rewrites
that correct answer into a READ; the episode then often runs out of steps. EM alone shows only
that the trained PF agent scores less than it could; this count shows where the answers went, per
arm, from the trajectory files any evaluation writes (full or archived, see
``hasp.track.grid_archive``). Evolution reads the same steps on its training rollouts: a PF that
took away a correct answer there is one to revise (``hasp.evolve.detectors``). The gold answers
are labels of the split the trajectories ran on, so this is only ever used on training or test
trajectories that are being scored anyway, never to steer an episode.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hasp.domains.search.metrics import exact_match
from hasp.records import Trajectory


def blocked_answers(traj: Trajectory) -> list[dict[str, Any]]:
    """The steps of one episode where the policy's own action was a FINAL matching a gold answer
    and the action that ran was something else: ``[{"step", "to", "skill_ids"}]``, ``skill_ids``
    being the PFs whose applied MODIFY_ACTION made the change."""
    out = []
    for s in traj.steps:
        au = s.audit
        if au is None or not traj.answers or au.a_orig.type != "FINAL" or not exact_match(au.a_orig.arg, traj.answers):
            continue
        if au.a_final.type == "FINAL" and exact_match(au.a_final.arg, traj.answers):
            continue
        sids = sorted({str(f["skill_id"]) for f in au.fired
                       if f.get("type") == "MODIFY_ACTION" and f.get("applied", True) and f.get("skill_id")})
        out.append({"step": s.index, "to": au.a_final.render(), "skill_ids": sids})
    return out


def blocked_in_file(path: Path) -> dict[str, Any]:
    """Over one trajectory file: ``{"n": episodes read, "episodes": episodes with a correct FINAL
    rewritten, "by_skill": {skill_id: rewrites}, "unreadable": lines skipped}``; a missing file
    gives ``n = 0``."""
    n, hit, bad, by_skill = 0, 0, 0, {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    for line in lines:
        if not line.strip():
            continue
        try:
            traj = Trajectory.from_dict(json.loads(line))
        except (ValueError, TypeError, KeyError):
            bad += 1
            continue
        n += 1
        found = blocked_answers(traj)
        hit += bool(found)
        for b in found:
            for sid in b["skill_ids"] or ["(no PF named)"]:
                by_skill[sid] = by_skill.get(sid, 0) + 1
    return {"n": n, "episodes": hit, "by_skill": dict(sorted(by_skill.items())), "unreadable": bad}
