"""The sandboxed child's entry point: ``python -I -B .../hasp/sandbox/child.py DRIVER``.

It reads one JSON line from stdin (``{"lockdown": ..., "job": ...}``), imports
the driver module named by its dotted path, lets it prepare (``prepare(job)``:
import and build everything it will need while the filesystem is still
reachable), locks the process down (``hasp.sandbox.lockdown.apply``) and only
then calls the runner ``prepare`` returned with the achieved protections. The
order is fixed here so that no driver can reach untrusted code before the
lockdown. Run by path (not ``-m``) so the child imports the same tree as the host;
it and the modules it imports stay light, since every program run pays their import.
"""

from __future__ import annotations

import importlib
import json
import os
import sys

if __package__ in (None, ""):  # run by path under -I: make this tree importable, nothing else
    _here = os.path.dirname(os.path.realpath(__file__))
    sys.path[:] = [p for p in sys.path if p != _here]
    sys.path.insert(0, os.path.dirname(os.path.dirname(_here)))

from hasp.sandbox import lockdown  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.stderr.write("usage: child.py DRIVER_MODULE\n")
        return 2
    driver = importlib.import_module(argv[0])
    setup = json.loads(sys.stdin.buffer.readline())
    run = driver.prepare(setup["job"])
    spec = setup["lockdown"]
    protections = lockdown.apply(spec)
    missing = lockdown.missing_layers(spec, protections)
    if missing:
        if not spec.get("allow_weaker"):  # fail closed: nothing untrusted runs
            os.write(2, (lockdown.refusal_line(missing) + "\n").encode())
            os._exit(lockdown.REFUSED_EXIT)
        protections["weaker"] = missing
    return int(run(protections) or 0)


if __name__ == "__main__":
    sys.exit(main())
