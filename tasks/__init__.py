"""Prefect tasks: thin wrappers over ``hasp.evolve.epoch`` with content-hash cache keys."""
