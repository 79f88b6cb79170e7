"""Post-training on PF-derived signals: data build (SFT/DPO jsonl), recipes and the E1-E6 presets.

One recipe = one config section of ``train`` in params (``hasp.config``) + one trainer module:
``sft`` (weighted LoRA SFT), ``rs`` (rejection sampling), ``opd`` (on-policy distillation), ``dpo``
(TRL DPOTrainer on the preference rows). ``presets`` applies a row of the grid (paper Table 13, or its
CPU variant) to the train section. ``hasp.train.data``, ``rs``, ``opd`` and ``presets`` are light (no
torch); the trainers that import torch/TRL (``sft``, ``dpo``) are loaded lazily, so
``from hasp.train import build_sft_rows`` stays cheap.
"""

from typing import Any

from hasp.train.data import build_dpo_rows, build_sft_rows, summarize

__all__ = ["build_sft_rows", "build_dpo_rows", "summarize",
           "SFTRecipe", "TrainResult", "train_sft", "train_dpo", "train_rs", "train_opd", "apply_preset"]

_LAZY = {"SFTRecipe": "sft", "TrainResult": "sft", "train_sft": "sft", "train_dpo": "dpo",
         "train_rs": "rs", "train_opd": "opd", "apply_preset": "presets"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f"hasp.train.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'hasp.train' has no attribute {name!r}")
