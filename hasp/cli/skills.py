"""``hasp skills ...``: look into a skill library — list, show, diff versions, prompt-equivalence.

Everything here reads files; PF code is parsed (``hasp.pf.pf_source``,
``hasp.pf.equivalence``), never executed for display, so generated skills can be
inspected without starting their sandbox. Heavy imports stay inside the commands
so ``hasp --help`` stays fast.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from hasp.console import console, safe
from hasp.seeds import seed_library

skills_app = typer.Typer(help="The skill library: list, show, diff versions, prompt-equivalence, validate; "
                              "publish, log and roll back released versions of a served library.",
                         no_args_is_help=True)

LibraryOpt = Annotated[Path, typer.Option("--library", help="Skill library folder (default: the seed library).")]
Version = tuple[int, Path, bool]  # (version, folder, generated)


def _fail(msg: str) -> None:
    typer.echo(f"error: {safe(msg, one_line=True)}", err=True)
    raise typer.Exit(2)


def _versions(library: Path, skill_id: str) -> list[Version]:
    from hasp.pf.library import scan_versions

    if not library.is_dir():
        _fail(f"no skill library at {library}")
    found = sorted(scan_versions(library).get(skill_id, []), key=lambda t: (t[0], t[2]))
    if not found:
        _fail(f"no skill {skill_id!r} in {library}")
    return found


def _pick(versions: list[Version], number: int | None, *, prefer_generated: bool = True) -> Version:
    """The version numbered ``number`` (None = the active one); seed vs generated ties by preference."""
    if number is None:
        return max(versions, key=lambda t: (t[0], t[2]))
    same = [v for v in versions if v[0] == number]
    if not same:
        _fail(f"no version {number}; available: {', '.join(_label(v) for v in versions)}")
    return max(same, key=lambda t: t[2] == prefer_generated)


def _label(v: Version) -> str:
    return f"v{v[0]} ({'generated' if v[2] else 'seed'})"


def _read(path: Path) -> str:
    """A skill folder file as text ("" when absent); a refused file (``folder_files``) is one error line."""
    from hasp.pf.folder_files import SkillFormatError, present, read_text

    if not present(path):
        return ""
    try:
        return read_text(path)
    except SkillFormatError as e:
        _fail(str(e))
        raise  # unreachable: _fail exits


def _declaration(folder: Path) -> Any:
    """The skill's declared PF (None when it has none or its files do not load)."""
    from hasp.pf.skill_md import SkillFormatError, load_skill

    try:
        return load_skill(folder).pf
    except SkillFormatError:
        return None


def _pf_facts(folder: Path, skill_id: str) -> dict[str, Any]:
    """handler kind / teacher / watched action types / A+B of a skill folder's pf.py, from its source."""
    from hasp.pf.base import watched_types
    from hasp.pf.equivalence import analyse_source, only_modifies
    from hasp.pf.folder_files import present, read_text
    from hasp.pf.pf_source import pf_attrs

    pf_path = folder / "pf.py"
    decl = _declaration(folder)
    if decl is not None:
        from hasp.pf.equivalence import analyse_declaration

        rep = analyse_declaration(decl, skill_id)
        return {"handler": "code" if decl.vote else "-", "teacher": "-", "watches": ",".join(sorted(decl.watches)),
                "rewrite_only": "yes" if decl.rewrite is not None else "-",
                "ab": "A+B" if rep.prompt_equivalent else "-", "reasons": rep.reasons}
    if not present(pf_path):
        return {"handler": "-", "teacher": "-", "watches": "-", "rewrite_only": "-", "ab": "no pf",
                "reasons": ["no pf.py"]}
    try:
        source = read_text(pf_path)
        attrs = pf_attrs(source, skill_id)
    except (SyntaxError, LookupError, ValueError, RecursionError) as e:
        return {"handler": "?", "teacher": "?", "watches": "?", "rewrite_only": "?", "ab": "?", "reasons": [str(e)]}
    rep = analyse_source(source, skill_id, str(pf_path))
    try:
        w = watched_types(attrs.get("watches"))
        watches = ",".join(sorted(w)) if w is not None else "all"
    except ValueError:
        watches = "?"
    return {"handler": attrs.get("handler_kind") or "-", "teacher": "yes" if attrs.get("needs_teacher") else "-",
            "watches": watches, "rewrite_only": "yes" if only_modifies(source, skill_id) else "-",
            "ab": "A+B" if rep.prompt_equivalent else "-", "reasons": rep.reasons}


def _cell(text: object, limit: int) -> str:
    """A table cell of untrusted text: terminal-safe, one line, markup escaped."""
    from rich.markup import escape

    return escape(safe(text, one_line=True, limit=limit))


