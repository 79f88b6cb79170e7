"""The PF sandbox (static policy, restricted runtime, OS boundary) and Phase D validation."""

from __future__ import annotations

import copy
import os
import socket
import statistics
import textwrap
import time
from pathlib import Path

import pytest

from hasp.evolve.validate import ExecReport, mock_contexts, validate_candidate
from hasp.pf.base import ProgramFunction
from hasp.pf.dispatcher import Dispatcher
from hasp.pf.intervention import Intervention, InterventionType
from hasp.pf.registry import collecting, register_pf
from hasp.pf.sandboxed import SandboxedPF, SandboxLoadError, SandboxPFError, SandboxPolicyError, probe
from hasp.sandbox.policy import check_policy
from hasp.sandbox.worker import SandboxError, SandboxTimeout

# --------------------------------------------------------------------------- candidates

GOOD = '''
import re
from collections import Counter
from dataclasses import dataclass

from hasp.pf.base import ProgramFunction
from hasp.pf.intervention import Intervention, InterventionType
from hasp.pf.registry import register_pf

_STOP = {"the", "a", "of", "who", "which", "what", "did", "after"}


@dataclass
class _Cfg:
    max_words: int = 12


@register_pf("query_hygiene")
class QueryHygienePF(ProgramFunction):
    """Shortens rambling queries, repeats-guard, and blocks FINAL before any READ."""

    max_fires = 5
    _MAX = 3

    def __init__(self):
        super().__init__()
        self.cfg = _Cfg()

    def _keywords(self, text):
        words = [w for w in re.findall(r"[A-Za-z0-9]+", text) if w.lower() not in _STOP]
        return " ".join(words[: self.cfg.max_words])

    def should_activate(self, ctx, action_type, arg):
        if ctx.get("_qh_fires", 0) >= self._MAX:
            return False
        if action_type == "SEARCH":
            repeats = Counter(q.lower() for q in ctx.get("queries", []))
            return len(arg.split()) > 15 or repeats[arg.lower()] > 0 or ctx.get("empty_results", False)
        if action_type == "FINAL":
            return not ctx.get("has_read") or ctx.get("contradictory_sources", False)
        return False

    def intervene(self, ctx, action_type, arg, model=None):
        ctx["_qh_fires"] = ctx.get("_qh_fires", 0) + 1
        ctx["_qh_seen"] = sorted(set(ctx.get("_qh_seen", [])) | {action_type})
        if action_type == "SEARCH":
            return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="SEARCH",
                                new_action_arg=self._keywords(arg) or arg,
                                reason=f"shortened query ({len(arg.split())} words)")
        if action_type == "FINAL" and not ctx.get("has_read"):
            hits = ctx.get("last_search_hits") or [{"id": "1"}]
            return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="READ",
                                new_action_arg=hits[0]["id"], reason="read before answering")
        return Intervention(type=InterventionType.INJECT_CONTEXT,
                            context_text="Sources disagree: READ one more document first.",
                            reason="contradictions")
'''

PF_HEADER = "from hasp.pf import ProgramFunction, Intervention, InterventionType, register_pf\n"


def make_pf(body: str, *, top: str = "", intervene: str = "return Intervention(type=InterventionType.NOOP)",
            sid: str = "cand") -> str:
    """A candidate whose should_activate runs ``body`` and then returns True."""
    return (PF_HEADER + textwrap.dedent(top) + f'\n@register_pf("{sid}")\nclass Cand(ProgramFunction):\n'
            "    def should_activate(self, ctx, action_type, arg):\n"
            + textwrap.indent(textwrap.dedent(body), " " * 8) + "\n        return True\n"
            "    def intervene(self, ctx, action_type, arg, teacher=None):\n"
            f"        {intervene}\n")


def load_in_process(code: str, skill_id: str) -> ProgramFunction:
    """Trusted-code path (tests only): exec the candidate here to compare with the sandbox."""
    ns: dict = {"__name__": "in_process_candidate"}
    with collecting() as found:
        exec(compile(code, "<in-process>", "exec", dont_inherit=True), ns)  # noqa: S102 - test of known-good code
    return found[skill_id]()


