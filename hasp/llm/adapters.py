"""A trained checkpoint as vLLM serves it: a base model plus, optionally, one LoRA adapter by name.

Training writes ``<out>/adapter`` (PEFT) and ``<out>/merged`` (the adapter merged into the base).
``transformers serve`` runs the merged folder; vLLM runs the base with the adapter beside it
(``--enable-lora``), so no merge is needed and one server can hold several adapters. The adapter's
own ``adapter_config.json`` names the base it was trained on (``base_model_name_or_path``): a later
round of RS / OPD trains on the previous round's merged folder, so its adapter only means something on
that base, and the base is always read from the adapter rather than assumed.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from hasp.config import VLLM_LORA_RANKS

ADAPTER_CONFIG = "adapter_config.json"


class AdapterError(ValueError):
    """A folder that cannot be served as asked; the message is one line naming the file."""


@dataclass(frozen=True)
class Checkpoint:
    """What to serve: ``base`` (a folder or hub name) and the adapter folder, if any, under ``name``."""

    base: str
    adapter: Path | None = None
    name: str | None = None

    @property
    def model(self) -> str:
        """The ``model`` a client sends: the adapter's name, else the base."""
        return self.name or self.base

    def lora_module(self) -> str:
        """The ``--lora-modules`` entry (``name=path``)."""
        assert self.adapter is not None and self.name is not None
        return f"{self.name}={self.adapter}"


def adapter_name(adapter: Path) -> str:
    """A stable, readable name for an adapter folder: the folders above it plus a hash of its path,
    so two runs' ``round_0/adapter`` never share a name on one server."""
    path = Path(adapter).resolve()
    parts = [p for p in path.parts[-4:] if p not in ("adapter", "/")]
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(parts[-3:])).strip("-") or "adapter"
    return f"{stem}-{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"


def read_adapter_config(adapter: Path) -> dict:
    path = Path(adapter) / ADAPTER_CONFIG
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AdapterError(f"{path}: no such file; not a PEFT adapter folder") from None
    except (OSError, json.JSONDecodeError) as e:
        raise AdapterError(f"{path}: unreadable ({e})") from None
    if not isinstance(cfg, dict) or cfg.get("peft_type", "LORA") != "LORA":
        raise AdapterError(f"{path}: peft_type is {cfg.get('peft_type') if isinstance(cfg, dict) else cfg!r}, "
                           "only LORA adapters can be served")
    return cfg


def adapter_rank(adapter: Path) -> int:
    """The LoRA rank ``r`` (the largest one when ``rank_pattern`` sets some per module)."""
    cfg = read_adapter_config(adapter)
    ranks = [cfg.get("r")] + list((cfg.get("rank_pattern") or {}).values())
    ranks = [r for r in ranks if isinstance(r, int) and r > 0]
    if not ranks:
        raise AdapterError(f"{Path(adapter) / ADAPTER_CONFIG}: r is missing or not a positive integer")
    return max(ranks)


def vllm_rank(rank: int) -> int:
    """The smallest ``--max-lora-rank`` vLLM accepts that covers ``rank``."""
    for r in VLLM_LORA_RANKS:
        if r >= rank:
            return r
    raise AdapterError(f"LoRA rank {rank} is above vLLM's largest --max-lora-rank ({VLLM_LORA_RANKS[-1]})")


def adapter_checkpoint(adapter: Path, name: str | None = None) -> Checkpoint:
    """The adapter folder on the base it was trained on."""
    adapter = Path(adapter).resolve()
    base = read_adapter_config(adapter).get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        raise AdapterError(f"{adapter / ADAPTER_CONFIG}: base_model_name_or_path is missing")
    return Checkpoint(base=base, adapter=adapter, name=name or adapter_name(adapter))


def adapter_folder_of(path: Path) -> Path | None:
    """The PEFT adapter a folder names: itself when it is one, the ``adapter`` beside a training ``merged``
    folder, else None (a plain model folder)."""
    path = Path(path)
    if (path / ADAPTER_CONFIG).is_file():
        return path.resolve()
    sibling = path.parent / "adapter"
    if path.name == "merged" and (sibling / ADAPTER_CONFIG).is_file():
        return sibling.resolve()
    return None


def resolve_checkpoint(folder: Path | str) -> Checkpoint:
    """What vLLM should serve for a folder that training or the caller names.

    An adapter folder is served on its base; a ``merged`` folder written by training is served as the
    ``adapter`` beside it (no merge needed); any other model folder (the base of round 0, the embedded
    model) or hub name is served as itself."""
    path = Path(folder)
    adapter = adapter_folder_of(path)
    if adapter is not None:
        return adapter_checkpoint(adapter)
    return Checkpoint(base=str(path.resolve()) if path.exists() else str(folder))


def lora_rank_for(checkpoints: list[Checkpoint], configured: int | None) -> int | None:
    """``--max-lora-rank``: the configured one (refused when an adapter needs more), else derived."""
    ranks = [adapter_rank(c.adapter) for c in checkpoints if c.adapter is not None]
    need = vllm_rank(max(ranks)) if ranks else None
    if configured is not None and need is not None and configured < need:
        raise AdapterError(f"llm.vllm.max_lora_rank is {configured}, but an adapter has rank {max(ranks)}; "
                           f"set it to {need} or null")
    return configured if configured is not None else need
