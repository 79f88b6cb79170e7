"""The ReAct agent loop and the harness that lets PFs step in."""