def ctx_sequence() -> list[tuple[dict, str, str]]:
    """(ctx, action_type, arg) steps over the three mock regimes, with extra repeats."""
    out = []
    for name, ctx in mock_contexts():
        for at, arg in (("SEARCH", "founder of Quellbrook Systems"),
                        ("SEARCH", " ".join(["very"] * 20) + " long query about the founder of Tessaly Robotics"),
                        ("READ", "doc0012"), ("FINAL", "Tessaly Robotics"), ("FINAL", "x")):
            out.append((ctx, at, arg))
    return out


# --------------------------------------------------------------------------- good PF

def test_good_pf_validates_with_full_score():
    rep = validate_candidate(GOOD, "query_hygiene")
    assert isinstance(rep, ExecReport)
    assert rep.errors == []
    assert rep.checks == {"syntax": True, "policy": True, "interface": True,
                          "mock_exec": True, "return_types": True}
    assert rep.q_exec == 1.0 and rep.passed
    assert rep.class_name == "QueryHygienePF" and rep.max_fires == 5 and rep.needs_teacher is False
    assert len(rep.calls) == 9
    acts = rep.activations
    assert acts["early/FINAL"] is True          # FINAL before any READ
    assert acts["late/SEARCH"] is True          # long query / empty results
    assert acts["mid/READ"] is False


def test_mock_contexts_carry_every_runtime_key():
    from hasp.agent.context import EpisodeState

    runtime_keys = set(EpisodeState(question="q", max_steps=3).to_ctx("t"))
    regimes = dict(mock_contexts())
    assert set(regimes) == {"early", "mid", "late"}
    for ctx in regimes.values():
        assert runtime_keys <= set(ctx)
    assert regimes["early"]["step_count"] == 1 and not regimes["early"]["has_read"]
    assert regimes["mid"]["step_count"] == 5 and regimes["mid"]["read_count"] == 2
    late = regimes["late"]
    assert late["step_count"] == 12 and late["empty_results"] and late["contradictory_sources"]


def test_sandboxed_results_equal_in_process():
    local = load_in_process(GOOD, "query_hygiene")
    with SandboxedPF(GOOD, "query_hygiene") as remote:
        assert remote.skill_id == "query_hygiene" and remote.max_fires == 5 and remote.needs_teacher is False
        priv_local: dict = {}
        priv_remote: dict = {}
        for ctx, at, arg in ctx_sequence():
            c1 = {**copy.deepcopy(ctx), **priv_local}
            c2 = {**copy.deepcopy(ctx), **priv_remote}
            a1, a2 = local.should_activate(c1, at, arg), remote.should_activate(c2, at, arg)
            assert a1 == a2, (at, arg)
            i1, i2 = local.intervene(c1, at, arg, None), remote.intervene(c2, at, arg, None)
            assert isinstance(i2, Intervention)
            assert i1.to_dict() == i2.to_dict()
            priv_local = {k: v for k, v in c1.items() if k.startswith("_")}
            priv_remote = {k: v for k, v in c2.items() if k.startswith("_")}
            assert {"_sandbox:query_hygiene": priv_local} == priv_remote  # its own namespace
            assert {k for k in c2 if not k.startswith("_")} == set(ctx)  # public keys untouched
        assert priv_remote["_sandbox:query_hygiene"]["_qh_fires"] == len(ctx_sequence())


def test_sandboxed_pf_through_dispatcher_matches_in_process():
    def run(pf: ProgramFunction) -> list:
        d = Dispatcher([pf])
        out, priv = [], {}
        for ctx, at, arg in ctx_sequence():
            c = {**copy.deepcopy(ctx), **priv}
            r = d.dispatch(c, at, arg)
            priv = {k: v for k, v in c.items() if k.startswith("_")}
            out.append((r.action_type, r.arg, r.contexts, [(f.skill_id, f.type, f.applied) for f in r.fired],
                        r.errors))
        return out

    with SandboxedPF(GOOD, "query_hygiene") as remote:
        assert run(load_in_process(GOOD, "query_hygiene")) == run(remote)


