"""Typed view of ``params.yaml``: one model per concern, validated once at load.

This schema is the one place a default is written: runtime configs (``AgentConfig``, ``LLMConfig``,
``SFTRecipe``) take theirs from it, so a knob cannot mean one thing in code and another in the file.
Each field's help text is its ``description``. A bad value fails here with one message naming the
key, never deep inside a run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from hasp import artifacts as art


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def default_of(model: type[BaseModel], name: str) -> Any:
    """The schema default of ``model.name``: what a runtime dataclass field uses as its own default."""
    return model.model_fields[name].get_default(call_default_factory=True)


#: largest seed every RNG in the stack accepts (numpy's legacy seeding is 32-bit unsigned); a
#: negative seed is refused here rather than deep inside a run, where numpy would reject it
SEED_MAX = 2**32 - 1


class DataParams(_Strict):
    version: Literal[1, 2] = Field(
        1, description="benchmark generator: 1 = one phrasing per relation (every figure in the README is on it); "
                       "2 = several phrasings with some phrasings and relations held out of train/val, varied date "
                       "and number formats, answer aliases, more near-name distractors, 1-3 hops")
    seed: int = Field(7, ge=0, le=SEED_MAX, description="generator seed for the generated benchmark "
                                                        "(0..2^32-1, the range numpy and torch accept)")
    n_questions: int = Field(80, ge=6, description="questions generated (split into train/val/test)")
    fractions: tuple[float, float, float] = Field(
        (0.35, 0.15, 0.5), description="train (evolution seed split) / val / test")
    hop_weights: dict[int, float] = Field(
        default_factory=lambda: {1: 1.0},
        description="hop count (1-4) -> weight of generated questions; one-hop questions are the ones a "
                    "small policy can answer, multi-hop ones need chained lookups")

    @field_validator("hop_weights")
    @classmethod
    def _hops(cls, v: dict[int, float]) -> dict[int, float]:
        if not v or not set(v) <= {1, 2, 3, 4} or min(v.values()) < 0 or not sum(v.values()):
            raise ValueError("data.hop_weights maps hop counts 1-4 to non-negative weights, not all zero")
        return v

    @model_validator(mode="after")
    def _fractions(self) -> "DataParams":
        if abs(sum(self.fractions) - 1.0) > 1e-6 or min(self.fractions) <= 0:
            raise ValueError("data.fractions must be three positive numbers summing to 1")
        return self

    @model_validator(mode="after")
    def _version_hops(self) -> "DataParams":
        if self.version == 2 and max(k for k, v in self.hop_weights.items() if v) > 3:
            raise ValueError("data.hop_weights: data.version 2 generates 1-3 hop questions")
        return self


class EndpointParams(_Strict):
    base_url: str | None = Field(None, description="OpenAI-compatible URL; null = the embedded server "
                                                   "(policy) or no teacher")
    model: str | None = Field(None, description="model name at base_url (required when base_url is set)")
    api_key_env: str | None = Field(None, description="name of the environment variable that holds the key")
    embedded: str | None = Field(None, description="an embedded model (`hasp model list`) HASP serves itself "
                                 "with llama.cpp when base_url is null")
    chat_format: str | None = Field(None, description="chat format of the embedded model (`hasp model list`); "
                                    "null = the catalogue's choice for it")

    @model_validator(mode="after")
    def _pair(self) -> "EndpointParams":
        if self.base_url and not self.model:
            raise ValueError("model is required when base_url is set")
        return self

    @field_validator("embedded", "chat_format")
    @classmethod
    def _in_catalogue(cls, v: str | None, info: Any) -> str | None:
        """An embedded model or chat format the catalogue knows, by its canonical name."""
        from hasp import embedded_models as catalog

        if v is None:
            return None
        try:
            return catalog.find(v).name if info.field_name == "embedded" else catalog.chat_format(v).name
        except catalog.CatalogError as e:
            raise ValueError(str(e)) from None


class TeacherParams(EndpointParams):
    """The teacher (review, teacher-assisted PFs, OPD targets, snippets, the judge): a remote endpoint
    (``base_url``), an embedded model HASP serves on its own port (``embedded``), or none."""

    port: int = Field(8766, ge=1024, le=65535, description="loopback port of an embedded teacher's server")
    assist_agent: bool = Field(True, description="the pipeline's PF agent asks the teacher (pf_teacher: teacher-"
                               "assisted PFs, PF selection); false = the teacher reviews, distils and judges only, "
                               "and the agent runs as pf")

    @model_validator(mode="after")
    def _one_source(self) -> "TeacherParams":
        if self.base_url and self.embedded:
            raise ValueError("set teacher.base_url or teacher.embedded, not both")
        return self

    @property
    def configured(self) -> bool:
        return bool(self.base_url or self.embedded)

    @property
    def key(self) -> str:
        """Which teacher answers, as cache keys and run tags name it (the embedded one by model and format)."""
        if self.embedded and not self.base_url:
            return f"embedded:{self.embedded}|{self.chat_format or ''}"
        return f"{self.base_url}|{self.model}"

    @property
    def label(self) -> str:
        """The teacher's model name for tables and MLflow tags ('' when there is none)."""
        return self.model or (f"embedded:{self.embedded}" if self.embedded else "")


#: ranks ``vllm serve --max-lora-rank`` accepts (vLLM's ``LoRAConfig.max_lora_rank``)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class VLLMParams(_Strict):
    """``vllm serve`` as HASP starts it (``llm.backend: vllm``): the base model with LoRA enabled and
    trained adapters registered by name, so a client selects an adapter by sending its name as ``model``."""

    max_loras: int = Field(2, ge=1, description="adapters one batch may mix (vllm --max-loras)")
    max_lora_rank: int | None = Field(
        None, description="vllm --max-lora-rank, one of 1, 8, 16, 32, 64, 128, 256, 320, 512; null = the largest "
                          "rank among the served adapters (their adapter_config.json r) rounded up to one of these")
    startup_timeout_s: float = Field(900.0, gt=0, description="seconds the server may take to load the base "
                                     "model and answer its first request")
    extra_args: list[str] = Field(default_factory=list, description="further vllm serve arguments, e.g. "
                                  "[--gpu-memory-utilization, '0.85', --max-model-len, '8192']")
    executable: str = Field("vllm", description="the vllm console script HASP runs when vllm is not importable "
                            "in its own Python: a name on PATH or a path into vLLM's own environment (vLLM's "
                            "pins conflict with HASP's, so it is installed apart)")

    @field_validator("max_lora_rank")
    @classmethod
    def _rank(cls, v: int | None) -> int | None:
        if v is not None and v not in VLLM_LORA_RANKS:
            raise ValueError(f"must be one of {', '.join(map(str, VLLM_LORA_RANKS))} (the ranks vLLM accepts)")
        return v


