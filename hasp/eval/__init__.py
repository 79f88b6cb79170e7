"""``hasp eval``: any agent variant on any search dataset, with MLflow runs, traces and plots.

Modules: ``datasets`` (dataset specs → questions + retriever), ``judge`` (LLM-judge verdicts),
``runner`` (episodes per dataset × variant), ``summary`` (metrics of one cell), ``cli`` (the
command). Logging to MLflow lives in ``hasp.track.eval_runs``.
"""
