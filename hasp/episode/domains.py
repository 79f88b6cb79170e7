"""Domains as types: what an episode of search, math or code needs besides the agent loop.

A domain says who an item is (qid, question, answers), what it opens once per built episode function
(the search index, the sandbox check of code), the environment of one item, its budgets and how the
harness runs on it. The spec (``hasp.episode.spec``) holds one, so a domain is decided once, where the
spec is made, instead of by string tests along the way. Every domain is plain picklable data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from hasp.agent.loop import AgentConfig, Environment, agent_config
from hasp.agent.react import ReactEnvironment
from hasp.agent.variants import Variant
from hasp.config import HarnessParams, Params


class Domain:
    """A kind of task: what an episode needs besides the agent loop. The public task API's general form.

    Search, math and code are three instances of it (``SearchDomain``, ``MathDomain``, ``CodeDomain``), and a
    user's declared ``hasp.api.Task`` runs as one (``hasp.episode.task.TaskDomain``). A user whose task needs
    more than tools and a scorer (state across steps, its own step budget or harness settings) subclasses it
    and passes an instance as ``--domain pkg.module:attr``: define ``name``, ``action_types`` (ending in
    ``FINAL``), ``environment`` (an ``Environment``, e.g. ``hasp.agent.tool_env.ToolEnvironment``, that
    parses, executes and scores) and ``load_items`` (its rows; else ``--dataset FILE`` gives them); the
    other members have defaults. An instance must be picklable (a module-level class), as a ``Task`` is.
    """

    name: ClassVar[str] = ""
    #: the skills a prompt lists: "ranked" (best by mode and keywords) or "all"
    prompt_skills: ClassVar[str] = "ranked"
    #: what an evaluation of the domain reports besides EM/F1, so the runner asks the domain, never its name:
    #: teacher snippets and the LLM judge (short web answers), the vocabulary extractor's ceiling and its
    #: rewrite share (search PFs answer through it), pass@1 and the sandbox layers of graded programs (code)
    teacher_snippets: ClassVar[bool] = False
    judged: ClassVar[bool] = False
    vocabulary: ClassVar[bool] = False
    graded_programs: ClassVar[bool] = False
    #: the actions its agent proposes (what a PF is asked about in Phase D and what the proposer is told)
    action_types: ClassVar[tuple[str, ...]] = ("FINAL",)
    #: which Phase B detector set reads its failed episodes (``hasp.evolve.detectors.DETECTOR_SETS``)
    detectors: ClassVar[str] = "answer"
    #: the skill folder its PF variants start from when none is named (None: none)
    library: ClassVar[str | Path | None] = None
    #: optional ``ceiling(items) -> [score per item]``: what a deterministic extractor reaches, reported beside
    #: the agent's score (a method of the subclass; None: none)
    ceiling: ClassVar[Any] = None

    @property
    def action_forms(self) -> tuple[str, ...]:
        """The actions as the proposer's prompt shows them (``SEARCH[query]``)."""
        return tuple(f"{a}[answer]" if a == "FINAL" else f"{a}[input]" for a in self.action_types)

    def load_items(self) -> list[Any] | None:
        """Every item of the domain (an epoch splits them by ``data.fractions``), or None when they come
        from a dataset (``--dataset``; the built-ins read data folders and benchmark files)."""
        return None

    def identity(self, item: Any) -> tuple[str, str, list[str]]:
        """(question id, question, answers) of one item."""
        return str(item.id), str(item.question), list(item.answers)

    def check(self, variant: Variant) -> None:
        """Raise ``ValueError`` naming the variant when this domain cannot run it."""
        if variant.teacher_postprocess:
            raise ValueError(f"variant {variant.name} is web-search only (it post-processes a web-search FINAL); "
                             f"for {self.name} use react, prompt, pf or pf_teacher")

    def config(self, params: Params, variant: Variant) -> AgentConfig:
        """The agent's settings for one variant (step budget, tokens)."""
        return agent_config(params)

    def harness(self, params: Params) -> HarnessParams:
        """The harness settings its episodes run with."""
        return params.harness

    def open(self, params: Params) -> Any:
        """What the domain opens once per built episode function (an index, a checked sandbox), or None."""
        return None

    def environment(self, item: Any, opened: Any, *, params: Params, cfg: AgentConfig, teacher: Any,
                    snippets: bool) -> Environment:
        """The environment of one item's episode: its prompt, parser, actions and scorer."""
        raise NotImplementedError(f"{type(self).__name__}.environment: a domain builds each item's environment")


@dataclass(frozen=True)
class SearchDomain(Domain):
    """Multi-step search: the BM25 index of a prepared data folder (``data_dir``), or an evaluation
    dataset's retriever (``dataset``: an ``EvalDataset`` as shipped, which rebuilds its retriever from
    its files in a worker)."""

    data_dir: Path | None = None
    dataset: Any = None
    name: ClassVar[str] = "search"
    teacher_snippets: ClassVar[bool] = True
    judged: ClassVar[bool] = True
    vocabulary: ClassVar[bool] = True
    action_types: ClassVar[tuple[str, ...]] = ("SEARCH", "READ", "FINAL")
    action_forms: ClassVar[tuple[str, ...]] = ("SEARCH[query]", "READ[doc_id]", "FINAL[answer]")
    detectors: ClassVar[str] = "search"

    def items(self, split: str, limit: int | None = None) -> list[Any]:
        """The questions of ``split`` in the data folder."""
        from hasp.domains.search.generator import load_questions

        assert self.data_dir is not None, "items come from a data folder"
        items = load_questions(Path(self.data_dir) / f"{split}.jsonl")
        return items[:limit] if limit else items

    def check(self, variant: Variant) -> None:
        pass  # every variant, the web-search answer post-processing ones included

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
class _SingleStep(Domain):
    """What math and code share: one answer, at most one PF-triggered revision, every library PF."""

    #: completion budget of one reply (``agent.max_tokens`` is sized for short ReAct steps)
    max_tokens: int = 256
    #: a PF that adds hints gets the model one revision turn
    revise: bool = True
    #: every skill's summary in the prompt variant: a single-step skill is a check for every answer
    prompt_skills: ClassVar[str] = "all"

    def config(self, params: Params, variant: Variant) -> AgentConfig:
        a = params.agent
        return AgentConfig(max_steps=2 if (self.revise and variant.use_pfs) else 1, temperature=a.temperature,
                           max_tokens=self.max_tokens, max_modify_fires=a.max_modify_fires, final_on_budget=False,
                           constrained=params.llm.constrained)

    def harness(self, params: Params) -> HarnessParams:
        """Every PF of the library on every answer: the selection lists name search skills."""
        return params.harness.model_copy(update={"pf_selection": "all", "mandatory_pfs": [], "light_pfs": [],
                                                 "decomposition_pfs": [], "entity_pfs": []})


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

