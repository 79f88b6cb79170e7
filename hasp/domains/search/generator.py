"""Generated multi-hop QA benchmark over a fictional world.

Why generated and fictional: a small CPU policy must not be able to answer from parametric memory,
the benchmark must ship without downloads, and it must be reproducible bit-for-bit from an int seed
(DVC/Prefect cache keys are content hashes of what this module writes).

Why it is hard in the right ways: entities come in look-alike pairs ("Varnok Tellis" / "Varnok
Tellin", "The Ashen Drift" / "The Ashen Tide") with different attributes, documents contain
negations ("... was not born in Y") and several dates, so naive keyword matching or reading the
wrong document gives a wrong answer — the failure modes Program Functions are meant to repair.

Why answers are unique by construction: every relation is functional (one birthplace, one founder,
one spouse, ...), every name is unique case-insensitively, each fact is stated positively in the
document of its subject (other documents only ever repeat it consistently), and question chains
never revisit an entity. ``_check_chain`` re-verifies every question against the rendered text.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from hasp.domains.jsonl import json_file_objects

__all__ = [
    "DEFAULT_FRACTIONS",
    "Benchmark",
    "BenchmarkFormatError",
    "QAItem",
    "generate_benchmark",
    "load_corpus",
    "load_questions",
    "split",
    "split_sizes",
    "template_catalogue",
    "write_templates",
    "write_benchmark",
]

DEFAULT_FRACTIONS: tuple[float, float, float] = (0.6, 0.2, 0.2)
DEFAULT_HOP_WEIGHTS: dict[int, float] = {2: 0.5, 3: 0.35, 4: 0.15}


@dataclass(frozen=True)
class QAItem:
    """One question. ``answers[0]`` is the canonical gold; the rest are accepted aliases.
    ``support`` lists the doc ids of the reasoning chain in hop order (``hops == len(support)``)."""

    id: str
    question: str
    answers: list[str]
    hops: int
    support: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Benchmark:
    """A corpus of Search-R1 style documents ``{id, title, contents}`` and the questions over it.
    ``templates`` maps a question id to the id of the phrasing it was asked with (``kind.relation/i``):
    what ``templates.json`` reports per split, kept out of the question rows."""

    corpus: list[dict[str, str]]
    questions: list[QAItem]
    seed: int | None = None
    templates: dict[str, str] = field(default_factory=dict)


class BenchmarkFormatError(ValueError):
    """A malformed jsonl row; the message always names the file and the 1-based line."""


# --------------------------------------------------------------------------------------------
# Names. Syllable-composed so they are single rare tokens for BM25 and unknown to any LM.
# --------------------------------------------------------------------------------------------
_ONSETS = ["b", "br", "d", "dr", "f", "g", "h", "k", "l", "m", "n", "p", "qu", "r", "s",
           "t", "th", "v", "w", "z"]
_VOWELS = ["a", "e", "i", "o", "u", "a", "e", "o", "ai", "ei"]
_CODAS = ["", "", "", "n", "r", "l", "s", "m", "th", "nd", "rn"]
_SURNAME_END = ["is", "en", "ar", "ow", "ick", "ane", "ley", "ton", "ard", "ell"]
_CITY_END = ["haven", "ford", "mere", "holt", "wick", "stead", "burg", "moor", "gate", "by", "port"]
_COUNTRY_END = ["ia", "land", "mark", "ora", "esh", "ovia"]
_COMPANY_END = ["Systems", "Dynamics", "Industries", "Works", "Labs", "Holdings", "Foundry",
                "Logistics", "Textiles", "Mining", "Optics", "Shipping"]
_BAND_ADJ = ["Ashen", "Hollow", "Crimson", "Silent", "Velvet", "Broken", "Iron", "Paper",
             "Neon", "Amber", "Gilded", "Restless", "Pale", "Electric", "Wandering", "Frozen",
             "Copper", "Midnight", "Scarlet", "Distant"]
_BAND_NOUN = ["Drift", "Lanterns", "Orchard", "Tide", "Harbor", "Sparrows", "Engines", "Saints",
              "Echoes", "Wolves", "Ferns", "Satellites", "Ravens", "Mirrors", "Comets", "Rift",
              "Pilots", "Gardens"]
_OCCUPATIONS = ["engineer", "painter", "chemist", "novelist", "architect", "economist",
                "violinist", "botanist", "cartographer", "lawyer", "surgeon", "historian"]
_INDUSTRIES = ["a software company", "a shipping firm", "a textile manufacturer", "a brewery",
               "an engineering firm", "a mining company", "an optics maker", "a publishing house"]
_GENRES = ["folk", "post-punk", "synth-pop", "jazz", "shoegaze", "blues", "indie rock"]
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December"]


def _syllable(rng: random.Random) -> str:
    onset = rng.choice(_ONSETS)
    vowel = rng.choice([v for v in _VOWELS if not (onset == "qu" and v.startswith("u"))])
    return onset + vowel + rng.choice(_CODAS)


def _stem(rng: random.Random, n: int = 2) -> str:
    return "".join(_syllable(rng) for _ in range(n)).capitalize()


def _attach(stem: str, end: str) -> str:
    """Join stem and suffix without a vowel pile-up (Lai+ick -> Laick, not Laiick)."""
    return stem[:-1] + end if stem[-1] in "aeiou" and end[0] in "aeiou" else stem + end


def _fresh_name(kind: str, rng: random.Random) -> str:
    if kind == "person":
        return f"{_stem(rng)} {_attach(_stem(rng, 1), rng.choice(_SURNAME_END))}"
    if kind == "city":
        return _attach(_stem(rng, rng.choice((1, 2))), rng.choice(_CITY_END))
    if kind == "country":
        return _attach(_stem(rng), rng.choice(_COUNTRY_END))
    if kind == "river":
        return f"{_stem(rng)} River"
    if kind == "company":
        return f"{_stem(rng)} {rng.choice(_COMPANY_END)}"
    if kind == "band":
        return f"The {rng.choice(_BAND_ADJ)} {rng.choice(_BAND_NOUN)}"
    raise ValueError(kind)


def _one_letter_edit(word: str, rng: random.Random) -> str:
    """Substitute one letter (a vowel, or a final consonant; never the first letter) so the
    look-alike stays pronounceable and visually confusable: Tellis -> Tellin, Dornby -> Darnby."""
    vowel = [c in "aeiou" for c in word]
    spots = [i for i in range(1, len(word)) if vowel[i]
             and not vowel[i - 1] and not (i + 1 < len(word) and vowel[i + 1])]  # lone vowels
    if not vowel[-1] and word[-1] != "y" and vowel[-2]:
        spots.append(len(word) - 1)  # a final consonant after a vowel: Tellis -> Tellin
    if not spots:
        spots = [i for i in range(1, len(word)) if vowel[i]] or [len(word) - 1]
    i = rng.choice(spots)
    pool = "aeiou" if word[i] in "aeiou" else "nrstl"
    return word[:i] + rng.choice([c for c in pool if c != word[i]]) + word[i + 1:]


def _lookalike_name(kind: str, name: str, rng: random.Random) -> str:
    """A name differing from ``name`` by one letter or one word."""
    words = name.split()
    if kind == "person":
        if rng.random() < 0.6:
            words[1] = _one_letter_edit(words[1], rng)
        else:
            words[0] = _stem(rng)
    elif kind == "company":
        if rng.random() < 0.5:
            words[1] = rng.choice([w for w in _COMPANY_END if w != words[1]])
        else:
            words[0] = _one_letter_edit(words[0], rng)
    elif kind == "band":
        j = rng.choice((1, 2))
        pool = _BAND_ADJ if j == 1 else _BAND_NOUN
        words[j] = rng.choice([w for w in pool if w != words[j]])
    else:  # city: edit the stem only, the suffix (-haven, -ford, ...) stays
        end = next(x for x in _CITY_END if name.endswith(x))
        return _one_letter_edit(name[: -len(end)], rng) + end
    return " ".join(words)


# --------------------------------------------------------------------------------------------
# World
# --------------------------------------------------------------------------------------------
@dataclass
class _Entity:
    key: int
    kind: str
    name: str
    attrs: dict[str, Any] = field(default_factory=dict)
    rels: dict[str, int] = field(default_factory=dict)
    lookalike: int | None = None  # key of the look-alike partner, both directions
    doc_id: str = ""


class _World:
    """Entities plus the name registry that guarantees uniqueness."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.entities: list[_Entity] = []
        self._names: set[str] = set()

    def by_kind(self, kind: str) -> list[_Entity]:
        return [e for e in self.entities if e.kind == kind]

    def add(self, kind: str, like: _Entity | None = None) -> _Entity:
        for _ in range(200):
            name = (_lookalike_name(kind, like.name, self.rng) if like is not None
                    else _fresh_name(kind, self.rng))
            if name.lower() not in self._names:
                break
        else:  # pragma: no cover - name space is far larger than any sensible world
            raise RuntimeError(f"could not find a unique {kind} name")
        self._names.add(name.lower())
        ent = _Entity(len(self.entities), kind, name)
        if like is not None:
            ent.lookalike, like.lookalike = like.key, ent.key
        self.entities.append(ent)
        return ent


