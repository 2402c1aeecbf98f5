"""`python -m bench`: run the benchmarks and print their figures."""

import sys

from bench.cli import main

sys.exit(main())
