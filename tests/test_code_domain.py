"""Code domain: dataset loaders and split, the test sandbox (including hostile code), the
single-step task glue, and the code seed library (hasp/skills/code)."""

from __future__ import annotations

import gzip
import json
import os
import socket
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from hasp.domains.code import (
    CodeDatasetError,
    CodeItem,
    build_program,
    extract_code,
    load_code_dataset,
    load_evalplus,
    load_humaneval,
    load_mbpp,
    pass_at_1,
    probe_protections,
    render_messages,
    run_many,
    run_program,
    run_tests,
    score,
    split_items,
)
from hasp.sandbox import seccomp
from hasp.sandbox.program import TestResult
from hasp.domains.code.task import code_view, final_context
from hasp.pf.dispatcher import Dispatcher
from hasp.pf.intervention import InterventionType
from hasp.pf.library import load_library
from hasp.pf.skill_md import load_skill

ROOT = Path(__file__).resolve().parents[1]
SKILLS = ROOT / "hasp" / "skills" / "code"
SHARED = ROOT.parent / "shared" / "data" / "code"
MBPP = SHARED / "mbpp.jsonl"
MBPP_PLUS = SHARED / "MbppPlus.jsonl"
needs_mbpp = pytest.mark.skipif(not MBPP.exists(), reason=f"sample data {MBPP} absent (only in the shared workspace)")
needs_mbpp_plus = pytest.mark.skipif(not MBPP_PLUS.exists(),
                                     reason=f"sample data {MBPP_PLUS} absent (only in the shared workspace)")


@pytest.fixture(scope="module")
def humaneval() -> list[CodeItem]:
    return load_humaneval()


@pytest.fixture(scope="module")
def he(humaneval) -> dict[str, CodeItem]:
    return {it.task_id: it for it in humaneval}


@pytest.fixture(scope="module")
def prot() -> dict:
    return probe_protections()


def _item(tests: str = "", entry: str = "") -> CodeItem:
    return CodeItem(task_id="t/0", prompt="", entry_point=entry, tests=tests)


# --------------------------------------------------------------------------- HumanEval + sandbox basics

def test_humaneval_loads_from_the_package(humaneval):
    assert len(humaneval) == 164
    assert len({it.task_id for it in humaneval}) == 164
    first = humaneval[0]
    assert first.task_id == "HumanEval/0" and first.entry_point == "has_close_elements"
    assert first.prefix == first.prompt and first.canonical.startswith(first.prompt)
    assert first.tests.rstrip().endswith("check(has_close_elements)")
    assert all(it.source == "humaneval" and it.canonical for it in humaneval)


def test_all_humaneval_canonical_solutions_pass(humaneval):
    t0 = time.perf_counter()
    results = run_many([(it.canonical, it) for it in humaneval], workers=2)
    wall = time.perf_counter() - t0
    failed = [(it.task_id, r.status, r.detail[:200]) for it, r in zip(humaneval, results) if not r.passed]
    assert not failed
    assert pass_at_1(results) == 1.0
    # measured ~9 s (about 0.12 s per sandboxed run) on 2 shared cores; the budget is 2 minutes
    assert wall < 120, f"164 canonical runs took {wall:.1f}s"


def test_wrong_solution_fails_with_the_failing_assert(he):
    it = he["HumanEval/2"]
    r = run_tests("def truncate_number(number: float) -> float:\n    return number\n", it)
    assert (r.passed, r.status) == (False, "failed")
    assert "assert candidate(3.5) == 0.5" in r.detail


def test_error_statuses():
    assert run_program("def f(:\n", "assert True", "f").status == "error"           # syntax
    r = run_program("def g():\n    return 1\n", "assert f() == 1", "f")
    assert r.status == "error" and "does not define 'f'" in r.detail
    r = run_program("raise ValueError('at import')\n", "", "")
    assert r.status == "error" and "ValueError" in r.detail
    r = run_program("def f():\n    return [][0]\n", "assert f() == 1", "f")        # raises under test
    assert r.status == "failed" and "IndexError" in r.detail


