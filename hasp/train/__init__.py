"""Post-training on PF-derived signals: data build (SFT/DPO jsonl) and trainers (TRL + PEFT).

``hasp.train.data`` is light (no torch); the trainers in ``hasp.train.sft`` import torch/TRL and are
loaded lazily, so ``from hasp.train import build_sft_rows`` stays cheap.
"""

from typing import Any

from hasp.train.data import build_dpo_rows, build_sft_rows, summarize

__all__ = ["build_sft_rows", "build_dpo_rows", "summarize",
           "SFTRecipe", "TrainResult", "train_sft"]


def __getattr__(name: str) -> Any:
    if name in ("SFTRecipe", "TrainResult", "train_sft"):
        from hasp.train import sft

        return getattr(sft, name)
    raise AttributeError(f"module 'hasp.train' has no attribute {name!r}")
