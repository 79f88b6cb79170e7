"""HASP: harness LLM agents with executable Program Functions (PFs).

The package is importable and testable without Prefect; orchestration lives in
the top-level ``tasks/`` and ``flows/`` packages.
"""

__version__ = "0.1.0"
