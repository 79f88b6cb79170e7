"""Prefect flows: the evolution epoch (and, later, experiments and evaluation)."""
