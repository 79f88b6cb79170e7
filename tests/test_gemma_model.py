"""Gemma-3-270M through the same commands as the default model: prepared (test_catalog), served as the
policy with its chat format, trained with LoRA, and the trained adapter served by llama.cpp as a GGUF LoRA
(Gemma's tensor names, no q/k row permutation).

A small budget: two optimizer steps on four rows; what is checked is that each stage runs on the real
model and that the converted adapter changes what llama.cpp computes, the way PEFT says it should.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hasp.config import LlamaCppParams, LLMParams
from hasp.llm.server import free_port

pytestmark = pytest.mark.model

ROWS = Path(__file__).parent / "data" / "objective_b" / "full" / "epoch_0" / "sft.jsonl"
PROMPT = [{"role": "user", "content": "Question: Who founded Brightwell Labs?\nNext Thought and Action:"}]


def _llm(**kw: object) -> LLMParams:
    return LLMParams(embedded="gemma3-270m", port=free_port(),
                     llamacpp=LlamaCppParams(startup_timeout_s=600.0, parallel=1, ctx_per_slot=2048), **kw)


def test_gemma_serves_as_the_policy_in_its_turn_format_and_stops_at_the_turn_end() -> None:
    from hasp.llm.endpoints import policy_client

    with policy_client(_llm(), max_tokens=48) as client:
        assert client.config.stop == ("<end_of_turn>", "<start_of_turn>")
        reply = client.chat(PROMPT, max_tokens=48)
    assert reply.prompt_tokens > 0 and "<end_of_turn>" not in reply.text and "<start_of_turn>" not in reply.text


def test_gemma_lora_trains_converts_and_changes_llamacpp_replies(tmp_path: Path) -> None:
    import numpy as np

    from hasp.llm.endpoints import policy_client
    from test_gguf_lora import _gguf_tensors

    from hasp.llm.gguf_lora import convert_adapter
    from hasp.llm.model_prep import gguf_path, prepare_model
    from hasp.train.sft import SFTRecipe, train_sft

    base = prepare_model(name="gemma3-270m")
    recipe = SFTRecipe(max_steps=2, per_device_train_batch_size=1, max_length=320, learning_rate=5e-3,
                       target_modules=("q_proj", "k_proj", "v_proj", "o_proj"), seed=0)
    res = train_sft(base, ROWS, tmp_path / "train", recipe, save_merged=False)  # served as base + adapter
    lora = convert_adapter(res.adapter_dir, gguf_path("gemma3-270m"))
    _, names = _gguf_tensors(lora)
    assert "blk.0.attn_q.weight.lora_a" in names and "blk.17.attn_output.weight.lora_b" in names
    assert all(np.isfinite(a).all() for a in names.values())
    logprobs = {}
    for label, folder in (("base", None), ("trained", res.adapter_dir)):
        with policy_client(_llm(), model_dir=folder, max_tokens=1) as client:
            assert bool(client.config.extra_body) == (folder is not None)  # the adapter is selected per request
            r = client._client.chat.completions.create(  # noqa: SLF001 - the logprobs the client does not expose
                model=client.config.model, messages=PROMPT, max_tokens=1, temperature=0.0, logprobs=True,
                top_logprobs=5, extra_body=client.config.extra_body)
            logprobs[label] = {t.token: t.logprob for t in r.choices[0].logprobs.content[0].top_logprobs}
    shared = set(logprobs["base"]) & set(logprobs["trained"])
    assert shared, logprobs
    assert max(abs(logprobs["base"][t] - logprobs["trained"][t]) for t in shared) > 1e-3  # the LoRA acts
