"""Greedy agent replies of a trained checkpoint: transformers + PEFT against llama.cpp + the GGUF adapter.

Why: the CPU engine serves a checkpoint as the base GGUF plus its PEFT adapter converted to a GGUF LoRA
(``hasp.llm.gguf_lora``), while training and the transformers engine run the adapter with PEFT on the
Hugging Face weights. This measures how often the two give the same greedy reply on agent-shaped prompts: the
same text, and the same action once parsed (``hasp.agent.parser``), which is what an episode acts on. The
same comparison without the adapter (the root base on both engines) is the engines' own disagreement
(llama.cpp multiplies Q4_1 weights with 8-bit activations, transformers with the dequantized weights in
fp32), and the adapter's effect is shown as the share of replies it changes on each engine. A reply
differs as a whole after one near-tie, so the share of llama.cpp's tokens that transformers picks itself,
fed the same tokens before, is printed beside it: a conversion error lowers that, engine noise barely does.

The prompts are the search agent's own (system prompt, demonstration, question): the first step of
generated benchmark questions and, for every other question, the second step after a search whose
results come from the BM25 index over the generated corpus; or the step prompts of a trajectories file
(``--episodes``, e.g. a rollout's or an evaluation's episodes). Both engines decode greedily, without a
grammar, up to the agent's reply budget and its stop string. A checkpoint of a later round is served as
the chain of adapters from the root base, as the server does; transformers runs its adapter on the merged
folder it was trained on.

    python bench/lora_agreement.py --adapter outputs/train/round_0/adapter --n 40 [--episodes rollout.jsonl]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hasp.agent.parser import ParsedAction, parse_action  # noqa: E402
from hasp.config import Params, load_params  # noqa: E402
from hasp.stats import wilson  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("LoRA adapter: transformers + PEFT vs llama.cpp")
STOP = "Observation:"

Messages = list[dict[str, str]]


def agent_prompts(p: Params, n: int) -> list[Messages]:
    """``n`` prompts of the search agent on generated questions: the first step of each question and, for
    every other one, the second step after searching the question's text."""
    from hasp.agent.loop import load_prompts
    from hasp.domains.search.generator import generate_benchmark
    from hasp.domains.search.retriever import BM25Retriever
    from hasp.domains.search.tools import SearchEnvironment

    prompts = load_prompts()
    bench = generate_benchmark(p.data.seed, max(n, 8), hop_weights=p.data.hop_weights)
    env = SearchEnvironment(BM25Retriever.from_corpus(bench.corpus), top_k=p.agent.top_k,
                            snippet_chars=p.agent.snippet_chars, read_chars=p.agent.read_chars)
    out = []
    for i, item in enumerate(bench.questions[:n]):
        messages = [{"role": "system", "content": prompts["system"]}, *[dict(m) for m in prompts.get("demo", [])],
                    {"role": "user", "content": prompts["question"].format(question=item.question)}]
        if i % 2:
            query = item.question.rstrip("?")
            observation, _ = env.search(query)
            searched = f"Thought: I need to search for this.\nAction: SEARCH[{query}]"
            messages += [{"role": "assistant", "content": searched},
                         {"role": "user", "content": prompts["observation"].format(observation=observation)}]
        out.append(messages)
    return out


def episode_prompts(path: Path, n: int) -> list[Messages]:
    """The first ``n`` step prompts of a trajectories file, in file order. A step saved without its prompt
    (archived runs drop them) gets it rebuilt from the episode: the agent's prompt, the question and the
    turns of the steps before (without the skills text the harness may have added to the system prompt)."""
    from hasp.agent.loop import load_prompts
    from hasp.agent.rollout import read_trajectories

    prompts = load_prompts()
    out: list[Messages] = []
    for t in read_trajectories(path):
        messages = [{"role": "system", "content": prompts["system"]}, *[dict(m) for m in prompts.get("demo", [])],
                    {"role": "user", "content": prompts["question"].format(question=t.question)}]
        for step in t.steps:
            out.append([dict(m) for m in (step.prompt_messages or messages)])
            messages = messages + step.to_messages(prompts)
        if len(out) >= n:
            break
    if not out:
        raise SystemExit(f"error: {path}: no steps in its trajectories")
    return out[:n]


