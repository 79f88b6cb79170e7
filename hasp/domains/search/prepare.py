"""Write the generated multi-hop benchmark a params file describes (``hasp data prepare``).

It lives with the search domain, below evolution and evaluation, because both need the data:
the epoch's rollouts read it and ``hasp eval --dataset generated`` writes it when it is missing.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from hasp.config import Params
from hasp.domains.search.generator import generate_benchmark, write_benchmark


def prepare_data(params: Params, out_dir: Path) -> dict[str, Any]:
    """Generate the benchmark (hop mix ``data.hop_weights``) and write corpus + splits; returns counts
    per split and hop."""
    d = params.data
    bench = generate_benchmark(d.seed, d.n_questions, hop_weights=d.hop_weights)
    paths = write_benchmark(bench, out_dir, seed=d.seed, fractions=tuple(d.fractions))
    counts = {k: sum(1 for _ in open(p, encoding="utf-8")) for k, p in paths.items()}
    return {"counts": counts, "hops": dict(Counter(q.hops for q in bench.questions))}
