"""``hasp eval``: agent variants on search, math or code datasets, with MLflow runs, traces and plots.

One path for every domain, also used by the epoch's evaluation stage. Modules: ``datasets``
(dataset specs → items, plus a retriever for search), ``episodes`` (the episode function of each
domain), ``runner`` (cells of dataset × variant), ``summary`` (the metrics of one cell),
``judge`` (LLM-judge verdicts), ``tracking`` (the MLflow run shape), ``report`` (the comparison
table) and ``cli`` (the command).
"""
