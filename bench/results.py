"""The results file the bench scripts write (``bench/RESULTS.md``), one section per script.

Why: a figure in the README must come from a run, with the command that produced it and when.
Each bench script prints its lines through a ``Report`` and, at the end, replaces its own section
of the results file with them, stamped with the command line, the date (UTC), the provenance (commit
and uncommitted changes, the lock file's hash, the ML package versions; ``hasp.provenance``) and the
machine. Other sections are left as they are, so the file always holds the latest run of each.
"""

from __future__ import annotations

import os
import platform
import re
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADER = ("# Measured results\n\nWritten by the scripts under `bench/`: each section is the latest run of one script, "
          "with its command, date, provenance (commit, lock file, package versions) and machine. Re-run a command "
          "to replace its section.\n")


def _provenance() -> str:
    """Commit (and uncommitted changes), lock file hash and package versions of this checkout."""
    root = str(RESULTS.parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    from hasp.provenance import provenance

    return provenance().environment()


def _machine() -> str:
    return f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}"


class Report:
    """Collects what a bench script prints and writes it as its section of the results file."""

    def __init__(self, section: str, *, note: str | None = None, markdown: bool = False) -> None:
        self.section = section
        # markdown=True: the lines are markdown (tables, headings) and go in as is; otherwise they are
        # console text and go in a code block, so their columns keep their alignment
        self.markdown = markdown
        # what else was running on the machine: set HASP_BENCH_NOTE for the run
        self.note = note if note is not None else os.environ.get("HASP_BENCH_NOTE", "")
        self.lines: list[str] = []

    def line(self, *parts: object, sep: str = " ") -> None:
        """Print like ``print`` and keep the line for the results file."""
        text = sep.join(str(p) for p in parts)
        print(text, flush=True)
        self.lines.extend(text.split("\n"))

    def write(self, path: Path = RESULTS) -> Path:
        command = "python " + " ".join([os.path.relpath(sys.argv[0], RESULTS.parent.parent), *sys.argv[1:]])
        body = [f"## {self.section}", "",
                f"- command: `{command}`",
                f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
                f"- provenance: {_provenance()}",
                f"- machine: {_machine()}"]
        if self.note:
            body.append(f"- note: {self.note}")
        body += ["", *self.lines, ""] if self.markdown else ["", "```", *self.lines, "```", ""]
        write_section(path, self.section, "\n".join(body))
        print(f"results written to {path} (section '{self.section}')", flush=True)
        return path


def write_section(path: Path, section: str, text: str) -> None:
    """Replace (or append) the ``## section`` block of the results file."""
    old = path.read_text(encoding="utf-8") if path.exists() else HEADER
    pattern = re.compile(rf"^## {re.escape(section)}\n.*?(?=^## |\Z)", re.S | re.M)
    block = text.rstrip("\n") + "\n\n"
    new = pattern.sub(lambda _: block, old, count=1) if pattern.search(old) else old.rstrip("\n") + "\n\n" + block
    tmp = path.with_suffix(".tmp")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, path)