@pytest.mark.parametrize("escape", [
    "raise SystemExit(0)",
    "import sys\nsys.exit(0)",
    "import os\nos._exit(0)",
    "print('{\"status\": \"passed\", \"nonce\": \"guess\"}')\nimport os\nos._exit(0)",
])
def test_exiting_early_never_counts_as_passed(escape):
    r = run_program(escape + "\n", "assert False, 'tests must run'", "")
    assert not r.passed and r.status == "error"


def test_writes_inside_the_private_dir_work_and_vanish():
    code = textwrap.dedent("""
        import os, tempfile
        with open("scratch.txt", "w") as f:
            f.write("ok")
        fd, p = tempfile.mkstemp()
        os.close(fd)
        def f():
            return open("scratch.txt").read()
    """)
    r = run_program(code, "assert f() == 'ok'", "f")
    assert r.passed, r.detail


# --------------------------------------------------------------------------- hostile code

def test_infinite_loop_times_out():
    t0 = time.perf_counter()
    r = run_program("def f():\n    while True:\n        pass\n", "f()", "f", timeout_s=2)
    assert r.status == "timeout" and not r.passed
    assert time.perf_counter() - t0 < 8


def test_sleep_is_killed_by_the_wall_clock():
    r = run_program("import time\ntime.sleep(60)\n", "", "", timeout_s=1.5)
    assert r.status == "timeout" and r.elapsed_s < 6


def test_fork_bomb_is_contained():
    code = "import os\ndef bomb():\n    while True:\n        os.fork()\n"
    t0 = time.perf_counter()
    r = run_program(code, "bomb()", "bomb", timeout_s=5)
    assert not r.passed and r.status in ("failed", "error", "killed", "timeout")
    assert time.perf_counter() - t0 < 10
    r = run_program("import subprocess\nsubprocess.run(['true'])\n", "", "")
    assert not r.passed


def test_memory_bomb_is_contained():
    code = "def f():\n    xs = []\n    while True:\n        xs.append(bytearray(50 * 1024 * 1024))\n"
    r = run_program(code, "f()", "f", memory_mb=256, timeout_s=10)
    assert r.status == "killed" and "memory" in r.detail
    r = run_program("x = 'a' * (8 * 1024 ** 3)\n", "", "")
    assert r.status == "killed"


def test_file_write_outside_the_temp_dir_fails(tmp_path):
    targets = [Path("/tmp") / f"hasp_escape_{uuid.uuid4().hex}", tmp_path / "escape.txt",
               ROOT / f"hasp_escape_{uuid.uuid4().hex}.txt"]
    for target in targets:
        code = f"def f():\n    with open({str(target)!r}, 'w') as fh:\n        fh.write('pwned')\n"
        r = run_program(code, "f()", "f")
        assert not r.passed
        assert not target.exists(), f"sandbox wrote {target}"
    # other ways out of the directory
    link = Path("/tmp") / f"hasp_escape_{uuid.uuid4().hex}"
    for code in (f"import os\nos.symlink({str(link)!r}, 'ln')\nopen('ln', 'w').write('x')\n",
                 f"open('a', 'w').write('x')\nimport os\nos.rename('a', {str(link)!r})\n",
                 f"import os\nos.mkdir({str(link)!r})\n"):
        assert not run_program(code, "", "").passed
        assert not link.exists()