def test_private_ctx_keys_roundtrip_and_delete():
    code = make_pf("""
        ctx["_n"] = ctx.get("_n", 0) + 1
        ctx.pop("_gone", None)
        ctx["_t"] = (1, 2)
        ctx["question"] = "changed"
    """)
    with SandboxedPF(code, "cand") as pf:
        # the shared private keys are neither seen nor touched: the PF has its own namespace
        ctx = {"question": "q", "_gone": 1, "_other": {"a": [1, 2]}, "_n": 4,
               "_sandbox:cand": {"_n": 4, "_gone": 1}}
        assert pf.should_activate(ctx, "SEARCH", "x") is True
        assert ctx == {"question": "q", "_gone": 1, "_other": {"a": [1, 2]}, "_n": 4,
                       "_sandbox:cand": {"_n": 5, "_t": [1, 2]}}


def test_print_is_captured_not_corrupting_protocol():
    code = make_pf("print('hello from the PF', 'x' * 10)")
    with SandboxedPF(code, "cand") as pf:
        resp = pf.call_raw("should_activate", {}, "SEARCH", "q")
        assert resp["ok"] and resp["result"] is True and resp["log"].startswith("hello from the PF")


# --------------------------------------------------------------------------- broken candidates

def test_syntax_error_rejected():
    rep = validate_candidate("@register_pf('x')\nclass X(ProgramFunction:\n  pass\n")
    assert not rep.syntax and rep.q_exec == 0.0 and not rep.passed
    assert rep.errors and rep.errors[0].startswith("syntax:")


def test_no_class_rejected():
    code = PF_HEADER + "def should_activate(ctx, action_type, arg):\n    return False\n"
    rep = validate_candidate(code)
    assert rep.syntax and rep.policy and not rep.interface and not rep.passed
    assert rep.mock_exec == 0.0 and rep.q_exec <= 0.4
    assert any("register_pf" in e for e in rep.errors)


def test_wrong_signature_rejected():
    code = (PF_HEADER + '@register_pf("sig")\nclass S(ProgramFunction):\n'
            "    def should_activate(self, ctx):\n        return True\n"
            "    def intervene(self, ctx, action_type, arg, teacher):\n"
            "        return Intervention(type=InterventionType.NOOP)\n")
    rep = validate_candidate(code, "sig")
    assert not rep.interface and not rep.passed and rep.q_exec < 1.0
    assert any("should_activate takes 2 positional" in e for e in rep.errors)
    assert any("must default to None" in e for e in rep.errors)
    assert rep.mock_exec < 1.0  # the dispatcher's call signature fails at run time too


def test_watches_crosses_the_sandbox_and_a_broken_promise_fails_interface():
    honest = make_pf("if action_type != 'FINAL':\n    return False").replace(
        "class Cand(ProgramFunction):\n", "class Cand(ProgramFunction):\n    watches = ('FINAL',)\n")
    with SandboxedPF(honest, "cand") as pf:
        assert pf.watches == ["FINAL"]
        d = Dispatcher([pf])
        assert d.dispatch({}, "SEARCH", "q").fired == []  # skipped in the host: no round trip
        assert [f.skill_id for f in d.dispatch({}, "FINAL", "x").fired] == ["cand"]
    assert validate_candidate(honest, "cand").passed
    liar = make_pf("pass").replace("class Cand(ProgramFunction):\n",
                                   "class Cand(ProgramFunction):\n    watches = ('FINAL',)\n")
    rep = validate_candidate(liar, "cand")
    assert not rep.interface and not rep.passed
    assert any("outside watches=['FINAL']" in e for e in rep.errors)
    typo = make_pf("pass").replace("class Cand(ProgramFunction):\n", "class Cand(ProgramFunction):\n    watches = 3\n")
    with SandboxedPF(typo, "cand") as pf:
        assert pf.watches is None  # unusable: asked on every type
    assert any("watches must be None" in e for e in validate_candidate(typo, "cand").errors)


def test_intervene_returning_dict_rejected():
    code = make_pf("pass", intervene="return {'type': 'NOOP', 'reason': 'dict'}")
    rep = validate_candidate(code, "cand")
    assert rep.interface and rep.mock_exec == 1.0
    assert rep.return_types == 0.5 and not rep.checks["return_types"] and not rep.passed
    assert any("returned dict, not Intervention" in e for e in rep.errors)
    with SandboxedPF(code, "cand") as pf, pytest.raises(TypeError, match="dict, not Intervention"):
        pf.intervene({}, "SEARCH", "q")