class TransformersServeParams(_Strict):
    """``transformers serve --continuous-batching`` as HASP starts it on a model folder (the CPU path).

    Its paged KV cache must be sized: left alone, it takes most of the machine's free RAM. Pages hold
    the running requests' keys and values and, while free pages remain, the prefixes of finished ones,
    which a later prompt with the same beginning (the next step of an episode) reuses in whole pages."""

    num_blocks: int = Field(64, ge=1, description="KV cache pages (--cb-num-blocks); x page size = cached tokens "
                                                  "(SmolLM2-135M in fp32: ~46 KB per token)")
    page_size: int | None = Field(None, ge=16, description="tokens per page (--cb-block-size); null = the "
                                                           "server's default (256 in transformers 5.23)")
    max_batch_tokens: int = Field(1024, ge=64, description="tokens per forward pass (--cb-max-batch-tokens)")


class LlamaCppParams(_Strict):
    """llama.cpp's own server (the ``xllamacpp`` wheel) as HASP starts it on a GGUF (``llm.backend: llamacpp``).

    One process holds the weights once; ``parallel`` slots decode together (continuous batching) and each
    slot keeps its prompt's KV cache, so the next step of an episode, which repeats the previous prompt and
    adds to it, only prefills what is new. Trained LoRA adapters are converted to GGUF and loaded beside the
    base; a request picks its adapters, so one server holds the base and several checkpoints."""

    threads: int | None = Field(None, ge=1, description="CPU threads for decoding and prefill; null = "
                                "$HASP_LLM_THREADS, else all cores (their waits are passive unless busy_wait, so a busy "
                                "neighbour slows decoding in proportion instead of stalling it)")
    parallel: int = Field(4, ge=1, le=64, description="slots decoded together (continuous batching); a request "
                          "beyond them waits for a free slot")
    ctx_per_slot: int = Field(4096, ge=256, description="context tokens each slot holds (the server allocates "
                              "parallel x ctx_per_slot KV cells, ~24 KB per token for SmolLM2-135M in f16)")
    batch: int = Field(512, ge=32, description="prompt tokens per forward pass (--batch-size / --ubatch-size)")
    cache_ram_mib: int = Field(1024, ge=0, description="MiB of RAM for the prompts of finished requests, which "
                               "the next step of the same episode resumes from when its slot was taken meanwhile")
    busy_wait: bool = Field(False, description="decoding threads spin at each of the ~300 barriers per token "
                            "(OpenMP active wait) instead of sleeping: faster on an idle machine (single-request decode seen at "
                            "60-100 tok/s against 46-60 passive on 2 cores), but when "
                            "anything else runs on the cores a descheduled thread stalls the others and decoding "
                            "collapses (measured: 1-3 tok/s instead of 14-47 on 2 busy cores)")
    startup_timeout_s: float = Field(120.0, gt=0, description="seconds the server may take to load the "
                                     "GGUF and answer its first request")
    gguf: str | None = Field(None, description="a GGUF of your own to serve; null = the embedded model named "
                             "by llm.embedded")


class LLMParams(EndpointParams):
    embedded: str | None = Field("smollm2-135m", description="the embedded model served when base_url is null "
                                 "and llm.llamacpp.gguf is not set (`hasp model list`)")
    backend: Literal["llamacpp", "transformers", "vllm"] = Field(
        "llamacpp", description="what serves a model or a trained checkpoint: llamacpp (llama.cpp's server on the "
                                "GGUF, LoRA adapters converted to GGUF and picked per request; CPU, the default), "
                                "transformers (transformers serve on a merged HF folder; CPU, for models without a "
                                "GGUF) or vllm (vllm serve --enable-lora with the LoRA adapter registered by name, "
                                "no merge; GPU; vLLM is installed apart, see llm.vllm.executable). With "
                                "vllm and base_url set, checkpoints are loaded into that server at run time")
    constrained: Literal["auto", "actions", "json", "off"] = Field(
        "auto", description="decoding that cannot leave the format: actions = the agent's action line as a grammar "
                            "and Phase C proposals as a JSON schema; json = proposals only; off = free text parsed "
                            "afterwards; auto = actions on an engine that takes grammars (llamacpp, vllm), else off. "
                            "An endpoint that refuses a constraint gets one logged, counted fallback to free text")
    llamacpp: LlamaCppParams = Field(LlamaCppParams(), description="llama.cpp server settings (backend llamacpp)")

    @field_validator("constrained", mode="before")
    @classmethod
    def _off_unquoted(cls, v: object) -> object:
        """YAML 1.1 reads an unquoted ``off`` as false: take it as the ``off`` the user wrote."""
        return "off" if v is False else v

    vllm: VLLMParams = Field(VLLMParams(), description="vllm serve settings (backend vllm)")
    transformers: TransformersServeParams = Field(TransformersServeParams(), description="transformers serve "
                                                  "settings (backend transformers)")
    port: int = Field(8765, ge=1024, le=65535, description="loopback port of the embedded server")
    timeout_s: float = Field(300.0, gt=0, description="per-request timeout; a long proposal on a loaded "
                                                    "2-core CPU can take minutes")
    max_retries: int = Field(3, ge=0, description="retries with backoff on 429/5xx and timeouts")
    max_concurrency: int = Field(16, ge=1, description="requests in flight per client (an embedded "
                                 "llama.cpp server: at most its llamacpp.parallel slots, see LLMParams.in_flight)")
    max_reply_chars: int = Field(65536, ge=1024, description="longest reply text kept; a longer one is cut "
                                                            "and ends with a note giving the cap")
    reply_cache: bool = Field(True, description="a greedy request (temperature 0) identical to one this client "
                              "already sent (model, adapters, messages, budget, stop, seed, grammar) gets the first "
                              "reply again instead of a new decode: a val-gate candidate repeats the baseline's "
                              "steps until its PF first acts, and two arms of an evaluation share their first steps. "
                              "Counted in the client's usage.cached; sampled requests are never cached")

    @property
    def in_flight(self) -> int:
        """Requests (and episodes) in flight at once: ``max_concurrency``, capped at llama.cpp's slots when
        HASP serves the model itself. Why: a request beyond the slots waits in the server's queue and then
        takes a slot whose cached prompt is another episode's, so its whole prompt is computed again; on
        2 cores and 4 slots, 16 episodes in flight took 2.04 s per agent step and 4 took 0.99 s
        (bench/RESULTS.md, "Episodes in flight against llama.cpp's slots")."""
        if self.base_url is None and self.backend == "llamacpp":
            return max(1, min(self.max_concurrency, self.llamacpp.parallel))
        return self.max_concurrency


class AgentParams(_Strict):
    # episode budgets
    max_steps: int = Field(5, ge=1, description="steps per episode before the budget ends it")
    final_on_budget: bool = Field(True, description="out of steps without FINAL: one more turn that may "
                                                    "only answer (no tools, no PFs)")
    max_search_calls: int = Field(3, ge=0, description="SEARCH actions allowed per episode")
    max_read_calls: int = Field(3, ge=0, description="READ actions allowed per episode")
    max_modify_fires: int = Field(2, ge=0, description="per-PF MODIFY_ACTION limit per episode")
    # policy sampling
    temperature: float = Field(0.0, ge=0, description="policy sampling temperature")
    max_tokens: int = Field(64, ge=8, description="policy reply budget per step")
    # what the tools show
    top_k: int = Field(3, ge=1, description="search results shown per SEARCH")
    snippet_chars: int = Field(120, ge=20, description="characters of each search result shown")
    read_chars: int = Field(400, ge=50, description="characters of a READ document shown")


