"""Typed view of ``params.yaml``: one model per concern, validated once at load.

A bad value fails here with one message naming the key, never deep inside a run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataParams(_Strict):
    seed: int = 7
    n_questions: int = Field(90, ge=6)
    fractions: tuple[float, float, float] = (0.4, 0.2, 0.4)

    @model_validator(mode="after")
    def _fractions(self) -> "DataParams":
        if abs(sum(self.fractions) - 1.0) > 1e-6 or min(self.fractions) <= 0:
            raise ValueError("data.fractions must be three positive numbers summing to 1")
        return self


class EndpointParams(_Strict):
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None

    @model_validator(mode="after")
    def _pair(self) -> "EndpointParams":
        if self.base_url and not self.model:
            raise ValueError("model is required when base_url is set")
        return self


class LLMParams(EndpointParams):
    port: int = Field(8765, ge=1024, le=65535)
    timeout_s: float = Field(120, gt=0)
    max_retries: int = Field(3, ge=0)
    max_concurrency: int = Field(8, ge=1)


class AgentParams(_Strict):
    max_steps: int = Field(6, ge=1)
    max_search_calls: int = Field(3, ge=0)
    max_read_calls: int = Field(3, ge=0)
    temperature: float = Field(0.0, ge=0)
    max_tokens: int = Field(64, ge=8)
    top_k: int = Field(3, ge=1)
    snippet_chars: int = Field(120, ge=20)
    read_chars: int = Field(400, ge=50)
    max_modify_fires: int = Field(2, ge=0)
    final_on_budget: bool = True


class HarnessParams(_Strict):
    """Inference-time harness around the search agent (paper App. B.6): master switches,
    selection and the three budget classes. A variant (``hasp.agent.variants``) decides which
    surfaces exist at all; these switches can only turn surfaces off, never on."""

    skills_enabled: bool = True
    enable_program_functions: bool = True
    enable_skill_handlers: bool = True
    enable_prompt_only_skills: bool = True
    pf_only_mode: bool = False
    enable_difficulty_gating: bool = False
    difficulty_threshold: int = Field(2, ge=1, le=5)
    handler_vote_threshold: int = Field(4, ge=1)
    max_final_overrides: int = Field(1, ge=0)
    pf_selection: Literal["auto", "heuristic", "all"] = "auto"
    pf_top_k: int = Field(6, ge=0)
    mandatory_pfs: list[str] = Field(default_factory=lambda: [
        "retrieval_failure", "format_extraction_error", "relevant_content_extractor"])
    light_pfs: list[str] = Field(default_factory=lambda: ["premature_final", "insufficient_exploration"])
    decomposition_pfs: list[str] = Field(default_factory=lambda: [
        "decompose_complex_question", "iterative_refinement"])
    entity_pfs: list[str] = Field(default_factory=lambda: ["wrong_entity_confusion", "citation_mismatch"])
    max_skills_in_prompt: int = Field(6, ge=0)
    max_phase_instructions: int = Field(2, ge=0)
    pre_final_step_threshold: int = Field(3, ge=1)
    timeout_seconds: float = Field(600.0, gt=0)
    teacher_max_tokens: int = Field(64, ge=8)

    @field_validator("mandatory_pfs", "light_pfs", "decomposition_pfs", "entity_pfs")
    @classmethod
    def _ids(cls, v: list[str]) -> list[str]:
        bad = [x for x in v if not x or not x.replace("_", "").isalnum() or x != x.lower()]
        if bad:
            raise ValueError(f"not snake_case skill ids: {bad}")
        return list(dict.fromkeys(v))


class EvolveParams(_Strict):
    min_cluster_size: int = Field(3, ge=1)
    max_candidates: int = Field(5, ge=0)
    proposal_temperature: float = Field(0.7, ge=0)
    proposal_max_tokens: int = Field(600, ge=32)
    exec_threshold: float = Field(0.3, ge=0, le=1)
    new_group_threshold: float = Field(0.75, ge=0, le=1)
    same_group_threshold: float = Field(0.60, ge=0, le=1)
    max_library_size: int = Field(50, ge=1)
    # --- evolution modes and ablations (App. D.5, G.3); see hasp/evolve/gate.py for the gate table
    mode: Literal["lite", "full"] = Field("full", description="lite: sampled failures, <=3 proposals, "
                                          "compile check + id dedup only (no clustering/review/teacher)")
    filtering: Literal["none", "exec", "teacher", "full"] = Field(
        "full", description="which phases gate admission: none (parse only), exec (Phase D), "
                            "teacher (Phase E), full (D + E + val gate)")
    val_gate: bool = Field(True, description="full filtering also refuses candidates with dEM_val < 0")
    val_limit: int = Field(0, ge=0, description="val questions per gate run (0 = the whole val split)")
    r_skill_lambda: float = Field(0.5, ge=0, description="r_skill = Q_skill + lambda * dEM_val (App. E)")
    frontier_size: int = Field(3, ge=1, description="library versions kept in frontier.json (top-k by val EM)")
    rollback_tolerance: float = Field(0.05, ge=0, description="roll back when val EM < best frontier - this")
    summarizer: bool = Field(True, description="Phase B LLM failure summarizer on/off")
    summarizer_temperature: float = Field(0.3, ge=0)
    summarizer_max_tokens: int = Field(400, ge=32)
    summarizer_retries: int = Field(1, ge=0, description="re-asks after a malformed JSON reply")
    summarizer_max_failures: int = Field(0, ge=0, description="failed trajectories summarized (0 = all)")
    lite_failures: int = Field(20, ge=1, description="lite mode: failed trajectories sampled")
    lite_max_candidates: int = Field(3, ge=0, description="lite mode: proposals per epoch")
    prefilter: bool = Field(False, description="Phase A in two stages: a cheap no-skills pass finds the failing "
                                              "seed questions, the PF-aware rollout runs on those only")


class SignalParams(_Strict):
    reward_floor: float = 0.25


class TrainParams(_Strict):
    enabled: bool = True
    learning_rate: float = Field(2e-4, gt=0)
    max_steps: int = Field(30, ge=1)
    per_device_train_batch_size: int = Field(4, ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)
    lora_r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1)
    max_length: int = Field(768, ge=64)
    seed: int = 0


class EvalParams(_Strict):
    """``hasp eval``: paper splits of benchmark files (App. D.1), teacher-snippet mode (App. D.4), judge."""

    n_test: int = Field(200, ge=1)          # first N rows of a benchmark file are its test set
    n_seed: int = Field(50, ge=0)           # seed / val pools drawn from the shuffled tail
    n_val: int = Field(50, ge=0)
    split_seed: int = 42
    teacher_snippets: bool = False          # SEARCH returns a teacher-written snippet, READ is disabled
    snippet_max_tokens: int = Field(200, ge=16)
    snippet_doc_chars: int = Field(600, ge=50)   # characters of each retrieved doc shown to the teacher
    judge_max_tokens: int = Field(8, ge=1)
    traces: bool = True                     # each episode as an MLflow trace


class TrackingParams(_Strict):
    experiment: str = "hasp-search"


class Params(_Strict):
    data: DataParams = DataParams()
    llm: LLMParams = LLMParams()
    teacher: EndpointParams = EndpointParams()
    agent: AgentParams = AgentParams()
    harness: HarnessParams = HarnessParams()
    evolve: EvolveParams = EvolveParams()
    signals: SignalParams = SignalParams()
    train: TrainParams = TrainParams()
    tracking: TrackingParams = TrackingParams()
    eval: EvalParams = EvalParams()

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
    pass


def load_params(path: Path | str = "params.yaml", overrides: dict[str, Any] | None = None) -> Params:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else {}
    except yaml.YAMLError as e:
        raise ParamsError(f"{path}: not valid YAML: {e}") from e
    raw = raw or {}
    for dotted, value in (overrides or {}).items():
        node = raw
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    try:
        return Params(**raw)
    except ValidationError as e:
        msgs = "; ".join(f"{'.'.join(map(str, er['loc']))}: {er['msg']}" for er in e.errors())
        raise ParamsError(f"{path}: {msgs}") from e
