"""``hasp eval``: agent variants on search, math or code datasets, with MLflow runs, traces and plots.

One path for every domain, also used by the epoch's evaluation stage. Modules: ``datasets``
(dataset specs → items, plus a retriever for search), ``runner`` (cells of dataset × variant, each
one episode spec of ``hasp.episode``), ``summary`` (the metrics of one cell), ``tracking`` (the MLflow
run shape), ``report`` (the comparison table), ``chain_metrics`` (SAGE's metrics over chains of
similar tasks) and ``cli`` (the command).
"""
