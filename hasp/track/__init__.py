"""MLflow helpers: one place that knows the tracking URI, runs, metrics and artifacts."""
