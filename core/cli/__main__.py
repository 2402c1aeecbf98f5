"""`python -m core.cli`: the same as the `jobdeck` command."""

import sys

from core.cli.main import main

sys.exit(main())
