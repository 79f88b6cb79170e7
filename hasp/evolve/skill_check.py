"""Check one skill folder the way a user needs before adding it to a library.

Four checks, each reported separately so a failure says where to look:

* ``agent_skills``: the Agent Skills rules, by the reference validator (``skills-ref``),
  so the folder loads in other agent tools;
* ``hasp``: HASP's closed schema (SKILL.md + hasp.yaml), the folder name that fits the
  skill id and version, and phase conditions the skill's domain can evaluate;
* ``pf_load``: the PF class registered under the skill id can be found and loaded;
* ``exec``: Phase D's execution checks on mock step contexts, run the way the library
  would run the PF: in the sandbox (under the ``sandbox`` params; a run in the weaker mode
  lists the missing layers in ``weaker``) unless ``hasp.pf.trust`` says the ``pf.py`` is the
  project's own seed code or the user named the folder trusted; a declared PF compiles from
  the vocabulary and runs in-process. The report's ``mode`` says which ran.

Every file is read through ``hasp.pf.folder_files`` (regular files only, size caps, bounded
YAML), and anything that goes wrong in one folder becomes that folder's refusal line, so a run
over a library reports every folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from skills_ref import validate as agent_skills_errors

from hasp.pyast import parse_python
from hasp.config import SandboxParams
from hasp.evolve.validate import SEARCH_ACTIONS, ExecReport, validate_candidate, validate_trusted
from hasp.pf.conditions import invalid_phases
from hasp.pf.declared import compile_declaration
from hasp.pf.folder_files import present, read_text
from hasp.pf.layout import GENERATED_DIR, VERSION_DIR, folder_refusal
from hasp.pf.library import import_trusted_pf
from hasp.pf.pf_source import find_pf_class
from hasp.pf.skill_md import HASP_FILE, SKILL_FILE, SkillFormatError, SkillSpec, load_skill, split_frontmatter
from hasp.pf.texts import apply_texts
from hasp.pf.trust import trusted_pf

CHECKS = ("agent_skills", "hasp", "pf_load", "exec")
#: action types a domain's PFs are asked about (math and code answer in one FINAL step)
DOMAIN_ACTIONS = {"search": SEARCH_ACTIONS}
SINGLE_STEP_ACTIONS = ("FINAL",)


@dataclass
class FolderReport:
    """Per check: "ok", "fail" or "skip"; the errors name the check they come from."""

    path: str
    skill_id: str = ""
    mode: str = "-"  # how the PF was executed: sandbox / trusted / declared / -
    checks: dict[str, str] = field(default_factory=lambda: dict.fromkeys(CHECKS, "skip"))
    errors: list[str] = field(default_factory=list)
    weaker: list[str] = field(default_factory=list)  # isolation layers missing (sandbox.allow_weaker)

    @property
    def ok(self) -> bool:
        return "fail" not in self.checks.values()

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    def _set(self, check: str, errors: list[str]) -> bool:
        self.checks[check] = "fail" if errors else "ok"
        self.errors += [f"{check}: {e}" for e in errors]
        return not errors


def skill_folders(path: Path) -> list[Path]:
    """``path`` itself when it holds a SKILL.md, else every skill folder in it (a library)."""
    if present(path / SKILL_FILE) or not path.is_dir():
        return [path]
    seeds = sorted(p for p in path.iterdir() if present(p / SKILL_FILE))
    gen = path / GENERATED_DIR
    return seeds + (sorted(p for p in gen.iterdir() if present(p / SKILL_FILE)) if gen.is_dir() else [])


def _schema_errors(folder: Path, generated: bool) -> tuple[SkillSpec | None, list[str]]:
    try:
        spec = load_skill(folder)
    except SkillFormatError as e:
        return None, [str(e)]
    errs = []
    m = VERSION_DIR.match(folder.name)
    version = int(m["n"]) if generated and m else spec.version
    why = folder_refusal(folder, spec.skill_id, version, generated)
    if why:
        errs.append(why)
    if generated and spec.version != version:
        errs.append(f"hasp.yaml version {spec.version} != folder version {version}")
    errs += list(invalid_phases(spec, spec.domain, f"{folder}/hasp.yaml").values())
    return spec, errs


def domain_actions(domain: str, task_actions: Sequence[str] | None = None) -> tuple[str, ...]:
    """The action types a skill of ``domain`` is checked against: a task's own (``task_actions``),
    the search agent's, or FINAL alone (math, code)."""
    return tuple(task_actions) if task_actions else DOMAIN_ACTIONS.get(domain, SINGLE_STEP_ACTIONS)


