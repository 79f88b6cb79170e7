"""The one agent loop over its environments (search ReAct, single-step math and code) and the harness that lets PFs step in."""