class HarnessParams(_Strict):
    """Inference-time harness around the agent (paper App. B.6): selection and the three budget
    classes. A variant (``hasp.agent.variants``) decides which surfaces exist, PFs included;
    ``skills_enabled`` is the one master switch, which turns every skill surface off at once."""

    skills_enabled: bool = Field(True, description="master switch: false = no skill surface (PFs, handlers, "
                                                   "skill text, phase reminders) for any variant")
    enable_skill_handlers: bool = Field(True, description="FINAL-time handler votes (FINAL -> SEARCH override)")
    enable_prompt_only_skills: bool = Field(True, description="skills without pf.py still add prompt / phase text")
    enable_difficulty_gating: bool = Field(False, description="per question: skills off when difficulty < threshold")
    difficulty_threshold: int = Field(2, ge=1, le=5, description="1-5 scale (teacher score, heuristic without teacher)")
    handler_vote_threshold: int = Field(4, ge=1, description="votes needed to override a FINAL (paper: 4 web, 3 math)")
    max_final_overrides: int = Field(1, ge=0, description="per episode; prevents FINAL->SEARCH->FINAL loops")
    pf_selection: Literal["auto", "heuristic", "all"] = Field(
        "auto", description="auto (teacher if any, else heuristic) | heuristic | all")
    pf_top_k: int = Field(6, ge=0, description="PFs kept per question besides the mandatory ones")
    mandatory_pfs: list[str] = Field(default_factory=lambda: [
        "retrieval_failure", "format_extraction_error", "relevant_content_extractor"])
    light_pfs: list[str] = Field(default_factory=lambda: ["premature_final", "insufficient_exploration"])
    decomposition_pfs: list[str] = Field(default_factory=lambda: [
        "decompose_complex_question", "iterative_refinement"])
    entity_pfs: list[str] = Field(default_factory=lambda: ["wrong_entity_confusion", "citation_mismatch"])
    only_skills: list[str] = Field(default_factory=list, description="run only these skill ids of the library "
                                   "(empty = all; `hasp eval --skills`): one skill measured alone")
    max_skills_in_prompt: int = Field(6, ge=0, description="skill summaries in the system prompt (prompt variant)")
    max_phase_instructions: int = Field(2, ge=0, description="phase reminders per step")
    pre_final_step_threshold: int = Field(3, ge=1, description="from this step on, pre_final reminders may show")
    timeout_seconds: float | None = Field(
        None, gt=0, description="wall budget per episode (paper: 600 on GPU serving); null = none: an episode "
        "is bounded by agent.max_steps and each model call by llm.timeout_s. On a CPU server with many "
        "episodes in flight a wall budget measures the server's queue, not the agent, and ends episodes "
        "that would have finished")
    teacher_max_tokens: int = Field(64, ge=8, description="reply budget of harness teacher calls "
                                    "(gate, selection, post-processing)")

    @field_validator("mandatory_pfs", "light_pfs", "decomposition_pfs", "entity_pfs", "only_skills")
    @classmethod
    def _ids(cls, v: list[str]) -> list[str]:
        bad = [x for x in v if not x or not x.replace("_", "").isalnum() or x != x.lower()]
        if bad:
            raise ValueError(f"not snake_case skill ids: {bad}")
        return list(dict.fromkeys(v))


class BudgetParams(_Strict):
    """What one evolution epoch may spend (``hasp.evolve.budget``). The epoch checks it between phases and
    between Phase C's proposals, and stops with one line naming the key it reached; its finished phases stay
    on disk and the library stays unchanged. A limit is reached when the spend so far is at or above it, so
    the phase that crosses it runs to its end. null = unlimited."""

    max_tokens: int | None = Field(None, description="prompt + completion tokens of every model call of the "
                                   "epoch (policy rollouts, summarizer, student, teacher); null = unlimited")
    max_calls: int | None = Field(None, description="model calls of the epoch (replies a client returned, "
                                  "retries not counted); null = unlimited")
    max_wall_s: float | None = Field(None, description="wall seconds of the epoch's phases; null = unlimited")
    max_cost: float | None = Field(None, description="money of the epoch, priced with price_per_1k_prompt / "
                                   "price_per_1k_completion (at least one must be set); null = unlimited")
    price_per_1k_prompt: float | None = Field(None, description="price of 1000 prompt tokens (any currency); "
                                              "null = not priced (no cost is reported)")
    price_per_1k_completion: float | None = Field(None, description="price of 1000 completion tokens (same "
                                                  "currency); null = not priced")

    @field_validator("max_tokens", "max_calls", "max_wall_s", "max_cost")
    @classmethod
    def _positive_or_unlimited(cls, v: float | None, info: Any) -> float | None:
        if v is not None and v <= 0:
            raise ValueError(f"{info.field_name} must be > 0, or null for unlimited (a budget of {v} would stop "
                             "every epoch before its first phase)")
        return v

    @field_validator("price_per_1k_prompt", "price_per_1k_completion")
    @classmethod
    def _price(cls, v: float | None, info: Any) -> float | None:
        if v is not None and v < 0:
            raise ValueError(f"{info.field_name} must be >= 0 (0 = free), or null for not priced")
        return v

    @model_validator(mode="after")
    def _cost_needs_a_price(self) -> "BudgetParams":
        if self.max_cost is not None and self.price_per_1k_prompt is None and self.price_per_1k_completion is None:
            raise ValueError("max_cost needs price_per_1k_prompt or price_per_1k_completion: without a price "
                             "the epoch's cost is unknown")
        return self


#: foreign tool names (lower-cased) -> the agent action a chat-log tool call stands for
DEFAULT_TOOL_ACTIONS = {"search": "SEARCH", "web_search": "SEARCH", "retrieve": "SEARCH", "lookup": "SEARCH",
                        "read": "READ", "open": "READ", "open_url": "READ", "fetch": "READ", "get_document": "READ",
                        "final": "FINAL", "final_answer": "FINAL", "answer": "FINAL", "finish": "FINAL"}


