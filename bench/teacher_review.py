"""The embedded teacher as the Phase E reviewer: does it review, or only fill the verdict's shape?

Why: the review JSON schema makes every reply of a llama.cpp-served teacher parse, so a parsed verdict
says nothing about whether the model read the candidate. This asks the teacher (``--teacher``, the
embedded Gemma-3-270M by default) for its verdict on recorded candidate skills twice, with the
prompt's example verdict shown (as the product asks) and with it left out, and counts how many
verdicts the product takes as the model's review and why the others were refused (a copy of the
example, scores outside [0, 1], a decision its own scores contradict). Greedy decoding: one sample per
candidate and arm. ``HASP_BENCH_NOTE`` says what else ran.

    python bench/teacher_review.py [--teacher gemma3-270m] [--limit N] [--no-write]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("The embedded teacher as the Phase E reviewer")
#: recorded Phase C candidates of the committed objective-B fixture (search skills, their clusters)
FIXTURE = ROOT / "tests" / "data" / "objective_b"


@contextlib.contextmanager
def without_example() -> Iterator[None]:
    """The arm without the example verdict: the JSON format instruction cut before its ``e.g.``."""
    from hasp.evolve import review

    shown = review.render

    def render(package: str, name: str, key: str, **fields: object) -> str:
        text = shown(package, name, key, **fields)
        return text.split(", e.g.", 1)[0] + "." if key == "format_json" else text

    review.render = render
    try:
        yield
    finally:
        review.render = shown


def candidates() -> list[tuple[object, object]]:
    from hasp.evolve.cluster import Cluster
    from hasp.evolve.propose import Candidate

    clusters = {}
    for path in sorted(FIXTURE.glob("*/epoch_0/clusters.json")):
        for c in json.loads(path.read_text()):
            cl = Cluster.from_dict(c)
            clusters.setdefault(cl.category, cl)
    out = []
    for path in sorted(FIXTURE.glob("*/epoch_0/candidates.json")):
        for d in json.loads(path.read_text()):
            c = Candidate.from_dict(d)
            if c.cluster_category in clusters:
                out.append((c, clusters[c.cluster_category]))
    return out


def refusal(review: object) -> str:
    """Why a verdict went to the heuristic, in a few words (empty: it is the model's review)."""
    reason = getattr(review, "fallback_reason", "")
    for key, label in (("repeats the prompt's example", "copies the example"),
                       ("outside [0, 1]", "scores outside [0, 1]"), ("contradicts its own scores", "self-contradiction"),
                       ("holds no word", "feedback holds no word"), ("lacks scores", "lacks scores"),
                       ("unavailable", "teacher unavailable")):
        if key in reason:
            return label
    return "other" if reason else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", default="gemma3-270m", help="embedded model that reviews")
    ap.add_argument("--limit", type=int, default=0, help="candidates (0: all of the fixture)")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    from hasp.config import LlamaCppParams, LLMParams, TeacherParams
    from hasp.evolve.review import review_candidate
    from hasp.llm.endpoints import teacher_client
    from hasp.llm.server import free_port

    pairs = candidates()[: a.limit or None]
    llm = LLMParams(llamacpp=LlamaCppParams(startup_timeout_s=600.0, parallel=2, ctx_per_slot=4096))
    teacher = teacher_client(TeacherParams(embedded=a.teacher, port=free_port()), llm)
    REPORT.line(f"teacher: embedded {a.teacher} on llama.cpp under the review JSON schema, greedy, one retry "
                f"(as Phase E); candidates: {len(pairs)} recorded Phase C proposals of {FIXTURE.relative_to(ROOT)}")
    try:
        for arm, ctx in (("example shown", contextlib.nullcontext()), ("no example", without_example())):
            t0 = time.perf_counter()
            with ctx:
                reviews = [review_candidate(c, 1.0, cl, teacher) for c, cl in pairs]
            by_model = [r for r in reviews if r.reviewer == "llm"]
            why = Counter(refusal(r) for r in reviews if r.reviewer != "llm")
            REPORT.line(f"{arm:<14} the model's reviews {len(by_model)}/{len(reviews)}; refused: "
                        f"{dict(why) or 'none'}; {time.perf_counter() - t0:.0f} s")
            for r, (c, _) in zip(reviews, pairs):
                first = (r.raw_reply or "").replace("\n", " ")[:110]
                REPORT.line(f"    {c.skill_id:<26} {r.reviewer:<9} {r.decision:<7} Q_skill {r.q_skill:.2f}  reply: {first}")
    finally:
        teacher.close()
    if not a.no_write:
        REPORT.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
