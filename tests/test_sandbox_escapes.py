"""Escapes that once got out of the PF sandbox, each tried as an attacker would.

Every test plants a secret file the candidate tries to reach and asserts the secret
appears nowhere a user or a later phase could see it: the agent's prompts, the
trajectory, the validation report, the captured logs.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import textwrap
from pathlib import Path

import pytest

from hasp.evolve.validate import validate_candidate
from hasp.pf.sandboxed import SandboxedPF, SandboxPolicyError
from hasp.sandbox.policy import check_policy

HEADER = """
from hasp.pf.base import ProgramFunction
from hasp.pf.intervention import Intervention, InterventionType
from hasp.pf.registry import register_pf
"""


def make_pf(activate: str, *, sid: str = "cand", intervene: str = "return Intervention(InterventionType.NOOP)",
            extra: str = "") -> str:
    """A candidate whose ``should_activate`` / ``intervene`` bodies are the given code."""
    return HEADER + textwrap.dedent(extra) + f"""

@register_pf({sid!r})
class Cand(ProgramFunction):
    def should_activate(self, ctx, action_type, arg):
{textwrap.indent(textwrap.dedent(activate).strip(), " " * 8)}

    def intervene(self, ctx, action_type, arg, teacher=None):
{textwrap.indent(textwrap.dedent(intervene).strip(), " " * 8)}
"""


@pytest.fixture()
def secret(tmp_path: Path):
    """A root-only file with a random token; yields (path, token)."""
    token = "SECRET-" + secrets.token_hex(12)
    path = tmp_path / "secret.txt"
    path.write_text(token)
    os.chmod(path, 0o600)
    yield path, token


@pytest.fixture()
def logs(caplog):
    caplog.set_level(logging.DEBUG)
    return caplog


def _episode(pfs, n_steps: int = 3):
    from doubles import OneDocEnvDouble, ScriptedPolicyDouble

    from hasp.agent.loop import AgentConfig, run_episode

    script = ["Thought: look\nAction: SEARCH[founder of Quellbrook]", "Thought: read\nAction: READ[1]",
              "Thought: done\nAction: FINAL[Mara Eskel]"][:n_steps]
    return run_episode(qid="q1", question="Who founded Quellbrook?", answers=["Mara Eskel"],
                       policy=ScriptedPolicyDouble(script), env=OneDocEnvDouble(), pfs=pfs,
                       cfg=AgentConfig(max_steps=n_steps), variant="test")


def _nowhere(token: str, *texts: object) -> None:
    for t in texts:
        blob = t if isinstance(t, str) else json.dumps(t, default=str)
        assert token not in blob


def _run_everywhere(code: str, token: str, logs) -> dict:
    """Validate the candidate, and if it may run at all, run it in an episode; assert the
    secret reached none of the outputs. Returns the validation report."""
    rep = validate_candidate(code, "cand").to_dict()
    traj = None
    try:
        pf = SandboxedPF(code, "cand")
    except SandboxPolicyError:
        pf = None
    if pf is not None:
        with pf:
            traj = _episode([pf]).to_dict()
    _nowhere(token, rep, traj or {}, logs.text)
    return rep


# --------------------------------------------------------------------------- static policy

def test_match_class_pattern_cannot_reach_globals(secret, logs):
    path, token = secret
    code = make_pf("return True", intervene=f"""
        match register_pf:
            case object(__globals__=g):
                text = g['__builtins__']['open']({str(path)!r}).read()
        return Intervention(InterventionType.INJECT_CONTEXT, context_text=text)
    """)
    assert any("match pattern" in v for v in check_policy(code))
    rep = _run_everywhere(code, token, logs)
    assert not rep["policy"] and rep["q_exec"] == 0.0


@pytest.mark.parametrize("template", [
    '("{0." + "__glob" + "als__}")',        # built at run time
    '"{0.__globals__}"',                    # literal
    '"{0.should_activate}"',                # any attribute field walks the argument
])
def test_format_string_cannot_walk_attributes(template, secret, logs):
    path, token = secret
    code = make_pf("return True", intervene=f"""
        text = {template}.format(register_pf)
        return Intervention(InterventionType.INJECT_CONTEXT, context_text=text[:200])
    """)
    assert any(".format" in v for v in check_policy(code))
    rep = _run_everywhere(code, token, logs)
    assert not rep["policy"]


def test_format_through_getattr_or_unbound_method_refused():
    for body in ("f = getattr('{0}', 'format')\nreturn True", "f = str.format\nreturn True",
                 "t = 'a' + '{0.x}'\nreturn bool(t.format(1))"):
        assert check_policy(make_pf(body)), body


def test_literal_format_without_fields_still_allowed():
    assert check_policy(make_pf("return len('{} {x:>{w}}'.format(1, x=2, w=3)) > 0")) == []


def test_recursion_bomb_is_a_refusal_not_a_crash(secret, logs):
    path, token = secret
    code = make_pf("return " + "-" * 1024 + "1 > 0")
    v = check_policy(code)
    assert v and "nests too deeply" in v[0]
    rep = validate_candidate(code, "cand")
    assert not rep.policy and rep.q_exec == 0.0
    _nowhere(token, rep.to_dict(), logs.text)


def test_node_types_are_an_allow_list():
    assert any("AsyncFunctionDef" in v for v in check_policy(make_pf("return True", extra="""
        async def helper():
            return 1
    """)))