def test_illegal_intervention_fields_rejected():
    code = make_pf("pass", intervene=("return Intervention(type=InterventionType.MODIFY_ACTION, "
                                      "new_action_type='DELETE', new_action_arg='x')"))
    rep = validate_candidate(code, "cand")
    assert rep.mock_exec == 1.0 and rep.return_types == 0.5 and not rep.passed
    assert any("new_action_type 'DELETE'" in e for e in rep.errors)


def test_should_activate_raising_on_read_rejected():
    code = make_pf("""
        if action_type == "READ":
            return 1 // 0
    """)
    rep = validate_candidate(code, "cand")
    assert rep.interface and not rep.passed
    assert rep.mock_exec == pytest.approx(6 / 9, abs=1e-3)
    assert any("ZeroDivisionError" in e and "line" in e for e in rep.errors)
    assert 0.3 < rep.q_exec < 1.0
    with SandboxedPF(code, "cand") as pf:
        assert pf.should_activate({}, "SEARCH", "q") is True
        with pytest.raises(SandboxPFError, match="ZeroDivisionError"):
            pf.should_activate({}, "READ", "1")
        assert pf.should_activate({}, "FINAL", "a") is True  # the worker survives a PF exception


def test_load_failure_is_deferred_and_sticky():
    code = (PF_HEADER + '@register_pf("boom")\nclass B(ProgramFunction):\n'
            "    def __init__(self):\n        raise RuntimeError('no init')\n"
            "    def should_activate(self, ctx, action_type, arg):\n        return True\n")
    pf = SandboxedPF(code, "boom")
    assert pf.max_fires is None and pf.needs_teacher is False  # attribute reads never raise
    with pytest.raises(SandboxLoadError, match="no init"):
        pf.should_activate({}, "SEARCH", "q")
    with pytest.raises(SandboxLoadError):
        pf.should_activate({}, "SEARCH", "q")
    pf.close()
    rep = validate_candidate(code, "boom")
    assert not rep.interface and rep.mock_exec == 0.0 and any("no init" in e for e in rep.errors)


# --------------------------------------------------------------------------- static policy

POLICY_OK = [
    "from __future__ import annotations\nimport re, math, json\nfrom typing import Optional\n",
    "import collections.abc\nfrom collections import Counter, defaultdict\nfrom hasp.pf import register_pf\n",
    "from hasp.pf.base import ProgramFunction\nclass A(ProgramFunction):\n    __slots__ = ()\n"
    "    def __init__(self):\n        super().__init__()\n        self._n = getattr(self, '_n', 0)\n",
    "if __name__ == '__main__':\n    pass\n",
]

POLICY_BAD = {
    "import os\n": "import of 'os'",
    "from os import path\n": "import from 'os'",
    "from . import x\n": "relative imports",
    "from hasp.pf.dispatcher import Dispatcher\n": "import from 'hasp.pf.dispatcher'",
    "x = eval('1')\n": "'eval'",
    "f = open\n": "'open'",
    "x = ().__class__\n": "dunder attribute '__class__'",
    "x = type(1).__name__\n": "dunder attribute '__name__'",
    "import typing\nx = typing.sys\n": None,  # not statically visible; the proxy module has no `sys`
    "import collections\nx = collections._sys\n": "private attribute '_sys'",
    "ProgramFunction.should_activate = None\n": "patching ProgramFunction.should_activate",
    "setattr(Intervention, 'x', 1)\n": "setattr on Intervention",
    "Intervention = dict\n": "rebinds protected runtime name 'Intervention'",
    "def f():\n    global register_pf\n": "global register_pf",
    "g = (x for x in [1])\nf = g.gi_frame\n": "interpreter-internal attribute 'gi_frame'",
    "x = getattr(int, name)\n": "computed attribute name",
    "x = '{0.__class__}'.format(1)\n": "format string",
    "d = {}\nd['__builtins__'] = 1\n": "interpreter internals",
    "class A:\n    def __getattr__(self, n):\n        return n\n": "defining __getattr__",
    "class E:\n    @classmethod\n    def f(cls):\n        return cls._convert_\n": "enum-internal attribute '_convert_'",
    "class A:\n    def f(self):\n        self.__init__ = None\n": "assignment to dunder attribute '__init__'",
}