class TracesParams(_Strict):
    """Evolution from logged traces (``hasp.evolve.traces``, ``hasp.evolve.trace_signals``): Phase A reads
    trajectories a run already logged instead of rolling the policy out, and Phase B finds failures in
    them without gold answers where they have none."""

    source: str | None = Field(None, description="file or folder of logged traces Phase A reads instead of "
                               "rolling out (hasp eval output, evaluation journals, chat-log jsonl); null = roll "
                               "out. hasp evolve run --from-traces sets it")
    gold: bool = Field(True, description="score the traces against the gold answers they carry (false: drop "
                       "them, every failure is found by the label-free signals); --gold/--no-gold")
    tool_actions: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_TOOL_ACTIONS),
                                         description="chat-log adapter: tool name (lower case) -> agent action "
                                         "(SEARCH, READ, FINAL); a tool call of another name makes its row bad")
    repeat_threshold: int = Field(2, ge=2, description="signal repeated_action: the same executed action "
                                  "(type and argument) this many times in one episode")
    query_similarity: float = Field(0.8, gt=0, le=1, description="signal repeated_query: a SEARCH whose "
                                    "query tokens have at least this Jaccard with an earlier query's")
    signals: list[str] = Field(default_factory=lambda: ["repeated_action", "repeated_query",
                               "final_without_evidence", "parse_failure", "pf_override_undone", "tool_error",
                               "no_answer"], description="label-free failure signals Phase B uses for "
                               "trajectories without gold answers")
    judge: bool = Field(False, description="ask a model (the teacher, else the student) whether each trace's "
                        "answer is supported by what the agent saw; UNSUPPORTED is the failure signal 'judge' "
                        "where a trace has no gold (hasp.evolve.trace_judge)")
    judge_max_chars: int = Field(1500, ge=100, description="characters of a trace's observations the judge sees")
    holdout: float = Field(0.0, ge=0, lt=1, description="share of the traces' questions Phase A holds out of "
                           "Phases B-H for the judge gate: every candidate the other gates passed answers them, "
                           "the judge reads each answer, and a candidate under which fewer answers are supported "
                           "is refused (hasp.evolve.judge_gate); 0 = no judge gate")
    holdout_max: int = Field(40, ge=1, description="at most this many held-out questions (each candidate's "
                             "judge gate runs the agent on every one of them)")

    @field_validator("tool_actions")
    @classmethod
    def _actions(cls, v: dict[str, str]) -> dict[str, str]:
        bad = {k: a for k, a in v.items() if a not in ("SEARCH", "READ", "FINAL")}
        if bad:
            raise ValueError(f"tool_actions map tools to SEARCH, READ or FINAL; got {bad}")
        return {k.lower(): a for k, a in v.items()}

    @field_validator("signals")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        known = {"repeated_action", "repeated_query", "final_without_evidence", "parse_failure",
                 "pf_override_undone", "tool_error", "no_answer"}
        if set(v) - known:
            raise ValueError(f"unknown signals {sorted(set(v) - known)}; known: {sorted(known)}")
        return v


