"""Bench code that the suite does not otherwise run: the pieces a bench builds its input from."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_sage_pool_of_the_training_throughput_bench_builds_chain_rewards(tmp_path):
    """``bench/train_throughput.py`` gives every SAGE chain task its skill-integrated reward."""
    sys.path.insert(0, str(ROOT / "bench"))
    import train_throughput

    from hasp.config import Params
    from hasp.domains.search.prepare import prepare_data
    from hasp.domains.search.task import SearchTask
    from hasp.records import HarnessRecord, Trajectory
    from hasp.train.chains import SAGE_KEY

    prepare_data(Params.model_validate({"data": {"n_questions": 40}}), tmp_path)
    questions = SearchTask.load(tmp_path).questions("train")
    pool = [Trajectory(qid=str(q.id), question=q.question, answers=list(q.answers), variant="pf",
                       harness=HarnessRecord()) for q in questions for _ in range(2)]
    trajs, chains = train_throughput.policy_gradient_pool(pool, "sage", questions)
    assert chains and len(trajs) == 4 * len(chains)
    records = [t.harness.postprocess[SAGE_KEY] for t in trajs]
    assert {r["position"] for r in records} == {0, 1}
    assert all(isinstance(r["reward"], float) for r in records)
    assert any(r["reward"] >= 2.0 for r in records)  # a solved first task whose skill the second used
