"""Task domains (search, math, code): environments, tools, datasets and metrics.

Each domain is a subpackage so importing one never pulls in another's dependencies."""