class EvolveParams(_Strict):
    domain: str = Field(
        "search", min_length=1,
        description="the task an epoch evolves: search (the generated benchmark's split files), math, code, or a "
                    "user task (pkg.module:attr, or a name an installed package registers); math, code and user "
                    "tasks split their items into train/val/test by data.n_questions and data.fractions")
    dataset: str = Field(
        "", description="the items of a math, code or user-task epoch: a dataset name or file as `hasp eval "
                        "--dataset` takes (empty: game24, humaneval, the task's own items); unused by search")
    min_cluster_size: int = Field(3, ge=1)
    max_candidates: int = Field(5, ge=0)
    proposal_temperature: float = Field(0.7, ge=0)
    proposal_max_tokens: int = Field(600, ge=32)
    proposal_format: Literal["code", "declarative", "auto"] = Field(
        "auto", description="what the student writes: code (a pf.py), declarative (a PF declared from the "
                            "vocabulary, compiled by the project) or auto (declarative until the student's code "
                            "proposals have passed review at least twice)")
    declarative_max_tokens: int = Field(160, ge=32, description="reply budget of one declarative proposal")
    proposals_per_cluster: int = Field(1, ge=1, le=8, description="declarative proposals sampled per cluster "
                                       "(identical ones are kept once); the later phases choose among them")
    structured_output: Literal["auto", "json_schema", "lines", "choices"] = Field(
        "auto", description="how a declarative proposal is asked for: JSON through response_format (json_schema), "
                            "KEY: value lines, or one short question per field (choices); auto = choices for the "
                            "embedded 135M student (its server rejects response_format), else json_schema")
    exec_threshold: float = Field(0.3, ge=0, le=1, description="Phase E hard reject (the reviewer is not "
                                  "consulted) when the Phase-D Q_exec is below this")
    new_group_threshold: float = Field(0.75, ge=0, le=1, description="admission bar on Q_skill for a candidate "
                                       "of a new failure group")
    same_group_threshold: float = Field(0.60, ge=0, le=1, description="admission bar on Q_skill for a candidate "
                                        "refining an existing failure group")
    max_library_size: int = Field(50, ge=1)
    # --- evolution modes and ablations (App. D.5, G.3); see hasp/evolve/gate.py for the gate table
    mode: Literal["lite", "full"] = Field("full", description="lite: sampled failures, <=3 proposals, "
                                          "compile check + id dedup only (no clustering/review/teacher)")
    prefilter: bool = Field(False, description="Phase A in two stages: a cheap no-skills pass finds the failing "
                                              "seed questions, the PF-aware rollout runs on those only")
    filtering: Literal["none", "exec", "teacher", "full"] = Field(
        "full", description="which phases gate admission: none (parse only), exec (Phase D), "
                            "teacher (Phase E), full (D + E + val gate)")
    val_gate: bool = Field(True, description="full filtering also runs the held-out val check (see val_rule)")
    val_rule: Literal["gain", "no_drop"] = Field(
        "gain", description="gain: admit only when dEM_val > 0 (a skill that changes nothing is not "
                            "admitted); no_drop: admit unless dEM_val < 0")
    val_limit: int = Field(0, ge=0, description="val questions per gate run (0 = the whole val split)")
    r_skill_lambda: float = Field(0.5, ge=0, description="r_skill = Q_skill + lambda * dEM_val (App. E)")
    sage_bonus: Literal["seed", "repair"] = Field(
        "repair", description="hasp evolve sage's skill-integrated reward: repair pays the task a skill came "
        "from when a later task uses it and is solved (its skills are mined from failed tasks); seed also asks "
        "that task to be solved (seed 001; train.sage.bonus is the SAGE recipe's)")
    frontier_size: int = Field(3, ge=1, description="library versions kept in frontier.json (top-k by val EM)")
    rollback_tolerance: float = Field(0.05, ge=0, description="roll back when val EM < best frontier - this")
    summarizer: bool = Field(True, description="Phase B LLM failure summarizer on/off")
    summarizer_temperature: float = Field(0.3, ge=0)
    summarizer_max_tokens: int = Field(400, ge=32)
    summarizer_retries: int = Field(1, ge=0, description="re-asks after a malformed JSON reply")
    summarizer_max_failures: int = Field(0, ge=0, description="failed trajectories summarized (0 = all)")
    lite_failures: int = Field(20, ge=1, description="lite mode: failed trajectories sampled")
    lite_max_candidates: int = Field(3, ge=0, description="lite mode: proposals per epoch")
    budget: BudgetParams = BudgetParams()
    traces: TracesParams = TracesParams()
    anchors: str | None = Field(
        None, description="jsonl of pinned questions that must never regress (the test split's row format: id, "
                          "question, answers[, hops, support], over the epoch's corpus). The PF agent answers them "
                          "with the library alone and with the library plus each candidate; a candidate under which "
                          "any anchor that passed (EM 1) fails is refused, naming the anchors. A pin is a promise, "
                          "not an ablation: the check runs in every mode and filtering, val_gate off included "
                          "(only for candidates the other gates passed); null = no anchors")

    @field_validator("anchors")
    @classmethod
    def _anchors_path(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("anchors must name a jsonl file, or be null for no anchors")
        return v


class SignalParams(_Strict):
    reward_floor: float = Field(0.25, ge=-1, le=1, description="training rows whose step reward A_t is below "
                                "this are dropped; A_t is a weighted mean of coarse signals in [-1, 1], so "
                                "-1 keeps every row and a floor outside [-1, 1] would keep all or none")


class TrainerParams(_Strict):
    """The knobs of the LoRA trainers, written once for every recipe: the weighted SFT trainer
    (``hasp.train.sft.SFTRecipe``, which sft, rs and opd run) and the DPO trainer read them from here, and
    a recipe block overrides some explicitly (``RecipeParams``). Paper App. D.3 / Table 13 (E1) values are
    named where the CPU demo departs from them."""

    lora_r: int = Field(16, ge=1, description="LoRA rank (paper: 16)")
    lora_alpha: int = Field(32, ge=1, description="LoRA alpha (paper: 32)")
    lora_dropout: float = Field(0.05, ge=0, lt=1, description="dropout on the LoRA branch")
    target_modules: tuple[str, ...] = Field(
        ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
        description="linear modules that get LoRA adapters (Llama/Qwen names)")
    learning_rate: float = Field(2e-4, gt=0, description="peak learning rate; higher than the paper's 1e-5 "
                                                         "(7B, 10 epochs) because the CPU demo takes few steps")
    num_train_epochs: float = Field(10.0, gt=0, description="epochs over the SFT pool when max_steps is -1 "
                                                            "(paper E1: 10)")
    max_steps: int = Field(10, ge=-1, description="stop after this many optimizer steps; -1 = run "
                                                  "num_train_epochs")
    per_device_train_batch_size: int = Field(2, ge=1, description="micro-batch size (2 keeps the 135M model "
                                                                  "under ~5 GB RSS on CPU; 4 needs ~6-8 GB)")
    gradient_accumulation_steps: int = Field(1, ge=1, description="micro-batches per optimizer step")
    max_length: int = Field(512, ge=64, description="max tokens of prompt+target; older history turns are "
                                                    "dropped to fit")
    seed: int = Field(42, ge=0, le=SEED_MAX, description="seed for LoRA init, data order and dropout "
                                                        "(0..2^32-1; the paper's runs used 42); presets keep it, "
                                                        "so repeating a preset over seeds changes only this")
    weighting: Literal["loss", "oversample", "none", "advantage"] = Field(
        "loss", description="how the step advantage A_t is honoured by the SFT trainer (sft, rs, opd): per-row "
                            "loss weight, oversampling, or ignored; grpo and sage train with advantage (a signed, "
                            "unnormalised weight: the policy-gradient loss)")
    normalize_weights: bool = Field(True, description="weighting=loss: divide weights by their mean so the "
                                                      "average row weight is 1")
    oversample_factor: float = Field(2.0, gt=0, description="weighting=oversample: total copies = "
                                                            "round(factor * n_rows), split by weight")
    lr_scheduler_type: str = Field("linear", description="transformers LR scheduler name")
    warmup_steps: float = Field(0.0, ge=0, description="warmup steps (int) or ratio of total steps (float < 1)")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping norm")
    logging_steps: int = Field(1, ge=1, description="log (and call log_callback) every N optimizer steps")
    gradient_checkpointing: bool = Field(False, description="recompute activations (paper: on, GPU); off "
                                                            "because it is slower on CPU")
    trim_history: bool = Field(True, description="drop the oldest (assistant, observation) turns of a "
                                                 "too-long prompt")
    precision: Literal["fp32", "bf16", "auto"] = Field(
        "fp32", description="training dtype: fp32, bf16, or auto = bf16 where the GPU supports it, else fp32 "
                            "(paper: bf16; CPU runs stay fp32)")
    torch_threads: int | None = Field(
        None, ge=0, description="torch.set_num_threads for the run. null: torch default (all cores); 0: auto = "
                                "idle cores by the 1-min load average (min 1). Use fewer when an LLM server "
                                "shares the CPU: oversubscribed OpenMP threads made steps 3-5x slower. "
                                "Changing it changes float reduction order, so losses differ in the last digits")


RECIPES = ("sft", "rs", "opd", "dpo", "grpo", "sage")


class RolloutParams(_Strict):
    """How RS and OPD sample training trajectories (paper App. D.4); the sampler the caller passes in
    is built from these, and they are recorded with the run."""

    k: int = Field(2, ge=1, description="trajectories sampled per training question (group size)")
    temperature: float = Field(0.9, ge=0, description="policy sampling temperature of training rollouts")
    top_p: float = Field(0.95, gt=0, le=1, description="nucleus sampling mass of training rollouts")
    max_steps: int = Field(5, ge=1, description="step budget of a training rollout")
    max_search_calls: int = Field(3, ge=0, description="SEARCH budget of a training rollout")
    max_read_calls: int = Field(3, ge=0, description="READ budget of a training rollout (paper: 0, since "
                                "teacher snippets replace READ)")
    teacher_snippets: bool = Field(False, description="SEARCH returns a teacher-written snippet (paper: on "
                                   "for every rollout-using run; needs a teacher)")


class HindsightParams(_Strict):
    """Material for a policy that almost never succeeds: a training question whose gold answer already
    appeared in an observation gets rows that answer it at the states after that observation.
    Gold labels of training questions only; the rows are counted apart from the recipe's own rows."""

    enabled: bool = Field(False, description="add hindsight rows (an option beside the paper's recipe, "
                          "reported apart)")
    weight: float = Field(1.0, gt=0, description="sample weight of a hindsight row before normalisation")
    states: Literal["first", "after"] = Field(
        "first", description="first: one row per question, at the first state after its gold answer was "
        "observed; after: a row at every later state of every failed sample of the question (where a small "
        "policy keeps searching or re-reading with the answer in view)")


class RecipeParams(BaseModel):
    """A recipe's block under ``train``: the recipe's own knobs, and explicit overrides of the shared
    trainer knobs (``TrainerParams``) its trainer reads, TRL style (a recipe's config inherits the shared
    training arguments and overrides some). The run uses ``TrainParams.trainer(recipe)``: the shared
    values with the block's overrides. A key that is neither the recipe's knob nor a trainer knob it
    reads is an error naming the key, so no value in a block is silently ignored."""

    model_config = ConfigDict(extra="allow")
    #: the recipe whose block this is (error messages)
    RECIPE: ClassVar[str] = ""
    #: the shared trainer knobs the recipe's trainer reads: the only ones its block may override
    READS: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="after")
    def _trainer_overrides(self) -> "RecipeParams":
        extra = self.__pydantic_extra__ or {}
        errors = []
        for key in extra:
            if key not in TrainerParams.model_fields:
                errors.append(InitErrorDetails(type=PydanticCustomError(
                    "unknown_knob", "neither a knob of recipe {recipe} nor a train knob", {"recipe": self.RECIPE}),
                    loc=(key,), input=extra[key]))
            elif key not in self.READS:
                errors.append(InitErrorDetails(type=PydanticCustomError(
                    "unread_knob", "the {recipe} trainer does not read this train knob", {"recipe": self.RECIPE}),
                    loc=(key,), input=extra[key]))
        if not errors and extra:
            try:
                checked = TrainerParams.model_validate(extra)  # each override under its shared field's bounds
            except ValidationError as e:
                errors = [InitErrorDetails(type=PydanticCustomError(er["type"], er["msg"]), loc=er["loc"],
                                           input=er["input"]) for er in e.errors()]
            else:
                for key in extra:
                    extra[key] = getattr(checked, key)
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    def trainer_overrides(self) -> dict[str, Any]:
        """The shared trainer knobs this block sets."""
        return dict(self.__pydantic_extra__ or {})


