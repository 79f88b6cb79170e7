"""Write the generated multi-hop benchmark a params file describes (``hasp data prepare``).

It lives with the search domain, below evolution and evaluation, because both need the data:
the epoch's rollouts read it and ``hasp eval --dataset generated`` writes it when it is missing.
``data.version`` picks the generator: 1 (``generator``) or the harder 2 (``generator_v2``); both
write ``templates.json`` beside the splits, so the folder has the same files whichever ran.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from hasp.config import Params
from hasp.domains.search import generator_v2
from hasp.domains.search.generator import (
    generate_benchmark,
    split,
    template_catalogue,
    write_benchmark,
    write_templates,
)


def prepare_data(params: Params, out_dir: Path) -> dict[str, Any]:
    """Generate the benchmark (generator ``data.version``, hop mix ``data.hop_weights``) and write corpus,
    splits and templates; returns counts per split and hop (version 2: and the unseen test questions)."""
    d = params.data
    fractions = (d.fractions[0], d.fractions[1], d.fractions[2])
    if d.version == 2:
        bench = generator_v2.generate_benchmark_v2(d.seed, d.n_questions, hop_weights=d.hop_weights,
                                                   fractions=fractions)
        paths = generator_v2.write_benchmark_v2(bench, out_dir)
        questions, extra = bench.questions, generator_v2.summary(bench)
    else:
        v1 = generate_benchmark(d.seed, d.n_questions, hop_weights=d.hop_weights)
        paths = write_benchmark(v1, out_dir, seed=d.seed, fractions=fractions)
        write_templates(out_dir / "templates.json", version=1, catalogue=template_catalogue(),
                        splits={k: [v1.templates[q.id] for q in qs] for k, qs in split(v1, d.seed, fractions).items()})
        questions, extra = list(v1.questions), {}
    counts = {k: sum(1 for _ in open(paths[k], encoding="utf-8")) for k in ("corpus", "train", "val", "test")}
    return {"counts": counts, "hops": dict(Counter(q.hops for q in questions)), **extra}