def _exec_report(folder: Path, spec: SkillSpec, trusted: Sequence[Path], rep: FolderReport,
                 timeout_s: float, sandbox_params: SandboxParams | None,
                 task_actions: Sequence[str] | None = None) -> ExecReport | None:
    pf_path = folder / "pf.py"
    actions = domain_actions(spec.domain, task_actions)
    try:
        source = read_text(pf_path)
    except SkillFormatError as e:
        rep._set("pf_load", [str(e)])
        return None
    if not trusted_pf(folder, source, trusted):
        rep.mode = "sandbox"
        try:
            found = find_pf_class(parse_python(source), spec.skill_id)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
            where = f" (line {e.lineno})" if isinstance(e, SyntaxError) else ""
            rep._set("pf_load", [f"{pf_path}: {getattr(e, 'msg', None) or type(e).__name__}{where}"])
            return None
        rep._set("pf_load", [] if found else [f"{pf_path}: no @register_pf({spec.skill_id!r}) class"])
        ex = validate_candidate(source, spec.skill_id, timeout_s=timeout_s, action_types=actions,
                                sandbox=sandbox_params)
        rep.weaker = list(ex.weaker)
        return ex
    rep.mode = "trusted"
    try:
        pf = apply_texts(import_trusted_pf(pf_path, spec.skill_id, source), spec.texts, f"{folder}/{HASP_FILE}")
    except Exception as e:  # noqa: BLE001 - any import failure is the finding
        rep._set("pf_load", [f"{type(e).__name__}: {e}"])
        return None
    rep._set("pf_load", [])
    return validate_trusted(pf, action_types=actions)


def _check_declared(folder: Path, spec: SkillSpec, rep: FolderReport, task_actions: Sequence[str] | None = None) -> None:
    """A declared PF: it compiles from the vocabulary (the load check) and passes the execution
    checks in-process — compiled declarations run no student code, so no sandbox is needed."""
    rep.mode = "declared"
    where = f"{folder}/{HASP_FILE}: pf"
    if present(folder / "pf.py"):
        rep._set("pf_load", [f"{where}: a skill declares its PF under pf: or in pf.py, not both"])
        return
    try:
        pf = compile_declaration(spec.skill_id, spec.pf, where, spec.domain)
        if spec.texts:  # as the loader does: a declaration's texts go through the same check
            apply_texts(pf, spec.texts, f"{folder}/{HASP_FILE}")
    except SkillFormatError as e:
        rep._set("pf_load", [str(e)])
        return
    rep._set("pf_load", [])
    ex = validate_trusted(pf, action_types=domain_actions(spec.domain, task_actions))
    rep._set("exec", [] if ex.passed else ex.errors or [f"Q_exec {ex.q_exec}"])


def _agent_skills(folder: Path) -> list[str]:
    """The reference validator's findings. It reads SKILL.md with no guard of its own, so it runs
    only on a SKILL.md that ``folder_files`` reads and whose frontmatter the bounded parser takes."""
    md = folder / SKILL_FILE
    try:
        split_frontmatter(read_text(md), str(md))
    except SkillFormatError as e:
        return [str(e)]
    try:
        return list(agent_skills_errors(folder))
    except Exception as e:  # noqa: BLE001 - the validator's own failure is this check's finding
        return [f"{md}: the Agent Skills validator failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}"]


def check_folder(folder: Path, *, trusted: Sequence[Path] = (), timeout_s: float = 10.0,
                 sandbox_params: SandboxParams | None = None, task_actions: Sequence[str] | None = None) -> FolderReport:
    """All four checks for one folder (``task_actions``: a user task's actions, which its PFs may
    rewrite to; the skill's domain's otherwise). Its ``pf.py`` runs in-process only when ``hasp.pf.trust``
    trusts it (shipped seed code, or a folder in ``trusted``), else in the sandbox under
    ``sandbox_params`` (schema defaults when None). Never raises: a failure is the folder's refusal."""
    rep = FolderReport(path=str(folder))
    try:
        _check(folder, rep, trusted, timeout_s, sandbox_params, task_actions)
    except Exception as e:  # noqa: BLE001 - one folder's failure never ends a run over many
        running = next((c for c in CHECKS if rep.checks[c] == "skip"), CHECKS[-1])
        rep._set(running, [f"{folder}: {type(e).__name__}: {' '.join(str(e).split())[:300]}"])
    return rep


def _check(folder: Path, rep: FolderReport, trusted: Sequence[Path], timeout_s: float,
           sandbox_params: SandboxParams | None, task_actions: Sequence[str] | None = None) -> None:
    generated = folder.parent.name == GENERATED_DIR
    rep._set("agent_skills", _agent_skills(folder))
    spec, errs = _schema_errors(folder, generated)
    rep._set("hasp", errs)
    if spec is None:
        return
    rep.skill_id = spec.skill_id
    if spec.pf is not None:
        _check_declared(folder, spec, rep, task_actions)
        return
    if not present(folder / "pf.py"):
        return  # a prompt-only skill: nothing to load or run
    ex = _exec_report(folder, spec, trusted, rep, timeout_s, sandbox_params, task_actions)
    if ex is not None:
        rep._set("exec", [] if ex.passed else ex.errors or [f"Q_exec {ex.q_exec}"])
