"""`python -m bench.compare`: the short path of `python -m bench.tools.compare` (regression verdicts)."""
import sys

from bench.tools.compare import main

if __name__ == "__main__":
    sys.exit(main())
