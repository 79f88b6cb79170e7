"""``python -m hasp.cli``: the same command line as the ``hasp`` script."""

import sys

from hasp.cli import main

sys.exit(main())
