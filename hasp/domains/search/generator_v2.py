"""Version 2 of the generated benchmark: the same fictional world, asked and written harder.

Why a second version beside the first: every figure measured on version 1 keeps its meaning, and
version 2 tests what version 1 cannot:

- generalisation: each relation has several phrasings; for the test split some phrasings and some
  whole relations are never used in train/val, chosen deterministically from the seed
  (``template_plan``) and recorded in ``templates.json``; each row says its ``template`` and whether
  train/val ``seen`` it;
- surface variation: the corpus writes dates and numbers in several formats ("in 1987", "in March
  1987", "1987"; "5", "five"; "1,200 km"), and gold answers carry the aliases a correct reader may
  give (full name and unique surname, "1987" and "in 1987", digits and number words), so EM with
  the SQuAD scorer accepts them;
- near-name distractors: more entities have a look-alike differing in one token, and a question is
  kept only when a reader who takes a look-alike for an entity of its chain answers wrongly; each
  row lists those look-alikes and the answer they would lead to.

The world, its relations and the base documents are version 1's (``generator``); this module adds
the per-version attributes, rewrites dates and numbers, and composes the questions.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from hasp.domains.search.generator import (
    _BRIDGES,
    _FINALS,
    _MONTHS,
    DEFAULT_FRACTIONS,
    QAItem,
    _aliases,
    _build_world,
    _Entity,
    _lay_out_corpus,
    _render,
    _World,
    _write_jsonl,
    split_sizes,
    write_templates,
)
from hasp.domains.search.metrics import normalize_answer

__all__ = ["BenchmarkV2", "Distractor", "QAItemV2", "TemplatePlan", "generate_benchmark_v2", "summary",
           "template_catalogue", "template_plan", "write_benchmark_v2"]

VERSION = 2
DEFAULT_HOP_WEIGHTS: dict[int, float] = {1: 0.3, 2: 0.4, 3: 0.3}
#: share of look-alike entities among people, companies, bands and cities (version 1: 0.25)
LOOKALIKE_RATE = 0.4
#: chance that a question starts from an entity that has a look-alike (version 1: 0.5)
LOOKALIKE_ANCHOR_RATE = 0.7
#: whole relations held out of train/val, one from each of this many anchor kinds
HELD_OUT_RELATIONS = 3
#: kinds a question can start from: a held-out relation must be askable in one hop
_ANCHOR_KINDS = ("person", "company", "band", "city")
#: what each test question is drawn as, in turn: a seen template, a held-out phrasing of a seen
#: relation, a held-out relation
_TEST_ROTATION = ("seen", "phrasing", "relation")
_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                 "twelve")

# relation id -> phrasings; index 0 is version 1's phrasing where the relation exists there
_MORE_PHRASINGS: dict[str, tuple[str, ...]] = {
    "person.birthplace": ("Where was {x} born?", "What is the birthplace of {x}?",
                          "Which city is {x} originally from?"),
    "person.birth_year": ("When was {x} born? Give the year.", "What is the birth year of {x}?",
                          "In which year was {x} born?"),
    "person.spouse": ("Who is the spouse of {x}?", "To whom is {x} married?", "Whom did {x} marry?"),
    "person.employer": ("Who employs {x}?", "What company is {x} employed by?", "For which firm does {x} work?"),
    "person.nationality": ("What country is {x} a citizen of?", "Which country's citizenship does {x} hold?",
                           "{x} holds the citizenship of which country?"),
    "company.founder": ("Who is the founder of {x}?", "Which person started {x}?", "{x} was founded by whom?"),
    "company.hq": ("Where is {x} based?", "Which city is home to the headquarters of {x}?",
                   "Where are the headquarters of {x}?"),
    "company.founded": ("When was {x} established? Give the year.", "What is the founding year of {x}?",
                        "In which year did {x} start out?"),
    "band.lead_singer": ("Who sings lead vocals for {x}?", "Who fronts {x}?", "Which singer leads {x}?"),
    "band.origin": ("Where did {x} form?", "Which city does {x} come from?", "What is the hometown of {x}?"),
    "band.formed": ("When did {x} get together? Give the year.", "In which year was {x} founded?",
                    "What year did {x} form in?"),
    "city.country": ("Which country is {x} in?", "{x} lies in which country?", "Where is {x}? Name the country."),
    "city.river": ("What river runs through {x}?", "Name the river that passes through {x}.",
                   "Which river crosses {x}?"),
    "city.mayor": ("Who serves as mayor of {x}?", "Who holds the office of mayor in {x}?",
                   "Who is {x}'s mayor?"),
    "city.founded": ("When was {x} founded? Give the year.", "What is the founding year of {x}?",
                     "In which year was {x} established?"),
    "country.capital": ("Which city is the capital of {x}?", "Name the capital city of {x}.",
                        "What city serves as the capital of {x}?"),
    "river.source": ("Where is the source of {x}? Name the country.", "In which country does {x} have its source?",
                     "Which country does {x} rise in?"),
    "river.length": ("What is the length of {x} in kilometres?", "How many kilometres long is {x}?",
                     "Over how many kilometres does {x} run?"),
}
_NEW_RELATIONS: dict[str, tuple[str, ...]] = {
    "band.members": ("How many members does {x} have?", "How many musicians play in {x}?",
                     "What is the number of members in {x}?"),
    "city.districts": ("How many districts does {x} have?", "Into how many districts is {x} divided?",
                       "What is the number of districts in {x}?"),
}
PHRASINGS: dict[str, tuple[str, ...]] = {
    **{f"{kind}.{rel}": (text, *_MORE_PHRASINGS[f"{kind}.{rel}"]) for kind, finals in _FINALS.items()
       for rel, text in finals.items()},
    **_NEW_RELATIONS,
}
_YEARS = ("birth_year", "founded", "formed")


def _template_ids(rel: str) -> list[str]:
    return [f"{rel}/{i}" for i in range(len(PHRASINGS[rel]))]


def template_catalogue() -> dict[str, dict[str, str]]:
    """Every phrasing by template id ``kind.relation/i``."""
    return {f"{rel}/{i}": {"relation": rel, "text": text}
            for rel, texts in PHRASINGS.items() for i, text in enumerate(texts)}


@dataclass(frozen=True)
class TemplatePlan:
    """Which templates train and val may use: none of a held-out relation, and not the held-out
    phrasing of any other relation. Test may use every template."""

    held_out_relations: tuple[str, ...]
    held_out_templates: tuple[str, ...]  # every template id train/val never use

    def trains_on(self, template: str) -> bool:
        return template not in self.held_out_templates


def template_plan(seed: int) -> TemplatePlan:
    """The held-out relations (one each from ``HELD_OUT_RELATIONS`` anchor kinds, so one hop reaches
    them) and one held-out phrasing of every other relation; a function of the seed alone."""
    rng = random.Random(f"hasp-benchmark-v2-templates:{seed}")
    kinds = rng.sample(_ANCHOR_KINDS, HELD_OUT_RELATIONS)
    relations = sorted(rng.choice(sorted(r for r in PHRASINGS if r.startswith(f"{k}."))) for k in kinds)
    held: list[str] = []
    for rel in sorted(PHRASINGS):
        ids = _template_ids(rel)
        held += ids if rel in relations else [rng.choice(ids)]
    return TemplatePlan(tuple(relations), tuple(held))


@dataclass(frozen=True)
class Distractor:
    """A near-name entity of a question's chain (``hop``: its position; ``hop == hops`` is the answer
    entity) and the answer a reader who took it for the real one would give (None: it lacks the fact)."""

    name: str
    hop: int
    answer: str | None


@dataclass(frozen=True)
class QAItemV2(QAItem):
    """A question with its template (``kind.relation/i``), whether train/val use that template, the
    relation of each hop (bridges, then the asked one) and its near-name distractors."""

    template: str
    seen: bool
    relations: list[str]
    distractors: list[Distractor]


@dataclass
class BenchmarkV2:
    corpus: list[dict[str, str]]
    splits: dict[str, list[QAItemV2]]
    plan: TemplatePlan
    seed: int

    @property
    def questions(self) -> list[QAItemV2]:
        return [q for name in ("train", "val", "test") for q in self.splits[name]]


# --------------------------------------------------------------------------------------------
# World: version 1's, with more look-alikes, a founding month and two counted attributes
# --------------------------------------------------------------------------------------------
def _build_world_v2(rng: random.Random, n_entities: int) -> _World:
    w = _build_world(rng, n_entities, lookalike_rate=LOOKALIKE_RATE)
    for e in w.entities:
        if e.kind in ("company", "band", "city"):
            e.attrs["month"] = rng.choice(_MONTHS)
        if e.kind == "band":
            e.attrs["members"] = rng.randrange(3, 8)
        if e.kind == "city":
            e.attrs["districts"] = rng.randrange(3, 13)
    for e in w.entities:  # look-alikes differ in what they count
        count = "members" if e.kind == "band" else "districts" if e.kind == "city" else None
        if count and e.lookalike is not None and e.lookalike < e.key:
            other = w.entities[e.lookalike].attrs[count]
            while e.attrs[count] == other:
                e.attrs[count] = rng.randrange(3, 8 if count == "members" else 13)
    return w


class _Names:
    """Which short forms of a name are unambiguous in the world (a surname, a company's first word)."""

    def __init__(self, w: _World) -> None:
        self.full = {e.name.lower() for e in w.entities}
        self.surnames = Counter(e.name.split()[-1].lower() for e in w.by_kind("person"))
        self.firsts = Counter(e.name.split()[0].lower() for e in w.by_kind("company"))

    def aliases(self, e: _Entity) -> list[str]:
        out = _aliases(e)
        if e.kind == "person":
            short, counts = e.name.split()[-1], self.surnames
        elif e.kind == "company":
            short, counts = e.name.split()[0], self.firsts
        else:
            return out
        return [*out, short] if counts[short.lower()] == 1 and short.lower() not in self.full else out


# --------------------------------------------------------------------------------------------
# Documents: version 1's text with dates and numbers in varied formats, and the counts
# --------------------------------------------------------------------------------------------
def _count(n: int, rng: random.Random) -> str:
    return rng.choice((str(n), _NUMBER_WORDS[n]))


def _when(year: int, month: str, rng: random.Random) -> str:
    return rng.choice((f"in {year}", f"in {month} {year}", f"in the year {year}"))


def _count_sentence(e: _Entity, rng: random.Random) -> str | None:
    n = e.name
    if e.kind == "band":
        c = _count(e.attrs["members"], rng)
        return rng.choice((f"The band has {c} members.", f"{n} plays as a line-up of {c} musicians.",
                           f"There are {c} members in {n}."))
    if e.kind == "city":
        c = _count(e.attrs["districts"], rng)
        return rng.choice((f"{n} is divided into {c} districts.", f"The city has {c} districts.",
                           f"{n} is made up of {c} districts."))
    return None


def _vary_formats(w: _World, e: _Entity, text: str, rng: random.Random) -> str:
    """Rewrite the dates and numbers version 1 writes in one format; facts are unchanged."""
    a, n = e.attrs, e.name
    if e.kind == "person":
        d, m, y = a["birth_day"], a["birth_month"], a["birth_year"]
        bp = w.entities[e.rels["birthplace"]].name
        text = text.replace(f"(born {d} {m} {y} in {bp})", rng.choice((
            f"(born {d} {m} {y} in {bp})", f"(born {m} {d}, {y}, in {bp})",
            f"(born in {bp} in {y})", f"(born {y} in {bp})")), 1)
        role = a.get("role")
        if role and role[0] == "founder":
            org = w.entities[role[1]]
            when = _when(org.attrs["founded"], org.attrs["month"], rng)
            text = text.replace(f"In {org.attrs['founded']}, {n} founded",
                                f"{when[0].upper()}{when[1:]}, {n} founded", 1)
    elif e.kind == "company":
        text = text.replace(f"founded in {a['founded']} by", f"founded {_when(a['founded'], a['month'], rng)} by", 1)
    elif e.kind == "band":
        text = text.replace(f" in {a['formed']}.", f" {_when(a['formed'], a['month'], rng)}.", 1)
    elif e.kind == "city":
        text = text.replace(f"founded in {a['founded']}.", f"founded {_when(a['founded'], a['month'], rng)}.", 1)
    elif e.kind == "river":
        km = a["length"]
        text = text.replace(f"{km} kilometres long", rng.choice(
            (f"{km} kilometres long", f"{km:,} km long", f"{km} km long")), 1)
    return text


def _render_v2(w: _World, e: _Entity) -> str:
    """Version 1's document with varied formats; a count sentence goes in after a random sentence."""
    rng = w.rng
    text = _vary_formats(w, e, _render(w, e), rng)
    extra = _count_sentence(e, rng)
    if extra is None:
        return text
    sentences = text.split(". ")
    at = rng.randrange(1, len(sentences) + 1)
    if at == len(sentences):
        return f"{text} {extra}"
    return ". ".join(sentences[:at]) + f". {extra} " + ". ".join(sentences[at:])


# --------------------------------------------------------------------------------------------
# Questions
# --------------------------------------------------------------------------------------------
def _answers(w: _World, names: _Names, e: _Entity, rel: str) -> list[str] | None:
    """Gold answers of ``rel`` about ``e``: the canonical form first, then its aliases."""
    if rel in e.rels:
        return names.aliases(w.entities[e.rels[rel]])
    if rel not in e.attrs:
        return None
    v = e.attrs[rel]
    if rel == "length":
        return [str(v), f"{v} km", f"{v} kilometres", f"{v} kilometers"]
    if rel in ("members", "districts"):
        return [str(v), _NUMBER_WORDS[v]]
    if rel in _YEARS:
        month = e.attrs.get("month") if rel != "birth_year" else None
        return [str(v), f"in {v}", *([f"{month} {v}", f"in {month} {v}"] if month else [])]
    return [str(v)]


def _follow(w: _World, names: _Names, start: _Entity, rels: list[str]) -> list[str] | None:
    """The answer reached from ``start`` along ``rels`` (bridges, then the asked relation)."""
    cur = start
    for r in rels[:-1]:
        if r not in cur.rels:
            return None
        cur = w.entities[cur.rels[r]]
    return _answers(w, names, cur, rels[-1])


@dataclass
class _Draft:
    text: str
    answers: list[str]
    chain: list[_Entity]
    relations: list[str]
    template: str
    distractors: list[Distractor] = field(default_factory=list)


@dataclass(frozen=True)
class _Rules:
    """Which relations a question may bridge over and ask, and which templates it may use."""

    bridge: Callable[[str], bool]
    ask: Callable[[str], bool]
    template: Callable[[str], bool]


def _compose(w: _World, names: _Names, rng: random.Random, anchor: _Entity, hops: int, rules: _Rules) -> _Draft | None:
    """A random walk of ``hops - 1`` bridges and one asked relation, within ``rules``; None when stuck
    or when a near-name distractor would lead to the gold answer too."""
    chain, phrase, rels = [anchor], anchor.name, []
    for _ in range(hops - 1):
        cur = chain[-1]
        opts = [r for r in _BRIDGES[cur.kind] if r in cur.rels and rules.bridge(f"{cur.kind}.{r}")
                and w.entities[cur.rels[r]] not in chain]
        if not opts:
            return None
        r = rng.choice(opts)
        phrase = _BRIDGES[cur.kind][r].format(x=phrase)
        rels.append(r)
        chain.append(w.entities[cur.rels[r]])
    last = chain[-1]

    def askable(rel: str) -> bool:
        final = rel.split(".")[1]
        return (rel.startswith(f"{last.kind}.") and rules.ask(rel) and _answers(w, names, last, final) is not None
                and not (final in last.rels and w.entities[last.rels[final]] in chain)
                and any(map(rules.template, _template_ids(rel))))

    asked = [rel for rel in PHRASINGS if askable(rel)]
    if not asked:
        return None
    rel = rng.choice(asked)
    template = rng.choice([t for t in _template_ids(rel) if rules.template(t)])
    final = rel.split(".")[1]
    rels.append(final)
    answers = _answers(w, names, last, final)
    assert answers is not None
    text = PHRASINGS[rel][int(template.rsplit("/", 1)[1])].format(x=phrase)
    draft = _Draft(text[0].upper() + text[1:], answers, chain,
                   [f"{e.kind}.{r}" for e, r in zip(chain, rels, strict=True)], template)
    gold = {normalize_answer(a) for a in answers}
    answer_entity = w.entities[last.rels[final]] if final in last.rels else None
    for hop, e in enumerate([*chain, *([answer_entity] if answer_entity else [])]):
        if e.lookalike is None:
            continue
        look = w.entities[e.lookalike]
        if look in chain or look is answer_entity:
            continue
        misled = [look.name] if hop == len(chain) else _follow(w, names, look, rels[hop:])
        if misled is not None and gold & {normalize_answer(a) for a in misled}:
            return None
        draft.distractors.append(Distractor(look.name, hop, misled[0] if misled else None))
    return draft


def _check(docs: Mapping[str, str], d: _Draft) -> None:
    """Construction check: each hop's doc names the next entity; the last doc states the answer in
    one of its gold forms (numbers and dates may be written as words or with a month)."""
    for a, b in pairwise(d.chain):
        assert b.name in docs[a.doc_id], (a.name, b.name)
    last = f" {normalize_answer(docs[d.chain[-1].doc_id])} "
    assert any(f" {normalize_answer(a)} " in last for a in d.answers), (d.chain[-1].name, d.answers)


def _rules(want: str, plan: TemplatePlan, seen_templates: set[str]) -> _Rules:
    held = set(plan.held_out_relations)
    if want == "train":
        return _Rules(lambda r: r not in held, lambda r: r not in held, plan.trains_on)
    if want == "seen":
        return _Rules(lambda r: r not in held, lambda r: r not in held, seen_templates.__contains__)
    if want == "phrasing":
        return _Rules(lambda r: True, lambda r: r not in held, lambda t: not plan.trains_on(t))
    return _Rules(lambda r: True, held.__contains__, lambda t: True)


def generate_benchmark_v2(seed: int, n_questions: int, n_entities: int | None = None, *,
                          hop_weights: Mapping[int, float] | None = None,
                          fractions: tuple[float, float, float] = DEFAULT_FRACTIONS) -> BenchmarkV2:
    """Build the world and its documents, then compose the splits: train and val within the
    template plan, then test in turn from a seen template, a held-out phrasing and a held-out
    relation. Same arguments -> identical output."""
    if n_questions < 0:
        raise ValueError("n_questions must be >= 0")
    n_entities = n_entities if n_entities is not None else max(120, 3 * n_questions)
    weights = {k: v for k, v in (hop_weights or DEFAULT_HOP_WEIGHTS).items() if v}
    if not weights or min(weights) < 1 or max(weights) > 3 or min(weights.values()) < 0:
        raise ValueError("version 2 hop_weights must map hop counts 1-3 to non-negative weights, not all zero")
    rng = random.Random(seed)
    w = _build_world_v2(rng, n_entities)
    names = _Names(w)
    corpus = _lay_out_corpus(w, rng, _render_v2)
    docs = {d["id"]: d["contents"] for d in corpus}
    plan = template_plan(seed)

    anchors = [e for e in w.entities if e.kind in _ANCHOR_KINDS]
    anchors_look = [e for e in anchors if e.lookalike is not None]
    hop_keys = sorted(weights)
    hop_w = [weights[k] for k in hop_keys]
    texts: set[str] = set()
    used: Counter[int] = Counter()
    seen_templates: set[str] = set()
    splits: dict[str, list[QAItemV2]] = {}
    attempts, count = 0, 0
    for name, size in zip(("train", "val", "test"), split_sizes(n_questions, fractions), strict=True):
        items: list[QAItemV2] = []
        while len(items) < size:
            attempts += 1
            if attempts > 200 * max(1, n_questions):
                raise ValueError(f"could only compose {count} unique questions; raise n_entities")
            want = "train" if name != "test" else _TEST_ROTATION[len(items) % len(_TEST_ROTATION)]
            anchor = rng.choice(anchors_look if anchors_look and rng.random() < LOOKALIKE_ANCHOR_RATE else anchors)
            if used[anchor.key] >= 2:
                continue
            d = _compose(w, names, rng, anchor, rng.choices(hop_keys, hop_w)[0], _rules(want, plan, seen_templates))
            if d is None or d.text in texts:
                continue
            _check(docs, d)
            texts.add(d.text)
            used[anchor.key] += 1
            items.append(QAItemV2(id=f"s{seed}-v2-q{count:04d}", question=d.text, answers=d.answers,
                                  hops=len(d.chain), support=[e.doc_id for e in d.chain], template=d.template,
                                  seen=name != "test" or d.template in seen_templates, relations=d.relations,
                                  distractors=d.distractors))
            count += 1
        splits[name] = items
        if name != "test":
            seen_templates |= {q.template for q in items}
    return BenchmarkV2(corpus=corpus, splits=splits, plan=plan, seed=seed)


def write_benchmark_v2(bench: BenchmarkV2, out_dir: str | Path) -> dict[str, Path]:
    """Write ``corpus.jsonl``, ``{train,val,test}.jsonl`` and ``templates.json``, byte-stable."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"corpus": out / "corpus.jsonl"}
    _write_jsonl(paths["corpus"], bench.corpus)
    for name, items in bench.splits.items():
        paths[name] = out / f"{name}.jsonl"
        _write_jsonl(paths[name], [q.to_dict() for q in items])
    paths["templates"] = write_templates(
        out / "templates.json", version=VERSION, catalogue=template_catalogue(),
        splits={name: [q.template for q in items] for name, items in bench.splits.items()},
        held_out_relations=bench.plan.held_out_relations, held_out_templates=bench.plan.held_out_templates)
    return paths


def summary(bench: BenchmarkV2) -> dict[str, Any]:
    """Test questions by template status: what a generalisation figure is computed over."""
    test = bench.splits["test"]
    return {"test_unseen": sum(not q.seen for q in test)}
