"""Skill libraries load from several threads at once (SAGE's chain rollouts each load their own copy):
every thread must get every seed PF of the library, none registered into another thread's load."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hasp.pf.library import load_library

SEEDS = Path(__file__).resolve().parents[1] / "hasp" / "skills" / "search"


def test_concurrent_loads_each_get_every_seed_pf() -> None:
    alone = load_library(SEEDS, "search")
    want = sorted(s.skill_id for s in alone.skills)
    assert want and not alone.load_errors
    alone.close()

    def load(_: int) -> tuple[list[str], list[str]]:
        lib = load_library(SEEDS, "search")
        try:
            return sorted(s.skill_id for s in lib.skills), list(lib.load_errors)
        finally:
            lib.close()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so imports interleave as they do under load
    try:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(load, range(32)))
    finally:
        sys.setswitchinterval(interval)
    for ids, errors in results:
        assert errors == [] and ids == want