def _source(s: Any) -> str:
    """generated (admitted by evolution), seed (a shipped seed folder, or a byte-identical copy of
    one, as the trust check sees it) or user (anything else, edited seeds included)."""
    from hasp.pf.folder_files import read_bytes
    from hasp.seeds import SEED_LIBRARIES

    if s.generated:
        return "generated"

    def files(folder: Path) -> list[bytes | None]:
        out: list[bytes | None] = []
        for name in ("SKILL.md", "hasp.yaml", "pf.py"):
            try:
                out.append(read_bytes(folder / name) if (folder / name).exists() else None)
            except Exception:  # noqa: BLE001 - an unreadable file makes the folder not a seed's
                out.append(b"<unreadable>")
        return out

    here = files(s.path)
    seeds = [d / s.path.name for d in sorted(SEED_LIBRARIES.iterdir()) if (d / s.path.name).is_dir()]
    return "seed" if any(files(d) == here for d in seeds) else "user"


@skills_app.command("list")
def skills_list(library: LibraryOpt = seed_library("search")) -> None:
    """Active skills (highest version of each): version, priority, source, handler, teacher, watched actions, A+B."""
    from rich.markup import escape
    from rich.table import Table

    from hasp.pf.library import load_library

    lib = load_library(library)
    try:
        t = Table(title=escape(safe(f"{library} ({len(lib.skills)} active)", one_line=True)))
        for col in ("skill", "version", "priority", "source", "handler", "teacher", "watches", "A+B", "description"):
            t.add_column(col, no_wrap=col != "description")
        for s in lib.skills:
            f = _pf_facts(s.path, s.skill_id)
            t.add_row(s.skill_id, f"v{s.version}", f"{s.spec.priority:.2f}", _source(s),
                      *(_cell(f[k], 40) for k in ("handler", "teacher", "watches", "ab")),
                      _cell(s.spec.description, 70))
        console().print(t)
        for e in lib.load_errors:
            typer.echo(f"error: {safe(e, one_line=True)}", err=True)
    finally:
        lib.close()


@skills_app.command("show")
def skills_show(skill_id: str,
                version: Annotated[Optional[int],
                                   typer.Option("--version", help="Version number (default: active).")] = None,
                library: LibraryOpt = seed_library("search")) -> None:
    """One skill version: SKILL.md frontmatter, hasp.yaml, body and PF source."""
    from rich.markup import escape
    from rich.panel import Panel
    from rich.syntax import Syntax
    from rich.text import Text

    from hasp.pf.skill_md import HASP_FILE, SKILL_FILE, SkillFormatError, load_skill, split_frontmatter

    v = _pick(_versions(library, skill_id), version)
    folder = v[1]
    try:
        load_skill(folder)  # validates; the raw files are shown as written
    except SkillFormatError as e:
        _fail(str(e))
    md_text = _read(folder / SKILL_FILE)
    _, body = split_frontmatter(md_text, str(folder / SKILL_FILE))
    facts = _pf_facts(folder, skill_id)
    con = console()
    con.rule(escape(safe(f"{skill_id} {_label(v)} — {folder}", one_line=True)))
    con.print(safe(f"handler: {facts['handler']}   teacher: {facts['teacher']}   watches: {facts['watches']}   "
                   f"rewrite-only: {facts['rewrite_only']}   prompt-equivalent: {facts['ab']}", one_line=True),
              markup=False)
    for r in facts["reasons"]:
        con.print(f"  not A+B: {safe(r, one_line=True)}", markup=False)
    con.print(Panel(Syntax(safe(md_text.split("---", 2)[1].strip()), "yaml"), title=f"{SKILL_FILE} frontmatter"))
    con.print(Panel(Syntax(safe(_read(folder / HASP_FILE).strip()), "yaml"), title=HASP_FILE))
    con.print(Panel(Text(safe(body)), title="SKILL.md body"))
    decl = _declaration(folder)
    if decl is not None:
        from hasp.pf.declared import compile_declaration

        try:
            compiled = compile_declaration(skill_id, decl, f"{folder}/{HASP_FILE}: pf").compiled()
        except SkillFormatError as e:
            _fail(str(e))
        con.print(Panel(Syntax(safe(compiled), "python"), title="declared PF (hasp.yaml pf:), compiled"))
        return
    source = _read(folder / "pf.py")
    con.print(Panel(Syntax(safe(source), "python", line_numbers=True) if source else "(no pf.py: prompt-only skill)",
                    title="pf.py"))


@skills_app.command("diff")
def skills_diff(skill_id: str,
                from_: Annotated[Optional[int], typer.Option("--from", help="Old version (default: lowest).")] = None,
                to: Annotated[Optional[int], typer.Option("--to", help="New version (default: active).")] = None,
                library: LibraryOpt = seed_library("search")) -> None:
    """Unified diff of SKILL.md, hasp.yaml and pf.py between two versions (e.g. seed v1 vs generated -v2)."""
    from rich.syntax import Syntax

    versions = _versions(library, skill_id)
    old = _pick(versions, from_ if from_ is not None else versions[0][0], prefer_generated=False)
    new = _pick(versions, to)
    if old[1] == new[1]:
        _fail(f"both sides are {_label(old)}; available: {', '.join(_label(v) for v in versions)}")
    con = console()
    for name in ("SKILL.md", "hasp.yaml", "pf.py"):
        a, b = _read(old[1] / name), _read(new[1] / name)
        diff = "".join(difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True),
                                            fromfile=f"{skill_id} {_label(old)}/{name}",
                                            tofile=f"{skill_id} {_label(new)}/{name}"))
        if diff:
            con.print(Syntax(safe(diff), "diff", word_wrap=False))
        else:
            con.print(f"{name}: no changes", markup=False)