#: the SFT trainer reads every trainer knob; sft, rs and opd train with it
SFT_TRAINER_READS = frozenset(TrainerParams.model_fields)


class SFTParams(RecipeParams):
    """Weighted LoRA SFT on the epoch's Objective-A rows (paper App. D.6: the PF-corrected action at each
    step a PF changed). Those rows can hold no FINAL target when the PFs only defer premature answers, and
    a policy trained on them can stop answering; hindsight rows are the option that adds answer targets."""

    RECIPE: ClassVar[str] = "sft"
    READS: ClassVar[frozenset[str]] = SFT_TRAINER_READS

    hindsight: HindsightParams = Field(HindsightParams(), description="hindsight rows from the epoch's train-split "
                                       "rollout added to sft.jsonl (an option apart from the paper's recipe)")


class RSParams(RecipeParams):
    """Rejection sampling (paper §3.3, App. D.4): sample, score, filter, SFT on the kept steps, repeat
    from the new checkpoint. Each round's SFT takes the train knobs with this block's overrides (paper
    E2/E5: learning_rate 5e-6, num_train_epochs 8)."""

    RECIPE: ClassVar[str] = "rs"
    READS: ClassVar[frozenset[str]] = SFT_TRAINER_READS

    iterations: int = Field(1, ge=1, description="sample-filter-train rounds; each samples from the "
                            "checkpoint the previous one wrote")
    beta_success: float = Field(0.5, ge=0, description="beta_1 of Score(tau) = beta_1 TaskSuccess + beta_2 A(tau) "
                                "(the paper leaves it open; 0.5/0.5 is App. E's episode blend)")
    beta_pf: float = Field(0.5, ge=0, description="beta_2: weight of the trajectory PF score A(tau)")
    skill_reward: bool = Field(True, description="use the SAGE skill-integrated reward as Score(tau) where a "
                               "trajectory carries one")
    min_score: float = Field(0.15, description="filter: keep a trajectory whose composite is at least this "
                             "(paper: 0.15)")
    em_weight: float = Field(0.7, ge=0, description="composite = em_weight EM + f1_weight F1 + "
                             "economy_weight StepEconomy")
    f1_weight: float = Field(0.2, ge=0, description="F1 weight of the filter composite")
    economy_weight: float = Field(0.1, ge=0, description="StepEconomy weight of the filter composite; "
                                  "StepEconomy = share of the step budget left when FINAL was given, 0 "
                                  "without a FINAL")
    keep_per_question: int = Field(1, ge=0, description="of a question's passing trajectories keep the "
                                   "top-scoring N (0 = all that pass)")
    row_weight: Literal["uniform", "score", "step"] = Field(
        "uniform", description="weight of a kept step: uniform, its trajectory's Score(tau), or its own A_t")
    hindsight: HindsightParams = Field(HindsightParams(), description="hindsight rows for questions with no "
                                       "kept trajectory (an option apart from the paper's recipe)")


class OPDParams(RecipeParams):
    """On-policy distillation (paper §3.3): roll out the current checkpoint with PFs active and train
    L = -sum_t w_t log pi(a~_t | s_t) on the corrected actions at the states it visited. Each round's SFT
    takes the train knobs with this block's overrides (paper E3: learning_rate 5e-6, num_train_epochs 10)."""

    RECIPE: ClassVar[str] = "opd"
    READS: ClassVar[frozenset[str]] = SFT_TRAINER_READS

    iterations: int = Field(1, ge=1, description="rollout-train rounds, each from the previous checkpoint")
    target: Literal["auto", "pf", "teacher"] = Field(
        "auto", description="who supplies a~_t: the PF correction, the teacher, or auto (teacher when one "
                            "is given, else PF); the run records which")
    reward_floor: float | None = Field(None, ge=-1, le=1, description="drop states whose w_t = A_t is below "
                                       "this; null = signals.reward_floor")
    teacher_max_tokens: int = Field(512, ge=8, description="reply budget of a teacher correction (paper: 512)")
    teacher_concurrency: int = Field(64, ge=1, description="teacher calls in flight (paper: 64)")
    hindsight: HindsightParams = Field(HindsightParams(), description="hindsight rows beside the corrected "
                                       "states (an option apart from the paper's recipe)")


class DPOParams(RecipeParams):
    """DPO (TRL DPOTrainer) on the Objective-A preference rows: chosen = PF-corrected action,
    rejected = the policy's original action. The trainer takes the train knobs with this block's
    overrides; it has no per-row loss weights, so the SFT trainer's weighting knobs are not among them."""

    RECIPE: ClassVar[str] = "dpo"
    READS: ClassVar[frozenset[str]] = SFT_TRAINER_READS - {"weighting", "normalize_weights", "oversample_factor"}

    rows: str = Field(art.DPO, description="preference rows file of a grid phase, relative to its folder")
    beta: float = Field(0.1, gt=0, description="DPO beta: how far the policy may move from the reference")
    loss_type: str = Field("sigmoid", description="TRL DPO loss type (sigmoid, ipo, hinge, ...)")


#: knobs a policy-gradient update fixes itself: one optimizer step over all of a round's rows (strictly
#: on-policy), the signed advantage as the row weight, no warmup or decay inside the single step
PG_FIXED = frozenset({"weighting", "normalize_weights", "oversample_factor", "max_steps", "num_train_epochs",
                      "gradient_accumulation_steps", "warmup_steps", "lr_scheduler_type"})


class PolicyGradientParams(RecipeParams):
    """What GRPO and SAGE share: rounds of G sampled episodes per group, a reward per episode, the
    advantage r - mean(group) (seed 001: not divided by the std), and one strictly on-policy update per
    round on the model's own reply tokens, observations masked (they are prompt, never target)."""

    READS: ClassVar[frozenset[str]] = SFT_TRAINER_READS - PG_FIXED

    iterations: int = Field(4, ge=1, description="sample-update rounds; each samples from the checkpoint the "
                            "previous one wrote and takes exactly one optimizer step")
    group_size: int = Field(4, ge=2, description="G: episodes sampled per question (GRPO) or sequential rollouts "
                            "per chain (SAGE); the advantage compares the members of a group")
    questions_per_round: int | None = Field(None, ge=1, description="questions (SAGE: chains) sampled per round, "
                                            "drawn afresh each round with train.seed; null = all of them")
    reward: Literal["success", "composite"] = Field(
        "success", description="outcome reward of an episode: success (EM) or App. D.4's composite "
        "(rs.em_weight EM + rs.f1_weight F1 + rs.economy_weight StepEconomy)")
    no_answer_penalty: float = Field(0.0, ge=0, description="subtracted from the reward of an episode that ends "
                                     "without a FINAL (seed 001 penalises ending without an action by 1.0)")
    scale_by_std: bool = Field(False, description="divide the advantage by the group's std (DeepSeek GRPO); "
                               "seed 001 and its baseline do not")
    beta: float = Field(0.0, ge=0, description="weight of the KL penalty to the recipe's start checkpoint "
                        "(k3 estimator per generated token); 0 = none, as in seed 001")