@pytest.mark.parametrize("code", POLICY_OK)
def test_policy_accepts_ordinary_pf_code(code):
    assert check_policy(code) == []


@pytest.mark.parametrize("code,expect", list(POLICY_BAD.items()))
def test_policy_rejects(code, expect):
    v = check_policy(code)
    if expect is None:
        return
    assert v and any(expect in m for m in v), v


def test_restricted_runtime_hides_module_internals():
    code = make_pf("import typing\nx = typing.sys")
    with SandboxedPF(code, "cand") as pf, pytest.raises(SandboxPFError, match="AttributeError"):
        pf.should_activate({}, "SEARCH", "q")


# --------------------------------------------------------------------------- hostile candidates

@pytest.fixture()
def sentinel(tmp_path: Path):
    """A world-writable dir with a file in it: only the sandbox (not permissions) protects it."""
    d = tmp_path / "sentinel"
    d.mkdir()
    f = d / "sentinel.txt"
    f.write_text("precious")
    os.chmod(d, 0o777)
    os.chmod(f, 0o666)
    os.chmod(tmp_path, 0o755)
    before = (sorted(os.listdir(d)), f.read_text(), f.stat().st_mtime_ns)
    orig = (Dispatcher.dispatch, ProgramFunction.should_activate, Intervention.__init__)
    yield d
    # host alive and untouched
    assert os.getpid() > 0
    assert (sorted(os.listdir(d)), f.read_text(), f.stat().st_mtime_ns) == before
    assert (Dispatcher.dispatch, ProgramFunction.should_activate, Intervention.__init__) == orig
    host = load_in_process(GOOD, "query_hygiene")
    r = Dispatcher([host]).dispatch({"has_read": False, "queries": []}, "FINAL", "x")
    assert r.action_type == "READ"


@pytest.fixture()
def listener():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    srv.setblocking(False)
    yield srv
    with pytest.raises(BlockingIOError):  # nobody connected
        srv.accept()
    srv.close()


def hostile_cases(target: Path, port: int) -> dict[str, str]:
    t = str(target)
    return {
        "fork_bomb": make_pf("""
            import os
            while True:
                os.fork()
        """),
        "file_write": make_pf(f"open({t!r}, 'w').write('pwned')"),
        "socket_connect": make_pf(f"""
            import socket
            s = socket.create_connection(('127.0.0.1', {port}), timeout=1)
            s.sendall(b'pwned')
        """),
        "subprocess": make_pf(f"""
            import subprocess
            subprocess.run(['/bin/sh', '-c', 'echo pwned > {t}'], check=True)
        """),
        "patch_dispatcher": make_pf("""
            from hasp.pf.dispatcher import Dispatcher
            Dispatcher.dispatch = lambda *a, **k: None
            ProgramFunction.should_activate = lambda *a: True
            Intervention.__init__ = lambda *a, **k: None
        """),
        "subclasses_walk": make_pf(f"""
            for c in ().__class__.__base__.__subclasses__():
                if c.__name__ == '_wrap_close':
                    c.__init__.__globals__['system']('echo pwned > {t}')
                if c.__name__ == 'ProgramFunction':
                    c.should_activate = None
            b = [c for c in object.__subclasses__() if c.__name__ == 'catch_warnings'][0]
            b()._module.__builtins__['open']({t!r}, 'w').write('pwned')
        """),
        "kill_host": make_pf("""
            import os, signal
            os.kill(os.getppid(), signal.SIGKILL)
        """),
        "getattr_escape": make_pf(f"""
            g = getattr(self.should_activate, '__glo' + 'bals__')
            g['__builtins__']['open']({t!r}, 'w').write('pwned')
        """),
    }


