"""Per-sample seeds of sampled episodes: a small module of its own so that training code that only
seeds its samples (``hasp.train.rounds``) does not depend on the episode recipe and the agent loop."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Seeded:
    """An item whose episode samples with its own ``seed`` (sent with every policy request of it).

    A training round asks for each question k times at a temperature above 0; without a seed every
    sample is the server's own draw and a run cannot be repeated. ``sampling_seed`` gives each (round,
    question, sample) a seed of its own, so the k samples still differ and the same round samples the
    same episodes when it runs again (exactly so on one llama.cpp slot: with several slots decoding
    together, a batch's composition can still change a token now and then)."""

    item: Any
    seed: int


def sampling_seed(*parts: object) -> int:
    """A 31-bit seed that depends only on ``parts`` (e.g. ``train.seed``, round, question, sample)."""
    digest = hashlib.sha256(":".join(str(x) for x in parts).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def unseeded(item: Any) -> tuple[Any, int | None]:
    """``(item, seed)`` of a ``Seeded`` item; ``(item, None)`` of any other."""
    return (item.item, item.seed) if isinstance(item, Seeded) else (item, None)