def hf_replies(base: Path, adapter: Path | None, prompts: list[Messages], max_tokens: int,
               forced: list[list[int]], stops: tuple[str, ...] = ()) -> tuple[list[str], int, int]:
    """Greedy replies of transformers on ``base`` (plus the PEFT ``adapter``), and how many of the tokens
    in ``forced`` (llama.cpp's replies) it picks itself when fed the tokens before each: (replies, picked,
    tokens). Unlike a whole reply, this does not compound: one near-tie early does not count the rest."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    model.eval()
    vocab = tok.get_vocab()
    ends = {vocab[s] for s in stops if s in vocab} | {tok.eos_token_id}
    out, picked, tokens = [], 0, 0
    for messages, reply in zip(prompts, forced):
        inputs = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True, return_tensors="pt")
        prompt = inputs["input_ids"]
        with torch.no_grad():
            ids = model.generate(**inputs, max_new_tokens=max_tokens, do_sample=False, top_k=None, top_p=None,
                                 temperature=None, stop_strings=[STOP, *stops], tokenizer=tok,
                                 pad_token_id=tok.eos_token_id)
            if reply:
                logits = model(torch.cat([prompt, torch.tensor([reply])], dim=1)).logits[0, prompt.shape[1] - 1:-1]
                picked += sum(int(a == b) for a, b in zip(logits.argmax(-1).tolist(), reply))
                tokens += len(reply)
        # the reply ends where llama.cpp ends it: at an end-of-turn token of the chat format or the eos;
        # other special tokens are not text (llama.cpp does not render them either)
        reply_ids = ids[0, prompt.shape[1]:].tolist()
        cut = next((i for i, t in enumerate(reply_ids) if t in ends), len(reply_ids))
        out.append(tok.decode(reply_ids[:cut], skip_special_tokens=True).split(STOP, 1)[0])
    return out, picked, tokens


def llamacpp_replies(gguf: Path, loras: tuple[Path, ...], prompts: list[Messages], max_tokens: int,
                     threads: int, chat_format: str | None = None) -> dict[bool, list[tuple[str, list[int]]]]:
    """Greedy replies (text, token ids) of llama.cpp on ``gguf`` with every adapter of ``loras`` at scale
    1.0 (True) and at 0 (False). One slot and no RAM prompt cache: a prompt reuses the KV of the previous
    one (the shared system prompt and demonstration) only under the same setting, since llama.cpp clears
    a slot whose adapters change, while its RAM cache would restore KV computed under the other one.
    ``chat_format``: the catalogue layout of a base model (as the server and training use it)."""
    import xllamacpp as xlc

    from hasp import embedded_models

    fmt = embedded_models.chat_format(chat_format) if chat_format else None
    p = xlc.CommonParams()
    p.model.path = str(gguf)
    if fmt is not None:
        p.use_jinja, p.chat_template = True, fmt.text()
    p.lora_adapters = [xlc.CommonAdapterLoraInfo(str(f), 0.0) for f in loras]
    p.lora_init_without_apply = True
    p.n_parallel, p.n_ctx, p.cache_ram_mib = 1, 4096, 0
    p.cpuparams.n_threads = p.cpuparams_batch.n_threads = threads
    server = xlc.Server(p)
    out: dict[bool, list[tuple[str, list[int]]]] = {True: [], False: []}
    try:
        for on in (True, False):
            lora = [{"id": i, "scale": 1.0 if on else 0.0} for i in range(len(loras))]
            for messages in prompts:
                r = server.handle_chat_completions({"messages": messages, "max_tokens": max_tokens, "temperature": 0,
                                                    "stop": [STOP, *(fmt.stop if fmt else ())], "lora": lora,
                                                    "logprobs": True})
                if "choices" not in r:
                    raise SystemExit(f"error: llama.cpp refused a request: {r}")
                choice = r["choices"][0]
                ids = [c["id"] for c in ((choice.get("logprobs") or {}).get("content") or [])]
                out[on].append((choice["message"].get("content") or "", ids))
    finally:
        del server
    return out


def action(text: str) -> tuple[str, str] | None:
    """The parsed action as (type, argument); None when the reply has none."""
    a = parse_action(text)
    return (a.type, a.arg) if isinstance(a, ParsedAction) else None


def agreement(a: list[str], b: list[str]) -> dict[str, Any]:
    """Same reply text and same parsed action, as Wilson rates, and the replies without an action."""
    n = len(a)
    return {"n": n, "exact": wilson(sum(x == y for x, y in zip(a, b)), n),
            "action": wilson(sum(action(x) == action(y) for x, y in zip(a, b)), n),
            "no_action": (sum(action(x) is None for x in a), sum(action(y) is None for y in b))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--adapter", type=Path, required=True,
                    help="a trained checkpoint: its PEFT adapter folder, or its merged folder (the adapter beside it)")
    ap.add_argument("--n", type=int, default=40, help="prompts compared")
    ap.add_argument("--episodes", type=Path, default=None,
                    help="trajectories jsonl whose step prompts to use (default: generated agent prompts)")
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--gguf", default=None, help="the root base model's GGUF (default: llm.llamacpp.gguf, else the "
                                                 "one the base folder was prepared from)")
    ap.add_argument("--max-tokens", type=int, default=None, help="reply budget (default: agent.max_tokens)")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads of each engine (default: $HASP_LLM_THREADS, else all cores)")
    ap.add_argument("--show", type=int, default=3, help="differing reply pairs printed (with the adapter)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md as it is")
    a = ap.parse_args(argv)
    import torch

    from hasp.llm.adapters import AdapterError, read_adapter_config
    from hasp.llm.llamacpp_server import ServeError, adapter_chain, resolve_gguf_checkpoint

    p = load_params(a.params)
    max_tokens = a.max_tokens or p.agent.max_tokens
    threads = a.threads or int(os.environ.get("HASP_LLM_THREADS") or 0) or os.cpu_count() or 1
    torch.set_num_threads(threads)
    try:
        root, chain = adapter_chain(a.adapter)
        if not chain:
            raise SystemExit(f"error: {a.adapter}: no PEFT adapter there (nor beside it, for a merged folder)")
        t0 = time.perf_counter()
        ckpt = resolve_gguf_checkpoint(a.adapter, a.gguf or p.llm.llamacpp.gguf)  # converts, or reuses the GGUF
        convert_s = time.perf_counter() - t0
    except (AdapterError, ServeError) as e:
        raise SystemExit(f"error: {e}") from None
    from hasp import embedded_models

    model = embedded_models.for_gguf(ckpt.gguf)
    if model is not None and model.name != embedded_models.DEFAULT_MODEL:  # one section per embedded model
        REPORT.section += f", {model.name}"
    top = chain[-1]
    trained_on = Path(read_adapter_config(top)["base_model_name_or_path"])
    prompts = episode_prompts(a.episodes, a.n) if a.episodes else agent_prompts(p, a.n)
    source = f"step prompts of {a.episodes}" if a.episodes else (
        f"search agent prompts on generated questions (seed {p.data.seed}; every other one at step 2)")

    t0 = time.perf_counter()
    llama_out = llamacpp_replies(ckpt.gguf, ckpt.lora_files, prompts, max_tokens, threads, ckpt.chat_format)
    llama_s = time.perf_counter() - t0
    llama = {on: [text for text, _ in r] for on, r in llama_out.items()}
    t0 = time.perf_counter()
    hf_on, *forced_on = hf_replies(trained_on, top, prompts, max_tokens, [ids for _, ids in llama_out[True]], ckpt.stop)
    hf_off, *forced_off = hf_replies(root, None, prompts, max_tokens, [ids for _, ids in llama_out[False]], ckpt.stop)
    hf_s = time.perf_counter() - t0

    rows = {"with the adapter": (agreement(hf_on, llama[True]), forced_on),
            "base (no adapter)": (agreement(hf_off, llama[False]), forced_off)}
    REPORT.line(f"checkpoint {top} ({len(chain)} adapter{'s' if len(chain) > 1 else ''} from the root base "
                f"{root}); PEFT on {trained_on}")
    REPORT.line(f"llama.cpp: {ckpt.gguf.name} + {', '.join(str(f) for f in ckpt.lora_files)} "
                f"(converted or reused in {convert_s:.1f}s)")
    REPORT.line(f"{len(prompts)} prompts: {source}; greedy, no grammar, max {max_tokens} tokens, stop {STOP!r}; "
                f"{threads} threads; llama.cpp {llama_s:.0f}s, transformers {hf_s:.0f}s")
    REPORT.line(f"{'transformers vs llama.cpp':<26}{'n':>4}  {'same reply':<29}{'same action':<29}"
                f"{'no action':>10}{'same token':>12}")
    for name, (r, (picked, tokens)) in rows.items():
        REPORT.line(f"{name:<26}{r['n']:>4}  {str(r['exact']):<29}{str(r['action']):<29}"
                    f"{'%d/%d' % r['no_action']:>10}{picked / max(tokens, 1):>12.3f}")
    n = len(prompts)
    REPORT.line(f"no action: replies without a parsable action (transformers/llama.cpp); same token: share of "
                f"llama.cpp's reply tokens transformers picks itself given the tokens before "
                f"({' and '.join(str(tokens) for _, (_, tokens) in rows.values())} tokens)")
    REPORT.line(f"replies the adapter changes: transformers {sum(x != y for x, y in zip(hf_on, hf_off))}/{n}, "
                f"llama.cpp {sum(x != y for x, y in zip(llama[True], llama[False]))}/{n}")
    shown = 0
    for i, (x, y) in enumerate(zip(hf_on, llama[True])):
        if x != y and shown < a.show:
            REPORT.line(f"  prompt {i}: transformers {x!r}\n  {'':>{len(str(i)) + 8}}llama.cpp    {y!r}")
            shown += 1
    if not a.no_write:
        REPORT.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