def _counts(n: int) -> dict[str, int]:
    """Entity counts per kind; roughly a Wikipedia-like mix dominated by people."""
    if n < 40:
        raise ValueError(f"n_entities={n} is too small; use at least 40")
    n_country = max(3, min(8, round(n * 0.03)))
    n_river = max(3, min(12, round(n * 0.05)))
    n_city = max(2 * n_country, round(n * 0.18))
    n_company = max(3, round(n * 0.13))
    n_band = max(3, round(n * 0.09))
    n_person = n - n_country - n_river - n_city - n_company - n_band
    if n_person < n_company + n_band + n_city // 2 + 4:
        raise ValueError(f"n_entities={n} is too small; use at least 40")
    return {"country": n_country, "river": n_river, "city": n_city,
            "company": n_company, "band": n_band, "person": n_person}


# kind led by one person -> (the leader's role, which is also the relation to them; home-city
# relation; founding-year attribute; the leader's age range at founding; category attribute and values)
_LED: dict[str, tuple[str, str, str, tuple[int, int], str, Sequence[str]]] = {
    "company": ("founder", "hq", "founded", (22, 45), "industry", _INDUSTRIES),
    "band": ("lead_singer", "origin", "formed", (17, 30), "genre", _GENRES),
}


def _build_world(rng: random.Random, n_entities: int, lookalike_rate: float = 0.25) -> _World:
    w = _World(rng)
    for kind, count in _counts(n_entities).items():
        made: list[_Entity] = []
        for _ in range(count):
            originals = [e for e in made if e.lookalike is None]
            if kind in ("person", "company", "band", "city") and originals and rng.random() < lookalike_rate:
                made.append(w.add(kind, like=rng.choice(originals)))
            else:
                made.append(w.add(kind))
    countries, rivers, cities = w.by_kind("country"), w.by_kind("river"), w.by_kind("city")
    persons, companies, bands = w.by_kind("person"), w.by_kind("company"), w.by_kind("band")

    for r in rivers:
        r.rels["source"] = rng.choice(countries).key
        r.attrs["length"] = rng.randrange(80, 2400)
    for i, c in enumerate(cities):
        # round-robin first so every country has at least one city (its capital)
        c.rels["country"] = countries[i].key if i < len(countries) else rng.choice(countries).key
        if rng.random() < 0.75:
            c.rels["river"] = rng.choice(rivers).key
        c.attrs["founded"] = rng.randrange(1100, 1850)
    for co in countries:
        co.rels["capital"] = rng.choice([c for c in cities if c.rels["country"] == co.key]).key

    # Roles are exclusive (founder / lead singer / mayor) so each person doc states one role.
    pool = persons[:]
    rng.shuffle(pool)
    for p in persons:
        p.attrs["birth_year"] = rng.randrange(1900, 1990)
        p.attrs["birth_day"] = rng.randrange(1, 29)
        p.attrs["birth_month"] = rng.choice(_MONTHS)
        p.attrs["occupation"] = rng.choice(_OCCUPATIONS)
        p.attrs["pronoun"] = rng.choice(("He", "She"))
        p.rels["birthplace"] = rng.choice(cities).key
        home = w.entities[p.rels["birthplace"]].rels["country"]
        p.rels["nationality"] = home if rng.random() < 0.8 else rng.choice(countries).key
    for p in persons:  # look-alikes must really differ where a reader could confuse them
        if p.lookalike is not None and p.lookalike < p.key:
            q = w.entities[p.lookalike]
            while p.attrs["birth_year"] == q.attrs["birth_year"]:
                p.attrs["birth_year"] = rng.randrange(1900, 1990)
            while len(cities) > 1 and p.rels["birthplace"] == q.rels["birthplace"]:
                p.rels["birthplace"] = rng.choice(cities).key
    for org in companies + bands:
        role, place, year, (young, old), category, values = _LED[org.kind]
        lead = pool.pop()
        org.rels[role], lead.attrs["role"] = lead.key, (role, org.key)
        org.rels[place] = rng.choice(cities).key
        born = lead.attrs["birth_year"]
        org.attrs[year] = rng.randrange(born + young, min(born + old, 2024))
        org.attrs[category] = rng.choice(values)
    for c in cities:
        if pool and rng.random() < 0.5:
            m = pool.pop()
            c.rels["mayor"], m.attrs["role"] = m.key, ("mayor", c.key)
    singles = persons[:]
    rng.shuffle(singles)
    for a, b in zip(singles[0::2], singles[1::2]):
        if rng.random() < 0.45:
            a.rels["spouse"], b.rels["spouse"] = b.key, a.key
    for p in persons:
        own = p.attrs.get("role", ("", -1))
        options = [c for c in companies if not (own[0] == "founder" and own[1] == c.key)]
        if rng.random() < 0.6:
            p.rels["employer"] = rng.choice(options).key
    return w


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------
def _other(rng: random.Random, items: Sequence[_Entity], not_key: int | None,
           prefer: int | None = None) -> _Entity | None:
    """A wrong value for a negation sentence: the look-alike's value when given, so the
    negation names exactly the fact a confused reader would bring over from the distractor."""
    if prefer is not None and prefer != not_key:
        return next(e for e in items if e.key == prefer)
    cands = [e for e in items if e.key != not_key]
    return rng.choice(cands) if cands else None


