"""The program sandbox's verdict cannot be forged by the program, and the program reads no host file.

Each test is a known technique a wrong "solution" uses to be graded as passing (or to leak a host
file into its grading feedback); every one of them must end as a failure with nothing leaked."""

from __future__ import annotations

import json
import os
import textwrap
import uuid
from pathlib import Path

import pytest

from hasp.domains.code import CodeItem, load_humaneval, run_program, run_tests
from hasp.domains.code.environment import grade

ROOT = Path(__file__).resolve().parents[1]

#: tests a wrong answer fails: f(3) must be 9, the solutions below return 0
TESTS = "assert f(3) == 9\nassert abs(f(2) - 4) < 1e-6\n"
WRONG = "def f(x):\n    return 0\n"


def _forged(code: str, tests: str = TESTS, entry: str = "f", **kw):
    r = run_program(textwrap.dedent(code), tests, entry, **kw)
    assert not r.passed, f"forged verdict accepted: {r.status} {r.detail!r}"
    assert r.status != "passed"
    return r


def test_the_honest_program_still_passes_and_the_wrong_one_fails():
    assert run_program("def f(x):\n    return x * x\n", TESTS, "f").passed
    r = run_program(WRONG, TESTS, "f")
    assert (r.passed, r.status) == (False, "failed") and "assert f(3) == 9" in r.detail


def test_frame_walk_to_the_reporter():
    _forged("""
        import sys
        def f(x):
            fr = sys._getframe(1)
            while fr is not None:
                for name, v in list(fr.f_locals.items()):
                    if callable(v) and ("report" in name or type(v).__name__ == "_Reporter"):
                        v("passed", "forged")
                fr = fr.f_back
            return 0
    """)


def test_traceback_frames_to_the_reporter():
    _forged("""
        def f(x):
            try:
                raise ValueError
            except ValueError as e:
                fr = e.__traceback__.tb_frame
            while fr is not None:
                for v in list(fr.f_locals.values()):
                    if type(v).__name__ == "_Reporter":
                        v("passed", "forged")
                fr = fr.f_back
            return 0
    """)


def test_gc_walk_to_the_reporter():
    _forged("""
        import gc
        def f(x):
            for o in gc.get_objects():
                if type(o).__name__ == "_Reporter":
                    o("passed", "forged")
            return 0
    """)


NONCE_FROM_MEMORY = """
    import gc, json, os
    def _job():
        for o in gc.get_objects():
            if isinstance(o, dict) and isinstance(o.get("nonce"), str):
                return o
            if isinstance(getattr(o, "nonce", None), str):
                return {"nonce": o.nonce, "result_fd": getattr(o, "fd", -1)}
        return {"nonce": "none", "result_fd": -1}
    def _line():
        return "\\n" + json.dumps({"nonce": _job()["nonce"], "status": "passed", "detail": "forged",
                                   "protections": {}}) + "\\n"
"""


def test_printed_verdict_with_the_runs_nonce():
    """The verdict line, with the nonce read out of memory, printed on every stream the program has."""
    _forged(NONCE_FROM_MEMORY + """
    def f(x):
        line = _line()
        print(line)
        for fd in range(1, 64):
            try:
                os.write(fd, line.encode())
            except OSError:
                pass
        os._exit(0)
    """)


def test_exiting_early_after_writing_the_verdict_channel():
    """The program writes a passed verdict to the verdict channel itself and ends before the tests do."""
    _forged(NONCE_FROM_MEMORY + """
    def f(x):
        fd = _job().get("result_fd", -1)
        try:
            os.write(fd, _line().encode())
        except (OSError, TypeError):
            pass
        os._exit(0)
    """)


@pytest.mark.parametrize("where", ["definition", "call"])
@pytest.mark.parametrize("how", ["os._exit(0)", "sys.exit(0)"])
def test_exiting_early_is_a_failure(where, how):
    body = f"import os, sys\n{how}\n" + WRONG if where == "definition" else \
        f"import os, sys\ndef f(x):\n    {how}\n"
    r = run_program(body, TESTS, "f")
    assert not r.passed and r.status in ("error", "failed")