HOSTILE = ["fork_bomb", "file_write", "socket_connect", "subprocess", "patch_dispatcher",
           "subclasses_walk", "kill_host", "getattr_escape"]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_rejected_by_policy(name, sentinel, listener):
    code = hostile_cases(sentinel / "pwned.txt", listener.getsockname()[1])[name]
    assert check_policy(code), name
    with pytest.raises(SandboxPolicyError):
        SandboxedPF(code, "cand")
    rep = validate_candidate(code, "cand")
    assert not rep.policy and rep.q_exec == 0.0 and not rep.passed and rep.calls == []


def _attack(pf: SandboxedPF) -> str:
    """Run the payload; return how it ended. It must never end with the PF returning True."""
    try:
        result = pf.should_activate({}, "SEARCH", "q")
    except SandboxTimeout:
        return "timeout"
    except SandboxError as e:
        return f"error: {e}"
    return f"returned {result}"


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_contained_by_restricted_runtime(name, sentinel, listener):
    """Policy skipped: the restricted builtins / importer are the next layer."""
    target = sentinel / "pwned.txt"
    code = hostile_cases(target, listener.getsockname()[1])[name]
    with SandboxedPF(code, "cand", _skip_policy_for_tests=True) as pf:
        outcome = _attack(pf)
    assert not target.exists()
    if name == "subclasses_walk":
        # Attribute syntax is only checked by the static policy; this payload reaches
        # os.system and real builtins — and then hits the OS boundary (no fork, no writes).
        assert "PermissionError" in outcome, outcome
    else:
        assert outcome.startswith("error:"), outcome
        assert any(s in outcome for s in ("ImportError", "NameError", "AttributeError")), outcome


def _os_layer_or_skip(pf: SandboxedPF, *needed: str) -> dict:
    prot = pf.protections
    missing = [k for k in needed if not prot.get(k)]
    if missing:
        pytest.skip(f"OS protections {missing} not available here: {prot.get('errors')}")
    return prot


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_contained_by_os_boundary(name, sentinel, listener):
    """Policy skipped AND full builtins/imports: only the worker's OS limits stand."""
    target = sentinel / "pwned.txt"
    code = hostile_cases(target, listener.getsockname()[1])[name]
    with SandboxedPF(code, "cand", _skip_policy_for_tests=True, _unrestricted_for_tests=True) as pf:
        _os_layer_or_skip(pf, "seccomp")  # never run a real fork bomb / kill on an unprotected host
        pid = pf.protections["pid"]
        outcome = _attack(pf)
    assert not target.exists()
    with pytest.raises(ProcessLookupError):  # the worker is gone after close()
        os.kill(pid, 0)
    if name == "patch_dispatcher":
        # patching succeeds only inside the worker's own process; the host is checked by `sentinel`
        assert outcome == "returned True"
    elif name == "subclasses_walk":
        assert "PermissionError" in outcome, outcome
    else:
        assert "PermissionError" in outcome or "Operation not permitted" in outcome, outcome


def test_memory_bomb_contained(sentinel):
    code = make_pf("x = 'a' * 10**10")
    assert check_policy(code) == []  # nothing static about it: the rlimit has to catch it
    with SandboxedPF(code, "cand", memory_mb=256) as pf:
        assert pf.protections["rlimit_as"] == 256 * 1024 * 1024
        with pytest.raises(SandboxPFError, match="MemoryError"):
            pf.should_activate({}, "SEARCH", "q")
        assert pf.alive
    rep = validate_candidate(code, "cand")
    assert rep.mock_exec == 0.0 and not rep.passed


def test_infinite_loop_times_out_and_host_is_fine(sentinel):
    code = make_pf("while True:\n    pass")
    assert check_policy(code) == []
    pf = SandboxedPF(code, "cand", timeout_s=0.5, max_restarts=1)
    pf._ensure()
    pid = pf.protections["pid"]
    t0 = time.monotonic()
    with pytest.raises(SandboxTimeout):
        pf.should_activate({}, "SEARCH", "q")
    assert time.monotonic() - t0 < 3.0
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not pf.alive
    # the next call gets a fresh worker (and times out again); then the PF gives up for good
    with pytest.raises(SandboxTimeout):
        pf.should_activate({}, "SEARCH", "q")
    t0 = time.monotonic()
    with pytest.raises(SandboxError, match="giving up"):
        pf.should_activate({}, "SEARCH", "q")
    assert time.monotonic() - t0 < 0.1
    pf.close()


