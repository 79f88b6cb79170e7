"""Where the shipped seed skill libraries live: inside the package (``hasp/skills/<domain>/``).

Why here: an installed ``hasp`` must have its seeds wherever it is installed, and every command's
default library, the trust check of seed code (``hasp.pf.trust``) and the DVC layout must name the
same folder. This module imports nothing, so the CLI's option defaults can use it without slowing
``hasp --help``.
"""

from __future__ import annotations

from pathlib import Path

#: the seed libraries, one folder per built-in domain (search, math, code)
SEED_LIBRARIES = Path(__file__).resolve().parent / "skills"


def seed_library(domain: str = "search") -> Path:
    """The shipped seed library of ``domain``."""
    return SEED_LIBRARIES / domain