def test_network_to_localhost_fails():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.setblocking(False)
    port = srv.getsockname()[1]
    try:
        code = (f"import socket\ndef f():\n    s = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                "    s.sendall(b'hi')\n    return True\n")
        r = run_program(code, "assert f()", "f")
        assert not r.passed
        with pytest.raises(BlockingIOError):
            srv.accept()  # nobody connected
    finally:
        srv.close()


def test_killing_the_parent_fails_and_the_host_survives():
    me = os.getpid()
    r = run_program("import os\ndef f():\n    os.kill(os.getppid(), 9)\n    return True\n", "assert f()", "f")
    assert not r.passed and "PermissionError" in r.detail
    assert os.getpid() == me  # still here
    r = run_program("import os, signal\nos.killpg(os.getpgid(os.getppid()), signal.SIGKILL)\n", "", "")
    assert not r.passed


def test_output_flood_hits_the_file_size_limit():
    r = run_program("while True:\n    print('x' * 65536)\n", "", "", timeout_s=10)
    assert r.status == "killed" and "file size" in r.detail
    assert len(r.output) <= 4000


def test_protections_are_reported(prot):
    assert prot["rlimit_nproc"] == 0 and prot["rlimit_as"] == 512 * 1024 * 1024 and prot["rlimit_fsize"] > 0
    assert prot["no_new_privs"] is True
    if os.geteuid() == 0:
        assert prot["uid_dropped"] and prot["uid"] != 0
    assert prot.get("netns") or prot.get("landlock_net") or prot.get("seccomp"), prot


@pytest.mark.parametrize("layer", ["seccomp", "landlock", "netns", "setuid"])
def test_each_layer_can_fail_and_the_others_still_hold(layer, prot):
    """With one layer switched off, fork / network / outside writes are still refused."""
    if layer == "setuid" and os.geteuid() != 0:
        pytest.skip("uid drop only applies when running as root")
    layers = {"seccomp": prot.get("seccomp"), "landlock": prot.get("landlock"), "netns": prot.get("netns"),
              "setuid": prot.get("unprivileged")}
    if sum(bool(v) for k, v in layers.items() if k != layer) < 2:
        pytest.skip(f"not enough independent layers on this machine: {layers}")
    target = Path("/tmp") / f"hasp_escape_{uuid.uuid4().hex}"
    for code in ("import os\npid = os.fork()\nif pid == 0:\n    os._exit(0)\n",
                 "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)\n",
                 f"open({str(target)!r}, 'w').write('x')\n"):
        r = run_program(code, "", "", **{layer: False})
        assert not r.passed, (layer, code, r.detail)
    assert not target.exists()


def test_seccomp_program_is_well_formed():
    for profile in (seccomp.PROGRAM_PROFILE, seccomp.PROGRAM_STRICT_PROFILE):
        prog = seccomp.build(profile)
        assert len(prog) % 8 == 0 and 8 < len(prog) // 8 < 256


# --------------------------------------------------------------------------- task glue

def test_extract_code_variants():
    fn = "def f(x):\n    return x + 1"
    assert extract_code(f"Here:\n```python\n{fn}\n```\nDone.", "f") == fn
    assert extract_code(f"```py\n{fn}\n", "f") == fn                      # unterminated fence
    assert extract_code(f"```python\nprint(1)\n```\n```python\n{fn}\n```", "f") == fn
    assert extract_code(f"<think>```python\nwrong\n```</think>```python\n{fn}\n```", "f") == fn
    assert extract_code(fn) == fn
    assert extract_code(f"Sure, here it is.\n{fn}\nThat solves it.") == fn
    assert extract_code("    return x + 1\n") == "    return x + 1"
    assert extract_code("I cannot solve this.") == ""
    assert extract_code(None) == ""


def test_build_program_and_score(he):
    it = he["HumanEval/2"]
    full = "def truncate_number(number: float) -> float:\n    return number % 1.0\n"
    assert build_program(it, full).startswith(it.prompt.rstrip())
    assert score(it, f"```python\n{full}```").passed
    assert score(it, "    return number % 1.0\n").passed                  # HumanEval-style body
    assert score(it, "Sure! Just return the fractional part:\n" + full).passed
    r = score(it, "no idea")
    assert r.status == "error" and "no code" in r.detail and r.elapsed_s == 0.0
    # helpers from the prompt stay available (HumanEval/38 decodes with the prompt's encoder)
    it38 = he["HumanEval/38"]
    assert score(it38, "def decode_cyclic(s: str):\n    return encode_cyclic(encode_cyclic(s))\n").passed


def test_render_messages(he):
    msgs = render_messages(he["HumanEval/0"], skills_text="- check bounds")
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert "has_close_elements" in msgs[1]["content"] and "check bounds" in msgs[0]["content"]
    mb = CodeItem("Mbpp/1", "Add two numbers.\nassert add(1, 2) == 3", "add", "assert add(1, 2) == 3")
    assert "`add`" in render_messages(mb)[1]["content"]


def test_pass_at_1():
    ok = TestResult(True, "passed", "", 0.1)
    bad = TestResult(False, "failed", "", 0.1)
    assert pass_at_1([ok, bad, ok, bad]) == 0.5 and pass_at_1([]) == 0.0 and pass_at_1([True, False]) == 0.5


# --------------------------------------------------------------------------- MBPP / EvalPlus / split

@needs_mbpp
def test_mbpp_sample_loads():
    items = load_mbpp(MBPP)
    assert len(items) == 974 and items[0].task_id == "Mbpp/1" and items[0].entry_point == "min_cost"
    assert "Your code should pass these tests" in items[0].prompt and "\r" not in items[0].canonical
    assert all(it.entry_point and it.source == "mbpp" for it in items)
    results = run_many([(it.canonical, it) for it in items[:6]], workers=2)
    assert all(r.passed for r in results), [r.detail for r in results]
    assert not run_tests("def min_cost(cost, m, n):\n    return 0\n", items[0]).passed
    sp = split_items(items)
    assert len(sp["test"]) == 50 and len(sp["train"]) == 924 and sp["test"][0].task_id == "Mbpp/1"


@needs_mbpp_plus
def test_evalplus_sample_loads_and_grades():
    base = load_evalplus(MBPP_PLUS)
    plus = load_evalplus(MBPP_PLUS, include_plus=True)
    assert len(base) == len(plus) == 399 and base[0].task_id == "Mbpp/2" and base[0].source == "mbpp+"
    assert len(plus[0].tests) > len(base[0].tests)
    it = {i.task_id: i for i in plus}
    # tuples restored from the assertion literals; complex numbers parsed from strings
    for tid in ("Mbpp/2", "Mbpp/124", "Mbpp/737"):
        r = run_tests(it[tid].canonical, it[tid])
        assert r.passed, (tid, r.detail)
    r = run_tests("def similar_elements(a, b):\n    return tuple(set(a) | set(b))\n", it["Mbpp/2"])
    assert r.status == "failed" and "expected" in r.detail
    sp = split_items(base)
    assert len(sp["test"]) == 50 and len(sp["train"]) == 349


def test_evalplus_rows_with_json_string_inputs_and_float_tolerance(tmp_path):
    rows = [
        {"task_id": "HumanEval/900", "entry_point": "half",
         "prompt": "def half(x: float) -> float:\n    \"\"\"Half of x.\"\"\"\n",
         "canonical_solution": "    return x / 2\n", "base_input": json.dumps([[1], [3.0]]),
         "plus_input": json.dumps([[1e-9], [10 ** 6]]), "atol": 0},
        {"task_id": "HumanEval/32", "entry_point": "find_zero",
         "prompt": "def find_zero(xs: list):\n    \"\"\"A root of the polynomial.\"\"\"\n",
         "canonical_solution": "    return -xs[0] / xs[1]\n", "base_input": [[[2, -4]], [[-3, 1]]],
         "plus_input": [], "atol": 0},
    ]
    p = tmp_path / "HumanEvalPlus.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    items = load_evalplus(p, include_plus=True)
    assert [i.source for i in items] == ["humaneval+", "humaneval+"] and items[0].prefix
    assert all(run_tests(i.canonical, i).passed for i in items)
    assert score(items[0], "def half(x):\n    return x * 0.5000000001\n").passed      # within 1e-7 relative
    assert not score(items[0], "def half(x):\n    return x // 2\n").passed
    # find_zero is checked by the root property, not by equality with the reference
    assert score(items[1], "def find_zero(xs):\n    return -xs[0] / xs[1] + 0.0\n").passed
    assert not score(items[1], "def find_zero(xs):\n    return 0.0\n").passed


def test_split_keeps_expanded_rows_together():
    rows = [CodeItem(f"T/{i // 2}", "", "f", "") for i in range(8)]  # 4 problems, 2 rows each
    sp = split_items(rows, n_test=3)
    assert [r.task_id for r in sp["test"]] == ["T/0", "T/0", "T/1", "T/1", "T/2", "T/2"]
    assert [r.task_id for r in sp["train"]] == ["T/3", "T/3"]


def test_mbpp_crlf_record_separators(tmp_path):
    row = {"text": "Add.", "code": "def add(a, b):\r\n    return a + b", "task_id": 7, "test_setup_code": "",
           "test_list": ["assert add(1, 2) == 3"], "challenge_test_list": []}
    p = tmp_path / "mbpp.jsonl"
    p.write_bytes((json.dumps(row) + "\r\n" + json.dumps({**row, "task_id": 8}) + "\r\n").encode())
    items = load_mbpp(p)
    assert [i.task_id for i in items] == ["Mbpp/7", "Mbpp/8"] and items[0].entry_point == "add"
    assert run_tests(items[0].canonical, items[0]).passed


@pytest.mark.parametrize("loader,good,bad,needle", [
    ("mbpp", {"text": "t", "code": "def f():\n    return 1", "task_id": 1, "test_list": ["assert f() == 1"]},
     {"text": "t", "code": "def f():\n    return 1", "task_id": 2}, "'test_list'"),
    ("mbpp", {"text": "t", "code": "def f():\n    return 1", "task_id": 1, "test_list": ["assert f() == 1"]},
     "{not json", "not valid JSON"),
    ("mbpp", {"text": "t", "code": "def f():\n    return 1", "task_id": 1, "test_list": ["assert f() == 1"]},
     {"text": "t", "code": "def f():\n    return 1", "task_id": 2, "test_list": ["assert g() == 1"]},
     "cannot tell which function"),
    ("evalplus", {"task_id": "Mbpp/1", "prompt": "'''x'''", "entry_point": "f",
                  "canonical_solution": "def f(x):\n    return x", "base_input": [[1]], "plus_input": [], "atol": 0},
     {"task_id": "Mbpp/2", "prompt": "'''x'''", "entry_point": "f",
      "canonical_solution": "def f(x):\n    return x", "base_input": "[[1]", "plus_input": [], "atol": 0},
     "'base_input'"),
    ("evalplus", {"task_id": "Mbpp/1", "prompt": "'''x'''", "entry_point": "f",
                  "canonical_solution": "def f(x):\n    return x", "base_input": [[1]], "plus_input": [], "atol": 0},
     {"task_id": "Mbpp/2", "prompt": "'''x'''", "entry_point": "f",
      "canonical_solution": "def f(x):\n    return x", "base_input": [1, 2], "plus_input": [], "atol": 0},
     "list of argument lists"),
    ("humaneval", {"task_id": "HumanEval/0", "prompt": "def f():\n", "entry_point": "f",
                   "canonical_solution": "    return 1\n", "test": "def check(c):\n    assert c() == 1\n"},
     {"task_id": "HumanEval/1", "prompt": "def f():\n", "canonical_solution": "    return 1\n",
      "test": "def check(c):\n    assert c() == 1\n"}, "'entry_point'"),
])
def test_malformed_row_raises_one_clear_error(tmp_path, loader, good, bad, needle):
    p = tmp_path / f"{loader}.jsonl"
    p.write_text(json.dumps(good) + "\n" + (bad if isinstance(bad, str) else json.dumps(bad)) + "\n")
    with pytest.raises(CodeDatasetError) as ei:
        load_code_dataset(loader, p)
    msg = str(ei.value)
    assert str(p) in msg and "row 2" in msg and needle in msg


def test_humaneval_gz_path_and_unknown_dataset(tmp_path):
    row = {"task_id": "HumanEval/0", "prompt": "def f():\n", "entry_point": "f",
           "canonical_solution": "    return 1\n", "test": "def check(c):\n    assert c() == 1\n"}
    p = tmp_path / "he.jsonl.gz"
    p.write_bytes(gzip.compress((json.dumps(row) + "\n").encode()))
    (it,) = load_humaneval(p)
    assert run_tests(it.canonical, it).passed
    with pytest.raises(CodeDatasetError, match="unknown code dataset"):
        load_code_dataset("bigcodebench", p)


# --------------------------------------------------------------------------- code seed library

EXPECTED_SKILLS = {
    "code_complexity_analysis", "code_data_structure_choice", "code_off_by_one", "code_string_index_safety",
    "code_edge_cases", "code_recursion_depth", "code_numeric_precision", "code_io_format", "code_verification",
    "code_negative_handling", "code_test_walkthrough", "code_mutable_state",
}


@pytest.fixture(scope="module")
def library():
    return load_library(SKILLS, "code")


@pytest.fixture(scope="module")
def pfs(library):
    return {s.skill_id: s.pf for s in library.skills}


def test_library_loads_cleanly(library):
    assert library.load_errors == []
    assert set(library.ids) == EXPECTED_SKILLS and len(library.skills) == 12
    for s in library.skills:
        spec = load_skill(s.path)
        assert spec.domain == "code" and spec.name and spec.description and spec.system_summary
        assert "pre_final" in spec.phases and spec.applicable_phases == ["pre_final"]
        assert s.pf is not None and s.pf.skill_id == s.skill_id
        assert spec.phase_text("pre_final")


CLEAN = '''
def running_max(nums: list) -> list:
    out = []
    best = None
    for x in nums:
        best = x if best is None else max(best, x)
        out.append(best)
    return out
'''

CASES = {
    "code_off_by_one": ("def f(xs):\n    n = 0\n    for i in range(len(xs)):\n        if xs[i] == xs[i + 1]:\n"
                        "            n += 1\n    return n\n", "`xs[i + 1]` (line 4)"),
    "code_string_index_safety": ("def first_upper(s):\n    return s[0].isupper()\n", "s[0]"),
    "code_edge_cases": ("def mean(xs):\n    return sum(xs) / len(xs)\n", "ZeroDivisionError"),
    "code_complexity_analysis": ("def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
                                 "exponential"),
    "code_data_structure_choice": ("def uniq(xs):\n    seen = []\n    for x in xs:\n        if x not in seen:\n"
                                   "            seen.append(x)\n    return seen\n", "set"),
    "code_recursion_depth": ("def total(xs):\n    if not xs:\n        return 0\n    return xs[0] + total(xs[1:])\n",
                             "xs[1:]"),
    "code_numeric_precision": ("import math\ndef is_square(n):\n    return int(math.sqrt(n)) ** 2 == n\n", "isqrt"),
    "code_io_format": ("def add(a, b):\n    print(a + b)\n", "returns None"),
    "code_verification": ("def add(a, b):\n    return a + b\n\nassert add(1, 2) == 4\n", "module-level"),
    "code_mutable_state": ("def add(x, acc=[]):\n    acc.append(x)\n    return acc\n", "acc=[]"),
}


@pytest.mark.parametrize("skill_id", sorted(CASES))
def test_static_pf_fires_with_a_hint_quoting_the_code(pfs, skill_id):
    code, needle = CASES[skill_id]
    pf = pfs[skill_id]
    ctx = {"question": "Write the function.", "step_count": 0}
    assert pf.should_activate(ctx, "FINAL", code)
    iv = pf.intervene(ctx, "FINAL", code)
    assert iv.type is InterventionType.INJECT_CONTEXT
    assert needle in iv.context_text and iv.context_text.startswith("[")
    assert not pf.should_activate(ctx, "SEARCH", code)          # only FINAL
    # the same code inside a markdown fence is analysed the same way
    assert pf.should_activate(ctx, "FINAL", f"Here you go:\n```python\n{code}```")


@pytest.mark.parametrize("skill_id", sorted(CASES))
def test_static_pf_stays_quiet_on_clean_code(pfs, skill_id):
    assert not pfs[skill_id].should_activate({"question": "Running maximum.", "entry_point": "running_max"},
                                             "FINAL", CLEAN)


def test_more_specific_findings(pfs):
    q = {"question": "Return None if the list is empty.", "entry_point": "largest"}
    code = "def largest(xs):\n    return max(xs)\n"
    text = pfs["code_edge_cases"].intervene(q, "FINAL", code).context_text
    assert "max(xs)" in text and "empty" in text
    v = pfs["code_verification"]
    iv = v.intervene({"question": "", "entry_point": "solve"}, "FINAL", "def solve(x)\n    return x\n")
    assert "does not parse" in iv.context_text
    iv = v.intervene({"question": "", "entry_point": "solve"}, "FINAL", "def other(x):\n    return x\n")
    assert "`solve`" in iv.context_text
    assert v.should_activate({"entry_point": "solve"}, "FINAL", "def solve(x):\n    pass\n")
    ob = pfs["code_off_by_one"]
    assert "range(len(xs) + 1)" in ob.intervene({}, "FINAL",
                                                 "def f(xs):\n    for i in range(len(xs) + 1):\n"
                                                 "        print(xs[i])\n").context_text
    assert not ob.should_activate({}, "FINAL", "def f(xs):\n    for i in range(len(xs) - 1):\n"
                                               "        print(xs[i + 1])\n")
    io = pfs["code_io_format"]
    yes_no = "def ok(x) -> bool:\n    if x:\n        return 'YES'\n    return False\n"
    assert "-> bool" in io.intervene({"entry_point": "ok"}, "FINAL", yes_no).context_text
    num = pfs["code_numeric_precision"]
    assert num.should_activate({"question": "Round half away from zero."}, "FINAL", "def r(x):\n    return round(x)\n")
    assert not num.should_activate({"question": "Round to 2 places."}, "FINAL", "def r(x):\n    return round(x, 2)\n")


def test_prompt_equivalent_pfs_only_audit(pfs):
    neg, walk = pfs["code_negative_handling"], pfs["code_test_walkthrough"]
    code = "def f(n):\n    return abs(n)\n"
    assert neg.should_activate({"question": "Given a list of integers, ..."}, "FINAL", code)
    assert not neg.should_activate({"question": "Given a string, ..."}, "FINAL", code)
    assert neg.intervene({"question": "negative numbers"}, "FINAL", code).type is InterventionType.NOOP
    assert walk.should_activate({}, "FINAL", "class Solution:\n    def solve(self, n):\n        return n\n")
    assert walk.should_activate({}, "FINAL", "import sys\nn = int(sys.stdin.readline())\n")
    assert not walk.should_activate({}, "FINAL", code)
    iv = walk.intervene({}, "FINAL", "class Solution:\n    pass\n")
    assert iv.type is InterventionType.NOOP and iv.context_text == ""


def test_pfs_never_rewrite_code_and_survive_garbage(library, humaneval):
    disp = Dispatcher(library.pfs())
    for it in humaneval[:40]:
        ctx = final_context(it)
        d = Dispatcher(library.pfs()).dispatch(ctx, "FINAL", it.canonical)
        assert d.action_type == "FINAL" and d.arg == it.canonical and not d.errors
        assert all(f.type != "MODIFY_ACTION" for f in d.fired)
    for junk in ("", "```", "def (:", "\x00\x01", "```python\n", "    return x\n" * 3, "class Solution"):
        d = disp.dispatch({"question": "q"}, "FINAL", junk)
        assert not d.errors and d.arg == junk


def test_dispatch_collects_hints_for_buggy_code(library):
    buggy = ("def pairs(xs):\n    count = 0\n    for i in range(len(xs)):\n        for j in range(len(xs)):\n"
             "            if xs[i] + xs[i + 1] == 0:\n                count += 1\n    print(count)\n")
    d = Dispatcher(library.pfs()).dispatch({"question": "Count pairs of integers summing to zero.",
                                            "entry_point": "pairs"}, "FINAL", buggy)
    fired = {f.skill_id for f in d.fired}
    assert {"code_off_by_one", "code_io_format", "code_complexity_analysis", "code_negative_handling"} <= fired
    assert any("OFF-BY-ONE" in c for c in d.contexts) and any("I/O FORMAT" in c for c in d.contexts)


def test_code_view_handles_fences_and_bodies():
    v = code_view("```python\ndef f():\n    return 1\n```")
    assert v.tree is not None and v.function("f") is not None
    assert code_view("    x = 1\n    return x\n").tree is not None   # an indented body parses dedented
    bad = code_view("def f(:\n")
    assert bad.tree is None and bad.error_line == 1 and "SyntaxError" in bad.error
