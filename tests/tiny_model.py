"""The tiny random Llama the training tests and ``bench/train_throughput.py --model tiny`` train.

Why: real TRL + PEFT runs need a real model folder, and the embedded 135M model takes minutes per
step on two cores; a 2-layer, 32-wide Llama with a real tokenizer trains in seconds and exercises the
same code (LoRA targets, chat template, save and merge).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_tiny_llama(folder: Path, tok: Any) -> Path:
    """Save a seeded 2-layer random Llama for ``tok`` (its vocabulary and special tokens) in ``folder``."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                               pad_token_id=tok.pad_token_id)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