class GRPOParams(PolicyGradientParams):
    """GRPO on agent episodes (seed 001's baseline): G samples per training question from the served
    checkpoint, group-relative advantage, policy-gradient loss on the generated tokens only."""

    RECIPE: ClassVar[str] = "grpo"

    agent: Literal["pf", "react"] = Field("pf", description="the agent that samples: pf (PFs and library "
                                          "active, as RS samples) or react (no skills: seed 001's baseline)")


class SAGEParams(PolicyGradientParams):
    """SAGE (seed 001): GRPO over chains of two same-template training questions with sequential rollout
    (task 1, the policy's own skill proposal from that episode, task 2 with the skill in the library) and
    the skill-integrated reward."""

    RECIPE: ClassVar[str] = "sage"

    bonus: Literal["seed", "repair"] = Field(
        "seed", description="seed: the skill bonus of task 1 needs task 1 and task 2 solved and task 2 using "
        "task 1's skill (seed 001); repair: HASP's variant, task 1's skill earns the bonus when task 2 uses it "
        "and is solved, whether task 1 was solved or not (skills are mined from failed episodes)")
    proposal_max_tokens: int | None = Field(None, ge=16, description="reply budget of a chain's skill proposal; "
                                            "null = evolve.declarative_max_tokens")


class TrainParams(TrainerParams):
    enabled: bool = Field(True, description="false = the pipeline skips training")
    recipe: Literal["sft", "rs", "opd", "dpo", "grpo", "sage"] = Field(
        "sft", description="post-training recipe: sft (weighted LoRA SFT), rs (rejection sampling), opd "
                           "(on-policy distillation), dpo (preference rows), grpo (group-relative policy "
                           "gradient), sage (GRPO over skill chains with the skill-integrated reward)")
    preset: str | None = Field(None, description="an E1-E6 preset (paper Table 13) or its _cpu variant "
                               "(hasp/train/presets.yaml); its values replace the train knobs it names")
    objective: Literal["A", "B", "AB"] = Field(
        "A", description="rows sft and dpo train on: A = the policy's PF-corrected steps (sft.jsonl / dpo.jsonl), "
                         "B = the skill author's proposals weighted by r_skill (sft_skill.jsonl / dpo_skill.jsonl), "
                         "AB = both; rs and opd sample their own rows, so they take A only")
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="train knobs set over the preset, in the train section's own shape (e.g. max_steps: 5, "
                    "rs: {iterations: 1}): shorten or vary a preset without editing it; "
                    "from DVC: -S '++train.overrides.max_steps=5'")
    rollout: RolloutParams = Field(RolloutParams(), description="how RS and OPD sample training trajectories")
    sft: SFTParams = Field(SFTParams(), description="SFT knobs and trainer overrides (recipe sft)")
    rs: RSParams = Field(RSParams(), description="rejection sampling knobs and trainer overrides (recipe rs)")
    opd: OPDParams = Field(OPDParams(), description="on-policy distillation knobs and trainer overrides "
                           "(recipe opd)")
    dpo: DPOParams = Field(DPOParams(), description="DPO knobs and trainer overrides (recipe dpo)")
    grpo: GRPOParams = Field(GRPOParams(), description="GRPO knobs and trainer overrides (recipe grpo)")
    sage: SAGEParams = Field(SAGEParams(), description="SAGE knobs and trainer overrides (recipe sage)")

    @model_validator(mode="after")
    def _objective_needs_rows(self) -> "TrainParams":
        if self.objective != "A" and self.recipe not in ("sft", "dpo"):
            raise ValidationError.from_exception_data(type(self).__name__, [InitErrorDetails(
                type=PydanticCustomError("objective_recipe", "{objective} needs train.recipe sft or dpo (recipe "
                                         "{recipe} samples its own rows)",
                                         {"objective": self.objective, "recipe": self.recipe}),
                loc=("objective",), input=self.objective)])
        return self

    def trainer(self, recipe: str | None = None) -> TrainerParams:
        """The trainer knobs ``recipe`` (default: ``self.recipe``) runs with: the shared ones with its
        block's overrides."""
        recipe = recipe or self.recipe
        shared = self.model_dump(include=set(TrainerParams.model_fields))
        block = {"sft": self.sft, "rs": self.rs, "opd": self.opd, "dpo": self.dpo, "grpo": self.grpo,
                 "sage": self.sage}[recipe]
        return TrainerParams.model_validate({**shared, **block.trainer_overrides()})


class LoopSpec(_Strict):
    """The loop a preset runs its recipe in (paper App. D.2): V1 open (one frozen library) or V2 closed
    (evolve, refresh the data, train, per phase)."""

    kind: Literal["open", "closed"] = Field(description="open = V1, closed = V2")
    phases: int = Field(ge=1, description="closed loop: evolve-refresh-train phases; open loop: 1")
    evolve_mode: Literal["full", "lite"] | None = Field(description="evolution mode of a closed loop")


class ExperimentPreset(_Strict):
    """One row of the post-training grid, as data: a loop, a recipe and the train knobs it sets."""

    description: str = Field(description="what the preset is and where its numbers come from")
    loop: LoopSpec = Field(description="the loop the recipe runs in")
    teacher: str | None = Field(description="teacher model the paper ran (null = none; a CPU variant uses "
                                "whatever teacher params configure)")
    train: dict[str, Any] = Field(description="train-section values; validated as train knobs")
    start: str | None = Field(None, description="the preset of the same group whose trained checkpoint this one "
                              "starts from (it runs earlier in the same grid); null = the grid's base model")



class EvalParams(_Strict):
    """``hasp eval``: paper splits of benchmark files (App. D.1), teacher-snippet mode (App. D.4), judge."""

    n_test: int = Field(200, ge=1, description="first N rows of a benchmark file are its test set")
    n_seed: int = Field(50, ge=0, description="seed pool drawn from the shuffled tail")
    n_val: int = Field(50, ge=0, description="val pool drawn from the shuffled tail")
    split_seed: int = Field(42, ge=0, le=SEED_MAX, description="shuffle seed of the tail (0..2^32-1; "
                                                              "a negative seed is almost always a typo)")
    teacher_snippets: bool = Field(False, description="SEARCH returns a teacher-written snippet, READ is "
                                                      "disabled")
    snippet_max_tokens: int = Field(200, ge=16, description="reply budget of a teacher snippet")
    snippet_doc_chars: int = Field(600, ge=50, description="characters of each retrieved doc shown to the "
                                                           "teacher")
    judge_max_tokens: int = Field(8, ge=1, description="reply budget of the LLM judge")
    traces: bool = Field(True, description="log each episode as an MLflow trace (PF events as spans)")


class SandboxParams(_Strict):
    """Untrusted (generated) PF code and programs under test: what the sandbox must have and
    what a sandboxed PF may hand back."""

    allow_weaker: bool = Field(False, description="run untrusted code even when an isolation layer "
                               "(namespace, other uid, seccomp, Landlock, rlimits) cannot be installed here; the "
                               "missing layers are recorded on every run. Off = refuse")
    max_action_arg_chars: int = Field(1000, ge=16, description="longest action argument a sandboxed PF "
                                      "may return; longer ones are cut and the cut is recorded")
    max_context_chars: int = Field(2000, ge=16, description="longest text a sandboxed PF may inject per "
                                   "fire; longer text is cut and the cut is recorded")
    pf_cpu_budget_s: float = Field(2.0, gt=0, description="CPU seconds one sandboxed PF may use in one "
                                   "episode; past it the PF is disabled for the episode and logged")


