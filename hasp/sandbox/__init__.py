"""Isolation for untrusted code: generated PFs and programs under test.

One package starts every sandboxed child (``spawn``), runs the child's
bootstrap (``child``), talks to long-lived children (``worker``), locks each
child down (``lockdown``: namespaces, rlimits, uid, Landlock) with one seccomp
builder (``seccomp``), and runs programs under test (``program`` on the host;
``program_solution`` runs the program and ``program_driver`` its tests, in two children
that talk through ``program_wire``). The PF side (``hasp.pf.sandboxed``) brings
its own driver. The package imports nothing from the project but the core
modules, and this file imports nothing at all, so a child starts with a bare
interpreter and the modules it needs.
"""
