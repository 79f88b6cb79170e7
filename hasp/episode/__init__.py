"""The episode recipe every caller runs: one picklable ``EpisodeSpec`` per (domain, variant, label).

Phase A, the val gate, evaluation cells, the RS/OPD sampler and sequential evolution build their
episodes from an ``EpisodeSpec`` made by ``episode_spec`` (``hasp.episode.spec``) and run them with
``run_episodes``: on threads in this process with live clients, or in worker processes of a task
runner, which rebuild the same episode function from the spec. A domain is a type
(``hasp.episode.domains``) carrying its items, its environment and its scorer.
"""
