"""LLM access: one OpenAI-compatible client, plus an embedded CPU model (SmolLM2-135M) and its server.

Only the light client is re-exported; ``model_prep`` and ``server`` import torch/transformers lazily
so that code talking to a remote endpoint never pays for them.
"""

from hasp.llm.client import ChatResult, LLMClient, LLMConfig, LLMDeadlineExceeded, LLMError, LLMInterrupted

__all__ = ["ChatResult", "LLMClient", "LLMConfig", "LLMDeadlineExceeded", "LLMError", "LLMInterrupted"]