@pytest.mark.parametrize("code", [
    # the checker's own exec: the tests never run, the driver reports "passed"
    "import builtins\nbuiltins.exec = lambda *a, **k: None\n" + WRONG,
    # a builtin the tests call
    "import builtins\nbuiltins.abs = lambda x: 0\nclass _E:\n    __eq__ = lambda s, o: True\n"
    "def f(x):\n    return _E() if x == 3 else 99\n",
    # an object equal to everything
    "class _E:\n    def __eq__(self, o):\n        return True\n    def __sub__(self, o):\n        return 0\n"
    "def f(x):\n    return _E()\n",
    # a subclass of a builtin type equal to everything
    "class _I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
    "    def __sub__(self, o):\n        return 0\n"
    "def f(x):\n    return _I(0)\n",
    # the tests' globals replaced by the solution's name for a builtin
    "def abs(x):\n    return 0\nclass _E:\n    __eq__ = lambda s, o: True\ndef f(x):\n    return _E() if x == 3 else 1\n",
], ids=["exec", "builtin", "always_equal", "int_subclass", "shadowed_builtin"])
def test_monkeypatching_the_checker(code):
    _forged(code)


def test_redefining_the_problems_own_helper():
    """HumanEval/32's tests check roots with ``poly`` from the problem's prompt, not the solution's."""
    it = {i.task_id: i for i in load_humaneval()}["HumanEval/32"]
    code = it.prefix + "    return 0.0\n\n\ndef poly(xs, x):\n    return 0.0\n"
    r = run_tests(code, it)
    assert not r.passed, r.detail
    assert run_tests(it.canonical, it).passed


def test_a_host_file_never_reaches_the_feedback(tmp_path):
    secret = f"hasp-secret-{uuid.uuid4().hex}"
    targets = [Path("/tmp") / f"hasp_secret_{uuid.uuid4().hex}.txt", ROOT / f".hasp_secret_{uuid.uuid4().hex}"]
    try:
        for t in targets:
            t.write_text(secret)
            os.chmod(t, 0o644)
        for t in targets + [ROOT / "hasp" / "__init__.py"]:
            code = textwrap.dedent(f"""
                try:
                    DATA = open({str(t)!r}).read()
                except OSError as e:
                    DATA = repr(e)
                print(DATA)
                def f(x):
                    raise ValueError(DATA)
            """)
            r = run_program(code, TESTS, "f")
            _, feedback = grade(CodeItem("t", "", "f", TESTS), code)  # what a trajectory stores
            blob = json.dumps([r.to_dict(), feedback])
            assert not r.passed
            assert secret not in blob and t.read_text()[:60] not in blob, (t, r.detail)
            assert "PermissionError" in r.detail, r.detail
    finally:
        for t in targets:
            t.unlink(missing_ok=True)


def test_only_the_standard_library_is_importable():
    code = "import json, heapq, hashlib, decimal\ntry:\n    import yaml\n    Y = 'imported'\nexcept ImportError:\n" \
           "    Y = 'refused'\ndef f(x):\n    return x * x\n"
    r = run_program(code, TESTS + "assert Y == 'refused', Y\n", "f")
    assert r.passed, r.detail


def test_program_objects_work_through_the_channel():
    """What the tests build with the program's classes, pass to it, or compare stays usable."""
    code = textwrap.dedent("""
        class Node:
            def __init__(self, v):
                self.v, self.left = v, None
        def depth(n):
            return 0 if n is None else 1 + depth(n.left)
        def pick(xs, t):
            return [x for x in xs if isinstance(x, t)]
        def common(a, b):
            return tuple(set(a) & set(b))
        def gen(n):
            return (i * i for i in range(n))
        LIMIT = {"k": (1, 2.5, None), "s": frozenset({b"x"})}
    """)
    tests = textwrap.dedent("""
        root = Node(1)
        root.left = Node(2)
        root.left.left = Node(3)
        assert depth(root) == 3 and root.left.v == 2
        assert pick([1, "a", 2.5], int) == [1]
        a, b = ["x%d" % i for i in range(40)], ["x%d" % i for i in range(20, 60)]
        assert common(a, b) == tuple(set(a) & set(b))
        assert list(gen(4)) == [0, 1, 4, 9]
        assert LIMIT == {"k": (1, 2.5, None), "s": frozenset({b"x"})}
    """)
    r = run_program(code, tests, "depth")
    assert r.passed, r.detail
