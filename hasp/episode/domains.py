"""Domains as types: what an episode of search, math or code needs besides the agent loop.

A domain says who an item is (qid, question, answers), what it opens once per built episode function
(the search index, the sandbox check of code), the environment of one item, its budgets and how the
harness runs on it. The spec (``hasp.episode.spec``) holds one, so a domain is decided once, where the
spec is made, instead of by string tests along the way. Every domain is plain picklable data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from hasp.agent.loop import AgentConfig, Environment, agent_config
from hasp.agent.react import ReactEnvironment
from hasp.agent.variants import Variant
from hasp.config import HarnessParams, Params


class Domain(Protocol):
    name: str
    prompt_skills: str  # the skills a prompt lists: "ranked" (best by mode and keywords) or "all"
    #: what an evaluation of the domain reports besides EM/F1, so the runner asks the domain, never its name:
    #: teacher snippets and the LLM judge (short web answers), the vocabulary extractor's ceiling and its
    #: rewrite share (search PFs answer through it), pass@1 and the sandbox layers of graded programs (code)
    teacher_snippets: bool
    judged: bool
    vocabulary: bool
    graded_programs: bool
    #: the actions its agent proposes (what a PF is asked about in Phase D and what the proposer is told)
    action_types: tuple[str, ...]
    #: the actions as the proposer's prompt shows them (``SEARCH[query]``)
    action_forms: tuple[str, ...]
    #: which Phase B detector set reads its failed episodes (``hasp.evolve.detectors.DETECTOR_SETS``)
    detectors: str

    def identity(self, item: Any) -> tuple[str, str, list[str]]: ...
    def check(self, variant: Variant) -> None: ...
    def config(self, params: Params, variant: Variant) -> AgentConfig: ...
    def harness(self, params: Params) -> HarnessParams: ...
    def open(self, params: Params) -> Any: ...
    def environment(self, item: Any, opened: Any, *, params: Params, cfg: AgentConfig, teacher: Any,
                    snippets: bool) -> Environment: ...


@dataclass(frozen=True)
class SearchDomain:
    """Multi-step search: the BM25 index of a prepared data folder (``data_dir``), or an evaluation
    dataset's retriever (``dataset``: an ``EvalDataset`` as shipped, which rebuilds its retriever from
    its files in a worker)."""

    data_dir: Path | None = None
    dataset: Any = None
    name: ClassVar[str] = "search"
    prompt_skills: ClassVar[str] = "ranked"
    teacher_snippets: ClassVar[bool] = True
    judged: ClassVar[bool] = True
    vocabulary: ClassVar[bool] = True
    graded_programs: ClassVar[bool] = False
    action_types: ClassVar[tuple[str, ...]] = ("SEARCH", "READ", "FINAL")
    action_forms: ClassVar[tuple[str, ...]] = ("SEARCH[query]", "READ[doc_id]", "FINAL[answer]")
    detectors: ClassVar[str] = "search"

    def items(self, split: str, limit: int | None = None) -> list[Any]:
        """The questions of ``split`` in the data folder."""
        from hasp.domains.search.generator import load_questions

        assert self.data_dir is not None, "items come from a data folder"
        items = load_questions(Path(self.data_dir) / f"{split}.jsonl")
        return items[:limit] if limit else items

    def identity(self, item: Any) -> tuple[str, str, list[str]]:
        return str(item.id), str(item.question), list(item.answers)

    def check(self, variant: Variant) -> None:
        pass

    def config(self, params: Params, variant: Variant) -> AgentConfig:
        return agent_config(params)

    def harness(self, params: Params) -> HarnessParams:
        return params.harness

    def open(self, params: Params) -> Any:
        """The retriever the tools search."""
        if self.dataset is not None:
            return self.dataset.with_retriever(params).retriever
        from hasp.domains.search.task import SearchTask

        assert self.data_dir is not None, "a search domain names a data folder or a dataset"
        return SearchTask.load(Path(self.data_dir)).retriever

    def environment(self, item: Any, opened: Any, *, params: Params, cfg: AgentConfig, teacher: Any,
                    snippets: bool) -> Environment:
        """BM25 tools over ``opened`` (the retriever), behind the teacher-snippet wrapper in snippet mode."""
        from hasp.domains.search.task import score
        from hasp.domains.search.teacher_snippets import TeacherSnippetEnvironment
        from hasp.domains.search.tools import SearchEnvironment

        a, e = params.agent, params.eval
        tools: Any = SearchEnvironment(opened, top_k=a.top_k, snippet_chars=a.snippet_chars, read_chars=a.read_chars)
        if snippets:
            tools = TeacherSnippetEnvironment(tools, teacher, max_tokens=e.snippet_max_tokens,
                                              doc_chars=e.snippet_doc_chars)
        return ReactEnvironment(tools, max_search_calls=cfg.max_search_calls, max_read_calls=cfg.max_read_calls,
                                scorer=score)


@dataclass(frozen=True)
class _SingleStep:
    """What math and code share: one answer, at most one PF-triggered revision, every library PF."""

    #: completion budget of one reply (``agent.max_tokens`` is sized for short ReAct steps)
    max_tokens: int = 256
    #: a PF that adds hints gets the model one revision turn
    revise: bool = True
    name: ClassVar[str] = ""
    #: every skill's summary in the prompt variant: a single-step skill is a check for every answer
    prompt_skills: ClassVar[str] = "all"
    teacher_snippets: ClassVar[bool] = False
    judged: ClassVar[bool] = False
    vocabulary: ClassVar[bool] = False
    graded_programs: ClassVar[bool] = False
    action_types: ClassVar[tuple[str, ...]] = ("FINAL",)
    action_forms: ClassVar[tuple[str, ...]] = ("FINAL[answer]",)
    detectors: ClassVar[str] = "answer"

    def check(self, variant: Variant) -> None:
        if variant.teacher_postprocess:
            raise ValueError(f"variant {variant.name} is web-search only (it post-processes a web-search FINAL); "
                             f"for {self.name} use react, prompt, pf or pf_teacher")

    def config(self, params: Params, variant: Variant) -> AgentConfig:
        a = params.agent
        return AgentConfig(max_steps=2 if (self.revise and variant.use_pfs) else 1, temperature=a.temperature,
                           max_tokens=self.max_tokens, max_modify_fires=a.max_modify_fires, final_on_budget=False,
                           constrained=params.llm.constrained)

    def harness(self, params: Params) -> HarnessParams:
        """Every PF of the library on every answer: the selection lists name search skills."""
        return params.harness.model_copy(update={"pf_selection": "all", "mandatory_pfs": [], "light_pfs": [],
                                                 "decomposition_pfs": [], "entity_pfs": []})

    def open(self, params: Params) -> Any:
        return None


@dataclass(frozen=True)
class MathDomain(_SingleStep):
    """Single-step math (Game of 24, AIME/AMC, AgentFlow), graded by exact equivalence or the 24 verifier."""

    name: ClassVar[str] = "math"

    def identity(self, item: Any) -> tuple[str, str, list[str]]:
        return str(item.id), str(item.problem), list(item.answers)

    def environment(self, item: Any, opened: Any, *, params: Params, cfg: AgentConfig, teacher: Any,
                    snippets: bool) -> Environment:
        from hasp.domains.math.environment import environment

        return environment(item, cfg.max_tokens)


@dataclass(frozen=True)
class CodeDomain(_SingleStep):
    """Single-step code (HumanEval, MBPP, EvalPlus), graded by the item's tests in the program sandbox."""

    max_tokens: int = 384
    #: wall-clock limit of one program run
    timeout_s: float = 10.0
    name: ClassVar[str] = "code"
    graded_programs: ClassVar[bool] = True
    action_forms: ClassVar[tuple[str, ...]] = ("FINAL[program]",)

    def identity(self, item: Any) -> tuple[str, str, list[str]]:
        return str(item.task_id), str(item.prompt), list(getattr(item, "answers", []) or [])

    def open(self, params: Params) -> Any:
        """The sandbox's layers, checked once before any program runs: without ``sandbox.allow_weaker``
        a missing layer raises ``SandboxRefused`` here, with one line."""
        from hasp.sandbox.program import require_layers

        require_layers(allow_weaker=params.sandbox.allow_weaker)
        return params.sandbox.allow_weaker

    def environment(self, item: Any, opened: Any, *, params: Params, cfg: AgentConfig, teacher: Any,
                    snippets: bool) -> Environment:
        from hasp.domains.code.environment import environment

        return environment(item, allow_weaker=bool(opened), timeout_s=self.timeout_s)


#: the built-in domains by name; a user's task is a ``hasp.episode.task.TaskDomain`` beside them
BUILT_IN: dict[str, type] = {"search": SearchDomain, "math": MathDomain, "code": CodeDomain}


def domain_named(name: str, *, data_dir: Path | None = None, dataset: Any = None) -> Domain:
    """The built-in domain ``name`` of ``hasp eval --domain`` and of a dataset; the data folder or the
    evaluation dataset go to the domains that read one (search)."""
    kind = BUILT_IN.get(name)
    if kind is None:
        raise ValueError(f"unknown domain {name!r}; choose one of {', '.join(BUILT_IN)}")
    fields = getattr(kind, "__dataclass_fields__", {})
    return kind(**{k: v for k, v in (("data_dir", data_dir), ("dataset", dataset)) if k in fields})

