"""The one sandbox package: both untrusted-code paths share its builder, child and layering."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from hasp.pf.sandboxed import SandboxedPF
from hasp.sandbox import seccomp
from hasp.sandbox.program import run_program

ROOT = Path(__file__).resolve().parents[1]
CORE = {"hasp.config", "hasp.records", "hasp.atomic", "hasp.textutil"}

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
    lenient = seccomp.describe(seccomp.PROGRAM_PROFILE)
    for name in ("kill", "tkill", "tgkill", "ptrace", "process_vm_writev"):
        assert f'"{name}"' in lenient
    assert '"unlink"' not in lenient and '"openat"' not in lenient
    assert '"unlink"' in seccomp.describe(seccomp.PROGRAM_STRICT_PROFILE)


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
