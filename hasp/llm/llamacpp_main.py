"""The llama.cpp server process: ``python -m hasp.llm.llamacpp_main --model X.gguf --port N ...``.

Why a process of its own rather than ``xllamacpp.Server`` inside the caller: the caller (a Prefect flow,
a training recipe with torch threads, a Dask worker) must not share its interpreter and its signal
handling with an engine that owns every core while it decodes, and a server in a child is stopped, and
checked for leftovers, exactly like the other engines (``hasp.llm.server.LocalModelServer``).

``xllamacpp.Server`` listens on ``--host``/``--port`` from its own threads; this process only builds the
parameters, keeps the object alive and exits on SIGTERM/SIGINT (the destructor stops the main loop).
Trained LoRA adapters (GGUF) are loaded with scale 0 (``lora_init_without_apply``) so that a request
chooses its checkpoint by sending ``"lora": [{"id": i, "scale": 1.0}, ...]``: one server holds the base and
several checkpoints.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="hasp.llm.llamacpp_main", description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="the base model's GGUF file")
    ap.add_argument("--alias", required=True, help="the model name /v1/models reports")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--ctx-per-slot", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--cache-ram-mib", type=int, default=1024)
    ap.add_argument("--lora", action="append", default=[], help="a GGUF LoRA adapter (repeatable; ids in order)")
    ap.add_argument("--chat-template-file", help="a Jinja chat template to use instead of the GGUF's own")
    ap.add_argument("--apply-lora", action="store_true", help="apply the adapters to every request (scale 1) "
                    "instead of loading them at scale 0 for requests to select")
    return ap.parse_args(argv)


def build_params(a: argparse.Namespace):  # type: ignore[no-untyped-def]
    import xllamacpp as xlc

    p = xlc.CommonParams()
    p.model.path = a.model
    p.model_alias = {a.alias}  # a set of names in this binding
    p.hostnames = [a.host]
    p.port = a.port
    p.n_parallel = a.parallel
    p.n_ctx = a.parallel * a.ctx_per_slot  # the KV cache is shared out among the slots
    p.n_batch = a.batch
    p.n_ubatch = a.batch
    p.cpuparams.n_threads = a.threads
    p.cpuparams_batch.n_threads = a.threads
    p.cont_batching = True
    # the GGUF's own Jinja chat template, as transformers applies it in training (SmolLM2's adds a default
    # system line when a conversation has none); llama.cpp's built-in chatml would omit it
    p.use_jinja = True
    if a.chat_template_file:  # a base model without a template of its own (hasp.embedded_models's chat formats)
        with open(a.chat_template_file, encoding="utf-8") as f:
            p.chat_template = f.read()
    p.cache_prompt = True
    p.cache_ram_mib = a.cache_ram_mib  # prompts of finished requests kept in RAM for the next step of an episode
    p.warmup = True
    p.endpoint_metrics = True
    if a.lora:
        p.lora_adapters = [xlc.CommonAdapterLoraInfo(path, 1.0 if a.apply_lora else 0.0) for path in a.lora]
        p.lora_init_without_apply = not a.apply_lora
    return p


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    import xllamacpp as xlc

    server = xlc.Server(build_params(a))
    print(f"hasp.llm.llamacpp_main: serving {a.alias} at {server.listening_address}", flush=True)
    while not stop.wait(1.0):
        pass
    del server  # stops the main loop and frees the model
    return 0


if __name__ == "__main__":
    sys.exit(main())
