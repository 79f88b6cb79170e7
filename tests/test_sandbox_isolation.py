"""The one sandbox package: both untrusted-code paths share its builder, child and layering."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from hasp.pf.sandboxed import SandboxedPF
from hasp.sandbox import seccomp
from hasp.sandbox.program import run_program

ROOT = Path(__file__).resolve().parents[1]
CORE = {"hasp.config", "hasp.records", "hasp.atomic", "hasp.textutil", "hasp.processes", "hasp.pyast"}

PF = ("from hasp.pf import ProgramFunction, register_pf\n"
      "@register_pf('quiet')\nclass Quiet(ProgramFunction):\n"
      "    def should_activate(self, ctx, action_type, arg):\n        return False\n")


def test_pf_and_program_paths_use_the_one_seccomp_builder(monkeypatch):
    built: list[str] = []
    real = seccomp.build

    def recording(profile: seccomp.Profile) -> bytes:
        built.append(profile.name)
        return real(profile)

    monkeypatch.setattr(seccomp, "build", recording)
    with SandboxedPF(PF, "quiet") as pf:
        assert pf.should_activate({}, "SEARCH", "q") is False
        pf_seccomp = pf.protections["seccomp"]
    r = run_program("def f():\n    return 1\n", "assert f() == 1", "f")
    assert r.passed, r.detail
    assert "pf" in built and {"program", "program-strict"} <= set(built)
    if seccomp.supported():
        assert pf_seccomp == seccomp.PF_PROFILE.name
        assert r.protections["seccomp"] in {"program", "program-strict"}


def test_only_the_builder_installs_seccomp():
    """No other module assembles or installs a filter of its own."""
    hits = [p.relative_to(ROOT).as_posix() for p in (ROOT / "hasp").rglob("*.py")
            if "PR_SET_SECCOMP" in p.read_text() or "SECCOMP_MODE_FILTER" in p.read_text()]
    assert hits == ["hasp/sandbox/seccomp.py"]


@pytest.mark.skipif(not seccomp.supported(), reason="seccomp profiles are x86_64 only")
def test_profiles_deny_what_they_list():
    pf = seccomp.describe(seccomp.PF_PROFILE)  # an allow-list: what is not named is refused
    for name in ("socket", "fork", "clone", "execve", "unlink", "openat2", "kill", "tkill", "tgkill",
                 "ptrace", "process_vm_readv", "process_vm_writev", "rt_tgsigqueueinfo"):
        assert f'"{name}"' not in pf
    assert '"openat"' in pf and '"read"' in pf and "action KILL_PROCESS" in pf and "action ERRNO(1)" in pf
    # a program under test gets an allow-list from the same builder: more names, still none of these
    lenient = seccomp.describe(seccomp.PROGRAM_PROFILE)
    strict = seccomp.describe(seccomp.PROGRAM_STRICT_PROFILE)
    for text in (lenient, strict):
        for name in ("socket", "connect", "fork", "clone", "clone3", "execve", "kill", "tkill", "tgkill",
                     "ptrace", "process_vm_writev", "pidfd_send_signal", "unshare", "mount", "bpf",
                     "chmod", "chown", "openat2", "utimensat"):
            assert f'"{name}"' not in text, name
        assert "action KILL_PROCESS" in text and "action ERRNO(1)" in text and '"read"' in text
    assert '"unlink"' in lenient and '"mkdir"' in lenient  # Landlock confines them to the private dir
    assert '"unlink"' not in strict and '"mkdir"' not in strict


def _hasp_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return {n for n in names if n == "hasp" or n.startswith("hasp.")}


def test_sandbox_package_imports_only_itself_and_core():
    for path in (ROOT / "hasp" / "sandbox").glob("*.py"):
        bad = {n for n in _hasp_imports(path) if not n.startswith("hasp.sandbox") and n not in CORE}
        assert not bad, (path.name, bad)


# --------------------------------------------------------------------------- the program sandbox's allow-list
DATA = Path(os.environ.get("HASP_SHARED_DATA", ROOT.parent / "shared" / "data"))

#: syscalls a program under test must not get: the first two were always denied; the others
#: (timestamps of files it owns, SysV IPC shared with the host) only an allow-list refuses
BLOCKED_PROGRAM = '''
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)

def errno_of(fn):
    try:
        fn()
    except OSError as e:
        return errno.errorcode.get(e.errno, e.errno)
    return "ran"

def msgget():
    if libc.msgget(0, 0o1600) == -1:  # IPC_PRIVATE, IPC_CREAT | 0600: not in the network namespace
        raise OSError(ctypes.get_errno(), "msgget")

R = {"socket": errno_of(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
     "kill_parent": errno_of(lambda: os.kill(os.getppid(), 0)),
     "utime": errno_of(lambda: os.utime(".", (0, 0))),
     "msgget": errno_of(msgget)}
'''


@pytest.mark.skipif(not seccomp.supported(), reason="seccomp profiles are x86_64 only")
def test_a_program_under_test_gets_eperm_off_its_allow_list():
    host = os.getpid()
    r = run_program(BLOCKED_PROGRAM, "assert R == dict.fromkeys(R, 'EPERM'), R")
    assert r.passed, r.detail
    assert r.protections["seccomp"] in {"program", "program-strict"}
    os.kill(host, 0)  # the host is alive and untouched


STDLIB_PROGRAM = '''
import bisect, collections, datetime, decimal, fractions, functools, hashlib, heapq, itertools, json
import math, random, re, statistics, string, textwrap, typing, dataclasses, enum, copy, difflib, time

@dataclasses.dataclass
class P:
    x: int

def f(xs: typing.List[int]) -> str:
    c = collections.Counter(xs)
    h = heapq.nsmallest(2, xs)
    s = statistics.mean(xs) + float(fractions.Fraction(1, 3)) + float(decimal.Decimal("0.5"))
    d = datetime.date(2020, 1, 31) + datetime.timedelta(days=1)
    rnd = random.Random(0).randint(1, 6) + random.randint(1, 6)
    time.sleep(0.001)
    words = re.findall(r"[a-z]+", textwrap.dedent("  ab cd"))
    digest = hashlib.sha256(json.dumps(sorted(c.items())).encode()).hexdigest()[:4]
    ratio = difflib.SequenceMatcher(None, "abc", "abd").ratio()
    best = functools.reduce(max, itertools.chain(h, [bisect.bisect(sorted(xs), 2)]))
    return f"{best}{math.isqrt(16)}{d.month}{words}{len(digest)}{s > 0}{ratio > 0}{rnd > 0}{copy.deepcopy(P(1)).x}"
'''


def test_stdlib_heavy_programs_still_pass():
    r = run_program(STDLIB_PROGRAM, "assert f([3, 1, 2, 1]) == \"342['ab', 'cd']4TrueTrueTrue1\", f([3, 1, 2, 1])", "f")
    assert r.passed, r.detail


def test_mbpp_canonical_solutions_still_pass():
    from hasp.domains.code.datasets import load_mbpp
    from hasp.domains.code.grade import run_tests

    path = DATA / "code" / "mbpp.jsonl"
    if not path.exists():
        pytest.skip(f"sample data {path} absent (only in the shared workspace)")
    items = load_mbpp(path)[:40]
    failed = [(it.task_id, r.detail) for it in items if not (r := run_tests(it.canonical, it)).passed]
    assert not failed, failed


def test_program_sandbox_fails_closed_without_a_layer_unless_the_user_opts_in(monkeypatch):
    monkeypatch.setattr(seccomp, "supported", lambda: False)
    r = run_program("def f():\n    return 1\n", "assert f() == 1", "f")
    assert r.status == "error" and r.detail.startswith("hasp sandbox refused") and "seccomp" in r.detail
    weak = run_program("def f():\n    return 1\n", "assert f() == 1", "f", allow_weaker=True)
    assert weak.passed and any("seccomp" in w for w in weak.protections["weaker"])


NO_LANDLOCK_HOST = r'''
import errno, json, sys
import pyseccomp as sc

# the Landlock syscalls answer ENOSYS, as on a kernel built without Landlock (inherited by every child)
f = sc.SyscallFilter(sc.ALLOW)
for name in ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"):
    f.add_rule(sc.ERRNO(errno.ENOSYS), name)
f.load()

from hasp.pf.sandboxed import SandboxedPF
from hasp.sandbox import landlock
from hasp.sandbox.program import run_program

PF = sys.argv[1]
READ = "print(len(open('/etc/passwd').read()))\n"
out = {"abi": landlock.abi()}
for allow in (False, True):
    r = run_program(READ, "", allow_weaker=allow)
    out[f"program_{allow}"] = {"status": r.status, "detail": r.detail,
                               "weaker": r.protections.get("weaker") or []}
    pf = SandboxedPF(PF, "quiet", allow_weaker=allow)
    try:
        pf.should_activate({}, "SEARCH", "q")
        out[f"pf_{allow}"] = {"weaker": pf.weaker, "landlock": pf.protections.get("landlock")}
    except Exception as e:
        out[f"pf_{allow}"] = {"error": f"{type(e).__name__}: {e}"}
    finally:
        pf.close()
print(json.dumps(out))
'''


@pytest.mark.skipif(not seccomp.supported(), reason="the kernel without Landlock is simulated with seccomp")
def test_a_kernel_without_landlock_is_a_missing_layer_for_both_children():
    """Without Landlock a worker running as ``nobody`` can read every world-readable file, so the
    layer is required like the others: refused, or recorded under the opt-in."""
    import json
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", NO_LANDLOCK_HOST, PF], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["abi"] < 1  # the host sees a kernel without Landlock
    strict = out["program_False"]
    assert strict["status"] == "error" and strict["detail"].startswith("hasp sandbox refused")
    assert "landlock" in strict["detail"] and "\n" not in strict["detail"]
    weak = out["program_True"]
    assert weak["status"] == "passed" and any(w.startswith("landlock") for w in weak["weaker"])
    refused = out["pf_False"]["error"]
    assert refused.startswith("SandboxRefused:") and "hasp sandbox refused" in refused and "landlock" in refused
    assert out["pf_True"]["landlock"] is False and any(w.startswith("landlock") for w in out["pf_True"]["weaker"])