def _join(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


# kind -> (relation whose wrong value a document denies, that denial, the look-alike warning);
# only these kinds have look-alikes
_CONTRASTS: dict[str, tuple[str | None, str, str]] = {
    "person": ("birthplace", "Contrary to some accounts, {n} was not born in {wrong}.",
               "{n} should not be confused with {look}."),
    "company": ("hq", "{n} is not headquartered in {wrong}, although it runs an office there.",
                "It is unrelated to {look}."),
    "band": ("origin", "The band was not formed in {wrong}, where it recorded its debut album.",
             "{n} is often mistaken for {look}."),
    "city": (None, "", "{n} is not to be confused with {look}."),
}


def _contrast(w: _World, e: _Entity) -> list[str]:
    """The sentences a confused reader trips on: a denied wrong city (the look-alike's own when
    there is one) and a warning naming the look-alike."""
    if e.kind not in _CONTRASTS:
        return []
    rel, denial, warning = _CONTRASTS[e.kind]
    look = w.entities[e.lookalike] if e.lookalike is not None else None
    out: list[str] = []
    if rel is not None:
        wrong = _other(w.rng, w.by_kind("city"), e.rels[rel], prefer=look.rels[rel] if look else None)
        if wrong is not None:
            out.append(denial.format(n=e.name, wrong=wrong.name))
    if look is not None:
        out.append(warning.format(n=e.name, look=look.name))
    return out


def _stated(w: _World, e: _Entity, rel: str, says: str, otherwise: str | None = None) -> list[str]:
    """The sentence for a relation an entity may lack: ``says`` with ``{x}`` the related name, else
    ``otherwise`` (nothing when None); ``{n}`` is the entity's name and ``{pr}`` a person's pronoun."""
    fill = {"n": e.name, "pr": e.attrs.get("pronoun", "")}
    if rel in e.rels:
        return [says.format(x=w.entities[e.rels[rel]].name, **fill)]
    return [otherwise.format(**fill)] if otherwise is not None else []


def _render(w: _World, e: _Entity) -> str:
    """Intro sentence first (what the snippet shows), remaining sentences in seeded order."""
    rng, E = w.rng, w.entities
    n = e.name
    intro: str
    body: list[str] = []
    if e.kind == "person":
        a, pr = e.attrs, e.attrs["pronoun"]
        bp = E[e.rels["birthplace"]]
        intro = (f"{n} (born {a['birth_day']} {a['birth_month']} {a['birth_year']} in {bp.name}) "
                 f"is {_article(a['occupation'])} {a['occupation']}.")
        body.append(f"{pr} is a citizen of {E[e.rels['nationality']].name}.")
        body += _stated(w, e, "spouse", "{pr} is married to {x}.", otherwise="{pr} has never married.")
        body += _stated(w, e, "employer", "{pr} works for {x}.")
        role = a.get("role")
        if role and role[0] == "founder":
            body.append(f"In {E[role[1]].attrs['founded']}, {n} founded {E[role[1]].name}.")
        elif role and role[0] == "lead_singer":
            body.append(f"{n} is the lead singer of the band {E[role[1]].name}.")
        elif role and role[0] == "mayor":
            body.append(f"{n} serves as the mayor of {E[role[1]].name}.")
    elif e.kind == "company":
        f, hq = E[e.rels["founder"]], E[e.rels["hq"]]
        intro = f"{n} is {e.attrs['industry']} founded in {e.attrs['founded']} by {f.name}."
        body.append(f"The company is headquartered in {hq.name}.")
    elif e.kind == "band":
        s, o = E[e.rels["lead_singer"]], E[e.rels["origin"]]
        genre = e.attrs["genre"]
        intro = f"{n} is {_article(genre)} {genre} band formed in {o.name} in {e.attrs['formed']}."
        body.append(f"The lead singer of {n} is {s.name}.")
    elif e.kind == "city":
        co = E[e.rels["country"]]
        intro = f"{n} is a city located in {co.name}, founded in {e.attrs['founded']}."
        body += _stated(w, e, "river", "The {x} flows through {n}.",
                        otherwise="No major river flows through {n}.")
        body += _stated(w, e, "mayor", "The current mayor of {n} is {x}.")
        if co.rels.get("capital") == e.key:
            body.append(f"{n} is the capital of {co.name}.")
    elif e.kind == "country":
        cap = E[e.rels["capital"]]
        intro = f"{n} is a country whose capital is {cap.name}."
        others = [c.name for c in w.by_kind("city") if c.rels["country"] == e.key and c.key != cap.key]
        if others:
            body.append(f"Other cities in {n} include {_join(others[:4])}.")
        body.append(f"The capital of {n} is not {others[0]}." if others else f"{n} has a single city.")
    else:  # river
        src = E[e.rels["source"]]
        intro = f"The {n} is a river, {e.attrs['length']} kilometres long, which rises in {src.name}."
        through = [c.name for c in w.by_kind("city") if c.rels.get("river") == e.key]
        body.append(f"It flows through {_join(through)}." if through else "It flows through no major city.")
    body += _contrast(w, e)
    rng.shuffle(body)
    return " ".join([intro, *body])


# --------------------------------------------------------------------------------------------
# Questions
# --------------------------------------------------------------------------------------------
# relation -> noun phrase wrapping the phrase of its subject (used for intermediate hops)
_BRIDGES: dict[str, dict[str, str]] = {
    "person": {"spouse": "the spouse of {x}", "employer": "the company that employs {x}",
               "birthplace": "the birthplace of {x}"},
    "company": {"founder": "the founder of {x}", "hq": "the headquarters city of {x}"},
    "band": {"lead_singer": "the lead singer of {x}", "origin": "the hometown of {x}"},
    "city": {"mayor": "the mayor of {x}", "country": "the country where {x} is located",
             "river": "the river that flows through {x}"},
    "country": {"capital": "the capital of {x}"},
    "river": {"source": "the country where {x} rises"},
}
# relation or attribute -> full question about the last entity in the chain
_FINALS: dict[str, dict[str, str]] = {
    "person": {"birthplace": "In which city was {x} born?", "birth_year": "In what year was {x} born?",
               "spouse": "Who is {x} married to?", "employer": "Which company does {x} work for?",
               "nationality": "Of which country is {x} a citizen?"},
    "company": {"founder": "Who founded {x}?", "hq": "In which city is {x} headquartered?",
                "founded": "In what year was {x} founded?"},
    "band": {"lead_singer": "Who is the lead singer of {x}?", "origin": "In which city was {x} formed?",
             "formed": "In what year was {x} formed?"},
    "city": {"country": "In which country is {x} located?", "river": "Which river flows through {x}?",
             "mayor": "Who is the mayor of {x}?", "founded": "In what year was {x} founded?"},
    "country": {"capital": "What is the capital of {x}?"},
    "river": {"source": "In which country does {x} rise?", "length": "How long is {x}, in kilometres?"},
}


def _aliases(e: _Entity) -> list[str]:
    if e.kind == "band":
        return [e.name, e.name[4:]]
    if e.kind == "river":
        stem = e.name[: -len(" River")]
        return [e.name, stem, f"River {stem}"]
    return [e.name]


def _answer(w: _World, e: _Entity, final: str) -> list[str] | None:
    if final in e.rels:
        return _aliases(w.entities[e.rels[final]])
    if final == "length":
        km = e.attrs["length"]
        return [str(km), f"{km} km", f"{km} kilometres"]
    if final in e.attrs:
        return [str(e.attrs[final])]
    return None


def template_catalogue() -> dict[str, dict[str, str]]:
    """Every question phrasing by template id (``kind.relation/0``: one phrasing per relation)."""
    return {f"{kind}.{rel}/0": {"relation": f"{kind}.{rel}", "text": text}
            for kind, finals in _FINALS.items() for rel, text in finals.items()}


def _make_question(w: _World, rng: random.Random, anchor: _Entity,
                   hops: int) -> tuple[str, list[str], list[_Entity], str] | None:
    """Random walk of ``hops - 1`` bridges from ``anchor`` then one final; None if stuck. The last
    element is the template id of the final's phrasing."""
    chain, phrase = [anchor], anchor.name
    for _ in range(hops - 1):
        cur = chain[-1]
        opts = [r for r in _BRIDGES[cur.kind] if r in cur.rels and w.entities[cur.rels[r]] not in chain]
        if not opts:
            return None
        r = rng.choice(opts)
        phrase = _BRIDGES[cur.kind][r].format(x=phrase)
        chain.append(w.entities[cur.rels[r]])
    last = chain[-1]
    finals = [f for f in _FINALS[last.kind]
              if _answer(w, last, f) is not None and not (f in last.rels and w.entities[last.rels[f]] in chain)]
    if not finals:
        return None
    f = rng.choice(finals)
    answers = _answer(w, last, f)
    assert answers is not None
    return _FINALS[last.kind][f].format(x=phrase), answers, chain, f"{last.kind}.{f}/0"


def _check_chain(w: _World, docs: dict[str, str], chain: list[_Entity], answers: list[str]) -> None:
    """Construction check: each hop's doc names the next entity; the last doc holds the answer."""
    for a, b in pairwise(chain):
        assert b.name in docs[a.doc_id], (a.name, b.name)
    assert answers[0] in docs[chain[-1].doc_id], (chain[-1].name, answers[0])


def _lay_out_corpus(w: _World, rng: random.Random, render: Callable[[_World, _Entity], str]) -> list[dict[str, str]]:
    """Give every entity a shuffled doc id (ids must not reveal kind or look-alike pairing) and
    render one document per entity, in doc id order."""
    order = w.entities[:]
    rng.shuffle(order)
    for i, e in enumerate(order):
        e.doc_id = f"doc{i:04d}"
    return [{"id": e.doc_id, "title": e.name, "contents": f'"{e.name}"\n{render(w, e)}'}
            for e in sorted(w.entities, key=lambda x: x.doc_id)]


def generate_benchmark(seed: int, n_questions: int, n_entities: int | None = None,
                       *, hop_weights: Mapping[int, float] | None = None) -> Benchmark:
    """Build the world, render one document per entity, and compose ``n_questions`` unique
    1-4 hop questions (``hop_weights``: hop count -> weight). Same arguments → identical output (one ``random.Random(seed)``)."""
    if n_questions < 0:
        raise ValueError("n_questions must be >= 0")
    n_entities = n_entities if n_entities is not None else max(120, 3 * n_questions)
    weights = dict(hop_weights or DEFAULT_HOP_WEIGHTS)
    if not weights or min(weights) < 1 or max(weights) > 4 or any(v < 0 for v in weights.values()) \
            or not sum(weights.values()):
        raise ValueError("hop_weights must map hop counts 1-4 to non-negative weights, not all zero")
    rng = random.Random(seed)
    w = _build_world(rng, n_entities)

    corpus = _lay_out_corpus(w, rng, _render)
    docs = {d["id"]: d["contents"] for d in corpus}

    anchors_all = [e for e in w.entities if e.kind in ("person", "company", "band", "city")]
    anchors_look = [e for e in anchors_all if e.lookalike is not None]
    hop_keys, hop_w = sorted(weights), [weights[k] for k in sorted(weights)]
    seen: set[str] = set()
    used: dict[int, int] = {}
    questions: list[QAItem] = []
    templates: dict[str, str] = {}
    attempts = 0
    while len(questions) < n_questions:
        attempts += 1
        if attempts > 200 * max(1, n_questions):
            raise ValueError(f"could only compose {len(questions)} unique questions; raise n_entities")
        pool = anchors_look if anchors_look and rng.random() < 0.5 else anchors_all
        anchor = rng.choice(pool)
        if used.get(anchor.key, 0) >= 2:
            continue
        made = _make_question(w, rng, anchor, rng.choices(hop_keys, hop_w)[0])
        if made is None or made[0] in seen:
            continue
        text, answers, chain, template = made
        _check_chain(w, docs, chain, answers)
        seen.add(text)
        used[anchor.key] = used.get(anchor.key, 0) + 1
        qid = f"s{seed}-q{len(questions):04d}"
        templates[qid] = template
        questions.append(QAItem(id=qid, question=text, answers=answers,
                                hops=len(chain), support=[e.doc_id for e in chain]))
    return Benchmark(corpus=corpus, questions=questions, seed=seed, templates=templates)


# --------------------------------------------------------------------------------------------
# Splits and files
# --------------------------------------------------------------------------------------------
def split(benchmark: Benchmark | Sequence[QAItem], seed: int,
          fractions: tuple[float, float, float] = DEFAULT_FRACTIONS) -> dict[str, list[QAItem]]:
    """Deterministic train/val/test split; ``train`` is the seed split evolution mines failures from.

    Questions are ordered by a hash of (seed, id) rather than shuffled in list order, so a
    question's split does not depend on the input order."""
    items = list(benchmark.questions if isinstance(benchmark, Benchmark) else benchmark)
    items.sort(key=lambda q: hashlib.sha256(f"{seed}:{q.id}".encode()).hexdigest())
    n_train, n_val, _ = split_sizes(len(items), fractions)
    return {"train": items[:n_train], "val": items[n_train:n_train + n_val], "test": items[n_train + n_val:]}


def split_sizes(n: int, fractions: tuple[float, float, float] = DEFAULT_FRACTIONS) -> tuple[int, int, int]:
    """Questions per split (train, val, test) for ``n`` questions; test takes the rounding remainder."""
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"fractions must be 3 non-negative numbers summing to 1, got {fractions}")
    n_train = round(fractions[0] * n)
    n_val = min(n - n_train, round(fractions[1] * n))
    return n_train, n_val, n - n_train - n_val


