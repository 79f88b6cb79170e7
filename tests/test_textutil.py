"""The shared text helpers against plain reference loops (their fast versions are C-level calls)."""

from __future__ import annotations

import random
import re

from hasp.textutil import STOPWORDS, content_token_set, content_tokens, keyword_query

_QUERY_STOP = STOPWORDS | {"name", "year", "city", "located", "born"}


def reference_keyword_query(text: str, max_words: int = 8) -> str:
    """keyword_query as first written: capitalised words first, case-insensitive de-duplication."""
    words = [w for w in re.findall(r"[A-Za-z0-9]+", text) if w.lower() not in _QUERY_STOP]
    caps = [w for w in words if w[:1].isupper()]
    out, seen = [], set()
    for w in caps + [w for w in words if not w[:1].isupper()]:
        if w.lower() not in seen:
            seen.add(w.lower())
            out.append(w)
    return " ".join(out[:max_words])


def _random_texts(n: int = 400) -> list[str]:
    rng = random.Random(11)
    vocab = ["The", "the", "River", "river", "of", "Paris", "PARIS", "paris", "born", "Born", "iPhone", "x2",
             "2019", "Who", "who", "Verzi", "Thal", "city", "name", "Name", "McDonald", "é", "Ünal", "a_b",
             "mayor", "Mayor", "what", "year", "Zed", "zed", "O'Neil", "don't", "1st", "K2"]
    seps = [" ", ", ", "? ", "-", "'", "\n", "  ", "/", "(", ")"]
    return ["".join(rng.choice(vocab) + rng.choice(seps) for _ in range(rng.randint(0, 16))) for _ in range(n)]


def test_keyword_query_matches_the_reference_loop():
    texts = _random_texts() + ["", "Which city is the birthplace of the director of Kal Ho Naa Ho?",
                               "who was BORN in Paris, paris or PARIS?"]
    for text in texts:
        for k in (1, 3, 8):
            assert keyword_query(text, k) == reference_keyword_query(text, k), (text, k)
    assert keyword_query("Who directed the film Inception and where was he born?") == "Inception directed film"


def test_content_token_set_is_the_set_of_content_tokens():
    for text in _random_texts() + ["Queries and searches: classes, boxes, buses; the_query_too_broad!"]:
        assert content_token_set(text) == frozenset(content_tokens(text)), text
