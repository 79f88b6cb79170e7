"""HASP: harness LLM agents with executable Program Functions (PFs).

The package is importable and testable without Prefect; orchestration lives in
``hasp.tasks`` and ``hasp.flows`` (the repository's ``tasks/`` and ``flows/`` folders), which only
the CLI imports. The front door for user code is ``hasp.api``.
"""

__version__ = "0.1.0"
