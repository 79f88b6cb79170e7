"""hasp.pyast.parse_python: the same tree while other threads parse too."""
import ast
import gc
import sys

import pytest

from hasp import pyast


def test_a_parse_raced_by_another_thread_is_parsed_again(monkeypatch, caplog):
    """Test double for the race: the first ast.parse fails as CPython 3.11 does when another thread's parse
    interleaves; the second gives the tree."""
    real = ast.parse
    calls = []

    def racing_parse(source, mode="exec"):
        calls.append(source)
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=51, after=75)")
        return real(source, mode=mode)

    monkeypatch.setattr(pyast.ast, "parse", racing_parse)
    tree = pyast.parse_python("import hasp.records\n")
    assert [type(n).__name__ for n in tree.body] == ["Import"]
    assert len(calls) == 2
    assert "raced with another thread" in caplog.text


def test_other_system_errors_and_syntax_errors_pass_through(monkeypatch):
    with pytest.raises(SyntaxError):
        pyast.parse_python("def (:\n")

    def broken(source, mode="exec"):
        raise SystemError("something else")

    monkeypatch.setattr(pyast.ast, "parse", broken)
    with pytest.raises(SystemError, match="something else"):
        pyast.parse_python("x = 1\n")


def test_a_race_that_never_ends_is_raised_after_the_last_attempt(monkeypatch):
    calls = []

    def always(source, mode="exec"):
        calls.append(1)
        raise SystemError("AST constructor recursion depth mismatch (before=1, after=2)")

    monkeypatch.setattr(pyast.ast, "parse", always)
    with pytest.raises(SystemError):
        pyast.parse_python("x = 1\n")
    assert len(calls) == pyast.ATTEMPTS


def test_a_parse_inside_the_conversion_fails_bare_ast_parse_but_not_ours():
    """Real CPython, no double: a finalizer that parses runs inside another parse's AST conversion (as a
    second thread's parse can, once a finalizer has switched threads). On 3.11 the bare ast.parse raises;
    ours gives the tree."""
    source = open(ast.__file__, encoding="utf-8").read()
    expected = ast.dump(ast.parse(source))
    nested = []

    class ParsesWhenCollected:
        def __del__(self):
            nested.append(ast.parse("x = 1\n"))

    def arm():
        o = ParsesWhenCollected()
        o.self = o  # a cycle: only the collector frees it, during the next parse's allocations

    threshold = gc.get_threshold()
    gc.set_threshold(1)
    try:
        arm()
        try:
            ast.parse(source)
            bare_failed = False
        except SystemError as e:
            bare_failed = "recursion depth mismatch" in str(e)
        arm()
        tree = pyast.parse_python(source)
    finally:
        gc.set_threshold(*threshold)
    assert len(nested) == 2  # both finalizers parsed, each inside a conversion
    assert ast.dump(tree) == expected
    if sys.version_info[:2] == (3, 11):
        assert bare_failed
