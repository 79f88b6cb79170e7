"""Pieces of GBNF grammars (llama.cpp's grammar format, which vLLM's xgrammar backend also reads).

Why helpers: the grammars of the agent's reply formats are built from the parser's own constants
(action names, placeholders, bounds) rather than written out by hand, so quoting a literal, writing a
character class and excluding a few words must be done right once. Only what those grammars need is
here; a grammar is a plain string, ``rules`` joins named rules into one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

_LITERAL_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: llama.cpp's grammar parser knows the escapes \\ \" \[ \] \t \r \n and \xHH only, so ^ and - go as hex
_CLASS_ESCAPES = {"\\": "\\\\", "]": "\\]", "[": "\\[", "^": "\\x5E", "-": "\\x2D", "\n": "\\n",
                  "\r": "\\r", "\t": "\\t"}


def literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    return '"' + "".join(_LITERAL_ESCAPES.get(c, c) for c in text) + '"'


def one_of(words: Iterable[str]) -> str:
    """A grammar whose only replies are ``words`` (a verdict word, exactly)."""
    return rules({"root": " | ".join(literal(w) for w in words)})


def char_class(chars: Iterable[str], *, negated: bool = False) -> str:
    """A character class of ``chars`` (``negated``: every character but them), in a stable order."""
    body = "".join(_CLASS_ESCAPES.get(c, c) for c in sorted(set(chars)))
    return f"[{'^' if negated else ''}{body}]"


def rules(named: Mapping[str, str]) -> str:
    """Named rules as one grammar, one rule per line (the first one is not special: ``root`` starts)."""
    return "\n".join(f"{name} ::= {body}" for name, body in named.items()) + "\n"


def any_word_but(excluded: Iterable[str], *, banned: str, separators: str, prefix: str,
                 rest: str, no_start: Iterable[str] = ()) -> dict[str, str]:
    """Rules for a non-empty string of words (runs of characters outside ``banned`` and
    ``separators``) joined by single separators that is not one of ``excluded`` (compared
    case-insensitively): rule ``<prefix>`` plus helper rules named ``<prefix>-<n>``.

    ``rest`` names the rule a string goes on with once it has left every excluded word behind, right
    after a word character; it must accept the empty string (and may bound the length). The rules
    follow a trie of the excluded words: a node may end the string unless its prefix is excluded (or
    ends in a separator), may go on to a child, and any other character leaves the trie for ``rest``.
    A separator stands only between two word characters, so a string starts and ends with a word
    character and needs no stripping or whitespace folding before it is compared.

    ``no_start`` names strings that may not even begin the string (case-insensitively): a model that
    is barred from writing a placeholder exactly tends to write the placeholder with a tail instead
    (``answer: ...``, ``answer_...``), which is the same copy of the prompt's template.
    """
    seps = set(separators)
    not_word = set(banned) | seps
    words = sorted({w.lower() for w in excluded})
    for w in words:
        if (not w or w[0] in seps or w[-1] in seps or any(a in seps and b in seps for a, b in zip(w, w[1:]))
                or any(c in banned for c in w)):
            raise ValueError(f"excluded word {w!r} is not a string of words joined by single separators")
    trie: dict[str, dict] = {}
    dead = sorted({w.lower() for w in no_start})
    for w in [*words, *dead]:
        if not w or any(c in not_word for c in w[-1:]):
            raise ValueError(f"string {w!r} does not end in a word character")
    for w in words:
        node = trie
        for c in w:
            node = node.setdefault(c, {})
        node[""] = {}  # the end-of-word mark
    for w in dead:
        node = trie
        for c in w[:-1]:
            node = node.setdefault(c, {})
        node[w[-1]] = {"!": {}}  # no string goes through this character
    word_char = char_class(not_word, negated=True)
    out: dict[str, str] = {}
    names = (f"{prefix}-{i}" for i in range(1, 1_000_000))

    def variants(c: str) -> set[str]:
        return {v for v in (c, c.upper(), c.lower()) if len(v) == 1}

    def node_rule(name: str, node: dict, after_sep: bool, is_root: bool) -> None:
        alts: list[str] = [] if is_root or after_sep or "" in node else ['""']
        taken: set[str] = set()
        for c, child in sorted((c, child) for c, child in node.items() if c):
            if "!" in child:
                taken |= variants(c)
                continue
            child_name = next(names)
            node_rule(child_name, child, c in seps, False)
            alts.append(f"{literal(c) if c in seps else char_class(variants(c))} {child_name}")
            taken |= variants(c)
        alts.append(f"{char_class(not_word | taken, negated=True)} {rest}")
        if not is_root and not after_sep:
            for sep in sorted(seps - set(node)):
                alts.append(f"{literal(sep)} {word_char} {rest}")
        out[name] = " | ".join(alts)

    node_rule(prefix, trie, False, True)
    return out