class RunnerParams(_Strict):
    """Where rollout episodes run: threads in this process, or one Prefect task per episode on a
    Dask cluster (``prefect-dask``). The runner changes where an episode runs, never what it does:
    the same questions under greedy decoding give the same trajectories."""

    kind: Literal["threads", "dask"] = Field(
        "threads", description="threads = a thread pool in this process (llm.max_concurrency episodes at once); "
        "dask = one Prefect task per episode through prefect-dask's DaskTaskRunner")
    address: str | None = Field(None, description="dask: scheduler address of a running cluster "
                                "(tcp://host:8786); null = start a LocalCluster for the run")
    n_workers: int = Field(2, ge=1, description="dask LocalCluster: worker processes")
    threads_per_worker: int = Field(8, ge=1, description="dask LocalCluster: tasks one worker process runs "
                                    "at once (their episodes wait on the model, so more than its cores)")
    episodes_per_task: int = Field(1, ge=1, description="dask: episodes one Prefect task runs side by side; "
                                   "1 = one task per episode; more spread a task run's own cost (its API "
                                   "client and events) over several episodes, and a lost task loses them all")
    retries: int = Field(1, ge=0, description="dask: Prefect task retries of an episode whose task raised; an "
                         "episode whose worker died is first re-run by Dask on another worker, and one that "
                         "still fails is recorded as a failed episode (terminated=error), never the run")

    @model_validator(mode="after")
    def _address_needs_dask(self) -> "RunnerParams":
        if self.address and self.kind != "dask":
            raise ValueError(f"address is a Dask scheduler address; it needs kind: dask (kind is {self.kind})")
        return self


class TrackingParams(_Strict):
    experiment: str = Field("hasp-search", description="MLflow experiment name")
    traces_per_file: int = Field(
        50, ge=0, description="episodes of each evolution trajectory file (Phase A rollout, val runs, the epoch's "
                              "evaluation) logged as MLflow traces on the epoch's run; 0 logs none")


class Params(_Strict):
    data: DataParams = DataParams()
    llm: LLMParams = LLMParams()
    teacher: TeacherParams = TeacherParams()
    agent: AgentParams = AgentParams()
    harness: HarnessParams = HarnessParams()
    evolve: EvolveParams = EvolveParams()
    signals: SignalParams = SignalParams()
    train: TrainParams = TrainParams()
    tracking: TrackingParams = TrackingParams()
    eval: EvalParams = EvalParams()
    sandbox: SandboxParams = SandboxParams()
    runner: RunnerParams = RunnerParams()
    demo: dict[str, Any] = Field(default_factory=dict, description="the scale `hasp demo` runs at: "
                                 "section.key -> value, applied over the sections above")

    @model_validator(mode="after")
    def _demo_keys_exist(self) -> "Params":
        for dotted in self.demo:
            node: Any = self
            for part in str(dotted).split("."):
                fields = type(node).model_fields if isinstance(node, BaseModel) else {}
                if part not in fields or part == "demo":
                    raise ValueError(f"demo: {dotted} names no setting")
                node = getattr(node, part)
        return self

    def section_hash(self, *names: str, exclude: Collection[str] = ()) -> str:
        """Content hash of some sections: the params part of a cache key. ``exclude`` names
        ``section.field`` knobs the cached step does not read (so changing them keeps the cache)."""
        dump = {n: getattr(self, n).model_dump(mode="json") for n in names}
        for dotted in exclude:
            sec, _, key = dotted.partition(".")
            dump.get(sec, {}).pop(key, None)
        blob = json.dumps(dump, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


class ParamsError(ValueError):
    """A params file that cannot be used; the message is one line that names the file."""


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ParamsError(f"{path}: no such params file") from None
    except OSError as e:
        raise ParamsError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise ParamsError(f"{path}: not valid YAML{at}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: top level must be a mapping of sections, not a {type(raw).__name__}")
    return raw


def demo_params(path: Path | str | None) -> Params:
    """``path`` with its ``demo:`` overrides applied: the scale of ``hasp demo`` (a few one-hop
    questions, short episodes) stated in the same file as every other knob."""
    base = load_params(path)
    try:
        return load_params(path, base.demo)
    except ParamsError as e:
        raise ParamsError(f"{e} (set by its demo: section)") from None


#: the params file a command reads when none is named, in the folder it runs in
DEFAULT_PARAMS_FILE = Path("params.yaml")


def params_file(path: Path | str | None) -> Path | None:
    """The file a command reads: ``path`` when one is named (it must exist: a typo must not silently run
    on defaults), else ``./params.yaml`` when there is one, else None: the built-in defaults, so every
    command also runs outside the repository."""
    if path is not None:
        return Path(path)
    return DEFAULT_PARAMS_FILE if DEFAULT_PARAMS_FILE.is_file() else None


def defaults_notice() -> str:
    """The one line a command prints when it runs on the built-in defaults."""
    return (f"no {DEFAULT_PARAMS_FILE} in {Path.cwd()}: running on the built-in defaults "
            "(--params FILE reads one)")


def load_params(path: Path | str | None = None, overrides: dict[str, Any] | None = None) -> Params:
    """The one way to read params: ``path`` must exist (a typo must not silently run on defaults);
    ``None`` means the schema defaults. ``overrides`` maps ``section.key`` to a value."""
    raw = _read_mapping(Path(path)) if path is not None else {}
    where = str(path) if path is not None else "params"
    for dotted, value in (overrides or {}).items():
        node = raw
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ParamsError(f"{where}: {p} is not a mapping, cannot set {dotted}")
        node[leaf] = value
    try:
        return Params.model_validate(raw)
    except ValidationError as e:
        def line(loc: tuple[Any, ...]) -> str:
            dotted = ".".join(map(str, loc))
            if path is None or any(dotted == k or dotted.startswith(f"{k}.") for k in overrides or {}):
                return ""  # the value came from an override, not from the file
            n = _yaml_line(Path(path), loc)
            return f"line {n}" if n else ""

        msgs = "; ".join(": ".join(x for x in (line(er["loc"]), ".".join(map(str, er["loc"])),
                                             er["msg"].removeprefix("Value error, ")) if x)
                         for er in e.errors())
        raise ParamsError(f"{where}: {msgs}") from None


def _yaml_line(path: Path, loc: tuple[Any, ...]) -> int | None:
    """The line of ``path`` that sets the deepest key of ``loc`` it holds (1-based); None when the file
    cannot be read again or sets none of it. Only asked when a value was refused, so the file is composed
    a second time then and not on every load."""
    try:
        node = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    found = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            hit = next((kv for kv in node.value if isinstance(kv[0], yaml.ScalarNode) and kv[0].value == str(part)),
                       None)
            if hit is None:
                break
            found, node = hit[0].start_mark.line + 1, hit[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            found = node.start_mark.line + 1
        else:
            break
    return found