@skills_app.command("equivalence")
def skills_equivalence(library: LibraryOpt = seed_library("search"),
                       as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False
                       ) -> None:
    """Prompt-equivalence (A+B, App. B.5) of every active skill, with the reasons and the count."""
    import json

    from rich.table import Table

    from hasp.pf.equivalence import analyse_library

    if not library.is_dir():
        _fail(f"no skill library at {library}")
    reports = analyse_library(library)
    n_ab = sum(r.prompt_equivalent for r in reports)
    if as_json:
        typer.echo(json.dumps({"library": str(library), "prompt_equivalent": n_ab, "total": len(reports),
                               "skills": [{"skill_id": r.skill_id, "a": r.a, "b": r.b, "types": r.types,
                                           "prompt_equivalent": r.prompt_equivalent, "reasons": r.reasons}
                                          for r in reports]}, indent=1))
        return
    t = Table(title=f"Prompt-equivalence (A+B) in {library}")
    for col in ("skill", "A", "B", "A+B", "types", "why not"):
        t.add_column(col, no_wrap=col != "why not")
    for r in reports:
        t.add_row(r.skill_id, "yes" if r.a else "no", "yes" if r.b else "no", "A+B" if r.prompt_equivalent else "-",
                  _cell(",".join(r.types) or "-", 80), _cell("; ".join(r.reasons) or "-", 400))
    con = console()
    con.print(t)
    con.print(f"{n_ab} of {len(reports)} skills are prompt-equivalent (A+B)", markup=False)


@skills_app.command("validate")
def skills_validate(
        paths: Annotated[Optional[list[Path]], typer.Argument(
            help="Skill folders, or libraries (every skill folder in them).")] = None,
        trusted: Annotated[Optional[list[Path]], typer.Option(
            "--trusted", help="A skill folder or library to validate with its pf.py imported in-process, "
            "not sandboxed (repeatable). Its code runs with your rights: only for code you would run "
            "yourself. Every other pf.py runs in the sandbox unless it is the package's own seed code.")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
        timeout: Annotated[float, typer.Option(help="Seconds for one sandboxed validation.")] = 10.0,
        params: Annotated[Optional[Path], typer.Option(
            "--params", help="params file whose sandbox: section the sandboxed runs use "
            "(default: ./params.yaml when there is one, else the built-in defaults).")] = None,
        domain: Annotated[Optional[str], typer.Option(
            help="Your own task as pkg.module:attr: its tools are the actions the PFs may rewrite to.")] = None,
) -> None:
    """Check skill folders: Agent Skills rules, HASP's schema, PF load and execution; exit 1 if any fails."""
    import json

    from rich.table import Table

    from hasp.cli.params import params_or_exit
    from hasp.evolve.skill_check import CHECKS, check_folder, skill_folders

    trusted = list(trusted or [])
    paths = [*(paths or []), *trusted]
    if not paths:
        _fail("name at least one skill folder or library (or one with --trusted)")
    for t in trusted:
        typer.echo(f"warning: {t} is trusted: its pf.py code runs in this process, unsandboxed, "
                   "with your rights", err=True)
    sb = params_or_exit(params).sandbox
    folders = list(dict.fromkeys(f for p in paths for f in skill_folders(p)))
    actions = None
    if domain is not None:
        from hasp.episode.task import TaskError, as_domain, load_task

        try:
            actions = as_domain(load_task(domain)).action_types
        except TaskError as e:
            _fail(str(e))
    reports = [check_folder(f, trusted=trusted, timeout_s=timeout, sandbox_params=sb, task_actions=actions)
               for f in folders]
    n_ok = sum(r.ok for r in reports)
    if as_json:
        typer.echo(json.dumps({"ok": n_ok, "total": len(reports), "folders": [r.to_dict() for r in reports]},
                              indent=1))
    else:
        t = Table(title="Skill folders")
        for col in ("folder", "skill", *CHECKS, "mode", "errors"):
            t.add_column(col, no_wrap=col != "errors")
        for r in reports:  # everything from a folder is text, never markup
            t.add_row(_cell(r.path, 200), _cell(r.skill_id or "-", 80), *(r.checks[c] for c in CHECKS), r.mode,
                      _cell("; ".join(r.errors) or "-", 2000))
        con = console()
        con.print(t)
        con.print(f"{n_ok} of {len(reports)} skill folders pass", markup=False)
    for r in reports:  # a weaker run never passes unnoticed (under --json: in the JSON and on stderr)
        if r.weaker:
            typer.echo(f"warning: {safe(r.path, one_line=True)} ran in the weaker sandbox mode (sandbox.allow_weaker); "
                       f"missing: {'; '.join(r.weaker)}", err=as_json)
    if n_ok < len(reports):
        raise typer.Exit(1)