def _write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")


def write_benchmark(bench: Benchmark, out_dir: str | Path, *, seed: int | None = None,
                    fractions: tuple[float, float, float] = DEFAULT_FRACTIONS) -> dict[str, Path]:
    """Write ``corpus.jsonl`` and ``{train,val,test}.jsonl``. Output is byte-stable (sorted keys)
    so DVC / Prefect content hashes only change when the data does. Split seed defaults to the
    benchmark's generation seed."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    split_seed = seed if seed is not None else (bench.seed or 0)
    paths = {"corpus": out / "corpus.jsonl"}
    _write_jsonl(paths["corpus"], bench.corpus)
    for name, items in split(bench, split_seed, fractions).items():
        paths[name] = out / f"{name}.jsonl"
        _write_jsonl(paths[name], [q.to_dict() for q in items])
    return paths


def write_templates(path: str | Path, *, version: int, catalogue: Mapping[str, Mapping[str, str]],
                    splits: Mapping[str, Sequence[str]], held_out_relations: Sequence[str] = (),
                    held_out_templates: Sequence[str] = ()) -> Path:
    """Write ``templates.json``: every phrasing of the generator version (``catalogue``), the ones
    held out of train/val, the template ids each split's questions use (``splits``: split -> one id
    per question) and the test templates no train/val question uses. What a reader needs to tell
    generalisation to new phrasings and relations from recall of seen ones."""
    used = {name: sorted(set(ids)) for name, ids in splits.items()}
    training = {t for name in ("train", "val") for t in used.get(name, [])}
    record = {"version": version, "templates": {k: dict(v) for k, v in catalogue.items()},
              "held_out": {"relations": sorted(held_out_relations), "templates": sorted(held_out_templates)},
              "splits": used, "unseen_in_test": sorted(set(used.get("test", [])) - training)}
    out = Path(path)
    out.write_text(json.dumps(record, ensure_ascii=False, sort_keys=True, indent=1) + "\n", encoding="utf-8")
    return out


def _iter_jsonl(path: str | Path) -> Iterator[tuple[Path, int, dict[str, Any]]]:
    p = Path(path)
    for lineno, row in json_file_objects(p, BenchmarkFormatError):
        yield p, lineno, row


def load_questions(path: str | Path) -> list[QAItem]:
    """Read a questions jsonl; a malformed row raises one BenchmarkFormatError naming file:line."""
    items: list[QAItem] = []
    for p, lineno, row in _iter_jsonl(path):
        where = f"{p}:{lineno}"

        def bad(msg: str, where: str = where) -> BenchmarkFormatError:
            return BenchmarkFormatError(f"{where}: {msg}")

        for key in ("id", "question"):
            if not isinstance(row.get(key), str) or not row[key].strip():
                raise bad(f"field '{key}' must be a non-empty string")
        answers = row.get("answers")
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
            raise bad("field 'answers' must be a non-empty list of strings")
        support = row.get("support", [])
        if not isinstance(support, list) or not all(isinstance(s, str) for s in support):
            raise bad("field 'support' must be a list of doc id strings")
        hops = row.get("hops", len(support))
        if not isinstance(hops, int) or isinstance(hops, bool) or hops < 1:
            raise bad("field 'hops' must be a positive integer")
        items.append(QAItem(id=row["id"], question=row["question"], answers=answers, hops=hops, support=support))
    return items


def load_template_seen(path: str | Path) -> dict[str, bool]:
    """``{question id: whether train/val use its template}`` of a benchmark-v2 questions file (rows
    without a ``seen`` key, as in version 1, are left out); a ``seen`` that is not a boolean raises one
    BenchmarkFormatError naming file:line."""
    out: dict[str, bool] = {}
    for p, lineno, row in _iter_jsonl(path):
        if "seen" not in row:
            continue
        if not isinstance(row["seen"], bool):
            raise BenchmarkFormatError(f"{p}:{lineno}: field 'seen' must be true or false")
        out[str(row.get("id"))] = row["seen"]
    return out


def load_corpus(path: str | Path) -> list[dict[str, str]]:
    """Read a Search-R1 style corpus jsonl (``id`` and ``contents`` required, ``title`` optional)."""
    docs: list[dict[str, str]] = []
    for p, lineno, row in _iter_jsonl(path):
        if not isinstance(row.get("id"), (str, int)) or not isinstance(row.get("contents"), str):
            raise BenchmarkFormatError(f"{p}:{lineno}: a corpus row needs 'id' and string 'contents'")
        docs.append({**row, "id": str(row["id"])})
    return docs