def test_worker_death_reports_stderr_tail():
    code = make_pf("""
        import os, sys
        sys.stderr.write('last words of the worker\\n')
        sys.stderr.flush()
        os._exit(7)
    """)
    with SandboxedPF(code, "cand", _skip_policy_for_tests=True, _unrestricted_for_tests=True) as pf:
        with pytest.raises(SandboxError, match="exit code 7") as ei:
            pf.should_activate({}, "SEARCH", "q")
        assert not isinstance(ei.value, SandboxTimeout)
        assert "last words of the worker" in str(ei.value)


def test_probe_reports_measured_protections():
    hello = probe()
    prot, pr = hello["protections"], hello["probe"]
    assert prot["rlimit_fsize"] == 0 and prot["rlimit_nproc"] == 0 and prot["rlimit_as"]
    assert set(pr) == {"fork", "socket_connect", "write_outside_workdir", "write_workdir", "alloc_2GB",
                       "read_world_readable_file"}
    if prot.get("landlock_files") == "none":
        assert pr["read_world_readable_file"].startswith("blocked")
    assert pr["alloc_2GB"].startswith("blocked")
    assert pr["write_outside_workdir"].startswith("blocked")
    if prot["seccomp"] or (prot["uid_dropped"]):
        assert pr["fork"].startswith("blocked")
    if prot["seccomp"] or prot["netns"]:
        assert pr["socket_connect"].startswith("blocked")


# --------------------------------------------------------------------------- runtime integration

@register_pf("always_inject_test")
class _AlwaysInject(ProgramFunction):
    def should_activate(self, ctx, action_type, arg):
        return True

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention(type=InterventionType.INJECT_CONTEXT, context_text="hint")


def test_dispatcher_disables_timed_out_sandboxed_pf():
    loop = make_pf("while True:\n    pass", sid="looper")
    spf = SandboxedPF(loop, "looper", timeout_s=0.5)
    d = Dispatcher([spf, _AlwaysInject()])
    try:
        t0 = time.monotonic()
        r1 = d.dispatch({"question": "q"}, "SEARCH", "x")
        assert time.monotonic() - t0 < 5.0
        assert "looper" in d.disabled and "SandboxTimeout" in d.disabled["looper"]
        assert r1.errors and r1.contexts == ["hint"]
        t0 = time.monotonic()
        r2 = d.dispatch({"question": "q"}, "FINAL", "y")
        assert time.monotonic() - t0 < 0.2  # the disabled PF is skipped, not retried
        assert r2.errors == [] and r2.contexts == ["hint"] and r2.action_type == "FINAL"
    finally:
        spf.close()


def test_episode_continues_after_sandbox_timeout():
    from doubles import OneDocEnvDouble, ScriptedPolicyDouble

    from hasp.agent.loop import AgentConfig, run_episode

    loop = make_pf("while True:\n    pass", sid="looper")
    with SandboxedPF(loop, "looper", timeout_s=0.5) as spf:
        traj = run_episode(qid="q1", question="Who founded Quellbrook?", answers=["Mara Eskel"],
                           policy=ScriptedPolicyDouble(["Thought: look\nAction: SEARCH[founder of Quellbrook]",
                                                        "Thought: read\nAction: READ[1]",
                                                        "Thought: done\nAction: FINAL[Mara Eskel]"]),
                           env=OneDocEnvDouble(), pfs=[spf], cfg=AgentConfig(max_steps=5),
                           variant="test")
    assert traj.terminated == "final" and traj.prediction == "Mara Eskel"
    assert len(traj.steps) == 3
    assert sum("SandboxTimeout" in e for e in traj.pf_errors) == 1


def test_per_call_overhead_is_small():
    with SandboxedPF(GOOD, "query_hygiene") as pf:
        ctx = dict(mock_contexts()[1][1])
        pf.should_activate(ctx, "READ", "1")
        times = []
        for _ in range(200):
            t0 = time.perf_counter()
            pf.should_activate(ctx, "READ", "1")
            times.append(time.perf_counter() - t0)
    assert statistics.median(times) < 0.005  # ~0.1 ms idle; generous for loaded CI machines
